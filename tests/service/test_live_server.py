"""A real uvicorn server (subprocess): /health answers while a large request is being processed,
a stalled client blocks nobody, and a reload under load loses no request and every response
carries the version that scored it."""

from __future__ import annotations

import json
import select
import socket
import threading
import time
from dataclasses import dataclass

import httpx
import numpy as np

from tests.service.conftest import N_FEATURES, LiveServer, Store, copy_version, offsets_of, rank_body

BIG_DOCS = 60_000


def raw_request(server: LiveServer, path: str, body: bytes, content_type: str = "application/json") -> socket.socket:
    """Send a whole POST on a fresh socket (returns once the kernel has taken every byte)."""
    sock = socket.create_connection(("127.0.0.1", server.port))
    head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
    sock.sendall(head + body)
    return sock


def read_response(sock: socket.socket) -> tuple[int, bytes]:
    data = b""
    while chunk := sock.recv(1 << 20):
        data += chunk
    sock.close()
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), body


def answered(sock: socket.socket) -> bool:
    """True once the server has started to answer on ``sock``."""
    readable, _, _ = select.select([sock], [], [], 0)
    return bool(readable)


def test_health_answers_while_a_large_request_is_processed(live_server: LiveServer) -> None:
    rng = np.random.default_rng(0)
    x = np.round(rng.normal(size=(BIG_DOCS, N_FEATURES)), 3)
    body = json.dumps({"queries": [{"qid": "big", "ids": list(range(BIG_DOCS)), "features": x.tolist()}]}).encode()
    during = 0
    with httpx.Client(base_url=live_server.url, timeout=None) as c:
        assert c.get("/health").status_code == 200  # a warm connection
        sock = raw_request(live_server, "/rank", body)
        while not answered(sock):
            r = c.get("/health")
            assert r.status_code == 200 and r.json() == {"status": "ok"}
            if not answered(sock):  # this health answer came back before the big request's answer
                during += 1
    status, payload = read_response(sock)
    assert status == 200, payload[:500]
    result = json.loads(payload)["results"][0]
    assert result["n_documents"] == BIG_DOCS and len(result["ranking"]) == BIG_DOCS
    assert during >= 2, f"/health answered only {during} times while the large request was processed"


def test_a_stalled_client_blocks_nobody(live_server: LiveServer) -> None:
    stalled = socket.create_connection(("127.0.0.1", live_server.port))
    try:
        stalled.sendall(b"POST /rank HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                        b"Content-Length: 100000\r\n\r\n{\"queries\": [")
        half = socket.create_connection(("127.0.0.1", live_server.port))
        half.sendall(b"GET /heal")  # a request line that never finishes
        with httpx.Client(base_url=live_server.url, timeout=None) as c:
            assert c.get("/health").status_code == 200
            x = np.ones((3, N_FEATURES))
            r = c.post("/rank", json=rank_body(x, [3]))
            assert r.status_code == 200 and r.json()["results"][0]["n_documents"] == 3
        assert not answered(stalled)  # still waiting for its body, not answered with an error
        half.close()
    finally:
        stalled.close()


@dataclass
class Call:
    thread: int
    start: float
    end: float
    status: int
    version: str | None
    scores: list[float]


def test_reload_under_load_loses_no_request(live_server: LiveServer, store: Store) -> None:
    x = np.random.default_rng(5).normal(size=(40, N_FEATURES)).astype(np.float32)
    body = rank_body(x, [25, 15])
    expected = {v: store.model(p).score(x, offsets_of([25, 15])) for v, p in
                (("v1", store.default_v1), ("v2", store.default_v2))}
    assert not np.allclose(expected["v1"], expected["v2"])
    calls: list[Call] = []
    lock = threading.Lock()
    stop = threading.Event()
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        try:
            with httpx.Client(base_url=live_server.url, timeout=None) as c:
                while not stop.is_set():
                    t0 = time.monotonic()
                    r = c.post("/rank", json=body)
                    t1 = time.monotonic()
                    version, scores = None, []
                    if r.status_code == 200:
                        out = r.json()
                        version = out["version"]
                        for res in out["results"]:
                            by_id = {d["id"]: d["score"] for d in res["ranking"]}
                            scores.extend(by_id[f"d{j}"] for j in range(res["n_documents"]))
                    with lock:
                        calls.append(Call(i, t0, t1, r.status_code, version, scores))
        except BaseException as exc:
            errors.append(exc)

    def count() -> int:
        with lock:
            return len(calls)

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(6)]
    for t in threads:
        t.start()
    try:
        while count() < 30:
            time.sleep(0.01)
        copy_version(store.default_v2, live_server.models_dir, "default", "v2")
        with httpx.Client(base_url=live_server.url, timeout=None) as c:
            t_reload = time.monotonic()
            r = c.post("/models/reload", headers={"Authorization": f"Bearer {live_server.token}"})
            t_reloaded = time.monotonic()
            assert r.status_code == 200, r.text
            assert r.json() == {"model": "default", "version": "v2", "previous_version": "v1",
                                "workers_serving": 1, "workers_total": 1, "workers_lagging": []}
        n_at_reload = count()
        while count() < n_at_reload + 30:
            time.sleep(0.01)
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    assert not errors, errors
    assert all(c.status == 200 for c in calls), {c.status for c in calls}
    assert {c.version for c in calls} == {"v1", "v2"}
    for c in calls:  # each response holds the scores of the version it names
        np.testing.assert_allclose(c.scores, expected[c.version], rtol=1e-12)  # type: ignore[index]
        if c.start > t_reloaded:
            assert c.version == "v2", "a request sent after the reload answered was scored by v1"
        if c.end < t_reload:
            assert c.version == "v1"
    for i in range(len(threads)):  # per client, never back to the old version
        seen = [c.version for c in sorted(calls, key=lambda c: c.start) if c.thread == i]
        assert seen == sorted(seen), seen
    assert any(c.start < t_reloaded and c.end > t_reload for c in calls), "no request was in flight during the reload"
    assert sum(c.start > t_reloaded for c in calls) >= 10
