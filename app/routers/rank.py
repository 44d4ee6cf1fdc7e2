"""``POST /rank``: score posted candidate lists (JSON or a LETOR text body) and rank them.

Query-wise feature views (``raw+std``, ``raw+white``) standardise each feature over the posted
list, so a document's score depends on the other documents posted with it: post the whole
candidate list of a query, not pages of it.
"""

from __future__ import annotations

import time
from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from app.deps import (
    MetricsDep,
    RegistryDep,
    SettingsDep,
    is_text,
    json_bytes_response,
    parse_and_score,
    python_work,
    rank_json,
    read_body,
    resolve_model,
    score_call,
    scoring,
)
from app.openapi import body_spec
from app.parsing import (
    CandidateLists,
    fast_rank_body,
    fast_rank_lists,
    letor_lists,
    parse_json,
    rank_lists,
)
from app.registry import ServedModel
from app.schemas import ErrorResponse, RankRequest, RankResponse

router = APIRouter(tags=["ranking"])

ERRORS = {413: {"model": ErrorResponse, "description": "too many documents, queries or bytes"},
          422: {"model": ErrorResponse, "description": "the message names the query and the field"},
          503: {"model": ErrorResponse, "description": "no model loaded yet"}}


@router.post(
    "/rank",
    summary="Rank the candidate documents of one or many queries",
    response_model=RankResponse,
    responses=ERRORS,  # type: ignore[arg-type]
    openapi_extra=body_spec(RankRequest, text="LETOR/SVMlight lines `label qid:Q 1:v 2:v ... # docid = X` "
                                              "(labels ignored); model, version and top_k as query parameters"),
)
async def rank(
    request: Request,
    registry: RegistryDep,
    settings: SettingsDep,
    metrics: MetricsDep,
    model: Annotated[str | None, Query(description="model name (text bodies; JSON bodies say it in the body)")] = None,
    version: Annotated[str | None, Query(description="model version (text bodies)")] = None,
    top_k: Annotated[int | None, Query(ge=1, description="best top_k per query (text bodies)")] = None,
) -> Response:
    start = time.perf_counter()
    body = await read_body(request, settings.max_body_bytes)
    text = is_text(request)

    def parse() -> tuple[ServedModel, CandidateLists, int | None]:
        limits = {"max_queries": settings.max_queries, "max_documents": settings.max_documents}
        if text:
            served = resolve_model(registry, model, version)
            return served, letor_lists(body, served.n_features, **limits), top_k
        fast = fast_rank_body(body)
        if fast is not None:
            served = resolve_model(registry, fast.model or model, fast.version or version)
            lists = fast_rank_lists(fast, served.n_features, **limits)
            if lists is not None:
                return served, lists, fast.top_k or top_k
        req = parse_json(RankRequest, body)
        served = resolve_model(registry, req.model or model, req.version or version)
        return served, rank_lists(req.queries, served.n_features, **limits), req.top_k or top_k

    def whole(alone: bool) -> tuple[ServedModel, CandidateLists, bytes]:
        served, lists, k = parse()
        scores = score_call(served.model.score, (lists.features, lists.offsets), alone)
        return served, lists, rank_json(served, lists, k, scores, start)

    # an idle worker parses, scores and serialises in one thread hop; a busy one in two, so that
    # parsing overlaps the other requests' scoring
    done = await parse_and_score(request.app.state, whole)
    if done is not None:
        served, lists, content = done
        metrics.count_documents(served.name, lists.n_documents)
        return json_bytes_response(content)
    served, lists, k = await python_work(request, parse)
    scores = await scoring(request, served.model.score, lists.features, lists.offsets)
    metrics.count_documents(served.name, lists.n_documents)
    return json_bytes_response(rank_json(served, lists, k, scores, start))
