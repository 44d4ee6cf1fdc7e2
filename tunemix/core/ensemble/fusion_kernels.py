"""Numba kernels for mixing members query by query.

Every kernel takes plain C-contiguous arrays in the project's layout (docs/architecture.md)::

    member_scores  float64, shape (n, M): column m holds member m's score of every document
    query_offsets  int64,   shape (n_queries + 1,): query q owns rows
                   query_offsets[q] : query_offsets[q + 1]

Example: three queries with 2, 3 and 1 documents have ``query_offsets = [0, 2, 5, 6]``.

The kernels do no input checking: callers validate (``tunemix/core/ensemble/base.py``) and
then dispatch here. Empty queries (two equal offsets) are allowed and produce nothing.

Tie conventions (shared by all rank-based kernels, documented once here):

* a member's **rank** of a document is its *average* position among tied scores
  (1-based; ``[5, 7, 7, 1]`` -> ranks ``[3, 1.5, 1.5, 4]``), so fused scores never depend on
  the input order of tied documents;
* a document is in a member's **top-k** when its *competition* rank (1 + the number of
  documents the member scores strictly higher) is at most k, so a tie at the cut-off keeps
  every tied document;
* a member **prefers** document i to j when it scores i strictly higher; equal scores give
  no vote (Condorcet).
"""

from __future__ import annotations

import numpy as np
from numba import njit

import tunemix.core.numba_cache  # noqa: F401 - numba's cache written under a lock (tunemix/core/numba_cache.py)

# ----------------------------------------------------------------------------- ranks


