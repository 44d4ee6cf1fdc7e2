"""``python -m app`` with two uvicorn workers: /metrics sums both workers (prometheus-client's
multiprocess mode), and a reload in one worker reaches the other."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.app.conftest import N_FEATURES, ROOT, Store, copy_version, free_port, offsets_of, rank_body

TOKEN = "workers-token"
SIZES = [7, 5]


@pytest.fixture(scope="module")
def two_workers(store: Store, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    base = tmp_path_factory.mktemp("workers")
    models = base / "models"
    copy_version(store.default_v1, models, "default", "v1")
    port = free_port()
    env = dict(os.environ, TUNEMIX_MODELS_DIR=str(models), TUNEMIX_DEFAULT_MODEL="default", TUNEMIX_PORT=str(port),
               TUNEMIX_HOST="127.0.0.1", TUNEMIX_WORKERS="2", TUNEMIX_RELOAD_TOKEN=TOKEN,
               TUNEMIX_LOG_LEVEL="warning", TUNEMIX_STATE_POLL_S="0.2")
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    log = (base / "server.log").open("wb")
    proc = subprocess.Popen([sys.executable, "-m", "app"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        in_a_row = 0
        while in_a_row < 10:  # each worker loads on its own: ten fresh connections ready in a row
            if proc.poll() is not None:  # no deadline: the suite's timeout is the only limit
                raise AssertionError(f"not ready: {(base / 'server.log').read_text()[-2000:]}")
            try:
                ok = httpx.get(url + "/ready", timeout=None, headers={"Connection": "close"}).status_code == 200
            except httpx.TransportError:
                ok = False
            in_a_row = in_a_row + 1 if ok else 0
            time.sleep(0.05 if ok else 0.2)
        yield url, models
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=20)


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
