"""The search of "tune, then mix" (``tunemix.train.search``): seeded, diverse, within the
boosting stage's end under a fake clock (no timed test), recorded, and off when asked."""

from __future__ import annotations

import copy
import threading
import tomllib
from typing import Any

import numpy as np
import pytest

from tunemix.train import train as train_module
from tunemix.train.budget import FitBudget
from tunemix.train.config import ConfigError, load_config
from tunemix.train.members.types import RunResult, RunSpec
from tunemix.train.search import (
    MAX_RUNS,
    MIN_ITERATIONS,
    SPACE,
    add_weight_shares,
    leaf_cost,
    sample_configs,
    search,
    search_lines,
    trained_iterations,
    unit_seconds,
)

pytest.importorskip("lightgbm")


class FakeClock:
    def __init__(self, now: float = 0.0) -> None:
        self.now = now
        self.lock = threading.Lock()

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        with self.lock:
            self.now += seconds


def _result(spec: RunSpec, iterations: int, seconds: float, stop: str = "early_stopping") -> RunResult:
    return RunResult(spec=spec, n_outputs=3, n_classes=3, class_gains=np.array([0.0, 1.0, 3.0]),
                     checkpoints=[iterations],
                     snapshot_iterations=[iterations], shift_scales=[None], n_iterations=iterations, n_bases=iterations,
                     stop_reason=stop, fit_seconds=seconds, train_error=float("nan"))


def _defaults() -> list[RunResult]:
    """Two default LambdaMART runs: 31 leaves on raw, 15 on raw+std, patience 50, rate 0.05; 150
    iterations trained each (100 kept + 50) in 3 s and 1.5 s."""
    base = {"learning_rate": 0.05, "n_iterations": 2000, "early_stopping": 50, "fit_on": "train", "checkpoints": [],
            "bagging_fraction": 1.0, "feature_fraction": 1.0}
    return [_result(RunSpec(0, "raw", "original", {**base, "n_leaves": 31}, "lambdamart"), 100, 3.0),
            _result(RunSpec(1, "raw+std", "original", {**base, "n_leaves": 15}, "lambdamart"), 100, 1.5)]


def test_configs_are_seeded_diverse_and_inside_the_space() -> None:
    a, b = sample_configs(16, 3, ["raw", "raw+std"], False), sample_configs(16, 3, ["raw", "raw+std"], False)
    assert a == b and a != sample_configs(16, 4, ["raw", "raw+std"], False)
    assert sample_configs(5, 3, ["raw", "raw+std"], False) == a[:5]  # the first n: a prefix, whatever n
    for c in a:
        for name, (lo, hi, _) in SPACE.items():
            assert lo <= c[name] <= hi, (name, c[name])
        assert c["view"] in ("raw", "raw+std") and isinstance(c["n_leaves"], int)
    # diverse by construction: the quasi-random points cover each axis
    assert len({c["n_leaves"] for c in a}) >= 10 and {c["view"] for c in a} == {"raw", "raw+std"}
    rates = sorted(c["learning_rate"] for c in a)
    assert rates[0] < 0.035 and rates[-1] > 0.12
    assert all(c["bagging_fraction"] == c["feature_fraction"] == 1.0 for c in sample_configs(8, 3, ["raw"], True))


def test_cost_model_reads_the_default_runs() -> None:
    runs = _defaults()
    assert trained_iterations(runs[0]) == 150
    assert trained_iterations(_result(runs[0].spec, 80, 1.0, "time_budget")) == 80
    assert trained_iterations(_result(runs[0].spec, 80, 1.0, "n_iterations")) == 2000  # it reached its cap
    assert leaf_cost(16) == 2.0 and leaf_cost(32) == 3.0


def _search(clock: FakeClock, budget: float, seconds_per_run: float, *, workers: int = 1, seed: int = 0,
            enabled: bool = True, rule: bool = False) -> tuple[Any, list[tuple[float, RunSpec]]]:
    """The search with a fake clock: every run takes ``seconds_per_run`` fake seconds."""
    deadline = FitBudget.begin(budget, clock)
    started: list[tuple[float, RunSpec]] = []

    def fit_one(spec: RunSpec) -> RunResult:
        started.append((deadline.left("boosting"), spec))
        clock.advance(seconds_per_run)
        return _result(spec, 40, seconds_per_run)

    out = search(_defaults(), fit_one, deadline, seed=seed, rule=rule, workers=workers, enabled=enabled)
    return out, started


