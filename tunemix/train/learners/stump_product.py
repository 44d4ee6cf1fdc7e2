"""Products of m stumps: ``h(x) = alpha * prod_j (v_j * phi_j(x))`` element-wise.

Method page 3.1; Kégl and Busa-Fekete, "Boosting products of base classifiers", ICML 2009;
"Tune and mix" (2013), appendix A. Only the element-wise product of the votes matters, so a
product is stored as its terms ``phi_j(x) = +1 if x[f_j] >= t_j else -1`` and one vote vector
``V = prod_j v_j``: ``h(x)[l] = alpha * V_l * prod_j phi_j(x)``.

Fit by cyclic coordinate ascent: with the other terms fixed, term j is the best stump on
``s'[i,l] = s[i,l] * prod_{k != j} phi_k(x_i)`` (the other terms' votes fold into V), whose
edge ``sum_l |S'_l - 2 L'_l|`` is the product's edge. The first pass is greedy (term 1 the
best stump on s, term j on the product of terms 1..j-1); then passes repeat over all terms
until one pass does not raise the edge (or ``max_cycles`` passes). For m >= 2 a term may be
constant (phi = +1 everywhere), so a product never has a lower edge than the best stump and
the edge never falls during the cycles; with m = 1 the product is exactly the best stump.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from numba import njit

import tunemix.core.numba_cache  # noqa: F401 - numba's cache written under a lock (tunemix/core/numba_cache.py)
from tunemix.train.learners.stump_search import (
    HIST_BINS,
    STUMP,
    accumulate_histogram,
    best_split,
    class_lanes,
    goes_right,
    histogram_totals,
)

#: Relative rise of the edge below which a cycle counts as "no longer rising".
MIN_RISE = 1e-12


@njit(cache=True, nogil=True)
def fit_product(
    codes, s, feats, feat_nbins, n_terms, max_cycles, hist, term_feat, term_bin, V,
    row_sigma, per_feature, term_edges, k_lanes,
):  # pragma: no cover
    """Fit a product of ``n_terms`` stumps; returns ``(edge, n_passes)``.

    Outputs: ``term_feat`` (feature id, -1 = constant term), ``term_bin`` (the split as
    ``best_split`` encodes it: ``goes_right(code, bin)``), ``V`` (K,) the product vote,
    ``row_sigma`` (n,) int8 = ``prod_j phi_j(x_i)``,
    ``per_feature`` the best first-pass stump edge of each searched slot, ``term_edges``
    (n_terms, k) row j the best edge of each slot for term j in the first (greedy) pass, the
    constant term included for j >= 1 (bandit rewards: every term's search feeds the bandit);
    ``k_lanes`` is ``class_lanes(K)``.
    Returns edge -inf when no feature can be split.
    """
    n = s.shape[0]
    K = s.shape[1]
    k = feats.shape[0]
    phi = np.ones((n_terms, n), dtype=np.int8)
    sigma_other = np.ones(n, dtype=np.int8)
    all_rows = np.zeros(0, dtype=np.int64)  # every row, in order (no gather)
    S = np.zeros(K)
    L = np.zeros(K)
    scratch = np.empty(k)
    allow_const = n_terms >= 2
    for j in range(n_terms):
        term_feat[j] = -1
        term_bin[j] = 0
    edge = -np.inf
    n_passes = 0
    for cycle in range(max_cycles + 1):
        edge_at_start = edge
        for j in range(n_terms):
            for i in range(n):
                sg = 1
                for q in range(n_terms):
                    if q != j:
                        sg *= phi[q, i]
                sigma_other[i] = sg
            hist[:, :, :] = 0.0
            accumulate_histogram(codes, s, sigma_other, all_rows, 0, n, feats, hist, k_lanes)
            histogram_totals(hist, S)
            first = cycle == 0 and j == 0
            if first:
                sl, bb, sc = best_split(hist, feat_nbins, S, STUMP, False, L, per_feature, k_lanes)
                if sl < 0:
                    return -np.inf, 0
                term_edges[0, :] = per_feature
            else:
                pf = term_edges[j] if cycle == 0 else scratch
                sl, bb, sc = best_split(hist, feat_nbins, S, STUMP, allow_const, L, pf, k_lanes)
                if sl < 0:
                    continue
                if cycle > 0 and not sc > edge * (1.0 + MIN_RISE) + 1e-300:
                    continue
            edge = sc
            for l in range(K):
                V[l] = 1.0 if S[l] - 2.0 * L[l] >= 0.0 else -1.0
            if bb == 0:
                term_feat[j] = -1
                term_bin[j] = 0
                for i in range(n):
                    phi[j, i] = 1
            else:
                f = feats[sl]
                term_feat[j] = f
                term_bin[j] = bb
                for i in range(n):
                    phi[j, i] = 1 if goes_right(codes[f, i], bb) else -1
        n_passes = cycle + 1
        if cycle > 0 and not edge > edge_at_start * (1.0 + MIN_RISE):
            break
        if n_terms == 1:
            break
    for i in range(n):
        sg = 1
        for q in range(n_terms):
            sg *= phi[q, i]
        row_sigma[i] = sg
    return edge, n_passes


@dataclass
class ProductFit:
    """A fitted product in bin space. Constant terms are already dropped."""

    term_feature: npt.NDArray[np.int32]
    term_bin: npt.NDArray[np.int32]
    vote: npt.NDArray[np.float64]  # (K,) in {-1, +1}
    edge: float
    row_leaf: npt.NDArray[np.int32]  # 1 where prod phi = +1, else 0
    per_feature_edge: npt.NDArray[np.float64]
    n_passes: int
    #: (n_terms, k) first-pass best edge of each searched slot for each term (bandit rewards)
    term_edges: npt.NDArray[np.float64]


class StumpProductSearch:
    """Reusable scratch space for fitting products of ``n_terms`` stumps on fixed ``codes``."""

    def __init__(self, codes: npt.NDArray[np.uint8], n_classes: int, n_terms: int,
                 max_bins: int, max_cycles: int = 10) -> None:
        """``codes``: feature-major (d, n) bin codes (``FeatureBins.transform_columns``)."""
        if n_terms < 1:
            raise ValueError(f"n_terms must be at least 1, got {n_terms}")
        self.codes = codes
        self.n_terms = int(n_terms)
        self.n_classes = int(n_classes)
        self.max_bins = int(max_bins)
        self.max_cycles = int(max_cycles)
        self._sigma = np.empty(codes.shape[1], dtype=np.int8)
        self._hist: npt.NDArray[np.float64] = np.empty((0, 0, 0))

    def fit(self, s: npt.NDArray[np.float64], feats: npt.NDArray[np.int64],
            feat_nbins: npt.NDArray[np.int64]) -> ProductFit | None:
        """Fit one product on signed weights ``s`` over features ``feats``; None if no split."""
        shape = (feats.shape[0], max(self.max_bins, HIST_BINS), self.n_classes)
        if self._hist.shape != shape:
            self._hist = np.empty(shape, dtype=np.float64)
        term_feat = np.empty(self.n_terms, dtype=np.int64)
        term_bin = np.empty(self.n_terms, dtype=np.int64)
        vote = np.empty(self.n_classes)
        per_feature = np.empty(feats.shape[0])
        term_edges = np.full((self.n_terms, feats.shape[0]), -np.inf)
        edge, n_passes = fit_product(
            self.codes, s, feats, feat_nbins, self.n_terms, self.max_cycles, self._hist,
            term_feat, term_bin, vote, self._sigma, per_feature, term_edges,
            class_lanes(self.n_classes),
        )
        if not np.isfinite(edge):
            return None
        keep = term_feat >= 0
        return ProductFit(
            term_feature=term_feat[keep].astype(np.int32),
            term_bin=term_bin[keep].astype(np.int32),
            vote=vote,
            edge=float(edge),
            row_leaf=(self._sigma > 0).astype(np.int32),
            per_feature_edge=per_feature,
            n_passes=int(n_passes),
            term_edges=term_edges,
        )
