"""``POST /rank``: score posted candidate lists and rank them, best first.

The whole route, top to bottom:

1. **Read** the body (``tunemix.service.deps.read_body``): at most ``TUNEMIX_MAX_BODY_BYTES`` bytes, chunked
   or not, within ``TUNEMIX_BODY_TIMEOUT_S`` seconds (413 / 408 otherwise), counted in the
   worker's in-flight bytes until the answer (503 past ``TUNEMIX_MAX_INFLIGHT_BYTES``).
2. **Decode** it with msgspec into the typed structs below (``RankRequest``): a JSON body, or a
   LETOR/SVMlight text body (``Content-Type: text/plain``, ``tunemix.service.letor``). msgspec is the only
   thing that reads the JSON bytes; a body it refuses is a 422 naming the JSON path.
3. **Check and stack** the queries into the project's array layout (``CandidateLists``: float32
   features (n, d), int64 query offsets): the request's limits, every row of exactly the model's
   feature count, finite float32 values, canonical sparse keys, ids of bounded length and unique
   within their query. Each error is a 4xx naming the query and the field.
4. **Score** with the model's kernels (``EnsembleModel.score``), which see only arrays whose
   shapes were checked in step 3; with ``relevance`` or a threshold, also the relevance head
   (``EnsembleModel.score_and_relevance``: P(grade = k) and E[grade] per document).
5. **Rank and encode**: one stable sort per query (ties keep the posted order), lists cut at
   ``min_relevance`` / ``min_probability``, the answer encoded by msgspec.

**Explanations** (off by default; without them nothing above changes). ``"explain": k`` adds to
each returned document (each query's ``top_k``, at most ``TUNEMIX_EXPLAIN_MAX_DOCUMENTS`` per
request, else 422) its ``baseline`` and its k largest feature contributions by absolute value,
named, with ``rest`` (the other features' together): ``baseline + sum + rest == score``. A
query's ``"explain_pair": [id_a, id_b]`` adds the contributions to score(a) - score(b). They are
exact and the same on every call: each member's one-reference TreeSHAP (or closed form), carried
through the calibrators and the mix, against the query's per-feature median document; ``baseline``
is what that reference document would score in the document's place, "the rest of the list"
(``tunemix.Model.explain``, docs/method.md). A model mixed by rank fusion is explained by the whole
model's sampled Shapley values instead, within ``TUNEMIX_EXPLAIN_BUDGET`` forest rows per document.
A request that asks for explanations (read from the parsed body, never from its bytes) is scored
and explained in the explain lane (``tunemix.service.deps.explain_work``, ``TUNEMIX_EXPLAIN_CONCURRENCY``), on
one thread, under its own deadline (``TUNEMIX_EXPLAIN_TIMEOUT_S``), never on the event loop.

A small body (``TUNEMIX_INLINE_MAX_BYTES``, 96 KiB: about 110 documents of 136 features or 290
of 46) runs steps 2-5 on the event loop when no other request of the worker is scoring: a thread
hop costs more than such a request's work. (It was 64 KiB until the JSON body was parsed once:
100 MSLR documents then took 2.6 ms to parse, now 1.2.) Otherwise an idle worker runs them in one thread hop and a busy
one in two (``tunemix.service.deps``), so that decoding overlaps other requests' scoring. The same functions
run either way.

Query-wise feature views (``raw+std``, ``raw+white``) standardise each feature over the posted
list, so a document's score depends on the other documents posted with it: post the whole
candidate list of a query, not pages of it.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, cast

import msgspec
import numpy as np
import numpy.typing as npt
from fastapi import APIRouter, Request
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field

from tunemix.core.deadline import Deadline, check_deadline, current_deadline
from tunemix.core.explain.explanation import explain_pair, explain_rows
from tunemix.core.scoring.runtime import single_threaded
from tunemix.service.deadlines import start_deadline
from tunemix.service.dense_body import dense_pass
from tunemix.service.deps import (
    LARGE_BODY_BYTES,
    BodyHold,
    body_kind,
    explain_work,
    held_body,
    json_bytes_response,
    parse_and_score,
    python_work,
    query_model,
    read_body,
    resolve_model,
    score_call,
    scoring,
)
from tunemix.service.errors import ServiceError, input_error, query_label
from tunemix.service.json_body import ONE_PASS_MAX_BYTES, check_repeated_keys, decode_json, gc_paused, one_pass
from tunemix.service.letor import letor_lists
from tunemix.service.observability import Metrics
from tunemix.service.openapi import msgspec_body_spec, query_parameters
from tunemix.service.parsing import CandidateLists, candidate_rows, check_ids, check_limits
from tunemix.service.registry import ModelRegistry, NotInMemory, ServedModel
from tunemix.service.schemas import ErrorResponse, RankResponse
from tunemix.service.settings import Settings

router = APIRouter(tags=["ranking"])

#: the largest ``explain`` (contributions shown per document)
MAX_EXPLAIN = 10_000
#: contributions a pair shows when the request asks for no ``explain``
PAIR_TOP = 10

# ---------------------------------------------------------------------------- 2. the body's types
#: an id as posted: a string, or an integer within 64 bits (echoed back as given)
Id = str | Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]


class Document(msgspec.Struct, forbid_unknown_fields=True):
    """One candidate: its id and its features, dense (a list of exactly ``n_features`` numbers) or
    sparse (``{"<1-based feature id>": value}``, absent features 0, as in LETOR files)."""

    id: Id
    features: list[float] | dict[str, float]


class QueryFields(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """A query's fields besides its features (``RankQuery``'s, and the dense pass's skeleton's)."""

    qid: Id
    ids: list[Id] | None = None
    #: two ids of this query: why the first scores above (or below) the second
    explain_pair: Annotated[list[Id], msgspec.Meta(min_length=2, max_length=2)] | None = None


class RankQuery(QueryFields, forbid_unknown_fields=True):
    """One candidate list: ``documents``, or the columnar ``ids`` + ``features`` (one row per id,
    the cheaper form for long lists)."""

    documents: list[Document] | None = None
    features: list[list[float]] | None = None


def example(n_features: int | None) -> dict[str, object]:
    """A /rank body for a model of ``n_features`` features (5 before a model is loaded): a query of
    documents, one dense and one sparse, and a columnar query."""
    n = n_features or 5
    row = [round(0.1 * (j % 10), 1) for j in range(n)]
    return {
        "queries": [
            {"qid": "q1", "documents": [{"id": "d1", "features": row},
                                        {"id": "d2", "features": {"1": 0.9, str(n): 0.1}}]},
            {"qid": "q2", "ids": ["d7", "d9"], "features": [row[::-1], row]},
        ],
        "top_k": 10,
    }


class RequestFields(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """The /rank body's fields besides its queries (``RankRequest``'s, and the skeleton's)."""

    model: str | None = None
    version: str | None = None
    top_k: Annotated[int, msgspec.Meta(ge=1)] | None = None
    #: also return each document's expected grade and grade probabilities (the relevance head)
    relevance: bool = False
    #: cut each list where the expected grade falls below this
    min_relevance: Annotated[float, msgspec.Meta(ge=0)] | None = None
    #: cut each list where P(grade >= 1) falls below this
    min_probability: Annotated[float, msgspec.Meta(ge=0, le=1)] | None = None
    #: add to each returned document its baseline and its k largest feature contributions
    explain: Annotated[int, msgspec.Meta(ge=0, le=MAX_EXPLAIN)] = 0


