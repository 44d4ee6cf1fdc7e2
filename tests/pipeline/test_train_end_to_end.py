"""A tiny end-to-end training run: the artifact round-trips to identical scores, the record is
complete, and the ensemble is scored through the same path as the service."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.artifact.tampering import edit_manifest
from tunemix.cli import main
from tunemix.core.artifact import ArtifactError
from tunemix.core.evaluation import CONVENTION_NAMES
from tunemix.core.scoring.ensemble_model import load_model
from tunemix.train.config import load_config
from tunemix.train.train import train

TINY = """
name = "tiny"
seed = 1
[data.synthetic]
queries = [40, 20, 20]
docs_per_query = [5, 15]
features = 6
levels = 3
seed = 2
[members]
views = ["raw", "raw+std", "raw+white"]
label_groupings = ["original", "binary"]
calibrators = ["shift", "cpc:ls", "rbc:linear:gain"]
[[members.adaboost]]
base = ["tree", "product"]
n_leaves = 4
n_terms = 2
n_iterations = 12
checkpoints = [4, 12]
[mixer]
compare = ["one_best", "uniform", "rrf"]
[run]
backend = "sequential"
report_plots = true
"""


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    tmp = tmp_path_factory.mktemp("train")
    cfg_path = tmp / "tiny.toml"
    cfg_path.write_text(TINY)
    cfg = load_config(cfg_path, {"run.models_dir": str(tmp / "models")})
    outcome = train(cfg, progress=False)
    return outcome.path, {"record": outcome.record, "model": outcome.model, "cfg": cfg}


def test_artifact_layout_and_record(trained: tuple[Path, dict]) -> None:
    path, info = trained
    assert path.name == "v1" and path.parent.name == "tiny"
    for f in ("manifest.json", "arrays.npz", "report.json", "report.md", "omega.png",
              "ndcg_by_convention.png", "grid.png"):
        assert (path / f).is_file(), f
    manifest = json.loads((path / "manifest.json").read_text())
    rec = manifest["training_record"]
    assert len(rec["runs"]) == 3 * 2 * 2  # views x groupings x bases
    assert len(rec["members"]) == rec["served"]["members_before_pruning"]
    assert rec["served"]["members"] == len(info["model"].members) > 0
    assert set(rec["evaluation"]["test"]["ensemble"]) == set(CONVENTION_NAMES)
    assert rec["config"]["name"] == "tiny"
    assert {r["mixer"] for r in rec["mixer_comparison"]} == {"exp_forecaster", "one_best", "uniform", "rrf"}
    assert [r["rescale"] for r in rec["rescaling_comparison"]] == ["none", "zscore_query", "minmax_query", "std_global"]
    assert "Member rescaling" in (path / "report.md").read_text()
    assert manifest["n_features"] == 6


def test_round_trip_gives_identical_scores(trained: tuple[Path, dict]) -> None:
    from tunemix.train.data.synthetic import make_synthetic_splits

    path, info = trained
    model = info["model"]
    loaded, _ = load_model(path)
    test = make_synthetic_splits(n_queries={"a": 7}, docs_per_query=(1, 9), n_features=6, n_levels=3, seed=9)["a"]
    before = model.score(test.features, test.query_offsets)
    after = loaded.score(test.features, test.query_offsets)
    np.testing.assert_array_equal(before, after)
    np.testing.assert_array_equal(model.member_scores(test.features, test.query_offsets),
                                  loaded.member_scores(test.features, test.query_offsets))


def test_members_match_standalone_snapshots(trained: tuple[Path, dict]) -> None:
    """A member's raw scores from the one-pass wide forest equal its run's own snapshot: the run
    refitted alone on the shared codes of its view (the binning stage over the whole training set,
    the fit part's queries first) and scored on real features."""
    from tunemix.core.data.normalization import apply_view
    from tunemix.train.data.binned import bin_view
    from tunemix.train.data.splits import query_split
    from tunemix.train.data.synthetic import make_synthetic_splits
    from tunemix.train.learners.adaboost_mh import AdaBoostMH
    from tunemix.train.learners.label_groups import get_grouping
    from tunemix.train.train import load_data

    _, info = trained
    model, cfg = info["model"], info["cfg"]
    data = make_synthetic_splits(n_queries={"a": 5}, docs_per_query=(3, 8), n_features=6, n_levels=3, seed=4)["a"]
    raws = model.raw_scores(data.features, data.query_offsets)
    sets, _ = load_data(cfg)
    train_set = sets["train"]
    first, second = query_split(train_set.n_queries, fraction=1.0 - cfg.run.calibration_fraction, seed=cfg.seed)
    whole = train_set.subset_queries(np.concatenate([first, second]))
    fit_part = whole.query_slice(0, first.size)
    # prefer a member of a normalised view (its trees were remapped to the wide matrix)
    j = next((i for i, m in enumerate(model.members) if model.runs[m.run].view != "raw"), 0)
    member = model.members[j]
    run = model.runs[member.run]
    params = dict(run.learner)
    params.setdefault("seed", cfg.seed + member.run)
    codes = bin_view(whole.features, whole.query_offsets, run.view, seed=cfg.seed).rows(0, fit_part.n_docs)
    solo = AdaBoostMH(**params).fit(codes, fit_part.labels, label_grouping=get_grouping(run.grouping, 3))
    expected = solo.decision_function(apply_view(data.features, data.query_offsets, run.view),
                                      iterations=member.iterations)
    np.testing.assert_allclose(raws[j], expected, rtol=1e-9, atol=1e-9)


def test_bad_inputs_to_the_model(trained: tuple[Path, dict]) -> None:
    _, info = trained
    model = info["model"]
    with pytest.raises(ValueError, match="shape"):
        model.score(np.zeros((3, 5), np.float32), [0, 3])
    with pytest.raises(ValueError, match="infinity"):
        model.score(np.full((2, 6), -np.inf, np.float32), [0, 2])
    assert np.all(np.isfinite(model.score(np.full((2, 6), np.nan, np.float32), [0, 2])))  # missing values
    with pytest.raises(ValueError, match="query_offsets"):
        model.score(np.zeros((3, 6), np.float32), [0, 2])


def test_corrupt_artifact_is_refused(trained: tuple[Path, dict], tmp_path: Path) -> None:
    import shutil

    path, _ = trained
    copy = tmp_path / "v1"
    shutil.copytree(path, copy)
    edit_manifest(copy, lambda manifest: manifest["model"]["members"][0].update(run=999))
    with pytest.raises(ArtifactError, match="run 999"):
        load_model(copy)


def test_cli_train_errors_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.txt"
    bad.write_text("1 qid:1 1:0.5\nnope qid:1 1:0.1\n")
    assert main(["train", "--train", str(bad), "--vali", str(bad), "--models-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"{bad}:2" in err and "label" in err


def test_pruning_keeps_scores_and_shrinks_the_model(trained: tuple[Path, dict]) -> None:
    from tunemix.core.ensemble.registry import make_mixer
    from tunemix.core.scoring.ensemble_model import EnsembleModel, prune
    from tunemix.train.data.synthetic import make_synthetic_splits

    _, info = trained
    model = info["model"]
    data = make_synthetic_splits(n_queries={"a": 30}, docs_per_query=(2, 12), n_features=6, n_levels=3,
                                 seed=5)["a"]
    # a full (unpruned) model with a forecaster that drops members
    full = EnsembleModel(n_features=model.n_features, extra_views=model.extra_views, forest=model.forest,
                         runs=model.runs, members=model.members, mixer=make_mixer("uniform"))
    member_scores = full.member_scores(data.features, data.query_offsets)
    mixer = make_mixer("exp_forecaster", c_grid=[5.0], omega_min_grid=[float(np.median(np.arange(3)))])
    mixer.fit(member_scores, np.minimum(data.labels, 2), data.query_offsets)
    full = EnsembleModel(n_features=full.n_features, extra_views=full.extra_views, forest=full.forest,
                         runs=full.runs, members=full.members, mixer=mixer)
    small = prune(full)
    assert len(small.members) == int(np.sum(mixer.weights_ > 0)) <= len(full.members)
    assert small.forest.n_base <= full.forest.n_base
    np.testing.assert_allclose(small.score(data.features, data.query_offsets),
                               full.score(data.features, data.query_offsets), rtol=1e-9, atol=1e-9)


def test_pruning_drops_unused_views_and_bases() -> None:
    """Hand-built case: two runs, the forecaster keeps only an early snapshot of the second."""
    from tunemix.core.calibration.registry import make_calibrator
    from tunemix.core.ensemble.registry import mixer_from_params
    from tunemix.core.scoring.ensemble_model import EnsembleModel, Member, RunInfo, prune
    from tunemix.core.scoring.forest import FlatForest

    def stump(feature: int, value: float) -> dict[str, np.ndarray]:
        return {"base_kind": np.zeros(1, np.int8), "base_node_start": np.array([0, 1]),
                "base_leaf_start": np.array([0, 2]), "node_feature": np.array([feature], np.int32),
                "node_threshold": np.array([0.0], np.float32), "node_left": np.array([-1], np.int32),
                "node_right": np.array([-2], np.int32),
                "leaf_values": np.array([[-value, value], [value, -value]]), "n_features": np.array(4)}

    from tunemix.core.scoring.forest import concatenate

    forest = concatenate([FlatForest.from_arrays(stump(f, v)) for f, v in [(0, 1.0), (1, 2.0), (2, 3.0), (3, 4.0)]])
    runs = [RunInfo("raw", "original", 2, 0, 2, {}), RunInfo("raw+std", "original", 2, 2, 4, {})]
    rng = np.random.default_rng(0)
    raw = rng.standard_normal((20, 2))
    labels = rng.integers(0, 2, 20)
    offsets = np.array([0, 10, 20])
    cal = make_calibrator("rbc:linear:gain").fit(raw, labels, offsets, np.array([0.0, 1.0]))
    members = [Member("a", 0, 2, cal), Member("b", 1, 1, cal)]
    mixer = mixer_from_params({"mixer": "exp_forecaster", "n_members": 2, "measure": "ndcg@10",
                               "convention": "yahoo", "c_grid": [1.0], "omega_min_grid": None,
                               "omega_min_quantiles": [0.5], "rescale": "zscore_query",
                               "omega": np.array([0.1, 0.9]), "c": 1.0, "omega_min": 0.5,
                               "weights": np.array([0.0, 1.0]), "c_grid_searched": np.array([1.0]),
                               "omega_min_grid_searched": np.array([0.5]), "grid_quality": np.zeros((1, 1)),
                               "validation_quality": 0.9, "rescale_scale": np.zeros(0)})
    model = EnsembleModel(n_features=2, extra_views=["raw+std"], forest=forest, runs=runs, members=members,
                          mixer=mixer)
    small = prune(model)
    assert [m.name for m in small.members] == ["b"]
    assert small.forest.n_base == 1 and small.extra_views == ("raw+std",)
    x = rng.standard_normal((10, 2)).astype(np.float32)
    off = np.array([0, 4, 10])
    np.testing.assert_allclose(small.score(x, off), model.score(x, off), atol=1e-12)


@pytest.mark.parametrize("view", ["raw", "raw+std", "raw+white"])
def test_remapped_forest_scores_like_the_run_on_its_view(view: str) -> None:
    """Trees trained on a view, rewritten for the wide [raw | std | white] matrix and padded to
    more classes, give the same raw scores (extra classes 0)."""
    from tunemix.core.data.normalization import apply_view
    from tunemix.core.scoring.ensemble_model import remap_forest
    from tunemix.core.scoring.forest import score_forest
    from tunemix.train.data.synthetic import make_synthetic
    from tunemix.train.learners.adaboost_mh import AdaBoostMH

    data = make_synthetic(n_queries=30, docs_per_query=(4, 12), n_features=5, n_levels=3, seed=11)
    x_view = apply_view(data.features, data.query_offsets, view)
    model = AdaBoostMH(n_iterations=15, base="tree", n_leaves=4).fit(x_view, data.labels, label_grouping="binary")
    wide_x = np.hstack([data.features, apply_view(data.features, data.query_offsets, "raw+std")[:, 5:],
                        apply_view(data.features, data.query_offsets, "raw+white")[:, 5:]])
    wide = remap_forest(model.to_forest(), view, 5, ["raw+std", "raw+white"], n_outputs=4)
    got = score_forest(wide, wide_x)[:, 0, :]
    np.testing.assert_allclose(got[:, :2], model.decision_function(x_view), rtol=0, atol=1e-12)
    assert np.all(got[:, 2:] == 0.0)


def test_snapshot_T_tuned_with_c_on_the_calibration_part(tmp_path: Path) -> None:
    """[mixer] snapshots = "tune", tune_on = "calibration": the paper's protocol. One T for every
    boosted run, chosen with c on the calibration part; the served members are that T's."""
    cfg_path = tmp_path / "tiny.toml"
    cfg_path.write_text(TINY)
    cfg = load_config(cfg_path, {"run.models_dir": str(tmp_path / "models"), "mixer.snapshots": "tune",
                                 "mixer.tune_on": "calibration", "run.report_plots": False,
                                 "mixer.tie_tolerance": "one_se"})
    outcome = train(cfg, progress=False)
    rec = outcome.record
    rows = rec["rescaling_comparison"]
    assert sorted({r["snapshot_T"] for r in rows}) == [4, 12]
    assert all("cal_ndcg@10" in r and "val_ndcg@10" in r for r in rows)
    best = max(r["cal_ndcg@10"] for r in rows)
    tol = rec["mixer"]["tie_tolerance_used"]
    assert rec["mixer"]["tie_tolerance"] == "one_se" and tol > 0
    chosen = next(r for r in rows if r["cal_ndcg@10"] >= best - tol)
    assert rec["mixer"]["snapshot_T"] == chosen["snapshot_T"]
    assert rec["mixer"]["rescale"] == chosen["rescale"]
    T = rec["mixer"]["snapshot_T"]
    assert {m.name.split("|t=")[1].split("|")[0] for m in outcome.model.members} == {str(T)}
    with pytest.raises(Exception, match="snapshots"):
        load_config(cfg_path, {"mixer.snapshots": "best"})
    with pytest.raises(Exception, match="tie_tolerance"):
        load_config(cfg_path, {"mixer.tie_tolerance": "two_se"})


def test_label_groupings_all_expands_to_the_methods_groupings(tmp_path: Path) -> None:
    """label_groupings = ["all"] on five-level data: the method's five groupings, one run each."""
    from tunemix.train.learners.label_groups import groupings_for

    assert groupings_for(["all"], 5) == ["original", "binary", "three-a", "three-b", "four"]
    assert groupings_for(["binary", "all"], 3) == ["binary", "original"]
    assert groupings_for(["all"], 4) == ["original"]
    text = (TINY.replace("levels = 3", "levels = 5").replace('label_groupings = ["original", "binary"]',
                                                             'label_groupings = ["all"]')
            .replace('views = ["raw", "raw+std", "raw+white"]', 'views = ["raw"]')
            .replace('base = ["tree", "product"]', 'base = "tree"'))
    cfg_path = tmp_path / "five.toml"
    cfg_path.write_text(text)
    cfg = load_config(cfg_path, {"run.models_dir": str(tmp_path / "models"), "run.report_plots": False,
                                 "mixer.compare": []})
    rec = train(cfg, progress=False).record
    assert [r["grouping"] for r in rec["runs"]] == ["original", "binary", "three-a", "three-b", "four"]
    assert rec["config"]["members"]["label_groupings"] == ["original", "binary", "three-a", "three-b", "four"]


@pytest.mark.parametrize("why", ["disabled", "no LightGBM"])
def test_a_model_without_a_relevance_head_still_trains_and_ranks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  why: str) -> None:
    """[relevance] enabled = false, or a machine where LightGBM cannot be loaded: the model trains,
    ranks, and its record says why it has no head."""
    import sys

    cfg_path = tmp_path / "tiny.toml"
    cfg_path.write_text(TINY)
    overrides: dict[str, object] = {"run.models_dir": str(tmp_path / "models"), "run.report_plots": False}
    if why == "disabled":
        overrides["relevance.enabled"] = False
    else:
        monkeypatch.setitem(sys.modules, "lightgbm", None)  # not installed: its library is not found
        monkeypatch.setattr("tunemix.train.learners.lightgbm_capi._lib", None)  # nor loaded yet
    outcome = train(load_config(cfg_path, overrides), progress=False)
    model = outcome.model
    assert model.relevance_head is None
    error = outcome.record["relevance_head"]["error"]
    assert ("enabled = false" in error) if why == "disabled" else ("LightGBM cannot be loaded" in error)
    assert outcome.path is not None and load_model(outcome.path)[0].relevance_head is None
    x = np.random.default_rng(0).normal(size=(7, model.n_features)).astype(np.float32)
    assert np.all(np.isfinite(model.score(x, np.array([0, 3, 7]))))  # it ranks


def test_cross_validated_mix_choice(tmp_path: Path) -> None:
    """[mixer] selection = "cv": every rescaling mode's forecaster carries its cross-validated
    quality; the served mode is the first best by it (not by the in-sample validation quality)."""
    cfg_path = tmp_path / "tiny.toml"
    cfg_path.write_text(TINY)
    cfg = load_config(cfg_path, {"run.models_dir": str(tmp_path / "models"), "mixer.selection": "cv",
                                 "run.report_plots": False})
    rec = train(cfg, progress=False, save=False).record
    rows = rec["rescaling_comparison"]
    assert all("cv_ndcg@10" in r and "val_ndcg@10" in r for r in rows)
    best = max(r["cv_ndcg@10"] for r in rows)
    chosen = next(r for r in rows if r["cv_ndcg@10"] >= best - rec["mixer"]["tie_tolerance_used"])
    assert rec["mixer"]["rescale"] == chosen["rescale"]
    assert rec["mixer"]["validation_quality"] == pytest.approx(chosen["val_ndcg@10"])
    with pytest.raises(Exception, match="selection"):
        load_config(cfg_path, {"mixer.selection": "loo"})
