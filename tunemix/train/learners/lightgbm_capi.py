"""LightGBM's C API (``c_api.h``) called directly: Datasets, boosters, and a training loop with
early stopping, without importing the ``lightgbm`` Python package.

Why: importing the package costs about 1.4 CPU-s of Python holding the GIL (it loads pandas,
scikit-learn and SciPy's statistics: ``lightgbm.compat``), which on small data is a quarter of a
whole default fit (MQ2008: 5.6 s a fold), and no LightGBM run can start before it ends. Loading
``lib_lightgbm`` itself takes a millisecond. The members use only a small part of the package (a
Dataset of codes or floats, ``train`` with early stopping on one validation metric, the model as
text and as its JSON dump), and this module makes the same C calls, in the same order and with the
same parameters, as the package does for it (lightgbm 4.x ``basic.Dataset.__init_from_seqs`` /
``__init_from_np2d`` / ``_init_from_ref_dataset``, ``engine.train``, ``callback.early_stopping``):
the trees are the same to the last bit (``tests/learners/test_lightgbm_capi.py`` trains both ways
and compares the dumps).

The calls release the GIL (ctypes), so runs on threads train side by side. Every call that
takes parameters is given ``num_threads`` (``THREADS`` unless the caller set it): LightGBM keeps
the thread count in one process-wide variable that each such call sets (``OMP_SET_NUM_THREADS``
sets ``LGBM_DEFAULT_NUM_THREADS``), and a call without it resets the count to all cores. A
booster sizes its NDCG evaluation's per-thread buffers at one thread; a Dataset built on another
thread without ``num_threads`` makes its next evaluation run on two threads, past those buffers:
a segfault (an OpenMP worker of ``NDCGMetric::Eval`` runs while another thread is in
``DatasetLoader::ConstructFromSampleData``). The package's Datasets of a ``Sequence`` pass no
``num_threads`` and so have the same race. The library is the one the installed package ships
(found with ``importlib.util.find_spec``, which does not run the package), loaded once per
process; where that layout is not found, the package's own loader.
"""

from __future__ import annotations

import ctypes
import importlib.util
import json
import platform
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from tunemix.train.data.binning import MISSING_CODE

#: c_api.h's constants
DTYPE_FLOAT32, DTYPE_FLOAT64, DTYPE_INT32 = 0, 1, 2
ROW_MAJOR = 1
PREDICT_RAW_SCORE = 1
#: the package's threshold for "zero" in a sampled column (``basic.ZERO_THRESHOLD``)
ZERO_THRESHOLD = 1e-35
#: rows pushed to a Dataset per call (the package's ``Sequence.batch_size`` that ``CodeRows`` set)
BATCH_ROWS = 8192
#: LightGBM threads of every call that takes parameters, unless the caller gives ``num_threads``
#: (the module docstring: one value for the whole process); the members train on one thread each
THREADS = 1
#: the Dataset parameters the package passes on to a booster (``Dataset.get_params``' list, the
#: ones our members set)
DATASET_KEYS = ("bin_construct_sample_cnt", "data_random_seed", "feature_pre_filter", "max_bin", "min_data_in_bin",
                "zero_as_missing")

_lib: ctypes.CDLL | None = None
_lib_lock = threading.Lock()


class LightGBMError(RuntimeError):
    """An error LightGBM's library reported (its ``LGBM_GetLastError``)."""


def library_path() -> Path | None:
    """Where the installed ``lightgbm`` package keeps ``lib_lightgbm`` (the places its
    ``libpath._find_lib_path`` looks), or None when the package is not installed or the file is
    not in one of them."""
    try:
        spec = importlib.util.find_spec("lightgbm")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin:
        return None
    package = Path(spec.origin).resolve().parent
    name = {"Windows": "lib_lightgbm.dll", "Darwin": "lib_lightgbm.dylib"}.get(platform.system(), "lib_lightgbm.so")
    for folder in (package.parent, package / "bin", package / "lib"):
        if (folder / name).is_file():
            return folder / name
    return None


