"""CalibrationStep against its twin, every calibrator's own ``transform``, member by member.

Real calibrators of every family (fitted on small random members with K = 2, 3 and 5 classes)
share one step; the raw scores include zeros and magnitudes up to 1e7 (sigmoids under- and
overflow, SHIFT's clipped sum reaches 0, polynomial inputs hit the clip).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self

import numpy as np
import numpy.typing as npt
import pytest

from tunemix.core.calibration.base import Calibrator, CalibratorParams, validate_raw
from tunemix.core.calibration.registry import make_calibrator
from tunemix.core.scoring import runtime
from tunemix.core.scoring.calibration_step import CalibrationStep

from ..calibration.naive import synthetic_member

SPECS = (
    "shift",
    "cpc:ls",
    "cpc:ewls(C=2)",
    "cpc:el",
    "cpc:ell",
    "cpc:sndcg(sigma=0.1)",
    "rbc:linear:gain",
    "rbc:linear:ndcg",
    "rbc:logistic:gain",
    "rbc:logistic:ndcg",
    "rbc:poly2:gain",
    "rbc:poly3:ndcg",
    "rbc:poly4:gain",
    "rbc:nn:gain",
    "rbc:nn(hidden=3):ndcg",
)
KS = (2, 3, 5)
TOL = {"rtol": 1e-12, "atol": 1e-12}


class _Tilt(Calibrator):
    """A calibrator of a kind the step does not know: v = sum_l w_l f_l^2 (falls back to transform)."""

    kind = "tilt"

    def __init__(self, weights: npt.ArrayLike) -> None:
        self.weights_ = np.asarray(weights, dtype=np.float64)

    @property
    def name(self) -> str:
        return "tilt"

    def fit(self, raw: npt.ArrayLike, labels: npt.ArrayLike, query_offsets: npt.ArrayLike,
            gains: npt.ArrayLike) -> Self:
        return self

    def transform(self, raw: npt.ArrayLike) -> npt.NDArray[np.float64]:
        arr = validate_raw(raw, n_classes=self.weights_.shape[0])
        return np.ascontiguousarray((arr * arr) @ self.weights_)

    def to_params(self) -> CalibratorParams:
        return {"kind": self.kind, "weights_": self.weights_.copy()}

    @classmethod
    def from_params(cls, d: Mapping[str, Any]) -> Self:
        return cls(d["weights_"])


def _fitted(spec: str, k: int, seed: int) -> Calibrator:
    raw, labels, off, gains = synthetic_member(12, 10, k, margin=1.0, noise=1.5, seed=seed)
    return make_calibrator(spec).fit(raw, labels, off, gains)


@pytest.fixture(scope="module")
def members() -> tuple[list[Calibrator], list[int]]:
    """Every spec with every K, in a shuffled order (families and class counts interleaved),
    and two calibrators of an unknown kind."""
    cals, ks = [], []
    for i, spec in enumerate(SPECS):
        for j, k in enumerate(KS):
            cals.append(_fitted(spec, k, seed=10 * i + j))
            ks.append(k)
    cals += [_Tilt([0.5, -1.0, 2.0]), _Tilt([1.0, 0.25])]
    ks += [3, 2]
    order = np.random.default_rng(0).permutation(len(cals))
    return [cals[i] for i in order], [ks[i] for i in order]


def _raw_block(n: int, ks: list[int], seed: int) -> np.ndarray:
    """(n, M, 5) raw scores: sign * 10^U(-3, 7), zeros, standard normals, and rows whose classes
    are all hugely negative or positive; NaN in the columns beyond a member's K (never read)."""
    rng = np.random.default_rng(seed)
    m = len(ks)
    raw = rng.choice([-1.0, 1.0], size=(n, m, 5)) * 10.0 ** rng.uniform(-3.0, 7.0, size=(n, m, 5))
    normal = rng.random((n, m)) < 0.4
    raw[normal] = rng.normal(0.0, 2.0, size=(int(normal.sum()), 5))
    raw[rng.random((n, m, 5)) < 0.1] = 0.0
    raw[rng.random((n, m)) < 0.05] = 0.0
    for value in (-1e4, -1e7, 1e4, 1e7, -800.0):
        raw[rng.random((n, m)) < 0.03] = value
    for i, k in enumerate(ks):
        raw[:, i, k:] = np.nan
    return raw


