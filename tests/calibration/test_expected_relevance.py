"""McRank's expected relevance (softmax and ordinal links), the ordinal transform in front of a
calibrator, and the identity calibrator: hand arithmetic, a slow twin, params round trips."""

from __future__ import annotations

import numpy as np
import pytest

from tunemix.core.artifact import join_arrays, split_arrays
from tunemix.core.calibration.expected_relevance import (
    ExpectedRelevanceCalibrator,
    IdentityCalibrator,
    OrdinalCalibrator,
    ordinal_probabilities,
    softmax_probabilities,
)
from tunemix.core.calibration.registry import calibrator_from_params, make_calibrator
from tunemix.core.scoring.calibration_step import CalibrationStep


def naive_ordinal(g: np.ndarray) -> np.ndarray:
    """One document at a time: P(l <= k) = 1 / (1 + e^-G_k), differences, clip, renormalise."""
    out = np.zeros((g.shape[0], g.shape[1] + 1))
    for i, row in enumerate(g):
        with np.errstate(over="ignore"):
            cdf = [0.0] + [1.0 / (1.0 + np.exp(-v)) for v in row] + [1.0]
        p = [max(cdf[k + 1] - cdf[k], 0.0) for k in range(len(row) + 1)]
        out[i] = np.array(p) / sum(p)
    return out


def test_ordinal_probabilities_hand_and_twin() -> None:
    s = 1.0 / (1.0 + np.exp(-1.0))
    np.testing.assert_allclose(ordinal_probabilities(np.array([[1.0]])), [[s, 1.0 - s]])
    # crossing cumulative models: P(1) = s(-1) - s(1) < 0 is clipped, the rest renormalised
    p = ordinal_probabilities(np.array([[1.0, -1.0]]))
    np.testing.assert_allclose(p, [[s / (s + s), 0.0, s / (s + s)]])
    rng = np.random.default_rng(0)
    g = rng.normal(scale=3, size=(200, 3))
    g[:5] = [800.0, -800.0, 0.0]  # no overflow
    p = ordinal_probabilities(g)
    np.testing.assert_allclose(p, naive_ordinal(g), atol=1e-12)
    assert np.all(p >= 0) and np.allclose(p.sum(axis=1), 1.0)


def test_expected_relevance_hand_arithmetic() -> None:
    raw = np.array([[0.0, 0.0, np.log(2.0)]])  # softmax (1/4, 1/4, 1/2)
    lin = make_calibrator("er:softmax:linear").fit(raw, [0], [0, 1], [0.0, 1.0, 3.0])
    gain = make_calibrator("er:softmax:gain").fit(raw, [0], [0, 1], [0.0, 1.0, 3.0])
    np.testing.assert_allclose(lin.transform(raw), [0.25 + 1.0])
    np.testing.assert_allclose(gain.transform(raw), [0.25 + 1.5])
    np.testing.assert_allclose(softmax_probabilities(raw), [[0.25, 0.25, 0.5]])
    ordinal = make_calibrator("er:ordinal:gain").fit(np.zeros((2, 2)), [0, 2], [0, 2], [0.0, 1.0, 3.0])
    np.testing.assert_allclose(ordinal.transform([[0.0, 0.0]]), [0.5 * 3.0])  # P = (1/2, 0, 1/2)
    with pytest.raises(ValueError, match="link"):
        make_calibrator("er:probit:linear")


def test_ordinal_wrapper_is_its_inner_calibrator_on_probabilities() -> None:
    rng = np.random.default_rng(1)
    g = rng.normal(size=(300, 2))
    labels = rng.integers(0, 3, 300)
    offsets = np.arange(0, 301, 30)
    gains = np.array([0.0, 1.0, 3.0])
    wrapped = make_calibrator("ordinal+rbc:linear:gain").fit(g, labels, offsets, gains)
    inner = make_calibrator("rbc:linear:gain").fit(ordinal_probabilities(g), labels, offsets, gains)
    np.testing.assert_allclose(wrapped.transform(g), inner.transform(ordinal_probabilities(g)), atol=1e-12)
    assert wrapped.name == "ordinal+rbc:linear:gain" and isinstance(wrapped, OrdinalCalibrator)


@pytest.mark.parametrize("spec", ["er:softmax:linear", "er:ordinal:gain", "ordinal+cpc:ls", "ordinal+shift",
                                  "identity"])
def test_params_round_trip_and_scoring_step(spec: str) -> None:
    rng = np.random.default_rng(2)
    k_raw = 1 if spec == "identity" else 2
    raw = rng.normal(size=(120, k_raw))
    labels = rng.integers(0, 3 if spec != "er:softmax:linear" else 2, 120)
    gains = np.array([0.0, 1.0, 3.0])[: labels.max() + 1] if spec != "er:softmax:linear" else np.array([0.0, 1.0])
    cal = make_calibrator(spec).fit(raw, labels, np.arange(0, 121, 12), gains)
    arrays: dict[str, np.ndarray] = {}
    doc = split_arrays(cal.to_params(), "c", arrays)
    again = calibrator_from_params(join_arrays(doc, arrays))
    assert again.name == cal.name == make_calibrator(cal.name).name
    np.testing.assert_array_equal(again.transform(raw), cal.transform(raw))
    # the scoring step's kernels (families identity, er_softmax, er_ordinal) against the transform
    step = CalibrationStep([again], [k_raw])
    assert step.fallback == ([] if spec == "identity" or spec.startswith("er:") else [0])
    np.testing.assert_allclose(step.apply(raw[:, None, :])[:, 0], cal.transform(raw), rtol=1e-12, atol=1e-12)


def test_identity_takes_one_score() -> None:
    with pytest.raises(ValueError, match="one-score member"):
        IdentityCalibrator().fit(np.ones((3, 2)), [0, 1, 0], [0, 3], [0.0, 1.0])
    np.testing.assert_array_equal(IdentityCalibrator().fit([[1.5], [2.0]], [0, 1], [0, 2], [0.0, 1.0])
                                  .transform([[3.0]]), [3.0])
    padded = IdentityCalibrator().fit([[1.5, 0.0, 0.0], [2.0, 0.0, 0.0]], [0, 2], [0, 2], [0.0, 1.0, 3.0])
    np.testing.assert_array_equal(padded.transform([[3.0, 0.0, 0.0]]), [3.0])
    assert isinstance(make_calibrator("er:ordinal:linear"), ExpectedRelevanceCalibrator)
