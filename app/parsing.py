"""Request bodies to the project's array layout (docs/architecture.md), with errors that name
the query and the field.

``rank_lists`` turns validated ``RankQuery`` objects into ``CandidateLists``: float32 features
(n, d), int64 query offsets, the qids and the ids as posted. ``letor_lists`` does the same for a
LETOR/SVMlight text body (labels ignored; ids from ``#docid = ...`` comments, else the line's
0-based position in its query). ``parse_json`` runs pydantic-core on the raw bytes and turns its
errors into one readable line.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt
import pydantic_core
from pydantic import BaseModel, ValidationError

from app.errors import ServiceError, input_error, plain_errors, query_label, too_large, validation_message
from app.rank_reader import FastRankBody, read_body
from app.schemas import Document, RankQuery
from training.data.svmlight import DataFormatError, parse_svmlight

M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True)
class CandidateLists:
    """Several queries' candidates: rows ``offsets[q]:offsets[q+1]`` belong to query q."""

    features: npt.NDArray[np.float32]
    offsets: npt.NDArray[np.int64]
    qids: list[Any]
    ids: list[Any]
    labels: npt.NDArray[np.int32] | None = None

    @property
    def n_documents(self) -> int:
        return int(self.features.shape[0])


def parse_json(model: type[M], body: bytes) -> M:
    """Validate ``body`` against ``model``; HTTP 422 naming the query and field on failure."""
    if not body.strip():
        raise input_error("the request body is empty; send JSON (Content-Type: application/json)")
    try:
        return model.model_validate_json(body)
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_input=False)
        context: Any = None
        if any(len(e.get("loc", ())) >= 2 and e["loc"][0] == "queries" for e in errors):
            try:
                import json

                context = json.loads(body)
            except ValueError:
                context = None
        raise ServiceError(422, validation_message(errors, context), kind="invalid_input",
                           errors=plain_errors(errors)) from None


def check_limits(n_queries: int, n_documents: int, *, max_queries: int, max_documents: int) -> None:
    if n_queries > max_queries:
        raise too_large(f"the request has {n_queries} queries; the limit is {max_queries} "
                        "(TUNEMIX_MAX_QUERIES)")
    if n_documents > max_documents:
        raise too_large(f"the request has {n_documents} documents; the limit is {max_documents} "
                        "(TUNEMIX_MAX_DOCUMENTS)")


def _dense_rows(rows: Sequence[Sequence[float]], d: int, where: str, field: str) -> npt.NDArray[np.float32]:
    for j, row in enumerate(rows):
        if len(row) != d:
            raise input_error(f"{where}: {field}[{j}] has {len(row)} features; the model takes {d}")
    return np.asarray(rows, dtype=np.float32).reshape(len(rows), d)


def _document_rows(docs: Sequence[Document], d: int, where: str) -> npt.NDArray[np.float32]:
    dense = [doc.features for doc in docs if isinstance(doc.features, list)]
    if len(dense) == len(docs):
        for j, doc in enumerate(docs):
            if len(doc.features) != d:
                raise input_error(f"{where}: documents[{j}].features has {len(doc.features)} values; "
                                  f"the model takes {d} (or send sparse {{\"<feature id>\": value}})")
        return np.asarray(dense, dtype=np.float32).reshape(len(docs), d)
    out = np.zeros((len(docs), d), dtype=np.float32)
    for j, doc in enumerate(docs):
        feats = doc.features
        if isinstance(feats, list):
            if len(feats) != d:
                raise input_error(f"{where}: documents[{j}].features has {len(feats)} values; the model takes {d}")
            out[j] = feats
            continue
        for key, value in feats.items():
            try:
                fid = int(key)
            except ValueError:
                raise input_error(f"{where}: documents[{j}].features: sparse key {key!r} is not a feature id "
                                  f"(1-based integer)") from None
            if not 1 <= fid <= d:
                raise input_error(f"{where}: documents[{j}].features: feature id {fid} is out of range "
                                  f"1..{d} (ids are 1-based, as in LETOR files)")
            out[j, fid - 1] = value
    return out


