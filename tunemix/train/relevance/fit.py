"""Training the relevance head (``tunemix.core.scoring.relevance_head``) and measuring probabilities
against grades. Training only (LightGBM through ``tunemix.train.learners.mcrank``).

The head's models are McRank multiclass models, one per point of a small grid of tree sizes and
leaf minimums (``RelevanceConfig``), each trained on the whole training set and stopped early on
the validation queries' log loss; the head averages the class probabilities of those close to
the best, and adds a per-grade logistic recalibration when a cross-validation over the
validation queries says it lowers the held-out log loss. Small trees and
large leaves are in the grid for small or noisy data, larger trees for data with more to learn;
averaging differently regularised models gives better probabilities than any one of them
(measured: ``python -m bench.bench_relevance``)."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from tunemix.core.data.dataset import RankingData
from tunemix.core.scoring.forest import FlatForest, concatenate
from tunemix.core.scoring.relevance_head import (
    FloatArray,
    RelevanceHead,
    cumulative_from_probabilities,
    logit,
    rank_match,
    recalibrated,
    sigmoid,
)
from tunemix.train.learners.label_groups import identity_grouping
from tunemix.train.learners.mcrank import McRank

log = logging.getLogger(__name__)


class HeadSettings(Protocol):
    """The head's models (the ``[relevance]`` table, ``tunemix.train.config.RelevanceConfig``):
    every (n_leaves, min_data_in_leaf) pair of the two lists is one McRank multiclass model with
    ``learning_rate``, at most ``max_iterations`` iterations, stopped after ``patience``
    iterations without a lower validation log loss, each tree on ``feature_fraction`` of the
    features and each iteration on ``bagging_fraction`` of the documents (the models differ more,
    their average is better); the head keeps the models whose validation log loss is within
    ``keep_within`` (relative) of the best one's."""

    n_leaves: list[int]
    min_data_in_leaf: list[int]
    learning_rate: float
    max_iterations: int
    patience: int
    keep_within: float
    feature_fraction: float
    bagging_fraction: float


def head_jobs(train: RankingData, vali: RankingData, n_grades: int, settings: HeadSettings,
              seed: int) -> list[tuple[Any, ...]]:
    """The arguments of ``fit_head_model`` for each of the head's models, in grid order (ValueError
    unless the data can train a head: two grades or more, documents in both sets)."""
    if n_grades < 2:
        raise ValueError("the relevance head needs at least two grades")
    if train.n_docs == 0 or vali.n_docs == 0:
        raise ValueError("the relevance head needs training and validation documents")
    grid = [(a, b) for a in settings.n_leaves for b in settings.min_data_in_leaf]
    return [(train, vali, n_grades, leaves, min_leaf, settings, seed + i) for i, (leaves, min_leaf) in enumerate(grid)]


def fit_head_model(train: RankingData, vali: RankingData, n_grades: int, n_leaves: int, min_data_in_leaf: int,
                   settings: HeadSettings, seed: int, time_budget_s: float | None = None
                   ) -> tuple[FlatForest, float, dict[str, Any]]:
    """One of the head's models (a task of its own, for a process pool): (its forest up to the
    best iteration, its validation log loss, what the record says of it). ``time_budget_s``: it
    stops after the iteration that exceeds these seconds (the fit's time budget)."""
    t0 = time.perf_counter()
    top = n_grades - 1
    mc = McRank(variant="multiclass", n_leaves=n_leaves, learning_rate=settings.learning_rate,
                n_iterations=settings.max_iterations, min_data_in_leaf=min_data_in_leaf, seed=seed, n_threads=1,
                feature_fraction=settings.feature_fraction, bagging_fraction=settings.bagging_fraction,
                time_budget_s=time_budget_s)
    mc.fit(train.features, np.minimum(train.labels, top), label_grouping=identity_grouping(n_grades),
           eval_set=(vali.features, np.minimum(vali.labels, top)), early_stopping_rounds=settings.patience)
    loss = float(mc.best_loss_ if mc.best_loss_ is not None else np.inf)
    info = {"n_leaves": n_leaves, "min_data_in_leaf": min_data_in_leaf, "learning_rate": settings.learning_rate,
            "iterations": mc.best_iteration_, "validation_log_loss": loss, "stop_reason": mc.stop_reason_,
            "seconds": round(time.perf_counter() - t0, 3)}
    return mc.to_forest(), loss, info


