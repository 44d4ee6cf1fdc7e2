"""Numba kernels that rank each query's documents once, with an O(n log n) worst case.

Every measure of an evaluation reads the same ranking, so :func:`rank_queries` sorts each query
once (for the longest prefix any measure needs) and the measure kernels (:mod:`.kernels`) only
read ``order``. Ranking order: score descending; ``tie_mode`` decides equal scores:

- ``TIE_STABLE`` (0): the earlier row first (a stable sort);
- ``TIE_DOCID`` (1): the document with the larger ``tiebreak`` first (trec: docid strcmp);
- ``TIE_QUICKSORT`` (2): the order of numba's ``np.argsort`` (its quicksort,
  ``numba.misc.quicksort.run_quicksort1``: median of three, Hoare partition, insertion sort
  below 16 items, no worst-case fallback) of the negated scores, which is how ranx sorts a run.

Costs. A prefix of m <= ``SELECT_MAX`` ranks is found by insertion into a sorted buffer (at most
m + 1 comparisons per document: O(n m)); longer prefixes by a bottom-up merge sort (at most
n ceil(log2 n) comparisons). Numba's quicksort is quadratic on McIlroy's adversarial orders ("A
killer adversary for quicksort", Software: Practice and Experience 29(4), 1999): a query of
100,000 scores takes 84 CPU-s. :func:`numba_argsort_bounded` runs the same algorithm with a
budget of ``QUICKSORT_BUDGET * n * ceil(log2 n) + 16 n`` comparisons (random, sorted, reversed,
constant and few-valued inputs use under a third of it); past the budget it stops and the query
is merge-sorted by (score descending, input order). That is ranx's order whenever the query's
scores are distinct (a sort of distinct keys has one answer); when the query has ties the tie
order may differ from ranx's, and :func:`rank_queries` flags the query (``fallback[q] = 2``)
so that the evaluation can say so.
"""

from __future__ import annotations

import numpy as np
from numba import njit

import tunemix.core.numba_cache  # noqa: F401 - numba's cache written under a lock (tunemix/core/numba_cache.py)

TIE_STABLE = 0
TIE_DOCID = 1
TIE_QUICKSORT = 2

# Up to this many ranks, the top of a list is found by insertion into a small buffer
# (O(n) for random scores, O(n SELECT_MAX) at worst); longer prefixes use a full merge sort.
SELECT_MAX = 32

# numba.misc.quicksort: SMALL_QUICKSORT (insertion sort below this segment length), MAX_STACK.
SMALL_QUICKSORT = 15
MAX_STACK = 100

# Comparison budget of numba's quicksort, in units of n ceil(log2 n) (see module docstring).
QUICKSORT_BUDGET = 4


@njit(cache=True, inline="always")
def _before(scores, tiebreak, tie_mode, i, j):
    """True when row i ranks strictly before row j (TIE_STABLE or TIE_DOCID)."""
    si = scores[i]
    sj = scores[j]
    if si > sj:
        return True
    if si < sj:
        return False
    if tie_mode == TIE_DOCID:
        return tiebreak[i] > tiebreak[j]
    return i < j


@njit(cache=True, inline="always")
def _lt(a, b):
    """numba's ``lt_floats``: a < b, NaN last."""
    return a < b or (np.isnan(b) and not np.isnan(a))


@njit(cache=True, nogil=True)
def quicksort_budget(n):
    """The comparison budget of :func:`numba_argsort_bounded` for n keys."""
    lg = 1
    p = 2
    while p < n:
        lg += 1
        p *= 2
    return QUICKSORT_BUDGET * n * lg + 16 * n


@njit(cache=True, nogil=True)
def numba_argsort_bounded(keys, idx, budget):
    """idx[:] := numba's ``np.argsort(keys)`` (kind "quicksort"), step for step, while at most
    ``budget`` comparisons (plus one partition) are made.

    Returns the number of comparisons made; more than ``budget`` (by at most one partition,
    n + 3) means it gave up and idx is a permutation in no useful order. The code is numba
    0.68's ``run_quicksort1`` with ``is_argsort=True``; ``tests/evaluation/test_ranking_kernels.py`` checks it against
    ``np.argsort`` inside numba on random, tied and adversarial inputs.
    """
    n = keys.shape[0]
    for i in range(n):
        idx[i] = i
    if n < 2:
        return 0
    stack_lo = np.empty(MAX_STACK, dtype=np.int64)
    stack_hi = np.empty(MAX_STACK, dtype=np.int64)
    stack_lo[0] = 0
    stack_hi[0] = n - 1
    depth = 1
    used = 0
    while depth > 0:
        depth -= 1
        low = stack_lo[depth]
        high = stack_hi[depth]
        while high - low >= SMALL_QUICKSORT:
            if used > budget:
                return used
            # partition(A, R, low, high): median of three, pivot stashed at the end
            mid = (low + high) >> 1
            used += 3
            if _lt(keys[idx[mid]], keys[idx[low]]):
                idx[low], idx[mid] = idx[mid], idx[low]
            if _lt(keys[idx[high]], keys[idx[mid]]):
                idx[high], idx[mid] = idx[mid], idx[high]
            if _lt(keys[idx[mid]], keys[idx[low]]):
                idx[low], idx[mid] = idx[mid], idx[low]
            pivot = keys[idx[mid]]
            idx[high], idx[mid] = idx[mid], idx[high]
            i = low
            j = high - 1
            while True:
                while i < high:
                    used += 1
                    if not _lt(keys[idx[i]], pivot):
                        break
                    i += 1
                while j >= low:
                    used += 1
                    if not _lt(pivot, keys[idx[j]]):
                        break
                    j -= 1
                if i >= j:
                    break
                idx[i], idx[j] = idx[j], idx[i]
                i += 1
                j -= 1
            idx[i], idx[high] = idx[high], idx[i]
            # push the larger part, go on with the smaller one
            if high - i > i - low:
                if high > i:
                    stack_lo[depth] = i + 1
                    stack_hi[depth] = high
                    depth += 1
                high = i - 1
            else:
                if i > low:
                    stack_lo[depth] = low
                    stack_hi[depth] = i - 1
                    depth += 1
                low = i + 1
        # insertion_sort(A, R, low, high), inclusive bounds
        for i in range(low + 1, high + 1):
            k = idx[i]
            v = keys[k]
            j = i
            while j > low:
                used += 1
                if not _lt(v, keys[idx[j - 1]]):
                    break
                idx[j] = idx[j - 1]
                j -= 1
            idx[j] = k
    return used


