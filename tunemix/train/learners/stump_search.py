"""Numba kernels shared by the AdaBoost.MH base learners: histograms, split search, weight update.

Notation (method page 3.1; Schapire and Singer 1999; Busa-Fekete, Kégl, Éltető, Szarvas,
"Tune and mix", Machine Learning 2013, appendix A). The boosting state is the signed weight
matrix ``s[i, l] = w[i, l] * y[i, l]`` (float64, (n, K)), with ``w = |s|`` summing to 1 and
``y[i, l] = +1`` iff l is row i's class. Features are pre-binned (``tunemix/train/data/binning.py``; in
training the shared codes of ``tunemix/train/data/binned.py``): ``codes``
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

**Missing values** (``docs/missing-values.md``) have the bin ``MISSING_CODE`` (255) of their own,
counted in ``hist[f, MISSING_CODE]`` (histograms have ``HIST_BINS`` = 256 bins). For a feature of
at most 255 bins with missing mass M_l, every threshold is tried twice, as LightGBM does: missing
right (left total ``L_l(b)``) and missing left (``L_l(b) + M_l``), and the better is kept; a
threshold ``b = nbins`` (every present value left, the missing ones right) is a candidate too.
The chosen bin is returned as ``b`` (missing right), ``b + MISSING_LEFT`` (missing left) or, when
the node's rows have no missing value of the feature, ``b + NO_MISSING`` (a missing value met
later goes left, as ``x >= t`` sends NaN); ``goes_right(code, bin)`` is the test that sends a row
right for each.

Ties go to the lowest feature slot, then the lowest bin, then missing right. A threshold must leave at least one bin
on each side (b in 1..nbins-1) unless ``allow_constant`` (then b = 0, phi = +1 everywhere, is a
candidate too: used by product terms so a product of m terms can express fewer terms).

Speed without giving up exactness: histograms stay float64 and every entry adds its rows in row
order, so a split is chosen from the same sums as the slow twins in ``tests/learners/naive.py``
compute (up to rounding in the order of additions and the tree's parent-minus-child
subtraction). The speed comes from making K a compile-time constant
(``class_lanes``), from sweeping each block of rows past two features' histograms at once, and
from reading the root's rows directly (no ``order`` gather).
"""

from __future__ import annotations

import numpy as np
from numba import njit

import tunemix.core.numba_cache  # noqa: F401 - numba's cache written under a lock (tunemix/core/numba_cache.py)

STUMP = 0
TREE = 1

#: the missing bin's code (``tunemix.train.data.binning.MISSING_CODE``)
MISSING_CODE = 255
#: bins of a histogram: every code, the missing one included
HIST_BINS = MISSING_CODE + 1
#: added to a chosen bin whose missing values go left (``best_split``)
MISSING_LEFT = 256
#: added to a chosen bin of a feature without missing values in the node (``best_split``)
NO_MISSING = 512


@njit(cache=True, inline="always")
def goes_right(code, b):  # pragma: no cover
    """Whether a row of bin ``code`` goes right at the split ``b`` (``best_split``'s encoding:
    ``code >= b``, the missing bin right; ``b - MISSING_LEFT`` with the missing bin left;
    ``b - NO_MISSING``: ``code >= b``, every bin a value's, up to 255)."""
    if b >= NO_MISSING:
        return code >= b - NO_MISSING
    if b >= MISSING_LEFT:
        return code >= b - MISSING_LEFT and code != MISSING_CODE
    return code >= b


def threshold_bin(b: int) -> int:
    """The bin of ``best_split``'s encoded bin ``b``: the split is ``code >= threshold_bin(b)``."""
    return b - NO_MISSING if b >= NO_MISSING else b - MISSING_LEFT if b >= MISSING_LEFT else b


#: ``1 - edge`` below this counts as a perfect base classifier (alpha is capped, boosting stops).
PERFECT_EDGE_TOL = 1e-10
#: The cap on alpha: 0.5 ln((2 - tol) / tol) for tol = PERFECT_EDGE_TOL (about 11.86).
ALPHA_MAX = 0.5 * float(np.log((2.0 - PERFECT_EDGE_TOL) / PERFECT_EDGE_TOL))


