"""Regression-based calibration (RBC): regress document gains on the member's K-vector.

Tune and mix (Busa-Fekete et al., Machine Learning 2013), Sect. 5.4, eqs. 20-21:

    v(x) = g_theta(f(x)),   theta = argmin sum_i (y_i - g_theta(f(x_i)))^2 (+ regularisation)

with targets y_i = z_{l_i} (``target="gain"``, eq. 20) or y_i = z_{l_i} / idealDCG@10(query of i)
(``target="ndcg"``, eq. 21; ideal DCG with the class gains z, 2^l - 1 for ungrouped labels, and
discount 1 / log2(r + 1); a query whose ideal DCG is 0 gets targets 0). Scaling a query's targets
does not change its order, so the ndcg-target scores still rank new queries.

Regressors (``regression_models``): ``linear`` (least squares, small ridge), ``logistic``
(logistic link on targets divided by their largest value, soft-target cross-entropy), ``poly``
(all monomials of degree 1..``degree``, ridge) and ``nn`` (one tanh hidden layer, squared loss,
weight decay, L-BFGS from a seeded start). Inputs are standardised column-wise first
(mean/std on the calibration part; a constant column gets std 1); polynomial inputs are then
clipped to +-1e6 standard deviations so that no power overflows. The nn also standardises its
targets. Every model predicts ``output_offset_ + output_scale_ * g(x)``.
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
    ndcg_targets,
    param_array,
    param_float,
    param_int,
    param_str,
    require_informative,
    resolve_doc_gains,
    validate_fit_inputs,
    validate_raw,
)
from tunemix.core.calibration.regression_models import (
    fit_logistic,
    fit_network,
    fit_ridge,
    monomial_exponents,
    polynomial_features,
    predict_affine,
    predict_logistic,
    predict_network,
    unpack_network,
)

RBC_MODELS = ("linear", "logistic", "poly", "nn")
RBC_TARGETS = ("gain", "ndcg")
# nn: 1e-2, not 1e-4: with a LightGBM multiclass member on MQ2008 (5 folds, ~1,900 calibration
# documents) test NDCG@10 is 0.785 with 1e-2 and 0.761 with 1e-4 (overfitting)
DEFAULT_RIDGE = {"linear": 1e-6, "logistic": 1e-4, "poly": 1e-4, "nn": 1e-2}
POLY_DEGREES = (2, 3, 4, 5)
_POLY_CLIP = 1e6


class RegressionCalibrator(Calibrator):
    """RBC (see module docstring).

    Parameters
    ----------
    model: ``"linear"``, ``"logistic"``, ``"poly"`` or ``"nn"``.
    target: ``"gain"`` (raw class gains) or ``"ndcg"`` (gains / the query's ideal DCG@10).
    degree: polynomial degree (``poly`` only), 2..5.
    hidden: hidden tanh units (``nn`` only).
    ridge: L2 penalty on the mean-loss scale; ``None``: the model's default (``DEFAULT_RIDGE``).
    seed: seed of the nn's start and of its subsample.
    max_iter: L-BFGS iterations (logistic, nn).
    max_samples: the nn is fitted on at most this many documents (a seeded subsample).
    """

    kind = "rbc"

    def __init__(
        self,
        *,
        model: str = "linear",
        target: str = "gain",
        degree: int = 2,
        hidden: int = 10,
        ridge: float | None = None,
        seed: int = 0,
        max_iter: int = 500,
        max_samples: int = 200_000,
    ) -> None:
        self.model = model
        self.target = target
        self.degree = degree
        self.hidden = hidden
        self.ridge = ridge
        self.seed = seed
        self.max_iter = max_iter
        self.max_samples = max_samples

    @property
    def name(self) -> str:
        head = f"poly{int(self.degree)}" if self.model == "poly" else self.model
        opts = []
        if self.model == "nn" and int(self.hidden) != 10:
            opts.append(f"hidden={int(self.hidden)}")
        if self.ridge is not None:
            opts.append(f"ridge={format_number(self.ridge)}")
        if self.model == "nn" and int(self.seed) != 0:
            opts.append(f"seed={int(self.seed)}")
        if opts:
            head += "(" + ",".join(opts) + ")"
        return f"rbc:{head}:{self.target}"

    def _check_params(self) -> None:
        if self.model not in RBC_MODELS:
            raise ValueError(f"model must be one of {RBC_MODELS}, got {self.model!r}")
        if self.target not in RBC_TARGETS:
            raise ValueError(f"target must be one of {RBC_TARGETS}, got {self.target!r}")
        if self.model == "poly" and int(self.degree) not in POLY_DEGREES:
            raise ValueError(f"degree must be one of {POLY_DEGREES}, got {self.degree}")
        if int(self.hidden) < 1 or int(self.max_iter) < 1 or int(self.max_samples) < 1:
            raise ValueError("hidden, max_iter and max_samples must be at least 1")
        if self.ridge is not None and not (np.isfinite(self.ridge) and self.ridge >= 0):
            raise ValueError(f"ridge must be a non-negative number or None, got {self.ridge}")

    def _design(self, x: Float64Array) -> Float64Array:
        if self.model == "poly":
            return polynomial_features(np.clip(x, -_POLY_CLIP, _POLY_CLIP), self.exponents_)
        return x

    def fit(
        self,
        raw: npt.ArrayLike,
        labels: npt.ArrayLike,
        query_offsets: npt.ArrayLike,
        gains: npt.ArrayLike,
        *,
        doc_gains: npt.ArrayLike | None = None,
    ) -> Self:
        self._check_params()
        raw_arr, lab, off, z = validate_fit_inputs(raw, labels, query_offsets, gains)
        require_informative(raw_arr, lab)
        own = resolve_doc_gains(doc_gains, lab, z)
        y = own if self.target == "gain" else ndcg_targets(own, off)
        if np.all(y == y[0]):
            raise CalibrationError(f"{self.name}: the targets are constant ({y[0]})")
        ridge = DEFAULT_RIDGE[self.model] if self.ridge is None else float(self.ridge)
        mean = raw_arr.mean(axis=0)
        scale = raw_arr.std(axis=0)
        scale[scale == 0] = 1.0
        x = (raw_arr - mean) / scale
        self.mean_, self.scale_ = mean, scale
        k = raw_arr.shape[1]
        self.exponents_ = monomial_exponents(k, int(self.degree) if self.model == "poly" else 1)
        offset, out_scale, intercept = 0.0, 1.0, 0.0
        if self.model in ("linear", "poly"):
            coef, intercept = fit_ridge(self._design(x), y, ridge)
        elif self.model == "logistic":
            out_scale = float(y.max())  # > 0: targets are >= 0 and not constant
            coef, intercept = fit_logistic(x, y / out_scale, ridge, int(self.max_iter))
        else:
            offset, out_scale = float(y.mean()), float(y.std())
            rows = np.arange(x.shape[0])
            if x.shape[0] > int(self.max_samples):
                rng = np.random.default_rng(int(self.seed))
                rows = np.sort(rng.choice(x.shape[0], int(self.max_samples), replace=False))
            coef = fit_network(
                x[rows], (y[rows] - offset) / out_scale, int(self.hidden), ridge,
                int(self.seed), int(self.max_iter),
            )
        self.coef_ = np.asarray(coef, dtype=np.float64)
        self.intercept_ = float(intercept)
        self.output_offset_ = offset
        self.output_scale_ = out_scale
        self.ridge_ = ridge
        self.gains_ = z
        return self

    def transform(self, raw: npt.ArrayLike) -> Float64Array:
        """v(x) = output_offset_ + output_scale_ * g((f(x) - mean_) / scale_), shape (n,)."""
        self._check_fitted()
        arr = validate_raw(raw, n_classes=self.gains_.shape[0])
        x = (arr - self.mean_) / self.scale_
        if self.model == "logistic":
            g = predict_logistic(x, self.coef_, self.intercept_)
        elif self.model == "nn":
            g = predict_network(x, *unpack_network(self.coef_, x.shape[1], int(self.hidden)))
        else:
            g = predict_affine(self._design(x), self.coef_, self.intercept_)
        return np.ascontiguousarray(self.output_offset_ + self.output_scale_ * g)

    def to_params(self) -> CalibratorParams:
        self._check_fitted()
        out: CalibratorParams = {
            "kind": self.kind,
            "model": self.model,
            "target": self.target,
            "degree": int(self.degree),
            "hidden": int(self.hidden),
            "seed": int(self.seed),
            "max_iter": int(self.max_iter),
            "max_samples": int(self.max_samples),
            "mean_": self.mean_.copy(),
            "scale_": self.scale_.copy(),
            "exponents_": self.exponents_.copy(),
            "coef_": self.coef_.copy(),
            "intercept_": self.intercept_,
            "output_offset_": self.output_offset_,
            "output_scale_": self.output_scale_,
            "ridge_": self.ridge_,
            "gains_": self.gains_.copy(),
        }
        if self.ridge is not None:
            out["ridge"] = float(self.ridge)
        return out

    @classmethod
    def from_params(cls, d: Mapping[str, Any]) -> Self:
        check_kind(d, cls.kind)
        obj = cls(
            model=param_str(d, "model"),
            target=param_str(d, "target"),
            degree=param_int(d, "degree"),
            hidden=param_int(d, "hidden"),
            ridge=param_float(d, "ridge") if "ridge" in d else None,
            seed=param_int(d, "seed"),
            max_iter=param_int(d, "max_iter"),
            max_samples=param_int(d, "max_samples"),
        )
        obj._check_params()
        obj.gains_ = param_array(d, "gains_", 1)
        k = obj.gains_.shape[0]
        obj.mean_ = param_array(d, "mean_", 1)
        obj.scale_ = param_array(d, "scale_", 1)
        obj.exponents_ = np.array(d.get("exponents_", np.zeros((0, k))), dtype=np.int64)
        obj.coef_ = param_array(d, "coef_", 1)
        obj.intercept_ = param_float(d, "intercept_")
        obj.output_offset_ = param_float(d, "output_offset_")
        obj.output_scale_ = param_float(d, "output_scale_")
        obj.ridge_ = param_float(d, "ridge_")
        expected = {
            "linear": k,
            "logistic": k,
            "poly": obj.exponents_.shape[0],
            "nn": int(obj.hidden) * (k + 2) + 1,
        }[obj.model]
        if (
            obj.mean_.shape != (k,)
            or obj.scale_.shape != (k,)
            or np.any(obj.scale_ <= 0)
            or obj.coef_.shape != (expected,)
            or (obj.model == "poly" and obj.exponents_.shape[1:] != (k,))
        ):
            raise ValueError(f"calibrator params of {obj.name} have inconsistent array shapes")
        return obj
