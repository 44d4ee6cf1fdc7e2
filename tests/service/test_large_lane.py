"""Large requests beside small ones, against ``python -m tunemix.service`` with two workers and the
default limits: two clients posting 100,000-document /rank bodies back to back leave a third
client's 100-document requests within a few times their quiet latency (the large lane,
``tunemix.service.lanes.large_work``). The model scores like the MQ2008 ensemble: 0.5 s of one core
per 100,000 documents, 1.2 ms per 100 (the suite's tiny models score 100,000 documents in 20 ms,
too little to show what a large request's scoring holds)."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from tests.conftest import tiny_config
from tests.service.conftest import CONFIG, N_FEATURES, rank_body, stop_process
from tests.service.test_admission import time_median
from tests.service.two_workers import TwoWorkers, start_two_workers
from tunemix.service.body import body_items
from tunemix.service.lanes import is_large
from tunemix.service.settings import Settings

DEFAULTS = Settings()
JSON = {"Content-Type": "application/json"}
#: seconds a wait for an event may take before the test fails (never reached when the code is right)
HANG = 300.0
#: answers each large client has while the small requests are measured
LARGE_ANSWERS = 3


def large_body(documents: int = 100_000, per_query: int = 1000) -> bytes:
    """``documents`` documents in queries of ``per_query``, columnar, features to two decimals and
    ids the documents' numbers: within ``TUNEMIX_MAX_BODY_BYTES`` (3.2 MB of 4 MiB)."""
    x = np.random.default_rng(5).random((documents, N_FEATURES)).round(2)
    queries = [{"qid": f"q{q}", "ids": [str(j) for j in range(per_query)],
                "features": x[q * per_query:(q + 1) * per_query].tolist()} for q in range(documents // per_query)]
    return json.dumps({"queries": queries}, separators=(",", ":")).encode()


SMALL = json.dumps(rank_body(np.random.default_rng(6).random((100, N_FEATURES)).round(4), [100])).encode()


@pytest.fixture(scope="module")
def heavy_two(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TwoWorkers]:
    """Two workers serving a model of 4,000 boosting rounds (trained in about 3 s)."""
    from tunemix.train.config import load_config
    from tunemix.train.train import train

    work = tmp_path_factory.mktemp("heavy")
    cfg_path = tiny_config(work, {**CONFIG, "name": "default", "seed": 1, "data.synthetic.features": N_FEATURES,
                                  "data.synthetic.queries": [60, 20, 20], "members.adaboost.0.n_leaves": 8,
                                  "members.adaboost.0.n_iterations": 4000,
                                  "members.adaboost.0.checkpoints": [4000]}, "heavy.toml")
    train(load_config(cfg_path, {"run.models_dir": str(work / "models")}), progress=False)
    server = start_two_workers(work / "models", work)
    try:
        yield server
    finally:
        server.stop()


def small_latencies(c: httpx.Client, until: threading.Event | None = None, n: int = 0) -> list[float]:
    """Sequential 100-document requests: ``n`` of them, or until ``until`` is set; their latencies."""
    out: list[float] = []
    while (until is not None and not until.is_set()) or len(out) < n:
        t0 = time.perf_counter()
        r = c.post("/rank", content=SMALL, headers=JSON)
        out.append(time.perf_counter() - t0)
        assert r.status_code == 200, r.text[:300]
    return out


#: a client posting the body in argv[2] to argv[1]/rank back to back, each on a fresh connection (so
#: that the large requests spread over both workers), a line on stdout per answer: in its own
#: process, so that its reading and writing of megabytes never hold the measuring client's GIL
LARGE_CLIENT = """
import http.client, sys, urllib.parse
url, body = urllib.parse.urlsplit(sys.argv[1]), open(sys.argv[2], "rb").read()
while True:
    c = http.client.HTTPConnection(url.hostname, url.port, timeout=600)
    c.request("POST", "/rank", body=body, headers={"Content-Type": "application/json", "Connection": "close"})
    r = c.getresponse()
    r.read()
    c.close()
    print(r.status, flush=True)
"""


class LargeClient:
    """``LARGE_CLIENT`` in a subprocess; ``answers`` counts its 200 answers, ``wait(n)`` waits for
    the n-th (each answer is an event: a line read from its pipe)."""

    def __init__(self, url: str, body_file: Path) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", LARGE_CLIENT, url, str(body_file)],
                                     stdout=subprocess.PIPE, text=True)
        self.answers = 0
        self.failed: str | None = None
        self._cond = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._cond:
                if line.strip() == "200":
                    self.answers += 1
                else:
                    self.failed = line.strip()
                self._cond.notify_all()
        with self._cond:
            self.failed = self.failed or f"exited {self.proc.poll()}"
            self._cond.notify_all()

    def wait(self, n: int) -> None:
        with self._cond:
            assert self._cond.wait_for(lambda: self.answers >= n or self.failed is not None, HANG)
        assert self.failed is None, self.failed

    def stop(self) -> None:
        stop_process(self.proc)


def test_small_requests_do_not_wait_behind_large_ones(heavy_two: TwoWorkers, tmp_path: Path) -> None:
    """Small requests beside two clients of 100,000 documents keep being answered while the large
    ones are in flight: they never queue behind a large request's scoring (0.5 s of a core).
    Sharing the Python lanes and scoring slots with the large requests, they took a time-weighted
    median of 612 ms and a p99 of 1.0 s against 2.0 ms quiet."""
    big = large_body()
    assert len(big) <= DEFAULTS.max_body_bytes and body_items(big, "json") >= DEFAULTS.max_documents
    assert is_large(big, "json", DEFAULTS) and not is_large(SMALL, "json", DEFAULTS)
    (tmp_path / "large.json").write_bytes(big)
    with httpx.Client(base_url=heavy_two.url, timeout=None, headers={"Connection": "close"}) as c:
        small_latencies(c, n=20)  # both workers' kernels warm
        quiet = small_latencies(c, n=200)
        clients = [LargeClient(heavy_two.url, tmp_path / "large.json") for _ in range(2)]
        try:
            for lc in clients:
                lc.wait(1)  # each large client has had one answer: both are under way
            before = [lc.answers for lc in clients]
            done = threading.Event()

            def until_answered() -> None:  # each large client has LARGE_ANSWERS answers more
                for lc, n in zip(clients, before, strict=True):
                    lc.wait(n + LARGE_ANSWERS)
                done.set()

            watcher = threading.Thread(target=until_answered, daemon=True)
            watcher.start()
            busy = small_latencies(c, until=done)
            watcher.join()
            answered = [lc.answers - n for lc, n in zip(clients, before, strict=True)]
        finally:
            for lc in clients:
                lc.stop()
    # sequential requests: one that waits delays the next, and a plain median counts the many quick
    # ones between the long waits; the time-weighted median is what a request arriving at any
    # moment meets (as the bench's constant-rate load does)
    q50, b50, t50 = statistics.median(quiet), statistics.median(busy), time_median(busy)
    q99, b99 = float(np.percentile(quiet, 99)), float(np.percentile(busy, 99))
    print(f"quiet p50 {q50 * 1e3:.1f} ms p99 {q99 * 1e3:.1f} ms; beside large p50 {b50 * 1e3:.1f} ms "
          f"(time-weighted {t50 * 1e3:.1f}) p99 {b99 * 1e3:.1f} ms over {len(busy)} requests, large answered "
          f"meanwhile {answered}")
    # the latency ratios are the benchmark's (python -m bench.bench_service --large-clients 2); here
    # what tells the lane from its absence on any machine: small requests kept being answered while
    # the large ones were in flight (without the lane, 24 of them in the time of six large answers,
    # each queued behind a large request's scoring; with it, thousands)
    assert len(busy) >= 20 * 2 * LARGE_ANSWERS, (len(busy), answered)


# ---------------------------------------------------------------------------- the rule and the lane
def test_large_by_bytes_or_by_items() -> None:
    s = Settings(large_body_bytes=1000, large_body_items=50)
    assert is_large(b" " * 1001, "json", s) and not is_large(b" " * 1000, "json", s)
    many = json.dumps({"queries": [{"qid": "q", "ids": [str(j) for j in range(60)],
                                    "features": [[0] for _ in range(60)]}]}).encode()
    assert len(many) <= 1000 and body_items(many, "json") > 50 and is_large(many, "json", s)
    assert not is_large(many, "json", Settings(large_body_bytes=1000, large_body_items=100))
    text = "".join(f"0 qid:1 1:{j}\n" for j in range(60)).encode()
    assert is_large(text, "text", s)


def test_settings_bounds() -> None:
    from pydantic import ValidationError

    d = Settings()
    assert (d.large_body_bytes, d.large_body_items, d.large_concurrency, d.large_nice, d.large_idle) == (
        2**20, 20_000, 1, 19, True)
    for bad in ({"large_concurrency": 0}, {"large_concurrency": 65}, {"large_nice": -1}, {"large_nice": 20},
                {"large_body_bytes": -1}, {"large_body_items": -1}):
        with pytest.raises(ValidationError):
            Settings(**bad)


def test_large_work_runs_in_its_lane_on_one_thread_below_the_workers_priority() -> None:
    """On the lane's own thread (neither the event loop's nor anyio's), at a lower priority and under
    SCHED_IDLE, with
    the kernels on one thread; the Python lanes and scoring slots untouched (the state has none)."""
    import asyncio
    import os
    from types import SimpleNamespace

    from tunemix.core.scoring.runtime import get_scoring_threads
    from tunemix.service.lanes import large_lane, large_work

    lane = large_lane(1, nice=3, idle=True)

    def work() -> tuple[str, int, int, int]:
        tid = threading.get_native_id()
        policy = os.sched_getscheduler(0) if sys.platform == "linux" else -1
        return threading.current_thread().name, os.getpriority(os.PRIO_PROCESS, tid), get_scoring_threads(), policy

    async def main() -> tuple[str, int, int, int]:
        state = SimpleNamespace(large_lane=lane)
        request = SimpleNamespace(app=SimpleNamespace(state=state), state=SimpleNamespace())
        return await large_work(request, work)  # type: ignore[arg-type]

    try:
        name, nice, threads, policy = asyncio.run(main())
    finally:
        lane.shutdown(wait=True)
    assert name.startswith("tunemix-large") and threads == 1
    if sys.platform == "linux":
        assert nice == min(19, os.getpriority(os.PRIO_PROCESS, 0) + 3)
        assert policy == os.SCHED_IDLE and os.sched_getscheduler(0) != os.SCHED_IDLE  # the lane's thread only