def library() -> ctypes.CDLL:
    """``lib_lightgbm``, loaded once per process. Raises ImportError when LightGBM is not
    installed, OSError when the library cannot be loaded (e.g. no OpenMP runtime: libgomp1)."""
    global _lib
    if _lib is None:
        with _lib_lock:
            if _lib is None:
                path = library_path()
                if path is not None:
                    lib = ctypes.cdll.LoadLibrary(str(path))
                else:
                    if importlib.util.find_spec("lightgbm") is None:
                        raise ImportError("LightGBM is not installed (pip install lightgbm)")
                    import lightgbm.basic  # a layout this module does not know: the package's own loader

                    lib = lightgbm.basic._LIB
                lib.LGBM_GetLastError.restype = ctypes.c_char_p
                _lib = lib
    return _lib


def loaded() -> bool:
    """Whether this process has loaded the library already."""
    return _lib is not None


def _call(name: str, *args: Any) -> None:
    lib = library()
    if getattr(lib, name)(*args) != 0:
        raise LightGBMError(lib.LGBM_GetLastError().decode("utf-8", "replace"))


def param_string(params: dict[str, Any]) -> str:
    """``params`` as LightGBM reads them, written as the package writes them
    (``basic._param_dict_to_str``: ``key=value`` pairs, lists joined by commas, None left out),
    with ``num_threads`` (``THREADS``) when they do not set it."""
    pairs = []
    for key, value in {**params, "num_threads": params.get("num_threads", THREADS)}.items():
        if isinstance(value, list | tuple):
            pairs.append(f"{key}={','.join(str(v) for v in value)}")
        elif value is not None:
            pairs.append(f"{key}={value}")
    return " ".join(pairs)


def _double_ptr(a: np.ndarray) -> Any:
    return a.ctypes.data_as(ctypes.POINTER(ctypes.c_double))


def _int_ptr(a: np.ndarray) -> Any:
    return a.ctypes.data_as(ctypes.POINTER(ctypes.c_int32))


class Dataset:
    """A constructed LightGBM Dataset (its handle, freed with the object) and the parameters it
    was built with (``params``: what a booster on it is given besides its own)."""

    def __init__(self, handle: ctypes.c_void_p, params: dict[str, Any], n_rows: int) -> None:
        self.handle: ctypes.c_void_p | None = handle
        self.params = params
        self.n_rows = n_rows

    def __del__(self) -> None:
        if getattr(self, "handle", None) is not None and _lib is not None:
            _lib.LGBM_DatasetFree(self.handle)
            self.handle = None

    def set_fields(self, label: npt.ArrayLike, group: npt.ArrayLike | None) -> Dataset:
        """Labels (as float32, the package's field type) and query sizes (int32)."""
        lab = np.ascontiguousarray(label, dtype=np.float32).reshape(-1)
        if lab.shape[0] != self.n_rows:
            raise ValueError(f"{lab.shape[0]} labels for a dataset of {self.n_rows} rows")
        _call("LGBM_DatasetSetField", self.handle, b"label", lab.ctypes.data_as(ctypes.c_void_p),
              ctypes.c_int(lab.shape[0]), ctypes.c_int(DTYPE_FLOAT32))
        if group is not None:
            sizes = np.ascontiguousarray(group, dtype=np.int32).reshape(-1)
            _call("LGBM_DatasetSetField", self.handle, b"group", sizes.ctypes.data_as(ctypes.c_void_p),
                  ctypes.c_int(sizes.shape[0]), ctypes.c_int(DTYPE_INT32))
        return self


def codes_as_float(codes: npt.NDArray[np.uint8]) -> npt.NDArray[np.float64]:
    """Codes as LightGBM reads them: float64, the missing bin (``MISSING_CODE``) as NaN, so that
    LightGBM learns each split's direction for missing values (its ``missing_type`` NaN)."""
    out = codes.astype(np.float64)
    out[codes == MISSING_CODE] = np.nan
    return out


def _push_code_rows(handle: ctypes.c_void_p, codes: npt.NDArray[np.uint8]) -> None:
    """Every document's codes (``codes``: feature-major (width, n)) pushed as float64 rows, a
    batch of ``BATCH_ROWS`` at a time (LightGBM finishes the Dataset with the last row)."""
    width, n = codes.shape
    for start in range(0, n, BATCH_ROWS):
        stop = min(start + BATCH_ROWS, n)
        rows = codes_as_float(np.ascontiguousarray(codes[:, start:stop].T))
        _call("LGBM_DatasetPushRows", handle, rows.ctypes.data_as(ctypes.c_void_p), ctypes.c_int(DTYPE_FLOAT64),
              ctypes.c_int32(stop - start), ctypes.c_int32(width), ctypes.c_int32(start))


