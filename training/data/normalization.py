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
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from numba import njit

from training.data.dataset import validate_offsets

View = Literal["raw", "raw+std", "raw+white"]
VIEWS: tuple[str, ...] = ("raw", "raw+std", "raw+white")
WHITEN_EPS = 1e-3
ILL_CONDITIONED = 1e-6
#: eigenvalues at most this times the largest are the null space: their components are set to 0
NULL_SPACE = 1e-9


@njit(cache=True, nogil=True)
def _standardise(x, offsets, out):
    d = x.shape[1]
    for q in range(offsets.shape[0] - 1):
        s, e = offsets[q], offsets[q + 1]
        m = e - s
        if m == 0:
            continue
        for j in range(d):
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
def _centre_cov(x, offsets, q0, means, cov):
    """Means (Q, d) and population covariances (Q, d, d) of queries ``q0 .. q0 + Q - 1`` (zero for
    an empty query): the whole square is accumulated document by document (contiguous rows, so
    the loop vectorises), then its upper triangle is kept and mirrored (exactly symmetric)."""
    d = x.shape[1]
    row = np.empty(d)
    for b in range(means.shape[0]):
        s, e = offsets[q0 + b], offsets[q0 + b + 1]
        m = e - s
        for j in range(d):
            means[b, j] = 0.0
            for c in range(d):
                cov[b, j, c] = 0.0
        if m == 0:
            continue
        for j in range(d):
            mean = 0.0
            for i in range(s, e):
                mean += x[i, j]
            means[b, j] = mean / m
        for i in range(s, e):
            for j in range(d):
                row[j] = x[i, j] - means[b, j]
            for r in range(d):
                a = row[r]
                if a != 0.0:  # a feature constant on the query adds nothing (MQ2008 has many)
                    for c in range(d):
                        cov[b, r, c] += a * row[c]
        for r in range(d):
            for c in range(r, d):
                cov[b, r, c] /= m
                cov[b, c, r] = cov[b, r, c]


@njit(cache=True, nogil=True)
def _project(x, offsets, q0, means, lam, vec, out, eps, ill, null):
    """Whitened rows of queries ``q0 ..`` from their eigendecompositions (``lam`` ascending, as
    ``np.linalg.eigh`` returns them): component c is eigenvector ``d - 1 - c``, its sign fixed by
    its largest-magnitude entry, scaled by 1 / sqrt(lambda + eps), 0 in the null space."""
    d = x.shape[1]
    w = np.empty((d, d))
    row = np.empty(d)
    for b in range(means.shape[0]):
        s, e = offsets[q0 + b], offsets[q0 + b + 1]
        if e == s:
            continue
        top = max(lam[b, d - 1], 0.0)
        add = eps if (lam[b, 0] <= ill * top or lam[b, 0] <= 0.0) else 0.0
        for c in range(d):
            k = d - 1 - c  # decreasing eigenvalue order
            big = 0
            for r in range(d):
                if abs(vec[b, r, k]) > abs(vec[b, big, k]):
                    big = r
            if lam[b, k] <= null * top:
                scale = 0.0
            else:
                scale = (1.0 if vec[b, big, k] >= 0 else -1.0) / np.sqrt(lam[b, k] + add)
            for r in range(d):
                w[r, c] = vec[b, r, k] * scale
        for i in range(s, e):
            for j in range(d):
                row[j] = x[i, j] - means[b, j]
                out[i, j] = 0.0
            for r in range(d):
                a = row[r]
                for c in range(d):
                    out[i, c] += a * w[r, c]


#: Queries whitened per batch: their covariance stack stays below about 32 MB.
_WHITEN_BATCH_VALUES = 4_000_000


def standardise_by_query(features: np.ndarray, query_offsets: np.ndarray) -> np.ndarray:
    """Per query and feature, (x - mean) / std; constant features give 0. Returns float32."""
    x = np.ascontiguousarray(features, dtype=np.float64)
    off = validate_offsets(query_offsets, x.shape[0])
    out = np.empty_like(x)
    _standardise(x, off, out)
    return out.astype(np.float32)


def whiten_by_query(features: np.ndarray, query_offsets: np.ndarray, *, eps: float = WHITEN_EPS) -> np.ndarray:
    """Per query, PCA-whitened features (see module docstring). Returns float32."""
    x = np.ascontiguousarray(features, dtype=np.float64)
    off = validate_offsets(query_offsets, x.shape[0])
    out = np.zeros_like(x)
    n_queries, d = off.shape[0] - 1, x.shape[1]
    if d == 0:
        return out.astype(np.float32)
    step = max(1, _WHITEN_BATCH_VALUES // (d * d))
    for q0 in range(0, n_queries, step):
        nq = min(step, n_queries - q0)
        means = np.empty((nq, d))
        cov = np.empty((nq, d, d))
        _centre_cov(x, off, q0, means, cov)
        # numpy's own LAPACK: numba's np.linalg needs scipy, which the service image does not have
        lam, vec = np.linalg.eigh(cov)
        _project(x, off, q0, means, np.ascontiguousarray(lam), np.ascontiguousarray(vec), out,
                 float(eps), ILL_CONDITIONED, NULL_SPACE)
    return out.astype(np.float32)


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