def _expected(cals: list[Calibrator], ks: list[int], raw: np.ndarray) -> np.ndarray:
    out = np.empty((raw.shape[0], len(cals)))
    for m, (cal, k) in enumerate(zip(cals, ks, strict=True)):
        out[:, m] = cal.transform(np.ascontiguousarray(raw[:, m, :k]))
    return out


def test_every_family_and_class_count_equals_its_own_transform(members) -> None:
    cals, ks = members
    step = CalibrationStep(cals, ks)
    assert len(step.fallback) == 2
    for n, seed in ((1, 1), (7, 2), (300, 3)):
        raw = _raw_block(n, ks, seed)
        got = step.apply(raw)
        assert got.shape == (n, len(cals)) and got.dtype == np.float64
        assert np.all(np.isfinite(got))
        want = _expected(cals, ks, raw)
        for m, cal in enumerate(cals):
            np.testing.assert_allclose(got[:, m], want[:, m], **TOL, err_msg=f"member {m}: {cal.name}, K={ks[m]}")


def test_each_family_alone_and_one_member(members) -> None:
    cals, ks = members
    raw = _raw_block(50, ks, 4)
    for m in range(len(cals)):
        step = CalibrationStep([cals[m]], [ks[m]])
        got = step.apply(np.ascontiguousarray(raw[:, m : m + 1, : ks[m]]))
        np.testing.assert_allclose(got[:, 0], cals[m].transform(raw[:, m, : ks[m]]), **TOL, err_msg=cals[m].name)


def test_cpc_at_the_edges_of_the_exponential(members) -> None:
    """y = a (f - b) chosen per member: the largest y just above -700 with another below exp's
    overflow (-709.8), all classes far below, far above, on both sides, ties."""
    cals, ks = members
    cpc = [m for m, c in enumerate(cals) if c.kind == "cpc" and c.a_ > 0]
    assert len(cpc) == 15
    ys = np.array([[-698.0, -713.0], [-690.0, -709.9], [-30.0, -800.0], [-705.0, -705.5], [800.0, -800.0],
                   [-1e4, -1e4 + 1.0], [0.0, -745.0], [37.0, 36.0], [-36.0, -37.5], [710.0, 709.0],
                   [-1e6, -1e6], [0.0, 0.0]])
    raw = np.zeros((ys.shape[0], len(cpc), 5))
    for i, m in enumerate(cpc):
        cal = cals[m]
        y = np.tile(ys, (1, 3))[:, : ks[m]]
        raw[:, i, : ks[m]] = cal.b_ + y / cal.a_
    got = CalibrationStep([cals[m] for m in cpc], [ks[m] for m in cpc]).apply(raw)
    for i, m in enumerate(cpc):
        np.testing.assert_allclose(got[:, i], cals[m].transform(raw[:, i, : ks[m]]), **TOL, err_msg=cals[m].name)


def test_unknown_calibrator_falls_back_to_its_transform() -> None:
    cals: list[Calibrator] = [_Tilt([1.0, 2.0]), _Tilt([3.0, 0.5, -1.0])]
    step = CalibrationStep(cals, [2, 3])
    assert step.fallback == [0, 1]
    raw = np.random.default_rng(5).normal(size=(9, 2, 3))
    got = step.apply(raw)
    np.testing.assert_array_equal(got[:, 0], (raw[:, 0, :2] ** 2) @ [1.0, 2.0])
    np.testing.assert_array_equal(got[:, 1], (raw[:, 1, :3] ** 2) @ [3.0, 0.5, -1.0])


def test_zero_documents(members) -> None:
    cals, ks = members
    out = CalibrationStep(cals, ks).apply(np.zeros((0, len(cals), 5)))
    assert out.shape == (0, len(cals)) and out.dtype == np.float64


def test_mismatched_lengths_are_refused(members) -> None:
    cals, ks = members
    with pytest.raises(ValueError, match="class count"):
        CalibrationStep(cals, ks[:-1])
    k_wrong = [k + 1 if c.kind == "cpc" else k for c, k in zip(cals, ks, strict=True)]
    with pytest.raises(ValueError, match="fitted on K="):
        CalibrationStep(cals, k_wrong)