class RankRequest(RequestFields, forbid_unknown_fields=True):
    """The /rank JSON body."""

    queries: Annotated[list[RankQuery], msgspec.Meta(min_length=1)]


# the dense pass's skeleton (tunemix.service.dense_body): the same fields and rules, each document's features
# and each columnar row kept as the value's bytes (msgspec.Raw), read by simdjson
class DenseDocument(msgspec.Struct, forbid_unknown_fields=True):
    id: Id
    features: msgspec.Raw


class DenseQuery(QueryFields, forbid_unknown_fields=True):
    documents: list[DenseDocument] | None = None
    features: list[msgspec.Raw] | None = None


class DenseRequest(RequestFields, forbid_unknown_fields=True):
    queries: Annotated[list[DenseQuery], msgspec.Meta(min_length=1)]


@dataclass(frozen=True)
class Options:
    """What a request asks of the answer besides the ranking."""

    top_k: int | None = None
    relevance: bool = False
    min_relevance: float | None = None
    min_probability: float | None = None
    explain: int = 0
    #: (query, row of a, row of b) per asked pair, rows within the stacked matrix
    pairs: tuple[tuple[int, int, int], ...] = ()

    @property
    def needs_head(self) -> bool:
        return self.relevance or self.min_relevance is not None or self.min_probability is not None

    @property
    def explains(self) -> bool:
        return self.explain > 0 or bool(self.pairs)


