"""Query-wise splits (method section 2): training data is split 80/20 by query, never by document,
into a fit part (members learn on it) and a calibration part (calibrators learn on it)."""

from __future__ import annotations

import numpy as np

from tunemix.core.data.dataset import RankingData


def split_by_query(data: RankingData, *, fraction: float = 0.8, seed: int = 0) -> tuple[RankingData, RankingData]:
    """Split ``data`` into (first, second) with ``fraction`` of the queries in the first part.

    The queries are shuffled with ``seed``; each part keeps the queries in file order. Both parts
    get at least one query when the data has two or more.
    """
    first, second = query_split(data.n_queries, fraction=fraction, seed=seed)
    return data.subset_queries(first), data.subset_queries(second)


def query_split(nq: int, *, fraction: float = 0.8, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The query indices of ``split_by_query``'s two parts, each in file order."""
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"fraction must be strictly between 0 and 1, got {fraction}")
    if nq < 2:
        raise ValueError(f"cannot split {nq} query into two parts; at least 2 queries are needed")
    perm = np.random.default_rng(seed).permutation(nq)
    n_first = min(max(round(fraction * nq), 1), nq - 1)
    return np.sort(perm[:n_first]), np.sort(perm[n_first:])
