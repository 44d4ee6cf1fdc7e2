"""Query-wise normalisation: augmenting feature views (method section 2; Busa-Fekete et al. 2010).

Three training views, applied identically at training and at scoring time:

- ``raw``: the features as given, (n, d).
- ``raw+std``: raw features followed by a standardised copy, (n, 2d). Per query q and feature j,
  z = (x - mean_q) / std_q (population std); a feature that is constant within the query gives 0.
- ``raw+white``: raw features followed by a whitened copy, (n, 2d). Per query: centre, take the
  covariance C = X_c^T X_c / n_q, eigendecompose C = V diag(lambda) V^T, and return
  X_c V / sqrt(lambda + eps). Our choices, which the papers leave open: eps = 1e-3 is added when
  the decomposition is ill-conditioned (smallest eigenvalue <= 1e-6 times the largest, which is
  always the case when the query has fewer documents than features), else eps = 0;
  components are ordered by decreasing eigenvalue; each eigenvector's sign is fixed so that
  its largest-magnitude entry is positive (eigenvectors are otherwise defined only up to sign,
  which would make the whitened columns mean different things in different queries);
  components in the null space (eigenvalue <= 1e-9 times the largest, e.g. the d - n_q + 1
  directions of a query with n_q < d documents) are exactly 0: their projections are rounding
  noise (about 1e-9) with distinct values that the adaptive binning would turn into splits.

Because every view except ``raw`` uses statistics of the whole candidate list, a document's
score depends on the other documents posted with it.

Missing values (NaN, ``docs/missing-values.md``): both views read the list with each missing value
replaced by its query's mean of the feature over the documents that have it (0 when none has it,
``fill_missing``); a missing value stays missing in the standardised copy, and the whitened copy,
whose every column mixes all features, is a number for every document.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from numba import njit

import tunemix.core.numba_cache  # noqa: F401 - numba's cache written under a lock (tunemix/core/numba_cache.py)
from tunemix.core.data.dataset import validate_offsets
from tunemix.core.threads import on_threads

View = Literal["raw", "raw+std", "raw+white"]
VIEWS: tuple[str, ...] = ("raw", "raw+std", "raw+white")
WHITEN_EPS = 1e-3
ILL_CONDITIONED = 1e-6
#: eigenvalues at most this times the largest are the null space: their components are set to 0
NULL_SPACE = 1e-9


@njit(cache=True, inline="always")
def _standardise_feature(x, s, e, j, out):
    m = e - s
    mean = 0.0
    for i in range(s, e):
        mean += x[i, j]
    mean /= m
    var = 0.0
    for i in range(s, e):
        diff = x[i, j] - mean
        var += diff * diff
    var /= m
    std = np.sqrt(var)
    if std <= 1e-12 * max(1.0, abs(mean)):
        for i in range(s, e):
            out[i, j] = 0.0
    else:
        for i in range(s, e):
            out[i, j] = (x[i, j] - mean) / std


@njit(cache=True, nogil=True)
def _standardise(x, offsets, out, big):
    """Every query of fewer than ``big`` documents (the others are left to the caller)."""
    d = x.shape[1]
    for q in range(offsets.shape[0] - 1):
        s, e = offsets[q], offsets[q + 1]
        if e == s or e - s >= big:
            continue
        for j in range(d):
            _standardise_feature(x, s, e, j, out)


@njit(cache=True, nogil=True)
def _standardise_features(x, s, e, out, j0, j1):
    """Features ``j0:j1`` of one query (each feature as ``_standardise``)."""
    for j in range(j0, j1):
        _standardise_feature(x, s, e, j, out)


def _standardise_parallel(x: np.ndarray, s: int, e: int, out: np.ndarray, parts: int) -> None:
    """One query's features cut into ``parts`` ranges on as many threads (``tunemix.core.threads``)."""
    d = x.shape[1]
    on_threads(lambda p: _standardise_features(x, s, e, out, p * d // parts, (p + 1) * d // parts), parts)


@njit(cache=True, inline="always")
def _query_means(x, s, e, mean):
    for j in range(x.shape[1]):
        acc = 0.0
        for i in range(s, e):
            acc += x[i, j]
        mean[j] = acc / (e - s)


@njit(cache=True, inline="always")
def _cov_rows(x, s, e, mean, cov, r0, r1, rows):
    """Rows ``r0:r1`` of the (unnormalised) covariance of documents ``s:e``, accumulated
    document by document: each entry sums its terms in document order, whichever rows a call
    takes (so that any split of the rows gives the same bits). Four documents per pass over an
    entry (``rows``: their centred rows): the entry is read and written once for four terms,
    added in the same order. A zero term leaves an entry as it is (the features are finite and
    a sum is never -0), so a row whose four terms are zero is skipped (a feature constant on the
    query: MQ2008 has many) and the others add theirs whether zero or not: the same bits as
    one document at a time."""
    d = x.shape[1]
    i = s
    while i < e:
        m = min(4, e - i)
        for t in range(m):
            for j in range(d):
                rows[t, j] = x[i + t, j] - mean[j]
        for r in range(r0, r1):
            if m == 4:
                a0, a1, a2, a3 = rows[0, r], rows[1, r], rows[2, r], rows[3, r]
                if a0 != 0.0 or a1 != 0.0 or a2 != 0.0 or a3 != 0.0:
                    for c in range(d):
                        v = cov[r, c] + a0 * rows[0, c]
                        v = v + a1 * rows[1, c]
                        v = v + a2 * rows[2, c]
                        cov[r, c] = v + a3 * rows[3, c]
            else:
                for t in range(m):
                    a = rows[t, r]
                    if a != 0.0:
                        for c in range(d):
                            cov[r, c] += a * rows[t, c]
        i += m


@njit(cache=True, inline="always")
def _cov_finish(cov, m):
    """Divide by the query's size, keep the upper triangle and mirror it (exactly symmetric)."""
    d = cov.shape[0]
    for r in range(d):
        for c in range(r, d):
            cov[r, c] /= m
            cov[c, r] = cov[r, c]


@njit(cache=True, nogil=True)
def _centre_cov(x, offsets, q0, means, cov, big):
    """Means (Q, d) and population covariances (Q, d, d) of queries ``q0 .. q0 + Q - 1`` (zero for
    an empty query and for one of ``big`` documents or more, left to the caller): the whole
    square is accumulated document by document (contiguous rows, so the loop vectorises), then
    its upper triangle is kept and mirrored (exactly symmetric)."""
    d = x.shape[1]
    rows = np.empty((4, d))
    for b in range(means.shape[0]):
        s, e = offsets[q0 + b], offsets[q0 + b + 1]
        means[b, :] = 0.0
        cov[b, :, :] = 0.0
        if e == s or e - s >= big:
            continue
        _query_means(x, s, e, means[b])
        _cov_rows(x, s, e, means[b], cov[b], 0, d, rows)
        _cov_finish(cov[b], e - s)


@njit(cache=True, nogil=True)
def _centre_cov_piece(x, s, e, mean, cov, r0, r1, phase):
    """One step of ``_centre_cov`` of one non-empty query: ``phase`` 0 its means and a zero
    covariance, 1 covariance rows ``r0:r1`` (any split of the rows gives the same bits), 2 the
    division and the mirror."""
    if phase == 0:
        _query_means(x, s, e, mean)
        cov[:, :] = 0.0
    elif phase == 1:
        _cov_rows(x, s, e, mean, cov, r0, r1, np.empty((4, x.shape[1])))
    else:
        _cov_finish(cov, e - s)


def _centre_cov_parallel(x: np.ndarray, s: int, e: int, mean: np.ndarray, cov: np.ndarray, parts: int) -> None:
    """``_centre_cov`` of one non-empty query, its covariance rows cut into ``parts`` ranges on as
    many threads (``tunemix.core.threads``; the same bits)."""
    d = x.shape[1]
    _centre_cov_piece(x, s, e, mean, cov, 0, 0, 0)
    on_threads(lambda p: _centre_cov_piece(x, s, e, mean, cov, p * d // parts, (p + 1) * d // parts, 1), parts)
    _centre_cov_piece(x, s, e, mean, cov, 0, 0, 2)


@njit(cache=True, inline="always")
def _whitening_matrix(lam, vec, eps, ill, null, w):
    """w (d, d) from one query's eigendecomposition (``lam`` ascending, as ``np.linalg.eigh``
    returns them): column c is eigenvector ``d - 1 - c``, its sign fixed by its largest-magnitude
    entry, scaled by 1 / sqrt(lambda + eps), 0 in the null space."""
    d = lam.shape[0]
    top = max(lam[d - 1], 0.0)
    add = eps if (lam[0] <= ill * top or lam[0] <= 0.0) else 0.0
    for c in range(d):
        k = d - 1 - c  # decreasing eigenvalue order
        big = 0
        for r in range(d):
            if abs(vec[r, k]) > abs(vec[big, k]):
                big = r
        if lam[k] <= null * top:
            scale = 0.0
        else:
            scale = (1.0 if vec[big, k] >= 0 else -1.0) / np.sqrt(lam[k] + add)
        for r in range(d):
            w[r, c] = vec[r, k] * scale


@njit(cache=True, inline="always")
def _project_rows(x, s, e, mean, w, out, row):
    """out[i] = (x[i] - mean) @ w for documents ``s:e``, each entry summing its terms in the order
    of w's rows; four rows of w per pass over an output row (read and written once for four
    terms, added in the same order)."""
    d = x.shape[1]
    for i in range(s, e):
        for j in range(d):
            row[j] = x[i, j] - mean[j]
            out[i, j] = 0.0
        r = 0
        while r + 4 <= d:
            a0, a1, a2, a3 = row[r], row[r + 1], row[r + 2], row[r + 3]
            for c in range(d):
                v = out[i, c] + a0 * w[r, c]
                v = v + a1 * w[r + 1, c]
                v = v + a2 * w[r + 2, c]
                out[i, c] = v + a3 * w[r + 3, c]
            r += 4
        while r < d:
            a = row[r]
            for c in range(d):
                out[i, c] += a * w[r, c]
            r += 1


@njit(cache=True, nogil=True)
def _project(x, offsets, q0, means, lam, vec, out, eps, ill, null, big):
    """Whitened rows of queries ``q0 ..`` of fewer than ``big`` documents from their
    eigendecompositions (``_whitening_matrix``)."""
    d = x.shape[1]
    w = np.empty((d, d))
    row = np.empty(d)
    for b in range(means.shape[0]):
        s, e = offsets[q0 + b], offsets[q0 + b + 1]
        if e == s or e - s >= big:
            continue
        _whitening_matrix(lam[b], vec[b], eps, ill, null, w)
        _project_rows(x, s, e, means[b], w, out, row)


@njit(cache=True, nogil=True)
def _project_piece(x, mean, lam, vec, w, out, eps, ill, null, r0, r1, phase):
    """One step of ``_project`` of one non-empty query: ``phase`` 0 the whitening matrix ``w``
    (``_whitening_matrix``), 1 the whitened documents ``r0:r1`` (each row as in ``_project``)."""
    if phase == 0:
        _whitening_matrix(lam, vec, eps, ill, null, w)
    else:
        _project_rows(x, r0, r1, mean, w, out, np.empty(x.shape[1]))


def _project_parallel(x: np.ndarray, s: int, e: int, mean: np.ndarray, lam: np.ndarray, vec: np.ndarray,
                      out: np.ndarray, eps: float, ill: float, null: float, parts: int) -> None:
    """``_project`` of one non-empty query, its documents cut into ``parts`` ranges on as many
    threads (``tunemix.core.threads``; each row computed as in ``_project``: the same bits)."""
    d = x.shape[1]
    w = np.empty((d, d))
    _project_piece(x, mean, lam, vec, w, out, eps, ill, null, 0, 0, 0)
    on_threads(lambda p: _project_piece(x, mean, lam, vec, w, out, eps, ill, null, s + p * (e - s) // parts,
                                        s + (p + 1) * (e - s) // parts, 1), parts)


#: Queries whitened per batch: their covariance stack stays below about 32 MB.
_WHITEN_BATCH_VALUES = 4_000_000


#: With ``parts`` > 1, a query of at least this many documents is normalised by the parallel
#: kernels (its work cut into ``parts`` pieces for threads); smaller ones stay on one.
#: Measured on MQ2008 rows (46 features), two threads against one, interleaved: 1,000 documents
#: whitening 1.73-1.76 -> 1.49-1.53 ms, standardising 0.35 -> 0.27-0.30 ms; 300 documents
#: whitening 0.78-0.79 -> 0.84 ms (slower: the launches cost more than they save).
PARALLEL_MIN_DOCUMENTS = 512

_NEVER = np.iinfo(np.int64).max


def _big_queries(off: np.ndarray, parts: int) -> tuple[int, list[int]]:
    """(the size from which the serial kernels leave a query to the parallel ones, those queries)."""
    if parts <= 1:
        return _NEVER, []
    sizes = np.diff(off)
    return PARALLEL_MIN_DOCUMENTS, np.flatnonzero(sizes >= PARALLEL_MIN_DOCUMENTS).tolist()


def standardise_by_query(features: np.ndarray, query_offsets: np.ndarray, *, parts: int = 1) -> np.ndarray:
    """Per query and feature, (x - mean) / std; constant features give 0. Returns float32.
    ``parts`` > 1: queries of ``PARALLEL_MIN_DOCUMENTS`` or more spread their features over
    threads (the caller sets how many); the result is the same to the last bit."""
    x = np.ascontiguousarray(features, dtype=np.float64)
    return standardised(x, validate_offsets(query_offsets, x.shape[0]), parts=parts).astype(np.float32)


def fill_missing(x: np.ndarray, off: np.ndarray) -> np.ndarray | None:
    """``x`` (float64 (n, d)) with each NaN replaced by its query's mean of the feature over the
    documents that have it (0 when none does), C-contiguous; None when ``x`` has no NaN."""
    nan = np.isnan(x)
    if not nan.any():
        return None
    starts = off[:-1][np.diff(off) > 0]
    present = np.where(nan, 0.0, x)
    counts = np.add.reduceat((~nan).astype(np.float64), starts, axis=0)
    sums = np.add.reduceat(present, starts, axis=0)
    means = np.divide(sums, counts, out=np.zeros_like(sums), where=counts > 0)
    rows = np.repeat(np.arange(starts.shape[0]), np.diff(np.append(starts, x.shape[0])))
    return np.ascontiguousarray(np.where(nan, means[rows], x))


def standardised(x: np.ndarray, off: np.ndarray, *, parts: int = 1) -> np.ndarray:
    """``standardise_by_query``'s values in float64, for a caller that holds the features as a
    C-contiguous float64 (n, d) array and offsets it has validated (the scoring pass: one copy
    of the features for both views, each view cast once, into the forest's input). A missing
    value stays missing; the statistics are those of ``fill_missing``'s list."""
    filled = fill_missing(x, off)
    if filled is not None:
        out = standardised(filled, off, parts=parts)
        out[np.isnan(x)] = np.nan
        return out
    out = np.empty_like(x)
    big, queries = _big_queries(off, parts)
    _standardise(x, off, out, big)
    for q in queries:
        _standardise_parallel(x, int(off[q]), int(off[q + 1]), out, parts)
    return out


def whiten_by_query(features: np.ndarray, query_offsets: np.ndarray, *, eps: float = WHITEN_EPS,
                    parts: int = 1, keep: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] | None = None
                    ) -> np.ndarray:
    """Per query, PCA-whitened features (see module docstring). Returns float32. ``parts`` > 1:
    queries of ``PARALLEL_MIN_DOCUMENTS`` or more cut their covariance rows and their documents
    into ``parts`` pieces for threads (the caller sets how many); the same bits. ``keep``: a dict
    that receives each query's (mean (d,), eigenvalues (d,), eigenvectors (d, d)) under its index
    (an explanation's reference views reuse them instead of computing them again)."""
    x = np.ascontiguousarray(features, dtype=np.float64)
    off = validate_offsets(query_offsets, x.shape[0])
    return whitened(x, off, eps=eps, parts=parts, keep=keep).astype(np.float32)


def whitened(x: np.ndarray, off: np.ndarray, *, eps: float = WHITEN_EPS, parts: int = 1,
             keep: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] | None = None) -> np.ndarray:
    """``whiten_by_query``'s values in float64, for a caller that holds the features as a
    C-contiguous float64 (n, d) array and offsets it has validated (see ``standardised``). A list
    with missing values is whitened as ``fill_missing`` fills it."""
    filled = fill_missing(x, off)
    if filled is not None:
        x = filled
    out = np.zeros_like(x)
    n_queries, d = off.shape[0] - 1, x.shape[1]
    if d == 0:
        return out
    big, queries = _big_queries(off, parts)
    if len(queries) < n_queries:
        step = max(1, _WHITEN_BATCH_VALUES // (d * d))
        for q0 in range(0, n_queries, step):
            nq = min(step, n_queries - q0)
            means = np.empty((nq, d))
            cov = np.empty((nq, d, d))
            _centre_cov(x, off, q0, means, cov, big)
            # numpy's own LAPACK: numba's np.linalg needs scipy, which the service image does not have
            lam, vec = np.linalg.eigh(cov)
            lam, vec = np.ascontiguousarray(lam), np.ascontiguousarray(vec)
            _project(x, off, q0, means, lam, vec, out, float(eps), ILL_CONDITIONED, NULL_SPACE, big)
            if keep is not None:
                keep.update({q0 + j: (means[j], lam[j], vec[j]) for j in range(nq) if q0 + j not in queries})
    for q in queries:
        mean = np.empty(d)
        cov_q = np.empty((d, d))
        _centre_cov_parallel(x, int(off[q]), int(off[q + 1]), mean, cov_q, parts)
        lam_q, vec_q = np.linalg.eigh(cov_q)
        lam_q, vec_q = np.ascontiguousarray(lam_q), np.ascontiguousarray(vec_q)
        _project_parallel(x, int(off[q]), int(off[q + 1]), mean, lam_q, vec_q, out, float(eps), ILL_CONDITIONED,
                          NULL_SPACE, parts)
        if keep is not None:
            keep[q] = (mean, lam_q, vec_q)
    return out


def apply_view(features: np.ndarray, query_offsets: np.ndarray, view: str) -> np.ndarray:
    """The feature matrix of ``view`` (one of VIEWS): raw, or raw with a normalised copy appended."""
    x = np.ascontiguousarray(features, dtype=np.float32)
    if view == "raw":
        return x
    if view == "raw+std":
        return np.hstack([x, standardise_by_query(x, query_offsets)])
    if view == "raw+white":
        return np.hstack([x, whiten_by_query(x, query_offsets)])
    raise ValueError(f"unknown feature view {view!r}; expected one of {', '.join(VIEWS)}")


def view_width(n_features: int, view: str) -> int:
    """Number of columns ``apply_view`` produces for ``n_features`` raw features."""
    if view not in VIEWS:
        raise ValueError(f"unknown feature view {view!r}; expected one of {', '.join(VIEWS)}")
    return n_features if view == "raw" else 2 * n_features