DECODER = msgspec.json.Decoder(RankRequest)
DENSE_DECODER = msgspec.json.Decoder(DenseRequest)


# ---------------------------------------------------------------------------- 3. checks and arrays
def rank_lists(req: RankRequest | DenseRequest, d: int, settings: Settings,
               dense: list[npt.NDArray[np.float64]] | None = None) -> CandidateLists:
    """Every query of ``req`` checked and stacked into one (n, d) float32 matrix; with ``dense``
    (the dense pass's blocks, one per query of its skeleton request) the rows are those blocks."""
    queries = cast(list[Any], req.queries)  # RankQuery or DenseQuery: the same fields
    sizes = [len(q.documents) if q.documents is not None else len(q.features or ()) for q in queries]
    check_limits(len(queries), sum(sizes), settings)
    blocks: list[npt.NDArray[np.float32]] = []
    ids: list[Any] = []
    for i, q in enumerate(queries):
        check_deadline("/rank: checking the queries")
        where = query_label(i, q.qid)
        rows, q_ids = candidate_rows(q.documents, q.ids, q.features, d, where,
                                     block=None if dense is None else dense[i])
        check_ids(q_ids, where, "id", settings.max_id_length)
        blocks.append(rows)
        ids.extend(q_ids)
    qids = [q.qid for q in queries]
    check_ids(qids, "queries", "qid", settings.max_id_length, scope="in a request")
    offsets = np.zeros(len(blocks) + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    features = blocks[0] if len(blocks) == 1 else np.concatenate(blocks, axis=0)
    return CandidateLists(features=np.ascontiguousarray(features), offsets=offsets, qids=qids, ids=ids)


def json_lists(body: bytes, registry: ModelRegistry, settings: Settings, model: str | None = None,
               version: str | None = None) -> tuple[RankRequest | DenseRequest, ServedModel, CandidateLists]:
    """A JSON body decoded, its model resolved (the body's ``model`` / ``version``, else the
    query parameters') and its queries checked and stacked: steps 2 and 3 of the route.

    A body of at most ``ONE_PASS_MAX_BYTES`` is parsed once: by the dense pass
    (``tunemix.service.dense_body.dense_pass``: no Python float per feature value) when every query's
    features are dense lists, else by the one pass (``tunemix.service.json_body.one_pass``). A body the
    passes or a check after them refuse goes through the two passes (``json_lists_two_passes``),
    which name the error as they always did: msgspec's first (a number beyond float64, which the
    one pass reads as infinity, is "out of range" at its path), then the checks', then the
    repeated key's. A valid body costs one parse; a refused one, two."""
    if len(body) <= ONE_PASS_MAX_BYTES:
        req: RankRequest | DenseRequest | None
        dense: list[npt.NDArray[np.float64]] | None = None
        if (fast := dense_pass(DENSE_DECODER, body)) is not None:
            req, dense = fast
        else:
            req = one_pass(DECODER, body)
        if req is not None:
            try:
                if req.min_relevance is not None and not math.isfinite(req.min_relevance):
                    raise input_error("min_relevance: not a finite number")  # 1e400: named by the two passes
                served = resolve_model(registry, req.model or model, req.version or version)
                return req, served, rank_lists(req, served.n_features, settings, dense)
            except ServiceError:
                pass  # named by the two passes, in their order
    return json_lists_two_passes(body, registry, settings, model, version)


def json_lists_two_passes(body: bytes, registry: ModelRegistry, settings: Settings, model: str | None = None,
                          version: str | None = None) -> tuple[RankRequest, ServedModel, CandidateLists]:
    """``json_lists`` by msgspec's decode, the counts and checks, then the repeated-key pass: for
    bodies past ``ONE_PASS_MAX_BYTES`` (the counts refuse a body before a second tree is built)
    and those the one pass refuses; the twin the tests hold the one pass to."""
    req = decode_json(DECODER, body, "/rank")
    served = resolve_model(registry, req.model or model, req.version or version)
    lists = rank_lists(req, served.n_features, settings)
    check_repeated_keys(body)  # after the counts: its own pass is then small (bench_request_cost)
    return req, served, lists


# ---------------------------------------------------------------------------- 5. ranking and the answer
class Contribution(msgspec.Struct):
    feature: str
    value: float  # the document's value of the feature
    contribution: float


class Explained(msgspec.Struct, omit_defaults=True):
    baseline: float
    contributions: list[Contribution]
    rest: float  # the other features' contributions together
    exact: bool
    standard_error: float | None = None  # sampled: the largest standard error of a contribution


class RankedDocument(msgspec.Struct, omit_defaults=True, gc=False):
    """One ranked document of the answer. Not tracked by the cyclic collector (``gc=False``: it
    holds an id, numbers, a list of numbers and an explanation, never a cycle): an answer of
    1,000 of them would otherwise start a collection of its own."""

    id: Id
    score: float
    rank: int
    relevance: float | None = None  # E[grade], when asked
    probabilities: list[float] | None = None  # P(grade = k), k = 0..K-1, when asked
    explanation: Explained | None = None  # with "explain"


class PairContribution(msgspec.Struct):
    feature: str
    value_a: float
    value_b: float
    contribution: float


class PairExplained(msgspec.Struct, omit_defaults=True):
    a: Id
    b: Id
    score_difference: float  # score(a) - score(b)
    baseline: float  # the rest of the list: baseline(a) - baseline(b), through per-query rescaling
    contributions: list[PairContribution]
    rest: float
    exact: bool
    standard_error: float | None = None


class RankedQuery(msgspec.Struct, omit_defaults=True):
    qid: Id
    n_documents: int
    ranking: list[RankedDocument]
    pair: PairExplained | None = None  # with "explain_pair"


class RankAnswer(msgspec.Struct):
    model: str
    version: str
    results: list[RankedQuery]
    server_time_ms: float


ENCODER = msgspec.json.Encoder()


def ranked(scores: npt.NDArray[np.float64], lists: CandidateLists, top_k: int | None,
           head: tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]] | None = None,
           options: Options = Options(), explained: dict[int, Explained] | None = None) -> list[RankedQuery]:
    """Each query's documents best first (a stable sort: ties keep the posted order; NaN last).
    With ``head`` (grade probabilities (n, K), expected grades (n,)): each list cut where the
    estimates fall below the thresholds (they never rise down a list, so the cut keeps a prefix
    of the ranking), and each document's relevance when ``options.relevance``."""
    out = []
    off = lists.offsets.tolist()
    ids = lists.ids
    with_relevance = head is not None and options.relevance
    for q, qid in enumerate(lists.qids):
        check_deadline("ranking the queries")
        lo, hi = off[q], off[q + 1]
        s = scores[lo:hi]
        order = np.argsort(-s, kind="stable")[:top_k]
        probs, expected = (head[0][lo:hi], head[1][lo:hi]) if head is not None else (None, None)
        if probs is not None and expected is not None:
            keep = np.ones(order.shape[0], dtype=bool)
            if options.min_relevance is not None:
                keep &= expected[order] >= options.min_relevance
            if options.min_probability is not None:
                keep &= 1.0 - probs[order, 0] >= options.min_probability
            order = order[: order.shape[0] if keep.all() else int(np.argmin(keep))]
        rows, values = order.tolist(), s[order].tolist()
        if with_relevance and probs is not None and expected is not None:
            ranking = [RankedDocument(id=ids[lo + j], score=v, rank=r, relevance=e, probabilities=p)
                       for r, (j, v, e, p) in enumerate(zip(rows, values, expected[order].tolist(),
                                                            probs[order].tolist(), strict=True), start=1)]
        else:
            ranking = [RankedDocument(id=ids[lo + j], score=v, rank=r)
                       for r, (j, v) in enumerate(zip(rows, values, strict=True), start=1)]
        if explained:
            for doc, j in zip(ranking, rows, strict=True):
                doc.explanation = explained.get(lo + j)
        out.append(RankedQuery(qid=qid, n_documents=hi - lo, ranking=ranking))
    return out


