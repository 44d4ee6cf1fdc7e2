"""The time budget of one fit: a single deadline for everything ``train`` does, with a share of it
for each stage (``[run] time_budget_s``, ``--time-budget``, ``TuneMixRanker(time_budget_s=)``).

A budget of B seconds starts when the fit starts (``FitBudget.begin``, at the entry of
``tunemix.train.train.train`` or of ``TuneMixRanker.fit``) and every stage gets an absolute end
time, a fraction of B from that start (``STAGE_ENDS``):

==================  =====  ==================================================================
stage               ends   how it obeys
==================  =====  ==================================================================
``boosting``        0.65 B every run's seconds are what is left to this end *when the run starts*
                           (a run of a second wave gets less, not a fixed slice); LightGBM runs
                           stop after the iteration that reaches it (a callback raising
                           ``EarlyStopException``), AdaBoost.MH after the iteration that reaches it
``calibration``     0.75 every run's last snapshot is calibrated; its earlier snapshots only while
                           this end is not reached
``mixing``          0.85 the forecaster's rescaling modes are tried in order until this end (the
                           anytime form: the best mix found so far); the side comparisons (other
                           mixers, each member type alone) are skipped once it is reached
``relevance_head``  0.97 as many of the head's own models as fit the time left (each costs about
                           what the McRank member did), started only before this end and stopped
                           at it; with none, the head is the McRank member alone; its
                           recalibration is left out once this end is reached
==================  =====  ==================================================================

The last 3% is for what remains (the served scores, the record). Nothing here reads a clock
but through ``FitBudget.clock``: tests pass a fake one and check that each stage obeys its end
(tests/pipeline/test_budget.py); the real wall clock is measured by ``python -m bench.budget``.
Without a budget every end is infinite and nothing is cut.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

#: each stage's end, as a fraction of the budget from the fit's start
STAGE_ENDS = {"boosting": 0.65, "calibration": 0.75, "mixing": 0.85, "relevance_head": 0.97}
#: seconds a run gets when it starts past its stage's end: it trains one iteration and stops (a run
#: with no model at all would leave its members out of the mix)
MIN_RUN_S = 1e-3


@dataclass(frozen=True)
class FitBudget:
    """The budget's start (``clock()`` seconds) and size (None: no budget), and the clock read: a
    whole fit's deadline with a share per stage. Not ``tunemix.core.deadline.Deadline``, which is one
    request's (or one library call's) deadline and row budget, checked inside the kernels' callers.
    Picklable (process pools ship it) as long as ``clock`` is: ``time.perf_counter`` (a system-wide
    monotonic clock on Linux, so the same in a worker process) or a test's fake clock."""

    start: float
    budget_s: float | None
    clock: Callable[[], float] = field(default=time.perf_counter, compare=False)

    @classmethod
    def begin(cls, budget_s: float | None, clock: Callable[[], float] = time.perf_counter) -> FitBudget:
        if budget_s is not None and not budget_s > 0:
            raise ValueError(f"the time budget must be positive seconds or None, got {budget_s}")
        return cls(start=clock(), budget_s=budget_s, clock=clock)

    @property
    def limited(self) -> bool:
        return self.budget_s is not None

    def end(self, stage: str) -> float:
        """The clock time at which ``stage`` must be over (inf without a budget)."""
        if self.budget_s is None:
            return math.inf
        return self.start + STAGE_ENDS[stage] * self.budget_s

    def left(self, stage: str) -> float:
        """Seconds left until ``stage``'s end (negative once passed; inf without a budget)."""
        return self.end(stage) - self.clock()

    def passed(self, stage: str) -> bool:
        return self.left(stage) <= 0.0

    def run_seconds(self, stage: str) -> float | None:
        """The seconds a task starting now may take (None without a budget; at least
        ``MIN_RUN_S``): what the learners' ``time_budget_s`` takes."""
        if self.budget_s is None:
            return None
        return max(self.left(stage), MIN_RUN_S)

    def elapsed(self) -> float:
        return self.clock() - self.start

    def within(self, stage: str, seconds: float) -> FitBudget:
        """This budget with ``stage`` ending ``seconds`` from now, or at its own end when that is
        earlier: one round of the search (``tunemix.train.budget_choice``). The other stages' ends
        move in proportion, so the copy is for ``stage`` alone. Without a budget: this one."""
        if self.budget_s is None:
            return self
        end = min(self.end(stage), self.clock() + max(seconds, 0.0))
        return FitBudget(start=self.start, budget_s=max(end - self.start, 1e-9) / STAGE_ENDS[stage], clock=self.clock)

    def record(self) -> dict[str, Any]:
        """What the training record says of the budget (None without one)."""
        if self.budget_s is None:
            return {"budget_s": None}
        ends = {k: round(v * self.budget_s, 3) for k, v in STAGE_ENDS.items()}
        return {"budget_s": self.budget_s, "stage_ends_s": ends}


def clock_for(backend: str) -> Callable[[], float]:
    """The clock a deadline reads on ``backend``: the monotonic ``time.perf_counter`` where every
    worker is on this machine (its value is the same in every process), the wall clock
    ``time.time`` where workers may be on other machines (dask, ray: their monotonic clocks
    have other origins; wall clocks are kept in step by NTP)."""
    return time.time if backend in ("dask", "ray") else time.perf_counter


