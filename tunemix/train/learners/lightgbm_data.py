"""LightGBM datasets read from the shared codes (``tunemix.train.data.binned``), and the conversion of
their trees' thresholds back to real features.

LightGBM is given each document's codes as float64 rows (a batch of rows at a time, never the
whole float matrix: ``tunemix.train.learners.lightgbm_capi.code_dataset``) with
``max_bin = 255`` and ``min_data_in_bin = 1``, so every code value it samples gets a bin of its
own and it splits between codes. A split ``code <= t`` (any real t) is ``code <= floor(t)``,
i.e. ``code < b`` with ``b = floor(t) + 1``, i.e. ``x < edges[j, b - 1]`` on the real feature
(``tunemix.train.data.binning``): :func:`code_threshold` gives the float32 threshold the served
forest compares with ``x >= threshold`` (``+inf`` when every code goes left, ``-inf`` when none
does). The served model therefore ranks real features exactly as LightGBM ranked their codes.
A missing value's code (``MISSING_CODE``) reaches LightGBM as NaN (``lightgbm_capi.codes_as_float``),
so LightGBM learns where each split sends it, and the served forest sends NaN the same way
(``tunemix.train.learners.lightgbm_forest``).
"""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from tunemix.train.data.binned import MAX_SHARED_BINS, BinnedView
from tunemix.train.data.binning import FeatureBins
from tunemix.train.learners import lightgbm_capi as capi

#: held while a dataset is built: runs on threads build theirs one after the other (the row
#: sample is held twice as float64 while it builds: ``lightgbm_capi.code_dataset``; two at once
#: double the peak)
_CONSTRUCTING = threading.Lock()


#: rows LightGBM samples to find the code values of each column (its bins) at least, and at most:
#: the codes are already quantile bins (about n / 255 documents each), so a smaller sample than
#: LightGBM's 200,000 finds them, and LightGBM's Python side holds the sample twice as float64 rows
#: (100,000 x 272 columns: 2 x 217 MB while a dataset is built). LightGBM warns below 100,000 rows
#: and a fifth of the data.
CODE_SAMPLE_ROWS = (50_000, 100_000)


def code_sample_rows(n_docs: int) -> int:
    """Rows LightGBM samples from ``n_docs`` codes (``CODE_SAMPLE_ROWS``)."""
    low, high = CODE_SAMPLE_ROWS
    return int(min(max(n_docs, 1), max(low, min(high, math.ceil(0.2 * n_docs)))))


def code_dataset_params(params: dict[str, Any], n_docs: int) -> dict[str, Any]:
    """Dataset parameters for code input: one bin per code, nothing pre-filtered (the same
    codes serve runs with different ``min_data_in_leaf``)."""
    return {"max_bin": MAX_SHARED_BINS, "min_data_in_bin": 1, "feature_pre_filter": False, "verbose": -1,
            "bin_construct_sample_cnt": code_sample_rows(n_docs), "data_random_seed": int(params.get("seed", 0))}


def code_threshold(bins: FeatureBins, feature: int, t: float) -> np.float32:
    """The real threshold of LightGBM's split ``code <= t`` on ``feature`` (module docstring)."""
    b = math.floor(t) + 1  # code <= t  iff  code < b
    if b <= 0:
        return np.float32(-np.inf)  # no code goes left: every x >= -inf goes right
    if b >= int(bins.n_bins[feature]):
        return np.float32(np.inf)  # every code goes left
    return np.float32(bins.edges[feature, b - 1])


def model_input(features: npt.ArrayLike, bins: FeatureBins | None) -> np.ndarray:
    """What a booster predicts on: the float32 features, or their codes (as float32) when it was
    trained on codes (``bins``)."""
    x = np.ascontiguousarray(features, dtype=np.float32)
    return x if bins is None else capi.codes_as_float(bins.transform(x)).astype(np.float32)


def same_bins(evaluation: Any, binned: BinnedView) -> BinnedView:
    """The evaluation set's codes, which must be under the training codes' bins."""
    same = isinstance(evaluation, BinnedView) and (
        evaluation.bins is binned.bins  # in one process; a copy (another process) has equal edges
        or (np.array_equal(evaluation.bins.edges, binned.bins.edges)
            and np.array_equal(evaluation.bins.n_bins, binned.bins.n_bins)))
    if not same:
        raise ValueError("a model trained on codes stops early on codes of the same bins (tunemix.train.data.binned)")
    return evaluation


@dataclass
class _Shared:
    """One constructed Dataset of ``codes`` (the very array: identity, not equality), with the
    labels, query sizes and reference it was built with."""

    codes: npt.NDArray[np.uint8]
    label: np.ndarray
    group: np.ndarray | None
    reference: Any
    dataset: Any


