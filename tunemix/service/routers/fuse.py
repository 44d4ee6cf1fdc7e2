"""``POST /fuse``: fuse several systems' result lists per query (RRF, CombSUM, CombMNZ, Condorcet).

The hybrid-search case: a lexical and a dense retriever each return their own list; ids need
not be the same across systems. A system with ``scores`` is scored; one without is a ranking
(best first). Rules for documents a system did not return: ``tunemix.core.ensemble.list_fusion``.
"""

from __future__ import annotations

import itertools
import sys
import time
from typing import Annotated, Any, Literal

import msgspec
import numpy as np
import numpy.typing as npt
from fastapi import APIRouter, Request
from fastapi.responses import Response

from tunemix.core.deadline import check_deadline
from tunemix.core.ensemble.list_fusion import competition_ranks, fuse_lists
from tunemix.service.answer_size import FLOAT_CHARS, check_ranked_answer, fixed_bytes
from tunemix.service.body import body_kind, read_body
from tunemix.service.deadlines import start_deadline
from tunemix.service.deps import HoldDep, SettingsDep, json_bytes_response
from tunemix.service.errors import input_error, query_label, too_large
from tunemix.service.json_body import check_number_lengths, check_repeated_keys, decode_json
from tunemix.service.lanes import python_work
from tunemix.service.openapi import msgspec_answer_spec, msgspec_body_spec
from tunemix.service.parsing import CandidateLists, check_ids, check_limits
from tunemix.service.rank_answer import RankedQuery, described, encode_answer, ranked
from tunemix.service.rank_body import Id
from tunemix.service.schemas import ErrorResponse
from tunemix.service.settings import Settings

router = APIRouter(tags=["fusion"])

METHODS = ("rrf", "combsum", "combmnz", "condorcet")


# ---------------------------------------------------------------------------- the body's types
class FuseSystem(msgspec.Struct, forbid_unknown_fields=True):
    """One system's result list: ids with scores, or ids alone (a ranking, best first)."""

    ids: Annotated[list[Id], msgspec.Meta(min_length=1)]
    scores: list[float] | None = None


class FuseQuery(msgspec.Struct, forbid_unknown_fields=True):
    qid: Id
    systems: Annotated[list[FuseSystem], msgspec.Meta(min_length=1)]


class FuseRequest(msgspec.Struct, forbid_unknown_fields=True):
    """The /fuse JSON body."""

    queries: Annotated[list[FuseQuery], msgspec.Meta(min_length=1)]
    method: Literal["rrf", "combsum", "combmnz", "condorcet"] = "rrf"
    #: the RRF constant
    k: Annotated[float, msgspec.Meta(gt=0, le=sys.float_info.max, description="RRF constant")] = 60.0
    #: CombSUM/CombMNZ: only each system's top_k count; also cuts the returned list
    top_k: Annotated[int, msgspec.Meta(ge=1, description="CombSUM/CombMNZ: only each system's top_k count; also "
                                                         "cuts the returned list")] | None = None


def example(n_features: int | None) -> dict[str, Any]:
    """A /fuse body: a scored system and a ranking."""
    return {"queries": [{"qid": "q", "systems": [{"ids": ["a", "b", "c"], "scores": [12.1, 9.5, 3.2]},
                                                 {"ids": ["c", "a", "d"]}]}],
            "method": "rrf", "k": 60}


DECODER = msgspec.json.Decoder(FuseRequest)


