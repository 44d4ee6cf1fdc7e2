"""Hamming trees: AdaBoost.MH base classifiers with N leaves, one vote vector per leaf.

Method page 3.1; Busa-Fekete, Kégl, Éltető, Szarvas, "Tune and mix" (2013), appendix A
("our decision tree implementation is very similar to C4.5 except that we use the edge
improvement to select the next node and the threshold to split").

Inner nodes are stumps ``x[j] >= threshold`` (right) / else (left). Leaf R carries
``v_R[l] = sign(S_{R,l})``, ``S_{R,l} = sum_{i in R} s[i,l]`` (sign 0 counts as +1); the tree's
edge is ``gamma = sum_R sum_l |S_{R,l}|`` and ``h(x) = alpha * v_{R(x)}``. Growth is best-first:
starting from one leaf holding all rows, repeatedly split the leaf whose best split raises the
edge most, ``gain = sum_l |L_l| + |S_{R,l} - L_l| - |S_{R,l}|``, until N leaves or no split
raises the edge. The root is always split (when any feature has two bins), so every tree has at
least 2 leaves. With class totals ``S_l = 0`` for all l the 2-leaf tree is exactly the best
stump (``|L| + |S - L| = |S - 2L|``); in general its edge is at least the stump's, since each
side votes freely.

Histograms are built for the smaller child only; the larger one is the parent's minus it.
Rows of each leaf are a contiguous segment of a permutation ``order`` (stable partition).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from numba import njit

import tunemix.core.numba_cache  # noqa: F401 - numba's cache written under a lock (tunemix/core/numba_cache.py)
from tunemix.train.learners.stump_search import (
    ALPHA_MAX,
    HIST_BINS,
    TREE,
    accumulate_histogram,
    alpha_of_edge,
    base_edge,
    best_split,
    boost_update,
    class_lanes,
    goes_right,
    split_score,
)

#: A split must raise the edge by more than this to be taken (except the root split).
MIN_GAIN = 1e-14


@njit(cache=True, nogil=True)
def grow_tree(
    codes, s, feats, feat_nbins, n_leaves_max, order, tmp, hist_pool,
    row_leaf, node_feat, node_bin, node_left, node_right, leaf_sums, per_feature, node_gains,
    k_lanes,
):  # pragma: no cover
    """Grow one Hamming tree on all rows; returns ``(n_nodes, n_leaves, edge)``.

    Outputs (preallocated): ``node_feat`` (feature id), ``node_bin`` (the split as
    ``best_split`` encodes it: ``goes_right(code, bin)``; its bin ``threshold_bin(bin)``),
    ``node_left/right`` (FlatForest convention: c >= 0 node, c < 0 leaf -c-1), ``leaf_sums``
    (S_R per leaf), ``row_leaf`` (leaf of each row), ``per_feature`` (best root stump edge of
    each searched feature slot), ``node_gains`` (N-1, k): row q the best leaf-split gain of each
    searched slot at the leaf that became inner node q (-inf where a slot has no threshold
    there): every node's search feeds the bandit. ``hist_pool`` is (N, k, B, K) scratch;
    ``order``/``tmp`` (n,);
    ``k_lanes`` is ``class_lanes(K)`` (compile-time K for the histogram kernel).
    """
    n = s.shape[0]
    K = s.shape[1]
    k = feats.shape[0]
    N = n_leaves_max
    empty_sign = np.zeros(0, dtype=np.int8)
    all_rows = np.zeros(0, dtype=np.int64)  # the root: rows 0..n-1 in order, no gather
    seg_start = np.zeros(N, dtype=np.int64)
    seg_end = np.zeros(N, dtype=np.int64)
    leaf_parent = np.full(N, -1, dtype=np.int64)
    leaf_side = np.zeros(N, dtype=np.int64)
    best_slot = np.full(N, -1, dtype=np.int64)
    best_bin = np.zeros(N, dtype=np.int64)
    best_gain = np.full(N, -np.inf)
    best_L = np.zeros((N, K))
    leaf_pf = np.empty((N, k))  # per-slot best gain of each leaf (-> node_gains when split)
    for i in range(n):
        order[i] = i
    hist_pool[0, :, :, :] = 0.0
    accumulate_histogram(codes, s, empty_sign, all_rows, 0, n, feats, hist_pool[0], k_lanes)
    for l in range(K):
        leaf_sums[0, l] = 0.0
    for i in range(n):
        for l in range(K):
            leaf_sums[0, l] += s[i, l]
    seg_start[0] = 0
    seg_end[0] = n
    # per-feature stump edges at the root (bandit rewards)
    best_split(hist_pool[0], feat_nbins, leaf_sums[0], 0, False, best_L[0], per_feature, k_lanes)
    sl, bb, gg = best_split(hist_pool[0], feat_nbins, leaf_sums[0], TREE, False, best_L[0],
                            leaf_pf[0], k_lanes)
    best_slot[0] = sl
    best_bin[0] = bb
    best_gain[0] = gg
    n_leaves = 1
    n_nodes = 0
    while n_leaves < N:
        P = -1
        if n_nodes == 0:
            if best_slot[0] >= 0:
                P = 0
        else:
            g_best = MIN_GAIN
            for q in range(n_leaves):
                if best_slot[q] >= 0 and best_gain[q] > g_best:
                    P = q
                    g_best = best_gain[q]
        if P < 0:
            break
        f = feats[best_slot[P]]
        b = best_bin[P]
        nn = n_nodes
        node_feat[nn] = f
        node_bin[nn] = b
        for ff in range(k):
            node_gains[nn, ff] = leaf_pf[P, ff]
        if leaf_parent[P] >= 0:
            if leaf_side[P] == 0:
                node_left[leaf_parent[P]] = nn
            else:
                node_right[leaf_parent[P]] = nn
        # stable partition of the segment: left (code < b) first
        a = seg_start[P]
        e = seg_end[P]
        w = a
        t = 0
        for p in range(a, e):
            r = order[p]
            if goes_right(codes[f, r], b):
                tmp[t] = r
                t += 1
            else:
                order[w] = r
                w += 1
        for q in range(t):
            order[w + q] = tmp[q]
        mid = w
        R = n_leaves
        # smaller child's histogram into slot R, larger = parent (slot P) minus it
        hist_pool[R, :, :, :] = 0.0
        if mid - a <= e - mid:
            accumulate_histogram(codes, s, empty_sign, order, a, mid, feats, hist_pool[R], k_lanes)
            left_id = R
            right_id = P
        else:
            accumulate_histogram(codes, s, empty_sign, order, mid, e, feats, hist_pool[R], k_lanes)
            left_id = P
            right_id = R
        hp = hist_pool[P]
        hr = hist_pool[R]
        for ff in range(k):
            for bb2 in range(hist_pool.shape[2]):
                for l in range(K):
                    hp[ff, bb2, l] -= hr[ff, bb2, l]
        parent_sum = leaf_sums[P].copy()
        parent_L = best_L[P].copy()
        for l in range(K):
            leaf_sums[left_id, l] = parent_L[l]
            leaf_sums[right_id, l] = parent_sum[l] - parent_L[l]
        seg_start[left_id] = a
        seg_end[left_id] = mid
        seg_start[right_id] = mid
        seg_end[right_id] = e
        leaf_parent[left_id] = nn
        leaf_side[left_id] = 0
        leaf_parent[right_id] = nn
        leaf_side[right_id] = 1
        node_left[nn] = -left_id - 1
        node_right[nn] = -right_id - 1
        for c in (left_id, right_id):
            sl, bb, gg = best_split(hist_pool[c], feat_nbins, leaf_sums[c], TREE, False,
                                    best_L[c], leaf_pf[c], k_lanes)
            best_slot[c] = sl
            best_bin[c] = bb
            best_gain[c] = gg
        n_leaves += 1
        n_nodes += 1
    for q in range(n_leaves):
        for p in range(seg_start[q], seg_end[q]):
            row_leaf[order[p]] = q
    edge = 0.0
    for q in range(n_leaves):
        for l in range(K):
            edge += abs(leaf_sums[q, l])
    return n_nodes, n_leaves, edge


@njit(cache=True, nogil=True)
def boost_trees(
    codes, s, F, classes, feats, feat_nbins, n_leaves_max, order, tmp, hist_pool, row_leaf, k_lanes,
    n_iterations, out_feat, out_bin, out_left, out_right, out_nodes, out_votes, out_leaves, out_edge, out_alpha,
    out_error,
):  # pragma: no cover
    """Up to ``n_iterations`` AdaBoost.MH iterations with Hamming trees searched on every feature of
    ``feats``, in one call that holds no GIL: ``AdaBoostMH.fit``'s loop for a full search, step for
    step (``grow_tree``, the votes, ``base_edge``, alpha, ``boost_update``), so the trees and the
    weights are the same to the last bit (tests/learners/test_boost_trees.py checks it against the
    loop). Returns ``(done, stop)``: iterations kept in the ``out_*`` rows ``0..done-1`` (tree t:
    ``out_nodes[t]`` inner nodes, ``out_leaves[t]`` leaves, unit votes; the node rows are written up
    to their node count only), and why it stopped early: 0 not early, 1 no split (every feature
    constant), 2 no edge (an edge <= 0: that tree is not kept), 3 perfect (alpha capped at
    ``ALPHA_MAX``: that tree is kept). ``HammingTreeSearch.boost`` allocates the rows."""
    K = s.shape[1]
    k = feats.shape[0]
    N = n_leaves_max
    leaf_sums = np.zeros((N, K))
    per_feature = np.empty(k)
    node_gains = np.empty((N - 1, k))
    for t in range(n_iterations):
        leaf_sums[:, :] = 0.0
        node_gains[:, :] = -np.inf
        n_nodes, n_leaves, _ = grow_tree(
            codes, s, feats, feat_nbins, N, order, tmp, hist_pool, row_leaf, out_feat[t], out_bin[t],
            out_left[t], out_right[t], leaf_sums, per_feature, node_gains, k_lanes,
        )
        if n_nodes == 0:
            return t, 1
        votes = np.empty((n_leaves, K))
        for q in range(n_leaves):
            for l in range(K):
                votes[q, l] = 1.0 if leaf_sums[q, l] >= 0.0 else -1.0
        edge = base_edge(s, row_leaf, votes)
        if edge <= 0.0:
            return t, 2
        alpha = alpha_of_edge(edge)
        err = boost_update(s, F, classes, row_leaf, votes, alpha)
        out_nodes[t] = n_nodes
        out_leaves[t] = n_leaves
        out_votes[t, :n_leaves, :] = votes
        out_edge[t] = edge
        out_alpha[t] = alpha
        out_error[t] = err
        if alpha >= ALPHA_MAX:
            return t + 1, 3
    return n_iterations, 0


@dataclass
class TreeFit:
    """A fitted Hamming tree in bin space (thresholds as bins; see ``AdaBoostMH.to_forest``)."""

    node_feature: npt.NDArray[np.int32]
    node_bin: npt.NDArray[np.int32]
    node_left: npt.NDArray[np.int32]
    node_right: npt.NDArray[np.int32]
    votes: npt.NDArray[np.float64]  # (n_leaves, K) in {-1, +1}
    edge: float
    row_leaf: npt.NDArray[np.int32]
    per_feature_edge: npt.NDArray[np.float64]
    #: (n_nodes, k) best leaf-split gain of each searched slot at each inner node (bandit rewards)
    node_gains: npt.NDArray[np.float64]


@dataclass
class TreeChunk:
    """``HammingTreeSearch.boost``'s iterations: rows ``0..done-1`` of each array, tree t with
    ``n_nodes[t]`` inner nodes (``feature``, ``bin``, ``left``, ``right``: FlatForest convention,
    thresholds as bins) and ``n_leaves[t]`` unit ``votes``; ``stop`` as ``boost_trees`` returns it."""

    feature: npt.NDArray[np.int32]
    bin: npt.NDArray[np.int32]
    left: npt.NDArray[np.int32]
    right: npt.NDArray[np.int32]
    votes: npt.NDArray[np.float64]
    n_nodes: npt.NDArray[np.int64]
    n_leaves: npt.NDArray[np.int64]
    edge: npt.NDArray[np.float64]
    alpha: npt.NDArray[np.float64]
    error: npt.NDArray[np.float64]
    done: int = 0
    stop: int = 0


class HammingTreeSearch:
    """Reusable scratch space for growing trees with ``n_leaves`` leaves on fixed ``codes``."""

    def __init__(self, codes: npt.NDArray[np.uint8], n_classes: int, n_leaves: int,
                 max_bins: int) -> None:
        """``codes``: feature-major (d, n) bin codes (``FeatureBins.transform_columns``)."""
        if n_leaves < 2:
            raise ValueError(f"n_leaves must be at least 2, got {n_leaves}")
        self.codes = codes
        self.n_leaves = int(n_leaves)
        self.n_classes = int(n_classes)
        self.max_bins = int(max_bins)
        n = codes.shape[1]
        self._order = np.empty(n, dtype=np.int64)
        self._tmp = np.empty(n, dtype=np.int64)
        self._row_leaf = np.empty(n, dtype=np.int32)
        self._pool: npt.NDArray[np.float64] = np.empty((0, 0, 0, 0))

    def _hist_pool(self, k: int) -> npt.NDArray[np.float64]:
        """The (N, k, B, K) histogram scratch for ``k`` searched features (kept between calls)."""
        shape = (self.n_leaves, k, max(self.max_bins, HIST_BINS), self.n_classes)
        if self._pool.shape != shape:
            self._pool = np.empty(shape, dtype=np.float64)
        return self._pool

    def boost(self, s: npt.NDArray[np.float64], F: npt.NDArray[np.float64], classes: npt.NDArray[np.int64],
              feats: npt.NDArray[np.int64], feat_nbins: npt.NDArray[np.int64], n_iterations: int) -> TreeChunk:
        """Up to ``n_iterations`` boosting iterations on ``feats`` (every one searched), in one
        GIL-free ``boost_trees`` call: ``s`` (signed weights) and ``F`` (scores) are updated in place."""
        N, K, m = self.n_leaves, self.n_classes, int(n_iterations)
        feature, bins, left, right = (np.zeros((m, N - 1), dtype=np.int32) for _ in range(4))
        c = TreeChunk(feature=feature, bin=bins, left=left, right=right, votes=np.zeros((m, N, K)),
                      n_nodes=np.zeros(m, dtype=np.int64), n_leaves=np.zeros(m, dtype=np.int64),
                      edge=np.zeros(m), alpha=np.zeros(m), error=np.zeros(m))
        c.done, c.stop = boost_trees(self.codes, s, F, classes, feats, feat_nbins, N, self._order, self._tmp,
                                     self._hist_pool(feats.shape[0]), self._row_leaf, class_lanes(K), m,
                                     c.feature, c.bin, c.left, c.right, c.n_nodes, c.votes, c.n_leaves, c.edge,
                                     c.alpha, c.error)
        return c

    def fit(self, s: npt.NDArray[np.float64], feats: npt.NDArray[np.int64],
            feat_nbins: npt.NDArray[np.int64]) -> TreeFit:
        """Grow one tree on signed weights ``s`` searching only features ``feats``."""
        N = self.n_leaves
        K = self.n_classes
        k = feats.shape[0]
        node_feat = np.zeros(N - 1, dtype=np.int32)
        node_bin = np.zeros(N - 1, dtype=np.int32)
        node_left = np.zeros(N - 1, dtype=np.int32)
        node_right = np.zeros(N - 1, dtype=np.int32)
        leaf_sums = np.zeros((N, K))
        per_feature = np.empty(k)
        node_gains = np.full((N - 1, k), -np.inf)
        n_nodes, n_leaves, edge = grow_tree(
            self.codes, s, feats, feat_nbins, N, self._order, self._tmp, self._hist_pool(k),
            self._row_leaf, node_feat, node_bin, node_left, node_right, leaf_sums, per_feature,
            node_gains, class_lanes(K),
        )
        votes = np.where(leaf_sums[:n_leaves] >= 0.0, 1.0, -1.0)
        return TreeFit(
            node_feature=node_feat[:n_nodes].copy(),
            node_bin=node_bin[:n_nodes].copy(),
            node_left=node_left[:n_nodes].copy(),
            node_right=node_right[:n_nodes].copy(),
            votes=votes,
            edge=float(edge),
            row_leaf=self._row_leaf,
            per_feature_edge=per_feature,
            node_gains=node_gains[:n_nodes].copy(),
        )


__all__ = ["HammingTreeSearch", "TreeChunk", "TreeFit", "boost_trees", "grow_tree", "split_score"]
