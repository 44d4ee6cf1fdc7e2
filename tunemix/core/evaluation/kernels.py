"""Numba kernels for ranking measures: one kernel family driven by convention flags.

Inputs are the project's flat layout (docs/architecture.md)::

    labels        int32   (n,)            graded relevance, already validated (>= 0)
    scores        float64 (n,)            higher ranks first (trec: already rounded to float32)
    order         int64   (n,)            per query, its ranked rows (ranking_kernels.rank_queries)
    query_offsets int64   (n_queries+1,)  query q owns rows query_offsets[q]:query_offsets[q+1]
    judged_labels int32   (N,)            every judged document's label, N >= n
    judged_offsets int64  (n_queries+1,)  query q's judged documents: judged_offsets[q]:judged_offsets[q+1]

Example: three queries with 2, 3 and 1 documents have ``query_offsets = [0, 2, 5, 6]``.

The ranked rows are the documents a run retrieved; the judged arrays hold every judged document
of each query, retrieved or not (a truncated run: a TREC run of its top 10 of 100 judged
documents). The ideal DCG and the count of relevant documents (AP's divisor) read the judged
arrays, every rank reads the ranked ones. When every judged document is ranked both are the
same arrays.

Everything convention-specific arrives as lookup tables indexed by label (``gain``, ``rel``,
``err_r``) or by 0-based rank (``disc``) plus a few integer codes (see conventions.py), so the
loop below exists once. The ranking (score descending, ties by the convention's rule) is
computed once per query by :func:`.ranking_kernels.rank_queries`, with an O(n log n) worst case,
and read here by every measure.

With ``average_ties`` every per-document quantity of a rank (gain, relevance, ERR stopping
probability) is replaced by its mean over all documents of the query with the same score,
wherever they fall (McSherry and Najork, ECIR 2008; scikit-learn's ``ndcg_score``): for the
measures linear in it (DCG, NDCG, P@k, MeanNDCG) this is the exact expectation over all orders
of the tied documents, and a cutoff inside a tie group takes that group's mean gain for the
ranks before the cutoff only.

Formulas (r is the 1-based rank, m = min(k, n)):

- DCG@k = sum_{r<=m} gain[l_r] * disc[r-1]; NDCG@k = DCG@k / idealDCG@k with idealDCG@k the
  same sum over the top min(k, N) gains of the query's N judged labels sorted descending
  (Järvelin and Kekäläinen 2002);
  ``empty_value`` when idealDCG@k = 0; when n < k, ``short_rule`` decides (truncate/NaN/0).
- ERR@k = sum_{r<=m} err_r[l_r] / r * prod_{s<r} (1 - err_r[l_s]) (Chapelle et al. 2009).
- P@k = #{r <= m : rel[l_r]} / (k or m); AP = sum over relevant ranks r of P@r / #relevant
  judged documents.
- MeanNDCG = (1/n) sum_{j=1..n} NDCG@j (LETOR 4.0).

``empty_value`` is per call (the measure may override the convention's), as are the tables.
"""

from __future__ import annotations

import numpy as np
from numba import njit

import tunemix.core.numba_cache  # noqa: F401 - numba's cache written under a lock (tunemix/core/numba_cache.py)
from tunemix.core.evaluation import ranking_kernels

DCG = 0
NDCG = 1
ERR = 2
PREC = 3
AP = 4
MEANNDCG = 5

# Tie modes and the ranking itself: :mod:`.ranking_kernels` (each query ranked once).
TIE_STABLE = ranking_kernels.TIE_STABLE
TIE_DOCID = ranking_kernels.TIE_DOCID
TIE_QUICKSORT = ranking_kernels.TIE_QUICKSORT
SELECT_MAX = ranking_kernels.SELECT_MAX


@njit(cache=True, nogil=True)
def _ideal_gains(labels, gain, start, end, m, out):
    """Fill out[0:m] with the m largest gains of rows start:end, descending."""
    n = end - start
    if m <= SELECT_MAX and m < n:
        cnt = 0
        for i in range(start, end):
            g = gain[labels[i]]
            if cnt < m:
                pos = cnt
                cnt += 1
            elif g > out[m - 1]:
                pos = m - 1
            else:
                continue
            while pos > 0 and g > out[pos - 1]:
                out[pos] = out[pos - 1]
                pos -= 1
            out[pos] = g
        return
    buf = np.empty(n, dtype=np.float64)
    for i in range(n):
        buf[i] = gain[labels[start + i]]
    # merge sort: numba's default quicksort is quadratic on adversarial orders
    idx = np.argsort(buf, kind="mergesort")
    for r in range(m):
        out[r] = buf[idx[n - 1 - r]]


@njit(cache=True, nogil=True)
def _rank_values(labels, scores, table, average_ties, start, end, m, order, out):
    """out[r] = table[label at rank r] for r < m (order[0:m] holds the ranked rows); with
    ``average_ties`` the mean of table[label] over the rank's whole tie group in the query."""
    for r in range(m):
        out[r] = table[labels[order[r]]]
    if not average_ties:
        return
    r = 0
    while r < m:
        s = scores[order[r]]
        e = r + 1
        while e < m and scores[order[e]] == s:
            e += 1
        total = 0.0
        cnt = 0
        if e == m and m < end - start:
            # the last group of the prefix may go on past rank m: take all its rows
            for i in range(start, end):
                if scores[i] == s:
                    total += table[labels[i]]
                    cnt += 1
        else:
            for j in range(r, e):
                total += out[j]
            cnt = e - r
        mean = total / cnt
        for j in range(r, e):
            out[j] = mean
        r = e