def _entries(req: FuseRequest, settings: Settings) -> tuple[CandidateLists, list[npt.NDArray[np.int64]],
                                                            list[npt.NDArray[np.float64]]]:
    """The posted entries, system by system: each system's documents as indices into its query's
    distinct ids (``lists``) and its scores (a ranking scores n - position). Memory in proportion
    to the entries posted, whatever the number of systems."""
    for i, q in enumerate(req.queries):
        if len(q.systems) > settings.max_fuse_systems:
            raise too_large(f"{query_label(i, q.qid)}: {len(q.systems)} systems; the limit is "
                            f"{settings.max_fuse_systems} (TUNEMIX_MAX_FUSE_SYSTEMS)")
    check_limits(len(req.queries), sum(len(s.ids) for q in req.queries for s in q.systems), settings)
    ids: list[Any] = []
    sizes: list[int] = []
    where_docs: list[npt.NDArray[np.int64]] = []
    pairs = 0
    values: list[npt.NDArray[np.float64]] = []
    for i, q in enumerate(req.queries):
        check_deadline("/fuse: checking the queries")
        where = query_label(i, q.qid)
        index: dict[str, int] = {}
        for m, s in enumerate(q.systems):
            if len(s.ids) > settings.max_fuse_ids:
                raise too_large(f"{where}: systems[{m}] has {len(s.ids)} ids; the limit is {settings.max_fuse_ids} "
                                "(TUNEMIX_MAX_FUSE_IDS)")
            check_ids(s.ids, f"{where}: systems[{m}]", "id", settings.max_id_length)
            if s.scores is None:
                vals = np.arange(len(s.ids), 0, -1, dtype=np.float64)
            elif len(s.scores) != len(s.ids):
                raise input_error(f"{where}: systems[{m}] has {len(s.ids)} ids but {len(s.scores)} scores")
            else:
                vals = _finite_scores(s.scores, f"{where}: systems[{m}]")
            rows = []
            for d in s.ids:
                j = index.get(str(d))
                if j is None:
                    j = index[str(d)] = len(ids)
                    ids.append(d)
                rows.append(j)
            where_docs.append(np.asarray(rows, dtype=np.int64))
            values.append(vals)
        pairs += len(index) ** 2
        if req.method == "condorcet" and pairs > settings.max_condorcet_pairs:
            raise too_large(f"{where}: condorcet compares every pair of a query's documents; the queries up to "
                            f"this one have {pairs} pairs (n^2 per query, n distinct ids; this one {len(index)}), "
                            f"the limit is {settings.max_condorcet_pairs} (TUNEMIX_MAX_CONDORCET_PAIRS)")
        sizes.append(len(index))
    offsets = np.zeros(len(sizes) + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    lists = CandidateLists(features=np.zeros((len(ids), 0), np.float32), offsets=offsets,
                           qids=[q.qid for q in req.queries], ids=ids)
    return lists, where_docs, values


def _finite_scores(scores: list[float], where: str) -> npt.NDArray[np.float64]:
    vals = np.asarray(scores, dtype=np.float64)
    if not np.all(np.isfinite(vals)):
        raise input_error(f"{where}.scores[{int(np.argmax(~np.isfinite(vals)))}] is not a finite number")
    with np.errstate(over="ignore"):
        spread = np.ptp(vals)
    if not np.isfinite(spread):
        # the spread overflows float64 (e.g. -1e308 and 1e308), and min-max normalisation with it;
        # every method is invariant to scaling a system's scores by a power of two
        vals = vals * 0.25
    return vals


def applied_top_k(top_k: int | None, n_documents: int) -> int | None:
    """``top_k`` as the fusion applies it: at most the number of documents (beyond it changes
    nothing, and may not fit the kernels' 64-bit integers)."""
    return None if top_k is None else min(top_k, max(n_documents, 1))


def fuse_entries(req: FuseRequest, settings: Settings) -> tuple[CandidateLists, npt.NDArray[np.float64]]:
    """The fused score of every distinct id of every query (``tunemix.core.ensemble.list_fusion``).

    RRF, CombSUM and CombMNZ add one term per system that retrieved a document, so each system
    is fused as a list of its own (one kernel call for all of them: every system is a group of
    the offsets) and the terms are added per document in the systems' order: the same sums, to
    the bit, as the dense documents x systems matrix, without its memory. Condorcet compares
    documents pairwise (the sum of n^2 over the queries bounded by ``max_condorcet_pairs``). The
    answer's size is bounded before the fusion (413 past ``max_answer_bytes``)."""
    lists, rows, values = _entries(req, settings)
    top_k = applied_top_k(req.top_k, lists.n_documents)
    check_ranked_answer(settings.max_answer_bytes, FUSE_ENVELOPE + len(req.method) + 2, lists.offsets, lists.qids,
                        lists.ids, top_k, endpoint="/fuse", what="each query's fused list of its distinct ids",
                        hint="set a smaller top_k, or split the queries over several requests")
    fused = np.zeros(lists.n_documents, dtype=np.float64)
    if req.method == "condorcet":
        off = lists.offsets
        first = 0
        for q, query in enumerate(req.queries):
            check_deadline("/fuse: condorcet, per query")
            lo, hi = int(off[q]), int(off[q + 1])
            mat = np.full((hi - lo, len(query.systems)), np.nan)
            for m in range(len(query.systems)):
                mat[rows[first + m] - lo, m] = values[first + m]
            fused[lo:hi] = fuse_lists(mat, np.array([0, hi - lo], dtype=np.int64), "condorcet")
            first += len(query.systems)
        return lists, fused
    group = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum([r.shape[0] for r in rows], out=group[1:])
    column = np.concatenate(values)[:, None]
    method = "rrf" if req.method == "rrf" else "combsum"
    terms = fuse_lists(column, group, method, k=req.k, top_k=top_k)
    docs = np.concatenate(rows)
    np.add.at(fused, docs, terms)  # in the entries' order: system by system, as the dense sum
    if req.method == "combmnz":
        if top_k is None:
            counted = np.ones(docs.shape[0], dtype=bool)
        else:  # an entry counts when it is in its system's top_k (competition ranks, as CombSUM's)
            counted = np.concatenate([competition_ranks(column[lo:hi, 0]) <= top_k
                                      for lo, hi in itertools.pairwise(group.tolist())])
        fused *= np.bincount(docs[counted], minlength=fused.shape[0])
    return lists, fused


class FuseAnswer(msgspec.Struct):
    """The answer of POST /fuse."""

    method: Annotated[str, described("the fusion method", "rrf")]
    results: Annotated[list[RankedQuery], described("each query's fused list, best first")]
    server_time_ms: Annotated[float, described("time in the handler", 0.42)]


#: /fuse's envelope besides its method's name
FUSE_ENVELOPE = fixed_bytes(FuseAnswer(method="", results=[], server_time_ms=0.0), "", 0.0) + FLOAT_CHARS


@router.post(
    "/fuse",
    summary="Fuse several systems' rankings or scores per query",
    response_class=Response,
    responses={**msgspec_answer_spec(FuseAnswer, "each query's fused list, best first"),
               413: {"model": ErrorResponse, "description": "more bytes, queries, systems or ids than the limits, "
                                                        "or an answer that may pass TUNEMIX_MAX_ANSWER_BYTES"},
               422: {"model": ErrorResponse, "description": "the message names the query and the field"},
               503: {"model": ErrorResponse, "description": "the worker holds TUNEMIX_MAX_INFLIGHT_BYTES of requests "
                                                        "(Retry-After), or the request waited past its deadline"},
               504: {"model": ErrorResponse, "description": "the work ran past the request's deadline "
                                                        "(TUNEMIX_REQUEST_TIMEOUT_S, ?timeout_s=)"}},
    openapi_extra=msgspec_body_spec(FuseRequest, example),
)
async def fuse(request: Request, settings: SettingsDep, hold: HoldDep) -> Response:
    start = time.perf_counter()
    body_kind(request, text=False)
    body = await read_body(request, settings, hold=hold, deadline=start_deadline(request, settings))

    def work() -> bytes:
        req = decode_json(DECODER, body, "/fuse", {"method": METHODS})
        check_deadline("/fuse: decoding")
        lists, fused = fuse_entries(req, settings)
        check_number_lengths(body)  # a number the libraries read otherwise: refused
        check_repeated_keys(body)  # after the counts: its own pass is then small
        top_k = applied_top_k(req.top_k, lists.n_documents)
        check_deadline("/fuse: ranking")
        return encode_answer(FuseAnswer(method=req.method, results=ranked(fused, lists, top_k),
                                         server_time_ms=round((time.perf_counter() - start) * 1e3, 3)))

    return json_bytes_response(await python_work(request, work, body_size=len(body)))