@njit(cache=True, nogil=True)
def _tie_groups(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each document of one query: (# strictly higher scores, # equal scores incl. itself).

    ``values`` is one member's scores of one query (contiguous). Sort descending (stable),
    then walk the runs of equal values.
    """
    n = values.shape[0]
    n_greater = np.empty(n, dtype=np.int64)
    n_equal = np.empty(n, dtype=np.int64)
    order = np.argsort(-values, kind="mergesort")
    a = 0
    while a < n:
        b = a + 1
        v = values[order[a]]
        while b < n and values[order[b]] == v:
            b += 1
        for p in range(a, b):
            n_greater[order[p]] = a
            n_equal[order[p]] = b - a
        a = b
    return n_greater, n_equal


@njit(cache=True, nogil=True)
def average_ranks(member_scores: np.ndarray, query_offsets: np.ndarray) -> np.ndarray:
    """Per query and member, the 1-based average rank of every document (ties share the mean).

    rank(d) = #{d': s(d') > s(d)} + (#{d': s(d') = s(d)} + 1) / 2.
    """
    n, n_members = member_scores.shape
    out = np.empty((n, n_members), dtype=np.float64)
    n_queries = query_offsets.shape[0] - 1
    for q in range(n_queries):
        lo = query_offsets[q]
        hi = query_offsets[q + 1]
        if hi <= lo:
            continue
        for m in range(n_members):
            col = np.ascontiguousarray(member_scores[lo:hi, m])
            n_greater, n_equal = _tie_groups(col)
            for i in range(hi - lo):
                out[lo + i, m] = n_greater[i] + (n_equal[i] + 1) / 2.0
    return out


# ------------------------------------------------------------------------ rescaling


@njit(cache=True, nogil=True)
def rescale_per_query(
    member_scores: np.ndarray, query_offsets: np.ndarray, mode: int
) -> np.ndarray:
    """Rescale each member within each query.

    mode 0 (z-score):  (s - mean_q) / std_q   (population std);
    mode 1 (min-max):  (s - min_q) / (max_q - min_q).
    A member that is constant on a query maps to 0 there (it carries no order information).
    """
    n, n_members = member_scores.shape
    out = np.zeros((n, n_members), dtype=np.float64)
    n_queries = query_offsets.shape[0] - 1
    for q in range(n_queries):
        lo = query_offsets[q]
        hi = query_offsets[q + 1]
        size = hi - lo
        if size <= 0:
            continue
        for m in range(n_members):
            mn = member_scores[lo, m]
            mx = member_scores[lo, m]
            total = 0.0
            for i in range(lo, hi):
                v = member_scores[i, m]
                total += v
                if v < mn:
                    mn = v
                if v > mx:
                    mx = v
            if mx == mn:
                continue  # constant: zeros
            if mode == 0:
                mean = total / size
                ss = 0.0
                for i in range(lo, hi):
                    d = member_scores[i, m] - mean
                    ss += d * d
                std = np.sqrt(ss / size)
                if std > 0.0:
                    for i in range(lo, hi):
                        out[i, m] = (member_scores[i, m] - mean) / std
            else:
                span = mx - mn
                for i in range(lo, hi):
                    out[i, m] = (member_scores[i, m] - mn) / span
    return out


_LANES = 8


@njit(cache=True, nogil=True, error_model="numpy")
def weighted_rescaled_sum(
    member_scores: np.ndarray, query_offsets: np.ndarray, weights: np.ndarray, mode: int
) -> np.ndarray:
    """``rescale_per_query(member_scores, query_offsets, mode) @ weights`` without the rescaled
    (n, M) copy. Per query, passes over the rows with the members in the inner loop (contiguous,
    so that it vectorises) gather each member's statistics: for the z-score its sum and how many
    values differ from the first, then its squared deviations from the mean; for the min-max its
    min and max. Member m's term is then ``coef_m (v_m - shift_m)`` with ``coef_m = w_m / std_m``
    (z-score; shift the mean) or ``w_m / (max - min)`` (min-max; shift the min), and 0 where the
    member is constant on the query, as in ``rescale_per_query``. Equal to the two-step form up
    to rounding (a few units in the last place of each term)."""
    n, n_members = member_scores.shape
    out = np.zeros(n, dtype=np.float64)
    total = np.empty(n_members)
    mn = np.empty(n_members)
    mx = np.empty(n_members)
    unlike = np.empty(n_members)
    shift = np.empty(n_members)
    coef = np.empty(n_members)
    lanes = np.empty(_LANES)
    for q in range(query_offsets.shape[0] - 1):
        lo = query_offsets[q]
        hi = query_offsets[q + 1]
        size = hi - lo
        if size <= 0:
            continue
        if mode == 0:
            # sum and the count of values unlike the first (a member is constant on the query
            # iff that count is 0: the mean of equal values need not equal them after rounding)
            for m in range(n_members):
                total[m] = member_scores[lo, m]
                unlike[m] = 0.0
            for i in range(lo + 1, hi):
                for m in range(n_members):
                    v = member_scores[i, m]
                    total[m] += v
                    unlike[m] += 1.0 if v != member_scores[lo, m] else 0.0
            for m in range(n_members):
                shift[m] = total[m] / size
                coef[m] = 0.0
            for i in range(lo, hi):
                for m in range(n_members):
                    d = member_scores[i, m] - shift[m]
                    coef[m] += d * d
            for m in range(n_members):
                std = np.sqrt(coef[m] / size)
                coef[m] = weights[m] / std if unlike[m] > 0.0 and std > 0.0 else 0.0
        else:
            for m in range(n_members):
                mn[m] = member_scores[lo, m]
                mx[m] = member_scores[lo, m]
            for i in range(lo + 1, hi):
                for m in range(n_members):
                    mn[m] = min(mn[m], member_scores[i, m])
                    mx[m] = max(mx[m], member_scores[i, m])
            for m in range(n_members):
                shift[m] = mn[m]
                coef[m] = weights[m] / (mx[m] - mn[m]) if mx[m] > mn[m] else 0.0
        # eight partial sums (lanes) in a fixed order, so that the loop vectorises and the result
        # depends on nothing but the member order
        head = n_members - n_members % _LANES
        for i in range(lo, hi):
            for k in range(_LANES):
                lanes[k] = 0.0
            for m0 in range(0, head, _LANES):
                for k in range(_LANES):
                    lanes[k] += coef[m0 + k] * (member_scores[i, m0 + k] - shift[m0 + k])
            acc = 0.0
            for k in range(_LANES):
                acc += lanes[k]
            for m in range(head, n_members):
                acc += coef[m] * (member_scores[i, m] - shift[m])
            out[i] = acc
    return out


# ---------------------------------------------------------------------- rank fusion


@njit(cache=True, nogil=True)
def rrf_scores(member_scores: np.ndarray, query_offsets: np.ndarray, k: float) -> np.ndarray:
    """Reciprocal rank fusion: score(d) = sum_m 1 / (k + r_m(d)), r_m the average rank.

    Cormack, Clarke, Büttcher (SIGIR 2009); Büttcher et al., IR book, eq. (11.4).
    """
    ranks = average_ranks(member_scores, query_offsets)
    n, n_members = ranks.shape
    out = np.zeros(n, dtype=np.float64)
    for m in range(n_members):  # same summation order as a per-member pass
        for i in range(n):
            out[i] += 1.0 / (k + ranks[i, m])
    return out


@njit(cache=True, nogil=True)
def comb_scores(
    member_scores: np.ndarray, query_offsets: np.ndarray, top_k: int, mnz: bool
) -> np.ndarray:
    """CombSUM / CombMNZ over each member's top-k (Lee 1997; IR book eq. (11.2)-(11.5)).

    Per query, member m's scores are min-max normalised over the query's documents,
    s'_m(d) = (s_m(d) - min) / (max - min) (0 for a constant member). With T_m the member's
    top-k documents: CombSUM(d) = sum_{m: d in T_m} s'_m(d); CombMNZ(d) = |{m: d in T_m}| *
    CombSUM(d). Documents outside every top-k score 0. ``top_k <= 0`` means all documents.
    """
    n, n_members = member_scores.shape
    out = np.zeros(n, dtype=np.float64)
    n_queries = query_offsets.shape[0] - 1
    for q in range(n_queries):
        lo = query_offsets[q]
        hi = query_offsets[q + 1]
        size = hi - lo
        if size <= 0:
            continue
        total = np.zeros(size, dtype=np.float64)
        count = np.zeros(size, dtype=np.int64)
        for m in range(n_members):
            col = np.ascontiguousarray(member_scores[lo:hi, m])
            n_greater, _ = _tie_groups(col)
            mn = col.min()
            mx = col.max()
            span = mx - mn
            for i in range(size):
                if top_k > 0 and n_greater[i] + 1 > top_k:
                    continue
                count[i] += 1
                if span > 0.0:
                    total[i] += (col[i] - mn) / span
        for i in range(size):
            out[lo + i] = total[i] * count[i] if mnz else total[i]
    return out


# ------------------------------------------------------------------ Condorcet fusion


@njit(cache=True, nogil=True, inline="always")
def _margin(member_scores: np.ndarray, a: int, b: int) -> int:
    """Members scoring row a strictly above row b, minus the reverse: wins[a, b] - wins[b, a]."""
    net = 0
    for m in range(member_scores.shape[1]):
        net += (member_scores[a, m] > member_scores[b, m]) - (member_scores[b, m] > member_scores[a, m])
    return net


@njit(cache=True, nogil=True)
def _weak_majority_components(member_scores: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """Strongly connected components of the "not beaten by majority" graph of rows lo:hi, ranked.

    Arc i -> j (i != j) iff wins[i, j] >= wins[j, i], i.e. ``_margin(i, j) >= 0``, computed when
    the search looks at the arc (no n x n matrix: O(n) memory). Every pair has an arc, so the
    components form a chain; returns for each document its component's position in that
    chain (0 = top). Iterative Tarjan, which emits components sinks first; each vertex scans
    its candidate successors once, so at most n^2 margins of M members each: O(n^2 M) time.
    """
    n = hi - lo
    index = np.full(n, -1, dtype=np.int64)
    low = np.zeros(n, dtype=np.int64)
    on_stack = np.zeros(n, dtype=np.bool_)
    stack = np.empty(n, dtype=np.int64)
    call_v = np.empty(n, dtype=np.int64)
    call_next = np.empty(n, dtype=np.int64)
    comp = np.full(n, -1, dtype=np.int64)
    sp = 0
    counter = 0
    n_comp = 0
    for s in range(n):
        if index[s] != -1:
            continue
        depth = 0
        call_v[0] = s
        call_next[0] = 0
        index[s] = counter
        low[s] = counter
        counter += 1
        stack[sp] = s
        sp += 1
        on_stack[s] = True
        while depth >= 0:
            v = call_v[depth]
            w = call_next[depth]
            advanced = False
            while w < n:
                if w != v and (index[w] == -1 or (on_stack[w] and index[w] < low[v])) \
                        and _margin(member_scores, lo + v, lo + w) >= 0:
                    if index[w] == -1:
                        call_next[depth] = w + 1
                        depth += 1
                        call_v[depth] = w
                        call_next[depth] = 0
                        index[w] = counter
                        low[w] = counter
                        counter += 1
                        stack[sp] = w
                        sp += 1
                        on_stack[w] = True
                        advanced = True
                        break
                    low[v] = index[w]
                w += 1
            if advanced:
                continue
            if low[v] == index[v]:
                while True:
                    sp -= 1
                    x = stack[sp]
                    on_stack[x] = False
                    comp[x] = n_comp
                    if x == v:
                        break
                n_comp += 1
            depth -= 1
            if depth >= 0:
                u = call_v[depth]
                if low[v] < low[u]:
                    low[u] = low[v]
    # Tarjan's first component is the bottom of the chain.
    for i in range(n):
        comp[i] = n_comp - 1 - comp[i]
    return comp


@njit(cache=True, nogil=True)
def condorcet_scores(member_scores: np.ndarray, query_offsets: np.ndarray) -> np.ndarray:
    """Condorcet fusion (Montague and Aslam 2002; IR book sec. 11.1.2), made deterministic.

    Per query: d beats d' when more members prefer d to d' than d' to d. Documents are
    ordered by the majority relation; groups it cannot order (majority cycles and pairwise
    ties: the strongly connected components of the "not beaten" graph, which form a chain)
    are ordered inside by Borda count, net(d) = sum_{d'} (wins[d, d'] - wins[d', d]) (equal to
    twice the Borda count with tied documents sharing points, minus a constant), then by
    input position. Returns n_q - position (position 0 = top), which reproduces that order.

    Per query of n documents and M members: O(n^2 M) time (majorities computed pair by pair as
    the component search needs them), O(n M) memory (no n x n matrix); net(d) = sum_m (n - 2
    #{d': s_m(d') > s_m(d)} - #{d': s_m(d') = s_m(d)}) from one merge sort per member.
    """
    n, n_members = member_scores.shape
    out = np.zeros(n, dtype=np.float64)
    n_queries = query_offsets.shape[0] - 1
    for q in range(n_queries):
        lo = query_offsets[q]
        hi = query_offsets[q + 1]
        size = hi - lo
        if size <= 0:
            continue
        comp = _weak_majority_components(member_scores, lo, hi)
        net = np.zeros(size, dtype=np.int64)
        for m in range(n_members):
            n_greater, n_equal = _tie_groups(np.ascontiguousarray(member_scores[lo:hi, m]))
            for i in range(size):
                net[i] += size - 2 * n_greater[i] - n_equal[i]
        span = 2 * n_members * size + 1
        key = np.empty(size, dtype=np.int64)
        for i in range(size):
            # smaller key ranks first: component position, then larger net, then index
            key[i] = comp[i] * span + (n_members * size - net[i])
        order = np.argsort(key, kind="mergesort")
        for p in range(size):
            out[lo + order[p]] = float(size - p)
    return out
