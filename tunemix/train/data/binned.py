"""The binning stage: every feature view of the training set as small integer codes, once.

Training reads the features of each view (``raw``, ``raw+std``, ...) through one
:class:`BinnedView`: the view's bin edges (:class:`~tunemix.train.data.binning.FeatureBins`, at
most ``MAX_SHARED_BINS`` bins per column, chosen on a sample of queries) and the codes of every
document, ``uint8``, feature-major ``(width, n)``. Every tree learner reads these codes instead
of a float matrix of its own: AdaBoost.MH searches its stumps and trees on them, and the LightGBM
members (McRank, LambdaMART) train on them (one LightGBM bin per code,
``tunemix.train.learners.lightgbm_data``), their split thresholds converted back to the edges, so
the served model compares real features exactly as training compared codes
(``x >= edges[j, b - 1]`` iff ``code(x) >= b``, ``tunemix.train.data.binning``).

Memory: a view is computed a chunk of whole queries at a time (the per-query normalisations need
the whole query) and binned at once, so the float matrix of a view (twice the raw features for
``raw+std``, four times in float64 while it is computed) never exists; the codes of ``raw+std``
take half the bytes of the raw float32 features. The codes are shared (the same array object) by
every run that reads the view: a process or Dask backend sends them to a worker once.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from tunemix.core.data.dataset import offsets_from_sizes, query_rows
from tunemix.core.data.normalization import apply_view, view_width
from tunemix.train.data.binning import FeatureBins, fit_bins

#: bins per column of the shared codes: LightGBM's default ``max_bin`` (one LightGBM bin per code)
MAX_SHARED_BINS = 255
#: documents a chunk of the view computation holds at most (whole queries; one query may exceed it)
CHUNK_DOCUMENTS = 32_768
#: documents of the query sample the edges are chosen on (255 quantile bins: about 400 a bin)
SAMPLE_DOCUMENTS = 100_000


@dataclass(frozen=True, eq=False)
class BinnedView:
    """One feature view of a set of documents as codes: ``codes[j, i]`` is the bin of column j of
    document i under ``bins`` (``uint8``, C-contiguous ``(width, n)`` or a column slice of one)."""

    view: str
    bins: FeatureBins
    codes: npt.NDArray[np.uint8]

    @property
    def n_docs(self) -> int:
        return int(self.codes.shape[1])

    @property
    def width(self) -> int:
        return int(self.codes.shape[0])

    @property
    def nbytes(self) -> int:
        return int(self.codes.nbytes)

    def __sizeof__(self) -> int:
        # what ``sys.getsizeof`` (and so Dask's ``sizeof``) sees: joblib's Dask backend scatters an
        # argument to the workers once, by identity, only when it looks large
        return object.__sizeof__(self) + int(self.codes.nbytes) + int(self.bins.edges.nbytes)

    def rows(self, start: int, stop: int) -> BinnedView:
        """Documents ``start`` to ``stop - 1`` (a view of the same codes, no copy)."""
        if not 0 <= start <= stop <= self.n_docs:
            raise ValueError(f"rows {start}:{stop} out of range 0..{self.n_docs}")
        return BinnedView(view=self.view, bins=self.bins, codes=self.codes[:, start:stop])

    def contiguous_codes(self) -> npt.NDArray[np.uint8]:
        """The codes as a C-contiguous ``(width, n)`` array (a copy only for a row slice)."""
        return np.ascontiguousarray(self.codes)


def _chunks(query_offsets: npt.NDArray[np.int64], limit: int) -> list[tuple[int, int]]:
    """Query ranges [q0, q1) of at most ``limit`` documents each (a bigger query alone)."""
    out: list[tuple[int, int]] = []
    n_q = query_offsets.shape[0] - 1
    q0 = 0
    while q0 < n_q:
        q1 = q0 + 1
        while q1 < n_q and query_offsets[q1 + 1] - query_offsets[q0] <= limit:
            q1 += 1
        out.append((q0, q1))
        q0 = q1
    return out


def _view_of(features: npt.NDArray[np.float32], query_offsets: npt.NDArray[np.int64], q0: int, q1: int,
             view: str) -> npt.NDArray[np.float32]:
    lo, hi = int(query_offsets[q0]), int(query_offsets[q1])
    return apply_view(features[lo:hi], query_offsets[q0:q1 + 1] - lo, view)


def view_in_chunks(features: npt.ArrayLike, query_offsets: npt.ArrayLike, view: str, *,
                   chunk_documents: int = CHUNK_DOCUMENTS) -> npt.NDArray[np.float32]:
    """``apply_view`` (the same numbers: every normalisation is per query) computed a chunk of
    whole queries at a time into one float32 array: no float64 copy of the whole matrix."""
    x = np.asarray(features, dtype=np.float32)
    off = np.asarray(query_offsets, dtype=np.int64)
    if view == "raw":
        return np.ascontiguousarray(x)
    out = np.empty((x.shape[0], view_width(x.shape[1], view)), dtype=np.float32)
    for q0, q1 in _chunks(off, chunk_documents):
        lo, hi = int(off[q0]), int(off[q1])
        if hi > lo:
            out[lo:hi] = _view_of(x, off, q0, q1, view)
    return out


def fit_view_bins(features: npt.ArrayLike, query_offsets: npt.ArrayLike, view: str, *,
                  max_bins: int = MAX_SHARED_BINS, sample_documents: int = SAMPLE_DOCUMENTS,
                  seed: int = 0) -> FeatureBins:
    """The edges of ``view``'s columns, chosen on the view of a random sample of whole queries
    (about ``sample_documents`` documents; all of them when there are fewer)."""
    x = np.asarray(features, dtype=np.float32)
    off = np.asarray(query_offsets, dtype=np.int64)
    n_q = off.shape[0] - 1
    if n_q < 1 or x.shape[0] == 0:
        raise ValueError("cannot bin an empty set of documents")
    if x.shape[0] <= sample_documents:
        return fit_bins(apply_view(x, off, view), max_bins, sample_size=max(x.shape[0], 1), seed=seed)
    order = np.random.default_rng(seed).permutation(n_q)
    sizes = np.diff(off)
    take = np.sort(order[: int(np.searchsorted(np.cumsum(sizes[order]), sample_documents)) + 1])
    sample = np.empty((int(sizes[take].sum()), view_width(x.shape[1], view)), dtype=np.float32)
    row = 0
    for q in take:
        sample[row:row + sizes[q]] = _view_of(x, off, int(q), int(q) + 1, view)
        row += int(sizes[q])
    return fit_bins(sample, max_bins, sample_size=sample.shape[0], seed=seed)


def bin_view(features: npt.ArrayLike, query_offsets: npt.ArrayLike, view: str, *,
             bins: FeatureBins | None = None, queries: npt.ArrayLike | None = None,
             max_bins: int = MAX_SHARED_BINS, chunk_documents: int = CHUNK_DOCUMENTS, seed: int = 0) -> BinnedView:
    """``view`` of the documents (``features`` (n, d) raw, grouped by ``query_offsets``) as codes,
    under ``bins`` (e.g. the training set's, for the validation queries) or edges chosen here
    (:func:`fit_view_bins`). The view is computed a chunk of whole queries at a time.
    ``queries``: the codes of these queries only, in this order (a chunk gathers its rows): a
    reordered training set as codes without a reordered float copy of it."""
    x = np.asarray(features, dtype=np.float32)
    off = np.asarray(query_offsets, dtype=np.int64)
    if x.ndim != 2:
        raise ValueError(f"features must be 2-D (n, d), got shape {x.shape}")
    if off.ndim != 1 or off.shape[0] < 1 or off[0] != 0 or off[-1] != x.shape[0] or np.any(np.diff(off) < 0):
        raise ValueError(f"query_offsets must rise from 0 to {x.shape[0]}")
    width = view_width(x.shape[1], view)
    if bins is None:
        bins = fit_view_bins(x, off, view, max_bins=max_bins, seed=seed)
    elif bins.n_features != width:
        raise ValueError(f"bins are for {bins.n_features} columns; view {view!r} of {x.shape[1]} features "
                         f"has {width}")
    if queries is None:
        codes = np.empty((width, x.shape[0]), dtype=np.uint8)
        for q0, q1 in _chunks(off, chunk_documents):
            lo, hi = int(off[q0]), int(off[q1])
            if hi > lo:
                codes[:, lo:hi] = bins.transform_columns(_view_of(x, off, q0, q1, view))
        return BinnedView(view=view, bins=bins, codes=codes)
    order = np.asarray(queries, dtype=np.int64)
    new_off = offsets_from_sizes(np.diff(off)[order])
    codes = np.empty((width, int(new_off[-1])), dtype=np.uint8)
    for q0, q1 in _chunks(new_off, chunk_documents):
        lo, hi = int(new_off[q0]), int(new_off[q1])
        if hi > lo:
            chunk = x[query_rows(off, order[q0:q1])[0]]
            codes[:, lo:hi] = bins.transform_columns(apply_view(chunk, new_off[q0:q1 + 1] - lo, view))
    return BinnedView(view=view, bins=bins, codes=codes)
