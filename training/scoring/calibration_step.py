"""Every member's calibrator in one step: members grouped by calibrator family and shape, each
group applied to all of its members at once as array operations.

At scoring time member m's raw K-vectors (``training.scoring.ensemble_model``) become one score
per document through its own calibrator (Tune and mix, Sect. 5). Calling 90 calibrators one by
one costs milliseconds of Python overhead for a 100-document list; here a group of G members
with the same family and shape is one set of numpy operations on a (n, G, K) block:

- ``shift``:  p_l = max(0, 1 + f_l / R) / sum, uniform where the sum is 0; v = sum_l z_l p_l.
- ``cpc``:    p_l = s(f_l) / sum_l' s(f_l'), s(f) = 1 / (1 + exp(-a (f - b))) (log-sum-exp); v = z . p.
- ``rbc``:    x = (f - mean) / scale; linear g = x . w + c; logistic g = sigmoid(x . w + c);
              poly g = phi(clip(x)) . w + c (monomials of total degree 1..D); nn
              g = tanh(x W1^T + b1) . w2 + b2; v = offset + out_scale * g.

The formulas are the calibrators' own ``transform`` (``training.calibration``), which stays the
reference: the tests compare the two to 1e-12. A calibrator of a kind not listed falls back to
its own ``transform``. Parameters are stacked once, when the model loads.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from training.calibration.base import Calibrator
from training.calibration.regression_calibration import _POLY_CLIP, RegressionCalibrator
from training.calibration.regression_models import unpack_network
from training.calibration.shift import ShiftCalibrator
from training.calibration.sigmoid_calibration import SigmoidCalibrator

Float64Array = npt.NDArray[np.float64]


@dataclass
class _Group:
    """Members sharing a family and shape; ``p`` holds their parameters stacked along axis 0."""

    family: str
    members: npt.NDArray[np.int64]
    k: int
    p: dict[str, Any] = field(default_factory=dict)


def _key(cal: Calibrator, k: int) -> tuple[Any, ...] | None:
    if isinstance(cal, ShiftCalibrator):
        return ("shift", k)
    if isinstance(cal, SigmoidCalibrator):
        return ("cpc", k)
    if isinstance(cal, RegressionCalibrator):
        if cal.model == "poly":
            return ("poly", k, cal.exponents_.tobytes(), cal.exponents_.shape)
        if cal.model == "nn":
            return ("nn", k, int(cal.hidden))
        return (cal.model, k)
    return None


def _stack(family: str, cals: Sequence[Any], k: int) -> dict[str, Any]:
    if family == "shift":
        return {"scale": np.array([c.scale_ for c in cals]), "gains": np.stack([c.gains_ for c in cals])}
    if family == "cpc":
        return {"a": np.array([c.a_ for c in cals]), "b": np.array([c.b_ for c in cals]),
                "gains": np.stack([c.gains_ for c in cals])}
    p: dict[str, Any] = {
        "mean": np.stack([c.mean_ for c in cals]),
        "scale": np.stack([c.scale_ for c in cals]),
        "offset": np.array([c.output_offset_ for c in cals]),
        "out_scale": np.array([c.output_scale_ for c in cals]),
    }
    if family == "nn":
        nets = [unpack_network(c.coef_, k, int(c.hidden)) for c in cals]
        p.update(w1=np.stack([n[0] for n in nets]), b1=np.stack([n[1] for n in nets]),
                 w2=np.stack([n[2] for n in nets]), b2=np.array([n[3] for n in nets]))
    else:
        p.update(coef=np.stack([c.coef_ for c in cals]), intercept=np.array([c.intercept_ for c in cals]))
        if family == "poly":
            p["exponents"] = np.asarray(cals[0].exponents_, dtype=np.int64)
    return p


def _apply_group(g: _Group, raw: Float64Array) -> Float64Array:
    """Scores (n, G) of group ``g`` from its members' raw vectors ``raw`` (n, G, K)."""
    p = g.p
    if g.family == "shift":
        shifted = np.maximum(1.0 + raw / p["scale"][None, :, None], 0.0)
        total = shifted.sum(axis=2, keepdims=True)
        with np.errstate(invalid="ignore", divide="ignore"):
            prob = np.where(total > 0.0, shifted / total, 1.0 / g.k)
        return np.einsum("ngk,gk->ng", prob, p["gains"])
    if g.family == "cpc":
        u = -np.logaddexp(0.0, -p["a"][None, :, None] * (raw - p["b"][None, :, None]))
        u -= u.max(axis=2, keepdims=True)
        e = np.exp(u)
        prob = e / e.sum(axis=2, keepdims=True)
        return np.einsum("ngk,gk->ng", prob, p["gains"])
    x = (raw - p["mean"][None]) / p["scale"][None]
    if g.family == "nn":
        hidden = np.tanh(np.einsum("ngk,ghk->ngh", x, p["w1"]) + p["b1"][None])
        out = np.einsum("ngh,gh->ng", hidden, p["w2"]) + p["b2"][None]
    elif g.family == "poly":
        xc = np.clip(x, -_POLY_CLIP, _POLY_CLIP)
        exps = p["exponents"]
        design = np.ones((*x.shape[:2], exps.shape[0]), dtype=np.float64)
        for t, row in enumerate(exps):
            for j in np.flatnonzero(row):
                design[:, :, t] *= xc[:, :, j] ** int(row[j])
        out = np.einsum("ngt,gt->ng", design, p["coef"]) + p["intercept"][None]
    else:
        eta = np.einsum("ngk,gk->ng", x, p["coef"]) + p["intercept"][None]
        out = np.exp(-np.logaddexp(0.0, -eta)) if g.family == "logistic" else eta
    return p["offset"][None] + p["out_scale"][None] * out


class CalibrationStep:
    """All calibrators of an ensemble, grouped (see the module docstring).

    ``calibrators[m]`` turns member m's first ``n_classes[m]`` raw columns into its score.
    """

    def __init__(self, calibrators: Sequence[Calibrator], n_classes: Sequence[int]) -> None:
        if len(calibrators) != len(n_classes):
            raise ValueError("one class count per calibrator is needed")
        self.n_members = len(calibrators)
        by_key: dict[tuple[Any, ...], list[int]] = {}
        self.fallback: list[int] = []
        for m, (cal, k) in enumerate(zip(calibrators, n_classes, strict=True)):
            key = _key(cal, int(k))
            if key is None:
                self.fallback.append(m)
            else:
                by_key.setdefault(key, []).append(m)
        self.groups = [
            _Group(family=key[0], members=np.asarray(idx, dtype=np.int64), k=int(key[1]),
                   p=_stack(key[0], [calibrators[i] for i in idx], int(key[1])))
            for key, idx in by_key.items()
        ]
        self._calibrators = list(calibrators)
        self._n_classes = [int(k) for k in n_classes]

    def apply(self, raw: Float64Array) -> Float64Array:
        """Member scores (n, M) from raw scores (n, M, K_max) (member m reads its first K_m columns)."""
        out = np.empty((raw.shape[0], self.n_members), dtype=np.float64)
        if raw.shape[0] == 0:
            return out
        for g in self.groups:
            out[:, g.members] = _apply_group(g, raw[:, g.members, : g.k])
        for m in self.fallback:
            out[:, m] = self._calibrators[m].transform(np.ascontiguousarray(raw[:, m, : self._n_classes[m]]))
        return out
