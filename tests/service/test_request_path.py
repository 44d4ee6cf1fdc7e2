"""Issue 37, the request path: reproductions 1, 3, 4, 5 and 11 against ``python -m tunemix.service`` with two
workers (no worker lost, the documented 4xx/503/504, /health answered meanwhile), and the
deadline, the explain lane's budget and repeated keys in-process."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from fastapi.testclient import TestClient

from tests.service.conftest import N_FEATURES, HealthWatch, rank_body, ready_client, vm, wait_ready, worker_pids
from tunemix.core.deadline import BudgetExceeded, Deadline, DeadlineExceeded, check_deadline
from tunemix.core.evaluation import evaluate as evaluate_offsets
from tunemix.service.deadlines import TIMEOUT_HEADER, deadline_answer, request_seconds
from tunemix.service.errors import ServiceError
from tunemix.service.observability import Metrics
from tunemix.service.settings import DECODED_BODY_MULTIPLE, Settings

DEFAULTS = Settings()
JSON = {"Content-Type": "application/json"}
X = np.random.default_rng(37).random((300, N_FEATURES)).round(4)


# ---------------------------------------------------------------------------- reproduction 1
def many_empty_lists(head: bytes, tail: bytes, count: int) -> bytes:
    return head + b"[]," * (count - 1) + b"[]" + tail


BODIES_1 = {  # the bodies: 1,390,000 empty lists where ids or labels go (4.17 MB and 3 MB)
    "fuse ids": ("/fuse", many_empty_lists(b'{"queries":[{"qid":"q","systems":[{"ids":[', b"]}]}]}", 1_390_000),
                 ["query 'q' (queries[0]): systems[0].ids[0]", "Expected"]),
    "evaluate docids": ("/evaluate", many_empty_lists(b'{"queries":[{"qid":"q","labels":[0],"docids":[',
                                                      b'],"scores":[0]}]}', 1_390_000),
                        ["query 'q' (queries[0]): docids[0]", "Expected"]),
    "evaluate labels": ("/evaluate", many_empty_lists(b'{"queries":[{"qid":"q","labels":[', b"]}]}", 1_000_000),
                        ["query 'q' (queries[0]): labels[0]", "Expected `int`"]),
}


@pytest.mark.parametrize("name", sorted(BODIES_1))
def test_a_million_empty_lists_is_a_422_and_the_worker_lives(app_two: tuple[str, subprocess.Popen[bytes]],
                                                           name: str) -> None:
    """Reproduction 1: pydantic took 4.1 CPU-s to validate and 4.7 to list the errors, each one
    call holding the GIL (the worker was killed, peak 3 GB). msgspec stops at the first error."""
    url, proc = app_two
    path, body, words = BODIES_1[name]
    pids = worker_pids(proc.pid)
    resting = {p: vm(p, "VmRSS") for p in pids}
    with HealthWatch(url) as watch, httpx.Client(base_url=url, timeout=None) as c:
        for _ in range(2):  # the two tries
            r = c.post(path, content=body, headers=JSON)
            assert r.status_code == 422, r.text[:300]
            for w in words:
                assert w in r.json()["detail"], (w, r.text[:300])
            assert c.get("/health").status_code == 200
    assert worker_pids(proc.pid) == pids and watch.failed is None
    assert watch.worst < 2.0  # one linear decode (about 0.1 s); twice a second for a busy machine
    for p in pids:
        assert vm(p, "VmHWM") - resting[p] <= DECODED_BODY_MULTIPLE * DEFAULTS.max_body_bytes


# ---------------------------------------------------------------------------- reproduction 5
def test_declared_lengths_hold_nothing(app_two: tuple[str, subprocess.Popen[bytes]]) -> None:
    """Reproduction 5: 16 connections that declare 4 MiB bodies and send one byte made every /rank
    answer 503 for 30 s. Each asks ``Expect: 100-continue``: the ``100 Continue`` it gets is the
    event that the application is reading its body (where the declared length was reserved)."""
    url, _ = app_two
    port = int(url.rsplit(":", 1)[1])
    held = []
    try:
        for _ in range(16):
            sock = socket.create_connection(("127.0.0.1", port))
            sock.sendall(b"POST /rank HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         + f"Content-Length: {DEFAULTS.max_body_bytes}\r\nExpect: 100-continue\r\n\r\n".encode())
            held.append(sock)
        for sock in held:
            sock.settimeout(None)
            got = b""
            while b"\r\n\r\n" not in got:
                got += sock.recv(4096)
            assert got.startswith(b"HTTP/1.1 100 "), got[:200]
            sock.sendall(b"{")
        body = json.dumps(rank_body(X[:100], [100])).encode()
        for _ in range(24):  # fresh connections: both workers meet them
            r = httpx.post(url + "/rank", content=body, headers={**JSON, "Connection": "close"}, timeout=None)
            assert r.status_code == 200, r.text[:300]
        assert httpx.get(url + "/ready", timeout=None).status_code == 200
    finally:
        for sock in held:
            sock.close()


# ---------------------------------------------------------------------------- reproduction 3
def test_explain_traffic_never_starves_rank(app_two: tuple[str, subprocess.Popen[bytes]]) -> None:
    """Reproduction 3: two clients send explain requests back to back while a third sends plain
    /rank requests of 100 documents; every /rank is answered, and explanations were being worked on
    before and after them (the latency figure: bench.bench_request_cost's explain lane)."""
    url, _ = app_two
    explain_body = json.dumps(rank_body(X[:100], [100], explain=3, top_k=DEFAULTS.explain_max_documents)).encode()
    plain = json.dumps(rank_body(X[:100], [100])).encode()
    done = [0, 0]
    stop = threading.Event()
    errors: list[str] = []

    def explain(k: int) -> None:
        with httpx.Client(base_url=url, timeout=None) as c:
            while not stop.is_set():
                r = c.post("/rank", content=explain_body, headers=JSON)
                if r.status_code != 200 or "explanation" not in r.text:
                    errors.append(r.text[:300])
                done[k] += 1

    threads = [threading.Thread(target=explain, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    try:
        while min(done) < 1:  # both explain clients have been answered once: the traffic runs
            if errors:
                break
            threading.Event().wait(0.01)
        before = list(done)
        with httpx.Client(base_url=url, timeout=None) as c:
            for _ in range(40):
                r = c.post("/rank", content=plain, headers=JSON)
                assert r.status_code == 200, r.text[:300]
        while not errors and any(d <= b for d, b in zip(done, before, strict=True)):
            threading.Event().wait(0.01)  # each explain client is answered again after the plain ones
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not errors, errors[:2]


# ---------------------------------------------------------------------------- in-process
@pytest.fixture(scope="module")
def client(served_dir: Path) -> Iterator[TestClient]:
    with ready_client(Settings(models_dir=served_dir, default_model="default")) as c:
        wait_ready(c)
        yield c


def test_an_escaped_explain_key_is_parsed_and_never_explained_on_the_event_loop(
        client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """Reproduction 4: ``"\\u0065xplain": 5`` passed the byte check for ``"explain`` and ran the
    explanation on the event loop. The body is parsed: it is an explain request, and the
    explanation runs on a thread with no event loop."""
    from tunemix.service import rank_explain

    on_loop: list[bool] = []
    real = rank_explain.explain_rows

    def spy(*args: Any, **kwargs: Any) -> Any:
        try:
            asyncio.get_running_loop()
            on_loop.append(True)
        except RuntimeError:
            on_loop.append(False)
        return real(*args, **kwargs)

    monkeypatch.setattr(rank_explain, "explain_rows", spy)
    body = json.dumps(rank_body(X[:9], [9], top_k=2)).encode()[:-1] + b',"\\u0065xplain":5}'
    assert len(body) < DEFAULTS.inline_max_bytes  # small enough to have been run on the loop
    r = client.post("/rank", content=body, headers=JSON)
    assert r.status_code == 200, r.text
    assert all("explanation" in d for d in r.json()["results"][0]["ranking"])
    assert on_loop == [False]


def test_explain_with_a_top_k_beyond_64_bits_is_answered(client: TestClient) -> None:
    """Found by bench.cost_search: ``"explain"`` with ``"top_k": 10**30`` was a 500 (numpy could
    not take the integer); top_k beyond every list is every document."""
    r = client.post("/rank", json=rank_body(X[:4], [4], explain=2, top_k=10**30))
    assert r.status_code == 200, r.text
    assert [len(q["ranking"]) for q in r.json()["results"]] == [4]
    assert all("explanation" in d for d in r.json()["results"][0]["ranking"])


@pytest.mark.parametrize(("path", "body", "words"), [
    ("/rank", b'{"queries":[{"qid":"q","ids":["a"],"features":[[1,2,3,4,5]]}],"top_k":1,"top_k":2}',
     ["top_k", "twice"]),
    ("/rank", b'{"queries":[{"qid":"q","qid":"r","ids":["a"],"features":[[1,2,3,4,5]]}]}',
     ["query 'r' (queries[0])", "'qid' appears twice"]),
    ("/rank", b'{"queries":[{"qid":"q","documents":[{"id":"a","features":[1,2,3,4,5],"id":"b"}]}]}',
     ["query 'q' (queries[0]): documents[0]", "'id'"]),
    ("/evaluate", b'{"queries":[{"qid":"e","labels":[1,0],"scores":[1,2]}],"convention":"trec",'
                  b'"convention":"yahoo"}', ["body", "'convention' appears twice"]),
    ("/fuse", b'{"queries":[{"qid":"f","systems":[{"ids":["a"],"scores":[1],"scores":[2]}]}]}',
     ["query 'f' (queries[0]): systems[0]", "'scores'"]),
])
def test_a_repeated_key_is_a_422_naming_it(client: TestClient, path: str, body: bytes, words: list[str]) -> None:
    """Reproduction 11 (keys): the last of a repeated key won silently."""
    r = client.post(path, content=body, headers=JSON)
    assert r.status_code == 422, r.text
    for w in words:
        assert w in r.json()["detail"], (w, r.text)


def test_the_deadline_stops_the_work_and_the_worker_is_free(client: TestClient,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """An evaluation that reaches its per-measure check past the deadline is stopped there: 504
    saying what to do; the next request is served. The work waits for the event (its deadline
    passed), not for a guessed time."""
    from tunemix.core.deadline import current_deadline
    from tunemix.service.routers import evaluate as evaluate_module

    real = evaluate_module.evaluate

    def slow(*args: Any, **kwargs: Any) -> Any:
        deadline = current_deadline()
        assert deadline is not None  # the request's deadline reached the thread
        while not deadline.expired():
            threading.Event().wait(max(deadline.remaining(), 0.001))
        return real(*args, **kwargs)

    monkeypatch.setattr(evaluate_module, "evaluate", slow)
    body = {"queries": [{"qid": "a", "labels": [2, 0, 1], "scores": [0.9, 0.8, 0.3]}], "metrics": ["ndcg@3", "err"]}
    r = client.post("/evaluate?timeout_s=0.05", json=body)
    assert r.status_code == 504, r.text
    detail = r.json()["detail"]
    assert "deadline of 0.05 s passed" in detail and "before ndcg@3" in detail
    assert "?timeout_s=" in detail and "TUNEMIX_MAX_REQUEST_TIMEOUT_S" in detail
    monkeypatch.setattr(evaluate_module, "evaluate", real)
    assert client.post("/evaluate", json=body).status_code == 200


def test_a_bad_timeout_is_a_422(client: TestClient) -> None:
    body = {"queries": [{"qid": "a", "labels": [1], "scores": [0.9]}]}
    r = client.post("/evaluate?timeout_s=soon", json=body)
    assert r.status_code == 422 and "timeout_s" in r.json()["detail"], r.text
    r = client.post("/fuse", json={"queries": [{"qid": "f", "systems": [{"ids": ["a"]}]}]},
                    headers={TIMEOUT_HEADER: "-1"})
    assert r.status_code == 422 and TIMEOUT_HEADER in r.json()["detail"], r.text


def test_the_asked_deadline_is_capped_and_the_default_documented(monkeypatch: pytest.MonkeyPatch) -> None:
    class Asked:
        def __init__(self, header: str | None, param: str | None) -> None:
            self.headers = {TIMEOUT_HEADER: header} if header is not None else {}
            self.query_params = {"timeout_s": param} if param is not None else {}
            # the query string is read only when there is one
            self.scope = {"query_string": f"timeout_s={param}".encode() if param is not None else b""}

    settings = Settings(request_timeout_s=10, max_request_timeout_s=60)
    assert request_seconds(Asked(None, None), settings) == 10  # type: ignore[arg-type]
    assert request_seconds(Asked("2.5", None), settings) == 2.5  # type: ignore[arg-type]
    assert request_seconds(Asked("30", "20"), settings) == 20  # type: ignore[arg-type]
    assert request_seconds(Asked(None, "60"), settings) == 60  # type: ignore[arg-type]
    for header, param, where in (("61", None, TIMEOUT_HEADER), (None, "3600", "timeout_s"), ("5", "60.5", "timeout_s")):
        with pytest.raises(ServiceError) as refused:
            request_seconds(Asked(header, param), settings)  # type: ignore[arg-type]
        assert refused.value.status == 422 and where in refused.value.message, refused.value.message
        assert "60 s (TUNEMIX_MAX_REQUEST_TIMEOUT_S)" in refused.value.message
    for key in ("TUNEMIX_REQUEST_TIMEOUT_S", "TUNEMIX_MAX_REQUEST_TIMEOUT_S", "TUNEMIX_EXPLAIN_TIMEOUT_S"):
        monkeypatch.delenv(key, raising=False)
    fresh = Settings(_env_file=None)  # type: ignore[call-arg]
    assert (fresh.request_timeout_s, fresh.max_request_timeout_s, fresh.explain_timeout_s) == (10.0, 60.0, 5.0)


def test_work_that_waited_past_its_deadline_never_starts() -> None:
    """503 "busy" only when the deadline passed while the work waited behind other requests; 504
    when it passed during the request's own work or with nothing else in flight."""
    ran: list[int] = []
    now = time.monotonic()
    queued_behind_others = Deadline(at=now - 0.01, seconds=1.0, busy=lambda: True)  # started 1 s ago, passed since
    with pytest.raises(DeadlineExceeded) as info:
        queued_behind_others.run(ran.append, 1)
    assert ran == [] and info.value.busy
    answer = deadline_answer(info.value, Metrics())
    assert answer.status_code == 503 and answer.headers["Retry-After"] == "1"
    assert b"busy with other requests" in answer.body
    alone = Deadline(at=now - 0.01, seconds=1.0, busy=lambda: False)
    with pytest.raises(DeadlineExceeded) as info:
        alone.run(ran.append, 1)
    assert ran == [] and not info.value.busy
    assert deadline_answer(info.value, Metrics()).status_code == 504
    # the request's own first piece of work used the time: the next piece's start is a 504, busy or not
    own = Deadline.after(0.05)
    own.busy = lambda: True

    def until_past() -> None:
        while not own.expired():
            threading.Event().wait(max(own.remaining(), 0.001))

    own.run(until_past)
    with pytest.raises(DeadlineExceeded) as info:
        own.run(ran.append, 1)
    assert ran == [] and not info.value.busy
    answer = deadline_answer(info.value, Metrics())
    assert answer.status_code == 504 and b"busy" not in answer.body


def test_a_short_deadline_alone_in_the_worker_is_a_504_and_a_long_one_a_422(
        client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """?timeout_s=0.05 whose deadline passes before the work starts, nothing else in flight: 504
    (the deadline passed), not 503 (the worker was not busy). A deadline above the server's bound
    (TUNEMIX_MAX_REQUEST_TIMEOUT_S, 600 in these tests) is a 422 naming timeout_s and the bound."""
    from tunemix.service import deadlines as deadlines_module

    real = deadlines_module.Deadline.after

    def passed(seconds: float, **kw: Any) -> Deadline:
        d = real(seconds, **kw)
        while not d.expired():  # the deadline passes before any work starts
            threading.Event().wait(max(d.remaining(), 0.001))
        return d

    monkeypatch.setattr(deadlines_module.Deadline, "after", passed)
    body = {"queries": [{"qid": "a", "labels": [2, 0, 1], "scores": [0.9, 0.8, 0.3]}]}
    r = client.post("/evaluate?timeout_s=0.05", json=body)
    assert r.status_code == 504, r.text
    assert "deadline of 0.05 s passed" in r.json()["detail"] and "busy" not in r.json()["detail"]
    monkeypatch.setattr(deadlines_module.Deadline, "after", real)
    r = client.post("/evaluate?timeout_s=601", json=body)
    assert r.status_code == 422, r.text
    assert "timeout_s" in r.json()["detail"] and "600 s (TUNEMIX_MAX_REQUEST_TIMEOUT_S)" in r.json()["detail"]
    r = client.post("/rank?timeout_s=601", json=rank_body(np.zeros((2, N_FEATURES), dtype=np.float32), [2]))
    assert r.status_code == 422 and "timeout_s" in r.json()["detail"], r.text
    assert client.post("/evaluate?timeout_s=600", json=body).status_code == 200


def test_the_library_checks_the_deadline_per_measure() -> None:
    labels, scores, off = np.array([1, 0, 2]), np.array([0.3, 0.2, 0.9]), np.array([0, 3])
    with Deadline.after(-1).active(), pytest.raises(DeadlineExceeded, match="before ndcg@1"):
        evaluate_offsets(labels, scores, off, ["ndcg@1", "err"], "yahoo")
    with Deadline.after(60).active():  # a live deadline changes nothing
        live = evaluate_offsets(labels, scores, off, ["ndcg@1", "err"], "yahoo").mean
    assert live == evaluate_offsets(labels, scores, off, ["ndcg@1", "err"], "yahoo").mean
    check_deadline("no deadline active: nothing to check")


def test_forest_rows_are_counted_against_the_budget(served_dir: Path) -> None:
    """The row budget is enforced as rows are scored: a budget of n rows lets a list of n documents
    be scored once, not twice."""
    from tunemix.core.scoring.ensemble_model import load_model

    model = load_model(served_dir / "default" / "v1")[0]
    off = np.array([0, 9], dtype=np.int64)
    with Deadline.after(60, row_budget=9).active() as d:
        model.score(X[:9], off)
        assert d.rows == 9
        with pytest.raises(BudgetExceeded, match="budget of 9 forest rows"):
            model.score(X[:9], off)


def test_explanations_past_their_budget_or_deadline_are_cut_off(served_dir: Path) -> None:
    """The exact explanations (the default) score no coalitions: an explain budget of one row per
    document still answers them. The sampled whole-model game (``method="shapley"``, what a
    rank-fusion mix is explained by) scores its coalitions through the forest: there the row budget
    stops the work as the rows are scored. An explanation deadline already past stops the work
    before its first query (504)."""
    from tunemix.core.explain.explanation import explain_rows
    from tunemix.core.scoring.ensemble_model import load_model

    body = rank_body(X[:9], [9], explain=2, top_k=2)
    with ready_client(Settings(models_dir=served_dir, default_model="default", explain_budget=1)) as c:
        wait_ready(c)
        r = c.post("/rank", json=body)
        assert r.status_code == 200, r.text
        assert all(d["explanation"]["exact"] for d in r.json()["results"][0]["ranking"])
    model = load_model(served_dir / "default" / "v1")[0]
    off = np.array([0, 9], dtype=np.int64)
    with Deadline.after(60, row_budget=9).active(), pytest.raises(BudgetExceeded, match="budget of 9 forest rows"):
        explain_rows(model, X[:9], off, [0], method="shapley")
    with ready_client(Settings(models_dir=served_dir, default_model="default", explain_timeout_s=1e-9)) as c:
        wait_ready(c)
        r = c.post("/rank", json=body)
        assert r.status_code == 504 and "explanations" in r.json()["detail"], r.text
        assert c.post("/rank", json=rank_body(X[:9], [9])).status_code == 200


# ---------------------------------------------------------------------------- reproduction 11 (the protocol)
def read_until_closed(sock: socket.socket) -> bytes:
    sock.settimeout(None)
    out = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:  # a reset loses what the server wrote: the test then fails on it
            return out + b"<reset>"
        if not chunk:
            return out
        out += chunk


def test_chunk_extensions_count_against_the_body_limit(app_two: tuple[str, subprocess.Popen[bytes]]) -> None:
    """llhttp skips chunk extensions: 200 MiB of them were read for a body of a few bytes. The wire
    bytes of a chunked body are bounded: 413 and the connection closed; a chunked body within the
    limit, extensions and all, is served."""
    url, proc = app_two
    port = int(url.rsplit(":", 1)[1])
    pids = worker_pids(proc.pid)
    head = b"POST /rank HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    chunk = b"1;ext=" + b"e" * 65536 + b"\r\n \r\n"  # one byte of body, 64 KiB of extension
    with HealthWatch(url) as watch:
        sock = socket.create_connection(("127.0.0.1", port))
        sent = 0
        with contextlib.suppress(OSError):  # the server closes once it has answered
            sock.sendall(head)
            while sent < 2 * DEFAULTS.max_body_bytes:
                sock.sendall(chunk)
                sent += len(chunk)
        answer = read_until_closed(sock)
        sock.close()
    assert answer.startswith(b"HTTP/1.1 413 "), answer[:300]
    assert b"TUNEMIX_MAX_BODY_BYTES" in answer and b"chunk" in answer
    assert worker_pids(proc.pid) == pids and watch.failed is None
    body = json.dumps(rank_body(X[:3], [3])).encode()
    framed = b"".join(b"%x;note=%s\r\n%s\r\n" % (len(body[i:i + 50]), b"x" * 100, body[i:i + 50])
                      for i in range(0, len(body), 50)) + b"0\r\n\r\n"
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(head.replace(b"Host: x\r\n", b"Host: x\r\nConnection: close\r\n") + framed)
    answer = read_until_closed(sock)
    sock.close()
    assert answer.startswith(b"HTTP/1.1 200 "), answer[:300]


def test_an_answer_before_the_body_reaches_a_client_still_sending_it(
        app_two: tuple[str, subprocess.Popen[bytes]]) -> None:
    """A body declared past the limit is answered 413 before it is read. A client that asked
    ``Connection: close`` and sends its whole body before it reads (as HTTP clients do) gets the
    whole body taken and the 413, then end of file: the closing connection reads and drops what
    still comes (closed at once, with unread bytes, it would reset and the client would see a
    broken pipe instead of the answer)."""
    url, proc = app_two
    port = int(url.rsplit(":", 1)[1])
    pids = worker_pids(proc.pid)
    length = DEFAULTS.max_body_bytes + 1
    for _ in range(3):
        sock = socket.create_connection(("127.0.0.1", port))
        sock.sendall(b"POST /rank HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nConnection: close\r\n"
                     + f"Content-Length: {length}\r\n\r\n".encode())
        piece, sent = b" " * 65536, 0
        while sent < length:  # raises (broken pipe, reset) if the server closes with bytes unread
            sent += sock.send(piece[:length - sent])
        answer = read_until_closed(sock)
        sock.close()
        assert answer.startswith(b"HTTP/1.1 413 "), answer[:300]
        assert b"TUNEMIX_MAX_BODY_BYTES" in answer and not answer.endswith(b"<reset>")
    assert worker_pids(proc.pid) == pids


def test_pipelined_requests_past_32_kib_are_all_served(app_two: tuple[str, subprocess.Popen[bytes]]) -> None:
    """More than 32 KiB (the head limit) of small pipelined requests in one send reset the
    connection: the head limit counted the whole packet. Each is now answered, in order."""
    url, _ = app_two
    port = int(url.rsplit(":", 1)[1])
    one = b"GET /health HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"p" * 200 + b"\r\n\r\n"
    count = (3 * DEFAULTS.max_header_bytes) // len(one) + 1
    body = json.dumps(rank_body(X[:3], [3])).encode()
    post = (b"POST /rank HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
    last = b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(one * count + post + one * count + last)
    answer = read_until_closed(sock)
    sock.close()
    assert b"<reset>" not in answer
    statuses = [part[:3] for part in answer.split(b"HTTP/1.1 ")[1:]]  # bodies end without a line break
    assert len(statuses) == 2 * count + 2, (len(statuses), 2 * count + 2)
    assert set(statuses) == {b"200"}, set(statuses)
    assert b'"ranking"' in answer


def test_the_installed_uvicorn_is_in_the_pinned_range() -> None:
    """``tunemix.service.http_protocol`` subclasses uvicorn's internal ``HttpToolsProtocol``: pyproject.toml pins
    the uvicorn versions its tests ran with (docs/architecture.md names them)."""
    import re
    import tomllib
    from importlib.metadata import version

    from packaging.specifiers import SpecifierSet

    deps = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())["project"]
    spec = next(re.sub(r"^uvicorn(\[[^\]]*\])?", "", d) for d in deps["dependencies"] if d.startswith("uvicorn"))
    assert "<" in spec, f"uvicorn is not pinned from above: {spec!r}"
    assert version("uvicorn") in SpecifierSet(spec), (version("uvicorn"), spec)


def test_a_deadline_passed_behind_other_requests_is_a_503(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two evaluations hold both Python lanes; a third, ?timeout_s=0.05, waits for a lane until its
    deadline has passed (waited for on the deadline, not a guessed time). One holder is let go: the
    third never starts and is answered 503 "busy" with Retry-After (the other holder is in flight)."""
    from tunemix.service import deadlines as deadlines_module
    from tunemix.service.routers import evaluate as evaluate_module

    real_evaluate = evaluate_module.evaluate
    entered = threading.Semaphore(0)
    release = threading.Semaphore(0)

    def held(*args: Any, **kwargs: Any) -> Any:
        entered.release()
        assert release.acquire(timeout=60), "never released"
        return real_evaluate(*args, **kwargs)

    real_after = deadlines_module.Deadline.after
    short: list[Deadline] = []
    started = threading.Event()

    def after(seconds: float, **kw: Any) -> Deadline:
        d = real_after(seconds, **kw)
        if seconds == 0.05:
            short.append(d)
            started.set()
        return d

    monkeypatch.setattr(evaluate_module, "evaluate", held)
    monkeypatch.setattr(deadlines_module.Deadline, "after", after)
    body = {"queries": [{"qid": "a", "labels": [2, 0, 1], "scores": [0.9, 0.8, 0.3]}]}
    answers: dict[str, Any] = {}

    def send(key: str, path: str) -> None:
        answers[key] = client.post(path, json=body)

    holders = [threading.Thread(target=send, args=(f"holder{i}", "/evaluate")) for i in range(2)]
    for t in holders:
        t.start()
    for _ in holders:
        assert entered.acquire(timeout=60), "the holders did not take the lanes"
    late = threading.Thread(target=send, args=("late", "/evaluate?timeout_s=0.05"))
    late.start()
    try:
        assert started.wait(60), "the late request's deadline never started"  # before its body is read
        while not short[0].expired():
            threading.Event().wait(max(short[0].remaining(), 0.001))
        release.release()  # one lane free: the late request's work finds its deadline passed
        late.join(60)
    finally:
        release.release()
        release.release()
        for t in holders:
            t.join(60)
    r = answers["late"]
    assert r.status_code == 503 and r.headers["Retry-After"] == "1", r.text
    assert "busy with other requests" in r.json()["detail"]
    assert [answers[f"holder{i}"].status_code for i in range(2)] == [200, 200]
