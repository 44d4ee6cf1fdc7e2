"""uvicorn's httptools protocol with a deadline and a size limit on every request's head and chunked body.

uvicorn reads a request line and headers for as long as a client takes and however large they grow
(encode/uvicorn#157): 100 connections sending one header byte every 5 s stay open indefinitely, and
one 188 MiB header is read and answered (41 CPU-s, httptools appends each fragment). This subclass
closes both, as nginx's ``client_header_timeout`` and ``large_client_header_buffers`` do:

- a deadline: ``TUNEMIX_HEADER_TIMEOUT_S`` seconds from the connection's start (or from the end of
  the previous response on a kept-alive connection) until the head is complete. Past it, a request
  begun gets HTTP 408 and the connection is closed; an idle connection is closed without an answer,
  and so is one still sending the body of a request already answered (say 413 from its declared
  length).
- a size limit: at most ``TUNEMIX_MAX_HEADER_BYTES`` bytes of request line and headers; the parser is
  never fed more. Past it: HTTP 431 and the connection is closed.

- chunked bodies: at most ``TUNEMIX_MAX_BODY_BYTES`` + ``TUNEMIX_MAX_HEADER_BYTES`` bytes on the wire,
  chunk sizes, chunk extensions and trailers included (llhttp skips extensions: 200 MiB of them are
  read for a body of a few bytes). Past it: HTTP 413 and the connection is closed.
- pipelined requests: each request's head is counted on its own (``data_received`` feeds the parser
  a slice at a time while a head is awaited or a chunked body read, and a body of declared length
  exactly): any number of small pipelined requests in one packet is served, in order.

- answers: each request's scope carries ``tunemix-answer-written`` (``tunemix.service.body.ANSWER_WRITTEN``),
  which waits until the answer sent has left the process, its bytes still unsent counted in the
  worker's in-flight bytes meanwhile (``tunemix.service.body.AnswerBytes``; past them, while
  other answers or large bodies hold bytes, the connection is reset at once). The client must take
  ``TUNEMIX_BODY_MIN_RATE`` x ``TUNEMIX_BODY_STALL_S`` bytes of it in every ``TUNEMIX_BODY_STALL_S``
  seconds, and all of it within ``TUNEMIX_BODY_TIMEOUT_S``; else the connection is reset and the
  unsent bytes dropped (a plain close waits for them to be written: for ever, for a client that
  reads nothing).
- arrival: each request's scope carries ``tunemix-arrival`` (``tunemix.service.observability.ARRIVAL``),
  the ``time.perf_counter()`` of the moment the parser met the first byte of its head: the metrics
  measure from it the time the request waited before its handler started
  (``tunemix_http_request_queue_seconds``).

A refusal is written, the sending side shut (the client reads the answer, then end of file) and what
the client still sends is read and dropped (closing at once, with unread bytes, would reset the
connection and could lose the answer): until the client has sent nothing for ``LINGER_IDLE_S``
seconds, and for at most ``LINGER_MAX_S`` seconds in all (nginx's ``lingering_timeout`` and
``lingering_time``). The same holds for an answer the application gives before it has read the
whole body, on a connection that then closes (the client asked ``Connection: close``, say): the
request cycle's close of such a connection lingers (``_LingeringClose``), so that a client still
uploading a large body reads its 413 or 503 instead of a reset.

``python -m tunemix.service`` serves with this class (``tunemix.service.__main__``).
Where httptools is not installed (the
``serve`` extra brings it) uvicorn's h11 protocol is used with h11's own head size limit, which answers
400, and no deadline: ``python -m tunemix.service`` logs a warning then.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import struct
import time
from collections.abc import Callable
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from tunemix.service.body import ANSWER_WRITTEN
from tunemix.service.observability import ARRIVAL
from tunemix.service.settings import get_settings

#: a refused connection's further bytes are read and dropped until none came for this many seconds ...
LINGER_IDLE_S = 1.0
#: ... and for at most this many seconds in all
LINGER_MAX_S = 10.0


class _LingeringClose:
    """The connection's transport as the request cycle and the protocol's timers see it: ``close``
    lingers (``BoundedHttpToolsProtocol._linger``) while a request's body is still arriving, and is
    left to the linger once it has begun; everything else is the transport's."""

    def __init__(self, transport: asyncio.Transport, protocol: BoundedHttpToolsProtocol) -> None:
        self._transport = transport
        self._protocol = protocol

    def close(self) -> None:
        p = self._protocol
        if p._lingering:
            return  # the linger closes the connection when the client has stopped sending
        if p._body_unread():
            p._linger()
            return
        self._transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)

