"""Stump, Hamming-tree and product search kernels against brute-force twins (tests/learners/naive.py)."""

from __future__ import annotations

import numpy as np
import pytest

from tunemix.train.data.binning import fit_bins
from tunemix.train.learners.hamming_tree import HammingTreeSearch
from tunemix.train.learners.stump_product import StumpProductSearch
from tunemix.train.learners.stump_search import ROW_BLOCK, boost_update, threshold_bin

from . import naive


def make_problem(seed: int, n: int = 50, d: int = 4, K: int = 3, levels: int = 7,
                 balanced: bool = False):
    """Integer-valued features (at most ``levels`` distinct values) and random signed weights."""
    rng = np.random.default_rng(seed)
    X = rng.integers(0, levels, size=(n, d)).astype(np.float32)
    classes = rng.integers(0, K, size=n)
    Y = -np.ones((n, K))
    Y[np.arange(n), classes] = 1.0
    W = rng.random((n, K)) + 0.01
    if balanced:  # class totals S_l = 0: positives and negatives of each label weigh the same
        for l in range(K):
            pos = Y[:, l] > 0
            if pos.any() and (~pos).any():
                W[pos, l] *= W[~pos, l].sum() / W[pos, l].sum()
    W /= W.sum()
    s = np.ascontiguousarray(W * Y)
    bins = fit_bins(X, 256)
    codes = bins.transform_columns(X)
    return X, s, bins, codes


def feats_of(bins, subset=None):
    f = np.arange(bins.n_features, dtype=np.int64) if subset is None else np.asarray(subset, np.int64)
    return f, bins.n_bins[f].astype(np.int64)


def partition(row_leaf: np.ndarray) -> set[frozenset[int]]:
    return {frozenset(np.flatnonzero(row_leaf == q).tolist()) for q in np.unique(row_leaf)}


@pytest.mark.parametrize("seed", range(8))
def test_stump_matches_brute_force(seed: int) -> None:
    X, s, bins, codes = make_problem(seed)
    feats, nb = feats_of(bins)
    fit = StumpProductSearch(codes, s.shape[1], 1, bins.max_bins).fit(s, feats, nb)
    assert fit is not None
    edge, j, t = naive.best_stump(X, s)
    assert fit.edge == pytest.approx(edge, abs=1e-12)
    assert fit.term_feature.shape == (1,)
    got_j = int(fit.term_feature[0])
    got_t = bins.threshold(got_j, threshold_bin(int(fit.term_bin[0])))
    # same split up to ties: the kernel's choice reaches the brute-force maximum
    phi = np.where(X[:, got_j] >= got_t, 1.0, -1.0)
    assert naive.stump_edge(s, phi) == pytest.approx(edge, abs=1e-12)
    assert (got_j, float(got_t)) == (j, float(t))
    # votes are the signs of sum_i s_il phi_i; row_leaf is phi
    np.testing.assert_array_equal(fit.row_leaf, (phi > 0).astype(np.int32))
    np.testing.assert_array_equal(fit.vote, np.where((s * phi[:, None]).sum(0) >= 0, 1.0, -1.0))
    # per-feature edges (bandit rewards) are each feature's best stump edge
    for f in range(X.shape[1]):
        assert fit.per_feature_edge[f] == pytest.approx(naive.best_stump(X, s, [f])[0], abs=1e-12)


@pytest.mark.parametrize("seed", range(4))
def test_stump_on_feature_subset(seed: int) -> None:
    X, s, bins, codes = make_problem(seed, d=6)
    feats, nb = feats_of(bins, [4, 1, 3])
    fit = StumpProductSearch(codes, s.shape[1], 1, bins.max_bins).fit(s, feats, nb)
    assert fit is not None
    assert fit.edge == pytest.approx(naive.best_stump(X, s, [4, 1, 3])[0], abs=1e-12)
    assert int(fit.term_feature[0]) in (4, 1, 3)


