"""The default members, chosen from the data (``tunemix.train.members.auto``): what is chosen at each
size and budget, a config that names only its data trains them (LightGBM runs on the whole
training set stopped early on validation, with calibrators that fit nothing), the choice is
written into the resolved configuration, and the ``threads`` backend trains the same model as
processes."""

from __future__ import annotations

import tomllib
from typing import Any

import numpy as np
import pytest

from tunemix.train.config import ConfigError, SyntheticData, load_config
from tunemix.train.members.auto import (
    DataShape,
    adaboost_iterations,
    auto_members,
    auto_relevance,
    is_peer_recipe,
    lambdamart_rate,
)
from tunemix.train.train import train

pytest.importorskip("lightgbm")

DATA_ONLY: dict[str, Any] = tomllib.loads("""
name = "auto"
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
[relevance]
n_leaves = []            # the head's only model: the McRank member
min_data_in_leaf = []
""")


def _shape(n_docs: int, n_features: int = 136) -> DataShape:
    # 100 validation queries: the rule for small validation sets (test_small_validation) stays out
    return DataShape(n_docs=n_docs, n_features=n_features, n_labels=5, n_queries=max(n_docs // 100, 1),
                     vali_queries=100)


def test_the_choice_follows_the_data_and_the_budget() -> None:
    small, reasons = auto_members(_shape(10_000), None)
    # small data: a third LambdaMART run of 7 leaves on raw+std; from 20k documents two runs
    assert [(b["views"], b["n_leaves"]) for b in small["lambdamart"]] == [(["raw"], 31), (["raw+std"], 15),
                                                                           (["raw+std"], 7)]
    assert [b["n_leaves"] for b in auto_members(_shape(20_000), None)[0]["lambdamart"]] == [31, 15]
    assert all(b["fit_on"] == "train" and b["early_stopping"] > 0 for b in small["lambdamart"] + small["mcrank"])
    assert small["adaboost"][0]["n_iterations"] == 300 and small["adaboost"][0]["checkpoints"] == [30, 100, 300]
    assert small["adaboost"][0]["search"] == "ucb1"
    assert auto_members(_shape(30_000), None)[0]["adaboost"][0]["search"] == "ucb1"
    assert any("AdaBoost.MH" in r for r in reasons) and "10000 documents" in reasons[0]
    # AdaBoost.MH's iterations shrink as the documents grow, and vanish past 100k or a tiny budget
    sizes = [10_000, 60_000, 100_000, 120_000, 500_000]
    its = [adaboost_iterations(_shape(n), None) for n in sizes]
    assert its == [300, 250, 150, 0, 0]
    large, reasons = auto_members(_shape(500_000), None)
    assert large["adaboost"] == [] and any("no AdaBoost.MH" in r and "weight" in r for r in reasons)
    # above 200k documents: half the documents bagged, McRank at 0.2; LambdaMART at 0.1 up to 500k,
    # then faster with the data up to 0.2 from 1M documents; 0.05 on small data
    assert {b["bagging_fraction"] for b in large["lambdamart"] + large["mcrank"]} == {0.5}
    assert large["mcrank"][0]["learning_rate"] == 0.2
    assert {b["learning_rate"] for b in large["lambdamart"]} == {0.1}
    assert [lambdamart_rate(n) for n in (19_999, 20_000, 500_000, 750_000, 1_000_000, 5_000_000)] == [
        0.05, 0.1, 0.1, 0.15, 0.2, 0.2]
    huge = auto_members(_shape(1_000_000), None)[0]
    assert {b["learning_rate"] for b in huge["lambdamart"] + huge["mcrank"]} == {0.2}
    assert {b["learning_rate"] for b in small["lambdamart"] + small["mcrank"]} == {0.05}
    mid = auto_members(_shape(100_000), None)[0]
    assert [b["learning_rate"] for b in mid["lambdamart"]] == [0.05, 0.1]  # the first: the peer's recipe
    assert [b["bagging_fraction"] for b in small["lambdamart"][1:] + small["mcrank"]] == [0.8, 0.8, 0.8]
    assert adaboost_iterations(_shape(100_000), 0.1) == 0
    assert 0 < adaboost_iterations(_shape(100_000), 3600.0) <= adaboost_iterations(_shape(100_000), None)
    assert any("time budget" in r for r in auto_members(_shape(100_000), 0.1)[1])
    assert auto_relevance(_shape(10_000)) == {"n_leaves": [4], "min_data_in_leaf": [50], "learning_rate": 0.1,
                                              "patience": 25}
    # a budget that cannot pay for the raw+std view (computing, binning, LightGBM's Dataset) drops
    # its runs: at 120k documents of 136 features 10 s keeps raw alone, 60 s both
    tight, reasons = auto_members(_shape(120_000), 10.0)
    assert tight["views"] == ["raw"] and tight["adaboost"] == []
    assert [b["views"] for b in tight["lambdamart"] + tight["mcrank"]] == [["raw"], ["raw"]]
    assert any("no run on raw+std" in r for r in reasons)
    assert auto_members(_shape(120_000), 60.0)[0]["views"] == ["raw", "raw+std"]
    assert len(auto_members(_shape(10_000, 46), 10.0)[0]["lambdamart"]) == 3  # MQ2008's size: every view
    assert auto_relevance(_shape(30_000))["n_leaves"] == []
    assert small["lambdamart"][1]["early_stopping"] == 50 and mid["lambdamart"][1]["early_stopping"] == 25
    # up to 200k documents the first LambdaMART run is the early-stopped LightGBM recipe, the peer
    # of bench.defaults: 31 leaves, 0.05, leaves of 20, no bagging, patience 100, on the raw features
    for shape in (_shape(10_000), _shape(100_000), _shape(200_000)):
        first = auto_members(shape, None)[0]["lambdamart"][0]
        assert is_peer_recipe(first) and first["views"] == ["raw"] and first["fit_on"] == "train"
        assert (first["n_leaves"], first["learning_rate"], first["min_data_in_leaf"], first["feature_fraction"],
                first["bagging_fraction"], first["early_stopping"]) == (31, 0.05, 20, 1.0, 1.0, 100)
    assert not any(is_peer_recipe(b) for b in large["lambdamart"])


def test_a_config_naming_only_its_data_trains_the_default_members() -> None:
    cfg = load_config(None, tables=DATA_ONLY)
    out = train(cfg, progress=False, save=False)
    rec = out.record
    assert rec["auto_members"] and "documents" in rec["auto_members"][0]
    types = {r["type"] for r in rec["runs"]}
    assert types == {"lambdamart", "mcrank", "adaboost"}
    # the choice is in the resolved configuration: retraining from the record trains the same runs
    members = rec["config"]["members"]
    assert len(members["lambdamart"]) == 3 and len(members["mcrank"]) == 1 and len(members["adaboost"]) == 1
    for r in rec["runs"]:
        if r["type"] in ("lambdamart", "mcrank"):
            assert r["params"]["fit_on"] == "train"
            assert r["stop_reason"] in ("early_stopping", "n_iterations")
    # runs trained on the whole training set get only calibrators that fit nothing
    for m in rec["members"]:
        calibrator = m["name"].rsplit("|", 1)[1]
        if m["type"] == "lambdamart":
            assert calibrator == "identity"
        elif m["type"] == "mcrank":
            assert calibrator.startswith("er:")
    # the run of the early-stopped LightGBM recipe, and the served model against it on validation:
    # the mix's candidates include that run alone
    peer = rec["peer_recipe"]
    assert peer["run"] == "raw|original|lambdamart31-lr0.05" and peer["queries"] == 15
    assert peer["served_minus_run"] >= -1e-3 and peer["se"] >= 0
    assert peer["served_vali_ndcg@10"] >= peer["vali_ndcg@10"] - 1e-3
    # the McRank member is the relevance head's model
    head = rec["relevance_head"]
    assert [m["member"] for m in head["models"]] == ["raw|original|mcrank-mc31-lr0.05"], head
    assert out.model.relevance_head is not None
    split = rec["split"]
    assert split["fit_rows"] + split["calibration_rows"] == next(d["rows"] for d in rec["data"] if d["role"] == "train")
    again = load_config(None, tables={**DATA_ONLY, "members": members})
    for key in ("lambdamart", "mcrank", "adaboost", "views", "calibrators"):
        assert getattr(again.members, key) == members[key]


def test_threads_train_the_same_model_as_processes() -> None:
    scores = []
    for backend in ("threads", "loky"):
        tables = {**DATA_ONLY, "run": {**DATA_ONLY["run"], "backend": backend, "n_jobs": 2}}
        out = train(load_config(None, tables=tables), progress=False, save=False)
        sets = SyntheticData(**DATA_ONLY["data"]["synthetic"]).make()
        scores.append(out.model.score(sets["test"].features, sets["test"].query_offsets))
    np.testing.assert_array_equal(scores[0], scores[1])


def test_bad_pipeline_keys_name_the_block() -> None:
    bad = {**DATA_ONLY, "members": {"lambdamart": [{"fit_on": "everything"}]}}
    with pytest.raises(ConfigError, match=r"\[\[members.lambdamart\]\] #1: fit_on"):
        load_config(None, tables=bad)
    bad = {**DATA_ONLY, "members": {"mcrank": [{"early_stopping": -3}]}}
    with pytest.raises(ConfigError, match=r"\[\[members.mcrank\]\] #1: early_stopping"):
        load_config(None, tables=bad)
