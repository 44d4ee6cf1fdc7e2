"""Every request's deadline: ``TUNEMIX_REQUEST_TIMEOUT_S`` unless the client asks for another.

A request must be answered within its deadline, counted from its first byte: the moment the
worker read the first byte of its head (``tunemix.service.http_protocol``'s arrival stamp; where
the server gives none, plain uvicorn or the test client, from the handler's start). The time it
waited in the worker before its handler, its body's arrival and its work all count, on the event
loop as on threads. A body still arriving when the deadline passes is cut off (**504**, the
connection closed, nothing decoded), and one that arrives whole after it is answered **504**
before any work; the body has its own bounds besides (``TUNEMIX_BODY_STALL_S``,
``TUNEMIX_BODY_TIMEOUT_S``: 408). The client may ask for a shorter or
longer one with the query parameter ``timeout_s`` or the header ``X-Request-Timeout-S`` (seconds;
the smaller of the two when both are sent): ``0 < timeout_s <= TUNEMIX_MAX_REQUEST_TIMEOUT_S``; an
ask outside those bounds is answered 422 naming the parameter and the bound.

The deadline (``tunemix.core.deadline.Deadline``) travels with the work to the thread that does it
(``tunemix.service.lanes``), or is made active around /rank's work on the event loop (a body of
little work, ``TUNEMIX_INLINE_MAX_ITEMS``), and is checked between batches by every loop that can run long: the decoding
stages, per query while the queries are checked, per measure in evaluation, per query in
fusion, at every forest pass (so per batch of an explanation's coalitions). Past it the thread
stops at its next check and the request is answered **504** with what to do; work whose deadline
passed before it started never starts: **504** as well, unless the deadline passed while it waited
for a thread with other requests of the worker in flight (``Metrics.in_flight``), then **503** with
``Retry-After`` (the worker is busy). Either way the worker is free again at once.

Explanations get a deadline of their own inside the request's (``TUNEMIX_EXPLAIN_TIMEOUT_S``) and
a budget of forest rows (``TUNEMIX_EXPLAIN_BUDGET`` per explained document, counted as they are
scored): past either, the request is answered 422 (the budget: ask for fewer documents) or 504.
"""

from __future__ import annotations

import math
import time
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse

from tunemix.core.deadline import BudgetExceeded, Deadline, DeadlineExceeded
from tunemix.service.errors import ServiceError
from tunemix.service.observability import ARRIVAL, Metrics
from tunemix.service.settings import Settings

#: the header a client may set to ask for its own deadline (seconds)
TIMEOUT_HEADER = "x-request-timeout-s"
#: the query parameter that does the same
TIMEOUT_PARAMETER = "timeout_s"
#: seconds a client whose request waited past its deadline is told to wait (``Retry-After``)
BUSY_RETRY_AFTER_S = 1
#: the routes whose requests have a deadline (``start_deadline``): their OpenAPI operations list
#: ``timeout_s`` and the header (``openapi_parameters``)
TIMED_PATHS = ("/rank", "/evaluate", "/fuse")


def openapi_parameters(settings: Settings) -> list[dict[str, Any]]:
    """The OpenAPI parameters a client asks for its deadline with, stating the served bounds."""
    most, default = settings.max_request_timeout_s, settings.request_timeout_s
    text = (f"seconds the request may take, counted from its first byte (its wait in the worker, its body's "
            f"arrival and its work count): 0 < seconds <= {most:g} (TUNEMIX_MAX_REQUEST_TIMEOUT_S; more: 422 naming "
            f"it); default {default:g} (TUNEMIX_REQUEST_TIMEOUT_S); with both the query parameter and the header, "
            "the smaller. Past it: 504, the work stopped (a body still arriving is cut off); passed while the "
            "request waited behind others: 503 with Retry-After")
    schema = {"type": "number", "exclusiveMinimum": 0, "maximum": most, "default": default}
    return [{"name": TIMEOUT_PARAMETER, "in": "query", "required": False, "description": text, "schema": schema},
            {"name": "X-Request-Timeout-S", "in": "header", "required": False, "description": text,
             "schema": schema}]


