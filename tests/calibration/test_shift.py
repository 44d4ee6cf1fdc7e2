"""SHIFT: hand arithmetic, the member's R, clipping and the zero-sum guard."""

from __future__ import annotations

import numpy as np
import pytest

from tunemix.core.calibration import CalibrationError, ShiftCalibrator

OFF = np.array([0, 3], dtype=np.int64)
GAINS = np.array([0.0, 1.0, 3.0])


def test_hand_values_with_r_from_calibration_part():
    raw = np.array([[2.0, -4.0, 0.0], [1.0, 1.0, 1.0], [-1.0, 0.0, 4.0]])
    c = ShiftCalibrator().fit(raw, [0, 1, 2], OFF, GAINS)
    assert c.scale_ == 4.0  # max |f|
    # row 0: f' = (1.5, 0, 1), p = (0.6, 0, 0.4), v = 0.4 * 3
    # row 1: f' = (1.25,)*3, uniform, v = 4/3; row 2: f' = (0.75, 1, 2), p = (.2, .2667, .5333)
    np.testing.assert_allclose(c.transform(raw), [1.2, 4.0 / 3.0, 1.0 / 3.75 + 3 * 2.0 / 3.75])
    np.testing.assert_allclose(c.predict_proba(raw).sum(axis=1), 1.0)


def test_member_scale_is_used_unchanged():
    raw = np.array([[1.0, 0.0, -1.0], [0.0, 0.0, 0.0], [0.5, 0.5, 0.5]])
    c = ShiftCalibrator(scale=10.0).fit(raw, [0, 1, 2], OFF, GAINS)
    assert c.scale == 10.0 and c.scale_ == 10.0
    np.testing.assert_allclose(c.transform([[1.0, 0.0, -1.0]]), [(1.0 + 3 * 0.9) / 3.0])


def test_clipping_and_zero_sum_guard_outside_the_calibration_range():
    c = ShiftCalibrator(scale=1.0).fit(np.eye(3), [0, 1, 2], OFF, GAINS)
    # f' = (0, 0, 0) after clipping -> uniform -> mean gain
    out = c.transform([[-5.0, -2.0, -1.0], [-3.0, 1.0, -3.0]])
    np.testing.assert_allclose(out, [4.0 / 3.0, 1.0])
    assert np.all(np.isfinite(out))


def test_degenerate_inputs():
    with pytest.raises(CalibrationError, match="R = max"):
        ShiftCalibrator().fit(np.zeros((3, 3)), [0, 1, 2], OFF, GAINS)
    # constant non-zero raw, single class: documented fallback, constant finite scores
    c = ShiftCalibrator().fit(np.full((3, 3), 2.0), [1, 1, 1], OFF, GAINS)
    np.testing.assert_allclose(c.transform(np.full((2, 3), 2.0)), [4.0 / 3.0] * 2)
    with pytest.raises(ValueError, match="scale"):
        ShiftCalibrator(scale=0.0).fit(np.eye(3), [0, 1, 2], OFF, GAINS)


def test_monotone_in_a_common_shift():
    # v(f + c 1) is a ratio of two affine functions of c: monotone while f' > 0
    c = ShiftCalibrator(scale=10.0).fit(np.eye(3), [0, 1, 2], OFF, GAINS)
    f = np.array([2.0, -1.0, 3.0])
    values = c.transform(f[None, :] + np.linspace(-5, 5, 41)[:, None])
    d = np.diff(values)
    assert np.all(d >= -1e-12) or np.all(d <= 1e-12)


def test_input_errors_name_the_argument():
    c = ShiftCalibrator()
    with pytest.raises(ValueError, match="not fitted"):
        c.transform(np.eye(3))
    c.fit(np.eye(3), [0, 1, 2], OFF, GAINS)
    with pytest.raises(ValueError, match="K=3"):
        c.transform(np.eye(4))
    with pytest.raises(ValueError, match="NaN"):
        c.transform([[np.nan, 0.0, 0.0]])
    with pytest.raises(ValueError, match="labels"):
        ShiftCalibrator().fit(np.eye(3), [0, 1, 3], OFF, GAINS)
    with pytest.raises(ValueError, match="gains"):
        ShiftCalibrator().fit(np.eye(3), [0, 1, 2], OFF, [0.0, 1.0])
    with pytest.raises(ValueError, match="query_offsets"):
        ShiftCalibrator().fit(np.eye(3), [0, 1, 2], [0, 2], GAINS)