_REASONS = {408: b"Request Timeout", 413: b"Content Too Large", 431: b"Request Header Fields Too Large"}
#: bytes fed to the parser at a time while a head is awaited or a chunked body is read
SLICE = 4096


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """``HttpToolsProtocol`` with a head deadline and a head size limit (see the module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        settings = get_settings()
        self.head_timeout = settings.header_timeout_s
        self.max_head_bytes = settings.max_header_bytes
        #: wire bytes a chunked body may take: the body limit and, for its framing, the head limit
        self.max_chunked_bytes = settings.max_body_bytes + settings.max_header_bytes
        self._awaiting_head = True  # the connection waits for a request's head (none begun, or not complete)
        self._head_begun = False  # the parser has seen the first byte of that request
        self._head_bytes = 0
        self._head_timer: asyncio.TimerHandle | None = None
        self._refused = False
        self._messages = 0  # messages completed on this connection (tells where a fed slice ended one)
        self._chunked = False  # the current request's body is chunked
        self._wire_bytes = 0  # and the bytes of it received so far, framing and extensions included
        self._body_left = 0  # bytes still to come of a body of declared length
        self._lingering = False  # answered: what the client still sends is dropped until it stops
        self._linger_last = 0.0
        self._linger_end = 0.0
        #: an answer's writing: its time in all, and each stall window's time and bytes
        self.write_timeout = settings.body_timeout_s
        self.write_stall = settings.body_stall_s
        self.write_window = int(settings.body_min_rate * settings.body_stall_s)

    # ------------------------------------------------------------------ connection
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._socket_transport = transport
        self.transport = _LingeringClose(transport, self)  # type: ignore[assignment]
        # writing paused from the first byte the transport buffers, resumed when its buffer is
        # empty: the end of an answer's writing is an event (uvicorn's flow control then waits for
        # an empty buffer, not one below a quarter of 64 KiB, before it writes more)
        transport.set_write_buffer_limits(high=0)
        self._arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_head_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        """Feed ``data`` to the parser a slice at a time while a head is awaited or a chunked body
        read, so that each request's bytes are counted on their own even when a client pipelines
        many requests in one packet (counted over the packet, 32 KiB of small pipelined requests
        would look like one oversized head and reset the connection). A slice in which a request
        ended counts whole towards the next one's head: a head may be refused up to ``SLICE``
        bytes early when pipelined, never let past its limit."""
        if self._lingering:
            self._linger_last = self.loop.time()
            return
        view = memoryview(data)
        while view and not self._refused and not self.transport.is_closing():
            if self._awaiting_head:
                room = self.max_head_bytes - self._head_bytes
                if room <= 0:
                    self._refuse(431, f"the request line and headers exceed {self.max_head_bytes} bytes "
                                      "(TUNEMIX_MAX_HEADER_BYTES)")
                    return
                piece, view = view[:min(room, SLICE)], view[min(room, SLICE):]
                self._feed(bytes(piece), head=True)
            elif self._chunked:
                piece, view = view[:SLICE], view[SLICE:]
                self._wire_bytes += len(piece)
                if self._wire_bytes > self.max_chunked_bytes:
                    self._refuse_body(f"the chunked body exceeds {self.max_chunked_bytes} bytes on the wire "
                                      "(TUNEMIX_MAX_BODY_BYTES, and TUNEMIX_MAX_HEADER_BYTES for its chunk sizes, "
                                      "extensions and trailers); send it with Content-Length, or in larger chunks")
                    return
                self._feed(bytes(piece), head=False)
            else:  # a body of declared length: exactly its bytes (read_body bounds them), then the next head
                n = max(self._body_left, 1)
                piece, view = view[:n], view[n:]
                self._feed(bytes(piece), head=False, exact=True)

    def _feed(self, piece: bytes, *, head: bool, exact: bool = False) -> None:
        """``piece`` to the parser; ``head``: it was fed while a head was awaited; ``exact``: it
        holds the rest of a body of declared length and nothing after it."""
        before = self._messages
        super().data_received(piece)
        if not self._awaiting_head or exact:
            return
        if self._messages != before:
            self._head_bytes = len(piece)  # the next head may have begun in this slice: count it whole
        elif head:
            self._head_bytes += len(piece)

    # ------------------------------------------------------------------ parser callbacks
    def on_message_begin(self) -> None:
        self._head_begun = True
        super().on_message_begin()
        self.scope["extensions"] = {ANSWER_WRITTEN: self.answer_written,  # type: ignore[dict-item]
                                    ARRIVAL: time.perf_counter()}  # type: ignore[dict-item]

    def on_headers_complete(self) -> None:
        self._awaiting_head = False
        self._head_begun = False
        self._cancel_head_timer()
        self._chunked = any(name == b"transfer-encoding" and b"chunked" in value.lower()
                            for name, value in self.headers)
        self._wire_bytes = 0
        length = next((value for name, value in self.headers if name == b"content-length"), b"0")
        self._body_left = int(length) if length.isdigit() else 0  # llhttp refuses any other length
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        self._body_left -= len(body)
        super().on_body(body)

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._messages += 1
        self._awaiting_head = True  # the next request's head, counted from here
        self._head_bytes = 0
        self._chunked = False

    def on_response_complete(self) -> None:
        super().on_response_complete()
        # the next head's deadline runs from the end of this response; it also bounds the rest of a body
        # the service answered before reading it (a 413 from the declared length)
        if not self.transport.is_closing():
            self._arm_head_timer()

    # ------------------------------------------------------------------ an answer's writing
    async def answer_written(self, count: Callable[[int], bool]) -> None:
        """Return once the answer sent has left the process (the kernel holds what the client has
        not read yet), having told ``count`` its bytes unsent; abort the connection, dropping
        them, when ``count`` refuses them (the worker holds too many), when a stall window passes
        with fewer than ``write_window`` of them written, or after ``write_timeout`` in all."""
        left = self.transport.get_write_buffer_size()
        if not left:
            return
        if not count(left):
            self._reset()
            return
        loop = self.loop
        end = loop.time() + self.write_timeout
        window_end, mark = min(end, loop.time() + self.write_stall), left
        while left:
            stalled = False
            try:
                async with asyncio.timeout_at(window_end):
                    await self.flow.drain()  # set when the buffer is empty, or the connection lost
            except TimeoutError:
                stalled = True
            left = self.transport.get_write_buffer_size()
            if left and stalled:
                if mark - left < self.write_window or window_end >= end:
                    self._reset()
                    return
                window_end, mark = min(end, loop.time() + self.write_stall), left

    def _reset(self) -> None:
        """Abort the connection with a reset: the unsent bytes in the process and in the kernel
        are dropped (closed without it, the kernel keeps trying to deliver its part for minutes)."""
        sock = self.transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.transport.abort()

    # ------------------------------------------------------------------ the deadline
    def _arm_head_timer(self) -> None:
        self._cancel_head_timer()
        self._head_timer = self.loop.call_later(self.head_timeout, self._head_timed_out)

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.transport.is_closing():
            return
        if self.cycle is not None and not self.cycle.response_complete:
            return  # a response is still being produced: its end re-arms the deadline
        if not self._awaiting_head or (not self._head_begun and self._head_bytes == 0):
            self.transport.close()  # the rest of an answered request's body, or an idle connection
            return
        self._refuse(408, f"the request line and headers did not arrive within {self.head_timeout:g} s "
                          "(TUNEMIX_HEADER_TIMEOUT_S)")

    # ------------------------------------------------------------------ refusing
    def _refuse_body(self, detail: str) -> None:
        """413 for a request whose body is being read: the application sees the client gone (its
        ``read_body`` stops) and the answer is written here, unless it has begun its own."""
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            started = cycle.response_started
            cycle.disconnected = True
            cycle.message_event.set()
            if started:  # the application's answer is being written: cut it, no linger
                self._refused = True
                self._socket_transport.close()
                return
            cycle.response_complete = True  # this protocol answers it
        self._refuse(413, detail)

    def _refuse(self, status: int, detail: str) -> None:
        """Answer ``status`` with ``{"detail": ...}``, shut the sending side, drop what the client
        still sends while it sends (``_linger``), then close."""
        self._refused = True
        self._cancel_head_timer()
        if self.cycle is not None and not self.cycle.response_complete:
            self._socket_transport.close()  # a response of an earlier request is being written: no second one
            return
        body = json.dumps({"detail": detail}).encode()
        head = [b"HTTP/1.1 %d %s\r\n" % (status, _REASONS[status])]
        head += [name + b": " + value + b"\r\n" for name, value in self.server_state.default_headers]
        head.append(b"content-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n\r\n" % len(body))
        self.transport.write(b"".join(head) + body)
        self._linger()

    def _body_unread(self) -> bool:
        """Whether a request's body is still arriving: its head is read, its end is not."""
        return not self._awaiting_head and (self._chunked or self._body_left > 0)

    def _linger(self) -> None:
        """Shut the sending side once the answer is written, then read and drop what the client
        still sends until it has sent nothing for ``LINGER_IDLE_S`` seconds, or ``LINGER_MAX_S``
        have passed; then close."""
        transport = self._socket_transport
        self._refused = self._lingering = True
        self._cancel_head_timer()
        if not transport.can_write_eof():  # pragma: no cover - TCP transports can
            transport.close()
            return
        transport.write_eof()
        with contextlib.suppress(Exception):
            transport.resume_reading()  # flow control may have paused reading while a body queued
        now = self.loop.time()
        self._linger_last, self._linger_end = now, now + LINGER_MAX_S
        self.loop.call_later(LINGER_IDLE_S, self._linger_check)

    def _linger_check(self) -> None:
        transport = self._socket_transport
        if transport.is_closing():
            return
        now = self.loop.time()
        quiet = now - self._linger_last
        if quiet >= LINGER_IDLE_S or now >= self._linger_end:
            transport.close()
            return
        self.loop.call_later(min(LINGER_IDLE_S - quiet, self._linger_end - now), self._linger_check)