def test_stump_hand_computed() -> None:
    # three rows, two classes, standard weights 1/6: S = (1/6, -1/6); thresholds 1 and 2 both give
    # |S - 2L| summed = 1/3; the first (x >= 1) wins, votes (-1, +1).
    X = np.array([[0.0], [1.0], [2.0]], dtype=np.float32)
    s = np.array([[1, -1], [-1, 1], [1, -1]], dtype=np.float64) / 6
    bins = fit_bins(X, 256)
    feats, nb = feats_of(bins)
    fit = StumpProductSearch(bins.transform_columns(X), 2, 1, bins.max_bins).fit(s, feats, nb)
    assert fit is not None
    assert fit.edge == pytest.approx(1 / 3)
    assert bins.threshold(0, threshold_bin(int(fit.term_bin[0]))) == 1.0
    np.testing.assert_array_equal(fit.vote, [-1.0, 1.0])


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("n_leaves", [2, 3, 5, 8])
def test_tree_matches_brute_force(seed: int, n_leaves: int) -> None:
    X, s, bins, codes = make_problem(seed, n=40, d=3)
    feats, nb = feats_of(bins)
    fit = HammingTreeSearch(codes, s.shape[1], n_leaves, bins.max_bins).fit(s, feats, nb)
    masks, edge = naive.grow_tree(X, s, n_leaves)
    assert fit.edge == pytest.approx(edge, abs=1e-12)
    assert partition(fit.row_leaf) == {frozenset(np.flatnonzero(m).tolist()) for m in masks}
    # leaf votes are the signs of the leaf totals
    for q in range(fit.votes.shape[0]):
        S = s[fit.row_leaf == q].sum(axis=0)
        np.testing.assert_array_equal(fit.votes[q], np.where(S >= 0, 1.0, -1.0))
    assert fit.node_feature.shape[0] == fit.votes.shape[0] - 1


@pytest.mark.parametrize("seed", range(6))
def test_two_leaf_tree_is_the_best_stump_when_class_totals_vanish(seed: int) -> None:
    _X, s, bins, codes = make_problem(seed, balanced=True)
    np.testing.assert_allclose(s.sum(axis=0), 0.0, atol=1e-15)
    feats, nb = feats_of(bins)
    tree = HammingTreeSearch(codes, s.shape[1], 2, bins.max_bins).fit(s, feats, nb)
    stump = StumpProductSearch(codes, s.shape[1], 1, bins.max_bins).fit(s, feats, nb)
    assert stump is not None
    assert tree.edge == pytest.approx(stump.edge, abs=1e-12)
    assert int(tree.node_feature[0]) == int(stump.term_feature[0])
    assert int(tree.node_bin[0]) == int(stump.term_bin[0])
    # left leaf votes -v, right leaf +v
    left, right = -int(tree.node_left[0]) - 1, -int(tree.node_right[0]) - 1
    np.testing.assert_array_equal(tree.votes[right], stump.vote)
    np.testing.assert_array_equal(tree.votes[left], -stump.vote)


@pytest.mark.parametrize("seed", range(6))
def test_more_leaves_never_worse(seed: int) -> None:
    _X, s, bins, codes = make_problem(seed, n=80, d=5)
    feats, nb = feats_of(bins)
    stump = StumpProductSearch(codes, s.shape[1], 1, bins.max_bins).fit(s, feats, nb)
    assert stump is not None
    prev = stump.edge
    for n_leaves in (2, 3, 4, 8, 16):
        tree = HammingTreeSearch(codes, s.shape[1], n_leaves, bins.max_bins).fit(s, feats, nb)
        assert tree.edge >= prev - 1e-12
        prev = tree.edge


def product_against_brute_force(X: np.ndarray, s: np.ndarray, bins, codes, m: int):
    """The product search's fit on ``codes``, its edge and its rows' signs checked against
    ``naive.fit_product`` on ``X``; returns the fit and the rows' signs."""
    feats, nb = feats_of(bins)
    fit = StumpProductSearch(codes, s.shape[1], m, bins.max_bins).fit(s, feats, nb)
    assert fit is not None
    edge, terms = naive.fit_product(X, s, m)
    assert fit.edge == pytest.approx(edge, abs=1e-12)
    sigma = np.ones(X.shape[0])
    for j, t, nan_right in terms:
        if t is not None:
            sigma *= naive.phi_missing(X[:, j], t, nan_right)
    np.testing.assert_array_equal(fit.row_leaf, (sigma > 0).astype(np.int32))
    return fit, sigma


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("m", [1, 2, 3])
def test_product_matches_brute_force(seed: int, m: int) -> None:
    X, s, bins, codes = make_problem(seed, n=40, d=3)
    fit, sigma = product_against_brute_force(X, s, bins, codes, m)
    # the product's edge is sum_l V_l sum_i s_il sigma_i
    assert float((s * sigma[:, None] * fit.vote[None, :]).sum()) == pytest.approx(fit.edge, abs=1e-12)


def with_missing(seed: int, n: int, d: int):
    """``make_problem``'s data with a fifth of the values of features 0 and 2 missing (NaN):
    the missing bin of every histogram (code 255) is tried on both sides."""
    X, s, _, _ = make_problem(seed, n=n, d=d)
    rng = np.random.default_rng(seed + 50)
    X[rng.random(n) < 0.2, 0] = np.nan
    X[rng.random(n) < 0.2, 2] = np.nan
    bins = fit_bins(X, 256)
    return X, s, bins, bins.transform_columns(X)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("n_leaves", [2, 3, 5])
