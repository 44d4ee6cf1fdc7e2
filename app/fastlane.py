"""The fast lane of ``POST /rank``: small requests of the common shape answered on the event loop.

A /rank request through FastAPI costs, besides its parsing and scoring, the framework's routing
and dependency resolution and two thread hops (parsing, then scoring), each of which wakes a
sleeping thread and then the event loop again. Measured with ``bench/loadgen.py`` at 100
requests/s on this project's 2-core machine, a FastAPI route that only reads a 33 KB body and
answers a fixed ranking costs 0.74 ms of server CPU per request against 0.33 ms for a bare ASGI
app, and one thread hop adds 0.44 ms (latency: 0.56 ms bare, 1.02 FastAPI, 1.52 with one hop).
For a 100-document list that scores in about 2 ms, that overhead is a third of the request.

``RankFastLane`` is a pure ASGI middleware that takes a ``POST /rank`` when all of this holds:
no query string, a JSON body (not ``text/plain``) within ``Settings.max_body_bytes``, the common
body shape that ``app.parsing.fast_rank_body`` reads (queries of dense ``documents`` or columnar
``ids`` + ``features``), a model and version already loaded, inputs that pass every check, and
``Settings.inline_budget_ms`` > 0. A request whose estimated time on the event loop (reading +
scoring, from the model's cost per document measured at load) fits the budget is parsed, scored
and answered in place; a body too big to read within the budget is parsed, scored and answered
in one worker thread when the worker is idle (``app.deps.parse_and_score``, the route's own
single hop), without FastAPI's middleware, routing and dependencies: measured through two
workers at 20 requests/s of 1,000 documents, 20 s runs interleaved with the lane off, p50 21.7
and 22.2 ms against 23.2 and 22.3 ms (the client's time beyond the server's 1.9-2.0 against
2.4-2.6 ms). Either way the response is the one the route gives.
Anything else, or anything doubtful (a busy worker included), goes on to FastAPI with the body
replayed, which validates, names the problem, and runs large requests in worker threads; so the
event loop is never held by one request for much longer than the budget, and ``/health`` keeps
answering while a long list scores.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from app.deps import parse_and_score, rank_json, score_call, scoring_turn
from app.errors import ServiceError
from app.parsing import CandidateLists, FastRankBody, fast_rank_body, fast_rank_lists
from app.registry import ModelRegistry, ServedModel

log = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

#: reading cost used for the estimate, per body byte: the body reader (``app.rank_reader``) takes
#: about 4.5-8 ns for MQ2008-like lists (1.5-2.3 ms for a 330 KB, 1,000-document body), the
#: reference reader it falls back to about 13 ns; 20 leaves room for a slower moment of the machine
READ_NS_PER_BYTE = 20.0


class RankFastLane:
    """Pure ASGI middleware: answers small common ``POST /rank`` requests without the framework
    (see the module docstring); passes every other request on unchanged."""

    def __init__(self, app: Any, state: Any, route: Any, path: str = "/rank") -> None:
        self.app = app
        self.state = state  # the application's state: settings, registry, metrics, scoring counter
        self.route = route  # the FastAPI route of /rank (scope["route"], for the metrics' endpoint label)
        self.path = path

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (scope["type"] != "http" or scope["path"] != self.path or scope["method"] != "POST"
                or scope.get("query_string") or not self._json(scope)):
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        settings = self.state.settings
        budget_ns = settings.inline_budget_ms * 1e6
        limit = settings.max_body_bytes  # beyond it the route answers 413
        declared = _content_length(scope)
        if budget_ns <= 0 or (declared is not None and declared > limit):
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            message = await receive()
            if message["type"] != "http.request":  # the client went away: let the framework see it
                await self.app(scope, _replay(chunks, receive, message, more=True), send)
                return
            chunk = message.get("body", b"")
            chunks.append(chunk)
            size += len(chunk)
            more = bool(message.get("more_body", False))
            if size > limit and more:
                await self.app(scope, _replay(chunks, receive, None, more=True), send)
                return
        body = b"".join(chunks)
        if READ_NS_PER_BYTE * size <= budget_ns:
            answer = self._answer(body, size, budget_ns, start)
        else:
            answer = await self._answer_in_thread(body, start)
        if answer is None:
            await self.app(scope, _replay([body], receive, None), send)
            return
        scope["route"] = self.route
        await send({"type": "http.response.start", "status": answer[0],
                    "headers": [(b"content-length", str(len(answer[1])).encode("latin-1")),
                                (b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": answer[1]})

    @staticmethod
    def _json(scope: Scope) -> bool:
        for name, value in scope.get("headers", ()):
            if name == b"content-type":
                return bool(value.split(b";")[0].strip().lower() != b"text/plain")
        return True

    def _read(self, body: bytes, size: int = 0, budget_ns: float | None = None) -> \
            tuple[FastRankBody, ServedModel, CandidateLists] | None:
        """The body read (``fast_rank_body``), its model and its checked arrays, or None when the
        route should take it: no model warm yet, another shape, a model not loaded, a problem the
        route's full validation names, or (with ``budget_ns``) reading and scoring estimated over
        the budget."""
        state = self.state
        registry: ModelRegistry = state.registry
        if not registry.warm:
            return None
        fast = fast_rank_body(body)
        served = None if fast is None else _loaded(registry, fast.model, fast.version)
        if fast is None or served is None:
            return None
        if budget_ns is not None and served.ns_per_document * fast.n_documents + READ_NS_PER_BYTE * size > budget_ns:
            return None
        settings = state.settings
        try:
            lists = fast_rank_lists(fast, served.n_features, max_queries=settings.max_queries,
                                    max_documents=settings.max_documents)
        except ServiceError:
            return None  # the route raises the same error, through the application's handlers
        return None if lists is None else (fast, served, lists)

    def _internal_error(self) -> tuple[int, bytes]:
        self.state.metrics.count_error("internal")
        log.exception("unhandled error on POST %s", self.path)
        return 500, b'{"detail":"internal error; the server log has the traceback"}'

    def _answer(self, body: bytes, size: int, budget_ns: float, start: float) -> tuple[int, bytes] | None:
        """(status, JSON body) of the request, or None when the framework should take it."""
        read = self._read(body, size, budget_ns)
        if read is None:
            return None
        fast, served, lists = read
        try:
            with scoring_turn(self.state) as alone:  # on the event loop, as app.deps.scoring counts
                scores = score_call(served.model.score, (lists.features, lists.offsets), alone)
        except Exception:
            return self._internal_error()
        self.state.metrics.count_documents(served.name, lists.n_documents)
        return 200, rank_json(served, lists, fast.top_k, scores, start)

    async def _answer_in_thread(self, body: bytes, start: float) -> tuple[int, bytes] | None:
        """(status, JSON body) of a request too big to read on the event loop, read, scored and
        serialised in one worker thread when the worker is idle (``app.deps.parse_and_score``,
        as the route does), or None: the worker is busy (the route then parses and scores in two
        hops, overlapping other requests), or ``_read`` leaves the body to the route."""

        def whole(alone: bool) -> tuple[ServedModel, int, bytes] | None:
            read = self._read(body)
            if read is None:
                return None
            fast, served, lists = read
            scores = score_call(served.model.score, (lists.features, lists.offsets), alone)
            return served, lists.n_documents, rank_json(served, lists, fast.top_k, scores, start)

        try:
            done = await parse_and_score(self.state, whole)
        except Exception:
            return self._internal_error()
        if done is None:
            return None
        served, n_documents, content = done
        self.state.metrics.count_documents(served.name, n_documents)
        return 200, content


def _loaded(registry: ModelRegistry, name: str | None, version: str | None) -> ServedModel | None:
    """The named model if it is loaded already (loading one is blocking work: the route does it)."""
    served = registry.current(name or registry.default_model)
    if served is None or (version is not None and version != served.version):
        return None
    return served


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            return int(value) if value.isdigit() else None
    return None


def _replay(chunks: list[bytes], receive: Receive, pending: Message | None, *, more: bool = False) -> Receive:
    """A ``receive`` that first gives the body read so far (then ``pending``, a message already
    taken from the client), then whatever the client still sends."""
    queue: list[Message] = [{"type": "http.request", "body": b"".join(chunks), "more_body": more}]
    if pending is not None:
        queue.append(pending)

    async def replayed() -> Message:
        if queue:
            return queue.pop(0)
        return await receive()

    return replayed
