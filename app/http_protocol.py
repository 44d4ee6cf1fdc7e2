"""uvicorn's httptools protocol with a deadline and a size limit on every request's head.

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

A refusal is written, the sending side shut (the client reads the answer, then end of file) and what
the client still sends is discarded unread for at most ``LINGER_S`` seconds before the socket closes
(closing at once, with unread bytes, would reset the connection and could lose the answer).

``python -m app`` serves with this class (``app.__main__``). Where httptools is not installed (the
``serve`` extra brings it) uvicorn's h11 protocol is used with h11's own head size limit, which answers
400, and no deadline: ``python -m app`` logs a warning then.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from app.settings import get_settings

#: seconds a refused connection's further bytes are read and dropped before it is closed
LINGER_S = 1.0

_REASONS = {408: b"Request Timeout", 431: b"Request Header Fields Too Large"}


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """``HttpToolsProtocol`` with a head deadline and a head size limit (see the module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        settings = get_settings()
        self.head_timeout = settings.header_timeout_s
        self.max_head_bytes = settings.max_header_bytes
        self._awaiting_head = True  # the connection waits for a request's head (none begun, or not complete)
        self._head_begun = False  # the parser has seen the first byte of that request
        self._head_bytes = 0
        self._head_timer: asyncio.TimerHandle | None = None
        self._refused = False

    # ------------------------------------------------------------------ connection
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_head_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return  # lingering: read and drop
        if not self._awaiting_head:
            super().data_received(data)
            return
        room = self.max_head_bytes - self._head_bytes
        if len(data) <= room:
            self._head_bytes += len(data)
            super().data_received(data)
            return
        # feed what the limit allows: a head complete within it goes on (body bytes after it included)
        self._head_bytes = self.max_head_bytes
        super().data_received(data[:room])
        if self.transport.is_closing():
            return
        if self._awaiting_head:
            self._refuse(431, f"the request line and headers exceed {self.max_head_bytes} bytes "
                              "(TUNEMIX_MAX_HEADER_BYTES)")
            return
        self.data_received(data[room:])

    # ------------------------------------------------------------------ parser callbacks
    def on_message_begin(self) -> None:
        self._head_begun = True
        super().on_message_begin()

    def on_headers_complete(self) -> None:
        self._awaiting_head = False
        self._head_begun = False
        self._cancel_head_timer()
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._awaiting_head = True  # the next request's head, counted from here
        self._head_bytes = 0

    def on_response_complete(self) -> None:
        super().on_response_complete()
        # the next head's deadline runs from the end of this response; it also bounds the rest of a body
        # the service answered before reading it (a 413 from the declared length)
        if not self.transport.is_closing():
            self._arm_head_timer()

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
    def _refuse(self, status: int, detail: str) -> None:
        """Answer ``status`` with ``{"detail": ...}``, shut the sending side, drop what the client
        still sends for ``LINGER_S`` seconds, then close."""
        self._refused = True
        self._cancel_head_timer()
        if self.cycle is not None and not self.cycle.response_complete:
            self.transport.close()  # a response of an earlier request is being written: no second one
            return
        body = json.dumps({"detail": detail}).encode()
        head = [b"HTTP/1.1 %d %s\r\n" % (status, _REASONS[status])]
        head += [name + b": " + value + b"\r\n" for name, value in self.server_state.default_headers]
        head.append(b"content-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n\r\n" % len(body))
        self.transport.write(b"".join(head) + body)
        if self.transport.can_write_eof():
            self.transport.write_eof()
            self.loop.call_later(LINGER_S, self.transport.close)
        else:  # pragma: no cover - TCP transports can
            self.transport.close()
