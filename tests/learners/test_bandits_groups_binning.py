"""Bandits, label groupings and adaptive binning."""

from __future__ import annotations

import numpy as np
import pytest

from tunemix.train.data.binning import fit_bins
from tunemix.train.learners.bandits import Exp3PBandit, FullSearch, UCB1Bandit, edge_reward, make_bandit
from tunemix.train.learners.label_groups import STANDARD_GROUPINGS, LabelGrouping, get_grouping


# ------------------------------------------------------------------ bandits
def test_edge_reward_is_the_papers_reward() -> None:
    g = np.array([0.0, 0.6, -0.3, np.nan])
    # -log sqrt(1 - 0.36) = -log 0.8
    np.testing.assert_allclose(edge_reward(g), [0.0, -np.log(0.8), 0.0, 0.0], rtol=1e-12)
    perfect = edge_reward(np.array([1.0]))[0]
    assert np.isfinite(perfect) and perfect > 13.0  # -0.5 log(2e-12)


def run_bandit(bandit, means: np.ndarray, rounds: int) -> np.ndarray:
    pulls = np.zeros(means.shape[0], dtype=np.int64)
    for _ in range(rounds):
        arms = bandit.select()
        assert len(set(arms.tolist())) == arms.shape[0] == bandit.n_pulls
        pulls[arms] += 1
        bandit.update(arms, means[arms])
    return pulls


@pytest.mark.parametrize("kind", ["ucb1", "exp3p"])
def test_bandits_are_seeded(kind: str) -> None:
    means = np.linspace(0.01, 0.3, 20)
    a = run_bandit(make_bandit(kind, 20, 3, 200, seed=5), means, 200)
    b = run_bandit(make_bandit(kind, 20, 3, 200, seed=5), means, 200)
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("kind", ["ucb1", "exp3p"])
def test_bandits_prefer_the_best_arms(kind: str) -> None:
    means = np.full(30, 0.05)
    means[[3, 17]] = 0.5  # two clearly better features
    horizon = 3000
    pulls = run_bandit(make_bandit(kind, 30, 2, horizon, seed=1), means, horizon)
    others = np.delete(pulls, [3, 17])
    assert pulls[3] > 3 * others.mean() and pulls[17] > 3 * others.mean()


def test_full_search_and_bad_arguments() -> None:
    assert FullSearch(4).select().tolist() == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="search"):
        make_bandit("exp4", 3, 1, 10, 0)
    with pytest.raises(ValueError):
        UCB1Bandit(0, 1)
    with pytest.raises(ValueError, match="horizon"):
        Exp3PBandit(3, 1, 0)
    assert UCB1Bandit(3, 10).n_pulls == 3


def test_ucb1_tries_every_arm_first() -> None:
    b = UCB1Bandit(7, 2, seed=0)
    seen: set[int] = set()
    for _ in range(4):
        arms = b.select()
        seen |= set(arms.tolist())
        b.update(arms, np.full(arms.shape, 0.1))
    assert seen == set(range(7))


# ------------------------------------------------------------ label groups
def test_standard_groupings() -> None:
    g5 = STANDARD_GROUPINGS[5]
    assert g5["three-a"].mapping.tolist() == [0, 1, 1, 2, 2]
    assert g5["three-b"].mapping.tolist() == [0, 1, 1, 1, 2]
    assert g5["four"].mapping.tolist() == [0, 1, 1, 2, 3]
    assert g5["binary"].n_classes == 2
    assert STANDARD_GROUPINGS[3]["binary"].mapping.tolist() == [0, 1, 1]
    assert get_grouping("original", 4).n_classes == 4
    with pytest.raises(ValueError, match="three-a"):
        get_grouping("three-a", 3)


def test_class_gains_by_hand() -> None:
    # binary grouping of K = 3, counts (10, 6, 2): class 1 gain (6*1 + 2*3) / 8 = 1.5
    labels = np.array([0] * 10 + [1] * 6 + [2] * 2)
    g = get_grouping("binary", 3)
    np.testing.assert_allclose(g.class_gains(labels), [0.0, 1.5])
    np.testing.assert_array_equal(g.apply(labels), [0] * 10 + [1] * 8)
    # a group with no training label gets the plain mean: (7 + 15) / 2 = 11
    g5 = get_grouping("three-a", 5)
    np.testing.assert_allclose(g5.class_gains(np.array([0, 1, 2, 2])), [0.0, 7 / 3, 11.0])
    with pytest.raises(ValueError, match="covers labels"):
        g.apply([0, 3])