def query_rows(q: RankQuery, index: int, d: int) -> tuple[npt.NDArray[np.float32], list[Any]]:
    """One /rank query's (features (m, d), ids) from ``documents`` or columnar ``ids`` + ``features``."""
    return candidate_rows(q.documents, q.ids, q.features, d, query_label(index, q.qid))


def candidate_rows(
    documents: Sequence[Document] | None,
    ids: Sequence[Any] | None,
    features: Sequence[Sequence[float]] | None,
    d: int,
    where: str,
    *,
    ids_field: str = "ids",
    ids_required: bool = True,
) -> tuple[npt.NDArray[np.float32], list[Any]]:
    """(features (m, d), ids) of one candidate list given as documents or as columns.

    Without ``ids_required`` the columnar form may omit the ids (they become 0..m-1).
    """
    columnar = features is not None or (ids is not None and ids_required)
    if documents is not None and columnar:
        raise input_error(f"{where}: send either documents or {ids_field} + features, not both")
    if documents is not None:
        if not documents:
            raise input_error(f"{where}: documents is empty; a query needs at least one candidate")
        out_ids = [doc.id for doc in documents]
        with np.errstate(over="ignore"):  # values beyond float32 become inf: rejected below
            rows = _document_rows(documents, d, where)
    elif features is not None:
        if ids is None and ids_required:
            raise input_error(f"{where}: the columnar form needs both {ids_field} and features")
        if ids is not None and len(ids) != len(features):
            raise input_error(f"{where}: {ids_field} has {len(ids)} entries but features has {len(features)} rows")
        if not features:
            raise input_error(f"{where}: features is empty; a query needs at least one candidate")
        out_ids = list(ids) if ids is not None else list(range(len(features)))
        with np.errstate(over="ignore"):
            rows = _dense_rows(features, d, where, "features")
    elif ids is not None:
        raise input_error(f"{where}: the columnar form needs both {ids_field} and features")
    else:
        raise input_error(f"{where}: no candidates; send documents, or {ids_field} + features")
    _check_rows(rows, out_ids, where, documents is not None)
    return rows, out_ids


def _check_rows(rows: npt.NDArray[np.float32], ids: Sequence[Any], where: str, documents: bool) -> None:
    check_unique(ids, where, "id")
    bad = ~np.isfinite(rows)
    if bad.any():
        j, f = (int(v) for v in np.argwhere(bad)[0])
        field = f"documents[{j}].features" if documents else f"features[{j}]"
        raise input_error(f"{where}: {field}: feature {f + 1} is not a finite float32 number "
                          "(NaN, infinity or beyond ±3.4e38)")


_TOP_KEYS = frozenset({"queries", "model", "version", "top_k"})
_QUERY_KEYS = frozenset({"qid", "documents"})
_DOC_KEYS = frozenset({"id", "features"})


def fast_rank_body(body: bytes) -> FastRankBody | None:
    """The common /rank body (queries of ``documents`` with dense ``features``, or columnar ``ids``
    + ``features``) read without a pydantic object per document, or None for any other shape and
    for anything doubtful (a type, a key, a ragged row): the full validation (``parse_json``)
    then reads the body and names what is wrong. Accepts only what the full validation accepts,
    with the same values (numbers as floats; a bool among numbers as 1.0 or 0.0).

    ``app.rank_reader`` reads the body straight from its bytes; where it gives up (an escaped
    string, a bool among the numbers, a number it cannot round exactly, ...) pydantic-core reads
    the whole body into lists (documents form only) and numpy converts them. Measured in-process,
    interleaved over 5 rounds of 20 MQ2008 bodies of 1,000 documents (6 decimals per value),
    medians, with ``fast_rank_lists``: 2.26 against 3.49 ms for the previous reader (a numba scan
    of the feature arrays, pydantic-core for the rest) on one thread, 1.62 against 3.61 ms with
    the rows read on two; the previous reader took 2.25 against 4.87 ms for pydantic-core alone."""
    read = read_body(body)
    if read is not None:
        return read
    try:
        doc = pydantic_core.from_json(body)
    except ValueError:
        return None
    return _rank_shape(doc)


