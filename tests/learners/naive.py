"""Slow, obviously correct twins of the AdaBoost.MH kernels (plain Python / NumPy).

Thresholds are real feature values; phi(x) = +1 if x >= t else -1. The candidate thresholds of
a feature are its distinct values except the smallest (the tests use data with at most n_bins
distinct values per feature, so these are exactly the bin edges).
"""

from __future__ import annotations

import numpy as np


def candidate_thresholds(X: np.ndarray, j: int) -> np.ndarray:
    return np.unique(X[:, j])[1:]


def stump_edge(s: np.ndarray, phi: np.ndarray) -> float:
    """Edge of the best vote vector for a fixed phi: sum_l |sum_i s[i,l] phi_i|."""
    return float(np.abs((s * phi[:, None]).sum(axis=0)).sum())


def best_stump(X: np.ndarray, s: np.ndarray, feats=None, allow_constant=False):
    """(edge, feature, threshold) maximising sum_l |sum_i s_il phi_i|; first best wins.

    threshold None = constant phi = +1 (only with allow_constant).
    """
    best = (-np.inf, -1, None)
    feats = range(X.shape[1]) if feats is None else feats
    for j in feats:
        if allow_constant:
            e = stump_edge(s, np.ones(X.shape[0]))
            if e > best[0]:
                best = (e, j, None)
        for t in candidate_thresholds(X, j):
            e = stump_edge(s, np.where(X[:, j] >= t, 1.0, -1.0))
            if e > best[0]:
                best = (e, j, t)
    return best


def candidate_splits(X: np.ndarray, j: int, mask: np.ndarray):
    """(threshold, missing goes right) of feature j in the order the kernels try them: each
    threshold with the missing values right, then (when rows of ``mask`` miss feature j) left;
    then, with missing rows, +inf with them right (every present value left)."""
    col = X[:, j]
    has = bool(np.isnan(col[mask]).any())
    for t in np.unique(col[~np.isnan(col)])[1:]:
        yield t, True
        if has:
            yield t, False
    if has:
        yield np.inf, True


def goes_right(X: np.ndarray, j: int, t: float, right: bool = True) -> np.ndarray:
    """``X[:, j] >= t``, a missing value going right iff ``right``."""
    return phi_missing(X[:, j], t, right) > 0


def grow_tree(X: np.ndarray, s: np.ndarray, n_leaves: int, min_gain: float = 1e-14):
    """Best-first Hamming tree; returns (list of leaf row masks, edge).

    The root always splits (best gain, even 0); later splits need gain > min_gain. Missing values
    (NaN) go either way at each split (``candidate_splits``).
    """
    n, d = X.shape

    def best_split(mask):
        S = s[mask].sum(axis=0)
        best = (-np.inf, -1, None, True)
        for j in range(d):
            for t, nan_right in candidate_splits(X, j, mask):
                right = mask & goes_right(X, j, t, nan_right)
                left = mask & ~goes_right(X, j, t, nan_right)
                g = (np.abs(s[left].sum(axis=0)).sum() + np.abs(s[right].sum(axis=0)).sum()
                     - np.abs(S).sum())
                if g > best[0]:
                    best = (g, j, t, nan_right)
        return best

    leaves = [np.ones(n, dtype=bool)]
    splits = [best_split(leaves[0])]
    first = True
    while len(leaves) < n_leaves:
        cand = [(sp[0], q) for q, sp in enumerate(splits) if sp[1] >= 0]
        if not cand:
            break
        g, q = max(cand, key=lambda c: c[0])
        if not first and not g > min_gain:
            break
        first = False
        _, j, t, nan_right = splits[q]
        mask = leaves[q]
        right = mask & goes_right(X, j, t, nan_right)
        left = mask & ~goes_right(X, j, t, nan_right)
        leaves[q] = left
        leaves.append(right)
        splits[q] = best_split(left)
        splits.append(best_split(right))
    edge = sum(np.abs(s[m].sum(axis=0)).sum() for m in leaves)
    return leaves, float(edge)


def fit_product(X: np.ndarray, s: np.ndarray, m: int, max_cycles: int = 10,
                min_rise: float = 1e-12):
    """Cyclic product of m stumps; returns (edge, terms) with terms [(feature, threshold|None,
    missing goes right)]."""
    n = X.shape[0]

    def phi_of(term):
        j, t, nan_right = term
        return np.ones(n) if t is None else phi_missing(X[:, j], t, nan_right)

    terms = [(-1, None, True)] * m
    edge = -np.inf
    for cycle in range(max_cycles + 1):
        start = edge
        for j in range(m):
            others = np.ones(n)
            for q in range(m):
                if q != j:
                    others = others * phi_of(terms[q])
            sp = s * others[:, None]
            first = cycle == 0 and j == 0
            e, f, t, nan_right = best_stump_missing(X, sp, allow_constant=(m >= 2 and not first))
            if f < 0:
                continue
            if cycle > 0 and not e > edge * (1 + min_rise):
                continue
            edge = e
            terms[j] = (f, t, nan_right)
        if cycle > 0 and not edge > start * (1 + min_rise):
            break
        if m == 1:
            break
    return edge, terms