def test_same_bits_with_one_and_two_threads(members, monkeypatch: pytest.MonkeyPatch) -> None:
    """Big enough for the parallel path; a length that is not a multiple of any block size."""
    cals, ks = members
    step = CalibrationStep(cals, ks)
    raw = _raw_block(4001, ks, 6)
    sums = np.cumsum(np.random.default_rng(8).normal(0.0, 3.0, size=(raw.shape[0], 6, 5)), axis=1)
    lo = np.arange(len(cals)) % 3
    hi = lo + 1 + np.arange(len(cals)) % 3
    monkeypatch.setattr(runtime, "_scoring_threads", 1)
    one, one_sums = step.apply(raw), step.apply_sums(sums, lo, hi)
    monkeypatch.setattr(runtime, "_scoring_threads", 2)
    two, two_sums = step.apply(raw), step.apply_sums(sums, lo, hi)
    np.testing.assert_array_equal(one, two)
    np.testing.assert_array_equal(one_sums, two_sums)
    np.testing.assert_allclose(two, _expected(cals, ks, raw), **TOL)


def test_running_sums_equal_the_gathered_raw_block(members) -> None:
    """apply_sums reads sums[:, hi] - sums[:, lo] in place: the same bits as apply on the gathered block."""
    cals, ks = members
    step = CalibrationStep(cals, ks)
    rng = np.random.default_rng(7)
    n, c = 203, 9
    sums = np.cumsum(rng.normal(0.0, 3.0, size=(n, c, 5)), axis=1)
    lo = rng.integers(0, c - 1, size=len(cals))
    hi = np.minimum(lo + rng.integers(0, 4, size=len(cals)), c - 1)  # lo == hi: an empty snapshot
    raw = sums[:, hi, :] - sums[:, lo, :]
    got = step.apply_sums(sums, lo, hi)
    np.testing.assert_array_equal(got, step.apply(raw))
    np.testing.assert_allclose(got, _expected(cals, ks, raw), **TOL)
    assert step.apply_sums(sums[:0], lo, hi).shape == (0, len(cals))
    with pytest.raises(ValueError, match="checkpoint"):
        step.apply_sums(sums, lo, hi + c)
    with pytest.raises(ValueError, match="one checkpoint per member"):
        step.apply_sums(sums, lo[:-1], hi)
    with pytest.raises(ValueError, match="shape"):
        step.apply(raw[:, :-1])


def test_polynomials_of_one_source_share_their_monomials_with_the_same_bits() -> None:
    """Regression calibrators fitted on the same member standardise its scores alike: the plan
    puts the polynomials (degrees 2 to 5, two targets) of one source and one standardisation in
    one group, whose monomials are the union of theirs. Each member's scores are those it gets
    alone (to the bit) and its transform's; a second source makes a second group, and a
    polynomial fitted on other data (another standardisation) one of its own."""
    specs = ["rbc:poly2:gain", "rbc:poly3:ndcg", "rbc:linear:gain", "rbc:poly5:gain", "rbc:poly4:ndcg",
             "rbc:poly2:ndcg", "cpc:ls", "rbc:poly4:gain"]
    raw_fit, labels, off, gains = synthetic_member(12, 10, 3, margin=1.0, noise=1.5, seed=21)
    cals = [make_calibrator(spec).fit(raw_fit, labels, off, gains) for spec in specs]
    cals.append(_fitted("rbc:poly3:gain", 3, seed=22))
    ks = [3] * len(cals)
    step = CalibrationStep(cals, ks)
    rng = np.random.default_rng(5)
    n, c = 150, 4
    sums = np.cumsum(rng.normal(0.0, 3.0, size=(n, c, 3)), axis=1)
    sums[rng.random(n) < 0.1] *= 1e4  # beyond the clip
    lo = np.array([0] * 5 + [1] * 4)  # two sources among the first eight
    hi = np.array([2] * 5 + [3] * 4)
    plan = step.plan(lo, hi, n_rows=c)
    poly_rows = [g for g in range(plan.head.shape[0]) if step.families[plan.head[g, 1]].startswith("poly")]
    groups = {int(plan.ip[plan.head[g, 4]]) for g in poly_rows}
    assert len(poly_rows) == 7 and len(groups) == 3
    got = step.apply_plan(sums, plan)
    raw = sums[:, hi, :] - sums[:, lo, :]
    for m, cal in enumerate(cals):
        alone = CalibrationStep([cal], [3]).apply(np.ascontiguousarray(raw[:, m:m + 1, :]))[:, 0]
        np.testing.assert_array_equal(got[:, m], alone, err_msg=cal.name)
        np.testing.assert_allclose(got[:, m], cal.transform(np.ascontiguousarray(raw[:, m, :])), **TOL)