def _asked(text: str, where: str, most: float) -> float:
    """The seconds asked in ``text``: 422 naming ``where`` unless ``0 < seconds <= most``."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise ServiceError(422, f"{where}: {text[:40]!r} is not a positive number of seconds", kind="invalid_input")
    if value > most:
        raise ServiceError(422, f"{where}: {text[:40]!r} is more than the longest deadline a request may ask for, "
                                f"{most:g} s (TUNEMIX_MAX_REQUEST_TIMEOUT_S): ask for 0 < seconds <= {most:g}",
                           kind="invalid_input")
    return value


def request_seconds(request: Request, settings: Settings) -> float:
    """The seconds the request's work may take: the default, or what the client asks (the
    smaller of header and query parameter; 422 for an ask outside ``0 < seconds <= the server's cap``),
    never more than the server's cap."""
    seconds = settings.request_timeout_s
    most = settings.max_request_timeout_s
    asked = []
    if (header := request.headers.get(TIMEOUT_HEADER)) is not None:
        asked.append(_asked(header, f"header {TIMEOUT_HEADER}", most))
    # (the query string parsed only when there is one: most requests have none)
    if request.scope.get("query_string") and (param := request.query_params.get(TIMEOUT_PARAMETER)) is not None:
        asked.append(_asked(param, f"query parameter {TIMEOUT_PARAMETER}", most))
    if asked:
        seconds = min(asked)
    return min(seconds, settings.max_request_timeout_s)


def since_arrival(request: Request) -> float:
    """Seconds since the request's first byte (``ARRIVAL``, stamped by ``python -m tunemix.service``'s
    protocol); 0 where the server stamps none."""
    arrival = (request.scope.get("extensions") or {}).get(ARRIVAL)
    return max(0.0, time.perf_counter() - arrival) if arrival is not None else 0.0


def start_deadline(request: Request, settings: Settings) -> Deadline:
    """The request's deadline, counted from its first byte (``since_arrival``): made on the first
    call, before its body is read (``tunemix.service.body.read_body`` ends the read with it), and
    the same one on every later call; kept on ``request.state`` for the thread hops of
    ``tunemix.service.lanes``. Its ``busy`` probe: other requests of the worker in flight
    (``Metrics.busy``)."""
    started = request_deadline(request)
    if started is not None:
        return started
    deadline = Deadline.after(request_seconds(request, settings))
    deadline.at -= since_arrival(request)
    metrics = getattr(request.app.state, "metrics", None)
    if metrics is not None:
        deadline.busy = metrics.busy
    request.state.deadline = deadline
    return deadline


def past_deadline_while_reading(deadline: Deadline, received: int, *, arriving: bool) -> ServiceError:
    """504 for a request whose deadline passed before its work: while its body was arriving
    (``arriving``: the connection is closed, the rest unread) or by the time it had arrived."""
    when = "while its body was arriving" if arriving else "by the time its body had arrived"
    return ServiceError(504, f"the request's deadline of {deadline.seconds:g} s passed (counted from its first byte) "
                             f"{when} ({received} bytes received); nothing was done. Send the body faster or "
                             f"smaller, or ask for a longer deadline with ?{TIMEOUT_PARAMETER}= or the "
                             f"{TIMEOUT_HEADER} header (at most TUNEMIX_MAX_REQUEST_TIMEOUT_S)", kind="deadline",
                        headers={"Connection": "close"} if arriving else None)


def request_deadline(request: Request) -> Deadline | None:
    """The deadline ``start_deadline`` set for this request, if any."""
    deadline: Deadline | None = getattr(request.state, "deadline", None)
    return deadline


def deadline_answer(exc: DeadlineExceeded, metrics: Metrics) -> JSONResponse:
    """504 (the deadline passed: the work ran past it, or it passed before the work started with
    nothing else holding the worker) or 503 (it passed while the work waited for a thread behind
    other requests: ``DeadlineExceeded.busy``)."""
    if exc.busy:
        metrics.count_error("deadline_queued")
        return JSONResponse({"detail": f"{exc}: the worker was busy with other requests; retry after the time in "
                                       "Retry-After"}, status_code=503,
                            headers={"Retry-After": str(BUSY_RETRY_AFTER_S)})
    metrics.count_error("deadline")
    return JSONResponse({"detail": f"{exc}; the work was stopped. Send a smaller request (fewer queries, documents, "
                                   "measures or explained documents), or ask for a longer deadline with "
                                   f"?{TIMEOUT_PARAMETER}= or the {TIMEOUT_HEADER} header (at most "
                                   "TUNEMIX_MAX_REQUEST_TIMEOUT_S)"}, status_code=504)


def budget_answer(exc: BudgetExceeded, metrics: Metrics) -> JSONResponse:
    """422: an explanation needed more forest rows than the request's budget."""
    metrics.count_error("explain_budget")
    return JSONResponse({"detail": f"explain: {exc}; the budget is TUNEMIX_EXPLAIN_BUDGET rows per explained "
                                   "document: explain fewer documents (a smaller top_k or explain_pair only), or "
                                   "send shorter candidate lists"}, status_code=422)