def test_non_contiguous_grouping_rejected() -> None:
    with pytest.raises(ValueError, match="contiguous"):
        LabelGrouping.from_groups([[0, 2], [1]])


# ----------------------------------------------------------------- binning
def test_few_distinct_values_get_one_bin_each() -> None:
    X = np.array([[3.0, 1], [1.0, 1], [2.0, 1], [3.0, 1]], dtype=np.float32)
    bins = fit_bins(X, 256)
    assert bins.n_bins.tolist() == [3, 1]
    assert bins.transform(X)[:, 0].tolist() == [2, 0, 1, 2]
    assert bins.threshold(0, 1) == 2.0 and bins.threshold(0, 2) == 3.0
    with pytest.raises(ValueError, match="bin_index"):
        bins.threshold(1, 1)


@pytest.mark.parametrize("seed", range(3))
def test_quantile_bins_and_exact_threshold_equivalence(seed: int) -> None:
    rng = np.random.default_rng(seed)
    X = np.column_stack([
        rng.normal(size=5000),
        rng.exponential(size=5000).round(2),
        np.where(rng.random(5000) < 0.7, 0.0, rng.normal(size=5000)),  # a heavy value
    ]).astype(np.float32)
    bins = fit_bins(X, 32)
    codes = bins.transform(X)
    assert np.all(bins.n_bins <= 32) and np.all(bins.n_bins >= 2)
    for j in range(3):
        counts = np.bincount(codes[:, j], minlength=int(bins.n_bins[j]))
        assert np.all(counts > 0)  # bins only where there are data
        for b in range(1, int(bins.n_bins[j])):
            np.testing.assert_array_equal(codes[:, j] >= b, X[:, j] >= bins.threshold(j, b))
            assert bins.threshold(j, b) in X[:, j]
    # roughly equal-frequency bins for a continuous feature
    counts = np.bincount(codes[:, 0])
    assert counts.max() < 3 * 5000 / 32
    # the heavy value 0.0 sits in a bin of its own
    zero_bin = codes[X[:, 2] == 0.0, 2]
    assert np.unique(zero_bin).size == 1
    assert np.all(X[codes[:, 2] == zero_bin[0], 2] == 0.0)


def test_missing_values_have_a_bin_of_their_own() -> None:
    """NaN's code is 255 whatever the feature's bins; edges come from the present values; a feature
    with a missing value gets at most 255 bins; bins fitted without one refuse NaN by name when
    the feature has all 256."""
    rng = np.random.default_rng(4)
    X = np.column_stack([rng.normal(size=3000), rng.integers(0, 4, 3000), rng.normal(size=3000)]).astype(np.float32)
    X[rng.random(3000) < 0.2, 0] = np.nan
    X[:5, 1] = np.nan
    bins = fit_bins(X, 256)
    codes = bins.transform(X)
    assert bins.n_bins[0] <= 255 and bins.n_bins[1] == 4 and bins.n_bins[2] == 256
    np.testing.assert_array_equal(codes[:, :2] == 255, np.isnan(X[:, :2]))
    present = ~np.isnan(X[:, 0])
    for b in range(1, int(bins.n_bins[0])):
        np.testing.assert_array_equal(codes[present, 0] >= b, X[present, 0] >= bins.threshold(0, b))
    assert np.isfinite(bins.edges[0, : bins.n_bins[0] - 1]).all()
    Y = X.copy()
    Y[7, 2] = np.nan
    with pytest.raises(ValueError, match=r"feature 2 has a missing value \(NaN\) but 256 bins"):
        bins.transform(Y)


def test_bins_reject_bad_arguments() -> None:
    with pytest.raises(ValueError, match="n_bins"):
        fit_bins(np.zeros((3, 2), np.float32), 257)
    with pytest.raises(TypeError, match="n_bins"):
        fit_bins(np.zeros((3, 2), np.float32), 3.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="shape"):
        fit_bins(np.zeros((3, 2), np.float32), 8).transform(np.zeros((3, 3), np.float32))


def test_codes_kernel_matches_searchsorted() -> None:
    rng = np.random.default_rng(9)
    X = rng.normal(size=(3000, 4)).astype(np.float32)
    X[:, 3] = rng.integers(0, 3, 3000)
    bins = fit_bins(X, 17, sample_size=500, seed=2)  # rows outside the sample still get codes
    want = np.column_stack([
        np.searchsorted(bins.edges[j, : bins.n_bins[j] - 1], X[:, j], side="right")
        for j in range(4)
    ])
    np.testing.assert_array_equal(bins.transform(X), want)
    np.testing.assert_array_equal(bins.transform_columns(X), want.T)