@njit(cache=True, nogil=True)
def _merge_sort(scores, tiebreak, tie_mode, start, end, out, tmp):
    """out[0:n] := rows start:end in rank order; bottom-up merge sort, n ceil(log2 n) comparisons
    at most (the comparator is a total order, so the result does not depend on the algorithm)."""
    n = end - start
    for i in range(n):
        out[i] = start + i
    width = 1
    src = out
    dst = tmp
    in_tmp = False
    while width < n:
        lo = 0
        while lo < n:
            mid = min(lo + width, n)
            hi = min(lo + 2 * width, n)
            a = lo
            b = mid
            o = lo
            while a < mid and b < hi:
                if _before(scores, tiebreak, tie_mode, src[b], src[a]):
                    dst[o] = src[b]
                    b += 1
                else:
                    dst[o] = src[a]
                    a += 1
                o += 1
            while a < mid:
                dst[o] = src[a]
                a += 1
                o += 1
            while b < hi:
                dst[o] = src[b]
                b += 1
                o += 1
            lo = hi
        src, dst = dst, src
        in_tmp = not in_tmp
        width *= 2
    if in_tmp:
        for i in range(n):
            out[i] = tmp[i]


@njit(cache=True, nogil=True)
def _select_top(scores, tiebreak, tie_mode, start, end, m, out):
    """out[0:m] := the rows of the first m ranks of rows start:end (m < end - start): insertion
    into a sorted buffer; ``thr`` (the last buffered score) rejects most rows in one comparison."""
    cnt = 0
    thr = -np.inf
    for i in range(start, end):
        si = scores[i]
        if cnt < m:
            pos = cnt
            cnt += 1
        elif si < thr:
            continue
        elif _before(scores, tiebreak, tie_mode, i, out[m - 1]):
            pos = m - 1
        else:
            continue
        while pos > 0 and _before(scores, tiebreak, tie_mode, i, out[pos - 1]):
            out[pos] = out[pos - 1]
            pos -= 1
        out[pos] = i
        if cnt == m:
            thr = scores[out[m - 1]]


@njit(cache=True, nogil=True)
def _has_ties(scores, ranked, n):
    for r in range(1, n):
        if scores[ranked[r]] == scores[ranked[r - 1]]:
            return True
    return False


@njit(cache=True, nogil=True)
def rank_queries(scores, tiebreak, tie_mode, query_offsets, prefix):
    """Rank every query once: returns (order, fallback).

    ``order`` (int64, (n,)): for query q owning rows lo:hi, ``order[lo:lo + m]`` with
    m = min(prefix, hi - lo) holds the rows of its first m ranks (the rest is unspecified).
    ``fallback`` (int8, (n_queries,)): 1 when ranx's quicksort ran over its budget and the query
    was merge-sorted instead with distinct scores (same order as ranx), 2 the same with tied
    scores (their order may differ from ranx's), else 0.
    """
    nq = query_offsets.shape[0] - 1
    n = query_offsets[nq]
    order = np.empty(n, dtype=np.int64)
    fallback = np.zeros(nq, dtype=np.int8)
    max_n = 1
    for q in range(nq):
        size = query_offsets[q + 1] - query_offsets[q]
        if size > max_n:
            max_n = size
    tmp = np.empty(max_n, dtype=np.int64)
    keys = np.empty(max_n, dtype=np.float64)
    for q in range(nq):
        start = query_offsets[q]
        end = query_offsets[q + 1]
        size = end - start
        m = min(prefix, size)
        out = order[start:end]
        if tie_mode == TIE_QUICKSORT:
            # ranx: np.argsort([-v for v in values]) inside numba (kind "quicksort")
            k = keys[:size]
            for i in range(size):
                k[i] = -scores[start + i]
            budget = quicksort_budget(size)
            if numba_argsort_bounded(k, out, budget) <= budget:
                for r in range(size):
                    out[r] += start
                continue
            _merge_sort(scores, tiebreak, TIE_STABLE, start, end, out, tmp)
            fallback[q] = 2 if _has_ties(scores, out, size) else 1
        elif m <= SELECT_MAX and m < size:
            _select_top(scores, tiebreak, tie_mode, start, end, m, out)
        else:
            _merge_sort(scores, tiebreak, tie_mode, start, end, out, tmp)
    return order, fallback
