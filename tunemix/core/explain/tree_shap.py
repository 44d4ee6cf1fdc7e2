"""Exact attributions of a flat forest's running sums to features against one reference row.

Imports numpy and numba only (the service uses it). **The game.** For a document x, a reference
r and a set S of *players* (groups of columns: a raw feature and its standardised copy are one
player), the hybrid ``z_S`` takes x's columns for the players in S and r's elsewhere. Each base
classifier h is a game ``v_h(S) = h(z_S)`` and its Shapley values with this one reference are
the "baseline Shapley" values of Sundararajan and Najmi (2020, "The many Shapley values for
model explanation"), the interventional TreeSHAP of Lundberg et al. (2020, "From local
explanations to global understanding with explainable AI for trees", Nat. Mach. Intell. 2:56)
with a background of one row. They add up: ``sum_g phi_g = h(x) - h(r)``. A running sum of bases
is a sum of games, so its Shapley values are the sums of the bases' (linearity).

**Trees** (``base_kind`` 0). For a leaf with value v, let A be the players whose conditions along
the leaf's path x satisfies and r does not, B those r satisfies and x does not (a player neither
satisfies makes the leaf unreachable by every hybrid; one both satisfy is irrelevant). The hybrid
z_S reaches the leaf iff A is in S and S misses B, so the leaf is the game ``v * [A in S][S cap B
empty]``, whose Shapley values are (|A| = a, |B| = b)

    phi_f = + v (a - 1)! b! / (a + b)!      for f in A,
    phi_f = - v a! (b - 1)! / (a + b)!      for f in B,   0 otherwise,

(sum over f: v [b = 0] - v [a = 0], i.e. v [x reaches the leaf] - v [r reaches it]). A depth
first walk follows only the children x or r goes to, tracking per player whether x and r still
satisfy its conditions (a feature may be tested again down the path), so it visits the leaves
some hybrid reaches: one path where x and r agree, at most a path per leaf where they differ.

**Products of stumps** (``base_kind`` 1): ``h = prod_j phi_j * row``, phi_j = +-1. Grouped by
player, x's and r's factors of player g are equal or opposite; with D the players whose factors
differ (m = |D|) and c = prod_j phi_j(r) * row, ``v(S) = c (-1)^{|S cap D|}``, so by symmetry

    phi_g = -2 c / m  for g in D when m is odd,   0 when m is even (v(D) = v(empty)).

``forest_attributions`` returns, for every document and checkpoint, the attributions of the
running sum after the first ``checkpoints[c]`` bases: (n, C, G, K), in one pass over the forest.
"""

from __future__ import annotations

from fractions import Fraction
from functools import lru_cache
from math import factorial

import numpy as np
import numpy.typing as npt
from numba import njit

import tunemix.core.numba_cache  # noqa: F401 - numba's cache written under a lock (tunemix/core/numba_cache.py)
from tunemix.core.scoring.forest import KIND_PRODUCT, FlatForest, missing_wide


@lru_cache(maxsize=8)
def shapley_weights(max_players: int) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """(plus, minus), (P + 1, P + 1): ``plus[a, b] = (a - 1)! b! / (a + b)!`` (a >= 1) and
    ``minus[a, b] = a! (b - 1)! / (a + b)!`` (b >= 1), computed exactly and rounded once (kept per
    size, read-only)."""
    p = max_players + 1
    plus = np.zeros((p, p))
    minus = np.zeros((p, p))
    for a in range(p):
        for b in range(p):
            if a + b == 0:
                continue
            total = factorial(a + b)
            if a:
                plus[a, b] = float(Fraction(factorial(a - 1) * factorial(b), total))
            if b:
                minus[a, b] = float(Fraction(factorial(a) * factorial(b - 1), total))
    plus.flags.writeable = False
    minus.flags.writeable = False
    return plus, minus