# ---------------------------------------------------------------------------- explanations
def explain_options(lists: CandidateLists, pairs: list[tuple[int, Any]], options: Options,
                    settings: Settings) -> Options:
    """``options`` with the asked pairs as rows; 422 for an unknown id or beyond the request's cap."""
    rows = []
    off = lists.offsets.tolist()
    for q, ids in pairs:
        lo, hi = off[q], off[q + 1]
        where = query_label(q, lists.qids[q])
        by_text = {str(i): lo + j for j, i in enumerate(lists.ids[lo:hi])}
        found = []
        for side, doc in zip("ab", ids, strict=True):
            if str(doc) not in by_text:
                raise input_error(f"{where}: explain_pair id {doc!r} (the pair's {side}) is not a document of "
                                  "the query")
            found.append(by_text[str(doc)])
        rows.append((q, found[0], found[1]))
    sizes = [b - a for a, b in itertools.pairwise(off)]  # Python ints: a request has few queries
    longest = max(sizes, default=0)
    top_k = longest if options.top_k is None else min(options.top_k, longest)  # top_k may exceed 64 bits
    n = (sum(min(size, top_k) for size in sizes) if options.explain else 0) + 2 * len(rows)
    if n > settings.explain_max_documents:
        raise input_error(f"explain: the request asks to explain {n} documents (each query's returned top_k, and 2 per "
                          f"explain_pair); the limit is {settings.explain_max_documents} "
                          "(TUNEMIX_EXPLAIN_MAX_DOCUMENTS): ask for a smaller top_k")
    return dataclasses.replace(options, pairs=tuple(rows)) if rows else options


