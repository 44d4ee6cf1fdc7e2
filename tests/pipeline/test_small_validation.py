"""The rule for small validation sets (issue 39, ``tunemix.train.members.auto.small_validation``):
it changes the default LightGBM runs below 15 validation queries and nothing from 15 up, and the
training record and report say whether it was used and why."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest

from tests.pipeline.test_auto_members import DATA_ONLY
from tunemix.train.config import load_config
from tunemix.train.members.auto import (
    SMALL_MCRANK_PATIENCE,
    SMALL_VALIDATION_PATIENCE,
    SMALL_VALIDATION_QUERIES,
    DataShape,
    auto_members,
    is_peer_recipe,
    small_validation,
)
from tunemix.train.report import render_markdown
from tunemix.train.train import train

pytest.importorskip("lightgbm")


def _shape(vali_queries: int, n_docs: int = 3_600) -> DataShape:
    return DataShape(n_docs=n_docs, n_features=136, n_labels=5, n_queries=34, vali_queries=vali_queries)


def _lightgbm_runs(members: dict[str, Any]) -> list[dict[str, Any]]:
    return members["lambdamart"] + members["mcrank"]


def test_the_rule_changes_the_runs_below_the_threshold_only() -> None:
    tiny, reasons = auto_members(_shape(9), None)
    assert small_validation(_shape(9))["applied"]
    for run in tiny["lambdamart"]:
        assert run["early_stopping"] == SMALL_VALIDATION_PATIENCE == 100
    assert tiny["mcrank"][0]["early_stopping"] == SMALL_MCRANK_PATIENCE == 20  # on the documents' log loss
    for run in _lightgbm_runs(tiny):
        assert run["bagging_fraction"] == 1.0 and run["feature_fraction"] == 1.0
    assert any(r.startswith("validation set of 9 queries is small") for r in reasons)
    assert any("patience 100, McRank 20" in r and "bagging 1" in r for r in reasons)
    # from the threshold up the default is what it was: patience 50, 80% of documents and features
    at, reasons_at = auto_members(_shape(SMALL_VALIDATION_QUERIES), None)
    large, _ = auto_members(_shape(157), None)
    assert at == large
    assert not small_validation(_shape(SMALL_VALIDATION_QUERIES))["applied"]
    assert is_peer_recipe(large["lambdamart"][0])  # the peer's recipe: patience 100, no bagging, whatever the rule
    for run in large["lambdamart"][1:] + large["mcrank"]:
        assert run["early_stopping"] == (SMALL_MCRANK_PATIENCE if run in large["mcrank"] else 50)
        assert run["bagging_fraction"] == 0.8 and run["feature_fraction"] == 0.8
    assert not any("is small" in r for r in reasons_at)
    # the rule touches nothing but the LightGBM runs' patience and sampling
    strip = ("early_stopping", "bagging_fraction", "feature_fraction")
    tiny_rest, large_rest = copy.deepcopy(tiny), copy.deepcopy(large)
    for run in _lightgbm_runs(tiny_rest) + _lightgbm_runs(large_rest):
        for key in strip:
            run.pop(key)
    assert tiny_rest == large_rest
    # on large data a small validation set still gets the rule (patience 25 becomes 100)
    big = auto_members(_shape(9, n_docs=300_000), None)[0]
    assert {r["early_stopping"] for r in big["lambdamart"]} == {100} and big["mcrank"][0]["early_stopping"] == 25
    assert {r["bagging_fraction"] for r in _lightgbm_runs(big)} == {1.0}


def _train_with(vali_queries: int) -> dict[str, Any]:
    tables = copy.deepcopy(DATA_ONLY)
    tables["data"]["synthetic"]["queries"] = [40, vali_queries, 10]
    return train(load_config(None, tables=tables), progress=False, save=False).record


def test_the_record_and_report_say_whether_the_rule_was_used() -> None:
    small = _train_with(12)
    rule = small["small_validation"]
    assert rule["applied"] and rule["vali_queries"] == 12 and rule["threshold"] == 15
    assert rule["rule"] == {"lambdamart_early_stopping": 100, "bagging_fraction": 1.0, "feature_fraction": 1.0}
    assert rule["summary"].startswith("validation set of 12 queries is small")
    assert 0.0 <= rule["vali_measure_se"] < 1.0
    for run in small["runs"]:  # the runs trained as the rule says
        if run["type"] in ("lambdamart", "mcrank"):
            assert run["params"]["early_stopping"] == (100 if run["type"] == "lambdamart" else SMALL_MCRANK_PATIENCE)
            assert run["params"]["bagging_fraction"] == run["params"]["feature_fraction"] == 1.0
    report = render_markdown(small)
    assert "validation set of 12 queries is small" in report and "standard error of" in report

    large = _train_with(60)
    rule = large["small_validation"]
    assert not rule["applied"] and rule["vali_queries"] == 60 and "rule" not in rule
    assert "large enough" in rule["summary"]
    for run in large["runs"]:
        if run["type"] in ("lambdamart", "mcrank") and not is_peer_recipe(run["params"]):
            assert run["params"]["early_stopping"] == (50 if run["type"] == "lambdamart" else SMALL_MCRANK_PATIENCE)
            assert run["params"]["bagging_fraction"] == 0.8
    assert sum(is_peer_recipe(r["params"]) for r in large["runs"] if r["type"] == "lambdamart") == 1
    assert "large enough" in render_markdown(large)
    # five times the validation queries: a smaller standard error of the validation measure
    assert np.isfinite(rule["vali_measure_se"])
    assert rule["vali_measure_se"] < small["small_validation"]["vali_measure_se"]


def test_configured_members_are_not_changed_and_the_record_says_so() -> None:
    tables = copy.deepcopy(DATA_ONLY)
    tables["members"] = {"lambdamart": [{"n_leaves": 7, "n_iterations": 20, "early_stopping": 5,
                                         "bagging_fraction": 0.8, "fit_on": "train"}]}
    rec = train(load_config(None, tables=tables), progress=False, save=False).record
    assert rec["small_validation"]["applied"] is False
    assert "configured" in rec["small_validation"]["summary"]
    assert rec["runs"] and {r["params"]["early_stopping"] for r in rec["runs"]} == {5}