@njit(cache=True, nogil=True, inline="always")
def _tree(ns, ls, feat, thr, left, right, leaves, x, i, r_dir, group, plus, minus, acc,
          st_node, st_len, st_g, path_g, path_side, lv_a):  # pragma: no cover
    """Add one tree's attributions for document ``x[i]`` to ``acc[i]`` (K, G) (module docstring; the
    row given by its index, not a view: a view per tree and document costs a reference count each). A depth
    first walk that descends without the stack where x and r go the same way (or the player is
    already on the path, which fixes the side); where they part on a new player it goes on to r's
    child and leaves x's on the stack. The path holds one entry per player x and r part on (its
    side: 1 for x's, 0 for r's), ``lv_a[c]`` the x-side entries among the first c."""
    k_out = leaves.shape[1]
    sp = 0
    cur = 0
    c = 0
    lv_a[0] = 0
    while True:
        while c >= 0:
            t = ns + c
            f = feat[t]
            x_right = x[i, f] >= thr[t]
            r_right = r_dir[t]
            if x_right == r_right:  # both go one way: no entry
                c = right[t] if x_right else left[t]
                continue
            gg = group[f]
            seen = -1
            for p in range(cur):
                if path_g[p] == gg:
                    seen = p
                    break
            if seen >= 0:  # the player is already on one side: only that side's child, no entry
                on_x = path_side[seen] == 1
                c = right[t] if (x_right if on_x else r_right) else left[t]
                continue
            st_node[sp] = right[t] if x_right else left[t]  # x's side (A) later
            st_len[sp] = cur
            st_g[sp] = gg
            sp += 1
            path_g[cur] = gg  # r's side (B) now
            path_side[cur] = 0
            lv_a[cur + 1] = lv_a[cur]
            cur += 1
            c = right[t] if r_right else left[t]
        if cur > 0:  # a leaf: + v plus[a, b] to each of A, - v minus[a, b] to each of B
            row = ls + (-c - 1)
            na = lv_a[cur]
            wa = plus[na, cur - na]
            wb = minus[na, cur - na]
            # written out for the class counts of tunemix's forests (3: MQ2008's grades, 5: MSLR's):
            # a loop of 3 or 5 costs more than its work at every leaf (TreeSHAP 0.88x on MQ2008)
            if k_out == 3:
                l0, l1, l2 = leaves[row, 0], leaves[row, 1], leaves[row, 2]
                for p in range(cur):
                    g = path_g[p]
                    if path_side[p]:
                        acc[i, 0, g] += wa * l0
                        acc[i, 1, g] += wa * l1
                        acc[i, 2, g] += wa * l2
                    else:
                        acc[i, 0, g] -= wb * l0
                        acc[i, 1, g] -= wb * l1
                        acc[i, 2, g] -= wb * l2
            elif k_out == 5:
                l0, l1, l2, l3, l4 = leaves[row, 0], leaves[row, 1], leaves[row, 2], leaves[row, 3], leaves[row, 4]
                for p in range(cur):
                    g = path_g[p]
                    if path_side[p]:
                        acc[i, 0, g] += wa * l0
                        acc[i, 1, g] += wa * l1
                        acc[i, 2, g] += wa * l2
                        acc[i, 3, g] += wa * l3
                        acc[i, 4, g] += wa * l4
                    else:
                        acc[i, 0, g] -= wb * l0
                        acc[i, 1, g] -= wb * l1
                        acc[i, 2, g] -= wb * l2
                        acc[i, 3, g] -= wb * l3
                        acc[i, 4, g] -= wb * l4
            else:
                for p in range(cur):
                    g = path_g[p]
                    if path_side[p]:
                        for k in range(k_out):
                            acc[i, k, g] += wa * leaves[row, k]
                    else:
                        for k in range(k_out):
                            acc[i, k, g] -= wb * leaves[row, k]
        # (x and r both reaching a leaf: it changes nothing)
        if sp == 0:
            return
        sp -= 1
        cur = st_len[sp]
        path_g[cur] = st_g[sp]
        path_side[cur] = 1
        lv_a[cur + 1] = lv_a[cur] + 1
        cur += 1
        c = st_node[sp]


