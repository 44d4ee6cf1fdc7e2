"""Every member's calibrator in one step: one numba kernel per calibrator family, each applied
to all of its members at once.

At scoring time member m's raw K-vectors (``training.scoring.ensemble_model``) become one score
per document through its own calibrator (Tune and mix, Sect. 5). Calling 90 calibrators one by
one costs milliseconds of Python overhead for a 100-document list; here the members of a family
are one kernel call reading the (n, M, K_max) raw block in place, with their parameters stacked
(and zero-padded to the family's largest shape) once, when the model loads:

- ``shift``:  p_l = max(0, 1 + f_l / R) / sum, uniform where the sum is 0; v = sum_l z_l p_l.
- ``cpc``:    p_l = s(f_l) / sum_l' s(f_l'), s(f) = 1 / (1 + exp(-a (f - b))) (log-sum-exp); v = z . p.
- ``rbc``:    x = (f - mean) / scale; linear g = x . w + c; logistic g = sigmoid(x . w + c);
              poly g = phi(clip(x)) . w + c (monomials of total degree 1..D); nn
              g = tanh(x W1^T + b1) . w2 + b2; v = offset + out_scale * g.

The formulas are the calibrators' own ``transform`` (``training.calibration``), which stays the
reference: the tests compare the two to 1e-12. A calibrator of a kind not listed falls back to
its own ``transform``. Zero padding changes nothing: a padded polynomial term or hidden unit
has a zero weight.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from numba import njit

from training.calibration.base import Calibrator
from training.calibration.regression_calibration import _POLY_CLIP, RegressionCalibrator
from training.calibration.regression_models import unpack_network
from training.calibration.shift import ShiftCalibrator
from training.calibration.sigmoid_calibration import SigmoidCalibrator

Float64Array = npt.NDArray[np.float64]


FAMILIES = ("shift", "cpc", "linear", "logistic", "poly", "nn")


def _family(cal: Calibrator) -> str | None:
    if isinstance(cal, ShiftCalibrator):
        return "shift"
    if isinstance(cal, SigmoidCalibrator):
        return "cpc"
    if isinstance(cal, RegressionCalibrator) and cal.model in FAMILIES:
        return str(cal.model)
    return None


def _pad(rows: Sequence[npt.ArrayLike], shape: tuple[int, ...], dtype: Any = np.float64) -> np.ndarray:
    """``rows`` stacked along a new first axis, each zero-padded to ``shape``."""
    out = np.zeros((len(rows), *shape), dtype=dtype)
    for i, r in enumerate(rows):
        a = np.asarray(r, dtype=dtype)
        index: tuple[int | slice, ...] = (i, *(slice(0, n) for n in a.shape))
        out[index] = a
    return out


@dataclass
class _Group:
    """The members of one family with their parameters stacked along axis 0 (``p``, in the
    order of the family's kernel arguments)."""

    family: str
    members: npt.NDArray[np.int64]
    k: npt.NDArray[np.int64]
    p: tuple[Any, ...]


def _stack(family: str, cals: Sequence[Any], ks: Sequence[int]) -> tuple[Any, ...]:
    kmax = max(ks)
    if family == "shift":
        return (np.array([c.scale_ for c in cals], dtype=np.float64),
                _pad([c.gains_ for c in cals], (kmax,)))
    if family == "cpc":
        return (np.array([c.a_ for c in cals], dtype=np.float64),
                np.array([c.b_ for c in cals], dtype=np.float64),
                _pad([c.gains_ for c in cals], (kmax,)))
    head = (_pad([c.mean_ for c in cals], (kmax,)), _pad([c.scale_ for c in cals], (kmax,)))
    tail = (np.array([c.output_offset_ for c in cals], dtype=np.float64),
            np.array([c.output_scale_ for c in cals], dtype=np.float64))
    if family == "nn":
        nets = [unpack_network(c.coef_, k, int(c.hidden)) for c, k in zip(cals, ks, strict=True)]
        hmax = max(n[0].shape[0] for n in nets)
        return (*head, _pad([n[0] for n in nets], (hmax, kmax)), _pad([n[1] for n in nets], (hmax,)),
                _pad([n[2] for n in nets], (hmax,)), np.array([n[3] for n in nets], dtype=np.float64),
                *tail)
    coef = [np.asarray(c.coef_, dtype=np.float64) for c in cals]
    intercept = np.array([c.intercept_ for c in cals], dtype=np.float64)
    if family == "poly":
        tmax = max(c.shape[0] for c in coef)
        exps = _pad([c.exponents_ for c in cals], (tmax, kmax), dtype=np.int64)
        return (*head, exps, _pad(coef, (tmax,)), intercept, *tail, np.float64(_POLY_CLIP))
    return (*head, _pad(coef, (kmax,)), intercept, *tail, np.bool_(family == "logistic"))


@njit(cache=True)
def _log1p_exp(y):  # pragma: no cover
    """log(1 + exp(y)) without overflow (numpy's ``logaddexp(0, y)``)."""
    return max(y, 0.0) + np.log1p(np.exp(-abs(y)))


@njit(cache=True)
def _shift(raw, members, ks, scale, gains, out):  # pragma: no cover
    for i in range(raw.shape[0]):
        for g in range(members.shape[0]):
            m = members[g]
            k = ks[g]
            total = 0.0
            for l in range(k):
                total += max(1.0 + raw[i, m, l] / scale[g], 0.0)
            v = 0.0
            for l in range(k):
                if total > 0.0:
                    v += gains[g, l] * (max(1.0 + raw[i, m, l] / scale[g], 0.0) / total)
                else:
                    v += gains[g, l] * (1.0 / k)
            out[i, m] = v


@njit(cache=True)
def _cpc(raw, members, ks, a, b, gains, out):  # pragma: no cover
    """p_l = s_l / sum s: directly while the largest y_l = a (f_l - b) is above -700 (no s_l
    underflows to zero unless it is negligible next to the largest), in the log domain below."""
    y = np.empty(raw.shape[2])
    for i in range(raw.shape[0]):
        for g in range(members.shape[0]):
            m = members[g]
            k = ks[g]
            top = -np.inf
            for l in range(k):
                y[l] = a[g] * (raw[i, m, l] - b[g])
                top = max(top, y[l])
            if top >= -700.0:
                for l in range(k):
                    y[l] = 1.0 / (1.0 + np.exp(-y[l]))
            else:
                top = -np.inf
                for l in range(k):
                    y[l] = -_log1p_exp(-y[l])
                    top = max(top, y[l])
                for l in range(k):
                    y[l] = np.exp(y[l] - top)
            total = 0.0
            for l in range(k):
                total += y[l]
            v = 0.0
            for l in range(k):
                v += (y[l] / total) * gains[g, l]
            out[i, m] = v


@njit(cache=True)
def _standardise(raw, i, m, k, mean, scale, g, x):  # pragma: no cover
    for l in range(k):
        x[l] = (raw[i, m, l] - mean[g, l]) / scale[g, l]


@njit(cache=True)
def _linear(raw, members, ks, mean, scale, coef, intercept, offset, out_scale, logistic,
            out):  # pragma: no cover
    x = np.empty(raw.shape[2])
    for i in range(raw.shape[0]):
        for g in range(members.shape[0]):
            m = members[g]
            k = ks[g]
            _standardise(raw, i, m, k, mean, scale, g, x)
            eta = 0.0
            for l in range(k):
                eta += x[l] * coef[g, l]
            eta += intercept[g]
            if logistic:
                eta = np.exp(-_log1p_exp(-eta))
            out[i, m] = offset[g] + out_scale[g] * eta


@njit(cache=True)
def _poly(raw, members, ks, mean, scale, exps, coef, intercept, offset, out_scale, clip,
          out):  # pragma: no cover
    """Each monomial is a product of powers read from a table (x_l^e for e up to the degree)."""
    x = np.empty(raw.shape[2])
    top = 1
    for e in exps.ravel():
        top = max(top, e)
    pw = np.ones((raw.shape[2], top + 1))
    for i in range(raw.shape[0]):
        for g in range(members.shape[0]):
            m = members[g]
            k = ks[g]
            _standardise(raw, i, m, k, mean, scale, g, x)
            for l in range(k):
                xl = min(max(x[l], -clip), clip)
                for e in range(1, top + 1):
                    pw[l, e] = xl ** e
            s = 0.0
            for t in range(exps.shape[1]):
                term = 1.0
                for l in range(k):
                    term *= pw[l, exps[g, t, l]]
                s += term * coef[g, t]
            out[i, m] = offset[g] + out_scale[g] * (s + intercept[g])


@njit(cache=True)
def _nn(raw, members, ks, mean, scale, w1, b1, w2, b2, offset, out_scale, out):  # pragma: no cover
    x = np.empty(raw.shape[2])
    for i in range(raw.shape[0]):
        for g in range(members.shape[0]):
            m = members[g]
            k = ks[g]
            _standardise(raw, i, m, k, mean, scale, g, x)
            s = 0.0
            for h in range(w1.shape[1]):
                z = 0.0
                for l in range(k):
                    z += x[l] * w1[g, h, l]
                s += np.tanh(z + b1[g, h]) * w2[g, h]
            out[i, m] = offset[g] + out_scale[g] * (s + b2[g])


#: family -> kernel(raw, members, ks, *params, out) (typed Any: mypy cannot see through njit)
_KERNELS: dict[str, Any] = {"shift": _shift, "cpc": _cpc, "linear": _linear, "logistic": _linear,
                            "poly": _poly, "nn": _nn}


class CalibrationStep:
    """All calibrators of an ensemble, grouped (see the module docstring).

    ``calibrators[m]`` turns member m's first ``n_classes[m]`` raw columns into its score.
    """

    def __init__(self, calibrators: Sequence[Calibrator], n_classes: Sequence[int]) -> None:
        if len(calibrators) != len(n_classes):
            raise ValueError("one class count per calibrator is needed")
        self.n_members = len(calibrators)
        by_family: dict[str, list[int]] = {}
        self.fallback: list[int] = []
        for m, cal in enumerate(calibrators):
            family = _family(cal)
            if family is None:
                self.fallback.append(m)
            else:
                by_family.setdefault(family, []).append(m)
        self.groups = [
            _Group(family=family, members=np.asarray(idx, dtype=np.int64),
                   k=np.asarray([n_classes[i] for i in idx], dtype=np.int64),
                   p=_stack(family, [calibrators[i] for i in idx], [int(n_classes[i]) for i in idx]))
            for family, idx in by_family.items()
        ]
        self._calibrators = list(calibrators)
        self._n_classes = [int(k) for k in n_classes]

    def apply(self, raw: Float64Array) -> Float64Array:
        """Member scores (n, M) from raw scores (n, M, K_max) (member m reads its first K_m columns)."""
        out = np.empty((raw.shape[0], self.n_members), dtype=np.float64)
        if raw.shape[0] == 0:
            return out
        raw = np.ascontiguousarray(raw, dtype=np.float64)
        for g in self.groups:
            _KERNELS[g.family](raw, g.members, g.k, *g.p, out)
        for m in self.fallback:
            out[:, m] = self._calibrators[m].transform(np.ascontiguousarray(raw[:, m, : self._n_classes[m]]))
        return out
