"""CPC: monotonicity, degenerate data, recovery of a known sigmoid, the gain over SHIFT."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from tunemix.core.calibration import CalibrationError, ShiftCalibrator, SigmoidCalibrator
from tunemix.core.calibration.sigmoid_calibration import sigmoid_class_probabilities

from .naive import naive_expected_gain, naive_ndcg_at, synthetic_member


def _fitted(a: float, b: float, k: int) -> SigmoidCalibrator:
    c = SigmoidCalibrator(tcf="ls")
    c.a_, c.b_, c.objective_ = a, b, 0.0
    c.gains_ = np.asarray(2.0 ** np.arange(k) - 1.0, dtype=np.float64)
    return c


finite = st.floats(-20, 20, allow_nan=False)


@settings(max_examples=60, deadline=None)
@given(
    row=arrays(np.float64, st.integers(2, 5), elements=finite),
    a=st.floats(0.0, 5.0),
    b=st.floats(-5.0, 5.0),
    delta=st.floats(0.0, 10.0),
)
def test_score_monotone_in_the_top_and_bottom_class(row, a, b, delta):
    # dv/df_m = a (1 - s_m) p_m (z_m - v): >= 0 for the top-gain class, <= 0 for gain 0
    c = _fitted(a, b, row.shape[0])
    base = c.transform(row[None, :])[0]
    up = row.copy()
    up[-1] += delta
    down = row.copy()
    down[0] += delta
    assert c.transform(up[None, :])[0] >= base - 1e-9
    assert c.transform(down[None, :])[0] <= base + 1e-9
    assert base == pytest.approx(naive_expected_gain(row.tolist(), a, b, c.gains_.tolist()))


@settings(max_examples=60, deadline=None)
@given(
    row=arrays(np.float64, st.integers(2, 5), elements=finite),
    a=st.floats(0.01, 5.0),
    b=st.floats(-5.0, 5.0),
)
def test_common_shift_monotone_for_comonotone_raw_vectors(row, a, b):
    # dv/dc = a Cov_p(1 - s, z) <= 0 when f is ordered like the gains (Chebyshev's inequality)
    row = np.sort(row)
    c = _fitted(a, b, row.shape[0])
    values = c.transform(row[None, :] + np.linspace(-10, 10, 81)[:, None])
    assert np.all(np.diff(values) <= 1e-9)


@settings(max_examples=40, deadline=None)
@given(a=st.floats(0.01, 5.0), b=st.floats(-3.0, 3.0))
def test_binary_member_score_monotone_in_its_expected_gain(a, b):
    # K = 2, antisymmetric raw (f_0 = -f_1, as AdaBoost.MH gives): SHIFT's expected gain is
    # (1 + f_1/R)/2, and the CPC score must order documents the same way.
    f1 = np.linspace(-3, 3, 61)
    raw = np.stack([-f1, f1], axis=1)
    shift = ShiftCalibrator(scale=3.0).fit(raw, (f1 > 0).astype(int), [0, 61], [0.0, 1.0])
    cpc = _fitted(a, b, 2)
    order = np.argsort(shift.transform(raw))
    assert np.all(np.diff(cpc.transform(raw)[order]) >= -1e-12)


def test_probabilities_are_stable_for_huge_inputs():
    p = sigmoid_class_probabilities(np.array([[1e6, -1e6, 0.0], [-1e300, -1e300, 1e300]]), 3.0, 0.5)
    assert np.all(np.isfinite(p))
    np.testing.assert_allclose(p.sum(axis=1), 1.0)


@pytest.mark.parametrize("tcf", ["ls", "ewls", "el", "ell", "sndcg"])
def test_degenerate_calibration_sets_raise(tcf):
    raw, labels, off, gains = synthetic_member(5, 6, 3, margin=1.0, noise=1.0, seed=1)
    with pytest.raises(CalibrationError, match="single class"):
        SigmoidCalibrator(tcf=tcf).fit(raw, np.ones_like(labels), off, gains)
    with pytest.raises(CalibrationError, match="same raw vector"):
        SigmoidCalibrator(tcf=tcf).fit(np.full_like(raw, 0.3), labels, off, gains)


def test_recovers_a_known_sigmoid():
    # labels drawn from the CPC model itself with a = 1.5, b = 0.5: LS is the likelihood
    rng = np.random.default_rng(5)
    n, k = 20_000, 3
    raw = rng.normal(0.0, 2.0, size=(n, k))
    p = sigmoid_class_probabilities(raw, 1.5, 0.5)
    labels = (rng.random(n)[:, None] > np.cumsum(p, axis=1)).sum(axis=1)
    c = SigmoidCalibrator(tcf="ls").fit(raw, labels, [0, n], [0.0, 1.0, 3.0])
    assert c.a_ == pytest.approx(1.5, rel=0.1)
    assert c.b_ == pytest.approx(0.5, abs=0.25)


def test_cpc_ls_beats_shift_on_an_overconfident_member():
    raw, labels, off, gains = synthetic_member(300, 20, 5, margin=4.0, noise=3.0, seed=2)
    half = 150 * 20
    fit_part = (raw[:half], labels[:half], off[:151], gains)
    test_raw, test_labels, test_off = raw[half:], labels[half:], off[150:] - half
    shift = ShiftCalibrator().fit(*fit_part)
    cpc = SigmoidCalibrator(tcf="ls").fit(*fit_part)

    def log_loss(p):
        return float(-np.mean(np.log(np.clip(p[np.arange(len(p)), test_labels], 1e-12, 1))))

    ll_shift = log_loss(shift.predict_proba(test_raw))
    ll_cpc = log_loss(cpc.predict_proba(test_raw))
    ndcg_shift = naive_ndcg_at(test_labels, shift.transform(test_raw), test_off)
    ndcg_cpc = naive_ndcg_at(test_labels, cpc.transform(test_raw), test_off)
    assert ll_cpc < ll_shift - 0.05, (ll_cpc, ll_shift)
    assert ndcg_cpc > ndcg_shift - 0.01, (ndcg_cpc, ndcg_shift)


@pytest.mark.parametrize("tcf", ["ewls", "el", "ell", "sndcg"])
def test_every_tcf_fits_and_ranks_better_than_chance(tcf):
    raw, labels, off, gains = synthetic_member(60, 15, 5, margin=2.0, noise=2.0, seed=3)
    c = SigmoidCalibrator(tcf=tcf).fit(raw, labels, off, gains)
    scores = c.transform(raw)
    assert np.all(np.isfinite(scores)) and c.a_ >= 0.0
    rng = np.random.default_rng(0)
    assert naive_ndcg_at(labels, scores, off) > naive_ndcg_at(labels, rng.random(len(labels)), off)


def test_parameter_errors():
    raw, labels, off, gains = synthetic_member(5, 6, 3, margin=1.0, noise=1.0, seed=1)
    with pytest.raises(ValueError, match="tcf"):
        SigmoidCalibrator(tcf="nope").fit(raw, labels, off, gains)
    with pytest.raises(ValueError, match="sigma"):
        SigmoidCalibrator(tcf="sndcg", sigma=0.0).fit(raw, labels, off, gains)


def test_query_subsample_keeps_whole_queries():
    from tunemix.core.calibration.sigmoid_calibration import query_subsample

    off = np.array([0, 3, 5, 9, 10, 14], dtype=np.int64)
    assert query_subsample(off, 14) is None
    sub = query_subsample(off, 7)  # stride 2: queries 0, 2, 4
    assert sub is not None
    rows, sub_off = sub
    assert rows.tolist() == [0, 1, 2, 5, 6, 7, 8, 10, 11, 12, 13]
    assert sub_off.tolist() == [0, 3, 7, 11]


def test_grid_on_a_subsample_gives_the_same_fit_as_on_all_documents(monkeypatch):
    import tunemix.core.calibration.sigmoid_calibration as sc

    raw, labels, off, gains = synthetic_member(100, 20, 4, margin=2.0, noise=2.0, seed=4)
    full = SigmoidCalibrator(tcf="ls").fit(raw, labels, off, gains)
    monkeypatch.setattr(sc, "_GRID_MAX_DOCS", 500)
    sub = SigmoidCalibrator(tcf="ls").fit(raw, labels, off, gains)
    assert sub.a_ == pytest.approx(full.a_, rel=1e-3)
    assert sub.b_ == pytest.approx(full.b_, rel=1e-3, abs=1e-3)


def test_an_optimisation_without_finite_values_raises_calibration_error(monkeypatch):
    import tunemix.core.calibration.target_functions as tf

    def broken(self, a, b):
        return float("nan"), np.array([np.nan, np.nan])

    monkeypatch.setattr(tf.TargetCalibrationFunction, "value_and_grad", broken)
    raw, labels, off, gains = synthetic_member(10, 10, 3, margin=1.0, noise=1.0, seed=1)
    with pytest.raises(CalibrationError, match="finite"):
        SigmoidCalibrator(tcf="ls").fit(raw, labels, off, gains)