class _SharedDatasets:
    """The Datasets of the shared codes built while ``sharing_datasets`` is open in this process."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.lock = threading.Lock()
        self.entries: list[_Shared] = []
        self.opened = 0

    def find(self, codes: np.ndarray, label: np.ndarray, group: np.ndarray | None, reference: Any) -> Any:
        """A Dataset built from the same codes array and reference with equal labels, and with
        equal query sizes (any, when ``group`` is None: a run that needs none ignores them)."""
        for e in self.entries:
            if (e.codes is codes and e.reference is reference and np.array_equal(e.label, label)
                    and (group is None or (e.group is not None and np.array_equal(e.group, group)))):
                return e.dataset
        return None


_shared: _SharedDatasets | None = None
_shared_lock = threading.Lock()


@contextlib.contextmanager
def sharing_datasets(seed: int = 0) -> Iterator[None]:
    """While open, every LightGBM Dataset of the shared codes (:func:`make_code_dataset`) is built
    once per codes array, labels, query sizes and reference, and handed to every booster of this
    process that asks for the same: the runs of one view (McRank and the LambdaMART runs: their
    Dataset parameters are the same, ``code_dataset_params``; booster parameters such as the
    objective, leaves and sampling are not the Dataset's) train on one Dataset, and stop early on
    one validation Dataset. LightGBM reads a constructed Dataset and does not change it while a
    booster trains (the bags, histograms and scores are the booster's own), so boosters on
    threads share it. Its rows are sampled with ``seed`` (the same for every run: which run builds
    it first does not change the bins). Building a Dataset of codes is LightGBM pushing every row
    through its bin search: 2.1 of 2.7 CPU-s for 120k documents of 136 columns (cProfile,
    ``_push_rows``), paid once per view here instead of once per run. Closed (the last opener),
    the Datasets are dropped; the boosters keep their trees. Worker processes (backend loky)
    build their own."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = _SharedDatasets(seed)
        _shared.opened += 1
        mine = _shared
    try:
        yield
    finally:
        with _shared_lock:
            mine.opened -= 1
            if mine.opened == 0 and _shared is mine:
                _shared = None


def make_code_dataset(binned: BinnedView, label: npt.ArrayLike, params: dict[str, Any], *,
                      group: npt.ArrayLike | None = None, reference: capi.Dataset | None = None) -> capi.Dataset:
    """A LightGBM Dataset of ``binned``'s codes (``reference``: the training set's, for an
    evaluation set); inside :func:`sharing_datasets`, the one already built for the same codes,
    labels, query sizes and reference."""
    shared = _shared
    if shared is None:
        return _build_code_dataset(binned, label, params, group=group, reference=reference)
    lab = np.asarray(label)
    sizes = None if group is None else np.asarray(group)
    with shared.lock:  # one build per key: a second run of the view waits for the first's Dataset
        found = shared.find(binned.codes, lab, sizes, reference)
        if found is None:
            found = _build_code_dataset(binned, lab, {**params, "seed": shared.seed}, group=sizes, reference=reference)
            shared.entries.append(_Shared(binned.codes, lab, sizes, reference, found))
        return found


def _build_code_dataset(binned: BinnedView, label: npt.ArrayLike, params: dict[str, Any], *,
                        group: npt.ArrayLike | None = None, reference: capi.Dataset | None = None) -> capi.Dataset:
    with _CONSTRUCTING:  # one construction at a time: its float64 row sample is the transient peak
        if reference is None:
            ds = capi.code_dataset(binned.codes, code_dataset_params(params, binned.n_docs))
        else:
            ds = capi.code_dataset_like(binned.codes, reference)
    return ds.set_fields(label, group)


def training_dataset(features: np.ndarray | BinnedView, label: npt.ArrayLike, params: dict[str, Any], *,
                     group: npt.ArrayLike | None = None) -> capi.Dataset:
    """A LightGBM training Dataset of float features (binned by LightGBM with the training
    parameters ``params``, as the package bins a Dataset inside ``train``) or of the shared codes
    (:func:`make_code_dataset`)."""
    if isinstance(features, BinnedView):
        return make_code_dataset(features, label, params, group=group)
    return capi.matrix_dataset(np.ascontiguousarray(features, dtype=np.float32), params).set_fields(label, group)


def evaluation_dataset(features: Any, label: npt.ArrayLike, trained_on: np.ndarray | BinnedView,
                       reference: capi.Dataset, *, group: npt.ArrayLike | None = None) -> capi.Dataset:
    """The evaluation Dataset of early stopping, in the kind of input the training set was
    (``trained_on``: its features; codes must be under the same bins), binned as ``reference``."""
    if isinstance(trained_on, BinnedView):
        return make_code_dataset(same_bins(features, trained_on), label, {}, group=group, reference=reference)
    x = np.ascontiguousarray(features, dtype=np.float32)
    return capi.matrix_dataset(x, reference.params, reference=reference).set_fields(label, group)


def train_booster(features: np.ndarray | BinnedView, label: npt.ArrayLike, params: dict[str, Any], n_iterations: int,
                  *, group: npt.ArrayLike | None = None,
                  eval_set: tuple[Any, npt.ArrayLike, npt.ArrayLike | None] | None = None, patience: int = 0,
                  after_iteration: Callable[[int], bool] | None = None) -> capi.Trained:
    """One LightGBM run of McRank or LambdaMART: its training Dataset (:func:`training_dataset`,
    with ``n_iterations`` among the parameters, as the package builds it inside ``train``), with
    ``eval_set`` (features, labels, query sizes or None) the evaluation Dataset under its bins,
    stopped early on ``params``' metric after ``patience`` iterations without a better value
    (at least 1 with an eval set), ``after_iteration`` as ``lightgbm_capi.train``'s."""
    if eval_set is not None and int(patience) < 1:
        raise ValueError(f"early_stopping_rounds must be at least 1 with an eval set, got {patience}")
    ds = training_dataset(features, label, {**params, "num_iterations": int(n_iterations)}, group=group)
    valid = None
    if eval_set is not None:
        valid = evaluation_dataset(eval_set[0], eval_set[1], features, ds, group=eval_set[2])
    return capi.train(params, ds, int(n_iterations), valid=valid, patience=int(patience) if valid else 0,
                      after_iteration=after_iteration)
