"""``POST /rank`` handed straight to its route function, past FastAPI's routing (a part of /rank's p50).

A /rank request otherwise walks, before the route function runs and after it answers, through
FastAPI's per-request machinery: the metrics middleware, Starlette's exception middleware, the
exit-stack middleware, the router's match over every route, the route's request-response
wrapper and its dependency solver (with nothing to solve: /rank declares no parameter and no
dependency, ``tunemix.service.deps.query_model``). ``RankShortcut``, the outermost of the
application's own middleware but ``tunemix.service.body.AnswerBytes``, does for ``POST /rank``
what those layers do for it, and nothing else:

- the scope gets what the router gives a matched route (``app``, ``route``, ``endpoint``,
  ``path_params``), and the route function (``tunemix.service.routers.rank.rank``, the same function the
  route declares) gets a Starlette ``Request`` of it;
- an exception the route function raises is answered by the application's handler for its
  class, looked up along the class's MRO as Starlette's ``ExceptionMiddleware`` looks it up (for
  an ``HTTPException``, a handler for its status code first); one that only the handler of
  ``Exception`` takes is raised on, to ``ServerErrorMiddleware`` (which answers 500 with that
  handler and lets uvicorn log it), as FastAPI's path does;
- the request is counted and timed in the service's metrics under the endpoint ``/rank``, as
  ``MetricsMiddleware`` counts it.

Every other request (another path or method, a root path, a non-HTTP scope) goes through FastAPI
unchanged, and so does /rank in the OpenAPI schema and the docs; with ``app.state.rank_shortcut``
False (the tests' switch), /rank too. The answers are the same bytes
either way (``tests/service/test_rank_dispatch.py`` sends a set of good and bad requests down both
paths). Measured in-process, the FastAPI layers this skips cost about 0.2 ms of CPU a request
(``route_overhead`` of ``python -m bench.service_breakdown``; docs/performance.md).
"""

from __future__ import annotations

import time
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request

from tunemix.service.observability import Metrics, StatusRecorder, queued_since

#: the path and method taken past the routing
PATH, METHOD = "/rank", "POST"


class RankShortcut:
    """Pure ASGI middleware: ``POST /rank`` to its route function (see the module docstring)."""

    def __init__(self, app: Any, fastapi_app: Any, route: Any, metrics: Metrics) -> None:
        self.app = app
        self.fastapi_app = fastapi_app
        self.route = route  # the APIRoute /rank declares (tunemix.service.routers.rank.router)
        self.metrics = metrics

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if (scope["type"] != "http" or scope["path"] != PATH or scope["method"] != METHOD or scope.get("root_path")
                or not self.fastapi_app.state.rank_shortcut):
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        sender = StatusRecorder(send)
        route = self.route
        scope["app"] = self.fastapi_app
        scope["route"] = route
        scope["endpoint"] = route.endpoint
        scope.setdefault("path_params", {})
        request = Request(scope, receive, sender)
        self.metrics.in_flight += 1
        try:
            try:
                response = await route.endpoint(request)
            except Exception as exc:
                handler = self.handler(exc)
                if handler is None:
                    raise
                response = await handler(request, exc)
                exc.__traceback__ = None  # as Starlette: a reused exception keeps no traceback
            await response(scope, receive, sender)
        finally:
            self.metrics.in_flight -= 1
            self.metrics.observe_request(PATH, METHOD, sender.status, time.perf_counter() - start,
                                         queued_since(scope, start))

    def handler(self, exc: Exception) -> Any:
        """The application's handler of ``exc`` as ``ExceptionMiddleware`` finds it, or None
        (``Exception``'s handler, and a 500 status's, are ``ServerErrorMiddleware``'s, outside this
        middleware)."""
        handlers = self.fastapi_app.exception_handlers
        if isinstance(exc, HTTPException) and exc.status_code != 500 and exc.status_code in handlers:
            return handlers[exc.status_code]
        for cls in type(exc).__mro__:
            if cls is Exception:
                return None
            if cls in handlers:
                return handlers[cls]
        return None
