"""A request's deadline counts from its first byte: a body still arriving when it passes is cut
off with a 504 before any work (against two workers), the deadline made from the arrival stamp
the protocol gives, and what a client may ask for stated in the OpenAPI description."""

from __future__ import annotations

import json
import select
import socket
import subprocess
import time
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient
from starlette.requests import Request

from tests.service.conftest import N_FEATURES, rank_body
from tunemix.service.deadlines import start_deadline
from tunemix.service.observability import ARRIVAL
from tunemix.service.settings import Settings

DEFAULTS = Settings()


def slow_request(port: int, path: str, body: bytes, headers: str = "") -> tuple[bytes, int]:
    """Send ``body`` to ``path`` a part at a time, each part of ``TUNEMIX_BODY_MIN_RATE`` x
    ``TUNEMIX_BODY_STALL_S`` bytes within half a stall window of the last (the body keeps within
    the stall rules), until the server answers or the body has been sent: (the answer, the bytes
    of the body sent before it)."""
    part = DEFAULTS.body_min_rate * int(DEFAULTS.body_stall_s) + 1
    sock = socket.create_connection(("127.0.0.1", port))
    try:
        sock.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n{headers}"
                     f"Content-Length: {len(body)}\r\n\r\n".encode())
        sent = 0
        while sent < len(body):
            sock.sendall(body[sent:sent + part])
            sent = min(len(body), sent + part)
            readable, _, _ = select.select([sock], [], [], DEFAULTS.body_stall_s / 2)
            if readable:  # the server answered (the event): the rest of the body is never sent
                break
        answer = b""
        while b"\r\n\r\n" not in answer or len(answer.split(b"\r\n\r\n", 1)[1]) < content_length(answer):
            chunk = sock.recv(65536)
            if not chunk:
                break
            answer += chunk
        return answer, sent
    finally:
        sock.close()


def content_length(answer: bytes) -> int:
    for line in answer.split(b"\r\n\r\n", 1)[0].split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    return 0


@pytest.mark.parametrize("ask", ["?timeout_s=1", "X-Request-Timeout-S: 1\r\n"])
def test_a_body_slower_than_its_deadline_is_a_504_before_any_work(
        app_two: tuple[str, subprocess.Popen[bytes]], ask: str) -> None:
    """A /rank whose body arrives within the stall rules but takes longer than the deadline it
    asked for (1 s): the worker answers 504 once the deadline, counted from the request's first
    byte, has passed, before the body's end (nothing decoded, nothing scored) and closes the
    connection; the rest of the body, some 25 s of it, is never sent."""
    url, _ = app_two
    port = int(url.rsplit(":", 1)[1])
    x = np.random.default_rng(5).random((8000, N_FEATURES)).round(6)
    body = json.dumps(rank_body(x, [8000]), separators=(",", ":")).encode()
    part = DEFAULTS.body_min_rate * int(DEFAULTS.body_stall_s) + 1
    assert len(body) > 4 * part  # several stall windows of body
    path, headers = ("/rank" + ask, "") if ask.startswith("?") else ("/rank", ask)
    answer, sent = slow_request(port, path, body, headers)
    assert answer.startswith(b"HTTP/1.1 504 "), answer[:400]
    assert sent < len(body)  # answered while the body was arriving: no work was done
    detail = json.loads(answer.split(b"\r\n\r\n", 1)[1])["detail"]
    assert "deadline of 1 s passed (counted from its first byte) while its body was arriving" in detail, detail
    assert b"connection: close" in answer.lower()


def request_at(scope_extra: dict[str, Any], query: bytes = b"") -> Request:
    scope = {"type": "http", "method": "POST", "path": "/rank", "headers": [], "query_string": query,
             **scope_extra}
    request = Request(scope)
    return request


def test_the_deadline_starts_at_the_arrival_stamp() -> None:
    """The deadline is the asked seconds from the arrival the protocol stamped (``ARRIVAL``, a
    ``time.perf_counter()``), from the handler's start without one; made once per request."""
    from types import SimpleNamespace

    app = SimpleNamespace(state=SimpleNamespace(metrics=None))
    settings = Settings(request_timeout_s=10)
    waited = 4.0
    stamped = request_at({"extensions": {ARRIVAL: time.perf_counter() - waited}, "app": app})
    before = time.monotonic()
    deadline = start_deadline(stamped, settings)
    assert deadline.seconds == 10
    assert before + 10 - waited - 0.5 < deadline.at <= time.monotonic() + 10 - waited
    assert start_deadline(stamped, settings) is deadline  # the same deadline on every call
    unstamped = request_at({"app": app}, b"timeout_s=2")
    before = time.monotonic()
    deadline = start_deadline(unstamped, settings)
    assert deadline.seconds == 2 and before + 2 <= deadline.at <= time.monotonic() + 2


def test_the_openapi_description_states_the_deadline_bounds(client: TestClient) -> None:
    """``timeout_s`` of /rank, /evaluate and /fuse and their X-Request-Timeout-S header say what a
    client may ask: the default, the bound and its setting, counted from the request's first byte."""
    schema = client.get("/openapi.json").json()
    settings = Settings()
    for path in ("/rank", "/evaluate", "/fuse"):
        params = {(p["in"], p["name"].lower()): p for p in schema["paths"][path]["post"]["parameters"]}
        for key in (("query", "timeout_s"), ("header", "x-request-timeout-s")):
            assert key in params, (path, sorted(params))
            text = params[key]["description"]
            assert "TUNEMIX_MAX_REQUEST_TIMEOUT_S" in text and "TUNEMIX_REQUEST_TIMEOUT_S" in text, (path, text)
            assert f"{settings.max_request_timeout_s:g}" in text and f"{settings.request_timeout_s:g}" in text
            assert "first byte" in text, (path, text)
            assert params[key]["schema"].get("exclusiveMinimum") == 0, (path, params[key]["schema"])
            assert params[key]["schema"].get("maximum") == settings.max_request_timeout_s, (path, params[key])