def assemble_head(fitted: list[tuple[FlatForest, float, dict[str, Any]]], n_grades: int, settings: HeadSettings,
                  vali: RankingData, vali_scores: npt.ArrayLike, seed: int = 0, *,
                  recalibrate: bool = True,
                  stop: Callable[[], bool] | None = None) -> tuple[RelevanceHead, dict[str, Any]]:
    """The head from its fitted models (``fit_head_model``, in grid order): the models within
    ``keep_within`` of the best validation log loss, and the recalibration when the
    cross-validation over the validation queries (ranked by ``vali_scores``) says it pays
    (``recalibrate`` False: not tried, e.g. when the time budget is spent; its six L-BFGS fits
    take seconds on a busy machine, 13.6 s on 24k validation documents under a 60 s budget).
    ``stop`` (the time budget's: ``tunemix.train.relevance.stage``) is asked before each of
    the six fits; once it says so the recalibration is left out. Returns (head, the
    recalibration's record)."""
    best = min(loss for _, loss, _ in fitted)
    forests, models, bounds = [], [], [0]
    for i, (forest, loss, info) in enumerate(fitted):
        kept = loss <= best * (1.0 + settings.keep_within)
        log.info("relevance head model %d: %d leaves, leaves of >= %d documents, %d iterations, validation log "
                 "loss %.4f%s", i + 1, info["n_leaves"], info["min_data_in_leaf"], info["iterations"], loss,
                 "" if kept else f" (left out: more than {settings.keep_within:.0%} above the best)")
        if kept:
            forests.append(forest)
            bounds.append(bounds[-1] + forest.n_base)
            models.append(info)
    head = RelevanceHead(n_grades=n_grades, forest=concatenate(forests), bounds=np.asarray(bounds, dtype=np.int64),
                         models=models)
    if not recalibrate:
        return head, {"gain": 0.0, "standard_error": 0.0, "applied": False, "queries": int(vali.n_queries),
                      "reason": "not tried: the time budget was spent"}
    cum = rank_match(cumulative_from_probabilities(head.tree_probabilities(vali.features)), vali_scores,
                     vali.query_offsets)
    events = (np.minimum(vali.labels, n_grades - 1)[:, None] >= np.arange(1, n_grades)[None, :]).astype(np.float64)
    record = recalibration_gain(cum, events, vali.query_offsets, seed=seed, stop=stop)
    if record["applied"] and stop is not None and stop():
        record.update(applied=False, reason="stopped by the time budget before the final fit")
    if record["applied"]:
        slopes, intercepts = fit_recalibration(cum, events)
        head = dataclasses.replace(head, slopes=slopes, intercepts=intercepts)
        record.update(slopes=slopes.tolist(), intercepts=intercepts.tolist())
    log.info("relevance head recalibration: held-out log loss gain %.4f per document (standard error %.4f): %s",
             record["gain"], record["standard_error"], "applied" if record["applied"] else "not applied")
    return head, record


def fit_relevance_head(train: RankingData, vali: RankingData, vali_scores: npt.ArrayLike, n_grades: int,
                       settings: HeadSettings, *, seed: int = 0) -> tuple[RelevanceHead, dict[str, Any]]:
    """The head for grades 0..n_grades-1 (larger grades count as the top one), its models trained
    one after another on ``train`` and stopped early on ``vali`` (the trainer runs them in
    parallel: ``tunemix.train.train.fit_head``). Returns (head, the recalibration's record)."""
    fitted = [fit_head_model(*args) for args in head_jobs(train, vali, n_grades, settings, seed)]
    return assemble_head(fitted, n_grades, settings, vali, vali_scores, seed)