def with_explanations(served: ServedModel, options: Options, settings: Settings) -> Callable[..., Any]:
    """The scoring call followed by the explanations ``options`` ask for, on one scoring pass
    (``EnsembleModel.scoring_pass``): (what ``score`` or ``score_and_relevance`` returns, the
    documents' explanation or None, the pairs' explanations). Run in the explain lane
    (``explain_work``), on one thread; the explanations run under a deadline of their own
    (``TUNEMIX_EXPLAIN_TIMEOUT_S``, within the request's) and a budget of forest rows counted as
    they are scored (``explain_row_budget``)."""
    names = served.feature_names
    budget = settings.explain_budget

    def scored_and_explained(features: np.ndarray, offsets: np.ndarray) -> tuple[Any, Any, list[Any]]:
        # one scoring pass: its scores answer the request and the explanations reuse it
        sp = served.model.scoring_pass(features, offsets, relevance=options.needs_head, whitening=True)
        scores = sp.scores
        scored = (scores, *sp.relevance) if options.needs_head and sp.relevance is not None else scores
        explanation = None
        rows = np.zeros(0, dtype=np.int64)
        if options.explain:
            rows = np.concatenate([lo + np.argsort(-scores[lo:hi], kind="stable")[: options.top_k]
                                   for lo, hi in zip(offsets[:-1].tolist(), offsets[1:].tolist(), strict=True)])
        outer = current_deadline()
        limit = explain_row_budget(offsets, rows, options.pairs, budget)
        lane = (outer.within(settings.explain_timeout_s, row_budget=limit) if outer is not None
                else Deadline.after(settings.explain_timeout_s, row_budget=limit))
        with lane.active():
            if rows.size:
                explanation = explain_rows(served.model, features, offsets, rows, budget=budget,
                                           feature_names=names, scoring=sp)
            pairs = [explain_pair(served.model, features, offsets, a, b, budget=budget, feature_names=names,
                                  scoring=sp)
                     for _, a, b in options.pairs]
        return scored, explanation, pairs

    return scored_and_explained


