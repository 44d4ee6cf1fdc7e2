"""How a body comes in: bounded in bytes and time (``read_body``), of a type the endpoint takes
(``body_kind``), and counted in the worker's ``Admission`` as it is received, until the request
ends: past ``TUNEMIX_MAX_INFLIGHT_BYTES`` (or, for a large body, past what the small bodies'
reserve leaves) a body is answered 503 with ``Retry-After``. And how an answer goes out: its
bytes not yet written to the connection count in the same ``Admission`` until they are
(``AnswerBytes``)."""


from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from fastapi import Request
from starlette.requests import ClientDisconnect

from tunemix.core.deadline import Deadline
from tunemix.service.deadlines import past_deadline_while_reading
from tunemix.service.errors import ServiceError, too_large
from tunemix.service.settings import Settings


class Admission:
    """The request bytes one worker holds at once (``TUNEMIX_MAX_INFLIGHT_BYTES``): bodies being
    read, waiting for a thread, decoded and answered. ``reserve`` bytes of it are for small bodies
    (at most ``small`` bytes, ``TUNEMIX_SMALL_BODY_BYTES``): the large ones together hold at most
    ``limit - reserve`` (``large`` counts them), so large bodies held one byte short leave room
    for small requests. Changed on the event loop only (no race)."""

    def __init__(self, limit: int, reserve: int = 0, small: int = 0) -> None:
        self.limit = limit
        self.large_limit = limit - reserve
        self.small = small
        self.held = 0
        self.large = 0

    @classmethod
    def of(cls, settings: Settings) -> Admission:
        return cls(settings.max_inflight_bytes, settings.inflight_reserve(), settings.small_body_bytes)

    def past_reserve(self) -> int:
        """Bytes the large bodies and unwritten answers hold past their share (an answer is counted
        whole, or dropped past ``limit``: ``hold_answer``): not counted against a small body, whose
        reserve they may not take."""
        return max(0, self.large - self.large_limit)

    def hold_answer(self, n: int) -> bool:
        """Count ``n`` bytes of an answer not yet written, as a large body's, and say True
        (``release_answer`` with the same ``n`` once written); or, when they would take the worker
        past ``limit`` while other answers or large bodies hold bytes, count nothing and say False:
        the answer is dropped (its connection reset). One answer alone is always kept; small
        requests keep their reserve, whatever the answers hold."""
        if self.large and self.held + n > self.limit:
            return False
        self.held += n
        self.large += n
        return True

    def release_answer(self, n: int) -> None:
        self.held -= n
        self.large -= n


def admission_of(state: Any) -> Admission:
    """The application's ``Admission`` (made on first use, on the serving loop, once per application)."""
    admission: Admission | None = getattr(state, "admission", None)
    if admission is None:
        admission = state.admission = Admission.of(state.settings)
    return admission


@dataclass
class BodyHold:
    """The bytes of one request's body counted in its worker's ``Admission`` until the request
    ends (``HoldDep`` releases them). A body that would take the worker past its limit, or a large
    body that would take the large bodies past theirs, while other requests hold bytes is refused
    (HTTP 503 with ``Retry-After``); a body alone is always let in (``max_body_bytes <=
    max_inflight_bytes - inflight_reserve``)."""

    admission: Admission
    held: int = 0

    def take(self, n: int) -> None:
        adm = self.admission
        others = adm.held - self.held
        after = self.held + n
        large = after > adm.small
        mine = self.held if self.held > adm.small else 0  # this body's bytes already counted as large
        if others and adm.held - (0 if large else adm.past_reserve()) + n > adm.limit:
            self._refuse(f"the worker holds {others} bytes of other requests and this body would take it past "
                         f"{adm.limit} (TUNEMIX_MAX_INFLIGHT_BYTES)")
        if others and large and adm.large - mine + after > adm.large_limit:
            self._refuse(f"the worker holds {adm.large - mine} bytes of other bodies over {adm.small} bytes "
                         f"(TUNEMIX_SMALL_BODY_BYTES) and this one would take them past {adm.large_limit} "
                         "(TUNEMIX_MAX_INFLIGHT_BYTES less TUNEMIX_INFLIGHT_RESERVE_BYTES, kept for small bodies)")
        adm.held += n
        if large:
            adm.large += after - mine
        self.held = after

    @staticmethod
    def _refuse(why: str) -> None:
        raise ServiceError(503, f"{why}; retry after the time in Retry-After, or send smaller requests", kind="busy",
                           headers={"Retry-After": str(RETRY_AFTER_S), "Connection": "close"})

    def release(self) -> None:
        adm = self.admission
        adm.held -= self.held
        if self.held > adm.small:
            adm.large -= self.held
        self.held = 0


