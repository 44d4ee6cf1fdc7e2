"""The time budget as a logic property (``tunemix.train.budget``): every stage of ``train``
receives its end and obeys it, read through a fake clock (no timed test: the wall clock is
measured by ``python -m bench.budget``)."""

from __future__ import annotations

import copy
import math
import tomllib
from typing import Any

import numpy as np
import pytest

from tunemix.train import train as train_module
from tunemix.train.budget import (
    MIN_RUN_S,
    STAGE_ENDS,
    VIEW_S_PER_VALUE,
    VIEW_SHARE,
    FitBudget,
    affordable_models,
    affordable_views,
)
from tunemix.train.config import load_config
from tunemix.train.mixing import search_forecasters

lgb = pytest.importorskip("lightgbm")


class FakeClock:
    """A clock the test sets: ``clock.now`` seconds."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_deadline_ends_and_seconds_left() -> None:
    clock = FakeClock(100.0)
    d = FitBudget.begin(10.0, clock)
    assert d.start == 100.0 and d.limited
    for stage, share in STAGE_ENDS.items():
        assert d.end(stage) == pytest.approx(100.0 + 10.0 * share)
    clock.now = 103.0
    assert d.left("boosting") == pytest.approx(3.5) and not d.passed("boosting")
    assert d.run_seconds("boosting") == pytest.approx(3.5) and d.elapsed() == pytest.approx(3.0)
    clock.now = 107.0  # past the boosting end, before the calibration end
    assert d.passed("boosting") and not d.passed("calibration")
    assert d.run_seconds("boosting") == MIN_RUN_S  # a run starting late still trains one iteration
    assert d.record()["stage_ends_s"]["relevance_head"] == pytest.approx(9.7)
    free = FitBudget.begin(None, clock)
    assert math.isinf(free.left("mixing")) and not free.passed("relevance_head")
    assert free.run_seconds("boosting") is None
    with pytest.raises(ValueError, match="positive"):
        FitBudget.begin(0.0)
    # stage ends are ordered: each stage ends after the one before and before the budget
    assert list(STAGE_ENDS.values()) == sorted(STAGE_ENDS.values()) and max(STAGE_ENDS.values()) < 1.0


def test_remote_workers_read_the_wall_clock() -> None:
    import time

    from tunemix.train.budget import clock_for

    assert clock_for("dask") is time.time and clock_for("ray") is time.time
    assert clock_for("threads") is time.perf_counter and clock_for("loky") is time.perf_counter


def test_affordable_models() -> None:
    assert affordable_models(10.0, 3.0, 2, 12) == 6       # floor(10 x 2 / 3)
    assert affordable_models(10.0, 3.0, 1, 2) == 2        # no more than wanted
    assert affordable_models(-1.0, 3.0, 2, 12) == 0       # the time is spent
    assert affordable_models(math.inf, 3.0, 2, 12) == 12  # no budget
    assert affordable_models(5.0, 0.0, 2, 12) == 12       # unknown cost: all, stopped at the deadline


def test_affordable_views() -> None:
    """Views kept in order while their estimated fixed work fits VIEW_SHARE of the budget; the
    first always; every view without a budget."""
    widths = [("raw", 136), ("raw+std", 272), ("raw+white", 272)]
    assert affordable_views(None, 120_000, widths) == ["raw", "raw+std", "raw+white"]
    raw = VIEW_S_PER_VALUE * 120_000 * 136  # the raw view's estimated seconds; raw+std costs twice it
    assert affordable_views(3 * raw / VIEW_SHARE, 120_000, widths) == ["raw", "raw+std"]
    assert affordable_views(3 * raw / VIEW_SHARE * 0.99, 120_000, widths) == ["raw"]
    assert affordable_views(0.01, 120_000, widths) == ["raw"]  # the first even past the budget
    assert affordable_views(5 * raw / VIEW_SHARE, 120_000, widths) == ["raw", "raw+std", "raw+white"]
    # a cheaper later view is kept when a dearer one before it is not
    assert affordable_views(2.5 * raw / VIEW_SHARE, 120_000, [("raw", 136), ("raw+std", 272), ("x", 68)]) == [
        "raw", "x"]
    assert affordable_views(10.0, 120_000, []) == []


def test_lightgbm_runs_stop_at_the_iteration_that_reaches_the_deadline() -> None:
    from tunemix.train.learners.mcrank import IterationBudget

    clock = FakeClock(0.0)
    seen: list[int] = []
    budget = IterationBudget(5.0, seen.append, clock)
    for it in range(3):  # 0, 2, 4 seconds: under the budget
        clock.now = 2.0 * it
        assert budget(it + 1) is False
    clock.now = 5.0
    assert budget(4) is True
    assert seen == [1, 2, 3, 4] and budget.stopped
    free = IterationBudget(None, None, clock)
    clock.now = 1e9
    assert free(1) is False and not free.stopped  # no budget: never stops


def test_a_run_gets_the_seconds_left_when_it_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    got: list[float | None] = []

    def fake_fit_run(spec: Any, *args: Any) -> str:
        got.append(args[-2])  # time_budget_s, before the progress queue
        return "run"

    monkeypatch.setattr(train_module, "fit_run", fake_fit_run)
    clock = FakeClock(0.0)
    d = FitBudget.begin(20.0, clock)
    clock.now = 4.0
    train_module.run_within(d, "spec", "x", "y", "o", None, None, None, 3, 0, None)
    clock.now = 15.0  # a run of a later wave, past the boosting end (13 s)
    train_module.run_within(d, "spec", "x", "y", "o", None, None, None, 3, 0, None)
    assert got == [pytest.approx(9.0), MIN_RUN_S]


def test_calibration_keeps_the_last_snapshot_past_its_end(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(train_module, "calibrate_snapshot", lambda *args: args)
    clock = FakeClock(0.0)
    d = FitBudget.begin(10.0, clock)
    assert train_module.calibrate_within(d, False, "a") == ("a",)
    clock.now = 8.0  # past the calibration end (7.5 s)
    assert train_module.calibrate_within(d, False, "a") is None
    assert train_module.calibrate_within(d, True, "a") == ("a",)


def test_the_mix_is_anytime() -> None:
    rng = np.random.default_rng(0)
    offsets = np.arange(0, 201, 10, dtype=np.int64)
    labels = rng.integers(0, 3, 200)
    scores = labels[:, None] + rng.normal(0.0, 1.0, (200, 4))
    modes = ["none", "zscore_query", "minmax_query"]
    clock = FakeClock(0.0)
    d = FitBudget.begin(10.0, clock)
    full = search_forecasters(scores, labels, offsets, modes=modes, sets=[(None, None)], measure="ndcg@10",
                              convention="yahoo", deadline=d)
    assert [m for m, _, _ in full.candidates] == modes
    clock.now = 9.0  # past the mixing end: the first candidate only, the best so far
    late = search_forecasters(scores, labels, offsets, modes=modes, sets=[(None, None)], measure="ndcg@10",
                              convention="yahoo", deadline=d)
    assert [m for m, _, _ in late.candidates] == ["none"] and late.pick == 0


CONFIG: dict[str, Any] = tomllib.loads("""
name = "budget"
seed = 1
[data.synthetic]
queries = [40, 15, 15]
docs_per_query = [8, 20]
features = 6
levels = 3
seed = 4
[mixer]
compare = ["uniform"]
[run]
backend = "sequential"
report_plots = false
time_budget_s = 10.0
search = false  # the stages after boosting; the search's own test: tests/pipeline/test_search.py
[relevance]
n_leaves = [4, 7]
min_data_in_leaf = [5]
""")


def _train(after_boosting: float, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Train with a budget of 1e6 fake seconds: the runs never stop for it (the learners read the
    real clock); once they are done the clock reads ``after_boosting`` for every later stage:
    before every end (0) or past all of them (1e6)."""
    cfg = load_config(None, {}, tables=copy.deepcopy(CONFIG))
    clock = FakeClock(0.0)
    deadline = FitBudget.begin(1e6, clock)
    fit_runs = train_module.fit_runs

    def runs_then_time_passes(*args: Any, **kwargs: Any) -> Any:
        out = fit_runs(*args, **kwargs)
        clock.now = after_boosting
        return out

    monkeypatch.setattr(train_module, "fit_runs", runs_then_time_passes)
    return train_module.train(cfg, progress=False, save=False, deadline=deadline).record


