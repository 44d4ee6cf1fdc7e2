"""RBC: lstsq equivalence, polynomial recovery, ndcg targets, gradients, determinism."""

from __future__ import annotations

import numpy as np
import pytest

from tunemix.core.calibration import CalibrationError, RegressionCalibrator
from tunemix.core.calibration.base import ndcg_targets
from tunemix.core.calibration.regression_models import (
    fit_ridge,
    logistic_loss,
    monomial_exponents,
    network_loss,
    polynomial_features,
)

from .naive import naive_ideal_dcg, naive_ndcg_at, synthetic_member


def _finite_difference(fun, theta, eps=1e-6):
    grad = np.zeros_like(theta)
    for j in range(theta.shape[0]):
        e = np.zeros_like(theta)
        e[j] = eps
        grad[j] = (fun(theta + e) - fun(theta - e)) / (2 * eps)
    return grad


def test_linear_equals_numpy_lstsq():
    raw, labels, off, gains = synthetic_member(40, 10, 4, margin=1.0, noise=2.0, seed=0)
    design = np.column_stack([np.ones(len(raw)), raw])
    coef, *_ = np.linalg.lstsq(design, gains[labels], rcond=None)
    exact = RegressionCalibrator(model="linear", ridge=0.0).fit(raw, labels, off, gains)
    np.testing.assert_allclose(exact.transform(raw), design @ coef, rtol=1e-10, atol=1e-10)
    # coefficients back on the raw scale: coef_k / scale_k
    np.testing.assert_allclose(exact.coef_ / exact.scale_, coef[1:], rtol=1e-8)
    default = RegressionCalibrator(model="linear").fit(raw, labels, off, gains)
    np.testing.assert_allclose(default.transform(raw), design @ coef, rtol=1e-4, atol=1e-4)


def test_monomial_exponents_hand_value():
    assert monomial_exponents(2, 2).tolist() == [[1, 0], [0, 1], [2, 0], [1, 1], [0, 2]]
    assert monomial_exponents(5, 4).shape == (125, 5)  # C(9, 4) - 1 monomials
    x = np.array([[2.0, 3.0]])
    assert polynomial_features(x, monomial_exponents(2, 2)).tolist() == [[2, 3, 4, 6, 9]]


def test_ridge_recovers_known_polynomial_coefficients():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(500, 3))
    exps = monomial_exponents(3, 3)
    true = rng.normal(size=exps.shape[0])
    y = polynomial_features(x, exps) @ true + 0.7
    coef, intercept = fit_ridge(polynomial_features(x, exps), y, 0.0)
    np.testing.assert_allclose(coef, true, atol=1e-8)
    assert intercept == pytest.approx(0.7, abs=1e-8)


def _polynomial_problem(degree: int):
    # gains of the labels satisfy z = f0^degree + f1 * f2 - 2 exactly (f2 solved for)
    rng = np.random.default_rng(2)
    n = 400
    labels = rng.integers(0, 3, size=n)
    gains = np.array([0.0, 1.0, 3.0])
    f0 = rng.normal(size=n)
    f1 = rng.uniform(1.0, 2.0, size=n) * rng.choice([-1.0, 1.0], size=n)
    f2 = (gains[labels] - f0**degree + 2.0) / f1
    return np.column_stack([f0, f1, f2]), labels, np.array([0, n]), gains


def test_polynomial_degree_recovers_a_known_polynomial():
    raw, labels, off, gains = _polynomial_problem(3)
    poly3 = RegressionCalibrator(model="poly", degree=3, ridge=1e-12).fit(raw, labels, off, gains)
    np.testing.assert_allclose(poly3.transform(raw), gains[labels], atol=1e-6)
    poly2 = RegressionCalibrator(model="poly", degree=2, ridge=1e-12).fit(raw, labels, off, gains)
    assert np.max(np.abs(poly2.transform(raw) - gains[labels])) > 0.1  # degree 2 cannot
    raw2, labels2, off2, gains2 = _polynomial_problem(2)
    poly2b = RegressionCalibrator(model="poly", degree=2, ridge=1e-12).fit(raw2, labels2, off2, gains2)
    np.testing.assert_allclose(poly2b.transform(raw2), gains2[labels2], atol=1e-6)


