"""Tune, then mix: under a time budget, the boosting stage's time left after the default runs may
go to a search whose runs are mixed with the default members ("Tune and mix", the method's idea:
a diverse population mixed by the exponentially weighted forecaster, not the one configuration a
search would pick on the validation queries, which overfits a small validation set). The search
runs in rounds of bounded length, and its mix replaces the default's model only on evidence beyond
the validation queries' noise (``tunemix.train.budget_choice``).

When it runs: the fit has a time budget (``[run] time_budget_s``, ``--time-budget``,
``TuneMixRanker(time_budget_s=)``), the members are the default ones (``tunemix.train.members.auto``),
``[run] search`` is true (the default; ``search = false`` turns it off) and the validation queries
stop the runs early. Without a budget nothing changes.

The space (``SPACE``), LambdaMART (LightGBM ``lambdarank``) runs on the whole training set,
each stopped early on the validation queries' NDCG@10 with the default runs' patience (the
tiny-validation rule's 100 and no subsampling where it applies, ``auto.small_validation``):

=====================  ==========================  =========================================
``n_leaves``           4-63, log-uniform            tree size: the main axis of bias/variance
``learning_rate``      0.02-0.2, log-uniform        shrinkage (and the iterations a run needs)
``min_data_in_leaf``   5-100, log-uniform           leaf size: regularisation on small data
``feature_fraction``   0.5-1                        features per tree (1 under the rule)
``bagging_fraction``   0.5-1                        documents per iteration (1 under the rule)
``lambda_l2``          1e-3-10, log-uniform         L2 on the leaf values
``view``               the default runs' views      raw or query-standardised features
``seed``               drawn                        LightGBM's bagging and feature draws
=====================  ==========================  =========================================

The sampler is a scrambled Sobol sequence (Owen 1998; ``scipy.stats.qmc.Sobol``) seeded by the
fit's seed: quasi-random points spread over the unit cube, mapped to the axes above (log axes
by x -> lo (hi / lo)^x), so the population is diverse by construction and the same seed gives the
same configurations in the same order (the first n of them, n set by the time). No adaptive
(TPE-like) update: one measures no better (docs/method.md, "Tune, then mix").

Cost known before work: seconds per iteration are measured on the default LambdaMART runs
(their fit seconds over the iterations they trained: the best one plus the patience), then on
the search's own runs as they finish (``measured_cost``: the default runs trained more at once,
so their figure is high); a configuration's cost per iteration is that figure times
``leaf_cost(n_leaves)`` (LightGBM's per-iteration time grows with the leaves; the gradients and
the histogram pass do not) times the square root of its bagging fraction. Its expected
iterations are the default runs' (median) times their learning rate over its own. Each run's
``n_iterations`` is capped so that it ends before the boosting stage's end at that cost, and
the deadline still stops it there; a run is started only while the time left buys at least
``MIN_ITERATIONS`` of it. Runs go ``workers`` at a time in threads of this process (LightGBM
releases the GIL), a new one as soon as one ends.
"""

from __future__ import annotations

import logging
import math
import statistics
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tunemix.train.budget import FitBudget
from tunemix.train.members.types import RunResult, RunSpec

log = logging.getLogger(__name__)

#: the search space: name -> (low, high, log axis)
SPACE: dict[str, tuple[float, float, bool]] = {
    "n_leaves": (4.0, 63.0, True),
    "learning_rate": (0.02, 0.2, True),
    "min_data_in_leaf": (5.0, 100.0, True),
    "feature_fraction": (0.5, 1.0, False),
    "bagging_fraction": (0.5, 1.0, False),
    "lambda_l2": (1e-3, 10.0, True),
}
#: a run starts only if the time left buys at least this many of its iterations
MIN_ITERATIONS = 30
#: at most this many search runs (each is a member: the mix's cost grows with them)
MAX_RUNS = 48
#: the iteration cap of a search run (the default runs' own)
MAX_ITERATIONS = 2000


def leaf_cost(n_leaves: float) -> float:
    """Relative seconds per LightGBM iteration of a tree of ``n_leaves`` leaves: a fixed part (the
    gradients and one histogram pass over the documents) and a part per split, 1 + L / 16
    (docs/method.md, "Tune, then mix": its fit on MQ2008 and the MSLR split)."""
    return 1.0 + float(n_leaves) / 16.0