def explain_row_budget(offsets: npt.NDArray[np.int64], rows: npt.NDArray[np.int64],
                       pairs: tuple[tuple[int, int, int], ...], budget: int) -> int:
    """Forest rows a request's explanations may score: per explained document (each pair counts
    two) ``budget`` for its coalitions and two passes over its query's list (the posted scores and
    the members' scores the coalitions start from)."""
    off = offsets.tolist()
    explained = rows.tolist() + [r for _, a, b in pairs for r in (a, b)]
    # each explained row's query size, by bisection in Python ints (at most
    # TUNEMIX_EXPLAIN_MAX_DOCUMENTS rows: NumPy's calls cost more than the search)
    sizes = [off[q + 1] - off[q] for q in (bisect.bisect_right(off, r) - 1 for r in explained)]
    return len(explained) * budget + 2 * sum(sizes)


def _top(contributions: np.ndarray, k: int) -> list[int]:
    """The k largest non-zero contributions (zero ones are not listed)."""
    return [f for f in np.argsort(-np.abs(contributions), kind="stable")[:k].tolist() if contributions[f] != 0.0]


def explained_documents(e: Any, features: np.ndarray, k: int) -> dict[int, Explained]:
    """Each explained row's answer: baseline, its k largest contributions named, the rest (one
    sort, one gather and one sum for all the rows, then one list of each per row: a row's NumPy
    calls cost more than its ten values)."""
    c = e.contributions
    order = np.argsort(-np.abs(c), axis=1, kind="stable")[:, :k]
    top_c = np.take_along_axis(c, order, axis=1)
    keep = top_c != 0.0  # zero contributions are not listed (they sort last: a prefix is kept)
    rest = c.sum(axis=1) - np.where(keep, top_c, 0.0).sum(axis=1)
    top_x = features[e.rows[:, None], order]
    names = e.feature_names
    exact = e.exact.tolist()
    out = {}
    for j, (row, base, r, n_kept, fs, vs, cs) in enumerate(zip(
            e.rows.tolist(), e.baseline.tolist(), rest.tolist(), keep.sum(axis=1).tolist(), order.tolist(),
            top_x.tolist(), top_c.tolist(), strict=True)):
        shown = [Contribution(feature=names[f], value=v, contribution=cf)
                 for f, v, cf in zip(fs[:n_kept], vs[:n_kept], cs[:n_kept], strict=True)]
        out[row] = Explained(baseline=base, contributions=shown, rest=r, exact=exact[j],
                             standard_error=None if exact[j] else float(e.standard_error[j].max()))
    return out


def explained_pair(p: Any, lists: CandidateLists, k: int) -> PairExplained:
    c, x = p.contributions, lists.features
    top = _top(c, k)
    return PairExplained(
        a=lists.ids[p.a], b=lists.ids[p.b], score_difference=p.score_a - p.score_b, baseline=p.baseline,
        contributions=[PairContribution(feature=p.feature_names[f], value_a=float(x[p.a, f]),
                                        value_b=float(x[p.b, f]), contribution=float(c[f])) for f in top],
        rest=float(c.sum() - c[top].sum()), exact=p.exact,
        standard_error=None if p.exact else float(p.standard_error.max()))