def test_ndcg_targets_zero_for_queries_without_relevant_documents():
    doc_gains = np.array([0.0, 0.0, 3.0, 1.0, 0.0, 0.0])
    off = np.array([0, 2, 5, 6], dtype=np.int64)
    t = ndcg_targets(doc_gains, off)
    assert t[:2].tolist() == [0.0, 0.0] and t[5] == 0.0
    idcg = naive_ideal_dcg(doc_gains, off, 10)
    np.testing.assert_allclose(t[2:5], doc_gains[2:5] / idcg[1])
    # cutoff 10 matters: 12 relevant documents, the 11th and 12th do not count
    g = np.ones(12)
    t12 = ndcg_targets(g, np.array([0, 12], dtype=np.int64))
    np.testing.assert_allclose(t12, 1.0 / naive_ideal_dcg(g, [0, 12], 10)[0])


def test_ndcg_target_fit_equals_fit_on_divided_gains():
    # with ridge 0 the ndcg-target linear RBC is lstsq on z_i / IDCG@10(q)
    raw, labels, off, gains = synthetic_member(30, 8, 3, margin=1.0, noise=1.0, seed=4)
    labels[:8] = 0  # query 0 has ideal DCG 0
    y = ndcg_targets(gains[labels], off)
    assert np.all(y[:8] == 0.0)
    design = np.column_stack([np.ones(len(raw)), raw])
    coef, *_ = np.linalg.lstsq(design, y, rcond=None)
    c = RegressionCalibrator(model="linear", target="ndcg", ridge=0.0).fit(raw, labels, off, gains)
    np.testing.assert_allclose(c.transform(raw), design @ coef, rtol=1e-9, atol=1e-12)


def test_logistic_and_network_gradients_match_finite_differences():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(50, 4))
    t = rng.uniform(size=50)
    theta = rng.normal(size=5)
    _, grad = logistic_loss(theta, x, t, 0.01)
    np.testing.assert_allclose(
        grad, _finite_difference(lambda th: logistic_loss(th, x, t, 0.01)[0], theta), atol=1e-7
    )
    hidden = 6
    theta_nn = rng.normal(size=hidden * (4 + 2) + 1)
    _, grad_nn = network_loss(theta_nn, x, t, hidden, 0.01)
    np.testing.assert_allclose(
        grad_nn,
        _finite_difference(lambda th: network_loss(th, x, t, hidden, 0.01)[0], theta_nn),
        atol=1e-7,
    )


def test_logistic_stays_in_range_and_ranks():
    raw, labels, off, gains = synthetic_member(60, 10, 5, margin=2.0, noise=2.0, seed=5)
    c = RegressionCalibrator(model="logistic").fit(raw, labels, off, gains)
    v = c.transform(np.vstack([raw, 1e6 * raw[:3]]))
    assert np.all((v >= 0) & (v <= gains.max())) and np.all(np.isfinite(v))
    rng = np.random.default_rng(0)
    assert naive_ndcg_at(labels, v[: len(labels)], off) > naive_ndcg_at(
        labels, rng.random(len(labels)), off
    )


def test_network_is_deterministic_and_beats_linear_on_a_nonlinear_target():
    rng = np.random.default_rng(6)
    n = 600
    raw = rng.normal(size=(n, 3))
    labels = (np.abs(raw[:, 0]) > 1.0).astype(int) + (raw[:, 1] ** 2 > 1.5).astype(int)
    off, gains = np.array([0, n]), np.array([0.0, 1.0, 3.0])
    a = RegressionCalibrator(model="nn", hidden=8).fit(raw, labels, off, gains)
    b = RegressionCalibrator(model="nn", hidden=8).fit(raw, labels, off, gains)
    np.testing.assert_array_equal(a.coef_, b.coef_)
    lin = RegressionCalibrator(model="linear").fit(raw, labels, off, gains)
    y = gains[labels]
    assert np.mean((a.transform(raw) - y) ** 2) < 0.7 * np.mean((lin.transform(raw) - y) ** 2)