@njit(cache=True, nogil=True)
def alpha_of_edge(edge):  # pragma: no cover
    """``0.5 ln((1 + gamma) / (1 - gamma))``, capped at ``ALPHA_MAX`` for a perfect edge (``1 - gamma``
    below ``PERFECT_EDGE_TOL``): the one formula of the Python loop and of ``boost_trees``."""
    if edge >= 1.0 - PERFECT_EDGE_TOL:
        return ALPHA_MAX
    return 0.5 * np.log((1.0 + edge) / (1.0 - edge))


#: Rows per block in ``accumulate_histogram``: the block's weights (``ROW_BLOCK * K`` float64, in
#: L2) are gathered once, then every searched feature's histogram is updated from them in turn
#: (one feature's histogram, ``B * K`` float64, stays in L1 while it is updated).
ROW_BLOCK = 4096


def class_lanes(n_classes: int) -> tuple[int, ...]:
    """The ``k_lanes`` argument of the kernels below: a tuple of length K.

    Its numba *type* (``UniTuple(int64, K)``) carries K, so each kernel is compiled once per class
    count with ``len(k_lanes)`` a compile-time constant: the per-class inner loops are unrolled
    (about twice as fast as a loop over a run-time K). Each K gets its own cached specialisation.
    """
    if n_classes < 1:
        raise ValueError(f"n_classes must be at least 1, got {n_classes}")
    return (0,) * int(n_classes)


@njit(cache=True, nogil=True)
def _block_into_histograms(codes, feats, hist, blk, rows, m, p0, direct, k_lanes):  # pragma: no cover
    """``hist[f, code[feats[f], r_j], :] += blk[j, :]`` for j < m, two features per sweep.

    ``r_j = p0 + j`` when ``direct`` else ``rows[j]``. Two features share one sweep over the block
    (two independent update chains, one load of each weight); every histogram entry still receives
    its rows in the same order, so the sums are the same as one feature at a time.
    """
    K = len(k_lanes)
    k = feats.shape[0]
    f = 0
    while f + 1 < k:
        ca = codes[feats[f]]
        cb = codes[feats[f + 1]]
        ha = hist[f]
        hb = hist[f + 1]
        if direct:
            for j in range(m):
                a = ca[p0 + j]
                b = cb[p0 + j]
                for l in range(K):
                    x = blk[j, l]
                    ha[a, l] += x
                    hb[b, l] += x
        else:
            for j in range(m):
                r = rows[j]
                a = ca[r]
                b = cb[r]
                for l in range(K):
                    x = blk[j, l]
                    ha[a, l] += x
                    hb[b, l] += x
        f += 2
    if f < k:
        ca = codes[feats[f]]
        ha = hist[f]
        for j in range(m):
            a = ca[p0 + j] if direct else ca[rows[j]]
            for l in range(K):
                ha[a, l] += blk[j, l]


@njit(cache=True, nogil=True)
def accumulate_histogram(codes, s, row_sign, order, start, end, feats, hist, k_lanes):  # pragma: no cover
    """``hist[f, code[feats[f], r], :] += row_sign[r] * s[r, :]`` over the rows of one node.

    The rows are ``order[start:end]``, or ``start:end`` themselves when ``order`` has length 0
    (the root: no gather, codes stream sequentially). ``codes`` is feature-major (d, n);
    ``row_sign`` is int8 (n,) or has length 0 (all +1); ``hist`` (k, B, K) must be zeroed by the
    caller; ``k_lanes`` is ``class_lanes(K)``. Rows go in blocks of ``ROW_BLOCK``: the block's
    (signed) weights are gathered into a contiguous buffer once, then streamed past every
    feature's histogram (``_block_into_histograms``). Every entry sums its rows in row order.
    """
    K = len(k_lanes)
    use_sign = row_sign.shape[0] > 0
    direct = order.shape[0] == 0
    blk = np.empty((ROW_BLOCK, K))
    rows = np.empty(ROW_BLOCK, dtype=np.int64)
    for p0 in range(start, end, ROW_BLOCK):
        m = min(ROW_BLOCK, end - p0)
        for j in range(m):
            r = p0 + j if direct else order[p0 + j]
            rows[j] = r
            if use_sign and row_sign[r] < 0:
                for l in range(K):
                    blk[j, l] = -s[r, l]
            else:
                for l in range(K):
                    blk[j, l] = s[r, l]
        _block_into_histograms(codes, feats, hist, blk, rows, m, p0, direct, k_lanes)


