"""Rank-fusion and rescaling kernels: hand-computed textbook cases and slow twins."""

from __future__ import annotations

import ensemble_naive as naive
import numpy as np
import pytest

from tunemix.core.ensemble import fusion_kernels as fk
from tunemix.core.ensemble.rank_fusion import CombMNZ, CombSUM, CondorcetFusion, ReciprocalRankFusion

ONE_QUERY = np.array([0, 4], dtype=np.int64)


def col(*members):
    return np.ascontiguousarray(np.column_stack(members), dtype=np.float64)


# --------------------------------------------------------------------- hand arithmetic


def test_average_ranks_share_ties():
    S = col([5, 7, 7, 1])
    assert fk.average_ranks(S, ONE_QUERY)[:, 0].tolist() == [3.0, 1.5, 1.5, 4.0]


def test_rrf_hand_computed():
    # member 0 ranks docs 0,1,2 as 1,2,3; member 1 as 3,1,2; k = 1
    S = col([3, 2, 1], [1, 3, 2])
    off = np.array([0, 3], dtype=np.int64)
    got = ReciprocalRankFusion(k=1).fit(S, [0, 0, 0], off).transform(S, off)
    np.testing.assert_allclose(got, [1 / 2 + 1 / 4, 1 / 3 + 1 / 2, 1 / 4 + 1 / 3])
    # k = 60 with a tie: doc 1 and 2 share rank 1.5 under member 0
    S = col([5, 7, 7, 1], [1, 3, 2, 0])
    got = ReciprocalRankFusion().fit(S, [0] * 4, ONE_QUERY).transform(S, ONE_QUERY)
    np.testing.assert_allclose(
        got, [1 / 63 + 1 / 63, 1 / 61.5 + 1 / 61, 1 / 61.5 + 1 / 62, 1 / 64 + 1 / 64]
    )


def test_combsum_combmnz_hand_computed():
    # top-2 of member 0 = docs 1, 2 (tied at 7, both normalised to 1); member 1's top-2 =
    # docs 1 (3 -> 1.0) and 2 (2 -> 2/3); docs 0 and 3 are in no top-2.
    S = col([5, 7, 7, 1], [1, 3, 2, 0])
    s = CombSUM(top_k=2).fit(S, [0] * 4, ONE_QUERY).transform(S, ONE_QUERY)
    np.testing.assert_allclose(s, [0.0, 2.0, 5 / 3, 0.0])
    z = CombMNZ(top_k=2).fit(S, [0] * 4, ONE_QUERY).transform(S, ONE_QUERY)
    np.testing.assert_allclose(z, [0.0, 4.0, 10 / 3, 0.0])
    # MNZ counts membership: doc 0 is in member 1's top-1 only, doc 1 in member 0's top-1 only
    S = col([1, 3, 2], [4, 0, 2])
    off = np.array([0, 3], dtype=np.int64)
    z = CombMNZ(top_k=1).fit(S, [0] * 3, off).transform(S, off)
    np.testing.assert_allclose(z, [1.0, 1.0, 0.0])
    # all documents (top_k=None): plain CombSUM of min-max scores
    s = CombSUM(top_k=None).fit(S, [0] * 3, off).transform(S, off)
    np.testing.assert_allclose(s, [0 + 1, 1 + 0, 0.5 + 0.5])
    z = CombMNZ(top_k=None).fit(S, [0] * 3, off).transform(S, off)
    np.testing.assert_allclose(z, [2, 2, 2])


def _order(scores):
    return np.argsort(-scores, kind="stable").tolist()


def test_condorcet_majority_beats_borda_tie_and_input_order():
    # docs in input order [b, a, c]; voters a>b>c, a>b>c, b>c>a.
    # a beats b 2-1, a beats c 2-1, b beats c 3-0 -> a, b, c; Borda a = b = 4 would not decide.
    b_a_c = lambda a, b, c: [b, a, c]  # noqa: E731
    S = col(b_a_c(3, 2, 1), b_a_c(3, 2, 1), b_a_c(1, 3, 2))
    off = np.array([0, 3], dtype=np.int64)
    got = CondorcetFusion().fit(S, [0] * 3, off).transform(S, off)
    assert got.tolist() == [2.0, 3.0, 1.0]  # b second, a first, c third