def test_network_subsample_is_seeded():
    raw, labels, off, gains = synthetic_member(20, 10, 3, margin=1.0, noise=1.0, seed=7)
    a = RegressionCalibrator(model="nn", max_samples=100, max_iter=50).fit(raw, labels, off, gains)
    b = RegressionCalibrator(model="nn", max_samples=100, max_iter=50).fit(raw, labels, off, gains)
    np.testing.assert_array_equal(a.transform(raw), b.transform(raw))


@pytest.mark.parametrize("model", ["linear", "logistic", "poly", "nn"])
def test_degenerate_calibration_sets_raise(model):
    raw, labels, off, gains = synthetic_member(5, 6, 3, margin=1.0, noise=1.0, seed=1)
    with pytest.raises(CalibrationError, match="single class"):
        RegressionCalibrator(model=model).fit(raw, np.zeros_like(labels), off, gains)
    with pytest.raises(CalibrationError, match="same raw vector"):
        RegressionCalibrator(model=model).fit(np.ones_like(raw), labels, off, gains)
    # gains equal for the classes present: constant targets
    with pytest.raises(CalibrationError, match="constant"):
        RegressionCalibrator(model=model).fit(raw, labels, off, np.zeros(3))


def test_constant_column_and_far_inputs_give_finite_scores():
    raw, labels, off, gains = synthetic_member(10, 10, 4, margin=1.0, noise=1.0, seed=8)
    raw[:, 2] = 5.0  # one constant column
    for model in ("linear", "logistic", "poly", "nn"):
        c = RegressionCalibrator(model=model, degree=4).fit(raw, labels, off, gains)
        out = c.transform(np.vstack([raw, 1e200 * np.ones((1, 4)), -1e200 * np.ones((1, 4))]))
        assert np.all(np.isfinite(out)), model


def test_parameter_errors():
    raw, labels, off, gains = synthetic_member(5, 6, 3, margin=1.0, noise=1.0, seed=1)
    for kwargs in ({"model": "svm"}, {"target": "dcg"}, {"model": "poly", "degree": 7},
                   {"ridge": -1.0}):
        with pytest.raises(ValueError):
            RegressionCalibrator(**kwargs).fit(raw, labels, off, gains)


@pytest.mark.parametrize("target", ["gain", "ndcg"])
def test_targets_are_the_documents_own_gains_under_a_grouping(target):
    """Binary grouping {0}{1,2}: labels 1 and 2 share class 1, but the paper regresses each
    document's own gain (eq. 20) or own gain / ideal DCG (eq. 21)."""
    raw, labels, off, _ = synthetic_member(40, 10, 3, margin=1.0, noise=2.0, seed=4)
    own = 2.0 ** labels - 1.0
    classes = (labels > 0).astype(np.int64)
    grouped = np.array([0.0, 2.0, 2.0])  # class gain of {1, 2}, padded to the raw columns
    design = np.column_stack([np.ones(len(raw)), raw])
    y = own if target == "gain" else ndcg_targets(own, off)
    coef, *_ = np.linalg.lstsq(design, y, rcond=None)
    fitted = RegressionCalibrator(model="linear", ridge=0.0, target=target).fit(
        raw, classes, off, grouped, doc_gains=own)
    np.testing.assert_allclose(fitted.transform(raw), design @ coef, rtol=1e-9, atol=1e-9)
    # without them, the class gains: a different fit
    plain = RegressionCalibrator(model="linear", ridge=0.0, target=target).fit(raw, classes, off, grouped)
    assert np.max(np.abs(plain.transform(raw) - fitted.transform(raw))) > 1e-3
    with pytest.raises(ValueError, match="one gain per document"):
        RegressionCalibrator(model="linear").fit(raw, classes, off, grouped, doc_gains=own[:-1])
