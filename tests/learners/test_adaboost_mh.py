"""AdaBoostMH: textbook twin, hand arithmetic, snapshots, bandits, degenerate cases."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest

from tunemix.core.scoring.forest import FlatForest
from tunemix.train.learners import AdaBoostMH, FitProgress
from tunemix.train.learners.adaboost_mh import alpha_from_edge, initial_signed_weights
from tunemix.train.learners.stump_search import ALPHA_MAX

from . import naive


def separable(n: int = 400, seed: int = 0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 5)).astype(np.float32)
    y = (X[:, 0] > 0).astype(np.int64) + (X[:, 1] > 0.3).astype(np.int64)
    return X, y


def noisy(n: int = 300, seed: int = 0):
    """The separable problem with 20% of the labels redrawn at random (never perfect)."""
    X, y = separable(n, seed)
    rng = np.random.default_rng(seed + 1000)
    flip = rng.random(n) < 0.2
    y[flip] = rng.integers(0, 3, int(flip.sum()))
    return X, y


def test_initial_weights_by_hand() -> None:
    # labels 0, 1, 2 with K = 3: rows (1, .5, .5), (1, 2, 1), (2, 2, 4); total 14
    labels = np.array([0, 1, 2])
    s = initial_signed_weights(labels, labels, 3, "exponential")
    want = np.array([[1, -0.5, -0.5], [-1, 2, -1], [-2, -2, 4]]) / 14
    np.testing.assert_allclose(s, want, rtol=1e-15)
    s = initial_signed_weights(labels, labels, 3, "standard")
    # 1/(2n) and 1/(2n(K-1)) with n = 3
    np.testing.assert_allclose(s, np.where(np.eye(3) > 0, 1 / 6, -1 / 12), rtol=1e-15)


def test_one_iteration_by_hand() -> None:
    # X = 0, 1, 2 with classes 0, 1, 0, standard weights 1/6: the best stump x >= 1 with votes
    # (-1, +1) has edge 1/3, alpha = 0.5 ln 2; row 2 is wrong on both labels.
    X = np.array([[0.0], [1.0], [2.0]], dtype=np.float32)
    y = np.array([0, 1, 0])
    m = AdaBoostMH(n_iterations=1, base="stump", initial_weights="standard").fit(X, y)
    assert m.edges_[0] == pytest.approx(1 / 3)
    assert m.alphas_[0] == pytest.approx(0.5 * np.log(2.0))
    a = 0.5 * np.log(2.0)
    np.testing.assert_allclose(m.decision_function(X), [[a, -a], [-a, a], [-a, a]])
    assert m.train_error_[0] == pytest.approx(1 / 3)
    f = m.to_forest()
    assert f.node_threshold.tolist() == [1.0]


def test_matches_textbook_adaboost_with_stumps() -> None:
    rng = np.random.default_rng(5)
    X = rng.integers(0, 6, size=(60, 3)).astype(np.float32)
    y = rng.integers(0, 3, size=60)
    for policy in ("exponential", "standard"):
        m = AdaBoostMH(n_iterations=6, base="stump", initial_weights=policy).fit(X, y)
        alphas, edges, F = naive.adaboost_mh(X, y, y, 3, 6, policy)
        np.testing.assert_allclose(m.edges_, edges, rtol=1e-9)
        np.testing.assert_allclose(m.alphas_, alphas, rtol=1e-9)
        np.testing.assert_allclose(m.decision_function(X), F, rtol=1e-9, atol=1e-12)


def test_missing_values_match_textbook_adaboost_with_stumps() -> None:
    """NaN in a third of one feature and a tenth of another: every stump tries the missing values
    on both sides (the twin: ``naive.best_stump_missing``), and the exported forest sends them the
    way training did."""
    rng = np.random.default_rng(6)
    X = rng.integers(0, 6, size=(90, 3)).astype(np.float32)
    y = rng.integers(0, 3, size=90)
    X[rng.random(90) < 0.33, 0] = np.nan
    X[rng.random(90) < 0.1, 2] = np.nan
    m = AdaBoostMH(n_iterations=8, base="stump", initial_weights="exponential").fit(X, y)
    alphas, edges, F = naive.adaboost_mh(X, y, y, 3, 8, "exponential")
    np.testing.assert_allclose(m.edges_, edges, rtol=1e-9)
    np.testing.assert_allclose(m.alphas_, alphas, rtol=1e-9)
    np.testing.assert_allclose(m.decision_function(X), F, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("base", ["stump", "tree", "product"])
def test_informative_missingness_is_learned(base: str) -> None:
    """Relevant documents miss feature 0 (and only 5% of the others do): the first base splits
    on it and sends the missing values to the relevant side, in either orientation of the data;
    the exported forest scores the training rows as training did."""
    rng = np.random.default_rng(7)
    n = 400
    X = rng.normal(size=(n, 4)).astype(np.float32)
    y = (rng.random(n) < 0.3).astype(np.int64)
    X[(y == 1) | (rng.random(n) < 0.05), 0] = np.nan
    for sign in (1.0, -1.0):
        Xs = X * np.float32(sign)
        m = AdaBoostMH(n_iterations=20, base=base, n_leaves=4, n_terms=2).fit(Xs, y)
        forest = m.forest_
        assert forest.node_feature[0] == 0
        np.testing.assert_allclose(m.decision_function(Xs), m.train_scores_, rtol=1e-12, atol=1e-12)
        score = m.decision_function(Xs)[:, 1] - m.decision_function(Xs)[:, 0]
        missing = np.isnan(Xs[:, 0])
        assert score[missing].mean() > score[~missing].mean() + 1.0
        assert m.train_error_[-1] < 0.1


@pytest.mark.parametrize("base", ["stump", "tree", "product"])
def test_a_model_trained_without_missing_values_sends_them_left(base: str) -> None:
    """No node has seen a missing value: each sends one left (below every threshold), so the
    forest has no node sending NaN right and scores by the kernel's plain path; with 256 bins (no
    missing bin) too."""
    X, y = separable(200)
    for n_bins in (255, 256):
        m = AdaBoostMH(n_iterations=15, base=base, n_leaves=4, n_terms=2, n_bins=n_bins).fit(X, y)
        assert not m.forest_.node_missing_right.any() and m.forest_.missing_columns is None
        Xn, low = X.copy(), X.copy()
        Xn[::3, 0] = np.nan
        low[::3, 0] = -1e30
        np.testing.assert_array_equal(m.decision_function(Xn), m.decision_function(low))


@pytest.mark.parametrize("base", ["stump", "tree", "product"])
def test_training_error_falls_on_separable_problem(base: str) -> None:
    X, y = separable()
    m = AdaBoostMH(n_iterations=60, base=base, n_leaves=4, n_terms=2).fit(X, y)
    assert m.train_error_[-1] < 0.02
    assert m.train_error_[-1] < m.train_error_[0]
    # the Hamming-loss bound prod_t sqrt(1 - gamma_t^2) falls strictly
    # (a perfect tree may end the run early, with edge 1 up to rounding)
    bound = np.cumprod(np.sqrt(1 - np.minimum(m.edges_, 1.0) ** 2))
    assert np.all(np.diff(bound) < 0) or m.stop_reason_ == "perfect"
    assert np.all(m.edges_ > 0)
    if m.stop_reason_ == "perfect":
        assert m.train_error_[-1] == 0.0
    # the exported forest scores the training rows exactly as training accumulated them
    np.testing.assert_allclose(m.decision_function(X), m.train_scores_, rtol=1e-12, atol=1e-12)


def test_product_with_one_term_equals_stumps() -> None:
    X, y = separable(200, seed=2)
    a = AdaBoostMH(n_iterations=15, base="stump").fit(X, y)
    b = AdaBoostMH(n_iterations=15, base="product", n_terms=1).fit(X, y)
    np.testing.assert_allclose(a.alphas_, b.alphas_, rtol=1e-12)
    np.testing.assert_array_equal(a.forest_.node_feature, b.forest_.node_feature)
    np.testing.assert_array_equal(a.forest_.node_threshold, b.forest_.node_threshold)
    np.testing.assert_allclose(a.decision_function(X), b.decision_function(X), atol=1e-12)


@pytest.mark.parametrize("search", ["full", "ucb1"])
def test_snapshots_equal_shorter_runs(search: str) -> None:
    X, y = noisy(300, seed=3)
    kw: dict[str, Any] = {"base": "tree", "n_leaves": 4, "search": search, "n_arms": 2, "seed": 7}
    long = AdaBoostMH(n_iterations=30, checkpoints=[5, 12], **kw).fit(X, y)
    assert long.checkpoints_ == [5, 12, 30]
    staged = long.staged_decision_function(X)
    for c, T in enumerate(long.checkpoints_):
        short = AdaBoostMH(n_iterations=T, **kw).fit(X, y)
        np.testing.assert_allclose(staged[:, c], short.decision_function(X), rtol=1e-12,
                                   atol=1e-12)
        np.testing.assert_allclose(long.decision_function(X, iterations=T),
                                   short.decision_function(X), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("search", ["ucb1", "exp3p"])
def test_bandit_runs_are_reproducible(search: str) -> None:
    X, y = noisy(300, seed=4)
    X = np.hstack([X, np.random.default_rng(0).normal(size=(300, 10)).astype(np.float32)])
    kw: dict[str, Any] = {"n_iterations": 25, "base": "tree", "n_leaves": 4, "search": search,
                          "n_arms": 3}
    a = AdaBoostMH(seed=11, **kw).fit(X, y)
    b = AdaBoostMH(seed=11, **kw).fit(X, y)
    c = AdaBoostMH(seed=12, **kw).fit(X, y)
    for k, v in a.forest_.to_arrays().items():
        np.testing.assert_array_equal(v, b.forest_.to_arrays()[k])
    assert not np.array_equal(a.forest_.node_feature, c.forest_.node_feature)
    assert a.n_iterations_ == 25
    assert a.train_error_[-1] < a.train_error_[0]


def test_bandit_searches_only_its_arms_and_full_search_sees_all() -> None:
    X, y = separable(200, seed=5)
    X = np.hstack([X, np.zeros((200, 3), np.float32)])  # three constant features: never used
    m = AdaBoostMH(n_iterations=20, base="stump", search="exp3p", n_arms=1, seed=0).fit(X, y)
    assert set(m.forest_.node_feature.tolist()) <= {0, 1, 2, 3, 4}
    assert m.n_iterations_ == 20


def test_callback_and_time_budget() -> None:
    X, y = separable(200)
    seen: list[FitProgress] = []
    m = AdaBoostMH(n_iterations=8, base="stump").fit(X, y, callback=seen.append)
    assert [p.iteration for p in seen] == list(range(1, 9))
    assert [p.edge for p in seen] == m.edges_.tolist()
    assert [p.training_error for p in seen] == m.train_error_.tolist()
    assert all(b.elapsed_s >= a.elapsed_s for a, b in itertools.pairwise(seen))
    quick = AdaBoostMH(n_iterations=1000, base="stump", time_budget_s=1e-9).fit(X, y)
    assert quick.n_iterations_ == 1 and quick.stop_reason_ == "time_budget"


def test_perfect_base_classifier_caps_alpha_and_stops() -> None:
    X = np.array([[0.0], [1.0], [2.0], [3.0]], dtype=np.float32)
    y = np.array([0, 0, 1, 1])
    m = AdaBoostMH(n_iterations=50, base="stump", initial_weights="standard").fit(X, y)
    assert m.n_iterations_ == 1 and m.stop_reason_ == "perfect"
    assert m.alphas_[0] == ALPHA_MAX and np.isfinite(ALPHA_MAX)
    assert alpha_from_edge(1.0) == ALPHA_MAX
    assert np.all(np.isfinite(m.decision_function(X)))


def test_single_class_present() -> None:
    X, _ = separable(100)
    y = np.full(100, 2)
    m = AdaBoostMH(n_iterations=20, base="tree", n_leaves=4).fit(X, y)
    assert m.n_classes_ == 3
    F = m.decision_function(X)
    assert np.all(np.argmax(F, axis=1) == 2)
    assert np.all(np.isfinite(F))


def test_all_features_constant_gives_empty_model() -> None:
    X = np.ones((20, 3), np.float32)
    y = np.arange(20) % 2
    for base in ("stump", "tree", "product"):
        m = AdaBoostMH(n_iterations=5, base=base).fit(X, y)
        assert m.n_iterations_ == 0 and m.stop_reason_ == "no_split"
        np.testing.assert_array_equal(m.decision_function(X), np.zeros((20, 2)))
        assert isinstance(m.to_forest(), FlatForest)


def test_label_grouping_option() -> None:
    X, y = separable(300)
    m = AdaBoostMH(n_iterations=10, base="stump").fit(X, y, label_grouping="binary")
    assert m.n_classes_ == 2
    counts = np.bincount(y, minlength=3)
    assert m.class_gains_[1] == pytest.approx((counts[1] * 1 + counts[2] * 3) / (counts[1] + counts[2]))
    assert m.decision_function(X).shape == (300, 2)


@pytest.mark.parametrize(
    ("params", "error"),
    [
        ({"base": "forest"}, ValueError),
        ({"search": "exp3"}, ValueError),
        ({"n_leaves": 1}, ValueError),
        ({"n_iterations": 0}, ValueError),
        ({"n_bins": 300}, ValueError),
        ({"n_bins": 2.5}, TypeError),
        ({"initial_weights": "uniform"}, ValueError),
        ({"time_budget_s": -1.0}, ValueError),
    ],
)
def test_bad_parameters(params: dict, error: type) -> None:
    X, y = separable(50)
    with pytest.raises(error):
        AdaBoostMH(**params).fit(X, y)


def test_bad_inputs() -> None:
    X, y = separable(50)
    with pytest.raises(ValueError, match="y must have shape"):
        AdaBoostMH().fit(X, y[:-1])
    with pytest.raises(ValueError, match="non-negative"):
        AdaBoostMH().fit(X, y - 1)
    Xn = X.copy()
    Xn[3, 1] = np.inf
    with pytest.raises(ValueError, match=r"infinity \(row 3"):
        AdaBoostMH().fit(Xn, y)
    with pytest.raises(ValueError, match="not fitted"):
        AdaBoostMH().decision_function(X)
    m = AdaBoostMH(n_iterations=3, base="stump").fit(X, y)
    with pytest.raises(ValueError, match="shape"):
        m.decision_function(X[:, :2])
    with pytest.raises(ValueError, match="iterations"):
        m.decision_function(X, iterations=4)