def score_forest(arrays: dict, X: np.ndarray, checkpoints) -> np.ndarray:
    """Per-document walk over each base in order; running sums at the checkpoints. A NaN goes right
    at a node whose ``node_missing_right`` is 1 (left when the array is absent or 0)."""
    mr = arrays.get("node_missing_right", np.zeros(len(arrays["node_feature"]), np.int8))

    def right_of(x: np.ndarray, g: int) -> bool:
        v = x[feat[g]]
        return bool(mr[g]) if np.isnan(v) else bool(v >= thr[g])

    kind = arrays["base_kind"]
    ns, ls = arrays["base_node_start"], arrays["base_leaf_start"]
    feat, thr = arrays["node_feature"], arrays["node_threshold"]
    left, right, leaves = arrays["node_left"], arrays["node_right"], arrays["leaf_values"]
    K = leaves.shape[1]
    out = np.zeros((X.shape[0], len(checkpoints), K))
    for i in range(X.shape[0]):
        x = X[i]
        total = np.zeros(K)
        partial = [total.copy()]
        for b in range(kind.shape[0]):
            if kind[b] == 0:
                if ns[b + 1] == ns[b]:
                    total = total + leaves[ls[b]]
                else:
                    t = 0
                    while t >= 0:
                        g = ns[b] + t
                        t = right[g] if right_of(x, g) else left[g]
                    total = total + leaves[ls[b] + (-t - 1)]
            else:
                sign = 1.0
                for g in range(ns[b], ns[b + 1]):
                    sign *= 1.0 if right_of(x, g) else -1.0
                total = total + sign * leaves[ls[b]]
            partial.append(total.copy())
        for c, ck in enumerate(checkpoints):
            out[i, c] = partial[ck]
    return out


def phi_missing(x: np.ndarray, t: float, missing_right: bool) -> np.ndarray:
    """phi of the stump ``x >= t`` with a missing value (NaN) going right (+1) or left (-1)."""
    return np.where(np.isnan(x), 1.0 if missing_right else -1.0, np.where(x >= t, 1.0, -1.0))


def best_stump_missing(X: np.ndarray, s: np.ndarray, allow_constant: bool = False):
    """(edge, feature, threshold, missing_right) over ``candidate_splits`` (threshold None:
    constant phi = +1, only with allow_constant); first best wins. Without NaN, ``best_stump``."""
    best = (-np.inf, -1, None, True)
    everyone = np.ones(X.shape[0], dtype=bool)
    for j in range(X.shape[1]):
        if allow_constant:
            e = stump_edge(s, np.ones(X.shape[0]))
            if e > best[0]:
                best = (e, j, None, True)
        for t, right in candidate_splits(X, j, everyone):
            e = stump_edge(s, phi_missing(X[:, j], t, right))
            if e > best[0]:
                best = (e, j, t, right)
    return best


def adaboost_mh(X, classes, labels, K, T, policy="exponential"):
    """Textbook AdaBoost.MH with stumps (full search), weights as an explicit (n, K) matrix.

    Returns (alphas, edges, F) with F the training scores.
    """
    n = X.shape[0]
    Y = -np.ones((n, K))
    Y[np.arange(n), classes] = 1.0
    if policy == "exponential":
        base = 2.0 ** labels
    else:
        base = np.ones(n)
    W = np.repeat((base / (K - 1))[:, None], K, axis=1)
    W[np.arange(n), classes] = base
    W = W / W.sum()
    F = np.zeros((n, K))
    alphas, edges = [], []
    for _ in range(T):
        if np.isnan(X).any():
            _e, j, t, right = best_stump_missing(X, W * Y)
            phi = phi_missing(X[:, j], t, right)
        else:
            _e, j, t = best_stump(X, W * Y)
            phi = np.where(X[:, j] >= t, 1.0, -1.0)
        v = np.sign(((W * Y) * phi[:, None]).sum(axis=0))
        v[v == 0] = 1.0
        h = phi[:, None] * v[None, :]
        gamma = float((W * h * Y).sum())
        alpha = 0.5 * np.log((1 + gamma) / (1 - gamma))
        W = W * np.exp(-alpha * h * Y)
        W = W / W.sum()
        F = F + alpha * h
        alphas.append(alpha)
        edges.append(gamma)
    return np.array(alphas), np.array(edges), F


def histogram(codes: np.ndarray, s: np.ndarray, rows: np.ndarray, sign: np.ndarray | None,
              feats: np.ndarray, n_bins: int) -> np.ndarray:
    """hist[f, b, l] = sum over rows r (in the given order) with codes[feats[f], r] == b of
    sign[r] * s[r, l]; codes feature-major (d, n)."""
    K = s.shape[1]
    hist = np.zeros((len(feats), n_bins, K))
    for f, j in enumerate(feats):
        for r in rows:
            hist[f, codes[j, r]] += s[r] * (1.0 if sign is None else float(sign[r]))
    return hist