def test_condorcet_cycle_broken_by_borda():
    # 2 x (a>b>c), 2 x (b>c>a), 1 x (c>a>b): a>b 3-2, b>c 4-1, c>a 3-2 is a cycle.
    # Borda (2,1,0 points): a = 5, b = 6, c = 4 -> b, a, c; d is last for every voter.
    def v(a, b, c):
        return [a, b, c, -1.0]

    S = col(v(3, 2, 1), v(3, 2, 1), v(1, 3, 2), v(1, 3, 2), v(2, 1, 3))
    got = CondorcetFusion().fit(S, [0] * 4, ONE_QUERY).transform(S, ONE_QUERY)
    assert got.tolist() == [3.0, 4.0, 2.0, 1.0]


def test_condorcet_pure_cycle_with_equal_borda_keeps_input_order():
    S = col([3, 2, 1], [1, 3, 2], [2, 1, 3])
    off = np.array([0, 3], dtype=np.int64)
    assert fk.condorcet_scores(S, off).tolist() == [3.0, 2.0, 1.0]


def test_condorcet_single_member_reproduces_its_order():
    rng = np.random.default_rng(0)
    s = rng.normal(size=9)
    off = np.array([0, 9], dtype=np.int64)
    got = fk.condorcet_scores(col(s), off)
    assert _order(got) == _order(s)


def test_rescale_hand_computed():
    S = col([1, 2, 3, 3], [4, 4, 4, 4])
    z = fk.rescale_per_query(S, ONE_QUERY, 0)
    sd = np.std([1, 2, 3, 3])
    np.testing.assert_allclose(z[:, 0], (np.array([1, 2, 3, 3]) - 2.25) / sd)
    assert z[:, 1].tolist() == [0, 0, 0, 0]  # constant member -> 0
    mm = fk.rescale_per_query(S, ONE_QUERY, 1)
    np.testing.assert_allclose(mm[:, 0], [0, 0.5, 1, 1])
    # constant 0.1 must give exact zeros, not rounding noise / tiny std
    S = col([0.1, 0.1, 0.1])
    off = np.array([0, 3], dtype=np.int64)
    assert fk.rescale_per_query(S, off, 0)[:, 0].tolist() == [0, 0, 0]


# ---------------------------------------------------------------------- slow twins

CASES = [
    # seed, n_queries, n_members, tie_levels
    (1, 30, 1, None),
    (2, 30, 3, None),
    (3, 40, 4, 2.0),
    (4, 25, 7, 1.0),
    (5, 20, 2, 0.5),
]


@pytest.mark.parametrize(("seed", "nq", "m", "ties"), CASES)
def test_kernels_match_slow_twins(seed, nq, m, ties):
    rng = np.random.default_rng(seed)
    S, off = naive.random_problem(rng, nq, m, tie_levels=ties)
    np.testing.assert_allclose(fk.average_ranks(S, off), naive.average_ranks(S, off))
    for k in (1.0, 60.0):
        np.testing.assert_allclose(fk.rrf_scores(S, off, k), naive.rrf(S, off, k), rtol=1e-12)
    for top_k in (1, 3, None):
        for mnz in (False, True):
            got = fk.comb_scores(S, off, 0 if top_k is None else top_k, mnz)
            np.testing.assert_allclose(got, naive.comb(S, off, top_k, mnz), rtol=1e-12)
    np.testing.assert_array_equal(fk.condorcet_scores(S, off), naive.condorcet(S, off))
    for mode, code in (("zscore_query", 0), ("minmax_query", 1)):
        np.testing.assert_allclose(
            fk.rescale_per_query(S, off, code), naive.rescale(S, off, mode), atol=1e-12
        )


