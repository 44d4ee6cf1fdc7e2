"""The mixer interface and the input checks every mixer shares.

A mixer turns the calibrated scores of M members into one score per document
(docs/architecture.md, "Mixer")::

    fit(member_scores (n, M) float64, labels (n,) int, query_offsets (n_queries+1,) int64) -> self
    transform(member_scores, query_offsets) -> (n,) float64
    to_params() -> dict of plain arrays / numbers / strings;  from_params(dict) -> mixer

Column m of ``member_scores`` is member m's score of every document; rows are grouped into
queries by ``query_offsets`` (running totals: three queries with 2, 3 and 1 documents have
``[0, 2, 5, 6]``). ``transform`` and ``from_params`` need numpy and numba only (the service
uses them); ``fit`` may evaluate rankings through ``tunemix.core.evaluation``.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Self

import numpy as np
import numpy.typing as npt

from tunemix.core.data.dataset import validate_offsets

Float2D = npt.NDArray[np.float64]
Float1D = npt.NDArray[np.float64]
Int1D = npt.NDArray[np.int32]
Offsets = npt.NDArray[np.int64]

#: A ranking-quality function with the signature of ``tunemix.core.evaluation.mean_metric``:
#: ``metric(labels, scores, query_offsets, measure, convention) -> float``.
MetricFn = Callable[[npt.NDArray[Any], npt.NDArray[Any], npt.NDArray[Any], str, str], float]


class NotFittedError(ValueError):
    """A mixer method that needs fitted attributes was called before ``fit``."""


def check_member_scores(
    member_scores: npt.ArrayLike, *, name: str = "member_scores"
) -> Float2D:
    """Return ``member_scores`` as a C-contiguous float64 (n, M) array with M >= 1, all finite."""
    arr = np.asarray(member_scores)
    if arr.dtype.kind not in "fiub":
        raise TypeError(f"{name} must be a numeric array, got dtype {arr.dtype}")
    arr = np.ascontiguousarray(arr, dtype=np.float64)
    if arr.ndim != 2:
        raise ValueError(
            f"{name} must be 2-D (n documents, M members), got shape {arr.shape}; "
            "for a single member use scores.reshape(-1, 1)"
        )
    if arr.shape[1] < 1:
        raise ValueError(f"{name} must have at least one member column, got shape {arr.shape}")
    finite = np.isfinite(arr)
    if not finite.all():
        row, col = (int(v) for v in np.argwhere(~finite)[0])
        raise ValueError(f"{name} has a NaN or infinite value at row {row}, member {col}")
    return arr


def check_inputs(
    member_scores: npt.ArrayLike,
    query_offsets: npt.ArrayLike,
    *,
    scores_name: str = "member_scores",
    offsets_name: str = "query_offsets",
) -> tuple[Float2D, Offsets]:
    """Validate a (member_scores, query_offsets) pair; errors name the offending argument."""
    scores = check_member_scores(member_scores, name=scores_name)
    offsets = validate_offsets(query_offsets, scores.shape[0], name=offsets_name)
    return scores, offsets


def check_labels(labels: npt.ArrayLike, n: int, *, name: str = "labels") -> Int1D:
    """Return ``labels`` as int32 of shape (n,), non-negative integers."""
    arr = np.asarray(labels)
    if arr.ndim != 1 or arr.shape[0] != n:
        raise ValueError(f"{name} must have shape ({n},) (one label per row), got {arr.shape}")
    if arr.dtype.kind == "f":
        if not np.all(np.isfinite(arr)) or np.any(arr != np.round(arr)):
            raise ValueError(f"{name} must be integers")
    elif arr.dtype.kind not in "iub":
        raise TypeError(f"{name} must be an integer array, got dtype {arr.dtype}")
    if n and arr.min() < 0:
        raise ValueError(f"{name} must be non-negative, found {int(arr.min())}")
    return np.ascontiguousarray(arr, dtype=np.int32)


def resolve_metric(metric: MetricFn | None) -> MetricFn:
    """``metric`` itself, or ``tunemix.core.evaluation.mean_metric`` when None."""
    if metric is not None:
        return metric
    module = importlib.import_module("tunemix.core.evaluation")
    fn: MetricFn | None = getattr(module, "mean_metric", None)
    if fn is None:
        raise ImportError(
            "tunemix.core.evaluation.mean_metric is not available; pass metric=... explicitly"
        )
    return fn


def member_qualities(
    member_scores: Float2D,
    labels: Int1D,
    query_offsets: Offsets,
    measure: str,
    convention: str,
    metric: MetricFn,
) -> Float1D:
    """omega_m: the mean ``measure`` of member m's ranking over the queries (one call each)."""
    n_members = member_scores.shape[1]
    omega = np.empty(n_members, dtype=np.float64)
    for m in range(n_members):
        omega[m] = float(
            metric(labels, np.ascontiguousarray(member_scores[:, m]), query_offsets, measure,
                   convention)
        )
    return omega


