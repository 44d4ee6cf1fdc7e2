"""``POST /fuse``: fuse several systems' result lists per query (RRF, CombSUM, CombMNZ, Condorcet).

The hybrid-search case: a lexical and a dense retriever each return their own list; ids need
not be the same across systems. A system with ``scores`` is scored; one without is a ranking
(best first). Rules for documents a system did not return: ``training.ensemble.list_fusion``.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import numpy.typing as npt
from fastapi import APIRouter, Request
from fastapi.responses import Response

from app.deps import SettingsDep, json_response, python_work, read_body
from app.errors import input_error, query_label
from app.openapi import body_spec
from app.parsing import CandidateLists, check_limits, check_unique, parse_json, ranked
from app.routers.rank import ERRORS
from app.schemas import FuseRequest, FuseResponse
from training.ensemble.list_fusion import fuse_lists

router = APIRouter(tags=["fusion"])

#: Condorcet compares every pair of a query's documents (O(n^2) memory)
CONDORCET_MAX_DOCS = 5_000


def _matrix(req: FuseRequest, max_queries: int, max_documents: int) -> tuple[CandidateLists, npt.NDArray[np.float64]]:
    n_entries = sum(len(s.ids) for q in req.queries for s in q.systems)
    check_limits(len(req.queries), n_entries, max_queries=max_queries, max_documents=max_documents)
    n_sys = max(len(q.systems) for q in req.queries)
    blocks: list[npt.NDArray[np.float64]] = []
    ids: list[Any] = []
    qids = []
    for i, q in enumerate(req.queries):
        where = query_label(i, q.qid)
        index: dict[str, int] = {}
        q_ids: list[Any] = []
        for s in q.systems:
            for d in s.ids:
                if str(d) not in index:
                    index[str(d)] = len(q_ids)
                    q_ids.append(d)
        if req.method == "condorcet" and len(q_ids) > CONDORCET_MAX_DOCS:
            raise input_error(f"{where}: condorcet compares every pair of documents; at most "
                              f"{CONDORCET_MAX_DOCS} distinct ids per query, got {len(q_ids)}")
        mat = np.full((len(q_ids), n_sys), np.nan)
        for m, s in enumerate(q.systems):
            check_unique(s.ids, f"{where}: systems[{m}]", "id")
            if s.scores is not None:
                if len(s.scores) != len(s.ids):
                    raise input_error(f"{where}: systems[{m}] has {len(s.ids)} ids but {len(s.scores)} scores")
                vals = np.asarray(s.scores, dtype=np.float64)
                if not np.all(np.isfinite(vals)):
                    j = int(np.argmax(~np.isfinite(vals)))
                    raise input_error(f"{where}: systems[{m}].scores[{j}] is not a finite number")
                with np.errstate(over="ignore"):
                    spread = np.ptp(vals)
                if not np.isfinite(spread):
                    # the spread overflows float64 (e.g. -1e308 and 1e308), and min-max normalisation
                    # with it; every method is invariant to scaling a system's scores by a power of two
                    vals = vals * 0.25
            else:
                vals = np.arange(len(s.ids), 0, -1, dtype=np.float64)
            mat[[index[str(d)] for d in s.ids], m] = vals
        blocks.append(mat)
        ids.extend(q_ids)
        qids.append(q.qid)
    offsets = np.zeros(len(blocks) + 1, dtype=np.int64)
    np.cumsum([b.shape[0] for b in blocks], out=offsets[1:])
    lists = CandidateLists(features=np.zeros((offsets[-1], 0), np.float32), offsets=offsets, qids=qids, ids=ids)
    return lists, np.concatenate(blocks, axis=0)


@router.post(
    "/fuse",
    summary="Fuse several systems' rankings or scores per query",
    response_model=FuseResponse,
    responses=ERRORS,  # type: ignore[arg-type]
    openapi_extra=body_spec(FuseRequest),
)
async def fuse(request: Request, settings: SettingsDep) -> Response:
    start = time.perf_counter()
    body = await read_body(request, settings.max_body_bytes)

    def work() -> dict[str, Any]:
        req = parse_json(FuseRequest, body)
        lists, mat = _matrix(req, settings.max_queries, settings.max_documents)
        # a top_k beyond the longest list changes nothing (and may not fit the kernels' 64-bit ints)
        top_k = None if req.top_k is None else min(req.top_k, max(lists.n_documents, 1))
        fused = fuse_lists(mat, lists.offsets, req.method, k=req.k, top_k=top_k)
        return {"method": req.method, "results": ranked(fused, lists, top_k)}

    payload = await python_work(request, work)
    payload["server_time_ms"] = round((time.perf_counter() - start) * 1e3, 3)
    return json_response(payload)
