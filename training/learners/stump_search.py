"""Numba kernels shared by the AdaBoost.MH base learners: histograms, split search, weight update.

Notation (method page 3.1; Schapire and Singer 1999; Busa-Fekete, Kégl, Éltető, Szarvas,
"Tune and mix", Machine Learning 2013, appendix A). The boosting state is the signed weight
matrix ``s[i, l] = w[i, l] * y[i, l]`` (float64, (n, K)), with ``w = |s|`` summing to 1 and
``y[i, l] = +1`` iff l is row i's class. Features are pre-binned (``binning.py``): ``codes``
(uint8, feature-major (d, n), C-contiguous), feature j having ``nbins[j]`` bins.

A histogram of a set of rows R over the searched features ``feats`` (k of them) is
``hist[f, b, l] = sum_{i in R, code[i, feats[f]] = b} sign_i * s[i, l]`` (float64, (k, B, K));
``sign_i`` is +1 except for product terms (the product of the other terms' phi, see
``stump_product.py``). With ``S_l`` the class totals and ``L_l(b) = sum_{b' < b} hist[f, b', l]``
the total left of the threshold between bins b-1 and b (the test ``code >= b`` sends right):

- stump criterion (``STUMP``): edge ``sum_l |S_l - 2 L_l(b)|`` with votes
  ``v_l = sign(S_l - 2 L_l(b))`` (phi = +1 right, -1 left);
- leaf-split criterion (``TREE``): gain ``sum_l (|L_l| + |S_l - L_l|) - sum_l |S_l|``: the rise of
  the Hamming tree's edge ``sum_R sum_l |S_{R,l}|`` when one leaf is split in two.

Ties go to the lowest feature slot, then the lowest bin. A threshold must leave at least one bin
on each side (b in 1..nbins-1) unless ``allow_constant`` (then b = 0, phi = +1 everywhere, is a
candidate too: used by product terms so a product of m terms can express fewer terms).
"""

from __future__ import annotations

import numpy as np
from numba import njit

STUMP = 0
TREE = 1

#: ``1 - edge`` below this counts as a perfect base classifier (alpha is capped, boosting stops).
PERFECT_EDGE_TOL = 1e-10
#: The cap on alpha: 0.5 ln((2 - tol) / tol) for tol = PERFECT_EDGE_TOL (about 11.86).
ALPHA_MAX = 0.5 * float(np.log((2.0 - PERFECT_EDGE_TOL) / PERFECT_EDGE_TOL))


#: Rows per block in ``accumulate_histogram``: a block's weights stay in L1/L2 while every
#: searched feature's histogram is updated from it in turn (feature-major codes, sequential).
ROW_BLOCK = 256


@njit(cache=True)
def accumulate_histogram(codes, s, row_sign, order, start, end, feats, hist):  # pragma: no cover
    """``hist[f, b, :] += row_sign[r] * s[r, :]`` over rows ``order[start:end]``.

    ``codes`` is feature-major (d, n). ``row_sign`` is int8 (n,) or has length 0 (meaning all
    +1). ``hist`` must be zeroed by the caller. Rows are taken in blocks of ``ROW_BLOCK``; within a
    block one feature at a time, so that one feature's histogram is hot while it is updated.
    """
    k = feats.shape[0]
    K = s.shape[1]
    use_sign = row_sign.shape[0] > 0
    for p0 in range(start, end, ROW_BLOCK):
        p1 = min(p0 + ROW_BLOCK, end)
        for f in range(k):
            cf = codes[feats[f]]
            h = hist[f]
            if use_sign:
                for p in range(p0, p1):
                    r = order[p]
                    c = cf[r]
                    if row_sign[r] < 0:
                        for l in range(K):
                            h[c, l] -= s[r, l]
                    else:
                        for l in range(K):
                            h[c, l] += s[r, l]
            else:
                for p in range(p0, p1):
                    r = order[p]
                    c = cf[r]
                    for l in range(K):
                        h[c, l] += s[r, l]


@njit(cache=True)
def histogram_totals(hist, out):  # pragma: no cover
    """Class totals ``S_l``: the sum over bins of feature slot 0 (every row is in one bin)."""
    K = hist.shape[2]
    for l in range(K):
        out[l] = 0.0
    for b in range(hist.shape[1]):
        for l in range(K):
            out[l] += hist[0, b, l]