def test_the_search_ends_before_the_boosting_end() -> None:
    clock = FakeClock(0.0)
    out, started = _search(clock, 100.0, 10.0)  # boosting ends at 65 s
    rec = out.record
    assert rec["enabled"] and len(out.runs) == len(started) == len(rec["runs"]) >= 6
    for k, (left, spec) in enumerate(started):  # every run started with time left and sized to it
        # the default runs' cost, then the median of the search's runs finished before this one
        unit = np.median([unit_seconds(r) for r in out.runs[:k]]) if k else rec["seconds_per_iteration"]
        per_iteration = unit * leaf_cost(spec.params["n_leaves"]) * spec.params["bagging_fraction"] ** 0.5
        assert left > 0 and spec.params["n_iterations"] >= MIN_ITERATIONS
        assert spec.params["n_iterations"] * per_iteration <= left * 1.001
        assert spec.params["early_stopping"] == 50 and spec.params["fit_on"] == "train"
    # the last start had time for it; the next would not have
    assert "fewer than" in rec["ended"] and clock.now >= 65.0 - 10.0
    # numbered after the default runs, in the order they finished, and recorded
    assert [r.spec.index for r in out.runs] == list(range(2, 2 + len(out.runs)))
    assert [row["index"] for row in rec["runs"]] == [r.spec.index for r in out.runs]
    assert all(row["iterations"] == 40 and row["fit_seconds"] == 10.0 for row in rec["runs"])
    # the seconds per iteration: 3 s / (150 x leaf_cost(31)) and 1.5 / (150 x leaf_cost(15)), their median
    expected = np.median([3.0 / (150 * leaf_cost(31)), 1.5 / (150 * leaf_cost(15))])
    assert rec["seconds_per_iteration"] == pytest.approx(expected, rel=1e-4)
    # then the search's own runs: 10 s for the 40 + 50 iterations each trained (its best + patience,
    # at most its cap)
    own = np.median([10.0 / (min(90, r.spec.params["n_iterations"]) * leaf_cost(r.spec.params["n_leaves"])
                             * r.spec.params["bagging_fraction"] ** 0.5) for r in out.runs])
    assert rec["seconds_per_iteration_last"] == pytest.approx(own, rel=1e-4)


def test_two_workers_train_two_runs_at_once() -> None:
    clock = FakeClock(0.0)
    deadline = FitBudget.begin(100.0, clock)
    both = threading.Barrier(2)  # the first two runs wait for each other: both in flight at once
    lefts: list[float] = []

    def fit_one(spec: RunSpec) -> RunResult:
        lefts.append(deadline.left("boosting"))
        if spec.index in (2, 3):
            both.wait(timeout=120)  # a safety against a hang, not a timing: the two meet at once
        clock.advance(10.0)
        return _result(spec, 40, 10.0)

    out = search(_defaults(), fit_one, deadline, seed=0, rule=False, workers=2, enabled=True)
    assert lefts[:2] == [65.0, 65.0]
    assert all(row["started_at_s"] < 65.0 for row in out.record["runs"])  # started before the boosting end
    assert sorted(r.spec.index for r in out.runs) == list(range(2, 2 + len(out.runs)))
    assert [row["index"] for row in out.record["runs"]] == [r.spec.index for r in out.runs]


def test_the_search_is_seeded() -> None:
    first, _ = _search(FakeClock(0.0), 100.0, 10.0, seed=7)
    second, _ = _search(FakeClock(0.0), 100.0, 10.0, seed=7)
    other, _ = _search(FakeClock(0.0), 100.0, 10.0, seed=8)
    assert [r["config"] for r in first.record["runs"]] == [r["config"] for r in second.record["runs"]]
    assert [r.spec.params for r in first.runs] == [r.spec.params for r in second.runs]
    assert [r["config"] for r in first.record["runs"]] != [r["config"] for r in other.record["runs"]]


def test_no_budget_no_switch_no_search() -> None:
    off, started = _search(FakeClock(0.0), 100.0, 10.0, enabled=False)
    assert not off.runs and not started and off.record["summary"] == "no search: [run] search = false"
    free = search(_defaults(), lambda s: pytest.fail("no run without a budget"), FitBudget.begin(None),
                  seed=0, rule=False, workers=2, enabled=True)
    assert not free.runs and free.record["summary"] == "no search: no time budget"
    assert search_lines(free.record) == []  # the report of a fit without a budget is as it was
    assert "no search: [run] search = false" in "\n".join(search_lines(off.record))
    late, started = _search(FakeClock(0.0), 0.3, 10.0)  # 0.195 s buys too few iterations
    assert not late.runs and late.record["enabled"] and "fewer than" in late.record["ended"]
    assert len(_search(FakeClock(0.0), 1e9, 1.0)[0].runs) == MAX_RUNS  # the cap on the population


