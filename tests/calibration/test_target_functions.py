"""TCFs: hand values, the slow twin on fixed and random inputs, gradients by finite differences."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tunemix.core.calibration.base import ideal_dcg, ndcg_targets
from tunemix.core.calibration.target_functions import (
    TCF_NAMES,
    TargetCalibrationFunction,
    soft_dcg_loss,
)

from .naive import naive_ideal_dcg, naive_soft_dcg, naive_tcf


def _tcf(name, raw, labels, offsets, gains, **kw):
    return TargetCalibrationFunction(
        name,
        np.asarray(raw, dtype=np.float64),
        np.asarray(labels, dtype=np.int64),
        np.asarray(offsets, dtype=np.int64),
        np.asarray(gains, dtype=np.float64),
        **kw,
    )


def _random_problem(seed: int, n_queries: int = 4, k: int = 4):
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 7, size=n_queries)
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    n = int(offsets[-1])
    raw = rng.normal(0.0, 2.0, size=(n, k))
    labels = rng.integers(0, k, size=n)
    gains = 2.0 ** np.arange(k) - 1.0
    return raw, labels, offsets, gains


# --------------------------------------------------------------------------- hand values
def test_hand_values_one_document_two_classes():
    # raw (1, -1), a = 1, b = 0: s = (sigmoid(1), sigmoid(-1)) sums to 1, so p = s.
    p0 = 1.0 / (1.0 + math.exp(-1.0))
    raw, off, gains = [[1.0, -1.0]], [0, 1], [0.0, 1.0]
    assert _tcf("ls", raw, [0], off, gains).value(1.0, 0.0) == pytest.approx(-math.log(p0))
    assert _tcf("el", raw, [1], off, gains).value(1.0, 0.0) == pytest.approx(p0)  # (0-1)^2 p0
    assert _tcf("ell", raw, [1], off, gains).value(1.0, 0.0) == pytest.approx(p0**2)  # lbar = 1-p0
    h = -(p0 * math.log(p0) + (1 - p0) * math.log(1 - p0))
    ewls = _tcf("ewls", raw, [0], off, gains, C=2.0).value(1.0, 0.0)
    assert ewls == pytest.approx(-math.log(p0) * h**2)


def test_uniform_distribution_when_slope_is_zero():
    # a = 0: every s = 1/2, p uniform over K = 4, LS = n log 4 whatever the raw scores
    raw, labels, off, gains = _random_problem(0)
    value = _tcf("ls", raw, labels, off, gains).value(0.0, 3.0)
    assert value == pytest.approx(raw.shape[0] * math.log(4.0))


def test_soft_dcg_tends_to_ndcg_for_small_sigma():
    # one query, gains (1, 0): relevant document first -> NDCG 1; second -> 1/log2(3)
    off = np.array([0, 2], dtype=np.int64)
    g = np.array([1.0, 0.0])
    assert soft_dcg_loss(np.array([1.0, 0.0]), g, off, 1e-4)[0] == pytest.approx(-1.0)
    assert soft_dcg_loss(np.array([0.0, 1.0]), g, off, 1e-4)[0] == pytest.approx(
        -1.0 / math.log2(3.0)
    )
    # equal scores: each document spread evenly over both positions -> (1 + 1/log2 3) / 2
    assert soft_dcg_loss(np.array([0.5, 0.5]), g, off, 0.1)[0] == pytest.approx(
        -(1.0 + 1.0 / math.log2(3.0)) / 2.0
    )


def test_ideal_dcg_hand_value_and_twin():
    gains = np.array([3.0, 0.0, 1.0, 0.0, 7.0, 1.0, 3.0])
    off = np.array([0, 3, 4, 7], dtype=np.int64)
    idcg = ideal_dcg(gains, off, None)
    assert idcg[0] == pytest.approx(3.0 + 1.0 / math.log2(3.0))
    assert idcg[1] == 0.0
    np.testing.assert_allclose(idcg, naive_ideal_dcg(gains, off, None))
    np.testing.assert_allclose(ideal_dcg(gains, off, 2), naive_ideal_dcg(gains, off, 2))
    targets = ndcg_targets(gains, off, 10)
    assert targets[3] == 0.0  # the query with ideal DCG 0 gets targets 0
    assert targets[0] == pytest.approx(3.0 / idcg[0])


# --------------------------------------------------------------------------- twins
@pytest.mark.parametrize("name", TCF_NAMES)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_tcf_matches_naive_twin(name, seed):
    raw, labels, off, gains = _random_problem(seed)
    for a, b in [(0.7, 0.3), (2.5, -1.0), (0.05, 4.0)]:
        fast = _tcf(name, raw, labels, off, gains, C=1.5, sigma=0.2).value(a, b)
        slow = naive_tcf(name, a, b, raw.tolist(), labels.tolist(), off.tolist(),
                         gains.tolist(), C=1.5, sigma=0.2)
        assert fast == pytest.approx(slow, rel=1e-9, abs=1e-12)


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    name=st.sampled_from(TCF_NAMES),
    a=st.floats(0.01, 5.0),
    b=st.floats(-3.0, 3.0),
    k=st.integers(2, 5),
)
def test_tcf_matches_naive_twin_random(seed, name, a, b, k):
    raw, labels, off, gains = _random_problem(seed, n_queries=3, k=k)
    fast = _tcf(name, raw, labels, off, gains, C=0.5, sigma=0.05).value(a, b)
    slow = naive_tcf(name, a, b, raw.tolist(), labels.tolist(), off.tolist(), gains.tolist(),
                     C=0.5, sigma=0.05)
    assert np.isfinite(fast)
    assert fast == pytest.approx(slow, rel=1e-8, abs=1e-10)


def test_soft_dcg_twin_with_ties_and_empty_queries():
    v = np.array([0.2, 0.2, 0.9, 0.1, 0.5, 0.5, 0.5, 0.3])
    g = np.array([1.0, 3.0, 0.0, 0.0, 0.0, 7.0, 1.0, 0.0])
    off = np.array([0, 3, 3, 4, 8], dtype=np.int64)  # an empty query, an all-zero query
    for sigma in (0.01, 0.3):
        fast, _ = soft_dcg_loss(v, g, off, sigma)
        assert fast == pytest.approx(naive_soft_dcg(v.tolist(), g.tolist(), off.tolist(), sigma))


# --------------------------------------------------------------------------- gradients
@pytest.mark.parametrize("name", TCF_NAMES)
def test_gradient_matches_finite_differences(name):
    raw, labels, off, gains = _random_problem(7)
    f = _tcf(name, raw, labels, off, gains, C=2.0, sigma=0.5)
    for a, b in [(0.8, 0.2), (1.7, -0.9)]:
        _, grad = f.value_and_grad(a, b)
        eps = 1e-6
        fd_a = (f.value(a + eps, b) - f.value(a - eps, b)) / (2 * eps)
        fd_b = (f.value(a, b + eps) - f.value(a, b - eps)) / (2 * eps)
        np.testing.assert_allclose(grad, [fd_a, fd_b], rtol=1e-5, atol=1e-6)


def test_soft_dcg_gradient_in_scores_matches_finite_differences():
    rng = np.random.default_rng(3)
    off = np.array([0, 5, 9], dtype=np.int64)
    v = rng.uniform(0, 1, size=9)
    g = rng.integers(0, 3, size=9).astype(np.float64)
    _, grad = soft_dcg_loss(v, g, off, 0.2)
    eps = 1e-7
    for i in range(9):
        e = np.zeros(9)
        e[i] = eps
        fd = (soft_dcg_loss(v + e, g, off, 0.2)[0] - soft_dcg_loss(v - e, g, off, 0.2)[0]) / (2 * eps)
        assert grad[i] == pytest.approx(fd, rel=1e-5, abs=1e-7)


def test_extreme_parameters_stay_finite():
    raw, labels, off, gains = _random_problem(11)
    for name in TCF_NAMES:
        value, grad = _tcf(name, raw * 1e3, labels, off, gains).value_and_grad(50.0, 0.0)
        assert np.isfinite(value) and np.all(np.isfinite(grad)), name


@pytest.mark.parametrize("C", [-1.0, -0.3])
def test_ewls_negative_exponent_matches_twin(C):
    """The paper lets C take either sign (distributions less or more uniform)."""
    raw, labels, off, gains = _random_problem(5)
    for a, b in [(0.7, 0.3), (2.5, -1.0)]:
        fast = _tcf("ewls", raw, labels, off, gains, C=C).value(a, b)
        slow = naive_tcf("ewls", a, b, raw.tolist(), labels.tolist(), off.tolist(), gains.tolist(), C=C)
        assert np.isfinite(fast)
        assert fast == pytest.approx(slow, rel=1e-9, abs=1e-12)


def test_sndcg_uses_the_documents_own_gains():
    """Under a grouping, two labels share a class gain; SNDCG's DCG takes each document's own
    gain (doc_gains), which changes the value."""
    raw, labels, off, gains = _random_problem(7, k=3)
    own = np.where(labels > 0, np.where(np.arange(labels.size) % 2 == 0, 1.0, 3.0), 0.0)
    a, b = 1.3, 0.2
    fast = _tcf("sndcg", raw, labels, off, gains, sigma=0.05, doc_gains=own).value(a, b)
    slow = naive_tcf("sndcg", a, b, raw.tolist(), labels.tolist(), off.tolist(), gains.tolist(),
                     sigma=0.05, doc_gains=own.tolist())
    assert fast == pytest.approx(slow, rel=1e-9, abs=1e-12)
    plain = _tcf("sndcg", raw, labels, off, gains, sigma=0.05).value(a, b)
    assert abs(plain - fast) > 1e-6
