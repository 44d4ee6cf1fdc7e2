"""The one in-memory type for ranking data.

Layout (shared by every kernel in the project)::

    features      float32, shape (n, d), C-contiguous; feature id j (1-based in files) is column j-1
    labels        int32,   shape (n,)
    query_offsets int64,   shape (n_queries + 1,), running totals: query q owns rows
                  query_offsets[q] : query_offsets[q + 1]
    qids          str array, shape (n_queries,), one id per query, in file order
    docids        str array, shape (n,), or None when the source carries none

Example: three queries with 2, 3 and 1 documents::

    query_offsets = [0, 2, 5, 6]
    labels        = [1, 0,  2, 0, 0,  1]
                     q0     q1         q2
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float32]
IntArray = npt.NDArray[np.int32]
OffsetArray = npt.NDArray[np.int64]
StrArray = npt.NDArray[np.str_]


def query_rows(query_offsets: npt.NDArray[np.int64], queries: npt.ArrayLike
               ) -> tuple[npt.NDArray[np.int64], OffsetArray]:
    """The rows of ``queries`` (indices into ``query_offsets``' queries, in this order) and their
    offsets as a set of their own."""
    q = np.asarray(queries, dtype=np.int64)
    starts, ends = query_offsets[q], query_offsets[q + 1]
    rows = (np.concatenate([np.arange(s, e, dtype=np.int64) for s, e in zip(starts, ends, strict=True)])
            if q.size else np.zeros(0, dtype=np.int64))
    return rows, offsets_from_sizes(ends - starts)


def offsets_from_sizes(sizes: Sequence[int] | npt.NDArray[np.integer]) -> OffsetArray:
    """Turn group sizes ``[2, 3, 1]`` into running totals ``[0, 2, 5, 6]``."""
    sizes_arr = np.asarray(sizes, dtype=np.int64)
    if sizes_arr.ndim != 1:
        raise ValueError("group sizes must be a 1-D sequence")
    if np.any(sizes_arr < 0):
        raise ValueError("group sizes must be non-negative")
    offsets = np.zeros(sizes_arr.shape[0] + 1, dtype=np.int64)
    np.cumsum(sizes_arr, out=offsets[1:])
    return offsets


def validate_offsets(query_offsets: npt.ArrayLike, n: int, *, name: str = "query_offsets") -> OffsetArray:
    """Check and convert query offsets for ``n`` rows; raise ValueError naming ``name``."""
    off = np.ascontiguousarray(query_offsets, dtype=np.int64)
    if off.ndim != 1 or off.shape[0] < 1:
        raise ValueError(f"{name} must be a 1-D array of running totals starting at 0")
    first, last = int(off[0]), int(off[-1])  # Python ints: cheaper to compare than NumPy scalars
    if first != 0:
        raise ValueError(f"{name}[0] must be 0, got {first}")
    if last != n:
        raise ValueError(f"{name}[-1] must equal the number of rows ({n}), got {last}")
    # (the scoring path checks the same offsets a few times a request: methods, not np.diff / np.any)
    if off.shape[0] > 2 and (off[1:] < off[:-1]).any():
        bad = int(np.argmax(off[1:] < off[:-1]))
        raise ValueError(f"{name} must be non-decreasing; query {bad} has a negative size")
    return off


@dataclass(frozen=True, eq=False)
class RankingData:
    """Features, graded labels and query groups of a ranking data set (see module docstring)."""

    features: FloatArray
    labels: IntArray
    query_offsets: OffsetArray
    qids: StrArray
    docids: StrArray | None = None
    source: str = "<memory>"

    def __post_init__(self) -> None:
        feats = np.ascontiguousarray(self.features, dtype=np.float32)
        if feats.ndim != 2:
            raise ValueError(f"features must be 2-D (n, d), got shape {feats.shape}")
        n = feats.shape[0]
        labels = np.asarray(self.labels)
        if labels.ndim != 1 or labels.shape[0] != n:
            raise ValueError(f"labels must have shape ({n},), got {labels.shape}")
        if labels.dtype.kind == "f":
            if not np.all(np.isfinite(labels)) or np.any(labels != np.round(labels)):
                raise ValueError("labels must be integers")
        elif labels.dtype.kind not in "iu":
            raise ValueError(f"labels must be integers, got dtype {labels.dtype}")
        if n and labels.min() < 0:
            raise ValueError(f"labels must be non-negative, found {int(labels.min())}")
        labels = np.ascontiguousarray(labels, dtype=np.int32)
        off = validate_offsets(self.query_offsets, n)
        qids = np.asarray(self.qids).astype(np.str_)
        if qids.shape != (off.shape[0] - 1,):
            raise ValueError(f"qids must have one entry per query ({off.shape[0] - 1}), got {qids.shape}")
        docids = self.docids
        if docids is not None:
            docids = np.asarray(docids).astype(np.str_)
            if docids.shape != (n,):
                raise ValueError(f"docids must have shape ({n},), got {docids.shape}")
        if n and np.isinf(feats).any():  # NaN is a missing value (docs/missing-values.md)
            row = int(np.argmax(np.isinf(feats).any(axis=1)))
            raise ValueError(f"features contain an infinity (row {row})")
        object.__setattr__(self, "features", feats)
        object.__setattr__(self, "labels", labels)
        object.__setattr__(self, "query_offsets", off)
        object.__setattr__(self, "qids", qids)
        object.__setattr__(self, "docids", docids)

    # ------------------------------------------------------------------ shape
    @property
    def n_docs(self) -> int:
        return int(self.features.shape[0])

    @property
    def n_features(self) -> int:
        return int(self.features.shape[1])

    @property
    def n_queries(self) -> int:
        return int(self.query_offsets.shape[0] - 1)

    @property
    def query_sizes(self) -> npt.NDArray[np.int64]:
        return np.diff(self.query_offsets)

    @property
    def query_index(self) -> npt.NDArray[np.int64]:
        """Per row, the index of its query (0..n_queries-1)."""
        return np.repeat(np.arange(self.n_queries, dtype=np.int64), self.query_sizes)

    def __repr__(self) -> str:
        return (
            f"RankingData(n_docs={self.n_docs}, n_features={self.n_features}, "
            f"n_queries={self.n_queries}, source={self.source!r})"
        )

    # ------------------------------------------------------------- selection
    def subset_queries(self, query_indices: npt.ArrayLike, *, features: bool = True) -> RankingData:
        """The data set restricted to the given queries, in the given order (``features=False``:
        without feature columns, for labels, offsets and ids alone)."""
        q = np.asarray(query_indices, dtype=np.int64)
        if q.ndim != 1:
            raise ValueError("query_indices must be 1-D")
        if q.size and (q.min() < 0 or q.max() >= self.n_queries):
            raise ValueError("query index out of range")
        rows, offsets = query_rows(self.query_offsets, q)
        return RankingData(
            features=self.features[rows] if features else np.zeros((rows.size, 0), dtype=np.float32),
            labels=self.labels[rows],
            query_offsets=offsets,
            qids=self.qids[q],
            docids=None if self.docids is None else self.docids[rows],
            source=self.source,
        )

    def query_slice(self, start: int, stop: int) -> RankingData:
        """Queries ``start`` to ``stop - 1`` as a data set that shares this one's arrays (row
        slices, no copy)."""
        if not 0 <= start <= stop <= self.n_queries:
            raise ValueError(f"query slice {start}:{stop} out of range 0..{self.n_queries}")
        lo, hi = int(self.query_offsets[start]), int(self.query_offsets[stop])
        return RankingData(
            features=self.features[lo:hi],
            labels=self.labels[lo:hi],
            query_offsets=self.query_offsets[start:stop + 1] - lo,
            qids=self.qids[start:stop],
            docids=None if self.docids is None else self.docids[lo:hi],
            source=self.source,
        )

    @classmethod
    def from_arrays(
        cls,
        features: npt.ArrayLike,
        labels: npt.ArrayLike,
        query_offsets: npt.ArrayLike | None = None,
        *,
        group_sizes: Sequence[int] | None = None,
        qids: Sequence[str] | npt.ArrayLike | None = None,
        docids: Sequence[str] | npt.ArrayLike | None = None,
    ) -> RankingData:
        """Build from numpy arrays; give either running-total ``query_offsets`` or ``group_sizes``.

        >>> d = RankingData.from_arrays(np.zeros((3, 2)), [1, 0, 2], group_sizes=[2, 1])
        >>> d.query_offsets.tolist()
        [0, 2, 3]
        """
        if (query_offsets is None) == (group_sizes is None):
            raise ValueError("give exactly one of query_offsets and group_sizes")
        off = offsets_from_sizes(group_sizes) if group_sizes is not None else np.asarray(query_offsets)
        nq = int(np.asarray(off).shape[0]) - 1
        qid_arr = np.arange(nq).astype(np.str_) if qids is None else np.asarray(qids).astype(np.str_)
        return cls(
            features=np.asarray(features),
            labels=np.asarray(labels),
            query_offsets=off,
            qids=qid_arr,
            docids=None if docids is None else np.asarray(docids).astype(np.str_),
        )
