"""``POST /evaluate``: NDCG, ERR, P@k, MAP under one or all ten tools' conventions.

Each query brings its labels and either scores, a ranking of its docids (best first), or its
documents' features, which ``model`` scores first. A LETOR text body (labels from the file) is
scored by ``model`` (query parameter). Values come from ``tunemix.core.evaluation.evaluate``: the
tool's mean, per-query values on request (``null`` where the tool has none), ``derived`` flags
for measures the tool itself lacks, and its warnings. The answer's size is bounded from the
checked request before any scoring or evaluation (``tunemix.service.answer_size``: 413 past
``TUNEMIX_MAX_ANSWER_BYTES``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import msgspec
import numpy as np
import numpy.typing as npt
from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from tunemix.core.deadline import check_deadline
from tunemix.core.evaluation import CONVENTION_NAMES, EvaluationInputError, Measure, evaluate
from tunemix.service.answer_size import check_evaluate_answer
from tunemix.service.body import body_kind, read_body
from tunemix.service.deadlines import start_deadline
from tunemix.service.deps import HoldDep, MetricsDep, RegistryDep, SettingsDep, json_response, resolve_model
from tunemix.service.errors import input_error, query_label, too_large
from tunemix.service.json_body import check_number_lengths, check_repeated_keys, decode_json
from tunemix.service.lanes import python_work, scoring
from tunemix.service.letor import letor_lists
from tunemix.service.openapi import msgspec_body_spec
from tunemix.service.parsing import candidate_rows, check_ids, check_limits
from tunemix.service.rank_body import Document, Id
from tunemix.service.registry import ModelRegistry, ServedModel
from tunemix.service.routers.rank import ERRORS
from tunemix.service.schemas import EvaluateResponse
from tunemix.service.settings import Settings

router = APIRouter(tags=["evaluation"])

CONVENTIONS = (*CONVENTION_NAMES, "all")


# ---------------------------------------------------------------------------- the body's types
class EvalQuery(msgspec.Struct, forbid_unknown_fields=True):
    """Labels with ``scores``, or with a ``ranking`` of ``docids`` best first, or with
    features (``documents`` / ``features``) scored by ``model`` first."""

    qid: Id
    labels: list[int]
    scores: list[float] | None = None
    docids: list[Id] | None = None
    #: docids best first: all, or the top of a truncated run (trec and ranx count the rest unretrieved)
    ranking: Annotated[list[Id], msgspec.Meta(
        description="docids best first: all of them, or the top of a truncated run (trec and ranx count the rest "
                    "unretrieved)")] | None = None
    #: with ``model``: documents to score (labels in order)
    documents: Annotated[list[Document], msgspec.Meta(description="with `model`: documents to score (labels in "
                                                                  "order)")] | None = None
    #: with ``model``: columnar features (``null``: a missing value)
    features: Annotated[list[list[float | None]], msgspec.Meta(
        description="with `model`: columnar features (null: a missing value)")] | None = None


Convention = Literal["letor3", "letor4", "mslr", "yahoo", "ranklib", "trec", "lightgbm", "xgboost", "sklearn", "ranx",
                     "all"]


class EvaluateRequest(msgspec.Struct, forbid_unknown_fields=True):
    """The /evaluate JSON body."""

    queries: Annotated[list[EvalQuery], msgspec.Meta(min_length=1)]
    metrics: Annotated[list[str], msgspec.Meta(
        min_length=1, description="ndcg@k, dcg@k, err, err@k, err@k:top=L, p@k, map, meanndcg")] = msgspec.field(
        default_factory=lambda: ["ndcg@10"])
    convention: Convention = "yahoo"
    #: also return every query's values
    per_query: bool = False
    #: score posted features with this model first
    model: str | None = None
    version: str | None = None


def example(n_features: int | None) -> dict[str, Any]:
    """An /evaluate body: one query with scores, one with a ranking of its docids."""
    return {"queries": [{"qid": "a", "labels": [2, 0, 1], "scores": [0.9, 0.8, 0.3]},
                        {"qid": "b", "labels": [0, 1], "docids": ["x", "y"], "ranking": ["y", "x"]}],
            "metrics": ["ndcg@10", "err"], "convention": "yahoo"}


DECODER = msgspec.json.Decoder(EvaluateRequest)

#: the largest cutoff accepted (``ndcg@k``); the kernels count ranks in 64-bit integers
MAX_CUTOFF = 2**31 - 1


@dataclass
class _Batch:
    labels: npt.NDArray[np.int64]
    offsets: npt.NDArray[np.int64]
    qids: list[str]
    docids: list[str] | None
    scores: npt.NDArray[np.float64] | None = None
    features: npt.NDArray[np.float32] | None = None
    #: the documents the queries' rankings hold (None: every judged document)
    retrieved: npt.NDArray[np.bool_] | None = None


def _measures(metrics: list[str], settings: Settings) -> list[str]:
    if len(metrics) > settings.max_metrics:
        raise too_large(f"metrics: {len(metrics)} measures; the limit is {settings.max_metrics} (TUNEMIX_MAX_METRICS): "
                        "ask for the others in another request")
    out = []
    for i, text in enumerate(metrics):
        try:
            measure = Measure.parse(text)
        except ValueError as exc:
            raise input_error(f"metrics[{i}]: {exc}") from None
        if measure.cutoff is not None and measure.cutoff > MAX_CUTOFF:
            raise input_error(f"metrics[{i}]: cutoff {measure.cutoff} in {text!r} is too large (at most {MAX_CUTOFF})")
        out.append(str(measure))
    return list(dict.fromkeys(out))


def _check_labels(labels: list[int], where: str, max_label: int) -> None:
    """Labels outside 0..max_label (even beyond 64 bits) are named here, before any array is made."""
    if labels and 0 <= min(labels) and max(labels) <= max_label:
        return
    for j, label in enumerate(labels):
        if not 0 <= label <= max_label:
            raise input_error(f"{where}: labels[{j}] = {label} is out of range; relevance labels are integers "
                              f"0..{max_label} (TUNEMIX_MAX_LABEL)")


def _check_answer_size(n_queries: int, measures: list[str], convention: str, per_query: bool,
                       settings: Settings) -> None:
    """413 when a per-query answer would hold more values than ``max_per_query_values`` (their
    bytes: ``_check_answer_bytes``)."""
    if not per_query:
        return
    conventions = len(CONVENTION_NAMES) if convention == "all" else 1
    values = n_queries * len(measures) * conventions
    if values > settings.max_per_query_values:
        raise too_large(f"per_query: {n_queries} queries x {len(measures)} measures x {conventions} convention(s) = "
                        f"{values} values; the limit is {settings.max_per_query_values} "
                        "(TUNEMIX_MAX_PER_QUERY_VALUES): ask for fewer measures or one convention, or split the "
                        "queries over several requests")


def _check_answer_bytes(qids: list[Any], measures: list[str], convention: str, per_query: bool,
                        served: ServedModel | None, settings: Settings) -> None:
    """413 when the answer may take more than ``max_answer_bytes`` (``tunemix.service.answer_size``)."""
    names = list(CONVENTION_NAMES) if convention == "all" else [convention]
    check_evaluate_answer(settings.max_answer_bytes, qids, measures, names, per_query,
                          served.name if served else None, served.version if served else None,
                          settings.max_id_length)


def _query_scores(q: EvalQuery, where: str, n: int, max_id_length: int
                  ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.bool_] | None]:
    """The query's scores in label order, and which documents its ranking holds (None: all).

    A ``ranking`` may hold some of the docids only (a truncated run, such as a TREC run of its
    top 10): the others are judged but unretrieved, which trec and ranx count and the other
    conventions refuse (``tunemix.core.evaluation.evaluate``)."""
    if q.scores is not None and q.ranking is not None:
        raise input_error(f"{where}: send scores or a ranking, not both")
    if q.scores is not None:
        if len(q.scores) != n:
            raise input_error(f"{where}: scores has {len(q.scores)} entries but labels has {n}")
        s = np.asarray(q.scores, dtype=np.float64)
        if not np.all(np.isfinite(s)):
            raise input_error(f"{where}: scores[{int(np.argmax(~np.isfinite(s)))}] is not a finite number")
        return s, None
    if q.docids is None:
        raise input_error(f"{where}: a ranking needs docids (the labels' documents, in label order)")
    if len(q.docids) != n:
        raise input_error(f"{where}: docids has {len(q.docids)} entries but labels has {n}")
    assert q.ranking is not None
    check_ids(q.ranking, where, "ranking entry", max_id_length)
    row = {str(d): i for i, d in enumerate(q.docids)}
    scores = np.zeros(n, dtype=np.float64)
    ranked = np.zeros(n, dtype=np.bool_)
    top = len(q.ranking)
    for j, d in enumerate(q.ranking):
        i = row.get(str(d))
        if i is None:
            raise input_error(f"{where}: ranking[{j}] = {str(d)!r} is not one of the query's docids; a ranking "
                              "lists judged documents (a document the judges did not see counts as not relevant "
                              "under trec_eval and ranx: add it to docids with label 0)")
        ranked[i] = True  # check_ids refused a repeated entry
        scores[i] = top - j
    return scores, None if top == n else ranked


def _json_batch(req: EvaluateRequest, served: ServedModel | None, settings: Settings) -> _Batch:
    check_limits(len(req.queries), sum(len(q.labels) for q in req.queries), settings)
    labels: list[int] = []
    sizes, qids = [], []
    docids: list[str] = []
    any_docids = False
    scores: list[npt.NDArray[np.float64]] = []
    ranked: list[npt.NDArray[np.bool_] | None] = []
    rows: list[npt.NDArray[np.float32]] = []
    for i, q in enumerate(req.queries):
        check_deadline("/evaluate: checking the queries")
        where = query_label(i, q.qid)
        n = len(q.labels)
        if n == 0:
            raise input_error(f"{where}: labels is empty; a query needs at least one judged document")
        _check_labels(q.labels, where, settings.max_label)
        has_features = q.documents is not None or q.features is not None
        has_scores = q.scores is not None or q.ranking is not None
        if has_features and has_scores:
            raise input_error(f"{where}: send scores (or a ranking) or features, not both")
        if has_features:
            if served is None:
                raise input_error(f"{where}: features need a model to score them; set \"model\"")
            r, ids = candidate_rows(q.documents, q.docids, q.features, served.n_features, where,
                                    ids_field="docids", ids_required=False)
            check_ids(ids, where, "docid", settings.max_id_length)
            if r.shape[0] != n:
                raise input_error(f"{where}: {r.shape[0]} documents but {n} labels")
            rows.append(r)
            if q.documents is not None or q.docids is not None:
                any_docids = True
            docids.extend(str(x) for x in ids)
        elif has_scores:
            if rows:
                raise input_error(f"{where}: every query must be scored the same way (features or scores)")
            if q.docids is not None:
                check_ids(q.docids, where, "docid", settings.max_id_length)
            query_scores, query_ranked = _query_scores(q, where, n, settings.max_id_length)
            scores.append(query_scores)
            ranked.append(query_ranked)
            if q.docids is not None:
                any_docids = True
                docids.extend(str(x) for x in q.docids)
            else:
                docids.extend(str(j) for j in range(n))
        else:
            raise input_error(f"{where}: no scores; send scores, docids + ranking, or documents with a model")
        if rows and scores:
            raise input_error(f"{where}: every query must be scored the same way (features or scores)")
        labels.extend(q.labels)
        sizes.append(n)
        qids.append(str(q.qid))
    check_ids([q.qid for q in req.queries], "queries", "qid", settings.max_id_length, scope="in a request")
    offsets = np.zeros(len(sizes) + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    batch = _Batch(labels=np.asarray(labels, dtype=np.int64), offsets=offsets, qids=qids,
                   docids=docids if any_docids else None)
    if rows:
        batch.features = np.ascontiguousarray(np.concatenate(rows, axis=0))
    else:
        batch.scores = np.concatenate(scores)
        if any(r is not None for r in ranked):
            batch.retrieved = np.concatenate([np.ones(len(s_), dtype=np.bool_) if r is None else r
                                              for s_, r in zip(scores, ranked, strict=True)])
    return batch


def _results(batch: _Batch, measures: list[str], convention: str, per_query: bool) -> list[dict[str, Any]]:
    names = list(CONVENTION_NAMES) if convention == "all" else [convention]
    if batch.scores is None:
        raise input_error("nothing to evaluate: the queries carry neither scores nor a model to score them")
    out = []
    for name in names:
        check_deadline(f"/evaluate: before convention {name}")
        try:
            res = evaluate(batch.labels, batch.scores, batch.offsets, measures, name,
                           docids=batch.docids, qids=batch.qids, retrieved=batch.retrieved)
        except EvaluationInputError as exc:
            if convention != "all":
                raise input_error(f"convention {name}: {exc}") from None
            out.append({"convention": name, "error": str(exc), "mean": {}, "derived": {}, "warnings": []})
            continue
        d = res.to_dict()
        if not per_query:
            d.pop("per_query")
        out.append(d)
    return out


@router.post(
    "/evaluate",
    summary="Evaluate rankings under one or all ten tools' conventions",
    response_model=EvaluateResponse,
    responses=ERRORS,  # type: ignore[arg-type]
    openapi_extra=msgspec_body_spec(EvaluateRequest, example,
                                    text="LETOR lines with labels, scored by `model` (query parameters: model, "
                                         "version, metrics, convention, per_query)"),
)
async def evaluate_endpoint(
    request: Request,
    registry: RegistryDep,
    settings: SettingsDep,
    metrics_: MetricsDep,
    hold: HoldDep,
    model: Annotated[str | None, Query(description="text bodies: the model that scores them")] = None,
    version: Annotated[str | None, Query()] = None,
    metrics: Annotated[str, Query(description="text bodies: comma-separated measures")] = "ndcg@10",
    convention: Annotated[str, Query(description="text bodies: one of the ten, or all")] = "yahoo",
    per_query: Annotated[bool, Query()] = False,
) -> Response:
    start = time.perf_counter()
    text = body_kind(request) == "text"
    body = await read_body(request, settings, hold=hold, deadline=start_deadline(request, settings))

    def parse() -> tuple[_Batch, list[str], str, bool, ServedModel | None]:
        if text:
            if convention not in (*CONVENTION_NAMES, "all"):
                raise input_error(f"convention: {convention!r} is not one of {', '.join(CONVENTION_NAMES)}, all")
            if model is None:
                raise input_error("model: a LETOR body is scored by a model; pass ?model=<name>")
            served = _get(registry, model, version)
            measures = _measures(metrics.split(","), settings)
            lists = letor_lists(body, served.n_features, settings, max_label=settings.max_label, require_labels=True)
            assert lists.labels is not None
            _check_answer_size(len(lists.qids), measures, convention, per_query, settings)
            _check_answer_bytes(lists.qids, measures, convention, per_query, served, settings)
            ids = [str(x) for x in lists.ids]
            b = _Batch(labels=lists.labels.astype(np.int64), offsets=lists.offsets,
                       qids=[str(q) for q in lists.qids], docids=ids, features=lists.features)
            return b, measures, convention, per_query, served
        req = decode_json(DECODER, body, "/evaluate", {"convention": CONVENTIONS})
        check_deadline("/evaluate: decoding")
        measures = _measures(req.metrics, settings)
        _check_answer_size(len(req.queries), measures, req.convention, req.per_query, settings)
        name = req.model or model
        chosen = _get(registry, name, req.version or version) if name else None
        batch = _json_batch(req, chosen, settings)
        check_number_lengths(body)  # a number the libraries read otherwise: refused
        check_repeated_keys(body)  # after the counts: its own pass is then small
        _check_answer_bytes(batch.qids, measures, req.convention, req.per_query, chosen, settings)
        return batch, measures, req.convention, req.per_query, chosen

    batch, measures, conv, want_per_query, served = await python_work(request, parse, body_size=len(body))
    if batch.features is not None and served is not None:
        batch.scores = await scoring(request, served.model.score, batch.features, batch.offsets)
        metrics_.count_documents(served.name, int(batch.features.shape[0]))
    results = await python_work(request, _results, batch, measures, conv, want_per_query)
    payload = {
        "results": results,
        "n_queries": len(batch.qids),
        "model": served.name if served else None,
        "version": served.version if served else None,
        "server_time_ms": round((time.perf_counter() - start) * 1e3, 3),
    }
    return json_response(payload)


def _get(registry: ModelRegistry, name: str | None, version: str | None) -> ServedModel:
    return resolve_model(registry, name, version)