@njit(cache=True, nogil=True, inline="always")
def _product(ns, ne, ls, feat, thr, leaves, x, i, r_dir, group, acc, parity, touched):  # pragma: no cover
    """Add one product of stumps' attributions for ``x[i]`` (closed form, module docstring) to ``acc[i]``."""
    sign = 1.0
    n_touched = 0
    for t in range(ns, ne):
        f = feat[t]
        px = x[i, f] >= thr[t]
        pr = r_dir[t]
        if not pr:
            sign = -sign
        if px != pr:
            g = group[f]
            if parity[g] == 0:  # bit 1: listed in ``touched``, bit 0: the parity of differing factors
                touched[n_touched] = g
                n_touched += 1
                parity[g] = 2
            parity[g] ^= 1
    m = 0
    for j in range(n_touched):
        m += parity[touched[j]] & 1
    if m % 2 == 1:
        w = -2.0 * sign / m
        for j in range(n_touched):
            g = touched[j]
            if parity[g] & 1:
                for k in range(leaves.shape[1]):
                    acc[i, k, g] += w * leaves[ls, k]
    for j in range(n_touched):
        parity[touched[j]] = 0


@njit(cache=True, nogil=True)
def reference_sides(feat, thr, r):  # pragma: no cover
    """Which way the reference row goes at every node of the forest (``r[feat] >= thr``, as the
    scoring kernel compares): computed once for all the documents explained against it."""
    out = np.empty(feat.shape[0], dtype=np.bool_)
    for t in range(feat.shape[0]):
        out[t] = r[feat[t]] >= thr[t]
    return out


@njit(cache=True, nogil=True)
def workspace(node_start, n_groups, k_out):  # pragma: no cover
    """The scratch arrays of ``documents`` for a forest (sized by its largest base): the walk's
    stack (nodes, path lengths, players), its path (players, sides, x-side counts), a product's
    per-player parities and touched players, and the running attributions (K, G)."""
    max_nodes = 1
    for b in range(node_start.shape[0] - 1):
        max_nodes = max(max_nodes, node_start[b + 1] - node_start[b])
    size = 2 * max_nodes + 2
    return (np.empty(size, dtype=np.int64), np.empty(size, dtype=np.int64), np.empty(size, dtype=np.int64),
            np.empty(size, dtype=np.int64), np.empty(size, dtype=np.int64), np.zeros(size + 1, dtype=np.int64),
            np.zeros(n_groups, dtype=np.int64), np.empty(size, dtype=np.int64), np.zeros((k_out, n_groups)))


@njit(cache=True, nogil=True)
def documents(kind, node_start, leaf_start, feat, thr, left, right, leaves, x, r_dir, group, checkpoints, plus,
              minus, out):  # pragma: no cover
    """Every row of x's attributions of the running sums at the checkpoints into ``out`` (n, C, K, G),
    the players innermost (as the explanation's next layers read them), in one pass over the bases
    up to the last checkpoint, the rows in the inner loop: a base's nodes and leaves are read from
    the cache for every row, not the whole forest again per row (0.88x the time of a pass per row
    on the MQ2008 ensemble and the MSLR default model, 10 rows). Each row's additions come in the
    same order either way."""
    n = x.shape[0]
    k_out = leaves.shape[1]
    n_g = out.shape[3]
    st_node, st_len, st_g, path_g, path_side, lv_a, parity, touched, _ = workspace(node_start, n_g, k_out)
    acc = np.zeros((n, k_out, n_g))  # as ``out`` lays a checkpoint out: each copy is one contiguous block
    n_base = kind.shape[0]
    n_ck = checkpoints.shape[0]
    c = 0
    for b in range(n_base + 1):
        while c < n_ck and checkpoints[c] == b:
            for i in range(n):
                out[i, c] = acc[i]
            c += 1
        if b == n_base or c == n_ck:
            break
        ns = node_start[b]
        ne = node_start[b + 1]
        if kind[b] == KIND_PRODUCT:
            for i in range(n):
                _product(ns, ne, leaf_start[b], feat, thr, leaves, x, i, r_dir, group, acc, parity, touched)
        elif ne > ns:
            for i in range(n):
                _tree(ns, leaf_start[b], feat, thr, left, right, leaves, x, i, r_dir, group, plus, minus, acc,
                      st_node, st_len, st_g, path_g, path_side, lv_a)


