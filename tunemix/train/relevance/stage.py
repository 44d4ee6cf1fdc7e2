"""The relevance head's stage of ``tunemix train``: the McRank members it can reuse, its own models
(as many as the time budget affords), the head assembled and measured
(``tunemix.train.relevance.fit``, ``tunemix.core.scoring.relevance_head``).

Under a time budget (``tunemix.train.budget``) the head's own models are cut to what fits in
the time left to the ``relevance_head`` stage's end: each is expected to cost about what the
reused McRank member cost (the same kind of model on the same data; without one, nothing is
cut in advance), k = floor(left x jobs / cost) of them are trained in grid order, each starting
only before that end and stopping at it. With none, the head is the McRank member alone; past
that end the recalibration is not tried either, and before it each of the recalibration's six
L-BFGS fits starts only while the time left exceeds what the fit before it took
(:func:`recalibration_stop`; the six take 3 s on 24k validation documents, 13.6 s on a busy
machine).

Without a budget the head's own models are trained beside the member runs, in the boosting
stage's pool (``tunemix.train.relevance.beside``), and this stage assembles the head from them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import joblib
import numpy as np

from tunemix.core.data.dataset import RankingData
from tunemix.core.scoring.ensemble_model import EnsembleModel
from tunemix.core.scoring.forest import FlatForest
from tunemix.train.budget import FitBudget, affordable_models
from tunemix.train.config import TrainConfig
from tunemix.train.members.types import RunResult
from tunemix.train.parallel import parallel_backend, run_parallel
from tunemix.train.prepared import Prepared

log = logging.getLogger(__name__)

HeadModel = tuple[FlatForest, float, dict[str, Any]]


def reusable_head_models(cfg: TrainConfig, prep: Prepared, runs: list[RunResult]) -> list[HeadModel]:
    """The McRank members that are models of the relevance head's kind (multiclass on the original
    grades and raw features, trained on the whole training set, stopped early on the validation
    log loss), as ``fit_head_model`` returns its models; none unless ``[relevance] reuse_members``.
    Their info carries ``member_seconds``, the run's fit seconds (what a model of the head costs)."""
    if not cfg.relevance.reuse_members:
        return []
    out = []
    for r in runs:
        p = r.spec.params
        if (r.spec.type == "mcrank" and p.get("variant", "multiclass") == "multiclass" and r.spec.view == "raw"
                and r.spec.grouping == "original" and p.get("fit_on") == "train" and r.forest is not None
                and r.validation_loss is not None and r.n_outputs == prep.n_labels):
            info = {"n_leaves": int(p.get("n_leaves", 16)), "min_data_in_leaf": int(p.get("min_data_in_leaf", 20)),
                    "learning_rate": float(p.get("learning_rate", 0.1)), "iterations": r.n_iterations,
                    "validation_log_loss": float(r.validation_loss), "seconds": 0.0, "member": r.spec.tag,
                    "member_seconds": round(float(r.fit_seconds), 3)}
            out.append((FlatForest.from_arrays(r.forest), float(r.validation_loss), info))
    return out


def recalibration_stop(deadline: FitBudget) -> Callable[[], bool] | None:
    """What the recalibration asks before each of its fits (``assemble_head``'s ``stop``; None
    without a budget): True once the seconds left to the ``relevance_head`` end are no more than
    the last fit took (the time between this call and the one before; before the first fit, 0:
    True once the end is passed). Cost known before work: a fit that would end past the end is not
    started."""
    if not deadline.limited:
        return None
    previous: list[float] = []

    def stop() -> bool:
        now = deadline.clock()
        last_fit = now - previous[-1] if previous else 0.0
        previous.append(now)
        return deadline.end("relevance_head") - now <= last_fit

    return stop


def head_model_within(deadline: FitBudget, train: RankingData, vali: RankingData, n_grades: int, n_leaves: int,
                      min_data_in_leaf: int, settings: Any, seed: int) -> HeadModel | None:
    """``fit_head_model`` (arguments as ``head_jobs`` gives them) stopped at the
    ``relevance_head`` stage's end; None (not trained) when the task starts after it (a task of
    its own, for a pool)."""
    from tunemix.train.relevance.fit import fit_head_model

    if deadline.limited and deadline.passed("relevance_head"):
        return None
    return fit_head_model(train, vali, n_grades, n_leaves, min_data_in_leaf, settings, seed,
                          time_budget_s=deadline.run_seconds("relevance_head"))


