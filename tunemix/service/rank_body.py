"""/rank's request: the msgspec structs that decode a JSON body (the only reader of its bytes; the
OpenAPI schema comes from them), the dense pass's skeleton of the same fields, the options a
request asks of its answer, and the decode paths from a body to checked candidate lists
(``json_lists``: the dense pass, the one pass, or the two passes that name a refused body's error)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any, cast

import msgspec
import numpy as np
import numpy.typing as npt

from tunemix.core.deadline import check_deadline, step_of_long_work
from tunemix.service.dense_body import dense_pass
from tunemix.service.deps import resolve_model
from tunemix.service.errors import ServiceError, input_error, query_label
from tunemix.service.json_body import (
    ONE_PASS_MAX_BYTES,
    check_number_lengths,
    check_repeated_keys,
    decode_json,
    gc_paused,
    long_run,
    one_pass,
    repeated_key,
)
from tunemix.service.parsing import CandidateLists, candidate_rows, check_ids, check_limits
from tunemix.service.registry import ModelRegistry, ServedModel
from tunemix.service.settings import Settings

#: the largest ``explain`` (contributions shown per document)
MAX_EXPLAIN = 10_000

#: an id as posted: a string, or an integer within 64 bits (echoed back as given)
Id = str | Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]


class Document(msgspec.Struct, forbid_unknown_fields=True):
    """One candidate: its id and its features, dense (a list of exactly ``n_features`` numbers) or
    sparse (``{"<1-based feature id>": value}``, absent features 0, as in LETOR files); a value
    ``null`` is missing (docs/missing-values.md)."""

    id: Id
    features: list[float | None] | dict[str, float | None]


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
    features: list[list[float | None]] | None = None


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


class SplitRequest(RequestFields, forbid_unknown_fields=True):
    """A body past ``ONE_PASS_MAX_BYTES`` split into its queries (``split_queries``): its fields as
    ``RankRequest`` types them, each query kept as its bytes (``msgspec.Raw``, a view of the body)."""

    queries: Annotated[list[msgspec.Raw], msgspec.Meta(min_length=1)]


DECODER = msgspec.json.Decoder(RankRequest)
DENSE_DECODER = msgspec.json.Decoder(DenseRequest)
SPLIT_DECODER = msgspec.json.Decoder(SplitRequest)


# ---------------------------------------------------------------------------- 3. checks and arrays
def rank_lists(req: RankRequest | DenseRequest, d: int, settings: Settings,
               dense: Sequence[npt.NDArray[np.float64] | None] | None = None) -> CandidateLists:
    """Every query of ``req`` checked and stacked into one (n, d) float32 matrix; with ``dense``
    (the dense pass's blocks, one per query of its skeleton request; None for a query it did not
    read) the rows are those blocks."""
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
    repeated key's. A valid body costs one parse; a refused one, two. A body that may hold a
    number longer than ``tunemix.service.json_body.MAX_NUMBER_CHARS`` (``long_run``), which the
    libraries would read otherwise than each other, goes to the two passes, which refuse it. A
    larger body is read a query at a time (``json_lists_by_query``)."""
    if len(body) > ONE_PASS_MAX_BYTES:
        return json_lists_by_query(body, registry, settings, model, version)
    if not long_run(body):
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


