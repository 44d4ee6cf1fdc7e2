"""McRank's own scoring, and the ordinal transform in front of any calibrator.

McRank (Li, Burges and Wu, NIPS 2007, Sect. 3) ranks by the expected relevance

    v(x) = sum_k P(k | x) T(k),    T(k) = k  (``linear``, the paper's choice)  or  2^k - 1  (``gain``),

with class probabilities from the member's raw vector by one of two links:

- ``softmax`` (multi-class boosting, K raw columns F): P(k | x) = exp(F_k) / sum_j exp(F_j);
- ``ordinal`` (K-1 cumulative models, raw columns G_0..G_{K-2}, P(l <= k | x) = s(G_k) with
  s(y) = 1 / (1 + exp(-y))): P(k) = s(G_k) - s(G_{k-1}) with s(G_{-1}) = 0 and s(G_{K-1}) = 1.
  Where the cumulative models cross (s(G_k) < s(G_{k-1})) a difference is negative: it is
  clipped at 0 and the vector renormalised to sum 1 (the sum before is >= 1, so never 0).

:class:`ExpectedRelevanceCalibrator` (spec ``er:<link>:<T>``) has nothing to fit.
:class:`OrdinalCalibrator` (spec ``ordinal+<spec>``) puts the ordinal transform in front of any
other calibrator: its inner calibrator is fitted on, and applied to, the K-vector of class
probabilities of a cumulative member. Both are numpy only; the scoring step
(``tunemix.core.scoring.calibration_step``) applies them through their own ``transform``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self

import numpy as np
import numpy.typing as npt

from tunemix.core.calibration.base import (
    Calibrator,
    CalibratorParams,
    Float64Array,
    calibrator_from_params,
    check_kind,
    param_int,
    param_str,
    validate_raw,
)

LINKS = ("softmax", "ordinal")
RELEVANCE = ("linear", "gain")


def softmax_probabilities(raw: Float64Array) -> Float64Array:
    """P(k | x) = exp(F_k - max F) / sum_j exp(F_j - max F), (n, K)."""
    e = np.exp(raw - raw.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def ordinal_probabilities(cumulative: Float64Array) -> Float64Array:
    """Class probabilities (n, K) from K-1 cumulative logits G, P(l <= k) = s(G_k) (module docstring).

    >>> ordinal_probabilities(np.array([[0.0, 0.0]])).round(3).tolist()   # s = 0.5, 0.5
    [[0.5, 0.0, 0.5]]
    >>> ordinal_probabilities(np.array([[2.0, -2.0]])).round(4).tolist()  # crossing: clipped, renormalised
    [[0.7311, 0.0, 0.2689]]
    """
    g = np.asarray(cumulative, dtype=np.float64)
    n = g.shape[0]
    cdf = np.empty((n, g.shape[1] + 2), dtype=np.float64)
    cdf[:, 0] = 0.0
    cdf[:, -1] = 1.0
    # s(y) without overflow: exp(-logaddexp(0, -y))
    cdf[:, 1:-1] = np.exp(-np.logaddexp(0.0, -g))
    p = np.maximum(cdf[:, 1:] - cdf[:, :-1], 0.0)  # np.diff's own subtraction, without its wrapper
    return p / p.sum(axis=1, keepdims=True)


def relevance_values(relevance: str, k: int) -> Float64Array:
    """T(0..K-1): k (``linear``) or 2^k - 1 (``gain``)."""
    levels = np.arange(k, dtype=np.float64)
    return levels if relevance == "linear" else 2.0**levels - 1.0


class ExpectedRelevanceCalibrator(Calibrator):
    """v(x) = sum_k P(k | x) T(k) (module docstring); ``link`` in ``softmax``, ``ordinal``;
    ``relevance`` in ``linear`` (T(k) = k), ``gain`` (T(k) = 2^k - 1).

    >>> c = ExpectedRelevanceCalibrator(link="softmax", relevance="linear")
    >>> c.fit([[0.0, 0.0], [1.0, 0.0]], [0, 1], [0, 2], [0.0, 1.0]).transform([[0.0, 0.0]]).tolist()
    [0.5]
    """

    kind = "er"

    def __init__(self, *, link: str = "softmax", relevance: str = "linear") -> None:
        self.link = link
        self.relevance = relevance

    @property
    def name(self) -> str:
        return f"er:{self.link}:{self.relevance}"

    def _check_params(self) -> None:
        if self.link not in LINKS:
            raise ValueError(f"link must be one of {LINKS}, got {self.link!r}")
        if self.relevance not in RELEVANCE:
            raise ValueError(f"relevance must be one of {RELEVANCE}, got {self.relevance!r}")

    def _check_fitted(self) -> None:
        if getattr(self, "relevance_", None) is None:
            raise ValueError(f"{self.name} calibrator is not fitted yet: call fit() first")

    def fit(self, raw: npt.ArrayLike, labels: npt.ArrayLike, query_offsets: npt.ArrayLike,
            gains: npt.ArrayLike, *, doc_gains: npt.ArrayLike | None = None) -> Self:
        """Nothing is learned: the number of raw columns fixes K (K-1 columns for ``ordinal``)."""
        self._check_params()
        arr = validate_raw(raw)
        k = arr.shape[1] + (1 if self.link == "ordinal" else 0)
        if k < 2:
            raise ValueError(f"{self.name} needs at least 2 classes, the member has {arr.shape[1]} raw columns")
        self.n_columns_ = arr.shape[1]
        self.relevance_ = relevance_values(self.relevance, k)
        return self

    def predict_proba(self, raw: npt.ArrayLike) -> Float64Array:
        self._check_fitted()
        arr = validate_raw(raw, n_classes=self.n_columns_)
        return softmax_probabilities(arr) if self.link == "softmax" else ordinal_probabilities(arr)

    def transform(self, raw: npt.ArrayLike) -> Float64Array:
        return np.ascontiguousarray(self.predict_proba(raw) @ self.relevance_)

    def to_params(self) -> CalibratorParams:
        self._check_fitted()
        return {"kind": self.kind, "link": self.link, "relevance": self.relevance, "n_columns_": self.n_columns_}

    @classmethod
    def from_params(cls, d: Mapping[str, Any]) -> Self:
        check_kind(d, cls.kind)
        obj = cls(link=param_str(d, "link"), relevance=param_str(d, "relevance"))
        obj._check_params()
        obj.n_columns_ = param_int(d, "n_columns_")
        k = obj.n_columns_ + (1 if obj.link == "ordinal" else 0)
        obj.relevance_ = relevance_values(obj.relevance, k)
        return obj


class OrdinalCalibrator(Calibrator):
    """``inner`` applied to the class probabilities of a cumulative member:
    v(x) = inner(ordinal_probabilities(G(x))). Spec ``ordinal+<inner spec>``."""

    kind = "ordinal"

    def __init__(self, *, inner: Calibrator) -> None:
        self.inner = inner

    @property
    def name(self) -> str:
        return f"ordinal+{self.inner.name}"

    def _check_fitted(self) -> None:
        if getattr(self, "n_columns_", None) is None:
            raise ValueError(f"{self.name} calibrator is not fitted yet: call fit() first")

    def fit(self, raw: npt.ArrayLike, labels: npt.ArrayLike, query_offsets: npt.ArrayLike,
            gains: npt.ArrayLike, *, doc_gains: npt.ArrayLike | None = None) -> Self:
        arr = validate_raw(raw)
        self.inner.fit(ordinal_probabilities(arr), labels, query_offsets, gains, doc_gains=doc_gains)
        self.n_columns_ = arr.shape[1]
        return self

    def transform(self, raw: npt.ArrayLike) -> Float64Array:
        self._check_fitted()
        return self.inner.transform(ordinal_probabilities(validate_raw(raw, n_classes=self.n_columns_)))

    def to_params(self) -> CalibratorParams:
        self._check_fitted()
        return {"kind": self.kind, "n_columns_": self.n_columns_, "inner": self.inner.to_params()}

    @classmethod
    def from_params(cls, d: Mapping[str, Any]) -> Self:
        check_kind(d, cls.kind)
        if not isinstance(d.get("inner"), Mapping):
            raise ValueError("ordinal calibrator params lack the inner calibrator")
        obj = cls(inner=calibrator_from_params(d["inner"]))
        obj.n_columns_ = param_int(d, "n_columns_")
        return obj


class IdentityCalibrator(Calibrator):
    """A one-score member used as it is: v(x) = f_0(x), its first raw column (the best single
    feature has one column; LambdaMART's raw vector is (f, 0, ..., 0), padded with zero columns
    so that regression calibrators take it too). The forecaster's member rescaling puts it on the
    others' scale."""

    kind = "identity"

    @property
    def name(self) -> str:
        return "identity"

    def _check_fitted(self) -> None:
        if not getattr(self, "fitted_", False):
            raise ValueError("identity calibrator is not fitted yet: call fit() first")

    def fit(self, raw: npt.ArrayLike, labels: npt.ArrayLike, query_offsets: npt.ArrayLike,
            gains: npt.ArrayLike, *, doc_gains: npt.ArrayLike | None = None) -> Self:
        arr = validate_raw(raw)
        if arr.shape[1] > 1 and np.any(arr[:, 1:] != 0.0):
            raise ValueError("identity takes a one-score member: raw columns after the first must be 0")
        self.n_columns_ = arr.shape[1]
        self.fitted_ = True
        return self

    def transform(self, raw: npt.ArrayLike) -> Float64Array:
        self._check_fitted()
        return np.ascontiguousarray(validate_raw(raw, n_classes=self.n_columns_)[:, 0])

    def to_params(self) -> CalibratorParams:
        self._check_fitted()
        return {"kind": self.kind, "n_columns_": self.n_columns_}

    @classmethod
    def from_params(cls, d: Mapping[str, Any]) -> Self:
        check_kind(d, cls.kind)
        obj = cls()
        obj.n_columns_ = param_int(d, "n_columns_") if "n_columns_" in d else 1
        obj.fitted_ = True
        return obj