@njit(cache=True, nogil=True)
def _forest_attributions(kind, node_start, leaf_start, feat, thr, left, right, leaves, x, r, group,
                         n_groups, checkpoints, plus, minus, out):  # pragma: no cover
    documents(kind, node_start, leaf_start, feat, thr, left, right, leaves, x, reference_sides(feat, thr, r), group,
              checkpoints, plus, minus, out)


def missing_as_columns(forest: FlatForest, x: npt.NDArray[np.float32], r: npt.NDArray[np.float32],
                       group: npt.NDArray[np.int64]) -> tuple[FlatForest, np.ndarray, np.ndarray, np.ndarray]:
    """(forest, x, r, group) with every node sending NaN left (``FlatForest.missing_columns``): the
    wide forest, the rows widened by the features some node sends right when missing (NaN read as
    +inf), each extra column in its feature's player; unchanged when no node sends NaN right."""
    wide = forest.missing_columns
    if wide is None:
        return forest, x, r, group
    cols, wide_forest = wide
    return (wide_forest, missing_wide(x, cols), missing_wide(r[None], cols)[0],
            np.ascontiguousarray(np.concatenate([group, group[cols]])))


def forest_attributions(forest: FlatForest, x: npt.ArrayLike, r: npt.ArrayLike, group: npt.ArrayLike,
                        n_groups: int, checkpoints: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """Attributions (n, C, G, K) of the running sums at ``checkpoints`` (base counts, non-decreasing)
    of every row of ``x`` (n, columns) against the reference ``r`` (columns,), column c belonging to
    player ``group[c]`` in 0..G-1 (module docstring): ``out[i, c].sum(0) == S_c(x_i) - S_c(r)`` to
    float rounding. Both rows are compared with the thresholds as float32, as the scoring kernel does;
    a missing value (NaN, in ``x`` or ``r``) goes the way its node sends it
    (``FlatForest.missing_columns``: the extra column of a feature belongs to the feature's player,
    so the game and its Shapley values are the forest's own)."""
    xa = np.ascontiguousarray(x, dtype=np.float32)
    ra = np.ascontiguousarray(r, dtype=np.float32).reshape(-1)
    ga = np.ascontiguousarray(group, dtype=np.int64).reshape(-1)
    ck = np.ascontiguousarray(checkpoints, dtype=np.int64).reshape(-1)
    cols = forest.n_features
    if xa.ndim != 2 or xa.shape[1] != cols or ra.shape != (cols,) or ga.shape != (cols,):
        raise ValueError(f"x (n, {cols}), r ({cols},) and group ({cols},) expected, got {xa.shape}, {ra.shape}, "
                         f"{ga.shape}")
    forest, xa, ra, ga = missing_as_columns(forest, xa, ra, ga)
    if ga.size and (ga.min() < 0 or ga.max() >= n_groups):
        raise ValueError(f"group entries must lie in 0..{n_groups - 1}")
    if ck.size and (ck.min() < 0 or ck.max() > forest.n_base or np.any(np.diff(ck) < 0)):
        raise ValueError(f"checkpoints must be non-decreasing base counts in 0..{forest.n_base}")
    depth = int(np.diff(forest.base_node_start).max(initial=0)) + 1
    plus, minus = shapley_weights(min(depth, n_groups))
    out = np.zeros((xa.shape[0], ck.size, forest.n_outputs, n_groups), dtype=np.float64)
    if xa.shape[0] and ck.size:
        _forest_attributions(forest.base_kind, forest.base_node_start, forest.base_leaf_start, forest.node_feature,
                             forest.node_threshold, forest.node_left, forest.node_right, forest.leaf_values, xa,
                             ra, ga, np.int64(n_groups), ck, plus, minus, out)
    return out.transpose(0, 1, 3, 2)  # (n, C, G, K)