def _binary_log_loss(p: FloatArray, events: FloatArray) -> FloatArray:
    """Per document, the summed log loss of its K-1 events y >= k under probabilities p."""
    q = np.clip(p, 1e-12, 1.0 - 1e-12)
    out: FloatArray = -(events * np.log(q) + (1.0 - events) * np.log1p(-q)).sum(axis=1)
    return out


def fit_recalibration(cum: FloatArray, events: FloatArray) -> tuple[FloatArray, FloatArray]:
    """(slopes > 0, intercepts) of the per-grade logistic map of rank-matched P(y >= k) ``cum``
    (n, K-1) that minimise the log loss of ``events`` (n, K-1; 1 where y >= k)."""
    from scipy.optimize import minimize

    x = logit(cum)
    k1 = cum.shape[1]

    def loss(t: FloatArray) -> tuple[float, FloatArray]:
        a, b = np.exp(t[:k1]), t[k1:]
        z = x * a + b
        p = sigmoid(z)
        value = float(np.mean(np.sum(np.logaddexp(0.0, -z) * events + np.logaddexp(0.0, z) * (1.0 - events), axis=1)))
        g = (p - events) / cum.shape[0]
        return value, np.concatenate([(g * x).sum(axis=0) * a, g.sum(axis=0)])

    res = minimize(loss, np.zeros(2 * k1), jac=True, method="L-BFGS-B", bounds=[(-5.0, 5.0)] * k1 + [(None, None)] * k1)
    return np.exp(res.x[:k1]), res.x[k1:].copy()


#: folds of the recalibration's cross-validation over the validation queries, and how many
#: standard errors its held-out gain must clear
RECAL_FOLDS = 5
RECAL_STANDARD_ERRORS = 2.0


def recalibration_gain(cum: FloatArray, events: FloatArray, query_offsets: npt.ArrayLike, *,
                       seed: int = 0, stop: Callable[[], bool] | None = None) -> dict[str, Any]:
    """Whether the recalibration pays: a ``RECAL_FOLDS``-fold cross-validation over the queries
    (the map fitted on the other folds' queries), the held-out log loss gain per document against
    no map, its standard error from the per-query gains, and ``applied``: the gain is more than
    ``RECAL_STANDARD_ERRORS`` standard errors above zero. ``stop``: asked before each fold's fit;
    True ends the cross-validation, not applied."""
    off = np.asarray(query_offsets, dtype=np.int64)
    nq = off.shape[0] - 1
    n = cum.shape[0]
    if nq < 2 * RECAL_FOLDS or n == 0:
        return {"gain": 0.0, "standard_error": 0.0, "applied": False, "queries": int(nq),
                "reason": f"fewer than {2 * RECAL_FOLDS} validation queries"}
    query_of = np.repeat(np.arange(nq), np.diff(off))
    fold_of = np.random.default_rng(seed).permutation(nq) % RECAL_FOLDS
    gain = np.zeros(n)
    for f in range(RECAL_FOLDS):
        if stop is not None and stop():
            return {"gain": 0.0, "standard_error": 0.0, "applied": False, "queries": int(nq),
                    "reason": f"stopped by the time budget after {f} of {RECAL_FOLDS} folds"}
        held = fold_of[query_of] == f
        slopes, intercepts = fit_recalibration(cum[~held], events[~held])
        gain[held] = (_binary_log_loss(cum[held], events[held])
                      - _binary_log_loss(recalibrated(cum[held], slopes, intercepts), events[held]))
    per_query = np.bincount(query_of, weights=gain, minlength=nq)  # queries are the independent units
    mean = float(gain.sum() / n)
    se = float(per_query.std(ddof=1) * np.sqrt(nq) / n)
    return {"gain": mean, "standard_error": se, "applied": bool(mean > RECAL_STANDARD_ERRORS * se), "queries": int(nq)}


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
