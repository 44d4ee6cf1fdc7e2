"""SHIFT: the naive calibration of a multi-class member (Tune and mix, Sect. 5.1).

    f'_l(x) = max(0, 1 + f_l(x) / R),    p(l | x) = f'_l(x) / sum_l' f'_l'(x),
    v(x) = sum_l z_l p(l | x)

R is given by the member when it has a natural bound (AdaBoost.MH: R = sum_t alpha_t, so that
|f_l| <= R and f' >= 0 everywhere); otherwise R = max_{i,l} |f_l(x_i)| on the calibration part
(paper eq. 12). Outside the calibration part f' can drop below 0: we clip at 0 (our choice),
and a document whose clipped vector sums to 0 gets the uniform distribution (v = mean of z).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self

import numpy as np
import numpy.typing as npt

from tunemix.core.calibration.base import (
    CalibrationError,
    Calibrator,
    CalibratorParams,
    Float64Array,
    check_kind,
    format_number,
    param_array,
    param_float,
    validate_fit_inputs,
    validate_raw,
)


def shift_probabilities(raw: Float64Array, scale: float) -> Float64Array:
    """p(l | x) = max(0, 1 + f_l/R) / sum_l' max(0, 1 + f_l'/R); uniform where the sum is 0."""
    shifted = np.maximum(1.0 + raw / scale, 0.0)
    total = shifted.sum(axis=1, keepdims=True)
    k = raw.shape[1]
    with np.errstate(invalid="ignore", divide="ignore"):
        p = shifted / total
    return np.where(total > 0.0, p, 1.0 / k)


class ShiftCalibrator(Calibrator):
    """Naive calibration by a linear shift and normalisation (see module docstring).

    Parameters
    ----------
    scale:
        The member's bound R (e.g. the sum of AdaBoost's alphas). ``None``: R = max |f| on the
        calibration part.

    >>> import numpy as np
    >>> c = ShiftCalibrator(scale=2.0).fit([[2.0, -2.0], [0.0, 0.0]], [0, 1], [0, 2], [0.0, 1.0])
    >>> c.transform([[-1.0, 1.0]]).tolist()  # f' = (0.5, 1.5), p = (0.25, 0.75)
    [0.75]
    """

    kind = "shift"

    def __init__(self, *, scale: float | None = None) -> None:
        self.scale = scale

    @property
    def name(self) -> str:
        return "shift" if self.scale is None else f"shift(R={format_number(self.scale)})"

    def fit(
        self,
        raw: npt.ArrayLike,
        labels: npt.ArrayLike,
        query_offsets: npt.ArrayLike,
        gains: npt.ArrayLike,
        *,
        doc_gains: npt.ArrayLike | None = None,
    ) -> Self:
        raw_arr, _, _, z = validate_fit_inputs(raw, labels, query_offsets, gains)
        if self.scale is not None:
            scale = float(self.scale)
            if not np.isfinite(scale) or scale <= 0.0:
                raise ValueError(f"scale (the member's bound R) must be positive, got {self.scale}")
        else:
            scale = float(np.max(np.abs(raw_arr)))
            if scale == 0.0:
                raise CalibrationError(
                    "SHIFT: every raw score on the calibration part is 0, so R = max|f| = 0"
                )
        self.scale_ = scale
        self.gains_ = z
        return self

    def predict_proba(self, raw: npt.ArrayLike) -> Float64Array:
        """The class distribution p(l | x), shape (n, K)."""
        self._check_fitted()
        arr = validate_raw(raw, n_classes=self.gains_.shape[0])
        return shift_probabilities(arr, self.scale_)

    def transform(self, raw: npt.ArrayLike) -> Float64Array:
        """v(x) = sum_l z_l p(l | x), shape (n,)."""
        return np.ascontiguousarray(self.predict_proba(raw) @ self.gains_)

    def to_params(self) -> CalibratorParams:
        self._check_fitted()
        out: CalibratorParams = {"kind": self.kind, "scale_": float(self.scale_),
                                 "gains_": self.gains_.copy()}
        if self.scale is not None:
            out["scale"] = float(self.scale)
        return out

    @classmethod
    def from_params(cls, d: Mapping[str, Any]) -> Self:
        check_kind(d, cls.kind)
        obj = cls(scale=param_float(d, "scale") if "scale" in d else None)
        obj.scale_ = param_float(d, "scale_")
        if not obj.scale_ > 0.0:
            raise ValueError(f"calibrator param 'scale_' must be positive, got {obj.scale_}")
        obj.gains_ = param_array(d, "gains_", 1)
        return obj