#: seconds a client refused for the worker's in-flight bytes is told to wait (``Retry-After``)
RETRY_AFTER_S = 1


async def body_hold(request: Request) -> AsyncIterator[BodyHold]:
    """A ``BodyHold`` on the worker's admission, released when the request ends."""
    hold = BodyHold(admission_of(request.app.state))
    try:
        yield hold
    finally:
        hold.release()


#: the ASGI scope extension ``tunemix.service.http_protocol`` gives each request: ``await
#: written(count)`` returns once the answer sent has left the process (or its connection was
#: aborted for a client that does not read it), having first told ``count`` its bytes still unsent
ANSWER_WRITTEN = "tunemix-answer-written"


class AnswerBytes:
    """Pure ASGI middleware, the outermost: the bytes of an answer still unsent once the
    application has sent it (a client slower than the answer, or one that reads nothing) count
    in the worker's ``Admission`` as a large body's until they are written, with the deadline
    of ``ANSWER_WRITTEN`` (``TUNEMIX_BODY_STALL_S``, ``TUNEMIX_BODY_MIN_RATE``,
    ``TUNEMIX_BODY_TIMEOUT_S``). Large bodies are refused while they fill the large bodies'
    share; small ones keep their reserve. An answer whose unsent bytes would take the worker past
    ``TUNEMIX_MAX_INFLIGHT_BYTES`` while other answers or large bodies hold bytes is dropped, its
    connection reset (``Admission.hold_answer``; counted in ``tunemix_errors_total`` as
    ``answer_dropped``): small bodies are let in whatever the answers
    hold, so without it clients that ask for large answers in small bodies and read them slowly
    would hold any number of them. Where the server gives no such extension (not
    ``python -m tunemix.service``), nothing is counted."""

    def __init__(self, app: Any, fastapi_app: Any) -> None:
        self.app = app
        self.fastapi_app = fastapi_app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        written: Callable[[Callable[[int], bool]], Any] | None = (
            scope.get("extensions", {}).get(ANSWER_WRITTEN) if scope["type"] == "http" else None)
        if written is None:
            await self.app(scope, receive, send)
            return
        sent = False

        async def sender(message: Any) -> None:
            nonlocal sent
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                sent = True

        await self.app(scope, receive, sender)
        if sent:
            admission = admission_of(self.fastapi_app.state)
            unsent = 0

            def count(n: int) -> bool:
                nonlocal unsent
                if not admission.hold_answer(n):
                    metrics = getattr(self.fastapi_app.state, "metrics", None)
                    if metrics is not None:
                        metrics.count_error("answer_dropped")
                    return False
                unsent = n
                return True

            try:
                await written(count)
            finally:
                admission.release_answer(unsent)


#: ``body_hold`` for a route that takes no dependencies: ``async with held_body(request) as hold``
held_body = contextlib.asynccontextmanager(body_hold)


def split_hint(limit: int) -> str:
    """What a 413 for the body size tells the client to do."""
    return (f"the limit is {limit} bytes (TUNEMIX_MAX_BODY_BYTES); split the queries over several requests "
            "(each query's candidates stay together: a query-wise view standardises over the posted list), "
            "or send the columnar form (ids + features), which is smaller")