def code_dataset(codes: npt.NDArray[np.uint8], params: dict[str, Any]) -> Dataset:
    """A training Dataset of ``codes`` (feature-major (width, n)) binned with ``params``: the
    package's Dataset of a ``Sequence`` of rows. LightGBM draws the rows it bins from
    (``LGBM_SampleIndices``), each column's non-zero sampled values go to
    ``LGBM_DatasetCreateFromSampledColumn``, then every row is pushed."""
    width, n = codes.shape
    text = param_string(params).encode()
    count = ctypes.c_int(0)
    _call("LGBM_GetSampleCount", ctypes.c_int32(n), text, ctypes.byref(count))
    indices = np.empty(count.value, dtype=np.int32)
    got = ctypes.c_int32(0)
    _call("LGBM_SampleIndices", ctypes.c_int32(n), text, _int_ptr(indices), ctypes.byref(got))
    if got.value != count.value:
        raise LightGBMError(f"LightGBM sampled {got.value} rows, {count.value} expected")
    sampled = codes_as_float(codes[:, indices])  # (width, sample): the sampled rows' columns
    rows = np.arange(indices.shape[0], dtype=np.int32)
    values, where = [], []
    for col in sampled:
        keep = (np.abs(col) > ZERO_THRESHOLD) | np.isnan(col)
        values.append(np.ascontiguousarray(col[keep]))
        where.append(np.ascontiguousarray(rows[keep]))
    value_ptrs = (ctypes.POINTER(ctypes.c_double) * width)(*[_double_ptr(v) for v in values])
    where_ptrs = (ctypes.POINTER(ctypes.c_int32) * width)(*[_int_ptr(w) for w in where])
    per_col = np.array([w.shape[0] for w in where], dtype=np.int32)
    handle = ctypes.c_void_p()
    _call("LGBM_DatasetCreateFromSampledColumn",
          ctypes.cast(value_ptrs, ctypes.POINTER(ctypes.POINTER(ctypes.c_double))),
          ctypes.cast(where_ptrs, ctypes.POINTER(ctypes.POINTER(ctypes.c_int32))),
          ctypes.c_int32(width), _int_ptr(per_col), ctypes.c_int32(indices.shape[0]), ctypes.c_int32(n),
          ctypes.c_int64(n), text, ctypes.byref(handle))
    out = Dataset(handle, dict(params), n)  # freed with the object, if a push fails too
    _push_code_rows(handle, codes)
    return out


def code_dataset_like(codes: npt.NDArray[np.uint8], reference: Dataset) -> Dataset:
    """A Dataset of ``codes`` under ``reference``'s bins (an evaluation set)."""
    n = codes.shape[1]
    handle = ctypes.c_void_p()
    _call("LGBM_DatasetCreateByReference", reference.handle, ctypes.c_int64(n), ctypes.byref(handle))
    out = Dataset(handle, dict(reference.params), n)
    _push_code_rows(handle, codes)
    return out


def matrix_dataset(features: npt.NDArray[np.float32], params: dict[str, Any],
                   reference: Dataset | None = None) -> Dataset:
    """A Dataset of a float32 (n, d) matrix, binned with ``params`` (or as ``reference``)."""
    x = np.ascontiguousarray(features, dtype=np.float32)
    if x.ndim != 2:
        raise ValueError(f"features must be 2-D (n, d), got shape {x.shape}")
    handle = ctypes.c_void_p()
    _call("LGBM_DatasetCreateFromMat", x.ctypes.data_as(ctypes.c_void_p), ctypes.c_int(DTYPE_FLOAT32),
          ctypes.c_int32(x.shape[0]), ctypes.c_int32(x.shape[1]), ctypes.c_int(ROW_MAJOR),
          param_string(params).encode(), None if reference is None else reference.handle, ctypes.byref(handle))
    return Dataset(handle, dict(params), int(x.shape[0]))