@njit(cache=True)
def split_score(S, L, criterion):  # pragma: no cover
    """Stump edge ``sum_l |S_l - 2 L_l|`` or leaf-split gain ``sum_l |L_l|+|S_l-L_l|-|S_l|``."""
    acc = 0.0
    if criterion == 0:
        for l in range(S.shape[0]):
            acc += abs(S[l] - 2.0 * L[l])
    else:
        for l in range(S.shape[0]):
            acc += abs(L[l]) + abs(S[l] - L[l]) - abs(S[l])
    return acc


@njit(cache=True)
def best_split(hist, feat_nbins, S, criterion, allow_constant, best_L, per_feature):  # pragma: no cover
    """Best (feature slot, bin) over ``hist`` (k, B, K) for totals ``S``; see module docstring.

    Returns ``(slot, bin, score)``; slot is -1 when no feature has a candidate threshold.
    ``best_L`` receives the left totals of the winner; ``per_feature[f]`` the best score of
    slot f (-inf when none), used as bandit rewards.
    """
    k = hist.shape[0]
    K = hist.shape[2]
    L = np.zeros(K)
    best_slot = -1
    best_bin = -1
    best_score = -np.inf
    for f in range(k):
        nb = feat_nbins[f]
        fbest = -np.inf
        for l in range(K):
            L[l] = 0.0
        if allow_constant:
            sc = split_score(S, L, criterion)
            fbest = sc
            if sc > best_score:
                best_score = sc
                best_slot = f
                best_bin = 0
                for l in range(K):
                    best_L[l] = 0.0
        for b in range(1, nb):
            for l in range(K):
                L[l] += hist[f, b - 1, l]
            sc = split_score(S, L, criterion)
            if sc > fbest:
                fbest = sc
            if sc > best_score:
                best_score = sc
                best_slot = f
                best_bin = b
                for l in range(K):
                    best_L[l] = L[l]
        per_feature[f] = fbest
    return best_slot, best_bin, best_score


@njit(cache=True)
def stump_row_leaf(codes, feature, bin_index, row_leaf):  # pragma: no cover
    """``row_leaf[i] = 1`` if ``code[i, feature] >= bin_index`` (phi = +1) else 0."""
    cf = codes[feature]
    for i in range(cf.shape[0]):
        row_leaf[i] = 1 if cf[i] >= bin_index else 0


@njit(cache=True)
def base_edge(s, row_leaf, votes):  # pragma: no cover
    """Edge ``gamma = sum_{i,l} s[i,l] * votes[row_leaf[i], l]`` of a base classifier."""
    g = 0.0
    for i in range(s.shape[0]):
        lf = row_leaf[i]
        for l in range(s.shape[1]):
            g += s[i, l] * votes[lf, l]
    return g


@njit(cache=True)
def boost_update(s, F, classes, row_leaf, votes, alpha):  # pragma: no cover
    """One AdaBoost.MH step for the base classifier ``h(x_i)[l] = alpha * votes[row_leaf[i], l]``.

    ``w[i,l] *= exp(-alpha v_l phi(x_i) y[i,l])`` then renormalise (so ``sum |s| = 1``);
    ``F += h``. Returns the training error: the fraction of rows whose ``argmax_l F[i, l]``
    (first maximum) is not their class.
    """
    n = s.shape[0]
    K = s.shape[1]
    down = np.exp(-alpha)
    up = np.exp(alpha)
    total = 0.0
    wrong = 0
    for i in range(n):
        lf = row_leaf[i]
        best = 0
        for l in range(K):
            v = votes[lf, l]
            x = s[i, l]
            if x * v > 0.0:
                x *= down
            else:
                x *= up
            s[i, l] = x
            total += abs(x)
            F[i, l] += alpha * v
            if F[i, l] > F[i, best]:
                best = l
        if best != classes[i]:
            wrong += 1
    inv = 1.0 / total
    for i in range(n):
        for l in range(K):
            s[i, l] *= inv
    return wrong / max(n, 1)
