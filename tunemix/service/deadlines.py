"""Every request's deadline: ``TUNEMIX_REQUEST_TIMEOUT_S`` unless the client asks for another.

A request's work (everything after its body has arrived: the body has its own bound,
``TUNEMIX_BODY_TIMEOUT_S``) must end within its deadline. The client may ask for a shorter or
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

from fastapi import Request
from fastapi.responses import JSONResponse

from tunemix.core.deadline import BudgetExceeded, Deadline, DeadlineExceeded
from tunemix.service.errors import ServiceError
from tunemix.service.observability import Metrics
from tunemix.service.settings import Settings

#: the header a client may set to ask for its own deadline (seconds)
TIMEOUT_HEADER = "x-request-timeout-s"
#: the query parameter that does the same
TIMEOUT_PARAMETER = "timeout_s"
#: seconds a client whose request waited past its deadline is told to wait (``Retry-After``)
BUSY_RETRY_AFTER_S = 1


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


def start_deadline(request: Request, settings: Settings) -> Deadline:
    """The request's deadline, starting now (once its body has arrived); kept on ``request.state``
    for the thread hops of ``tunemix.service.deps``. Its ``busy`` probe: other requests of the worker
    in flight (``Metrics.busy``)."""
    deadline = Deadline.after(request_seconds(request, settings))
    metrics = getattr(request.app.state, "metrics", None)
    if metrics is not None:
        deadline.busy = metrics.busy
    request.state.deadline = deadline
    return deadline


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
