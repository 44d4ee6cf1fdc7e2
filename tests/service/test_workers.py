"""``python -m tunemix.service`` with two uvicorn workers: /metrics sums both workers (prometheus-client's
multiprocess mode), a reload in one worker reaches the other, slow and huge request heads are cut off
(408, 431), /ready means every worker, and a worker killed and restarted serves the pinned version,
leaves no stale metric behind, while /health answers within a second throughout."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.service.conftest import (
    N_FEATURES,
    ROOT,
    Store,
    copy_version,
    free_port,
    offsets_of,
    rank_body,
    stop_process,
)
from tunemix.service.worker_state import live_workers

TOKEN = "workers-token"
SIZES = [7, 5]


HEAD_TIMEOUT_S = 1.0


@pytest.fixture(scope="module")
def two_workers(store: Store, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """The server's URL and models directory; its state and metrics directories are ``models``'
    siblings ``state`` and ``metrics`` (``dirs_of``)."""
    base = tmp_path_factory.mktemp("workers")
    models = base / "models"
    copy_version(store.default_v1, models, "default", "v1")
    (base / "metrics").mkdir()
    port = free_port()
    env = dict(os.environ, TUNEMIX_MODELS_DIR=str(models), TUNEMIX_DEFAULT_MODEL="default", TUNEMIX_PORT=str(port),
               TUNEMIX_HOST="127.0.0.1", TUNEMIX_WORKERS="2", TUNEMIX_RELOAD_TOKEN=TOKEN,
               TUNEMIX_LOG_LEVEL="info", TUNEMIX_STATE_POLL_S="0.2", TUNEMIX_HEADER_TIMEOUT_S=str(HEAD_TIMEOUT_S),
               TUNEMIX_STATE_DIR=str(base / "state"), PROMETHEUS_MULTIPROC_DIR=str(base / "metrics"))
    log = (base / "server.log").open("wb")
    proc = subprocess.Popen([sys.executable, "-m", "tunemix.service"], cwd=ROOT, env=env, stdout=log,
                            stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        ok = False
        while not ok:  # one 200 from either worker: /ready says every worker serves
            if proc.poll() is not None:  # no deadline: the suite's timeout is the only limit
                raise AssertionError(f"not ready: {(base / 'server.log').read_text()[-2000:]}")
            try:
                ok = httpx.get(url + "/ready", timeout=None, headers={"Connection": "close"}).status_code == 200
            except httpx.TransportError:
                ok = False
            time.sleep(0 if ok else 0.1)
        assert len(worker_pids(models)) == 2
        # and until both have compiled (or loaded from numba's cache) the kernels they warm after
        # readiness: a compilation holds the GIL for seconds, which the tests' 1 s /health would meet
        while (base / "server.log").read_text().count("evaluation and fusion kernels warm") < 2:
            if proc.poll() is not None:
                raise AssertionError(f"exited: {(base / 'server.log').read_text()[-2000:]}")
            time.sleep(0.1)
        yield url, models
    finally:
        stop_process(proc, timeout=20)


def rank_total(url: str) -> tuple[float, float]:
    """(/rank requests answered 200, documents scored) as one /metrics answer says."""
    text = httpx.get(url + "/metrics", timeout=None, headers={"Connection": "close"}).text
    requests = documents = 0.0
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "tunemix_http_requests_total" and s.labels.get("endpoint") == "/rank" \
                    and s.labels.get("status") == "200":
                requests += s.value
            if s.name == "tunemix_documents_scored_total":
                documents += s.value
    return requests, documents


def test_metrics_add_up_over_workers(two_workers: tuple[str, Path]) -> None:
    url, _ = two_workers
    x = np.random.default_rng(0).normal(size=(sum(SIZES), N_FEATURES)).astype(np.float32)
    body = rank_body(x, SIZES)
    before = rank_total(url)
    n = 24
    for _ in range(n):  # a fresh connection each: the kernel spreads them over the workers
        r = httpx.post(url + "/rank", json=body, timeout=None, headers={"Connection": "close"})
        assert r.status_code == 200, r.text
    for _ in range(6):  # whichever worker answers /metrics, it reports both workers' counts
        requests, documents = rank_total(url)
        assert requests - before[0] == n
        assert documents - before[1] == n * sum(SIZES)
    assert offsets_of(SIZES)[-1] == sum(SIZES)


def test_a_reload_in_one_worker_reaches_the_other(two_workers: tuple[str, Path], store: Store) -> None:
    url, models = two_workers
    copy_version(store.default_v2, models, "default", "v2")
    r = httpx.post(url + "/models/reload", json={"model": "default"}, timeout=None,
                   headers={"Authorization": f"Bearer {TOKEN}", "Connection": "close"})
    assert r.status_code == 200, r.text
    assert r.json()["version"] == "v2"
    # the answer waits for every worker: both serve v2 when it comes
    assert (r.json()["workers_serving"], r.json()["workers_total"], r.json()["workers_lagging"]) == (2, 2, []), r.text
    in_a_row = 0
    while in_a_row < 10:  # ten fresh connections in a row, each to either worker, all on v2
        ready = httpx.get(url + "/ready", timeout=None, headers={"Connection": "close"}).json()
        assert ready.get("version") == "v2", ready
        in_a_row += 1


# ---------------------------------------------------------------------------- bounded, one service
def worker_pids(models: Path) -> dict[int, dict[str, str]]:
    """{pid: what it serves} of the running workers, from the state directory beside ``models``."""
    return {pid: st["serving"] for pid, st in live_workers(models.parent / "state").items()}


def wait_for(condition: Callable[[], Any], what: str, deadline_s: float = 120.0) -> Any:
    """Poll ``condition`` until it returns something true (returned); fail after a generous deadline."""
    end = time.monotonic() + deadline_s
    while not (result := condition()):
        assert time.monotonic() < end, f"{what}: not within {deadline_s:g} s"
        time.sleep(0.02)
    return result


@dataclass
class Watch:
    """A thread that asks /health (and, given a body, /rank) again and again on fresh connections,
    one second allowed per answer, and records what came back."""

    url: str
    rank: dict[str, Any] | None = None
    health_s: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    ranks: list[tuple[int, str | None]] = field(default_factory=list)
    paused: threading.Event = field(default_factory=threading.Event)
    stop: threading.Event = field(default_factory=threading.Event)
    idle: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        while not self.stop.is_set():
            if self.paused.is_set():
                self.idle.set()
                time.sleep(0.01)
                continue
            self.idle.clear()
            try:
                t0 = time.monotonic()
                r = httpx.get(self.url + "/health", timeout=1.0, headers={"Connection": "close"})
                self.health_s.append(time.monotonic() - t0)
                if r.status_code != 200:
                    self.failures.append(f"/health {r.status_code}")
                if self.rank is not None:
                    r = httpx.post(self.url + "/rank", json=self.rank, timeout=None, headers={"Connection": "close"})
                    self.ranks.append((r.status_code, r.json().get("version") if r.status_code == 200 else r.text))
            except httpx.HTTPError as exc:
                self.failures.append(f"{type(exc).__name__}: {exc}")

    def __enter__(self) -> Watch:
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()
        wait_for(lambda: len(self.health_s) >= 3, "the watch's first answers")
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()

    def pause(self) -> None:
        """Return once no request of the watch is in flight (until ``resume``)."""
        self.paused.set()
        self.idle.wait()

    def resume(self) -> None:
        self.paused.clear()

    def check(self) -> None:
        assert not self.failures, self.failures[:5]
        assert max(self.health_s) < 1.0, f"/health took {max(self.health_s):.2f} s"


def read_all(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def test_slow_heads_get_408_and_their_connections_close(two_workers: tuple[str, Path]) -> None:
    url, models = two_workers
    port = int(url.rsplit(":", 1)[1])
    pids = worker_pids(models)
    with Watch(url) as watch:
        t0 = time.monotonic()
        dripping = [socket.create_connection(("127.0.0.1", port)) for _ in range(100)]
        silent = [socket.create_connection(("127.0.0.1", port)) for _ in range(20)]
        for sock in dripping:
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        answers: dict[socket.socket, bytes] = {}
        closed_at: dict[socket.socket, float] = {}
        while len(closed_at) < len(dripping) + len(silent):
            assert time.monotonic() - t0 < 60, f"{120 - len(closed_at)} connections still open after 60 s"
            for sock in dripping:  # one more header byte on each open connection, every 0.2 s
                if sock not in closed_at:
                    with contextlib.suppress(OSError):  # the server may have closed it meanwhile
                        sock.send(b"a")
            readable, _, _ = select.select([s for s in dripping + silent if s not in closed_at], [], [], 0.2)
            for sock in readable:
                chunk = sock.recv(65536)
                answers[sock] = answers.get(sock, b"") + chunk
                if not chunk:
                    closed_at[sock] = time.monotonic() - t0
    watch.check()
    for sock in dripping:
        assert answers[sock].startswith(b"HTTP/1.1 408 "), answers[sock][:200]
        assert b"TUNEMIX_HEADER_TIMEOUT_S" in answers[sock]
    assert all(answers[sock] == b"" for sock in silent)  # an idle connection is closed without an answer
    assert min(closed_at.values()) >= HEAD_TIMEOUT_S  # not before the deadline
    for sock in dripping + silent:
        sock.close()
    assert worker_pids(models).keys() == pids.keys()  # no worker was lost


def test_a_huge_head_gets_431_at_once(two_workers: tuple[str, Path]) -> None:
    url, models = two_workers
    pids = worker_pids(models)
    with Watch(url) as watch:
        for _ in range(4):  # fresh connections: both workers meet one
            sock = socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1])))
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Huge: " + b"a" * (8 << 20) + b"\r\n\r\n")
            answer = read_all(sock)  # the answer, then end of file: the connection is closed
            sock.close()
            assert answer.startswith(b"HTTP/1.1 431 "), answer[:200]
            assert b"TUNEMIX_MAX_HEADER_BYTES" in answer
        big = {"X-Big": "b" * 20_000}  # large, within the limit: served
        assert httpx.get(url + "/health", headers=big, timeout=None).status_code == 200
    watch.check()
    assert worker_pids(models).keys() == pids.keys()


def test_a_body_still_dripping_after_its_answer_is_cut_off(two_workers: tuple[str, Path]) -> None:
    """A body larger than the limit is answered 413 from its declared length before it is read; a
    client that goes on sending it a byte at a time is closed at the head deadline."""
    url, _ = two_workers
    sock = socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1])))
    sock.sendall(b"POST /rank HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: 1000000000\r\n\r\n{")
    t0 = time.monotonic()
    answer = b""
    while True:
        assert time.monotonic() - t0 < 60, f"still open after 60 s: {answer[:200]!r}"
        with contextlib.suppress(OSError):
            sock.send(b" ")
        readable, _, _ = select.select([sock], [], [], 0.2)
        if readable:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                break
            answer += chunk
    sock.close()
    assert answer.startswith(b"HTTP/1.1 413 "), answer[:200]


def model_info(url: str) -> list[dict[str, str]]:
    text = httpx.get(url + "/metrics", timeout=None, headers={"Connection": "close"}).text
    return [s.labels for f in text_string_to_metric_families(text) for s in f.samples
            if s.name == "tunemix_model_info" and s.value == 1.0]


def reload_to(url: str, version: str) -> None:
    r = httpx.post(url + "/models/reload", json={"model": "default", "version": version}, timeout=None,
                   headers={"Authorization": f"Bearer {TOKEN}", "Connection": "close"})
    assert r.status_code == 200 and r.json()["workers_serving"] == 2, r.text


def test_model_info_follows_reloads_one_version_per_worker(two_workers: tuple[str, Path], store: Store) -> None:
    url, models = two_workers
    if not (models / "default" / "v2").exists():
        copy_version(store.default_v2, models, "default", "v2")
    for version in ("v2", "v1", "v2", "v1"):  # v1 -> v2 -> v1: never two versions for one pid
        reload_to(url, version)
        pids = worker_pids(models)
        for _ in range(4):  # whichever worker answers, it reports both, each once, on the new version
            series = model_info(url)
            assert sorted((s["pid"], s["version"]) for s in series) == sorted((str(p), version) for p in pids)


def test_a_restarted_worker_serves_the_pinned_version(two_workers: tuple[str, Path], store: Store) -> None:
    url, models = two_workers
    if not (models / "default" / "v2").exists():
        copy_version(store.default_v2, models, "default", "v2")
    reload_to(url, "v1")  # pinned to v1 while v2 is the newest on disk ...
    broken = models / "default" / "v9"  # ... and a broken v9 newer still
    broken.mkdir()
    (broken / "manifest.json").write_text("{not json")
    metrics_dir = models.parent / "metrics"
    before = rank_total(url)
    x = np.random.default_rng(1).normal(size=(4, N_FEATURES)).astype(np.float32)
    with Watch(url, rank=rank_body(x, [4])) as watch:
        pids = worker_pids(models)
        victim = min(pids)
        assert (metrics_dir / f"counter_{victim}.db").exists()
        watch.pause()  # no request in flight on the victim
        os.kill(victim, signal.SIGKILL)
        # the service is not ready while the replacement loads (its peer says so) ...
        body = wait_for(lambda: (r := httpx.get(url + "/ready", headers={"Connection": "close"})).status_code == 503
                        and r.json(), "/ready 503 after the kill")
        watch.resume()
        assert body["workers_serving"] == 1 and body["workers_total"] == 2, body
        # ... and is again once it serves: the pinned v1, not the newest (broken) v9 on disk
        new = wait_for(lambda: len(now := worker_pids(models)) == 2 and victim not in now and now, "a replacement")
        assert all(v == {"default": "v1"} for v in new.values()), new
        # ready once the replacement has warmed every kernel too (tunemix.compile.serving), then steadily
        wait_for(lambda: httpx.get(url + "/ready", headers={"Connection": "close"}).status_code == 200,
                 "/ready 200 once the replacement is warm")
        for _ in range(6):
            r = httpx.get(url + "/ready", headers={"Connection": "close"}, timeout=None)
            assert r.status_code == 200 and r.json()["version"] == "v1", r.text
        # the metrics: the dead worker's series gone, its counts kept, its files folded away
        assert sorted(int(s["pid"]) for s in model_info(url)) == sorted(new)
        assert rank_total(url)[0] >= before[0]
        assert not list(metrics_dir.glob(f"*_{victim}.db"))
        assert (metrics_dir / "counter_exited.db").exists()
        after_restart = len(watch.ranks)
        wait_for(lambda: len(watch.ranks) >= after_restart + 4, "/rank answers after the restart")
    watch.check()
    # every /rank of the watch was answered by a worker serving v1: none 503 while the other loaded
    assert all(status == 200 and version == "v1" for status, version in watch.ranks), \
        [r for r in watch.ranks if r != (200, "v1")][:5]