def test_tree_with_missing_values_matches_brute_force(seed: int, n_leaves: int) -> None:
    X, s, bins, codes = with_missing(seed, n=40, d=3)
    assert (codes == 255).any()
    feats, nb = feats_of(bins)
    fit = HammingTreeSearch(codes, s.shape[1], n_leaves, bins.max_bins).fit(s, feats, nb)
    masks, edge = naive.grow_tree(X, s, n_leaves)
    assert fit.edge == pytest.approx(edge, abs=1e-12)
    assert partition(fit.row_leaf) == {frozenset(np.flatnonzero(m).tolist()) for m in masks}


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("m", [1, 2, 3])
def test_product_with_missing_values_matches_brute_force(seed: int, m: int) -> None:
    X, s, bins, codes = with_missing(seed, n=40, d=3)
    product_against_brute_force(X, s, bins, codes, m)


@pytest.mark.parametrize("seed", range(5))
def test_product_with_more_terms_never_worse_than_stump(seed: int) -> None:
    _X, s, bins, codes = make_problem(seed, n=60, d=4)
    feats, nb = feats_of(bins)
    edges = []
    for m in (1, 2, 3, 5):
        fit = StumpProductSearch(codes, s.shape[1], m, bins.max_bins).fit(s, feats, nb)
        assert fit is not None
        edges.append(fit.edge)
    assert all(e >= edges[0] - 1e-12 for e in edges[1:])


def test_constant_features_give_no_split() -> None:
    X = np.ones((10, 2), dtype=np.float32)
    s = np.tile([0.05, -0.05], (10, 1))
    bins = fit_bins(X, 256)
    feats, nb = feats_of(bins)
    assert StumpProductSearch(bins.transform_columns(X), 2, 2, bins.max_bins).fit(s, feats, nb) is None
    tree = HammingTreeSearch(bins.transform_columns(X), 2, 4, bins.max_bins).fit(s, feats, nb)
    assert tree.node_feature.shape[0] == 0


@pytest.mark.parametrize("seed", range(4))
def test_boost_update_matches_textbook_and_sums_to_one(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n, K = 30, 4
    classes = rng.integers(0, K, n)
    Y = -np.ones((n, K))
    Y[np.arange(n), classes] = 1.0
    W = rng.random((n, K))
    W /= W.sum()
    s = np.ascontiguousarray(W * Y)
    votes = np.where(rng.random((3, K)) < 0.5, -1.0, 1.0)
    row_leaf = rng.integers(0, 3, n).astype(np.int32)
    F = rng.normal(size=(n, K))
    F0 = F.copy()
    alpha = 0.37
    err = boost_update(s, F, classes, row_leaf, votes, alpha)
    h = votes[row_leaf]
    W2 = W * np.exp(-alpha * h * Y)
    W2 /= W2.sum()
    np.testing.assert_allclose(np.abs(s), W2, rtol=1e-12)
    np.testing.assert_array_equal(np.sign(s), Y)
    assert np.abs(s).sum() == pytest.approx(1.0, abs=1e-14)
    np.testing.assert_allclose(F, F0 + alpha * h, rtol=1e-14)
    assert err == pytest.approx(np.mean(np.argmax(F, axis=1) != classes))


@pytest.mark.parametrize("K", [2, 5])
def test_tree_and_product_match_brute_force_across_row_blocks(K: int) -> None:
    # more rows than one histogram row block, other class counts (one kernel specialisation each).
    # Balanced class totals (S_l = 0): with K = 5 random weights every S_l < 0 and both sides of
    # any split keep that sign, so every split has gain 0 and the choice is a tie.
    X, s, bins, codes = make_problem(K, n=ROW_BLOCK + 300, d=3, K=K, balanced=True)
    feats, nb = feats_of(bins)
    fit = HammingTreeSearch(codes, K, 5, bins.max_bins).fit(s, feats, nb)
    masks, edge = naive.grow_tree(X, s, 5)
    assert fit.edge == pytest.approx(edge, abs=1e-12)
    assert partition(fit.row_leaf) == {frozenset(np.flatnonzero(m).tolist()) for m in masks}
    prod = StumpProductSearch(codes, K, 2, bins.max_bins).fit(s, feats, nb)
    assert prod is not None
    assert prod.edge == pytest.approx(naive.fit_product(X, s, 2)[0], abs=1e-12)