@njit(cache=True, nogil=True)
def _query_value(
    labels, scores, average_ties, start, end, metric, cutoff, short_rule, p_rule, empty_value,
    gain, disc, rel, err_r, order, ideal, vals, judged_labels, judged_start, judged_end,
):
    """The value of one measure on the query owning rows start:end (see module docstring);
    ``order[0:m]`` holds the rows of its first m ranks (:func:`.ranking_kernels.rank_queries`),
    ``judged_labels[judged_start:judged_end]`` all its judged documents' labels."""
    n = end - start
    n_judged = judged_end - judged_start
    k = cutoff if cutoff > 0 else n
    m = min(k, n)
    m_ideal = min(cutoff, n_judged) if cutoff > 0 else n_judged
    if metric == DCG or metric == NDCG:
        if n < k:
            if short_rule == 1:
                return np.nan
            if short_rule == 2:
                return 0.0
        _rank_values(labels, scores, gain, average_ties, start, end, m, order, vals)
        dcg = 0.0
        for r in range(m):
            dcg += vals[r] * disc[r]
        if metric == DCG:
            return dcg
        _ideal_gains(judged_labels, gain, judged_start, judged_end, m_ideal, ideal)
        best = 0.0
        for r in range(m_ideal):
            best += ideal[r] * disc[r]
        if best <= 0.0:
            return empty_value
        return dcg / best
    if metric == ERR:
        _rank_values(labels, scores, err_r, average_ties, start, end, m, order, vals)
        p = 1.0
        s = 0.0
        for r in range(m):
            big_r = vals[r]
            s += p * big_r / (r + 1)
            p *= 1.0 - big_r
        return s
    if metric == PREC:
        if n < k and p_rule == 2:
            return np.nan
        _rank_values(labels, scores, rel, average_ties, start, end, m, order, vals)
        hits = 0.0
        for r in range(m):
            hits += vals[r]
        if p_rule == 1:
            return hits / m if m > 0 else 0.0
        return hits / k
    if metric == AP:
        _rank_values(labels, scores, rel, average_ties, start, end, n, order, vals)
        n_rel = 0
        for i in range(judged_start, judged_end):
            n_rel += rel[judged_labels[i]]
        if n_rel == 0:
            return 0.0
        hits = 0.0
        total = 0.0
        for r in range(n):
            if vals[r] != 0.0:
                hits += vals[r]
                total += vals[r] * hits / (r + 1)
        return total / n_rel
    # MEANNDCG
    if n == 0:
        return 0.0
    _rank_values(labels, scores, gain, average_ties, start, end, n, order, vals)
    _ideal_gains(judged_labels, gain, judged_start, judged_end, min(n, n_judged), ideal)
    dcg = 0.0
    best = 0.0
    acc = 0.0
    for r in range(n):
        dcg += vals[r] * disc[r]
        best += ideal[r] * disc[r]
        if best <= 0.0:
            acc += empty_value
        else:
            acc += dcg / best
    return acc / n


@njit(cache=True, nogil=True)
def query_values(
    labels, scores, order, average_ties, query_offsets, metric, cutoff, short_rule, p_rule,
    empty_value, gain, disc, rel, err_r, judged_labels, judged_offsets,
):
    """Per-query values of one measure (float64, NaN = the tool has no value).

    ``order``: :func:`.ranking_kernels.rank_queries`'s ranking, whose prefix covers the ranks
    this measure reads (its cut-off; AP and MeanNDCG the whole list). ``judged_labels`` and
    ``judged_offsets``: every judged document of each query (``labels`` and ``query_offsets``
    themselves when the run ranks them all)."""
    nq = query_offsets.shape[0] - 1
    out = np.empty(nq, dtype=np.float64)
    max_n = 1
    for q in range(nq):
        size = judged_offsets[q + 1] - judged_offsets[q]
        if size > max_n:
            max_n = size
    ideal = np.empty(max_n, dtype=np.float64)
    vals = np.empty(max_n, dtype=np.float64)
    for q in range(nq):
        lo = query_offsets[q]
        hi = query_offsets[q + 1]
        out[q] = _query_value(
            labels, scores, average_ties, lo, hi, metric, cutoff, short_rule, p_rule,
            empty_value, gain, disc, rel, err_r, order[lo:hi], ideal, vals,
            judged_labels, judged_offsets[q], judged_offsets[q + 1],
        )
    return out


@njit(cache=True, nogil=True)
def mean_of_values(values):
    """Mean over all queries where a NaN (no value) counts 0 (the letor3 rule; others have none)."""
    s = 0.0
    for v in values:
        if v == v:
            s += v
    return s / values.shape[0]


@njit(cache=True, nogil=True)
def decimal_string_keys(n):
    """For rows 0..n-1, int64 keys ordered like the strings str(row) under strcmp.

    Base-11 digits, '0'..'9' -> 1..10 and a missing trailing character -> 0 (a prefix sorts
    first), padded to the width of str(n - 1); exact up to 18 digits.
    """
    width = 1
    p = 10
    while p <= n - 1:
        width += 1
        p *= 10
    out = np.empty(n, dtype=np.int64)
    for i in range(n):
        d = 1
        p = 10
        while p <= i:
            d += 1
            p *= 10
        key = 0
        div = p // 10
        for j in range(width):
            if j < d:
                key = key * 11 + (i // div) % 10 + 1
                div //= 10
            else:
                key = key * 11
        out[i] = key
    return out
