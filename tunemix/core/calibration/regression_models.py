"""The four regressors g: R^K -> R of regression-based calibration, fit and predict.

Tune and mix (Busa-Fekete et al., Machine Learning 2013), Sect. 5.4; Busa-Fekete et al., "Ranking
by calibrated AdaBoost" (Yahoo! LTR Challenge 2010), Sect. 2.3. Inputs X are the member's
K-vectors, already standardised column-wise by the caller; y are the targets.

- ridge least squares on a design D (linear: D = X; polynomial: D = all monomials of X of
  total degree 1..d):  min_w,c (1/n) ||y - D w - c||^2 + lambda ||w||^2, intercept unpenalised;
  solved as one augmented least-squares problem on the centred design (lambda = 0 gives exactly
  ``numpy.linalg.lstsq`` on [1, D]).
- logistic link: g(x) = sigmoid(w.x + c), fitted to soft targets t in [0, 1] by
  min (1/n) sum_i -[t_i log g(x_i) + (1 - t_i) log(1 - g(x_i))] + (lambda/2) ||w||^2 (convex;
  L-BFGS with the analytic gradient (g - t) x / n + lambda w).
- neural network: one tanh hidden layer, g(x) = w2 . tanh(W1 x + b1) + b2, fitted by L-BFGS on
  (1/2n) ||g(X) - y||^2 + (lambda/2)(||W1||^2 + ||w2||^2) with backpropagated gradients, from a
  seeded Gaussian start (W1 ~ N(0, 1/K), w2 ~ N(0, 1/H)).

Prediction needs numpy only; scipy is imported inside the iterative fits.
"""

from __future__ import annotations

import itertools

import numpy as np
import numpy.typing as npt

from tunemix.core.calibration.base import CalibrationError, Float64Array

Int64Array = npt.NDArray[np.int64]


# --------------------------------------------------------------------------- polynomial design
def monomial_exponents(n_features: int, degree: int) -> Int64Array:
    """Exponent rows of every monomial of total degree 1..degree in ``n_features`` variables.

    Ordered by degree, then lexicographically by variable: for 2 variables and degree 2,
    [[1, 0], [0, 1], [2, 0], [1, 1], [0, 2]].
    """
    rows: list[list[int]] = []
    for deg in range(1, degree + 1):
        for combo in itertools.combinations_with_replacement(range(n_features), deg):
            row = [0] * n_features
            for j in combo:
                row[j] += 1
            rows.append(row)
    return np.asarray(rows, dtype=np.int64).reshape(len(rows), n_features)


def polynomial_features(x: Float64Array, exponents: Int64Array) -> Float64Array:
    """Column t is prod_k x[:, k] ** exponents[t, k]; shape (n, T)."""
    out = np.ones((x.shape[0], exponents.shape[0]), dtype=np.float64)
    for t, row in enumerate(exponents):
        for k in np.flatnonzero(row):
            out[:, t] *= x[:, k] ** int(row[k])
    return out


# --------------------------------------------------------------------------- ridge least squares
def fit_ridge(design: Float64Array, y: Float64Array, ridge: float) -> tuple[Float64Array, float]:
    """(w, c) minimising (1/n) ||y - D w - c||^2 + ridge ||w||^2, c unpenalised (module docstring)."""
    n, t = design.shape
    d_mean = design.mean(axis=0)
    y_mean = float(y.mean())
    centred = design - d_mean
    if ridge > 0:
        lhs = np.vstack([centred, np.sqrt(ridge * n) * np.eye(t)])
        rhs = np.concatenate([y - y_mean, np.zeros(t)])
    else:
        lhs, rhs = centred, y - y_mean
    coef, *_ = np.linalg.lstsq(lhs, rhs, rcond=None)
    if not np.all(np.isfinite(coef)):
        raise CalibrationError("least squares gave non-finite coefficients")
    return coef, y_mean - float(d_mean @ coef)


def predict_affine(design: Float64Array, coef: Float64Array, intercept: float) -> Float64Array:
    return design @ coef + intercept


# --------------------------------------------------------------------------- logistic link
def _log_sigmoid(eta: Float64Array) -> Float64Array:
    return -np.logaddexp(0.0, -eta)


def predict_logistic(x: Float64Array, coef: Float64Array, intercept: float) -> Float64Array:
    """sigmoid(x . coef + intercept), computed without overflow."""
    return np.exp(_log_sigmoid(x @ coef + intercept))