def _rank_shape(doc: Any) -> FastRankBody | None:
    """``fast_rank_body`` of a body parsed into Python objects (None: not the common shape)."""
    if type(doc) is not dict or not doc.keys() <= _TOP_KEYS:
        return None
    queries, model, version, top_k = doc.get("queries"), doc.get("model"), doc.get("version"), doc.get("top_k")
    if type(queries) is not list or not queries:
        return None
    if (model is not None and type(model) is not str) or (version is not None and type(version) is not str):
        return None
    if top_k is not None and (type(top_k) is not int or top_k < 1):
        return None
    qids: list[Any] = []
    ids: list[Any] = []
    blocks: list[npt.NDArray[np.float32]] = []
    for q in queries:
        if type(q) is not dict or q.keys() != _QUERY_KEYS or type(q["qid"]) not in (str, int):
            return None
        docs = q["documents"]
        if type(docs) is not list or not docs:
            return None
        feats = []
        for x in docs:
            if type(x) is not dict or x.keys() != _DOC_KEYS or type(x["id"]) not in (str, int):
                return None
            ids.append(x["id"])
            feats.append(x["features"])
        arr = _listed_rows(feats)
        if arr is None or (blocks and arr.shape[1] != blocks[0].shape[1]):
            return None
        qids.append(q["qid"])
        with np.errstate(over="ignore"):  # values beyond float32 become inf: rejected by the checks
            blocks.append(arr.astype(np.float32))
    offsets = np.zeros(len(blocks) + 1, dtype=np.int64)
    np.cumsum([b.shape[0] for b in blocks], out=offsets[1:])
    return FastRankBody(features=np.ascontiguousarray(np.concatenate(blocks, axis=0)), offsets=offsets, qids=qids,
                        ids=ids, model=model, version=version, top_k=top_k)


def _listed_rows(feats: list[Any]) -> npt.NDArray[Any] | None:
    """A query's rows from pydantic-core's lists (numbers only: strings, None, objects or ragged
    rows are the full validation's to explain; integers beyond 2^53 would round twice on their
    way to float32)."""
    if any(type(f) is not list for f in feats):
        return None
    try:
        arr: npt.NDArray[Any] = np.array(feats)
    except (ValueError, TypeError, OverflowError):
        return None
    if arr.ndim != 2 or arr.shape[1] == 0 or arr.dtype.kind not in "if" or (
            arr.dtype.kind == "i" and arr.size and np.abs(arr).max() > 2**53):
        return None
    return arr


def fast_rank_lists(body: FastRankBody, d: int, *, max_queries: int, max_documents: int) -> CandidateLists | None:
    """``rank_lists`` of a ``fast_rank_body``: the same limits, checks and errors; None when the
    feature count is not ``d`` (the full validation names the document)."""
    check_limits(len(body.qids), body.n_documents, max_queries=max_queries, max_documents=max_documents)
    if body.features.shape[1] != d:
        return None
    off = body.offsets.tolist()
    # the reader's values are always finite; pydantic-core's (documents form) may overflow float32
    finite = bool(np.isfinite(body.features).all())
    for i, qid in enumerate(body.qids):
        where, ids = query_label(i, qid), body.ids[off[i]:off[i + 1]]
        if finite:
            check_unique(ids, where, "id")
        else:
            _check_rows(body.features[off[i]:off[i + 1]], ids, where, True)
    return CandidateLists(features=body.features, offsets=body.offsets, qids=body.qids, ids=body.ids)


def check_unique(ids: Sequence[Any], where: str, what: str, *, scope: str = "within a query") -> None:
    """A 422 naming the first id that repeats one before it (ids compared as text: 5 and "5" are
    the same id)."""
    if len(set(ids)) == len(ids) and (all(type(i) is str for i in ids) or all(type(i) is int for i in ids)):
        return  # distinct, and of one type whose text is one-to-one
    seen: set[str] = set()
    for j, i in enumerate(ids):
        key = str(i)
        if key in seen:
            raise input_error(f"{where}: duplicate {what} {i!r} (entry {j}); each {what} may appear only once {scope}")
        seen.add(key)