# ---------------------------------------------------------------------------- the route
#: the error answers of the endpoints that score posted documents (/rank, /evaluate)
ERRORS = {408: {"model": ErrorResponse, "description": "the body did not arrive within TUNEMIX_BODY_TIMEOUT_S"},
          413: {"model": ErrorResponse, "description": "more bytes, queries or documents than the limits"},
          415: {"model": ErrorResponse, "description": "neither application/json nor text/plain"},
          422: {"model": ErrorResponse, "description": "the message names the query and the field"},
          503: {"model": ErrorResponse, "description": "no model loaded yet, or the model cannot be loaded; or the "
                                                        "worker holds TUNEMIX_MAX_INFLIGHT_BYTES of requests, or the "
                                                        "request waited for a thread past its deadline "
                                                        "(Retry-After)"},
          504: {"model": ErrorResponse, "description": "the work ran past the request's deadline "
                                                        "(TUNEMIX_REQUEST_TIMEOUT_S, ?timeout_s=)"}}

class RankParams(BaseModel):
    """/rank's query parameters: a text body's options; for a JSON body, the model, version and
    top_k where the body does not say them. Frozen: a request without a query string gets the one
    instance of the defaults (``tunemix.service.deps.query_model``)."""

    model_config = ConfigDict(frozen=True)

    model: str | None = Field(None, description="model name (text bodies; JSON bodies say it in the body)")
    version: str | None = Field(None, description="model version (text bodies)")
    top_k: int | None = Field(None, ge=1, description="best top_k per query (text bodies)")
    relevance: bool = Field(False, description="text bodies: also return relevance and probabilities")
    min_relevance: float | None = Field(None, ge=0, description="text bodies: cut below this expected grade")
    min_probability: float | None = Field(None, ge=0, le=1, description="text bodies: cut below this P(grade >= 1)")
    explain: int = Field(0, ge=0, le=MAX_EXPLAIN, description="text bodies: each returned document's k largest "
                                                             "feature contributions")


@router.post(
    "/rank",
    summary="Rank the candidate documents of one or many queries",
    response_model=RankResponse,
    responses=ERRORS,  # type: ignore[arg-type]
    openapi_extra={**msgspec_body_spec(RankRequest, example,
                                       text="LETOR/SVMlight lines `label qid:Q 1:v 2:v ... # docid = X` "
                                            "(labels ignored); model, version and top_k as query parameters"),
                   "parameters": query_parameters(RankParams)},
)
async def rank(request: Request) -> Response:
    """The route. Its query parameters (``RankParams``) and the application's state are read here,
    not declared as FastAPI parameters and dependencies: FastAPI resolves each declared one on
    every request (``tunemix.service.deps.query_model``)."""
    state = request.app.state
    async with held_body(request) as hold:
        return await rank_request(request, state.registry, state.settings, state.metrics, hold,
                                  query_model(request, RankParams))


#: the route above, which ``tunemix.service.rank_dispatch.RankShortcut`` calls past FastAPI's routing
ROUTE = next(r for r in router.routes if getattr(r, "path", None) == "/rank")