def fit_head(cfg: TrainConfig, prep: Prepared, model: EnsembleModel, served: dict[str, np.ndarray],
             progress: bool = False, reused: list[HeadModel] | None = None,
             deadline: FitBudget | None = None, pretrained: list[Any] | None = None) -> dict[str, Any]:
    """Train the relevance head (every model gets one unless ``[relevance] enabled = false``): its
    McRank models in parallel on the whole training set, each stopped early on the validation
    queries (and at the ``deadline``'s ``relevance_head`` end: module docstring); measure it on the
    test queries when there are some, else on validation (``served``: the model's scores of both,
    ``served_scores``). A fit that fails is logged and recorded; the model then has no head and
    ranks as it would with one. ``pretrained``: the head's own models, already trained beside the runs
    (``tunemix.train.relevance.beside``: ``fit_head_model``'s results in grid order, or the
    ValueError one raised), used instead of training them here."""
    from tunemix.train.relevance.fit import assemble_head, head_jobs, relevance_metrics

    if not cfg.relevance.enabled:
        return {"error": "disabled in the configuration ([relevance] enabled = false)"}
    try:  # the head's models are LightGBM's: a machine without it (or without its OpenMP) gets no head
        from tunemix.train.learners.lightgbm_capi import library

        library()
    except (ImportError, OSError) as exc:
        log.warning("no relevance head: LightGBM cannot be loaded (%s); install it (and libgomp1 on Debian) "
                    "for relevance estimates", exc)
        return {"error": f"LightGBM cannot be loaded: {exc}"}
    deadline = deadline or FitBudget.begin(None)
    t0 = time.perf_counter()
    h = cfg.relevance
    budget: dict[str, Any] = {}
    try:
        jobs = head_jobs(prep.train, prep.vali, prep.n_labels, h, cfg.seed)
        fitted = list(reused or [])
        if deadline.limited:
            cost = max((float(info.get("member_seconds", 0.0)) for _, _, info in fitted), default=0.0)
            k = affordable_models(deadline.left("relevance_head"), cost, cfg.run.n_jobs, len(jobs))
            budget = {"grid": len(jobs), "affordable": k, "seconds_per_model": cost,
                      "seconds_left": round(deadline.left("relevance_head"), 3)}
            jobs = jobs[:k]
        if not jobs and not fitted:
            raise ValueError("the relevance head has no models: [relevance] n_leaves is empty (or the time budget "
                             "left none) and no McRank member can be reused")
        if pretrained is not None:  # trained beside the runs (tunemix.train.relevance.beside): the same models
            own = list(pretrained)
            failed = next((m for m in own if isinstance(m, ValueError)), None)
            if failed is not None:
                raise failed
        else:  # one LightGBM thread per model, as the McRank members train (processes run them side by side)
            reused_note = f", {len(fitted)} McRank members reused: {len(jobs) + len(fitted)} in all" if fitted else ""
            with parallel_backend(cfg.run.backend, cfg.run.n_jobs, cfg.run.scheduler) as n_jobs:
                own = run_parallel([joblib.delayed(head_model_within)(deadline, *args) for args in jobs], n_jobs,
                                   f"relevance head: {len(jobs)} models to train{reused_note}", progress)
        if budget:
            budget["trained"] = sum(m is not None for m in own)
        fitted += [m for m in own if m is not None]
        model.relevance_head, recalibration = assemble_head(
            fitted, prep.n_labels, h, prep.vali, served["vali"], cfg.seed,
            recalibrate=not (deadline.limited and deadline.passed("relevance_head")),
            stop=recalibration_stop(deadline))
    except ValueError as exc:
        log.warning("no relevance head: %s", exc)
        return {"error": str(exc)}
    data, split = (prep.test, "test") if prep.test is not None and prep.test.n_docs else (prep.vali, "vali")
    probs, _ = model.relevance_head.estimate(data.features, served[split], data.query_offsets)
    out = {"trained_on": "train", "stopped_on": "vali", "measured_on": split,
           "own_models_trained": "beside the runs" if pretrained is not None else "in this stage",
           "models": model.relevance_head.models, "recalibration": recalibration,
           "seconds": round(time.perf_counter() - t0, 3), **relevance_metrics(probs, data.labels)}
    if budget:
        out["time_budget"] = budget
    return out
