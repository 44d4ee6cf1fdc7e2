"""Member jobs: fit boosting runs, score their snapshots, calibrate each snapshot several ways.

A *run* is one AdaBoost.MH fit (feature view x label grouping x learner parameters); each of
its snapshots (checkpoint iterations) times each calibrator is one *member* of the ensemble.
The functions here are top-level and take plain arrays so that joblib can ship them to worker
processes (loky), a dask cluster or ray.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from training.calibration.base import CalibrationError
from training.calibration.registry import make_calibrator
from training.learners.adaboost_mh import AdaBoostMH, FitProgress
from training.learners.label_groups import get_grouping

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunSpec:
    """What one boosting run trains on and with."""

    index: int
    view: str
    grouping: str
    params: dict[str, Any]

    @property
    def learner_tag(self) -> str:
        base = self.params.get("base", "tree")
        if base == "tree":
            tag = f"tree{self.params.get('n_leaves', 8)}"
        elif base == "product":
            tag = f"product{self.params.get('n_terms', 3)}"
        else:
            tag = "stump"
        search = self.params.get("search", "full")
        return tag if search == "full" else f"{tag}-{search}"

    @property
    def tag(self) -> str:
        return f"{self.view}|{self.grouping}|{self.learner_tag}"


@dataclass
class RunResult:
    spec: RunSpec
    forest: dict[str, np.ndarray]
    checkpoints: list[int]
    alphas: np.ndarray
    class_gains: np.ndarray
    n_classes: int
    n_iterations: int
    stop_reason: str
    fit_seconds: float
    train_error: float


class _IterationReporter:
    """AdaBoost.MH fit callback that sends finished iterations to a queue (at most every
    ``interval`` seconds, and once at the end), for a progress bar in the parent process."""

    def __init__(self, queue: Any, interval: float = 0.25) -> None:
        self.queue = queue
        self.interval = interval
        self.sent = 0
        self.last = time.perf_counter()

    def __call__(self, progress: FitProgress) -> None:
        now = time.perf_counter()
        if now - self.last >= self.interval:
            self.flush(progress.iteration)
            self.last = now

    def flush(self, iteration: int) -> None:
        if iteration > self.sent:
            self.queue.put(iteration - self.sent)
            self.sent = iteration


def fit_run(spec: RunSpec, features: np.ndarray, labels: np.ndarray, n_labels: int,
            seed: int, time_budget_s: float | None, progress_queue: Any = None) -> RunResult:
    """Fit one AdaBoost.MH run on the fit part (features already in the run's view).

    ``progress_queue`` (a multiprocessing manager queue, or None) receives the number of newly
    finished iterations as the run goes; a run that stops early sends the iterations it skipped
    too, so the parent's total always adds up.
    """
    params = dict(spec.params)
    params.setdefault("seed", seed + spec.index)
    model = AdaBoostMH(**params, time_budget_s=time_budget_s)
    t0 = time.perf_counter()
    reporter = _IterationReporter(progress_queue) if progress_queue is not None else None
    model.fit(features, labels, label_grouping=get_grouping(spec.grouping, n_labels), callback=reporter)
    if reporter is not None:
        reporter.flush(int(params.get("n_iterations", model.n_iterations_)))
    return RunResult(
        spec=spec,
        forest=model.to_forest().to_arrays(),
        checkpoints=[int(c) for c in model.checkpoints_],
        alphas=np.asarray(model.alphas_, dtype=np.float64),
        class_gains=np.asarray(model.class_gains_, dtype=np.float64),
        n_classes=int(model.n_classes_),
        n_iterations=int(model.n_iterations_),
        stop_reason=str(model.stop_reason_),
        fit_seconds=time.perf_counter() - t0,
        train_error=float(model.train_error_[-1]) if len(model.train_error_) else float("nan"),
    )


@dataclass
class CalibrationResult:
    """Fitted calibrators of one snapshot (failures recorded, never raised)."""

    run: int
    iterations: int
    fitted: list[Any] = field(default_factory=list)  # Calibrator objects
    failed: list[dict[str, str]] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)


def calibrate_snapshot(run: int, iterations: int, raw: np.ndarray, classes: np.ndarray,
                       query_offsets: np.ndarray, gains: np.ndarray, specs: list[str],
                       shift_scale: float) -> CalibrationResult:
    """Fit every calibrator in ``specs`` on one snapshot's raw scores of the calibration part."""
    out = CalibrationResult(run=run, iterations=iterations)
    for spec in specs:
        t0 = time.perf_counter()
        try:
            cal = make_calibrator(spec, shift_scale=shift_scale)
            cal.fit(raw, classes, query_offsets, gains)
            probe = cal.transform(raw[: min(len(raw), 64)])
            if not np.all(np.isfinite(probe)):
                raise CalibrationError("non-finite output on the calibration part")
            out.fitted.append(cal)
        except (CalibrationError, ValueError, FloatingPointError, np.linalg.LinAlgError) as exc:
            out.failed.append({"calibrator": spec, "error": f"{type(exc).__name__}: {exc}"})
            log.warning("run %d snapshot %d: calibrator %s dropped (%s)", run, iterations, spec, exc)
        out.seconds[spec] = time.perf_counter() - t0
    return out
