"""Issue 37, reproductions 2, 6 and 10 against ``python -m tunemix.service`` with two workers: an adversarial
ranx order, Condorcet's pairs and a LETOR body's repeated qid are bounded before they cost a
worker (bounds: the evaluation's comparison count in tests/evaluation/test_ranking_kernels.py,
TUNEMIX_MAX_CONDORCET_PAIRS, a linear duplicate-block check with its slow twin here)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from tests.evaluation.quicksort_adversary import adversary
from tests.service.conftest import N_FEATURES, Store, copy_version
from tests.service.two_workers import TwoWorkers, start_two_workers
from tunemix.core.ensemble.list_fusion import fuse_lists
from tunemix.core.evaluation import evaluate
from tunemix.service.letor import repeated_block

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

    from tests.service.conftest import ROOT

    code = ("import resource, numpy as np\n"
            "from tunemix.core.ensemble import fusion_kernels as fk\n"
            "fk.condorcet_scores(np.zeros((4, 2)), np.array([0, 4]))\n"
            "x = np.random.default_rng(0).normal(size=(5000, 8))\n"
            "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
            "fk.condorcet_scores(x, np.array([0, 5000]))\n"
            "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    rise_kib = int(out.stdout.strip().splitlines()[-1])
    assert rise_kib < 20 * 1024, rise_kib  # n x n int64 would be 195,000 KiB


def _repeated_block_twin(qids: list[str]) -> tuple[int | None, int]:
    """The check as it was: the first qid found among the blocks before it (quadratic)."""
    for i, q in enumerate(qids):
        if q in qids[:i]:
            return i, qids.index(q)
    return None, -1


def test_repeated_block_matches_its_slow_twin() -> None:
    rng = np.random.default_rng(2)
    cases = [[], ["a"], ["a", "b"], ["a", "b", "a"], ["a", "a"], ["x", "y", "z", "y", "x"]]
    cases += [[str(v) for v in rng.integers(0, int(rng.integers(1, 40)), size=int(rng.integers(1, 60)))]
              for _ in range(300)]
    for qids in cases:
        assert repeated_block(qids) == _repeated_block_twin(qids), qids


def test_reproduction_10_a_letor_body_repeating_a_qid_after_9999_blocks_is_422(server: TwoWorkers) -> None:
    features = " ".join(f"{j}:0.{j}5" for j in range(1, N_FEATURES + 1))
    pad = " #" + "p" * 220  # a comment: the body reaches the size of the reproduction
    lines = [f"0 qid:{q} {features}{pad}" for q in range(9_999)] + [f"1 qid:0 {features}"]
    body = "\n".join(lines).encode() + b"\n"
    assert len(body) > 2_500_000
    pids = server.worker_pids()
    r = httpx.post(server.url + "/rank", content=body, params={"model": "default"},
                   headers={"Content-Type": "text/plain"}, timeout=None)
    assert r.status_code == 422, r.text
    assert "body:10000: qid 0 appears in two separate blocks (the first starts at line 1)" in r.json()["detail"]
    assert server.worker_pids() == pids