class Booster:
    """A LightGBM booster handle (freed with the object)."""

    def __init__(self, handle: ctypes.c_void_p) -> None:
        self.handle: ctypes.c_void_p | None = handle

    def __del__(self) -> None:
        if getattr(self, "handle", None) is not None and _lib is not None:
            _lib.LGBM_BoosterFree(self.handle)
            self.handle = None

    @classmethod
    def from_string(cls, model: str) -> Booster:
        iterations = ctypes.c_int(0)
        handle = ctypes.c_void_p()
        _call("LGBM_BoosterLoadModelFromString", model.encode(), ctypes.byref(iterations), ctypes.byref(handle))
        return cls(handle)

    def _text(self, name: str, num_iteration: int) -> str:
        """``LGBM_BoosterSaveModelToString`` or ``LGBM_BoosterDumpModel`` (iterations from 0, split
        importance), with the package's buffer retry."""
        size = 1 << 20
        for _ in range(2):
            length = ctypes.c_int64(0)
            buffer = ctypes.create_string_buffer(size)
            _call(name, self.handle, ctypes.c_int(0), ctypes.c_int(num_iteration), ctypes.c_int(0),
                  ctypes.c_int64(size), ctypes.byref(length), ctypes.c_char_p(ctypes.addressof(buffer)))
            if length.value <= size:
                return buffer.value.decode("utf-8")
            size = int(length.value)
        raise LightGBMError(f"{name}: the text did not fit its buffer")

    def model_string(self, num_iteration: int = 0) -> str:
        """The model as LightGBM's text, its first ``num_iteration`` iterations (0: all)."""
        return self._text("LGBM_BoosterSaveModelToString", num_iteration)

    def dump(self, num_iteration: int = 0) -> dict[str, Any]:
        """The model's JSON dump (``Booster.dump_model``'s dict without ``pandas_categorical``)."""
        return json.loads(self._text("LGBM_BoosterDumpModel", num_iteration))

    def current_iteration(self) -> int:
        out = ctypes.c_int(0)
        _call("LGBM_BoosterGetCurrentIteration", self.handle, ctypes.byref(out))
        return int(out.value)

    def n_classes(self) -> int:
        out = ctypes.c_int(0)
        _call("LGBM_BoosterGetNumClasses", self.handle, ctypes.byref(out))
        return int(out.value)

    def predict_raw(self, features: npt.NDArray[np.float32], num_iteration: int = 0) -> np.ndarray:
        """Raw scores (n, n_classes) of float32 rows, the first ``num_iteration`` iterations (0: all)."""
        x = np.ascontiguousarray(features, dtype=np.float32)
        k = self.n_classes()
        out = np.empty(x.shape[0] * k, dtype=np.float64)
        length = ctypes.c_int64(0)
        _call("LGBM_BoosterPredictForMat", self.handle, x.ctypes.data_as(ctypes.c_void_p), ctypes.c_int(DTYPE_FLOAT32),
              ctypes.c_int32(x.shape[0]), ctypes.c_int32(x.shape[1]), ctypes.c_int(ROW_MAJOR),
              ctypes.c_int(PREDICT_RAW_SCORE), ctypes.c_int(0), ctypes.c_int(num_iteration),
              param_string({}).encode(),
              ctypes.byref(length), _double_ptr(out))
        if length.value != out.shape[0]:
            raise LightGBMError(f"LightGBM predicted {length.value} values, {out.shape[0]} expected")
        return out.reshape(x.shape[0], k)


@dataclass
class Trained:
    """What :func:`train` returns: the model as text (its iterations up to ``best_iteration``, all
    of them when that is 0), the iterations trained, the validation metric of each
    (``history``), the best iteration (1-based, 0 without a validation set) and its value, and
    whether ``after_iteration`` stopped the run."""

    model: str
    trained: int
    best_iteration: int
    best_score: float | None
    history: list[float] = field(default_factory=list)
    stopped: bool = False

    @property
    def kept(self) -> int:
        """Iterations in ``model``."""
        return self.best_iteration or self.trained

    def stop_reason(self, n_iterations: int) -> str:
        """Why the run ended: ``time_budget`` (``after_iteration`` stopped it), ``early_stopping``
        (before ``n_iterations``), or ``n_iterations``."""
        if self.stopped:
            return "time_budget"
        return "early_stopping" if self.trained < int(n_iterations) else "n_iterations"