@njit(cache=True, nogil=True)
def histogram_totals(hist, out):  # pragma: no cover
    """Class totals ``S_l``: the sum over bins of feature slot 0 (every row is in one bin)."""
    K = hist.shape[2]
    for l in range(K):
        out[l] = 0.0
    for b in range(hist.shape[1]):
        for l in range(K):
            out[l] += hist[0, b, l]


@njit(cache=True, nogil=True)
def split_score(S, L, criterion, k_lanes):  # pragma: no cover
    """Stump edge ``sum_l |S_l - 2 L_l|`` or leaf-split gain ``sum_l |L_l|+|S_l-L_l|-|S_l|``.

    ``k_lanes`` is ``class_lanes(K)``, K = ``S.shape[0]``.
    """
    K = len(k_lanes)
    acc = 0.0
    if criterion == 0:
        for l in range(K):
            acc += abs(S[l] - 2.0 * L[l])
    else:
        for l in range(K):
            acc += abs(L[l]) + abs(S[l] - L[l]) - abs(S[l])
    return acc


@njit(cache=True, nogil=True)
def best_split(hist, feat_nbins, S, criterion, allow_constant, best_L, per_feature,
               k_lanes):  # pragma: no cover
    """Best (feature slot, bin) over ``hist`` (k, B, K) for totals ``S``; see module docstring.

    Returns ``(slot, bin, score)``; slot is -1 when no feature has a candidate threshold.
    ``best_L`` receives the left totals of the winner; ``per_feature[f]`` the best score of
    slot f (-inf when none), used as bandit rewards. ``k_lanes`` is ``class_lanes(K)``.
    """
    k = hist.shape[0]
    K = len(k_lanes)
    L = np.zeros(K)
    LM = np.zeros(K)
    M = np.zeros(K)
    with_bin = hist.shape[1] > MISSING_CODE
    best_slot = -1
    best_bin = -1
    best_score = -np.inf
    for f in range(k):
        nb = feat_nbins[f]
        fbest = -np.inf
        for l in range(K):
            L[l] = 0.0
        if allow_constant:
            sc = split_score(S, L, criterion, k_lanes)
            fbest = sc
            if sc > best_score:
                best_score = sc
                best_slot = f
                best_bin = 0
                for l in range(K):
                    best_L[l] = 0.0
        missing = False
        if with_bin and nb <= MISSING_CODE:
            for l in range(K):
                M[l] = hist[f, MISSING_CODE, l]
                missing |= M[l] != 0.0
        for b in range(1, nb + (1 if missing else 0)):
            for l in range(K):
                L[l] += hist[f, b - 1, l]
            sc = split_score(S, L, criterion, k_lanes)
            if sc > fbest:
                fbest = sc
            if sc > best_score:
                best_score = sc
                best_slot = f
                best_bin = b if missing else b + NO_MISSING
                for l in range(K):
                    best_L[l] = L[l]
            if missing and b < nb:
                for l in range(K):
                    LM[l] = L[l] + M[l]
                sc = split_score(S, LM, criterion, k_lanes)
                if sc > fbest:
                    fbest = sc
                if sc > best_score:
                    best_score = sc
                    best_slot = f
                    best_bin = b + MISSING_LEFT
                    for l in range(K):
                        best_L[l] = LM[l]
        per_feature[f] = fbest
    return best_slot, best_bin, best_score


@njit(cache=True, nogil=True)
def base_edge(s, row_leaf, votes):  # pragma: no cover
    """Edge ``gamma = sum_{i,l} s[i,l] * votes[row_leaf[i], l]`` of a base classifier."""
    g = 0.0
    for i in range(s.shape[0]):
        lf = row_leaf[i]
        for l in range(s.shape[1]):
            g += s[i, l] * votes[lf, l]
    return g


@njit(cache=True, nogil=True)
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