def logistic_loss(
    theta: Float64Array, x: Float64Array, t: Float64Array, ridge: float
) -> tuple[float, Float64Array]:
    """Soft-target cross-entropy (mean) + (ridge/2) ||w||^2 and its gradient; theta = [w, c]."""
    w, c = theta[:-1], theta[-1]
    eta = x @ w + c
    n = x.shape[0]
    loss = -np.sum(t * _log_sigmoid(eta) + (1.0 - t) * _log_sigmoid(-eta)) / n
    resid = (np.exp(_log_sigmoid(eta)) - t) / n
    grad = np.empty_like(theta)
    grad[:-1] = x.T @ resid + ridge * w
    grad[-1] = resid.sum()
    return float(loss + 0.5 * ridge * w @ w), grad


def fit_logistic(
    x: Float64Array, t: Float64Array, ridge: float, max_iter: int
) -> tuple[Float64Array, float]:
    from scipy.optimize import minimize

    mean_t = float(np.clip(t.mean(), 1e-6, 1 - 1e-6))
    theta0 = np.zeros(x.shape[1] + 1)
    theta0[-1] = np.log(mean_t / (1.0 - mean_t))
    res = minimize(
        logistic_loss, theta0, args=(x, t, ridge), jac=True, method="L-BFGS-B",
        options={"maxiter": max_iter},
    )
    theta = np.asarray(res.x, dtype=np.float64)
    if not (np.isfinite(res.fun) and np.all(np.isfinite(theta))):
        raise CalibrationError(f"logistic regression did not converge: {res.message}")
    return theta[:-1].copy(), float(theta[-1])


# --------------------------------------------------------------------------- neural network
def unpack_network(
    theta: Float64Array, n_inputs: int, hidden: int
) -> tuple[Float64Array, Float64Array, Float64Array, float]:
    """theta = [W1 (hidden x n_inputs, row-major), b1 (hidden), w2 (hidden), b2]."""
    k, h = n_inputs, hidden
    w1 = theta[: h * k].reshape(h, k)
    b1 = theta[h * k : h * k + h]
    w2 = theta[h * k + h : h * k + 2 * h]
    return w1, b1, w2, float(theta[-1])


def predict_network(
    x: Float64Array, w1: Float64Array, b1: Float64Array, w2: Float64Array, b2: float
) -> Float64Array:
    return np.tanh(x @ w1.T + b1) @ w2 + b2


def network_loss(
    theta: Float64Array, x: Float64Array, y: Float64Array, hidden: int, ridge: float
) -> tuple[float, Float64Array]:
    """(1/2n) ||g(x) - y||^2 + (ridge/2)(||W1||^2 + ||w2||^2) and its gradient (backprop)."""
    n, k = x.shape
    w1, b1, w2, b2 = unpack_network(theta, k, hidden)
    act = np.tanh(x @ w1.T + b1)
    resid = act @ w2 + b2 - y
    loss = 0.5 * float(resid @ resid) / n + 0.5 * ridge * (float(np.sum(w1 * w1)) + float(w2 @ w2))
    r = resid / n
    d_hidden = r[:, None] * w2[None, :] * (1.0 - act * act)
    grad = np.concatenate(
        [
            (d_hidden.T @ x + ridge * w1).ravel(),
            d_hidden.sum(axis=0),
            act.T @ r + ridge * w2,
            [r.sum()],
        ]
    )
    return loss, grad


def fit_network(
    x: Float64Array, y: Float64Array, hidden: int, ridge: float, seed: int, max_iter: int
) -> Float64Array:
    """The fitted parameter vector (see ``unpack_network``); deterministic given ``seed``."""
    from scipy.optimize import minimize

    k = x.shape[1]
    rng = np.random.default_rng(seed)
    theta0 = np.concatenate(
        [
            rng.normal(0.0, 1.0 / np.sqrt(k), size=hidden * k),
            np.zeros(hidden),
            rng.normal(0.0, 1.0 / np.sqrt(hidden), size=hidden),
            [0.0],
        ]
    )
    res = minimize(
        network_loss, theta0, args=(x, y, hidden, ridge), jac=True, method="L-BFGS-B",
        options={"maxiter": max_iter},
    )
    theta = np.asarray(res.x, dtype=np.float64)
    if not (np.isfinite(res.fun) and np.all(np.isfinite(theta))):
        raise CalibrationError(f"neural-network regression did not converge: {res.message}")
    return theta