async def read_body(request: Request, settings: Settings, limit: int | None = None,
                    hold: BodyHold | None = None, deadline: Deadline | None = None) -> bytes:
    """The request body: at most ``limit`` bytes (default ``max_body_bytes``; HTTP 413, refused
    from the declared length before reading when there is one, else as soon as the chunks add up
    to more), all of it within ``body_timeout_s`` seconds, and arriving: every ``body_stall_s``
    seconds must bring ``body_min_rate`` x ``body_stall_s`` bytes or the body's end (HTTP 408
    either way, and the connection closed: a client that sends a byte a second, or all but the
    last byte and then nothing, holds no worker past ``body_stall_s``). With ``hold``, the bytes
    count in the worker's admission as they are received (HTTP 503 past it), never the length a
    client declares: 16 connections that announce 4 MiB and send a byte hold 16 bytes, not 64 MiB
    (a client that sends nothing holds nothing). With ``deadline`` (the request's, counted from
    its first byte: ``tunemix.service.deadlines.start_deadline``), a body still arriving when it
    passes is cut off, and one that arrives whole after it refused: HTTP 504 either way, before
    any work."""
    limit = settings.max_body_bytes if limit is None else limit
    declared = request.headers.get("content-length")
    length = int(declared) if declared is not None and declared.isdigit() else None
    if length is not None and length > limit:
        raise too_large(f"the body has {length} bytes; {split_hint(limit)}")
    chunks: list[bytes] = []
    size = 0
    loop = asyncio.get_running_loop()
    end = loop.time() + settings.body_timeout_s
    due = end if deadline is None else min(end, loop.time() + deadline.remaining())  # the read ends by then
    if deadline is not None and due <= loop.time():  # passed before the handler started: it waited in the worker
        raise past_deadline_while_reading(deadline, 0, arriving=True)
    stall = settings.body_stall_s
    window = int(settings.body_min_rate * stall)  # bytes each window must bring (or the body's end)
    mark = 0  # the size when the current window began
    try:
        # asyncio's own timeout: one timer on the loop (anyio's fail_after first asks which async
        # library runs, about 2% of a 100-document /rank's event-loop time in a py-spy profile),
        # moved on each time a window's bytes have arrived
        async with asyncio.timeout_at(min(due, loop.time() + stall)) as timer:
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise too_large(f"the body exceeds {limit} bytes; {split_hint(limit)}")
                if hold is not None and size > hold.held:
                    hold.take(size - hold.held)
                chunks.append(chunk)
                if size - mark >= window and chunk:
                    mark = size
                    timer.reschedule(min(due, loop.time() + stall))
    except ClientDisconnect:  # gone, or refused by the protocol (a chunked body past its wire limit)
        raise ServiceError(400, f"the client disconnected after {size} bytes of the body", kind="disconnected",
                           headers={"Connection": "close"}) from None
    except TimeoutError:
        if deadline is not None and (timer.when() or due) >= due and due < end:
            raise past_deadline_while_reading(deadline, size, arriving=True) from None
        if (timer.when() or due) < due:
            raise ServiceError(408, f"the body stopped arriving: fewer than {max(window, 1)} bytes in "
                                    f"{stall:g} s ({size} bytes received; TUNEMIX_BODY_MIN_RATE x "
                                    "TUNEMIX_BODY_STALL_S)", kind="body_stalled",
                               headers={"Connection": "close"}) from None
        raise ServiceError(408, f"the body did not arrive within {settings.body_timeout_s:g} s "
                                f"({size} bytes received; TUNEMIX_BODY_TIMEOUT_S)", kind="body_timeout",
                           headers={"Connection": "close"}) from None
    if deadline is not None:
        if deadline.expired():
            raise past_deadline_while_reading(deadline, size, arriving=False)
        deadline.idle_since = time.monotonic()  # the work starts now: a wait for a thread past it is the worker's
    return b"".join(chunks)


#: colons (a LETOR line's ``id:value`` pairs, a JSON object's keys) that weigh as much as one
#: line or object in ``body_items`` (measured on the event loop: a LETOR line about 8 us, a pair
#: about 0.8 us; a sparse JSON feature about 0.6 us)
COLONS_PER_ITEM = 8


def body_items(body: bytes, kind: str) -> int:
    """The work a body implies, counted by numpy over its bytes (about 20 us for 96 KiB), never
    fewer than its documents or its queries: for JSON (``kind`` ``"json"``) its ``{`` and ``[``
    (every query is an object, every document an object or a row of the columnar features; one
    inside a string only counts more), for LETOR text its lines (a document each); and for
    either, one more per ``COLONS_PER_ITEM`` colons (a sparse document's keys, a line's pairs)."""
    a = np.frombuffer(body, dtype=np.uint8)
    colons = int(np.count_nonzero(a == 0x3A)) // COLONS_PER_ITEM
    if kind == "text":
        return int(np.count_nonzero(a == 0x0A)) + 1 + colons
    return int(np.count_nonzero((a | 0x20) == 0x7B)) + colons  # "[" is 0x5B, "{" 0x7B: they differ in bit 0x20 only


JSON_TYPES = frozenset({"application/json"})
TEXT_TYPES = frozenset({"text/plain"})


def body_kind(request: Request, *, text: bool = True) -> str:
    """``"json"`` for ``Content-Type: application/json`` (or ``application/<x>+json``), ``"text"``
    for ``text/plain`` (a LETOR/SVMlight body) where the endpoint takes one; HTTP 415 with a hint
    for anything else, a missing type included (a LETOR body read as JSON would get a misleading
    error)."""
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if ctype in JSON_TYPES or (ctype.startswith("application/") and ctype.endswith("+json")):
        return "json"
    if text and ctype in TEXT_TYPES:
        return "text"
    accepted = "application/json, or text/plain for LETOR lines" if text else "application/json"
    got = f"Content-Type {ctype!r}" if ctype else "no Content-Type"
    raise ServiceError(415, f"{request.url.path} takes {accepted}; the request has {got} "
                            "(curl: -H 'Content-Type: application/json')", kind="unsupported_media_type")