def test_every_stage_obeys_its_end(monkeypatch: pytest.MonkeyPatch) -> None:
    early, late = _train(0.0, monkeypatch), _train(1e6, monkeypatch)
    assert [r["iterations"] for r in early["runs"]] == [r["iterations"] for r in late["runs"]]
    n_runs = len(late["runs"])
    snapshots = sum(len(r["checkpoints"]) for r in late["runs"])
    assert snapshots > n_runs  # AdaBoost.MH keeps several snapshots: calibration has some to cut
    # before every end: nothing is cut
    assert early["time_budget"]["snapshots_calibrated"] == snapshots and early["time_budget"]["skipped"] == []
    assert early["time_budget"]["mixing_candidates"] > 1 and early["mix_by_member_type"]
    head = early["relevance_head"]["time_budget"]
    assert head["trained"] == head["affordable"] == head["grid"] == 2
    # past every end: each run's last snapshot only, one mix candidate, no side comparisons, no
    # model of the head's own and no recalibration; the model is still whole and ranks
    assert late["time_budget"]["snapshots_calibrated"] == n_runs
    last = {f"{r['tag']}|t={r['checkpoints'][-1]}" for r in late["runs"]}
    assert {m["name"].rsplit("|", 1)[0] for m in late["members"]} == last
    assert late["time_budget"]["mixing_candidates"] == 1
    assert late["time_budget"]["skipped"] == ["mixer_comparison", "type_comparison", "other_conventions",
                                              "best_feature"]
    assert list(late["evaluation"]["vali"]["ensemble"]) == ["yahoo"] and late["best_feature"] is None
    assert len(early["evaluation"]["vali"]["ensemble"]) == 10 and early["best_feature"]["feature"] >= 1
    assert late["relevance_head"]["time_budget"]["trained"] == 0
    assert all("member" in m for m in late["relevance_head"]["models"])  # the McRank member alone
    assert late["relevance_head"]["recalibration"]["applied"] is False
    assert late["evaluation"]["test"]["ensemble"]["yahoo"]["ndcg@10"] is not None
    # the report of a model cut by its budget renders (what `tunemix train --time-budget` writes)
    from tunemix.train.report import render_report

    text = render_report(late, plots=False)["report.md"].decode()
    assert "under the `yahoo` convention" in text