#: CPU seconds per document and column of a feature view before its runs' first iteration:
#: computing the view and its codes (``tunemix.train.data.binned``: 1.47 CPU-s for 120k documents of
#: 136 raw columns, 9.0e-8 s each) and LightGBM's Dataset of the codes, shared by the view's runs
#: (2.7 CPU-s, 1.65e-7 s each; ``tunemix.train.learners.lightgbm_data.sharing_datasets``), measured on
#: this project's 2-core machine (cProfile and ``time.process_time``, load average 6)
VIEW_S_PER_VALUE = 2.6e-7
#: the share of the budget the views' fixed work may take: the rest is for the imports, the runs'
#: iterations, calibration, mixing and the head
VIEW_SHARE = 0.3


#: seconds loading LightGBM takes before the first LightGBM run can start, when this process has
#: not loaded it yet: its library only (``tunemix.train.learners.lightgbm_capi``: 4-7 ms on this
#: project's 2-core machine, quiet; its Python package, which loads scikit-learn, SciPy's
#: statistics and pandas, takes 1.6-2.0 s and is not imported)
LIGHTGBM_IMPORT_S = 0.05
#: the fewest training queries a budget's subsample keeps (``affordable_fraction``)
MIN_SUBSAMPLE_QUERIES = 50


def fixed_seconds(lightgbm_needed: bool, lightgbm_loaded: bool) -> float:
    """Seconds of the views' share a fit spends before any view is computed: loading LightGBM's
    library (``LIGHTGBM_IMPORT_S``) when a run needs it and the process has not loaded it."""
    return LIGHTGBM_IMPORT_S if lightgbm_needed and not lightgbm_loaded else 0.0


def affordable_fraction(budget_s: float | None, n_docs: int, columns: int, fixed_s: float = 0.0) -> float:
    """The share of the training queries a budget of ``budget_s`` seconds can train on: 1 when the
    first view of all ``n_docs`` documents (``columns`` wide) costs at most what is left of the
    views' share, ``VIEW_SHARE`` x B - ``fixed_s`` (seconds spent first: ``fixed_seconds``),
    else that share over the view's cost, ``VIEW_S_PER_VALUE`` x documents x columns (0 when
    nothing is left: the caller keeps ``MIN_SUBSAMPLE_QUERIES``). Cost known before work: the
    views, their codes and LightGBM's Dataset scale with the documents, so the runs train on a
    sample of the queries whose first view fits, instead of spending the budget before their first
    iteration. At 120k documents of 136 features a budget of 10 s keeps (3 - 2) / 4.25 = 0.235
    of them (LightGBM not loaded), one of 60 s all; MQ2008 (9,630 x 46: 0.12 s) all from 7 s."""
    if budget_s is None:
        return 1.0
    allowed = VIEW_SHARE * budget_s - max(fixed_s, 0.0)
    cost = VIEW_S_PER_VALUE * max(n_docs, 0) * max(columns, 0)
    if cost <= allowed:
        return 1.0
    return max(allowed, 0.0) / cost


def affordable_views(budget_s: float | None, n_docs: int, widths: list[tuple[str, int]],
                     fixed_s: float = 0.0) -> list[str]:
    """The views of ``widths`` ((view, columns), in order of preference) whose fixed work fits the
    budget: a view costs about ``VIEW_S_PER_VALUE`` x documents x columns seconds before its runs
    train a single iteration, and the views kept (always the first, without which nothing
    trains) may cost together ``VIEW_SHARE`` x the budget less ``fixed_s`` (loading LightGBM,
    ``fixed_seconds``). All of them without a budget. At 120k documents of 136 features: raw
    4.3 s, raw+std (272 columns) 8.5 s, so a budget of 10 s keeps raw alone and one of 60 s both;
    on MQ2008's 9,630 documents of 46 features both cost 0.35 s."""
    if budget_s is None or not widths:
        return [v for v, _ in widths]
    allowed = VIEW_SHARE * budget_s - max(fixed_s, 0.0)
    kept: list[str] = []
    spent = 0.0
    for view, columns in widths:
        cost = VIEW_S_PER_VALUE * max(n_docs, 0) * max(columns, 0)
        if kept and spent + cost > allowed:
            continue
        kept.append(view)
        spent += cost
    return kept


def affordable_models(seconds_left: float, seconds_per_model: float, n_jobs: int, wanted: int) -> int:
    """How many of ``wanted`` models of about ``seconds_per_model`` each fit in ``seconds_left``
    on ``n_jobs`` workers: floor(left x jobs / cost), between 0 and ``wanted`` (all of them when
    the cost is unknown, i.e. not positive: the models are then stopped at the deadline)."""
    if math.isinf(seconds_left):
        return wanted
    if seconds_left <= 0:
        return 0
    if not seconds_per_model > 0:
        return wanted
    return max(0, min(wanted, int(seconds_left * max(n_jobs, 1) / seconds_per_model)))