@dataclass
class SearchPlan:
    """What the search reads of the default runs and the configuration."""

    views: list[str]
    patience: int
    rule: bool  # the tiny-validation rule: no subsampling
    s_per_iteration: float  # seconds per iteration per unit of leaf_cost
    iterations_at_rate: float  # median iterations trained x learning rate of the default runs
    seed: int


@dataclass
class SearchOutcome:
    """The search's runs and its record (``record["search"]``)."""

    runs: list[RunResult] = field(default_factory=list)
    record: dict[str, Any] = field(default_factory=dict)


def sample_configs(n: int, seed: int, views: list[str], rule: bool) -> list[dict[str, Any]]:
    """The first ``n`` configurations of the seeded scrambled Sobol sequence over ``SPACE`` (and a
    view and a LightGBM seed per point); under the tiny-validation ``rule`` no subsampling."""
    from scipy.stats import qmc

    if n <= 0:
        return []
    names = list(SPACE)
    sobol = qmc.Sobol(d=len(names) + 1, scramble=True, seed=seed)
    points = sobol.random(1 << max(0, math.ceil(math.log2(n))))[:n]  # a power of two keeps its balance
    seeds = np.random.default_rng(seed).integers(0, 2**31 - 1, n)
    out = []
    for k, u in enumerate(points):
        cfg: dict[str, Any] = {}
        for j, name in enumerate(names):
            lo, hi, log_axis = SPACE[name]
            cfg[name] = lo * (hi / lo) ** u[j] if log_axis else lo + (hi - lo) * u[j]
        cfg["n_leaves"] = round(float(cfg["n_leaves"]))
        cfg["min_data_in_leaf"] = round(float(cfg["min_data_in_leaf"]))
        cfg["learning_rate"] = float(f"{cfg['learning_rate']:.3g}")
        cfg["lambda_l2"] = float(f"{cfg['lambda_l2']:.3g}")
        for name in ("feature_fraction", "bagging_fraction"):
            cfg[name] = 1.0 if rule else round(float(cfg[name]), 2)
        cfg["view"] = views[min(int(u[-1] * len(views)), len(views) - 1)]
        cfg["seed"] = int(seeds[k])
        out.append(cfg)
    return out


def trained_iterations(run: RunResult) -> int:
    """Iterations a finished LightGBM run trained: its best one plus the patience when it stopped
    early, its cap when it reached it, else (stopped by the deadline) what it kept."""
    kept = int(run.n_iterations)
    cap = int(run.spec.params.get("n_iterations", kept))
    if run.stop_reason == "early_stopping":
        return min(kept + int(run.spec.params.get("early_stopping", 0)), cap)
    if run.stop_reason == "n_iterations":
        return max(cap, 1)
    return max(kept, 1)


def make_plan(runs: list[RunResult], seed: int, rule: bool) -> SearchPlan | None:
    """The cost model from the default LambdaMART runs that stopped early (None: no such run)."""
    lm = [r for r in runs if r.spec.type == "lambdamart" and int(r.spec.params.get("early_stopping", 0)) > 0]
    if not lm:
        return None
    per_iter = [unit_seconds(r) for r in lm]
    at_rate = [trained_iterations(r) * float(r.spec.params.get("learning_rate", 0.1)) for r in lm]
    return SearchPlan(views=list(dict.fromkeys(r.spec.view for r in lm)),
                      patience=max(int(r.spec.params["early_stopping"]) for r in lm), rule=rule,
                      s_per_iteration=max(statistics.median(per_iter), 1e-6),
                      iterations_at_rate=statistics.median(at_rate), seed=seed)


def unit_seconds(run: RunResult) -> float:
    """A finished run's seconds per iteration per unit of ``leaf_cost`` and bagging share."""
    return run.fit_seconds / (trained_iterations(run) * leaf_cost(run.spec.params.get("n_leaves", 16))
                              * float(run.spec.params.get("bagging_fraction", 1.0)) ** 0.5)


