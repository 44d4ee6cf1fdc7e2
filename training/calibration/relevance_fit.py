"""Fitting the relevance head (``training.scoring.relevance_head``) on the validation queries
after the mix: maximum likelihood of the cumulative-logit model with scipy's L-BFGS-B, a small
ridge on everything but the thresholds. Training only (scipy)."""

from __future__ import annotations

import logging

import numpy as np
import numpy.typing as npt

from training.scoring.relevance_head import HeadInputs, RelevanceHead, softplus

log = logging.getLogger(__name__)

#: ridge on the slopes and offsets (the thresholds are free)
RIDGE = 1e-3


def _unpack(p: npt.NDArray[np.float64], k: int, means: np.ndarray, scales: np.ndarray) -> RelevanceHead:
    theta = p[6] + np.concatenate([[0.0], np.cumsum(softplus(p[7:7 + k - 2]))])
    return RelevanceHead(n_grades=k, a=p[0:2].copy(), g=float(p[2]), b=p[3:6].copy(), theta=theta,
                         means=means, scales=scales)


def fit_relevance_head(inputs: HeadInputs, labels: npt.ArrayLike, n_grades: int) -> RelevanceHead:
    """The head that maximises the likelihood of ``labels`` (grades 0..n_grades-1; larger grades
    count as the top one) given ``inputs`` (``relevance_head.head_inputs`` of the validation
    queries' mixed and member scores)."""
    from scipy.optimize import minimize

    y = np.minimum(np.asarray(labels, dtype=np.int64), n_grades - 1)
    if n_grades < 2:
        raise ValueError("the relevance head needs at least two grades")
    raw = np.column_stack([inputs.query, inputs.r_tilde])
    means = raw.mean(axis=0)
    scales = raw.std(axis=0)
    scales = np.where(scales > 1e-12, scales, 1.0)
    k = n_grades
    counts = np.bincount(y, minlength=k).astype(np.float64) + 1.0
    cum_share = np.clip(1.0 - np.cumsum(counts)[:-1] / counts.sum(), 1e-4, 1 - 1e-4)  # P(y >= k), k = 1..K-1
    start_theta = -np.log(cum_share / (1.0 - cum_share))
    steps = np.maximum(np.diff(start_theta), 1e-3)
    p0 = np.concatenate([[0.5, 0.0, 0.0, 0.0, 0.0, 0.0], [start_theta[0]], np.log(np.expm1(steps))])

    rows = np.arange(y.shape[0])

    def nll(p: npt.NDArray[np.float64]) -> float:
        like = np.clip(_unpack(p, k, means, scales).probabilities(inputs)[rows, y], 1e-12, 1.0)
        return float(-np.log(like).mean() + RIDGE * np.sum(p[:6] ** 2))

    res = minimize(nll, p0, method="L-BFGS-B", options={"maxiter": 500})
    if not np.all(np.isfinite(res.x)):
        raise ValueError(f"the relevance head's fit diverged: {res.message}")
    head = _unpack(res.x, k, means, scales)
    log.info("relevance head fitted on %d documents: log loss %.4f (%s)", y.shape[0], res.fun, res.message)
    return head


#: equal-width bins of the expected calibration error and the reliability diagram
ECE_BINS = 15


def reliability(pred: npt.ArrayLike, outcome: npt.ArrayLike, bins: int = ECE_BINS) -> dict[str, list[float]]:
    """Per equal-width bin of the predicted probability: its mean prediction, the observed
    frequency and the count (empty bins left out)."""
    p = np.asarray(pred, dtype=np.float64)
    o = np.asarray(outcome, dtype=np.float64)
    idx = np.minimum((p * bins).astype(np.int64), bins - 1)
    out: dict[str, list[float]] = {"predicted": [], "observed": [], "count": []}
    for b in range(bins):
        sel = idx == b
        if sel.any():
            out["predicted"].append(float(p[sel].mean()))
            out["observed"].append(float(o[sel].mean()))
            out["count"].append(float(sel.sum()))
    return out


def expected_calibration_error(pred: npt.ArrayLike, outcome: npt.ArrayLike, bins: int = ECE_BINS) -> float:
    """sum_b (n_b / n) |mean prediction_b - observed frequency_b| over equal-width bins."""
    return _ece(reliability(pred, outcome, bins))


def _ece(r: dict[str, list[float]]) -> float:
    """The expected calibration error of a ``reliability`` table."""
    n = float(np.sum(r["count"]))
    return float(sum(c / n * abs(p - o) for p, o, c in zip(r["predicted"], r["observed"], r["count"], strict=True)))


def relevance_metrics(probabilities: npt.ArrayLike, labels: npt.ArrayLike) -> dict[str, object]:
    """How well grade probabilities (n, K) match grades: multi-class Brier score and log loss,
    ECE of P(y >= 1) and of P(y = top grade) (15 equal-width bins), RMSE of the expected grade,
    the reliability diagrams, and the share relevant (y >= 1) among documents whose P(y >= 1)
    is above 0.5, 0.7 and 0.9."""
    p = np.asarray(probabilities, dtype=np.float64)
    k = p.shape[1]
    y = np.minimum(np.asarray(labels, dtype=np.int64), k - 1)
    onehot = np.eye(k)[y]
    p_rel = 1.0 - p[:, 0]
    top = p[:, k - 1]
    expected = p @ np.arange(k, dtype=np.float64)
    shares = {}
    for t in (0.5, 0.7, 0.9):
        sel = p_rel > t
        shares[f"above_{t}"] = {"documents": int(sel.sum()),
                                "share_relevant": float((y[sel] >= 1).mean()) if sel.any() else None}
    rel_relevant, rel_top = reliability(p_rel, y >= 1), reliability(top, y == k - 1)
    return {
        "documents": int(y.shape[0]),
        "brier": float(np.mean(np.sum((p - onehot) ** 2, axis=1))),
        "log_loss": float(-np.mean(np.log(np.clip(p[np.arange(y.shape[0]), y], 1e-15, 1.0)))),
        "ece_relevant": _ece(rel_relevant),
        "ece_top": _ece(rel_top),
        "rmse_expected_grade": float(np.sqrt(np.mean((expected - y) ** 2))),
        "reliability_relevant": rel_relevant,
        "reliability_top": rel_top,
        "share_relevant_above": shares,
    }