def rank_lists(queries: Sequence[RankQuery], d: int, *, max_queries: int, max_documents: int) -> CandidateLists:
    """All queries of a /rank body as one feature matrix (see ``CandidateLists``)."""
    sizes = [len(q.documents) if q.documents is not None else len(q.ids or ()) for q in queries]
    check_limits(len(queries), sum(sizes), max_queries=max_queries, max_documents=max_documents)
    return _stacked([(q.qid, *query_rows(q, i, d)) for i, q in enumerate(queries)])


def _stacked(queries: Sequence[tuple[Any, npt.NDArray[np.float32], list[Any]]]) -> CandidateLists:
    """``CandidateLists`` of checked (qid, features, ids) triples, in order."""
    offsets = np.zeros(len(queries) + 1, dtype=np.int64)
    np.cumsum([rows.shape[0] for _, rows, _ in queries], out=offsets[1:])
    blocks = [rows for _, rows, _ in queries]
    features = blocks[0] if len(blocks) == 1 else np.concatenate(blocks, axis=0)
    return CandidateLists(features=np.ascontiguousarray(features), offsets=offsets, qids=[q for q, _, _ in queries],
                          ids=[i for _, _, ids in queries for i in ids])


def letor_lists(body: bytes, d: int, *, max_queries: int, max_documents: int) -> CandidateLists:
    """A LETOR/SVMlight text body (``label qid:Q id:value ... # docid = X``) as candidate lists."""
    if not body.strip():
        raise input_error("the request body is empty; send LETOR lines 'label qid:Q 1:v 2:v ...'")
    try:
        data = parse_svmlight(body, source="body", n_features=d)
    except DataFormatError as exc:
        msg = str(exc)
        if "larger than the declared" in msg or "n_features" in msg:
            msg += f" (the model takes {d} features)"
        raise input_error(msg) from None
    except ValueError as exc:  # e.g. a value that overflows float32 (1e39), or undecodable bytes
        raise input_error(f"body: {exc} (feature values must be finite float32 numbers, within ±3.4e38)") from None
    check_limits(data.n_queries, data.n_docs, max_queries=max_queries, max_documents=max_documents)
    bad = ~np.isfinite(data.features)
    if bad.any():
        row, f = (int(v) for v in np.argwhere(bad)[0])
        raise input_error(f"body:{row + 1}: feature {f + 1} is not a finite float32 number")
    off = data.query_offsets
    position = [int(x) for x in (np.arange(data.n_docs) - np.repeat(off[:-1], np.diff(off)))]
    if data.docids is not None:
        # a line without a '# docid = X' comment keeps its 0-based position in its query as its id
        ids: list[Any] = [str(x) if str(x) else position[j] for j, x in enumerate(data.docids)]
        for q in range(data.n_queries):
            check_unique(ids[off[q]:off[q + 1]], f"query {str(data.qids[q])!r}", "docid")
    else:
        ids = position
    return CandidateLists(features=data.features, offsets=off, qids=[str(q) for q in data.qids], ids=ids,
                          labels=data.labels)


def ranked(scores: npt.NDArray[np.float64], lists: CandidateLists, top_k: int | None) -> list[dict[str, Any]]:
    """Per query ``{"qid", "n_documents", "ranking": [{"id", "score", "rank"}]}``, best first
    (ties keep the posted order)."""
    out = []
    off = lists.offsets
    ids = lists.ids
    for q, qid in enumerate(lists.qids):
        lo, hi = int(off[q]), int(off[q + 1])
        s = scores[lo:hi]
        order = np.argsort(-s, kind="stable")
        if top_k is not None:
            order = order[:top_k]
        vals = s[order].tolist()
        out.append({
            "qid": qid,
            "n_documents": hi - lo,
            "ranking": [{"id": ids[lo + j], "score": v, "rank": r}
                        for r, (j, v) in enumerate(zip(order.tolist(), vals, strict=True), start=1)],
        })
    return out


__all__ = ["CandidateLists", "FastRankBody", "ServiceError", "candidate_rows", "check_limits", "fast_rank_body",
           "fast_rank_lists", "letor_lists", "parse_json", "query_rows", "rank_lists", "ranked"]
