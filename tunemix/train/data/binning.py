"""Adaptive per-feature quantisation: at most B bins per feature, only where the data are.

Each feature j gets ``n_bins[j]`` bins (1 <= n_bins[j] <= B <= 256) separated by
``n_bins[j] - 1`` lower edges ``e_1 < e_2 < ...``; every edge is a float32 value that occurs in
the data (McRank, Li, Burges and Wu 2007, appendix: "adaptive quantisation"). A value x lands in
bin ``code(x) = #{b : e_b <= x}``, so that for every bin b >= 1::

    x >= e_b   <=>   code(x) >= b

exactly (both sides are float32 comparisons with the same numbers). A split "bins >= b go right"
is therefore the real-valued test ``x[j] >= e_b`` and scoring never needs the bins.

Edges are chosen by quantiles over the distinct values: with distinct sorted values u_1 < ... <
u_m and counts c_1..c_m (on at most ``sample_size`` rows), a feature with m <= B keeps one bin
per distinct value; otherwise the edges are the distinct values at which the running count
first reaches q * n / B' (q = 1..B'-1), plus, around every value holding more than n / B rows,
edges that give it a bin of its own (B' = B minus those forced edges, so at most B bins;
duplicates merge, so a feature may end up with fewer than B bins). A constant feature has one
bin and no edge: no stump can split on it.

A missing value (NaN) has a bin of its own, ``MISSING_CODE`` (255), whatever the feature's
``n_bins``: edges are chosen on the present values, and a feature with a missing value in the
data it is fitted on has at most 255 bins. A split then sends the missing bin left or right as
a whole (``docs/missing-values.md``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from numba import njit

import tunemix.core.numba_cache  # noqa: F401 - numba's cache written under a lock (tunemix/core/numba_cache.py)

MAX_BINS = 256
#: the code of a missing value (NaN): a bin of its own, above every feature's bins
MISSING_CODE = 255


@dataclass(frozen=True, eq=False)
class FeatureBins:
    """Bin edges of every feature of one training run.

    ``edges`` is float32, shape (d, B - 1), row j holding the ``n_bins[j] - 1`` lower edges of
    bins 1..n_bins[j]-1 of feature j, padded with +inf. ``threshold(j, b)`` is ``edges[j, b-1]``.
    """

    edges: npt.NDArray[np.float32]
    n_bins: npt.NDArray[np.int32]

    @property
    def n_features(self) -> int:
        return int(self.n_bins.shape[0])

    @property
    def max_bins(self) -> int:
        return int(self.edges.shape[1]) + 1

    def threshold(self, feature: int, bin_index: int) -> np.float32:
        """The real threshold equivalent to ``code >= bin_index`` on ``feature``."""
        if not 1 <= bin_index < int(self.n_bins[feature]):
            raise ValueError(
                f"bin_index must be in 1..{int(self.n_bins[feature]) - 1} for feature {feature}"
            )
        return np.float32(self.edges[feature, bin_index - 1])

    def transform(self, X: npt.NDArray[np.float32]) -> npt.NDArray[np.uint8]:
        """Codes of ``X`` (n, d) as a C-contiguous uint8 array (n, d)."""
        return np.ascontiguousarray(self.transform_columns(X).T)

    def transform_columns(self, X: npt.NDArray[np.float32]) -> npt.NDArray[np.uint8]:
        """Codes of ``X`` (n, d), feature-major: a C-contiguous uint8 array (d, n)."""
        X = np.ascontiguousarray(X, dtype=np.float32)
        if X.ndim != 2 or X.shape[1] != self.n_features:
            raise ValueError(f"X must have shape (n, {self.n_features}), got {X.shape}")
        codes = np.empty((X.shape[1], X.shape[0]), dtype=np.uint8)
        _codes_kernel(X, self.edges, self.n_bins, codes)
        full = np.flatnonzero(self.n_bins > MISSING_CODE)
        if full.size:
            lost = np.flatnonzero((codes[full] == MISSING_CODE).any(axis=1) & np.isnan(X[:, full]).any(axis=0))
            if lost.size:
                j = int(full[lost[0]])
                raise ValueError(f"feature {j} has a missing value (NaN) but {int(self.n_bins[j])} bins, none "
                                 f"left for missing values: fit the bins with at most {MISSING_CODE} bins")
        return codes


@njit(cache=True, nogil=True)
def _codes_kernel(X, edges, n_bins, codes):  # pragma: no cover
    """``codes[j, i] = #{b : edges[j, b] <= X[i, j]}`` by binary search (the bin of X[i, j]);
    ``MISSING_CODE`` for NaN."""
    n, d = X.shape
    for i0 in range(0, n, 1024):
        i1 = min(i0 + 1024, n)
        for j in range(d):
            m = n_bins[j] - 1
            for i in range(i0, i1):
                x = X[i, j]
                if x != x:
                    codes[j, i] = MISSING_CODE
                    continue
                lo = 0
                hi = m
                while lo < hi:
                    mid = (lo + hi) >> 1
                    if edges[j, mid] <= x:
                        lo = mid + 1
                    else:
                        hi = mid
                codes[j, i] = lo


def _feature_edges(column: npt.NDArray[np.float32], max_bins: int) -> npt.NDArray[np.float32]:
    values, counts = np.unique(column, return_counts=True)
    if values.shape[0] <= max_bins:
        return values[1:].astype(np.float32)
    # running count *before* each distinct value; an edge at value i means a bin starts at u_i
    m = values.shape[0]
    before = np.concatenate(([0], np.cumsum(counts)[:-1]))
    total = float(counts.sum())
    # a value holding more than total / B rows gets a bin of its own
    heavy = np.flatnonzero(counts > total / max_bins)
    forced = np.unique(np.concatenate((heavy, heavy + 1)))
    forced = forced[(forced > 0) & (forced < m)]
    if forced.shape[0] >= max_bins - 1:
        pick = np.linspace(0, forced.shape[0] - 1, max_bins - 1).round().astype(np.int64)
        return values[np.unique(forced[pick])].astype(np.float32)
    n_quantile_bins = max_bins - forced.shape[0]
    targets = np.arange(1, n_quantile_bins, dtype=np.float64) * (total / n_quantile_bins)
    idx = np.searchsorted(before, targets, side="left")
    idx = np.unique(np.concatenate((idx[(idx > 0) & (idx < m)], forced)))
    return values[idx].astype(np.float32)


def fit_bins(
    X: npt.NDArray[np.float32],
    max_bins: int = MAX_BINS,
    *,
    sample_size: int = 200_000,
    seed: int = 0,
) -> FeatureBins:
    """Choose at most ``max_bins`` bins per feature from (a row sample of) ``X`` (n, d)."""
    if isinstance(max_bins, bool) or not isinstance(max_bins, int | np.integer):
        raise TypeError(f"n_bins must be an integer, got {type(max_bins).__name__}")
    if not 2 <= int(max_bins) <= MAX_BINS:
        raise ValueError(f"n_bins must be between 2 and {MAX_BINS}, got {max_bins}")
    X = np.asarray(X, dtype=np.float32)
    if X.ndim != 2:
        raise ValueError(f"X must be 2-D (n, d), got shape {X.shape}")
    n, d = X.shape
    if n > sample_size:
        rows = np.sort(np.random.default_rng(seed).choice(n, size=sample_size, replace=False))
        sample = X[rows]
    else:
        sample = X
    edges = np.full((d, int(max_bins) - 1), np.inf, dtype=np.float32)
    n_bins = np.ones(d, dtype=np.int32)
    has_missing: npt.NDArray[np.bool_] = np.asarray(np.isnan(X).any(axis=0))
    for j in range(d):
        column = sample[:, j]
        e = _feature_edges(np.ascontiguousarray(column[~np.isnan(column)]),
                           min(int(max_bins), MISSING_CODE) if has_missing[j] else int(max_bins))
        edges[j, : e.shape[0]] = e
        n_bins[j] = e.shape[0] + 1
    return FeatureBins(edges=edges, n_bins=n_bins)
