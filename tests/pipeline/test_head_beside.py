"""The relevance head's own models trained beside the runs (``tunemix.train.relevance.beside``): the
same head to the last bit as when its stage trains them, only without a time budget and with a
LightGBM run, and a model that fails is recorded as before."""

from __future__ import annotations

import copy
import tomllib
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

import tunemix.train.train as train_module
from tunemix.train.budget import FitBudget
from tunemix.train.config import SyntheticData, load_config
from tunemix.train.members.types import run_specs
from tunemix.train.relevance.beside import head_beside
from tunemix.train.train import train

pytest.importorskip("lightgbm")

CONFIG: dict[str, Any] = tomllib.loads("""
name = "beside"
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
backend = "threads"
n_jobs = 2
report_plots = false
[relevance]
n_leaves = [4, 7]
min_data_in_leaf = [5]
max_iterations = 40
patience = 10
""")


def _cfg(**run: Any) -> Any:
    tables = copy.deepcopy(CONFIG)
    tables["run"].update(run)
    return load_config(None, {}, tables=tables)


def _head_arrays(model: Any) -> dict[str, np.ndarray]:
    head = model.relevance_head
    arrays = {f"forest_{k}": v for k, v in head.forest.to_arrays().items()}
    arrays["bounds"] = head.bounds
    for name in ("slopes", "intercepts"):
        value = getattr(head, name)
        arrays[name] = np.zeros(0) if value is None else value
    return arrays


def _without_seconds(models: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in m.items() if k not in ("seconds", "member_seconds")} for m in models]


@pytest.mark.parametrize("backend", ["threads", "sequential"])
def test_beside_the_runs_the_head_is_the_one_its_stage_trains(monkeypatch: pytest.MonkeyPatch, backend: str) -> None:
    cfg = _cfg(backend=backend, n_jobs=2 if backend == "threads" else 1)
    beside = train(cfg, progress=False, save=False)
    assert beside.record["relevance_head"]["own_models_trained"] == "beside the runs"
    monkeypatch.setattr(train_module, "head_beside", lambda *args: None)  # the stage trains them, as before
    staged = train(cfg, progress=False, save=False)
    assert staged.record["relevance_head"]["own_models_trained"] == "in this stage"
    a, b = _head_arrays(beside.model), _head_arrays(staged.model)
    assert a.keys() == b.keys()
    for key in a:
        assert np.array_equal(a[key], b[key]), key
    rec_a, rec_b = beside.record["relevance_head"], staged.record["relevance_head"]
    assert len(rec_a["models"]) >= 2  # the McRank member and at least one model of its own were kept
    assert _without_seconds(rec_a["models"]) == _without_seconds(rec_b["models"])
    assert rec_a["recalibration"] == rec_b["recalibration"]
    assert rec_a["log_loss"] == rec_b["log_loss"]


def test_only_without_a_budget_with_a_head_and_a_lightgbm_run() -> None:
    sets = SyntheticData(**CONFIG["data"]["synthetic"]).make()
    prep = SimpleNamespace(train=sets["train"], vali=sets["vali"], n_labels=3)
    cfg = _cfg()
    specs = run_specs(train_module.apply_auto(cfg, train_module.data_shape(sets))[0])
    assert {s.type for s in specs} >= {"lambdamart", "mcrank"}
    free = FitBudget.begin(None)
    head = head_beside(cfg, prep, specs, free)  # type: ignore[arg-type]
    assert head is not None and len(head.jobs) == 2 and head.models is None
    assert head_beside(cfg, prep, specs, FitBudget.begin(60.0)) is None  # type: ignore[arg-type]
    assert head_beside(cfg, prep, [s for s in specs if s.type == "adaboost"], free) is None  # type: ignore[arg-type]
    off = load_config(None, {"relevance.enabled": False}, tables=copy.deepcopy(CONFIG))
    assert head_beside(off, prep, specs, free) is None  # type: ignore[arg-type]
    none_own = load_config(None, {"relevance.n_leaves": []}, tables=copy.deepcopy(CONFIG))
    assert head_beside(none_own, prep, specs, free) is None  # type: ignore[arg-type]


def test_a_head_model_that_fails_is_recorded_and_the_model_ranks(monkeypatch: pytest.MonkeyPatch) -> None:
    import tunemix.train.relevance.fit as relevance_fit

    def fails(*args: Any, **kwargs: Any) -> Any:
        raise ValueError("this head model cannot be trained")

    monkeypatch.setattr(relevance_fit, "fit_head_model", fails)
    out = train(_cfg(), progress=False, save=False)
    assert out.record["relevance_head"] == {"error": "this head model cannot be trained"}
    assert out.model.relevance_head is None
    x = np.random.default_rng(0).normal(size=(7, out.model.n_features)).astype(np.float32)
    assert np.all(np.isfinite(out.model.score(x, np.array([0, 3, 7]))))