def test_weight_shares_and_report_lines() -> None:
    out, _ = _search(FakeClock(0.0), 100.0, 10.0)
    rec = out.record
    member_runs = [0, 1, *(r.spec.index for r in out.runs)]
    weights = [1.0, 1.0, *([0.0] * (len(out.runs) - 1)), 2.0]
    add_weight_shares(rec, member_runs, weights)
    assert rec["weight_share"] == pytest.approx(0.5, abs=1e-3) and rec["runs"][-1]["weight_share"] == 0.5
    assert rec["runs"][0]["weight_share"] == 0.0
    text = "\n".join(search_lines(rec))
    assert "## Search (tune, then mix)" in text and "50.0%" in text and text.count("| lambdamart") == 0
    assert text.count("\n| ") == len(out.runs) + 1  # header and one row a run


CONFIG: dict[str, Any] = tomllib.loads("""
name = "search"
seed = 2
[data.synthetic]
queries = [40, 12, 15]
docs_per_query = [8, 20]
features = 6
levels = 3
seed = 5
[mixer]
compare = ["uniform"]
[run]
backend = "sequential"
report_plots = false
[relevance]
n_leaves = [4]
min_data_in_leaf = [5]
""")


def _train(monkeypatch: pytest.MonkeyPatch, **run: Any) -> dict[str, Any]:
    """A fit of the default members with a budget of 1e6 fake seconds: each default run takes 1e5
    of them (sequential: a boosting stage of 5e5), each search run 2e5."""
    tables = copy.deepcopy(CONFIG)
    tables["run"].update(run)
    cfg = load_config(None, {}, tables=tables)
    clock = FakeClock(0.0)
    real = train_module.run_within

    def timed(deadline: FitBudget, spec: RunSpec, *args: Any) -> RunResult:
        out = real(deadline, spec, *args)
        clock.advance(2e5 if "seed" in spec.params else 1e5)  # a search run, a default run
        return out

    monkeypatch.setattr(train_module, "run_within", timed)
    return train_module.train(cfg, progress=False, save=False, deadline=FitBudget.begin(1e6, clock)).record


def test_a_fit_records_every_search_run_and_serves_those_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    rec = _train(monkeypatch)
    search_rec = rec["search"]
    assert search_rec["enabled"] and search_rec["runs"] and search_rec["rounds"][0]["round"] == 1
    assert search_rec["tiny_validation_rule"] is True and search_rec["patience"] == 100  # 12 validation queries
    tags = {r["tag"] for r in rec["runs"]}
    for row in search_rec["runs"]:  # a run of the candidate kept is a run and a member of the model
        assert row["config"]["bagging_fraction"] == 1.0 and (row["tag"] in tags) == row["kept"]
        assert any(m["name"].startswith(row["tag"] + "|") for m in rec["members"]) == row["kept"]
    # the seed in a search run's tag keeps tags apart
    assert len({row["tag"] for row in search_rec["runs"]}) == len(search_rec["runs"])
    shares = [row["weight_share"] for row in search_rec["runs"]]
    assert all(0.0 <= s <= 1.0 for s in shares) and search_rec["weight_share"] == pytest.approx(sum(shares), abs=1e-3)
    again = _train(monkeypatch)  # the same configurations in the same order (a round's length is measured)
    first, second = ([r["config"] for r in x["search"]["runs"]] for x in (rec, again))
    n = min(len(first), len(second))
    assert first[:n] == second[:n]
    from tunemix.train.report import render_report

    report = render_report(rec, plots=False)["report.md"].decode()
    assert "## Search (tune, then mix)" in report and search_rec["choice"] in report


def test_the_off_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    rec = _train(monkeypatch, search=False)
    assert not rec["search"]["enabled"] and rec["search"]["summary"] == "no search: [run] search = false"
    assert not any("-s" in r["tag"].rsplit("|", 1)[-1] for r in rec["runs"])
    with pytest.raises(ConfigError, match="search"):
        load_config(None, {"run.search": "no"}, tables=copy.deepcopy(CONFIG))


def test_the_cli_flag() -> None:
    import argparse

    from tunemix.cli.train import _add_overrides, _overrides

    p = argparse.ArgumentParser()
    _add_overrides(p)
    assert _overrides(p.parse_args(["--no-search"]))["run.search"] is False
    assert _overrides(p.parse_args([]))["run.search"] is None  # the config's (default true)
