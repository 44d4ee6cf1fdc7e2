"""What every calibrator shares: the error type, input validation, the params contract.

A calibrator turns a multi-class member's raw K-vector scores ``raw`` (float64, shape (n, K),
see docs/architecture.md) into one real score per document (Busa-Fekete et al., "Tune and
mix", Machine Learning 2013, Sect. 5). Class labels are the class indices 0..K-1 and ``gains``
is the K-vector z of class gains (z_l = 2^l - 1 for ungrouped labels; the caller passes the
grouped gains otherwise). ``doc_gains`` (optional, one per document) are the documents' own gains
2^l - 1 of their original labels: under a label grouping two labels of one class have one class
gain but different own gains, and the regression targets (eq. 20, 21) and the SNDCG gains are
each document's own gain, as in the paper. Without it, ``gains[labels]`` is used.

Contract (scikit-learn habits):

- constructor parameters are keyword-only and stored unchanged;
- ``fit(raw, labels, query_offsets, gains, *, doc_gains=None) -> self`` sets attributes ending
  in ``_``;
  a fit that cannot produce a usable calibrator raises :class:`CalibrationError`;
- ``transform(raw) -> (n,)`` float64 scores, never NaN;
- ``to_params()`` returns plain values only (numpy arrays, floats, ints, strings) and the
  classmethod ``from_params(d)`` rebuilds a calibrator whose ``transform`` is identical.

This module and every ``transform``/``from_params`` need numpy only; scipy is imported inside
the ``fit`` functions so that the scoring service can load calibrators without it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any, Self

import numpy as np
import numpy.typing as npt

from tunemix.core.data.dataset import validate_offsets

ParamValue = np.ndarray | float | int | str
CalibratorParams = dict[str, ParamValue]
Float64Array = npt.NDArray[np.float64]
Int64Array = npt.NDArray[np.int64]

#: cutoff of the ideal DCG that divides the targets of ``target="ndcg"`` regression calibrators
NDCG_TARGET_CUTOFF = 10


class CalibrationError(RuntimeError):
    """A calibrator could not be fitted (degenerate calibration data, failed optimisation).

    The trainer catches it, reports it and drops the calibrator; it never means bad input
    types or shapes (those are ValueError / TypeError).
    """


# --------------------------------------------------------------------------- validation
def validate_raw(raw: npt.ArrayLike, *, n_classes: int | None = None, name: str = "raw") -> Float64Array:
    """``raw`` as a C-contiguous float64 (n, K) array with finite values; raise naming ``name``."""
    if isinstance(raw, str | bytes):
        raise TypeError(f"{name} must be a numeric (n, K) array, got {type(raw).__name__}")
    try:
        arr = np.ascontiguousarray(raw, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name} must be a numeric (n, K) array: {exc}") from exc
    if arr.ndim != 2:
        raise ValueError(f"{name} must be 2-D (n documents, K classes), got shape {arr.shape}")
    if n_classes is not None and arr.shape[1] != n_classes:
        raise ValueError(
            f"{name} has {arr.shape[1]} columns but the calibrator was fitted on K={n_classes} classes"
        )
    if arr.size and not np.all(np.isfinite(arr)):
        row = int(np.argmax(~np.all(np.isfinite(arr), axis=1)))
        raise ValueError(f"{name} contains NaN or infinity (row {row})")
    return arr


def validate_fit_inputs(
    raw: npt.ArrayLike,
    labels: npt.ArrayLike,
    query_offsets: npt.ArrayLike,
    gains: npt.ArrayLike,
) -> tuple[Float64Array, Int64Array, Int64Array, Float64Array]:
    """Check and convert the four ``fit`` arguments; raise ValueError/TypeError naming one."""
    raw_arr = validate_raw(raw)
    n, k = raw_arr.shape
    if k < 2:
        raise ValueError(f"raw must have at least 2 class columns, got K={k}")
    if n == 0:
        raise ValueError("raw has no rows: the calibration part is empty")
    lab = np.asarray(labels)
    if lab.ndim != 1 or lab.shape[0] != n:
        raise ValueError(f"labels must have shape ({n},) to match raw, got {lab.shape}")
    if lab.dtype.kind == "f":
        if not np.all(np.isfinite(lab)) or np.any(lab != np.round(lab)):
            raise ValueError("labels must be integer class indices 0..K-1")
    elif lab.dtype.kind not in "iu":
        raise TypeError(f"labels must be integer class indices, got dtype {lab.dtype}")
    lab64 = np.ascontiguousarray(lab, dtype=np.int64)
    if lab64.min() < 0 or lab64.max() >= k:
        bad = int(lab64[(lab64 < 0) | (lab64 >= k)][0])
        raise ValueError(f"labels must be class indices 0..{k - 1} (K={k} raw columns), found {bad}")
    off = validate_offsets(query_offsets, n)
    z = np.ascontiguousarray(gains, dtype=np.float64)
    if z.shape != (k,):
        raise ValueError(f"gains must be a K-vector of class gains, shape ({k},), got {z.shape}")
    if not np.all(np.isfinite(z)) or np.any(z < 0):
        raise ValueError(f"gains must be finite and non-negative, got {z.tolist()}")
    return raw_arr, lab64, off, z


def resolve_doc_gains(doc_gains: npt.ArrayLike | None, labels: Int64Array, z: Float64Array) -> Float64Array:
    """The documents' own gains: ``doc_gains`` checked (finite, >= 0, one per document), or
    ``z[labels]`` (the class gains) when None."""
    if doc_gains is None:
        return np.ascontiguousarray(z[labels])
    g = np.ascontiguousarray(doc_gains, dtype=np.float64)
    if g.shape != labels.shape:
        raise ValueError(f"doc_gains must have one gain per document, shape {labels.shape}, got {g.shape}")
    if not np.all(np.isfinite(g)) or np.any(g < 0):
        raise ValueError("doc_gains must be finite and non-negative")
    return g


def require_informative(raw: Float64Array, labels: Int64Array) -> None:
    """Raise CalibrationError when no calibrator that uses labels can learn anything."""
    if np.unique(labels).shape[0] < 2:
        raise CalibrationError(
            f"the calibration part has a single class ({int(labels[0])}): nothing to calibrate"
        )
    if np.all(raw == raw[0]):
        raise CalibrationError(
            "the member gives every calibration document the same raw vector: nothing to calibrate"
        )


# --------------------------------------------------------------------------- gains and DCG
def ideal_dcg(
    doc_gains: Float64Array, query_offsets: Int64Array, cutoff: int | None = NDCG_TARGET_CUTOFF
) -> Float64Array:
    """Per query, the ideal DCG@cutoff: sum_{r<=cutoff} g_(r) / log2(r + 1), g_(r) sorted best first.

    ``cutoff=None`` uses the whole list. Vectorised: one lexsort over (query, -gain).
    Example: gains [3, 0, 1] in one query give 3/log2(2) + 1/log2(3) + 0 = 3.6309...
    """
    n = doc_gains.shape[0]
    nq = query_offsets.shape[0] - 1
    sizes = np.diff(query_offsets)
    qidx = np.repeat(np.arange(nq, dtype=np.int64), sizes)
    order = np.lexsort((-doc_gains, qidx))
    rank = np.arange(n, dtype=np.int64) - np.repeat(query_offsets[:-1], sizes)  # 0-based
    contrib = doc_gains[order] / np.log2(rank + 2.0)
    if cutoff is not None:
        contrib = np.where(rank < cutoff, contrib, 0.0)
    return np.bincount(qidx, weights=contrib, minlength=nq).astype(np.float64)


def ndcg_targets(
    doc_gains: Float64Array, query_offsets: Int64Array, cutoff: int = NDCG_TARGET_CUTOFF
) -> Float64Array:
    """z_i / idealDCG@cutoff(query of i) (Tune and mix eq. 21); a query with ideal DCG 0 gets 0."""
    idcg = ideal_dcg(doc_gains, query_offsets, cutoff)
    per_doc = np.repeat(idcg, np.diff(query_offsets))
    out = np.zeros_like(doc_gains)
    np.divide(doc_gains, per_doc, out=out, where=per_doc > 0)
    return out


# --------------------------------------------------------------------------- params helpers
def format_number(x: float) -> str:
    """Shortest exact text of a float for canonical names: 2.0 -> '2', 0.1 -> '0.1'."""
    text = repr(float(x))
    return text[:-2] if text.endswith(".0") else text


def param_float(d: Mapping[str, Any], key: str) -> float:
    if key not in d:
        raise ValueError(f"calibrator params lack the key {key!r}")
    try:
        return float(np.asarray(d[key]).item())
    except (TypeError, ValueError) as exc:
        raise ValueError(f"calibrator param {key!r} must be a number, got {d[key]!r}") from exc


def param_int(d: Mapping[str, Any], key: str) -> int:
    value = param_float(d, key)
    if value != int(value):
        raise ValueError(f"calibrator param {key!r} must be an integer, got {value}")
    return int(value)


def param_str(d: Mapping[str, Any], key: str) -> str:
    if key not in d:
        raise ValueError(f"calibrator params lack the key {key!r}")
    return str(np.asarray(d[key]).item()) if isinstance(d[key], np.ndarray) else str(d[key])


def param_array(d: Mapping[str, Any], key: str, ndim: int) -> Float64Array:
    if key not in d:
        raise ValueError(f"calibrator params lack the key {key!r}")
    arr = np.array(d[key], dtype=np.float64)
    if arr.ndim != ndim or not np.all(np.isfinite(arr)):
        raise ValueError(f"calibrator param {key!r} must be a finite {ndim}-D array")
    return arr


def check_kind(d: Mapping[str, Any], kind: str) -> None:
    got = param_str(d, "kind")
    if got != kind:
        raise ValueError(f"calibrator params are of kind {got!r}, expected {kind!r}")


#: every calibrator family by its ``kind``, filled by the classes themselves (``__init_subclass__``)
CALIBRATOR_KINDS: dict[str, type[Calibrator]] = {}


class Calibrator(ABC):
    """Base of every calibrator (see the module docstring for the contract)."""

    kind: str = ""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.kind:
            CALIBRATOR_KINDS[cls.kind] = cls

    @property
    @abstractmethod
    def name(self) -> str:
        """Canonical spec string; ``make_calibrator(c.name)`` builds an equal unfitted calibrator."""

    @abstractmethod
    def fit(
        self,
        raw: npt.ArrayLike,
        labels: npt.ArrayLike,
        query_offsets: npt.ArrayLike,
        gains: npt.ArrayLike,
        *,
        doc_gains: npt.ArrayLike | None = None,
    ) -> Self: ...

    @abstractmethod
    def transform(self, raw: npt.ArrayLike) -> Float64Array: ...

    @abstractmethod
    def to_params(self) -> CalibratorParams: ...

    @classmethod
    @abstractmethod
    def from_params(cls, d: Mapping[str, Any]) -> Self: ...

    def _check_fitted(self) -> None:
        if getattr(self, "gains_", None) is None:
            raise ValueError(f"{self.name} calibrator is not fitted yet: call fit() first")

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


def calibrator_from_params(d: Mapping[str, Any]) -> Calibrator:
    """Rebuild a fitted calibrator from ``to_params()`` output (numpy only, no scipy); the
    families register themselves when ``tunemix.core.calibration`` is imported."""
    kind = param_str(d, "kind")
    if kind not in CALIBRATOR_KINDS:
        raise ValueError(f"unknown calibrator kind {kind!r}; expected one of {sorted(CALIBRATOR_KINDS)}")
    return CALIBRATOR_KINDS[kind].from_params(d)