def measured_cost(search_runs: list[RunResult], prior: float) -> float:
    """The cost per iteration the next runs are sized by: the median over the search's finished
    runs (measured as they run: ``workers`` at a time, on the machine as loaded now), ``prior``
    (the default runs', which trained more runs at once) until one has finished."""
    seen = [unit_seconds(r) for r in search_runs if r.fit_seconds > 0]
    return max(statistics.median(seen), 1e-6) if seen else prior


def run_spec(plan: SearchPlan, config: dict[str, Any], index: int, seconds_left: float) -> tuple[RunSpec, float, int]:
    """The run of ``config`` (number ``index``), its expected seconds and iterations, its
    iteration cap sized to ``seconds_left``."""
    per_iteration = plan.s_per_iteration * leaf_cost(config["n_leaves"]) * config["bagging_fraction"] ** 0.5
    expected = min(MAX_ITERATIONS, max(plan.patience + 10, int(plan.iterations_at_rate / config["learning_rate"])))
    cap = int(min(MAX_ITERATIONS, seconds_left / per_iteration))
    params = {k: config[k] for k in SPACE} | {
        "n_iterations": cap, "early_stopping": plan.patience, "fit_on": "train", "checkpoints": [],
        "seed": config["seed"]}
    spec = RunSpec(index=index, view=config["view"], grouping="original", params=params, type="lambdamart")
    return spec, per_iteration * min(expected, cap), cap


def search(runs: list[RunResult], fit_one: Callable[[RunSpec], RunResult], deadline: FitBudget, *, seed: int,
           rule: bool, workers: int, enabled: bool, why_not: str | None = None,
           tried: Sequence[RunResult] = ()) -> SearchOutcome:
    """Runs of sampled configurations until the boosting stage's end (module docstring; one round
    of ``tunemix.train.budget_choice``: a ``deadline`` whose boosting stage ends with the round),
    numbered after ``runs`` (the default runs, which size them) and ``tried`` (the earlier rounds'
    runs: the configurations go on after theirs, and their measured cost sizes the next);
    ``fit_one(spec)`` trains one (within the deadline). The record says what was tried, each
    run's iterations and seconds (its weight share is added after the mix,
    :func:`add_weight_shares`), and why the search ended or did not run."""
    record: dict[str, Any] = {"enabled": False, "space": {k: list(v) for k, v in SPACE.items()},
                              "sampler": "scrambled Sobol (scipy.stats.qmc), seeded by the fit's seed", "runs": []}
    plan = make_plan(runs, seed, rule)
    reason = why_not
    if reason is None and not enabled:
        reason = "[run] search = false"
    if reason is None and not deadline.limited:
        reason = "no time budget"
    if reason is None and plan is None:
        reason = "no default LambdaMART run stopped early on validation: nothing to size the runs by"
    if reason is not None or plan is None:
        record.update(summary=f"no search: {reason}", reason=reason)
        return SearchOutcome(record=record)
    record.update(enabled=True, workers=workers, patience=plan.patience, tiny_validation_rule=rule,
                  seconds_per_iteration=round(plan.s_per_iteration, 6),
                  iterations_x_rate=round(plan.iterations_at_rate, 2),
                  left_at_start_s=round(deadline.left("boosting"), 3))
    plan.s_per_iteration = measured_cost(list(tried), plan.s_per_iteration)
    configs = sample_configs(MAX_RUNS, seed, plan.views, rule)[len(tried):]
    first = len(runs) + len(tried)
    out = SearchOutcome(record=record)
    ended = f"all {MAX_RUNS} configurations tried"
    pending: dict[Future[RunResult], dict[str, Any]] = {}
    nxt = 0
    with ThreadPoolExecutor(max_workers=max(workers, 1), thread_name_prefix="tunemix-search") as pool:
        while True:
            while nxt < len(configs) and len(pending) < max(workers, 1):
                left = deadline.left("boosting")
                spec, expected_s, cap = run_spec(plan, configs[nxt], first + len(out.runs) + len(pending), left)
                if cap < MIN_ITERATIONS:
                    ended = (f"{left:.1f} s left to the boosting end buys fewer than {MIN_ITERATIONS} iterations of "
                             "the next configuration")
                    nxt = len(configs) + 1  # no more starts
                    break
                row = {"config": configs[nxt], "n_iterations_cap": cap, "expected_s": round(expected_s, 3),
                       "started_at_s": round(deadline.elapsed(), 3)}
                pending[pool.submit(fit_one, spec)] = row
                nxt += 1
            if not pending:
                break
            done, _ = wait(list(pending), return_when=FIRST_COMPLETED)
            for fut in sorted(done, key=lambda f: pending[f]["started_at_s"]):
                row = pending.pop(fut)
                result = fut.result()
                out.runs.append(result)
                plan.s_per_iteration = measured_cost(out.runs, plan.s_per_iteration)
                row.update(tag=result.spec.tag, index=result.spec.index, iterations=int(result.n_iterations),
                           stop_reason=result.stop_reason, fit_seconds=round(result.fit_seconds, 3))
                record["runs"].append(row)
    # the runs' indices are their places in the fit's list of runs: renumber in finishing order
    for k, r in enumerate(out.runs):
        if r.spec.index != first + k:
            r.spec = RunSpec(index=first + k, view=r.spec.view, grouping=r.spec.grouping, params=r.spec.params,
                             type=r.spec.type)
            record["runs"][k]["index"] = first + k
    record["ended"] = ended
    record["seconds_per_iteration_last"] = round(plan.s_per_iteration, 6)
    record["summary"] = (f"{len(out.runs)} LambdaMART runs of sampled configurations in the "
                         f"{record['left_at_start_s']:.1f} s left to the boosting end after the default runs, "
                         f"every one early-stopped on validation (patience {plan.patience}"
                         + (", no subsampling: the tiny-validation rule" if rule else "")
                         + f"), each a candidate member; ended: {ended}")
    log.info("search: %s", record["summary"])
    return out


