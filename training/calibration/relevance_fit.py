"""Training the relevance head (``training.scoring.relevance_head``) and measuring probabilities
against grades. Training only (LightGBM through ``training.learners.mcrank``).

The head's models are McRank multiclass models, one per point of a small grid of tree sizes and
leaf minimums (``RelevanceConfig``), each trained on the whole training set and stopped early on
the validation queries' log loss; the head averages their class probabilities. Small trees and
large leaves are in the grid for small or noisy data, larger trees for data with more to learn;
averaging differently regularised models gives better probabilities than any one of them
(measured: ``bench/bench_relevance.py``)."""

from __future__ import annotations

import logging
import time
from typing import Protocol

import numpy as np
import numpy.typing as npt

from training.data.dataset import RankingData
from training.learners.label_groups import identity_grouping
from training.learners.mcrank import McRank
from training.scoring.forest import concatenate
from training.scoring.relevance_head import RelevanceHead

log = logging.getLogger(__name__)


class HeadSettings(Protocol):
    """The head's models (the ``[relevance]`` table, ``training.pipeline.config.RelevanceConfig``):
    every (n_leaves, min_data_in_leaf) pair of the two lists is one McRank multiclass model with
    ``learning_rate``, at most ``max_iterations`` iterations, stopped after ``patience``
    iterations without a lower validation log loss; the head keeps the models whose validation
    log loss is within ``keep_within`` (relative) of the best one's."""

    n_leaves: list[int]
    min_data_in_leaf: list[int]
    learning_rate: float
    max_iterations: int
    patience: int
    keep_within: float


def fit_relevance_head(train: RankingData, vali: RankingData, n_grades: int, settings: HeadSettings,
                       *, seed: int = 0, n_threads: int = 1) -> RelevanceHead:
    """The head for grades 0..n_grades-1 (larger grades count as the top one): its models trained
    on ``train`` and stopped early on ``vali`` (both need documents)."""
    if n_grades < 2:
        raise ValueError("the relevance head needs at least two grades")
    if train.n_docs == 0 or vali.n_docs == 0:
        raise ValueError("the relevance head needs training and validation documents")
    top = n_grades - 1
    y_train = np.minimum(train.labels, top)
    y_vali = np.minimum(vali.labels, top)
    trained = []
    for i, (leaves, min_leaf) in enumerate((a, b) for a in settings.n_leaves for b in settings.min_data_in_leaf):
        t0 = time.perf_counter()
        mc = McRank(variant="multiclass", n_leaves=leaves, learning_rate=settings.learning_rate,
                    n_iterations=settings.max_iterations, min_data_in_leaf=min_leaf, seed=seed + i, n_threads=n_threads)
        mc.fit(train.features, y_train, label_grouping=identity_grouping(n_grades), eval_set=(vali.features, y_vali),
               early_stopping_rounds=settings.patience)
        loss = float(mc.best_loss_ if mc.best_loss_ is not None else np.inf)
        info = {"n_leaves": leaves, "min_data_in_leaf": min_leaf, "learning_rate": settings.learning_rate,
                "iterations": mc.best_iteration_, "validation_log_loss": loss,
                "seconds": round(time.perf_counter() - t0, 3)}
        trained.append((mc, loss, info))
    best = min(loss for _, loss, _ in trained)
    forests, models, bounds = [], [], [0]
    for i, (mc, loss, info) in enumerate(trained):
        kept = loss <= best * (1.0 + settings.keep_within)
        log.info("relevance head model %d: %d leaves, leaves of >= %d documents, %d iterations, validation log "
                 "loss %.4f%s", i + 1, info["n_leaves"], info["min_data_in_leaf"], info["iterations"],
                 info["validation_log_loss"], "" if kept else f" (left out: more than {settings.keep_within:.0%} "
                 "above the best)")
        if kept:
            forest = mc.to_forest()
            forests.append(forest)
            bounds.append(bounds[-1] + forest.n_base)
            models.append(info)
    return RelevanceHead(n_grades=n_grades, forest=concatenate(forests), bounds=np.asarray(bounds, dtype=np.int64),
                         models=models)


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