def json_lists_by_query(body: bytes, registry: ModelRegistry, settings: Settings, model: str | None = None,
                        version: str | None = None) -> tuple[RankRequest | DenseRequest, ServedModel, CandidateLists]:
    """``json_lists`` for a body past ``ONE_PASS_MAX_BYTES``, read a query at a time: the body split
    into its queries (``split_queries``), each query read by the dense pass or the one pass as a
    body of its own (``query_pass``), then the checks and the stacking of ``rank_lists``. No call
    holds the GIL for longer than one query's parse (a 3.2 MB body of 100 queries of 1,000
    documents: at most about a millisecond each, against 46 ms for msgspec's decode of the whole
    body and 53 for jiter's repeated-key pass), so requests beside it keep their latency
    (``tunemix.service.lanes.large_work``). A body of more than ``TUNEMIX_MAX_QUERIES`` queries, a
    query past ``ONE_PASS_MAX_BYTES``, and any body a step refuses go to the two passes, which
    name the error; a valid body gives the structs and the matrix the two passes give."""
    split = split_queries(body)
    if split is not None and len(split[1]) <= settings.max_queries:
        head, parts = split
        queries: list[Any] = []
        blocks: list[npt.NDArray[np.float64] | None] = []
        for part in parts:
            step_of_long_work("/rank: reading the queries")
            read = query_pass(part)
            if read is None:
                break
            queries.append(read[0])
            blocks.append(read[1])
        else:
            try:
                if head.min_relevance is not None and not math.isfinite(head.min_relevance):
                    raise input_error("min_relevance: not a finite number")
                served = resolve_model(registry, head.model or model, head.version or version)
                req = cast(RankRequest, msgspec.structs.replace(head, queries=queries))
                return req, served, rank_lists(req, served.n_features, settings, blocks)
            except ServiceError:
                pass  # named by the two passes, in their order
    return json_lists_two_passes(body, registry, settings, model, version)


def split_queries(body: bytes) -> tuple[SplitRequest, list[bytes]] | None:
    """(the body's fields, each query as a body of its own: ``{"queries":[<its bytes>]}``), or
    None for a body to leave to the two passes: one msgspec refuses as a ``SplitRequest``, or whose
    fields besides the queries hold a repeated key or a number past ``MAX_NUMBER_CHARS``. msgspec
    skips each query's value without building it and keeps it as a view of the body
    (``msgspec.Raw``); the views' places in the body give the rest of it, each query replaced by
    ``0``, which jiter checks for repeated keys. A query that is not a view of the body (never with
    msgspec 0.18 to 0.23) leaves the body to the two passes."""
    try:
        with gc_paused():
            head = SPLIT_DECODER.decode(body)
    except (msgspec.MsgspecError, RecursionError):
        return None
    start = np.frombuffer(body, dtype=np.uint8).ctypes.data
    rest: list[bytes] = []
    parts: list[bytes] = []
    at = 0
    for raw in head.queries:
        view = memoryview(raw)
        where = np.frombuffer(view, dtype=np.uint8).ctypes.data - start
        if not at <= where <= len(body) - len(view):
            return None
        rest += (body[at:where], b"0")
        parts.append(b'{"queries":[' + view + b"]}")
        at = where + len(view)
    rest.append(body[at:])
    fields = b"".join(rest)
    if long_run(fields) or repeated_key(fields):
        return None
    return head, parts


def query_pass(part: bytes) -> tuple[Any, npt.NDArray[np.float64] | None] | None:
    """One query's body (``split_queries``) read by the dense pass (the query and its block) or the
    one pass (the query; no block); None for one past ``ONE_PASS_MAX_BYTES``, one that may hold a
    number past ``MAX_NUMBER_CHARS``, or one both passes refuse."""
    if len(part) > ONE_PASS_MAX_BYTES or long_run(part):
        return None
    if (fast := dense_pass(DENSE_DECODER, part)) is not None:
        return fast[0].queries[0], fast[1][0]
    req = one_pass(DECODER, part)
    return None if req is None else (req.queries[0], None)


def json_lists_two_passes(body: bytes, registry: ModelRegistry, settings: Settings, model: str | None = None,
                          version: str | None = None) -> tuple[RankRequest, ServedModel, CandidateLists]:
    """``json_lists`` by msgspec's decode, the counts and checks, then the repeated-key pass: for
    bodies past ``ONE_PASS_MAX_BYTES`` (the counts refuse a body before a second tree is built)
    and those the one pass refuses; the twin the tests hold the one pass to."""
    req = decode_json(DECODER, body, "/rank")
    served = resolve_model(registry, req.model or model, req.version or version)
    lists = rank_lists(req, served.n_features, settings)
    check_number_lengths(body)  # after the counts, as the repeated keys: the values read are then unused
    check_repeated_keys(body)  # after the counts: its own pass is then small (bench_request_cost)
    return req, served, lists


