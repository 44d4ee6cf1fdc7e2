"""Issue 37, reproductions 2 and 6 against ``python -m app`` with two workers: an adversarial
ranx order and Condorcet's pairs are bounded before they cost a worker (bounds: the evaluation's
comparison count in tests/evaluation/test_ranking_kernels.py, TUNEMIX_MAX_CONDORCET_PAIRS)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from bench.quicksort_adversary import adversary
from tests.app.conftest import Store, copy_version
from tests.app.two_workers import TwoWorkers, start_two_workers
from training.ensemble.list_fusion import fuse_lists
from training.evaluation import evaluate

METRICS = [f"ndcg@{k}" for k in range(1, 33)]


@pytest.fixture(scope="module")
def server(store: Store, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TwoWorkers]:
    base = tmp_path_factory.mktemp("sorts")
    copy_version(store.default_v1, base / "models", "default", "v1")
    s = start_two_workers(base / "models", base)
    try:
        yield s
    finally:
        s.stop()


def test_reproduction_2_adversarial_ranx_order_is_answered_exactly(server: TwoWorkers) -> None:
    n = 20_000
    scores = -adversary(n)
    labels = np.random.default_rng(5).integers(0, 3, size=n)
    body = {"queries": [{"qid": "adv", "labels": labels.tolist(), "scores": scores.tolist()}],
            "metrics": METRICS, "convention": "ranx"}
    pids = server.worker_pids()
    r = httpx.post(server.url + "/evaluate", json=body, timeout=None)
    assert r.status_code == 200, r.text
    want = evaluate(labels, scores, np.array([0, n]), METRICS, "ranx").mean
    got = r.json()["results"][0]["mean"]
    for m in METRICS:
        assert got[m] == pytest.approx(want[m], abs=1e-12), m
    assert server.worker_pids() == pids  # no worker lost


def _condorcet_body(n_queries: int, n_ids: int, systems: int = 1) -> dict:
    rng = np.random.default_rng(0)
    return {"method": "condorcet",
            "queries": [{"qid": f"q{q}", "systems": [{"ids": [f"d{i}" for i in rng.permutation(n_ids)]}
                                                     for _ in range(systems)]}
                        for q in range(n_queries)]}


def test_reproduction_6_twenty_condorcet_queries_of_5000_ids_are_413(server: TwoWorkers) -> None:
    r = httpx.post(server.url + "/fuse", json=_condorcet_body(20, 5000), timeout=None)
    assert r.status_code == 413, r.text
    detail = r.text
    assert "TUNEMIX_MAX_CONDORCET_PAIRS" in detail and "'q1'" in detail  # the second query passes the bound


def test_one_condorcet_query_at_the_bound_is_fused_like_the_kernel(server: TwoWorkers) -> None:
    n = 5000
    body = _condorcet_body(1, n, systems=3)
    r = httpx.post(server.url + "/fuse", json=body, timeout=None)
    assert r.status_code == 200, r.text
    ids = list(dict.fromkeys(i for s in body["queries"][0]["systems"] for i in s["ids"]))
    pos = {d: j for j, d in enumerate(ids)}
    mat = np.full((len(ids), 3), np.nan)
    for m, s in enumerate(body["queries"][0]["systems"]):
        mat[[pos[d] for d in s["ids"]], m] = np.arange(n, 0, -1, dtype=np.float64)
    fused = fuse_lists(mat, np.array([0, len(ids)]), "condorcet")
    got = [d["id"] for d in r.json()["results"][0]["ranking"]]
    assert got == [ids[j] for j in np.argsort(-fused, kind="stable")]


def test_condorcet_memory_is_linear_in_the_documents(tmp_path: Path) -> None:
    """The kernel's peak memory at 5,000 documents is far below one n x n int64 matrix (200 MB)."""
    import subprocess
    import sys

    from tests.app.conftest import ROOT

    code = ("import resource, numpy as np\n"
            "from training.ensemble import fusion_kernels as fk\n"
            "fk.condorcet_scores(np.zeros((4, 2)), np.array([0, 4]))\n"
            "x = np.random.default_rng(0).normal(size=(5000, 8))\n"
            "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
            "fk.condorcet_scores(x, np.array([0, 5000]))\n"
            "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    rise_kib = int(out.stdout.strip().splitlines()[-1])
    assert rise_kib < 20 * 1024, rise_kib  # n x n int64 would be 195,000 KiB