def add_weight_shares(record: dict[str, Any], member_runs: list[int], weights: list[float] | None) -> None:
    """Each search run's share of the mixer's weight (``member_runs[j]``: member j's run index), and
    the search's whole share (None for mixers without per-member weights)."""
    if not record.get("enabled"):
        return
    if weights is None:
        record["weight_share"] = None
        return
    w = np.asarray(weights, dtype=np.float64)
    total = float(w.sum()) or 1.0
    by_run: dict[int, float] = {}
    for j, run in enumerate(member_runs):
        by_run[run] = by_run.get(run, 0.0) + float(w[j]) / total
    for row in record["runs"]:
        row["weight_share"] = round(by_run.get(row["index"], 0.0), 4)
    record["weight_share"] = round(sum(row["weight_share"] for row in record["runs"]), 4)


def search_lines(record: dict[str, Any] | None) -> list[str]:
    """The report's section on the search (none without a time budget: nothing to say)."""
    if not record or record.get("reason") == "no time budget":
        return []
    lines = ["## Search (tune, then mix)", "", record.get("summary", "") + "."]
    if not record.get("enabled") or not record["runs"]:
        return [*lines, ""]
    share = record.get("weight_share")
    if share is not None:
        lines.append(f"Their share of the mix's weight: {100 * share:.1f}%.")
    lines += ["", "| run | round | kept | view | leaves | rate | min leaf | features | bagging | L2 | "
              "iterations (cap) | stop | seconds | weight |", "|---" * 14 + "|"]
    for row in record["runs"]:
        c = row["config"]
        w = row.get("weight_share")
        kept = {True: "yes", False: "no"}.get(row.get("kept"), "–")
        lines.append(f"| {row['index']} | {row.get('round', '–')} | {kept} | {c['view']} | {c['n_leaves']} | "
                     f"{c['learning_rate']:g} | "
                     f"{c['min_data_in_leaf']} | {c['feature_fraction']:g} | {c['bagging_fraction']:g} | "
                     f"{c['lambda_l2']:g} | {row['iterations']} ({row['n_iterations_cap']}) | {row['stop_reason']} | "
                     f"{row['fit_seconds']:.1f} | {'–' if w is None else f'{100 * w:.1f}%'} |")
    return [*lines, ""]