async def rank_request(request: Request, registry: ModelRegistry, settings: Settings, metrics: Metrics,
                       hold: BodyHold, params: RankParams) -> Response:
    """/rank's work, from reading the body to the answer."""
    model, version, top_k, explain = params.model, params.version, params.top_k, params.explain
    relevance, min_relevance, min_probability = params.relevance, params.min_relevance, params.min_probability
    start = time.perf_counter()
    kind = body_kind(request)
    body = await read_body(request, settings, hold=hold)

    def decode() -> tuple[ServedModel, CandidateLists, Options]:
        pairs: list[tuple[int, Any]] = []
        if kind == "text":
            served = resolve_model(registry, model, version)
            options = Options(top_k, relevance, min_relevance, min_probability, explain)
            lists = letor_lists(body, served.n_features, settings)
        else:
            # the collector paused until the parsed request is freed: each list of features it holds
            # is otherwise walked value by value by the collections its allocations start (two per
            # 1,000-document request, about 0.9 ms each with 136 features), and freed then anyway
            with gc_paused():
                req, served, lists = json_lists(body, registry, settings, model, version)
                options = Options(req.top_k or top_k, req.relevance, req.min_relevance, req.min_probability,
                                  req.explain)
                pairs = [(q, query.explain_pair) for q, query in enumerate(req.queries) if query.explain_pair]
                del req
        if options.explain or pairs:
            options = explain_options(lists, pairs, options, settings)
        if options.needs_head and served.model.relevance_head is None:
            raise input_error(f"relevance: model {served.name!r} {served.version} has no relevance head (trained with "
                              "[relevance] enabled = false, or before the current head existed): retrain it, or ask "
                              "for the ranking alone")
        return served, lists, options

    def score(served: ServedModel, options: Options) -> Callable[..., Any]:
        fn = served.model.score_and_relevance if options.needs_head else served.model.score
        return with_explanations(served, options, settings) if options.explains else fn

    def answer(served: ServedModel, lists: CandidateLists, options: Options, scored: Any) -> bytes:
        explained, pair_answers = None, {}
        if options.explains:
            scored, e, pairs = scored
            explained = explained_documents(e, lists.features, options.explain) if e is not None else None
            pair_answers = {q: explained_pair(p, lists, options.explain or PAIR_TOP)
                            for (q, _, _), p in zip(options.pairs, pairs, strict=True)}
        scores, head = (scored[0], (scored[1], scored[2])) if options.needs_head else (scored, None)
        results = ranked(scores, lists, options.top_k, head, options, explained)
        for q, pair in pair_answers.items():
            results[q].pair = pair
        return ENCODER.encode(RankAnswer(model=served.name, version=served.version, results=results,
                                         server_time_ms=round((time.perf_counter() - start) * 1e3, 3)))

    def whole(alone: bool) -> tuple[ServedModel, CandidateLists, Options, bytes | None]:
        """Decode, score and answer; a request that asks for explanations is only decoded (its
        scoring and explanations go to the explain lane)."""
        served, lists, options = decode()
        if options.explains:
            return served, lists, options, None
        scored = score_call(score(served, options), (lists.features, lists.offsets), alone)
        return served, lists, options, answer(served, lists, options, scored)

    def explained_answer(served: ServedModel, lists: CandidateLists, options: Options) -> bytes:
        with single_threaded():  # the lane takes one core at most
            scored = score(served, options)(lists.features, lists.offsets)
        return answer(served, lists, options, scored)

    start_deadline(request, settings)
    state = request.app.state
    content: bytes | None = None
    done: tuple[ServedModel, CandidateLists, Options, bytes | None] | None = None
    # a small body is decoded on the event loop (a thread hop costs more than its work), and
    # scored there too unless it asks for explanations: those never run on the event loop
    if len(body) <= settings.inline_max_bytes and not state.scoring_requests:
        try:
            done = whole(False)  # one thread, as when other requests score
        except NotInMemory:
            pass  # the model version must be loaded first: in a thread, below
    if done is None and len(body) <= LARGE_BODY_BYTES:
        done = await parse_and_score(request, whole)
    if done is not None:
        served, lists, options, content = done
    else:
        served, lists, options = await python_work(request, decode, body_size=len(body))
        if not options.explains:
            scored = await scoring(request, score(served, options), lists.features, lists.offsets)
            content = answer(served, lists, options, scored)
    if content is None:  # explanations: in their own lane
        content = await explain_work(request, explained_answer, served, lists, options)
    metrics.count_documents(served.name, lists.n_documents)
    return json_bytes_response(content)