@pytest.mark.parametrize(("seed", "nq", "m", "ties"), [*CASES, (6, 3, 37, 0.5), (7, 2, 640, None)])
def test_fused_weighted_rescaled_sum_matches_rescale_then_dot(seed, nq, m, ties):
    """The mixer's fused kernel against the two-step slow form (rescale, then the weighted sum),
    with members constant on a query (0.1 repeated: its mean is not 0.1 after rounding), empty
    queries, and member counts that are and are not multiples of the kernel's lanes."""
    rng = np.random.default_rng(seed)
    S, off = naive.random_problem(rng, nq, m, tie_levels=ties, empty=False)
    S = S.copy()
    S[off[0] : off[1], 0] = 0.1  # constant on query 0
    off = np.insert(off, 1, off[1])  # an empty query
    w = rng.uniform(0.0, 1.0, size=m)
    for mode in ("zscore_query", "minmax_query"):
        want = naive.rescale(S, off, mode) @ w
        got = fk.weighted_rescaled_sum(S, off, w, 0 if mode == "zscore_query" else 1)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-12 * max(1.0, np.abs(want).max()))
    # a member constant on the query contributes exactly nothing
    one = np.zeros(m)
    one[0] = 1.0
    assert np.all(fk.weighted_rescaled_sum(S, off, one, 0)[off[0] : off[2]] == 0.0)
    three = np.full((3, 1), 0.1)  # mean 0.10000000000000002: a naive std is 1e-17, not 0
    assert fk.weighted_rescaled_sum(three, np.array([0, 3]), np.ones(1), 0).tolist() == [0.0, 0.0, 0.0]


def test_condorcet_many_cycles_against_twin():
    # few members and coarse ties: many majority cycles and pairwise ties
    rng = np.random.default_rng(11)
    for m in (2, 3, 4, 5, 6):
        S, off = naive.random_problem(rng, 15, m, max_size=9, tie_levels=1.0, empty=False)
        np.testing.assert_array_equal(fk.condorcet_scores(S, off), naive.condorcet(S, off))


def test_kernels_handle_empty_input():
    S = np.zeros((0, 3))
    off = np.array([0], dtype=np.int64)
    assert fk.rrf_scores(S, off, 60.0).shape == (0,)
    assert fk.comb_scores(S, off, 10, True).shape == (0,)
    assert fk.condorcet_scores(S, off).shape == (0,)
    assert fk.rescale_per_query(S, off, 0).shape == (0, 3)


def test_fused_scores_invariant_under_monotone_member_transform():
    rng = np.random.default_rng(3)
    S, off = naive.random_problem(rng, 10, 4, empty=False)
    T = np.ascontiguousarray(np.exp(S) * 5 + 2)  # strictly increasing per member
    np.testing.assert_allclose(fk.rrf_scores(S, off, 60.0), fk.rrf_scores(T, off, 60.0))
    np.testing.assert_array_equal(fk.condorcet_scores(S, off), fk.condorcet_scores(T, off))


# ------------------------------------------------------------------ property tests

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@st.composite
def small_problems(draw):
    n_members = draw(st.integers(1, 4))
    sizes = draw(st.lists(st.integers(0, 7), min_size=1, max_size=4))
    n = sum(sizes)
    values = draw(st.lists(st.integers(-3, 3), min_size=n * n_members, max_size=n * n_members))
    S = np.asarray(values, dtype=np.float64).reshape(n, n_members)
    off = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    return np.ascontiguousarray(S), off


@settings(max_examples=60, deadline=None)
@given(small_problems())
def test_kernels_match_twins_property(problem):
    S, off = problem
    np.testing.assert_allclose(fk.rrf_scores(S, off, 60.0), naive.rrf(S, off, 60.0), rtol=1e-12)
    np.testing.assert_allclose(fk.comb_scores(S, off, 2, True), naive.comb(S, off, 2, True),
                               rtol=1e-12)
    cond = fk.condorcet_scores(S, off)
    np.testing.assert_array_equal(cond, naive.condorcet(S, off))
    # the Condorcet scores are a permutation of 1..n_q within every query
    for lo, hi in naive.queries(off):
        assert sorted(cond[lo:hi].tolist()) == list(range(1, hi - lo + 1))
