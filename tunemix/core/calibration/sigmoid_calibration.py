"""Class-probability calibration (CPC) with one sigmoid shared by all classes.

Tune and mix (Busa-Fekete et al., Machine Learning 2013), Sect. 5.2, after Platt (2000):

    s(f) = 1 / (1 + exp(-a (f - b))),   p(l | x) = s(f_l(x)) / sum_l' s(f_l'(x)),
    v(x) = sum_l z_l p(l | x)   (the Bayes-scoring function of the calibrated distribution)

(a, b) minimise one target calibration function (``target_functions``: LS, EWLS(C), EL, ELL,
SNDCG(sigma)) on the calibration part. Optimiser (our choices): the parameters are searched in
units of the raw scores, a = alpha / std(f), b = mean(f) + beta * std(f); a deterministic 5 x 5
grid of (alpha, beta) is evaluated (on every s-th query when the calibration part has more than
20,000 documents, to save time) and L-BFGS-B (analytic gradients) runs on all documents from
the ``n_starts`` best grid points, within alpha in [0, 100], beta in [-20, 20]. Keeping a >= 0 keeps
the calibrator monotone: raising the score of the top-gain class never lowers v.
A fit with no finite optimum raises CalibrationError; transform never returns NaN (log-sum-exp).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
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
    ideal_dcg,
    param_array,
    param_float,
    param_int,
    param_str,
    require_informative,
    resolve_doc_gains,
    validate_fit_inputs,
    validate_raw,
)

logger = logging.getLogger(__name__)

CPC_TARGETS = ("ls", "ewls", "el", "ell", "sndcg")
_ALPHA_GRID = (0.1, 0.3, 1.0, 3.0, 10.0)
_BETA_GRID = (-2.0, -1.0, 0.0, 1.0, 2.0)
_ALPHA_BOUNDS = (0.0, 100.0)
_BETA_BOUNDS = (-20.0, 20.0)
_GRID_MAX_DOCS = 20_000


def query_subsample(
    query_offsets: npt.NDArray[np.int64], max_docs: int
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]] | None:
    """Rows and offsets of every s-th query, s = ceil(n / max_docs); None when n <= max_docs.

    Whole queries are kept (SNDCG is listwise); deterministic, no random state.
    """
    n = int(query_offsets[-1])
    if n <= max_docs:
        return None
    stride = -(-n // max_docs)
    keep = np.arange(0, query_offsets.shape[0] - 1, stride)
    starts, ends = query_offsets[keep], query_offsets[keep + 1]
    rows = np.concatenate([np.arange(a, b, dtype=np.int64) for a, b in zip(starts, ends, strict=True)])
    sub_off = np.zeros(keep.shape[0] + 1, dtype=np.int64)
    np.cumsum(ends - starts, out=sub_off[1:])
    return rows, sub_off


def sigmoid_class_probabilities(raw: Float64Array, a: float, b: float) -> Float64Array:
    """p(l | x) = s(f_l) / sum_l' s(f_l'), via log s = -log(1 + exp(-a (f - b))) and log-sum-exp."""
    u = -np.logaddexp(0.0, -a * (raw - b))
    u -= u.max(axis=1, keepdims=True)
    e = np.exp(u)
    return e / e.sum(axis=1, keepdims=True)


class SigmoidCalibrator(Calibrator):
    """CPC: sigmoid class-probability calibration fitted by one TCF (see module docstring).

    Parameters
    ----------
    tcf: one of ``"ls"``, ``"ewls"``, ``"el"``, ``"ell"``, ``"sndcg"``.
    C: entropy exponent of EWLS (ignored by the other TCFs).
    sigma: similarity width of SNDCG, on scores divided by the largest gain.
    n_starts: L-BFGS-B runs, from the best points of the deterministic start grid.
    max_iter: L-BFGS-B iterations per start.
    """

    kind = "cpc"

    def __init__(
        self,
        *,
        tcf: str = "ls",
        C: float = 2.0,
        sigma: float = 0.01,
        n_starts: int = 3,
        max_iter: int = 200,
    ) -> None:
        self.tcf = tcf
        self.C = C
        self.sigma = sigma
        self.n_starts = n_starts
        self.max_iter = max_iter

    @property
    def name(self) -> str:
        if self.tcf == "ewls":
            return f"cpc:ewls(C={format_number(self.C)})"
        if self.tcf == "sndcg":
            return f"cpc:sndcg(sigma={format_number(self.sigma)})"
        return f"cpc:{self.tcf}"

    def _check_params(self) -> None:
        if self.tcf not in CPC_TARGETS:
            raise ValueError(f"tcf must be one of {CPC_TARGETS}, got {self.tcf!r}")
        if not np.isfinite(self.C):
            raise ValueError(f"C (EWLS entropy exponent) must be a finite number, got {self.C}")
        if not np.isfinite(self.sigma) or self.sigma <= 0:
            raise ValueError(f"sigma (SNDCG width) must be > 0, got {self.sigma}")
        if int(self.n_starts) < 1 or int(self.max_iter) < 1:
            raise ValueError("n_starts and max_iter must be at least 1")

    def fit(
        self,
        raw: npt.ArrayLike,
        labels: npt.ArrayLike,
        query_offsets: npt.ArrayLike,
        gains: npt.ArrayLike,
        *,
        doc_gains: npt.ArrayLike | None = None,
    ) -> Self:
        from scipy.optimize import minimize

        from tunemix.core.calibration.target_functions import TargetCalibrationFunction

        self._check_params()
        raw_arr, lab, off, z = validate_fit_inputs(raw, labels, query_offsets, gains)
        require_informative(raw_arr, lab)
        own = resolve_doc_gains(doc_gains, lab, z)
        if self.tcf == "sndcg" and not np.any(ideal_dcg(own, off, None) > 0):
            raise CalibrationError("SNDCG: no calibration query has a document with positive gain")
        center = float(raw_arr.mean())
        spread = float(raw_arr.std())
        if not spread > 0:
            raise CalibrationError("raw scores are constant on the calibration part")
        tcf = TargetCalibrationFunction(
            self.tcf, raw_arr, lab, off, z, C=float(self.C), sigma=float(self.sigma), doc_gains=own
        )

        def make_objective(
            fn: TargetCalibrationFunction,
        ) -> Callable[[Float64Array], tuple[float, Float64Array]]:
            norm = float(max(fn.n_terms, 1))

            def objective(theta: Float64Array) -> tuple[float, Float64Array]:
                a = theta[0] / spread
                b = center + theta[1] * spread
                with np.errstate(over="ignore", under="ignore"):
                    value, grad = fn.value_and_grad(a, b)
                scaled = np.array([grad[0] / spread, grad[1] * spread]) / norm
                if not (np.isfinite(value) and np.all(np.isfinite(scaled))):
                    return np.inf, np.zeros(2)
                return value / norm, scaled

            return objective

        objective = make_objective(tcf)
        grid_objective = objective
        sub = query_subsample(off, _GRID_MAX_DOCS)
        if sub is not None:
            rows, sub_off = sub
            grid_objective = make_objective(
                TargetCalibrationFunction(
                    self.tcf, raw_arr[rows], lab[rows], sub_off, z,
                    C=float(self.C), sigma=float(self.sigma), doc_gains=own[rows],
                )
            )
        grid = [np.array([al, be]) for al in _ALPHA_GRID for be in _BETA_GRID]
        grid_values = [grid_objective(theta)[0] for theta in grid]
        order = np.argsort(np.asarray(grid_values), kind="stable")
        best_theta = grid[int(order[0])]
        best_value = float(objective(best_theta)[0])
        failures: list[str] = []
        for idx in order[: int(self.n_starts)]:
            if not np.isfinite(grid_values[int(idx)]):
                continue
            try:
                res = minimize(
                    objective,
                    grid[int(idx)],
                    jac=True,
                    method="L-BFGS-B",
                    bounds=[_ALPHA_BOUNDS, _BETA_BOUNDS],
                    options={"maxiter": int(self.max_iter)},
                )
            except (ValueError, FloatingPointError, ArithmeticError) as exc:
                failures.append(str(exc))
                continue
            value = float(res.fun)
            if np.isfinite(value) and np.all(np.isfinite(res.x)) and value < best_value:
                best_theta, best_value = np.asarray(res.x, dtype=np.float64), value
        if not np.isfinite(best_value):
            raise CalibrationError(
                f"{self.name}: no start gave a finite target value ({'; '.join(failures)})"
            )
        self.a_ = float(best_theta[0] / spread)
        self.b_ = float(center + best_theta[1] * spread)
        self.objective_ = best_value
        self.gains_ = z
        if self.a_ == 0.0:
            logger.warning("%s: fitted slope a = 0, the calibrated score is constant", self.name)
        return self

    def predict_proba(self, raw: npt.ArrayLike) -> Float64Array:
        """The calibrated class distribution p(l | x), shape (n, K)."""
        self._check_fitted()
        arr = validate_raw(raw, n_classes=self.gains_.shape[0])
        return sigmoid_class_probabilities(arr, self.a_, self.b_)

    def transform(self, raw: npt.ArrayLike) -> Float64Array:
        """v(x) = sum_l z_l p(l | x), shape (n,)."""
        return np.ascontiguousarray(self.predict_proba(raw) @ self.gains_)

    def to_params(self) -> CalibratorParams:
        self._check_fitted()
        return {
            "kind": self.kind,
            "tcf": self.tcf,
            "C": float(self.C),
            "sigma": float(self.sigma),
            "n_starts": int(self.n_starts),
            "max_iter": int(self.max_iter),
            "a_": self.a_,
            "b_": self.b_,
            "objective_": self.objective_,
            "gains_": self.gains_.copy(),
        }

    @classmethod
    def from_params(cls, d: Mapping[str, Any]) -> Self:
        check_kind(d, cls.kind)
        obj = cls(
            tcf=param_str(d, "tcf"),
            C=param_float(d, "C"),
            sigma=param_float(d, "sigma"),
            n_starts=param_int(d, "n_starts"),
            max_iter=param_int(d, "max_iter"),
        )
        obj._check_params()
        obj.a_ = param_float(d, "a_")
        obj.b_ = param_float(d, "b_")
        obj.objective_ = param_float(d, "objective_")
        obj.gains_ = param_array(d, "gains_", 1)
        if not (np.isfinite(obj.a_) and np.isfinite(obj.b_)):
            raise ValueError("calibrator params 'a_' and 'b_' must be finite")
        return obj
