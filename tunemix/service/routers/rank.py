"""``POST /rank``: score posted candidate lists and rank them, best first.

The whole route, top to bottom:

1. **Read** the body (``tunemix.service.body.read_body``): at most ``TUNEMIX_MAX_BODY_BYTES`` bytes, chunked
   or not, within ``TUNEMIX_BODY_TIMEOUT_S`` seconds (413 / 408 otherwise) and within the request's
   deadline, counted from its first byte (504), counted in the worker's in-flight bytes until the
   answer (503 past ``TUNEMIX_MAX_INFLIGHT_BYTES``).
2. **Decode** it with msgspec into the typed structs (``rank_body.RankRequest``): a JSON body, or a
   LETOR/SVMlight text body (``Content-Type: text/plain``, ``tunemix.service.letor``). msgspec is the only
   thing that reads the JSON bytes; a body it refuses is a 422 naming the JSON path.
3. **Check and stack** the queries into the project's array layout (``CandidateLists``: float32
   features (n, d), int64 query offsets): the request's limits, every row of exactly the model's
   feature count, finite float32 values, canonical sparse keys, ids of bounded length and unique
   within their query. Each error is a 4xx naming the query and the field. The answer's size is
   bounded from them before the scoring (``tunemix.service.answer_size``: 413 past
   ``TUNEMIX_MAX_ANSWER_BYTES``).
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
and explained in the explain lane (``tunemix.service.lanes.explain_work``, ``TUNEMIX_EXPLAIN_CONCURRENCY``), on
one thread, under its own deadline (``TUNEMIX_EXPLAIN_TIMEOUT_S``), never on the event loop.

A body of little work runs steps 2-5 on the event loop when no other request of the worker is
scoring, under the request's deadline (504 past it, as on a thread): a thread hop costs more than
its work. Little is at most ``TUNEMIX_INLINE_MAX_BYTES`` (96 KiB: about 110 documents of 136
features) and ``TUNEMIX_INLINE_MAX_ITEMS`` items (256: ``tunemix.service.body.body_items`` counts,
with numpy, never fewer than the body's documents or its queries, so 8,000 one-line LETOR
queries in 87 KB go to a thread). Otherwise an idle worker runs them in one thread hop
and a busy one in two (``tunemix.service.deps``), so that decoding overlaps other requests'
scoring. A body of large work (``tunemix.service.lanes.is_large``: more than
``TUNEMIX_LARGE_BODY_BYTES`` bytes or ``TUNEMIX_LARGE_BODY_ITEMS`` items) is decoded, scored on
one thread and answered in the worker's large lane, in one hop (``large_work``), never in the
Python lanes or scoring slots the others wait for. The same functions run either way.

The request's structs and decode paths are ``tunemix.service.rank_body``, the answer's
``tunemix.service.rank_answer``, the explanations ``tunemix.service.rank_explain``; this module is
the route.

Query-wise feature views (``raw+std``, ``raw+white``) standardise each feature over the posted
list, so a document's score depends on the other documents posted with it: post the whole
candidate list of a query, not pages of it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Literal

from fastapi import APIRouter, Request
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field

from tunemix.core.scoring.runtime import single_threaded
from tunemix.service.answer_size import check_rank_answer
from tunemix.service.body import BodyHold, body_items, body_kind, held_body, read_body
from tunemix.service.deadlines import start_deadline
from tunemix.service.deps import json_bytes_response, query_model, resolve_model
from tunemix.service.errors import input_error
from tunemix.service.json_body import gc_paused
from tunemix.service.lanes import (
    explain_work,
    in_query_chunks,
    is_large,
    large_work,
    parse_and_score,
    python_work,
    score_call,
    scoring,
)
from tunemix.service.letor import letor_lists
from tunemix.service.observability import Metrics
from tunemix.service.openapi import msgspec_answer_spec, msgspec_body_spec, query_parameters
from tunemix.service.parsing import CandidateLists
from tunemix.service.rank_answer import RankAnswer, encode_answer, ranked
from tunemix.service.rank_body import MAX_EXPLAIN, Options, RankRequest, example, json_lists
from tunemix.service.rank_explain import explain_options, explained_documents, explained_pair, with_explanations
from tunemix.service.registry import ModelRegistry, NotInMemory, ServedModel
from tunemix.service.schemas import ErrorResponse
from tunemix.service.settings import Settings

router = APIRouter(tags=["ranking"])

#: contributions a pair shows when the request asks for no ``explain``
PAIR_TOP = 10

#: the error answers of the endpoints that score posted documents (/rank, /evaluate)
ERRORS = {408: {"model": ErrorResponse, "description": "the body did not arrive within TUNEMIX_BODY_TIMEOUT_S"},
          413: {"model": ErrorResponse, "description": "more bytes, queries or documents than the limits, or an "
                                                        "answer that may pass TUNEMIX_MAX_ANSWER_BYTES"},
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
    min_relevance: float | None = Field(None, ge=0, allow_inf_nan=False,
                                         description="text bodies: cut below this expected grade")
    min_probability: float | None = Field(None, ge=0, le=1, description="text bodies: cut below this P(grade >= 1)")
    explain: int = Field(0, ge=0, le=MAX_EXPLAIN, description="text bodies: each returned document's k largest "
                                                             "feature contributions")
    missing: Literal["zero", "nan"] = Field("zero", description="text bodies: a feature a line leaves out is 0 "
                                                               "(zero) or a missing value (nan)")


@router.post(
    "/rank",
    summary="Rank the candidate documents of one or many queries",
    response_class=Response,
    responses={**msgspec_answer_spec(RankAnswer, "each query's documents ranked, best first"),
               **ERRORS},  # type: ignore[dict-item]
    openapi_extra={**msgspec_body_spec(RankRequest, example,
                                       text="LETOR/SVMlight lines `[label] qid:Q 1:v 2:v ... # docid = X` "
                                            "(the label optional and ignored); model, version and top_k as "
                                            "query parameters"),
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
    body = await read_body(request, settings, hold=hold, deadline=start_deadline(request, settings))

    def decode() -> tuple[ServedModel, CandidateLists, Options]:
        pairs: list[tuple[int, Any]] = []
        if kind == "text":
            served = resolve_model(registry, model, version)
            options = Options(top_k, relevance, min_relevance, min_probability, explain)
            lists = letor_lists(body, served.n_features, settings, missing=params.missing)
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
        check_rank_answer(served, lists, options, settings.max_answer_bytes, PAIR_TOP)  # before the scoring
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
        return encode_answer(RankAnswer(model=served.name, version=served.version, results=results,
                                         server_time_ms=round((time.perf_counter() - start) * 1e3, 3)))

    def whole(alone: bool, large: bool = False) -> tuple[ServedModel, CandidateLists, Options, bytes | None]:
        """Decode, score and answer; a request that asks for explanations is only decoded (its
        scoring and explanations go to the explain lane). ``large``: scored a run of queries at a
        time (``in_query_chunks``)."""
        served, lists, options = decode()
        if options.explains:
            return served, lists, options, None
        fn = score(served, options)
        scored = score_call(in_query_chunks(fn) if large else fn, (lists.features, lists.offsets), alone)
        return served, lists, options, answer(served, lists, options, scored)

    def explained_answer(served: ServedModel, lists: CandidateLists, options: Options) -> bytes:
        with single_threaded():  # the lane takes one core at most
            scored = score(served, options)(lists.features, lists.offsets)
        return answer(served, lists, options, scored)

    deadline = start_deadline(request, settings)
    state = request.app.state
    content: bytes | None = None
    done: tuple[ServedModel, CandidateLists, Options, bytes | None] | None = None
    # a body of little work is decoded on the event loop (a thread hop costs more than its work),
    # and scored there too unless it asks for explanations: those never run on the event loop
    if (len(body) <= settings.inline_max_bytes and not state.scoring_requests
            and body_items(body, kind) <= settings.inline_max_items):
        try:
            with deadline.active():  # checked as on a thread: past it, 504
                done = whole(False)  # one thread, as when other requests score
        except NotInMemory:
            pass  # the model version must be loaded first: in a thread, below
    if done is None and is_large(body, kind, settings):  # in the large lane, on one thread, in one hop
        done = await large_work(request, whole, False, True)
    if done is None:
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
