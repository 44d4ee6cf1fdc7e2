"""Fusion of several systems' result lists that need not hold the same documents (hybrid search).

The mixers in ``rank_fusion`` fuse members that all score every candidate; a search system's
result list holds only what it retrieved. Here ``scores`` is (n, M) with NaN where system m did
not retrieve document d, queries grouped by ``query_offsets`` (docs/architecture.md), and the
same kernels (``fusion_kernels``) do the work, with the rules of the IR book (Büttcher, Clarke,
Cormack 2010, sec. 11.1) for absent documents:

``rrf``       sum over the systems that retrieved d of 1 / (k + r_m(d)); r_m is d's average
              rank among what m retrieved (Cormack et al. 2009).
``combsum``   sum over the systems that have d in their top-k of the min-max normalised score
              (over what m retrieved for the query); absent documents add 0.
``combmnz``   CombSUM times the number of systems having d in their top-k.
``condorcet`` pairwise majority, an absent document ranking below everything m retrieved
              (two absent documents tie: no vote); cycles by Borda count.

A system given as a ranking (ids best first, no scores) scores n_m - position.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from tunemix.core.ensemble import fusion_kernels as fk

FUSION_METHODS = ("rrf", "combsum", "combmnz", "condorcet")


def competition_ranks(col: npt.NDArray[np.float64]) -> npt.NDArray[np.int64]:
    """1 + the number of strictly higher values (ties share the best position)."""
    sorted_desc = np.sort(col)
    return (col.shape[0] - np.searchsorted(sorted_desc, col, side="right") + 1).astype(np.int64)


def fuse_lists(
    scores: npt.ArrayLike,
    query_offsets: npt.ArrayLike,
    method: str = "rrf",
    *,
    k: float = 60.0,
    top_k: int | None = None,
) -> npt.NDArray[np.float64]:
    """The fused score of every document (higher first); see the module docstring.

    >>> import numpy as np
    >>> fuse_lists([[3.0, np.nan], [2.0, 1.0]], [0, 2], "rrf", k=1.0).round(4).tolist()
    [0.5, 0.8333]
    """
    s = np.ascontiguousarray(scores, dtype=np.float64)
    off = np.ascontiguousarray(query_offsets, dtype=np.int64)
    if s.ndim != 2 or s.shape[1] < 1:
        raise ValueError(f"scores must be (n documents, M systems), got shape {s.shape}")
    if np.any(np.isinf(s)):
        raise ValueError("scores must be finite (NaN marks a document a system did not retrieve)")
    if method not in FUSION_METHODS:
        raise ValueError(f"method must be one of {FUSION_METHODS}, got {method!r}")
    if not (np.isfinite(k) and k > 0):
        raise ValueError(f"k must be a positive number, got {k!r}")
    present = ~np.isnan(s)
    if method == "rrf":
        ranks = fk.average_ranks(np.where(present, s, -np.inf), off)
        out = np.zeros(s.shape[0], dtype=np.float64)
        for m in range(s.shape[1]):
            out += np.where(present[:, m], 1.0 / (k + ranks[:, m]), 0.0)
        return out
    if method == "condorcet":
        return fk.condorcet_scores(np.where(present, s, -np.inf), off)
    # CombSUM / CombMNZ: an absent document takes the query's minimum, which normalises to 0
    filled = s.copy()
    in_top = present.copy()
    for q in range(off.shape[0] - 1):
        lo, hi = int(off[q]), int(off[q + 1])
        for m in range(s.shape[1]):
            got = present[lo:hi, m]
            if not got.any():
                filled[lo:hi, m] = 0.0
                continue
            col = s[lo:hi, m]
            filled[lo:hi, m] = np.where(got, col, col[got].min())
            if top_k is not None:
                ranks = np.zeros(hi - lo, dtype=np.int64)
                ranks[got] = competition_ranks(col[got])
                in_top[lo:hi, m] = got & (ranks <= top_k)
    total = fk.comb_scores(filled, off, 0 if top_k is None else int(top_k), False)
    if method == "combsum":
        return total
    return total * in_top.sum(axis=1)
