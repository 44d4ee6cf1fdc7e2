"""A time budget is never worse than no budget (``tunemix.train.budget_choice``): the default's
model is a candidate and is kept unless a mix with the search's runs beats it on validation by
more than one standard error; the search goes on only while a round is measured to help. Work is
counted (rounds, runs, fake seconds), never timed."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest

from tests.pipeline.test_search import CONFIG, FakeClock, _defaults, _result
from tunemix.core.ensemble.exponential_forecaster import one_standard_error
from tunemix.train import train as train_module
from tunemix.train.budget import FitBudget
from tunemix.train.budget_choice import FIRST_ROUND_SHARE, Candidate, choose_with_search, one_se_pick
from tunemix.train.config import load_config
from tunemix.train.members.types import RunResult, RunSpec
from tunemix.train.search import MIN_ITERATIONS, SearchOutcome, search

pytest.importorskip("lightgbm")


def _candidate(label: str, values: list[float]) -> Candidate:
    return Candidate(label, runs=0, cals=0, per_query=np.array(values))


def test_one_standard_error_by_hand() -> None:
    # values 0.4, 0.6, 0.4, 0.6: sample SD sqrt(4 x 0.01 / 3) = 0.11547, over sqrt(4): 0.057735
    assert one_standard_error([0.4, 0.6, 0.4, 0.6]) == pytest.approx(0.0577350, abs=1e-6)
    assert one_standard_error([0.4, np.nan, 0.6, 0.4, 0.6]) == pytest.approx(0.0577350, abs=1e-6)  # NaN left out
    assert one_standard_error([0.7]) == 0.0


def test_the_default_is_kept_on_noise_and_replaced_on_evidence() -> None:
    default = _candidate("default", [0.45, 0.45, 0.45, 0.45])  # mean 0.45
    noise = _candidate("round 1", [0.4, 0.6, 0.4, 0.6])  # mean 0.50, SE 0.0577: 0.05 ahead is noise
    assert one_se_pick([default, noise]) == (0, 1, pytest.approx(0.0577350, abs=1e-6))
    ahead = _candidate("round 2", [0.5, 0.7, 0.5, 0.7])  # mean 0.60, SE 0.0577: 0.15 ahead of the default
    # the first candidate within one SE of 0.60 (at least 0.5423): round 2 (round 1's 0.50 is not)
    assert one_se_pick([default, noise, ahead])[:2] == (2, 2)
    # a later round no better than an earlier one by more than an SE: the earlier one
    also = _candidate("round 3", [0.52, 0.72, 0.52, 0.72])  # mean 0.62
    assert one_se_pick([default, noise, ahead, also])[:2] == (2, 3)


def _runs(first: int, n: int, seconds: float) -> list[RunResult]:
    base = {"learning_rate": 0.05, "n_iterations": 2000, "early_stopping": 50, "fit_on": "train", "checkpoints": [],
            "n_leaves": 7, "seed": first}
    return [_result(RunSpec(first + k, "raw", "original", dict(base, seed=first + k), "lambdamart"), 40, seconds)
            for k in range(n)]


class FakeSearch:
    """Rounds of ``per_round`` runs each (``asked``: the round lengths ``choose_with_search``
    gave); a mix's validation quality on 40 queries gains ``gains[r]`` with round r's runs."""

    def __init__(self, defaults: list[RunResult], gains: list[float], per_round: int = 2,
                 rounds_available: int = 10) -> None:
        self.defaults, self.gains, self.per_round = defaults, gains, per_round
        self.rounds_available = rounds_available
        self.asked: list[float] = []
        self.calibrated: list[int] = []
        rng = np.random.default_rng(0)
        self.base = np.clip(0.6 + 0.25 * rng.standard_normal(40), 0.0, 1.0)

    def round(self, seconds: float, tried: list[RunResult]) -> SearchOutcome:
        self.asked.append(seconds)
        r = len(self.asked)
        if r > self.rounds_available:
            return SearchOutcome(record={"enabled": True, "runs": [], "ended": "all configurations tried"})
        runs = _runs(len(self.defaults) + len(tried), self.per_round, 1.0)
        rows = [{"index": x.spec.index, "tag": x.spec.tag} for x in runs]
        return SearchOutcome(runs=runs, record={"enabled": True, "runs": rows, "ended": "fewer than 30 iterations"})

    def calibrate(self, runs: list[RunResult]) -> list[Any]:
        self.calibrated.append(len(runs))
        return [f"cal{r.spec.index}" for r in runs]

    def quality(self, runs: list[RunResult], cals: list[Any]) -> np.ndarray:
        rounds = (len(runs) - len(self.defaults)) // self.per_round
        return self.base + sum(self.gains[:rounds])


def _choose(fake: FakeSearch, boosting_left: float = 100.0) -> Any:
    """The choice after a default boosting stage of 4.5 s."""
    return choose_with_search(fake.defaults, ["cal0", "cal1"], default_s=4.5, search_round=fake.round,
                              calibrate=fake.calibrate, quality=fake.quality, boosting_left=lambda: boosting_left)


def test_noise_level_gains_keep_the_default_after_one_round() -> None:
    defaults = _defaults()
    fake = FakeSearch(defaults, gains=[0.001, 0.001, 0.001])  # far below the SE (about 0.04 on 40 queries)
    choice = _choose(fake)
    assert [r.spec.index for r in choice.runs] == [0, 1] and choice.cals == ["cal0", "cal1"]
    assert fake.asked == [FIRST_ROUND_SHARE * 4.5]  # one round, half the default's boosting stage
    rec = choice.record
    assert rec["kept_label"] == "default" and rec["kept"] == 0
    assert [c["label"] for c in rec["candidates"]] == ["default", "round 1"]
    assert rec["candidates"][0]["search_runs"] == 0 and rec["candidates"][1]["search_runs"] == 2
    assert rec["tolerance"] == pytest.approx(one_standard_error(fake.base + 0.001), abs=1e-6)
    assert all(row["kept"] is False and row["round"] == 1 for row in choice.search["runs"])
    assert "default's model" in rec["summary"] and choice.search["rounds"][0]["seconds"] == 2.25


def test_the_search_goes_on_while_a_round_helps() -> None:
    defaults = _defaults()
    # rounds 1 and 2 each gain 0.1 (more than an SE), round 3 0.001: rounds 1-2 kept, round 3's runs dropped
    fake = FakeSearch(defaults, gains=[0.1, 0.1, 0.001, 0.1])
    choice = _choose(fake)
    assert fake.asked == [2.25, 4.5, 9.0]  # each round twice as long as the last, no fourth round
    assert [r.spec.index for r in choice.runs] == [0, 1, 2, 3, 4, 5]
    assert choice.cals == ["cal0", "cal1", "cal2", "cal3", "cal4", "cal5"]
    assert choice.record["kept_label"] == "round 2" and len(choice.record["candidates"]) == 4
    assert [row["kept"] for row in choice.search["runs"]] == [True] * 4 + [False] * 2
    # a round that starts no run (here: no configuration left) ends the search, as the boosting end does
    fake = FakeSearch(defaults, gains=[0.1, 0.1, 0.1], rounds_available=1)
    choice = _choose(fake)
    assert fake.asked == [2.25, 4.5] and choice.record["kept_label"] == "round 1"
    fake = FakeSearch(defaults, gains=[0.1, 0.1, 0.1])
    choice = _choose(fake, boosting_left=0.0)
    assert fake.asked == [2.25] and choice.record["stopped"] == "round 1 reached the boosting end"


def test_no_search_run_no_candidates() -> None:
    fake = FakeSearch(_defaults(), gains=[0.1], rounds_available=0)
    choice = _choose(fake)
    assert choice.record["candidates"] == [] and [r.spec.index for r in choice.runs] == [0, 1]
    assert fake.calibrated == []  # nothing mixed or calibrated for nothing


def test_a_round_ends_within_its_seconds() -> None:
    clock = FakeClock(0.0)
    deadline = FitBudget.begin(100.0, clock)  # boosting ends at 65 s
    clock.advance(10.0)
    until = deadline.within("boosting", 20.0)
    assert until.end("boosting") == pytest.approx(30.0) and until.left("boosting") == pytest.approx(20.0)
    assert deadline.within("boosting", 1e6).end("boosting") == pytest.approx(65.0)  # never past the fit's own end
    assert FitBudget.begin(None).within("boosting", 5.0).limited is False

    lefts: list[float] = []

    def fit_one(spec: RunSpec) -> RunResult:
        lefts.append(until.left("boosting"))
        clock.advance(6.0)
        return _result(spec, 40, 6.0)

    out = search(_defaults(), fit_one, until, seed=0, rule=False, workers=1, enabled=True)
    # one after another, none started past the round's end, each capped to the time left to it
    assert len(lefts) >= 3 and lefts == pytest.approx([20.0 - 6.0 * k for k in range(len(lefts))])
    assert all(left > 0 for left in lefts) and "fewer than" in out.record["ended"]
    assert all(row["n_iterations_cap"] >= MIN_ITERATIONS for row in out.record["runs"])
    # the next round goes on after these configurations, numbered after them
    more = search(_defaults(), fit_one, deadline.within("boosting", 12.0), seed=0, rule=False, workers=1,
                  enabled=True, tried=out.runs)
    assert more.runs and more.runs[0].spec.index == 2 + len(out.runs)
    whole = search(_defaults(), fit_one, FitBudget.begin(1e9, FakeClock(0.0)), seed=0, rule=False, workers=1,
                   enabled=True)
    configs = [row["config"] for row in whole.record["runs"]]
    both = out.record["runs"] + more.record["runs"]
    assert [row["config"] for row in both] == configs[:len(both)]


def _fit(monkeypatch: pytest.MonkeyPatch, budget: float | None) -> train_module.TrainOutcome:
    """test_search's fit of the default members: each default run takes 1e5 fake seconds
    (sequential: a boosting stage of 5e5), each search run 2e5."""
    cfg = load_config(None, {}, tables=copy.deepcopy(CONFIG))
    clock = FakeClock(0.0)
    real = train_module.run_within

    def timed(deadline: FitBudget, spec: RunSpec, *args: Any) -> RunResult:
        out = real(deadline, spec, *args)
        clock.advance(2e5 if "seed" in spec.params else 1e5)
        return out

    monkeypatch.setattr(train_module, "run_within", timed)
    return train_module.train(cfg, progress=False, save=False, deadline=FitBudget.begin(budget, clock))


def test_a_budget_far_above_need_keeps_the_default_model_at_about_its_cost(monkeypatch: pytest.MonkeyPatch) -> None:
    free = _fit(monkeypatch, None)
    budgeted = _fit(monkeypatch, 1e9)  # every search run takes 2e5 of these fake seconds
    # 12 validation queries: the search's mix is not ahead by more than their noise, so the fit
    # serves the default's model: the same members and scores as the fit without a budget
    data = load_config(None, {}, tables=copy.deepcopy(CONFIG)).data.synthetic.make()["vali"]
    assert np.array_equal(budgeted.model.score(data.features, data.query_offsets),
                          free.model.score(data.features, data.query_offsets))
    assert [m["name"] for m in budgeted.record["members"]] == [m["name"] for m in free.record["members"]]
    # the work: one round of half the default's boosting stage (5 runs of 1e5: 2.5e5), which starts
    # two runs of 2e5, not the 48 that the boosting end (6.5e8) leaves time for; the runs not kept
    # are recorded, not served
    search_rec = budgeted.record["search"]
    assert len(search_rec["runs"]) == 2 and search_rec["left_at_start_s"] == pytest.approx(2.5e5)
    assert len(search_rec["rounds"]) == 1 and not any(row["kept"] for row in search_rec["runs"])
    # the default's model is the first candidate: the same validation NDCG@10 as the fit without a budget
    choice = budgeted.record["time_budget"]["choice"]
    default = choice["candidates"][0]
    assert default["label"] == "default" and default["search_runs"] == 0
    assert default["vali_ndcg@10"] == pytest.approx(free.record["evaluation"]["vali"]["ensemble"]["yahoo"]["ndcg@10"],
                                                    abs=1e-6)
    assert len(choice["candidates"]) == 2 and choice["kept_label"] == "default"
    assert choice["default_boosting_s"] == pytest.approx(5e5)
