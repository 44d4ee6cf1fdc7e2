"""The ranking kernels: numba's quicksort reproduced step for step within a comparison budget,
McIlroy's adversary against it, and each query ranked once per evaluation."""

from __future__ import annotations

import numpy as np
import pytest
from numba import njit

from tests.evaluation.naive import evaluate_naive
from tests.evaluation.quicksort_adversary import adversary, adversary_numba, count_numba_comparisons
from tunemix.core.evaluation import evaluate, ranking_kernels
from tunemix.core.evaluation.ranking_kernels import (
    TIE_DOCID,
    TIE_QUICKSORT,
    TIE_STABLE,
    numba_argsort_bounded,
    quicksort_budget,
    rank_queries,
)

NDCG_1_32 = [f"ndcg@{k}" for k in range(1, 33)]


@njit(cache=True)
def _numba_argsort(x):  # the sort ranx runs: np.argsort inside numba, kind "quicksort"
    return np.argsort(x)


def _ordinary_inputs(rng: np.random.Generator) -> list[np.ndarray]:
    cases = [np.zeros(0), np.array([1.0]), np.array([2.0, 1.0]), np.zeros(40)]
    for n in (15, 16, 17, 100, 1000, 5000):
        up = np.arange(n, dtype=np.float64)
        cases += [up, up[::-1].copy(), np.zeros(n), np.concatenate([up[: n // 2], up[: n - n // 2][::-1]]),
                  rng.normal(size=n), rng.integers(0, 3, size=n).astype(np.float64),
                  np.repeat(rng.normal(size=max(n // 10, 1)), 10)[:n]]
    return cases


def test_bounded_quicksort_is_numbas_argsort_comparison_for_comparison() -> None:
    rng = np.random.default_rng(7)
    cases = _ordinary_inputs(rng) + [rng.integers(0, int(rng.integers(1, 60)), size=int(rng.integers(1, 800)))
                                     .astype(np.float64) for _ in range(60)]
    for keys in cases:
        idx = np.empty(keys.shape[0], dtype=np.int64)
        used = numba_argsort_bounded(keys, idx, 10**15)
        assert np.array_equal(idx, _numba_argsort(keys)), keys.shape
        assert used == count_numba_comparisons(keys)
        # ordinary inputs stay far inside the budget, so ranx's tie order is reproduced exactly
        assert used <= quicksort_budget(keys.shape[0]) / 2, (keys.shape, used)


@pytest.mark.parametrize("n", [100, 700])
def test_compiled_adversary_is_mcilroys_against_numba(n: int) -> None:
    keys = adversary(n)
    assert np.array_equal(keys, adversary_numba(n))
    assert np.unique(keys).size == n  # no ties: a sort of it has one right answer


@pytest.mark.parametrize("n", [1000, 3000])
def test_adversary_is_quadratic_for_numba_and_bounded_here(n: int) -> None:
    keys = adversary(n)
    numba_cost = count_numba_comparisons(keys) if n <= 1000 else None
    idx = np.empty(n, dtype=np.int64)
    unbounded = numba_argsort_bounded(keys, idx, 10**15)  # the same algorithm, no budget
    if numba_cost is not None:
        assert unbounded == numba_cost
    assert unbounded > n * n / 5  # quadratic
    budget = quicksort_budget(n)
    assert unbounded > 3 * budget
    assert numba_argsort_bounded(keys, idx, budget) <= budget + n + 3  # gives up in time
    order, fallback = rank_queries(-keys, np.zeros(0, np.int64), TIE_QUICKSORT, np.array([0, n]), n)
    assert fallback.tolist() == [1]  # merge-sorted; distinct scores: exactly ranx's order
    assert np.array_equal(order, _numba_argsort(keys))


def test_evaluate_ranx_on_the_adversary_matches_the_naive_twin() -> None:
    n = 2000
    scores = -adversary(n)
    labels = np.random.default_rng(3).integers(0, 3, size=n)
    offsets = np.array([0, n])
    res = evaluate(labels, scores, offsets, [*NDCG_1_32, "map"], "ranx")
    for m in [*NDCG_1_32, "map"]:
        name, cutoff = (m.split("@")[0], int(m.split("@")[1])) if "@" in m else (m, None)
        naive, _ = evaluate_naive(name, cutoff, None, labels.tolist(), scores.tolist(), [n], "ranx")
        assert res.per_query[m][0] == pytest.approx(naive[0], abs=1e-12), m
    assert not res.warnings
    # the three largest keys made equal: still adversarial, now with ties, so the merge sort's
    # tie order may differ from ranx's, and the answer says so
    keys = -scores
    keys[keys >= n - 3] = n - 3
    idx = np.empty(n, dtype=np.int64)
    assert numba_argsort_bounded(keys, idx, 10**15) > 3 * quicksort_budget(n)
    res = evaluate(labels, -keys, offsets, ["ndcg@10"], "ranx", qids=["adv"])
    assert any("'adv'" in w and "merge sort" in w for w in res.warnings), res.warnings


def test_each_query_is_ranked_once_for_all_measures(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    real = ranking_kernels.rank_queries

    def counting(*args):  # type: ignore[no-untyped-def]
        calls.append(args[-1])
        return real(*args)

    monkeypatch.setattr(ranking_kernels, "rank_queries", counting)
    rng = np.random.default_rng(1)
    labels = rng.integers(0, 3, size=300)
    evaluate(labels, rng.normal(size=300), np.array([0, 100, 300]), [*NDCG_1_32, "p@5"], "ranx")
    assert calls == [32]
    evaluate(labels, rng.normal(size=300), np.array([0, 100, 300]), ["ndcg@5", "map"], "yahoo")
    assert calls == [32, 200]  # AP reads the whole list: the longest query


@pytest.mark.parametrize("tie_mode", [TIE_STABLE, TIE_DOCID])
def test_rank_queries_prefix_matches_sorted(tie_mode: int) -> None:
    rng = np.random.default_rng(tie_mode)
    for _ in range(40):
        sizes = rng.integers(1, 90, size=int(rng.integers(1, 5)))
        off = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        n = int(off[-1])
        scores = rng.integers(0, 6, size=n).astype(np.float64)
        tiebreak = rng.permutation(n).astype(np.int64) if tie_mode == TIE_DOCID else np.zeros(0, np.int64)
        prefix = int(rng.choice([1, 5, 32, 33, 1000]))
        order, fallback = rank_queries(scores, tiebreak, tie_mode, off, prefix)
        assert not fallback.any()
        for q in range(sizes.size):
            lo, hi = int(off[q]), int(off[q + 1])
            if tie_mode == TIE_DOCID:
                want = sorted(range(lo, hi), key=lambda i: (-scores[i], -tiebreak[i]))
            else:
                want = sorted(range(lo, hi), key=lambda i: -scores[i])
            m = min(prefix, hi - lo)
            assert order[lo:lo + m].tolist() == want[:m]