#: validation metrics where higher is better, by the start of LightGBM's name for them (the package's
#: ``Booster.__higher_better_inner_eval``)
HIGHER_BETTER = ("auc", "ndcg@", "map@", "average_precision")


def _metric_name(booster: Booster) -> str:
    """The name LightGBM gives the booster's one validation metric (``ndcg@10``, ``multi_logloss``)."""
    count = ctypes.c_int(0)
    _call("LGBM_BoosterGetEvalCounts", booster.handle, ctypes.byref(count))
    if count.value != 1:
        raise ValueError(f"one validation metric expected, LightGBM has {count.value}")
    size = 255
    buffer = ctypes.create_string_buffer(size)
    names = (ctypes.c_char_p * 1)(ctypes.cast(buffer, ctypes.c_char_p))
    length, needed = ctypes.c_int(0), ctypes.c_size_t(0)
    _call("LGBM_BoosterGetEvalNames", booster.handle, ctypes.c_int(1), ctypes.byref(length), ctypes.c_size_t(size),
          ctypes.byref(needed), names)
    return buffer.value.decode()


def train(params: dict[str, Any], train_set: Dataset, n_iterations: int, *, valid: Dataset | None = None,
          patience: int = 0, after_iteration: Callable[[int], bool] | None = None) -> Trained:
    """``lightgbm.train(params, train_set, n_iterations, valid_sets=[valid], callbacks=[record_evaluation,
    early_stopping(patience, first_metric_only=True), <after_iteration>])``, the booster then kept
    up to its best iteration (``keep_training_booster=False``), by the C calls the package makes.

    ``params`` carry one validation metric (``metric``, and ``eval_at`` for NDCG); the booster
    gets them, ``num_iterations`` and the training set's Dataset parameters (``DATASET_KEYS``).
    With ``valid`` and ``patience`` > 0 the run stops once the metric has not improved (strictly:
    above the best where higher is better, ``HIGHER_BETTER``, else below) for ``patience`` iterations, and at the end
    the best iteration is kept. ``after_iteration(i)`` (1-based) is called after each iteration's
    evaluation and early-stopping check; True stops the run there, keeping every iteration
    trained (the package's callback raising ``EarlyStopException`` at it)."""
    booster_params = {**params, "num_iterations": int(n_iterations)}
    for key in DATASET_KEYS:
        if key in train_set.params:
            booster_params[key] = train_set.params[key]
    handle = ctypes.c_void_p()
    _call("LGBM_BoosterCreate", train_set.handle, param_string(booster_params).encode(), ctypes.byref(handle))
    booster = Booster(handle)
    higher_better = True
    if valid is not None:
        _call("LGBM_BoosterAddValidData", booster.handle, valid.handle)
        higher_better = _metric_name(booster).startswith(HIGHER_BETTER)
    result = np.zeros(1, dtype=np.float64)
    length = ctypes.c_int(0)
    finished = ctypes.c_int(0)
    history: list[float] = []
    best, best_at = None, 0  # the package's early stopping: the first value is the first best
    out = Trained(model="", trained=0, best_iteration=0, best_score=None, history=history)
    for i in range(int(n_iterations)):
        _call("LGBM_BoosterUpdateOneIter", booster.handle, ctypes.byref(finished))
        out.trained = i + 1
        if valid is not None:
            _call("LGBM_BoosterGetEval", booster.handle, ctypes.c_int(1), ctypes.byref(length), _double_ptr(result))
            score = float(result[0])
            history.append(score)
            if best is None or (score > best if higher_better else score < best):
                best, best_at = score, i
            if patience > 0 and i - best_at >= patience:
                out.best_iteration, out.best_score = best_at + 1, best
                break
        if after_iteration is not None and after_iteration(i + 1):
            out.best_iteration, out.best_score, out.stopped = i + 1, (history[-1] if history else None), True
            break
    else:
        if valid is not None and patience > 0 and out.trained:  # the package's final-iteration check
            out.best_iteration, out.best_score = best_at + 1, best
    out.model = booster.model_string(out.best_iteration)
    return out