class Mixer(ABC):
    """Base class: shape bookkeeping, fitted-state checks and the params round trip."""

    #: canonical registry name (``make_mixer(name)``)
    name: ClassVar[str]

    n_members_: int

    # ---------------------------------------------------------------- interface
    def fit(
        self, member_scores: npt.ArrayLike, labels: npt.ArrayLike, query_offsets: npt.ArrayLike
    ) -> Self:
        """Learn the mixer from validation queries; returns self."""
        scores, offsets = check_inputs(member_scores, query_offsets)
        lab = check_labels(labels, scores.shape[0])
        self._fit(scores, lab, offsets)
        self.n_members_ = int(scores.shape[1])
        return self

    def transform(self, member_scores: npt.ArrayLike, query_offsets: npt.ArrayLike) -> Float1D:
        """The mixed score of every document, shape (n,); higher ranks first."""
        self._check_fitted()
        scores, offsets = check_inputs(member_scores, query_offsets)
        if scores.shape[1] != self.n_members_:
            raise ValueError(
                f"member_scores has {scores.shape[1]} member columns, but the {self.name} "
                f"mixer was fitted with {self.n_members_}"
            )
        return self._transform(scores, offsets)

    def fit_transform(
        self, member_scores: npt.ArrayLike, labels: npt.ArrayLike, query_offsets: npt.ArrayLike
    ) -> Float1D:
        return self.fit(member_scores, labels, query_offsets).transform(
            member_scores, query_offsets
        )

    def to_params(self) -> dict[str, Any]:
        """Plain arrays / numbers / strings: the constructor parameters and fitted state."""
        self._check_fitted()
        params: dict[str, Any] = {"mixer": self.name, "n_members": self.n_members_}
        params.update(self._get_init_params())
        params.update(self._fitted_params())
        return params

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> Self:
        """Rebuild a fitted mixer from ``to_params()`` output (no fitting, numpy only)."""
        if params.get("mixer") != cls.name:
            raise ValueError(
                f"params describe mixer {params.get('mixer')!r}, not {cls.name!r}"
            )
        init_names = cls._init_param_names()
        optional = cls._optional_init_params()
        missing = [k for k in (*init_names, "n_members") if k not in params and k not in optional]
        if missing:
            raise ValueError(f"params for mixer {cls.name!r} lack keys {missing}")
        obj = cls(**{k: _plain(params[k]) for k in init_names if k in params})
        obj.n_members_ = int(params["n_members"])
        obj._set_fitted_params(params)
        return obj

    # ------------------------------------------------------------ to override
    @abstractmethod
    def _fit(self, member_scores: Float2D, labels: Int1D, query_offsets: Offsets) -> None: ...

    @abstractmethod
    def _transform(self, member_scores: Float2D, query_offsets: Offsets) -> Float1D: ...

    @classmethod
    def _init_param_names(cls) -> tuple[str, ...]:
        return ()

    @classmethod
    def _optional_init_params(cls) -> tuple[str, ...]:
        """Init params that artifacts of earlier versions may lack: absent = the constructor default."""
        return ()

    def _get_init_params(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self._init_param_names()}

    def _fitted_params(self) -> dict[str, Any]:
        return {}

    def _set_fitted_params(self, params: Mapping[str, Any]) -> None:
        return None

    # -------------------------------------------------------- member selection
    def used_members(self) -> npt.NDArray[np.bool_]:
        """Which members the fitted mix reads (default: all of them)."""
        self._check_fitted()
        return np.ones(self.n_members_, dtype=bool)

    def select_members(self, keep: npt.ArrayLike) -> Self:
        """The same mix over only the members ``keep`` (indices, increasing). Only members that
        ``used_members()`` marks unused may be dropped; scores stay the same."""
        self._check_fitted()
        idx = np.asarray(keep, dtype=np.int64)
        if idx.ndim != 1 or np.any(np.diff(idx) <= 0) or (idx.size and (idx[0] < 0 or idx[-1] >= self.n_members_)):
            raise ValueError(f"keep must be increasing member indices in 0..{self.n_members_ - 1}")
        if np.any(self.used_members()[np.setdiff1d(np.arange(self.n_members_), idx)]):
            raise ValueError(f"{self.name} uses members that keep drops; its scores would change")
        if idx.size == self.n_members_:
            return self
        params = self.to_params()
        for key in self._per_member_params():
            value = params.get(key)
            if isinstance(value, np.ndarray) and value.ndim == 1 and value.shape[0] == self.n_members_:
                params[key] = value[idx]
        params["n_members"] = int(idx.size)
        return type(self).from_params(params)

    @classmethod
    def _per_member_params(cls) -> tuple[str, ...]:
        """Keys of ``to_params()`` holding one entry per member."""
        return ()

    # ----------------------------------------------------------------- helpers
    def _check_fitted(self) -> None:
        if not hasattr(self, "n_members_"):
            raise NotFittedError(
                f"this {type(self).__name__} is not fitted yet; call fit(member_scores, labels, "
                "query_offsets) or from_params(...) first"
            )

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self._get_init_params().items())
        return f"{type(self).__name__}({args})"


def _plain(value: Any) -> Any:
    """Arrays from an .npz come back as numpy scalars / arrays: turn them into plain values."""
    if isinstance(value, np.ndarray):
        if value.ndim == 0:
            return value.item()
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value