def test_the_recalibration_starts_a_fit_only_while_one_fits() -> None:
    """Asked before each fit: True once the time left to the head's end is no more than the last
    fit took (before the first fit, once the end is passed)."""
    from tunemix.train.relevance.stage import recalibration_stop

    clock = FakeClock(0.0)
    stop = recalibration_stop(FitBudget.begin(10.0, clock))  # the head's end: 9.7 s
    assert stop is not None and stop() is False  # before the first fit, 9.7 s left
    clock.now = 3.0
    assert stop() is False  # the first fit took 3 s, 6.7 s left
    clock.now = 6.5
    assert stop() is True  # the second took 3.5 s, 3.2 s left: a third would end past the end
    assert recalibration_stop(FitBudget.begin(None, clock)) is None
    late = recalibration_stop(FitBudget.begin(10.0, clock))
    clock.now = 6.5 + 9.7
    assert late is not None and late() is True  # past the end before any fit


def test_the_head_stops_its_recalibration_at_its_end(monkeypatch: pytest.MonkeyPatch) -> None:
    """In a fit: each L-BFGS fit of the recalibration takes 4 (fake) seconds and the stage starts
    5 s before the head's end, so one fold is fitted and the cross-validation stops there."""
    from tunemix.train.relevance import fit as relevance_fit

    cfg = load_config(None, {}, tables=copy.deepcopy(CONFIG))
    clock = FakeClock(0.0)
    budget = 1e6
    deadline = FitBudget.begin(budget, clock)
    fit_runs, fit_recalibration = train_module.fit_runs, relevance_fit.fit_recalibration

    def runs_then_time_passes(*args: Any, **kwargs: Any) -> Any:
        out = fit_runs(*args, **kwargs)
        clock.now = STAGE_ENDS["relevance_head"] * budget - 5.0
        return out

    def four_seconds(*args: Any) -> Any:
        clock.now += 4.0
        return fit_recalibration(*args)

    monkeypatch.setattr(train_module, "fit_runs", runs_then_time_passes)
    monkeypatch.setattr(relevance_fit, "fit_recalibration", four_seconds)
    record = train_module.train(cfg, progress=False, save=False, deadline=deadline).record
    recal = record["relevance_head"]["recalibration"]
    assert recal["applied"] is False and recal["reason"] == "stopped by the time budget after 1 of 5 folds"
