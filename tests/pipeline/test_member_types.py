"""Every member type through ``train``: McRank (multi-class and ordinal), LambdaMART, the linear
SVM and the best single feature beside AdaBoost.MH; saved, loaded and scored through
``EnsembleModel``; in the record and the report with their validation omega. Plus the linear
members' exports against scikit-learn and the registry's grid expansion."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tunemix.core.scoring.ensemble_model import load_model
from tunemix.train.config import ConfigError, load_config
from tunemix.train.members.types import expand_blocks, get_member_type, linear_scores, member_types, run_specs
from tunemix.train.train import train

pytest.importorskip("lightgbm")
pytest.importorskip("sklearn")

ALL_MEMBERS = """
name = "all"
seed = 3
[data.synthetic]
queries = [40, 20, 20]
docs_per_query = [5, 15]
features = 6
levels = 3
seed = 2
[members]
views = ["raw", "raw+std"]
label_groupings = ["original", "binary"]
calibrators = ["shift", "cpc:ls", "rbc:linear:gain"]
best_feature = true
[[members.adaboost]]
base = "tree"
n_leaves = 4
n_iterations = 10
checkpoints = [4, 10]
[[members.mcrank]]
variant = ["multiclass", "ordinal"]
n_leaves = 4
learning_rate = 0.2
n_iterations = 8
checkpoints = [3, 8]
min_data_in_leaf = 5
[[members.lambdamart]]
n_leaves = 4
n_iterations = 6
checkpoints = [2, 6]
min_data_in_leaf = 5
[[members.svm]]
C = [0.1, 10.0]
[mixer]
compare = ["one_best", "uniform"]
[run]
backend = "sequential"
report_plots = false
"""

TYPES = ["adaboost", "mcrank", "lambdamart", "svm", "best_feature"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("all")
    (tmp / "all.toml").write_text(ALL_MEMBERS)
    cfg = load_config(tmp / "all.toml", {"run.models_dir": str(tmp / "models")})
    outcome = train(cfg, progress=False)
    return {"path": outcome.path, "record": outcome.record, "model": outcome.model, "cfg": cfg}


def test_every_type_is_registered_and_expands_its_grid(trained: dict[str, Any]) -> None:
    assert list(member_types()) == TYPES
    cfg = trained["cfg"]
    specs = run_specs(cfg)
    counts = {t: sum(s.type == t for s in specs) for t in TYPES}
    # views x groupings x grid; LambdaMART ignores groupings; the best feature is one raw run
    assert counts == {"adaboost": 4, "mcrank": 8, "lambdamart": 2, "svm": 8, "best_feature": 1}
    assert [s.index for s in specs] == list(range(len(specs)))
    assert specs[0].type == "adaboost"  # AdaBoost.MH first: its seeds do not move
    assert expand_blocks([{"a": [1, 2], "checkpoints": [3, 4]}], frozenset({"checkpoints"})) == [
        {"a": 1, "checkpoints": [3, 4]}, {"a": 2, "checkpoints": [3, 4]}]


def test_every_type_is_in_the_record_and_the_report(trained: dict[str, Any]) -> None:
    rec = trained["record"]
    rows = {r["type"]: r for r in rec["member_types"]}
    assert list(rows) == TYPES
    for t in TYPES:
        assert rows[t]["members"] > 0 and 0.0 <= rows[t]["best_omega"] <= 1.0, t
        assert rows[t]["weight_share"] is not None
    assert abs(sum(r["weight_share"] for r in rows.values()) - 1.0) < 1e-9
    assert "feature" in rows["best_feature"]["detail"]
    names = [m["name"] for m in rec["members"] if m["type"] == "mcrank"]
    assert any("er:softmax:linear" in n for n in names) and any("er:ordinal:gain" in n for n in names)
    assert any("ordinal+cpc:ls" in n for n in names)
    lm = [m["name"] for m in rec["members"] if m["type"] == "lambdamart"]
    assert {n.rsplit("|", 1)[1] for n in lm} == {"identity", "rbc:linear:gain"}  # regression calibrators too
    by_type = rec["mix_by_member_type"]
    assert [r["members"] for r in by_type] == ["all", *TYPES]
    assert by_type[0]["n_members"] == len(rec["members"])
    assert by_type[0]["val_ndcg@10"] == pytest.approx(rec["mixer"]["validation_quality"], abs=1e-12)
    bf = rec["best_feature"]
    assert 1 <= bf["feature"] <= 6 and bf["sign"] in "+-" and 0.0 <= bf["test"] <= 1.0
    assert bf["vali"] == pytest.approx(rows["best_feature"]["best_omega"], abs=1e-12)  # the same feature
    report = (trained["path"] / "report.md").read_text()
    assert "Best single feature (the paper's baseline" in report
    assert "### Member types" in report and "### The mixer on each member type alone" in report
    for t in TYPES:
        assert f"| {t} |" in report


def test_saved_model_scores_like_the_trained_one(trained: dict[str, Any]) -> None:
    from tunemix.core.artifact import SCHEMA_VERSION
    from tunemix.train.data.synthetic import make_synthetic_splits

    model = trained["model"]
    loaded, manifest = load_model(trained["path"])
    assert manifest["schema_version"] == SCHEMA_VERSION
    data = make_synthetic_splits(n_queries={"a": 9}, docs_per_query=(1, 12), n_features=6, n_levels=3, seed=7)["a"]
    np.testing.assert_array_equal(model.score(data.features, data.query_offsets),
                                  loaded.score(data.features, data.query_offsets))
    np.testing.assert_array_equal(model.member_scores(data.features, data.query_offsets),
                                  loaded.member_scores(data.features, data.query_offsets))


def test_engine_equals_the_per_member_reference_path(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The scoring engine (one forest pass; every calibrator in one kernel, each distinct snapshot
    gathered once; the mixer's fused rescale-and-sum) against the slow path: each member's own
    raw vector through its calibrator's ``transform``, then the rescaling and the weighted sum."""
    from tunemix.train.data.synthetic import make_synthetic_splits

    tmp = tmp_path_factory.mktemp("uniform")
    (tmp / "uniform.toml").write_text(ALL_MEMBERS.replace(
        'compare = ["one_best", "uniform"]', 'name = "uniform"\nrescale = "zscore_query"\ncompare = []'))
    model = train(load_config(tmp / "uniform.toml", {"run.models_dir": str(tmp / "models")}), progress=False).model
    assert model._calibration.fallback == []
    assert len({type(m.calibrator).__name__ for m in model.members}) >= 5  # every family the types bring
    assert model._plan.uhi.size < model.n_members  # members share their snapshots
    data = make_synthetic_splits(n_queries={"a": 9}, docs_per_query=(1, 40), n_features=6, n_levels=3, seed=8)["a"]
    x, off = data.features, data.query_offsets
    raws = model.raw_scores(x, off)
    ref = np.column_stack([m.calibrator.transform(r) for m, r in zip(model.members, raws, strict=True)])
    got = model.member_scores(x, off)
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)
    mixer = model.mixer
    w = np.asarray(getattr(mixer, "weights_", np.ones(model.n_members)), dtype=np.float64)
    want = mixer.rescaler_.transform(ref, off) @ (w / w.sum())
    np.testing.assert_allclose(model.score(x, off), want, rtol=1e-12, atol=1e-12)


def test_served_linear_members_raw_scores_are_their_maps(trained: dict[str, Any]) -> None:
    """In the trained (pruned) model, a linear member's raw scores are its run's linear map on its view."""
    from tunemix.core.data.normalization import apply_view
    from tunemix.train.data.synthetic import make_synthetic_splits

    model = trained["model"]
    data = make_synthetic_splits(n_queries={"a": 4}, docs_per_query=(3, 9), n_features=6, n_levels=3, seed=8)["a"]
    raws = model.raw_scores(data.features, data.query_offsets)
    for m, raw in zip(model.members, raws, strict=True):
        run = model.runs[m.run]
        if run.kind == "linear":
            x = apply_view(data.features, data.query_offsets, run.view)
            np.testing.assert_allclose(raw, linear_scores(model.linear[m.run], x), rtol=1e-12, atol=1e-12)


def test_unknown_keys_of_a_new_type_are_refused(tmp_path: Path) -> None:
    (tmp_path / "c.toml").write_text('name = "x"\n[data.synthetic]\n[[members.mcrank]]\nleaves = 8\n')
    with pytest.raises(ConfigError, match=r"\[\[members.mcrank\]\] #1: unknown key"):
        load_config(tmp_path / "c.toml")


def test_a_block_scopes_its_runs_to_its_views_and_groupings(tmp_path: Path) -> None:
    """views / label_groupings in a block: its runs on those only; the other blocks keep [members]'."""
    (tmp_path / "c.toml").write_text(
        'name = "x"\n[data.synthetic]\n[members]\nviews = ["raw", "raw+std"]\n'
        'label_groupings = ["original", "binary"]\n'
        '[[members.adaboost]]\nn_leaves = 4\n'
        '[[members.mcrank]]\nn_leaves = [8, 16]\nviews = ["raw"]\nlabel_groupings = ["original"]\n'
        '[[members.svm]]\nC = 1.0\nviews = ["raw+white"]\n')
    specs = run_specs(load_config(tmp_path / "c.toml"))
    by_type: dict[str, list[tuple[str, str]]] = {}
    for s in specs:
        by_type.setdefault(s.type, []).append((s.view, s.grouping))
        assert "views" not in s.params and "label_groupings" not in s.params
    assert by_type["adaboost"] == [("raw", "original"), ("raw", "binary"), ("raw+std", "original"),
                                   ("raw+std", "binary")]
    assert by_type["mcrank"] == [("raw", "original"), ("raw", "original")]
    assert by_type["svm"] == [("raw+white", "original"), ("raw+white", "binary")]
    assert [s.index for s in specs] == list(range(len(specs)))
    (tmp_path / "d.toml").write_text('name = "x"\n[data.synthetic]\n[[members.mcrank]]\nviews = ["pca"]\n')
    with pytest.raises(ConfigError, match="unknown view 'pca'"):
        load_config(tmp_path / "d.toml")


# ------------------------------------------------------------------------------ linear members
def _three_classes(seed: int, n: int = 300) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = (rng.normal(size=(n, 5)) * [1.0, 10.0, 0.1, 1.0, 0.0] + [0, 5, -3, 0, 2]).astype(np.float32)
    y = np.digitize(X[:, 0] - 0.05 * X[:, 1] + rng.normal(scale=0.3, size=n), [-0.7, 0.2])
    return X, y.astype(np.int64)


@pytest.mark.parametrize("C", [1e-3, 1.0, 10.0])
def test_svm_export_equals_decision_function(C: float) -> None:
    from tunemix.train.members.linear import fit_crammer_singer

    X, y = _three_classes(0)
    linear, svc = fit_crammer_singer(X, y, 3, C=C)
    assert svc.C == pytest.approx(C / X.shape[0])  # the paper's C / n
    Xt, _ = _three_classes(1, 100)
    ref = svc.decision_function((Xt.astype(np.float64) - linear["mean"]) / linear["scale"])
    np.testing.assert_allclose(linear_scores(linear, Xt), ref, rtol=0, atol=1e-9)
    assert linear["scale"][4] == 1.0  # the constant column


def test_svm_export_through_the_ensemble_model_equals_decision_function() -> None:
    from tunemix.core.calibration.registry import make_calibrator
    from tunemix.core.ensemble.registry import make_mixer
    from tunemix.core.scoring.ensemble_model import EnsembleModel, Member, RunInfo
    from tunemix.core.scoring.forest import FlatForest
    from tunemix.train.members.linear import fit_crammer_singer

    X, y = _three_classes(2)
    linear, svc = fit_crammer_singer(X, y, 3, C=1.0)
    cal = make_calibrator("shift").fit(linear_scores(linear, X), y, [0, X.shape[0]], [0.0, 1.0, 3.0])
    model = EnsembleModel(n_features=5, extra_views=[], forest=FlatForest.empty(5, 1),
                          runs=[RunInfo("raw", "original", 3, 0, 0, {}, kind="linear")],
                          members=[Member("svm", 0, 0, cal)], mixer=make_mixer("uniform"), linear={0: linear})
    Xt, _ = _three_classes(3, 50)
    ref = svc.decision_function((Xt.astype(np.float64) - linear["mean"]) / linear["scale"])
    np.testing.assert_allclose(model.raw_scores(Xt, [0, 50])[0], ref, rtol=0, atol=1e-9)


def test_svm_with_two_classes_gives_zero_and_the_score() -> None:
    from tunemix.train.members.linear import fit_crammer_singer

    X, y = _three_classes(4)
    linear, svc = fit_crammer_singer(X, (y > 0).astype(np.int64), 2, C=1.0)
    xs = (X.astype(np.float64) - linear["mean"]) / linear["scale"]
    raw = linear_scores(linear, X)
    np.testing.assert_array_equal(raw[:, 0], 0.0)
    np.testing.assert_allclose(raw[:, 1], svc.decision_function(xs), atol=1e-9)


def test_best_single_feature_finds_the_planted_feature_and_sign() -> None:
    from tunemix.train.members.linear import best_single_feature

    rng = np.random.default_rng(5)
    X = rng.normal(size=(400, 4)).astype(np.float32)
    y = np.digitize(-X[:, 2], [-0.5, 0.5]).astype(np.int64)
    offsets = np.arange(0, 401, 20)
    j, sign, quality = best_single_feature(X, y, offsets, "ndcg@10", "yahoo")
    assert (j, sign) == (2, -1.0) and quality == pytest.approx(1.0)
    assert get_member_type("best_feature").learner_tag({}) == "best-feature"


def test_record_json_is_strict(trained: dict[str, Any]) -> None:
    manifest = json.loads((trained["path"] / "manifest.json").read_text())
    assert {r["kind"] for r in manifest["model"]["runs"]} <= {"forest", "linear"}


@pytest.mark.parametrize("variant", ["ordinal", "multiclass"])
def test_ordinal_and_expected_relevance_steps_score_like_the_calibrators_own_transform(variant: str) -> None:
    """McRank members in an EnsembleModel: ``ordinal+<spec>`` members read their class
    probabilities from the ordinal step's slabs (their inner calibrators packed into the kernels),
    ``er:<link>:<T>`` members are computed by the expected-relevance step; every member scores
    exactly as its calibrator's own transform, and raw scores stay the member's raw vector."""
    from tunemix.core.calibration.registry import make_calibrator
    from tunemix.core.ensemble.registry import make_mixer
    from tunemix.core.scoring.ensemble_model import EnsembleModel, Member, RunInfo
    from tunemix.core.scoring.forest import score_forest
    from tunemix.train.learners.mcrank import McRank

    X, y = _three_classes(6, 400)
    m = McRank(variant=variant, n_leaves=4, n_iterations=6, checkpoints=[2, 6], min_data_in_leaf=5).fit(X, y)
    forest = m.to_forest()
    per = m.n_outputs_
    offsets = np.arange(0, 401, 20)
    if variant == "ordinal":
        specs = ["ordinal+cpc:ls", "ordinal+rbc:linear:gain", "ordinal+shift", "er:ordinal:gain", "er:ordinal:linear"]
    else:
        specs = ["cpc:ls", "er:softmax:gain", "rbc:linear:gain", "er:softmax:linear"]
    members = []
    for t in m.checkpoints_:
        raw = score_forest(forest, X, [per * t])[:, 0, :]
        for spec in specs:
            cal = make_calibrator(spec).fit(raw, y, offsets, np.array([0.0, 1.0, 3.0]))
            members.append(Member(f"t{t}|{spec}", 0, per * t, cal))
    model = EnsembleModel(n_features=5, extra_views=[], forest=forest,
                          runs=[RunInfo("raw", "original", per, 0, forest.n_base, {"type": "mcrank"})],
                          members=members, mixer=make_mixer("uniform"))
    assert model._calibration.fallback == []  # nothing left to the calibrators' Python transforms
    assert model._calibration.families.count(f"er_{'ordinal' if variant == 'ordinal' else 'softmax'}") == \
        sum(s.startswith("er:") for s in specs * 2)
    Xt, _ = _three_classes(7, 60)
    off = np.array([0, 25, 60])
    scores = model.member_scores(Xt, off)
    raws = model.raw_scores(Xt, off)
    for j, member in enumerate(members):
        assert raws[j].shape == (60, per)
        np.testing.assert_allclose(scores[:, j], member.calibrator.transform(raws[j]), rtol=1e-12, atol=1e-12)


def test_linear_runs_on_every_view_score_and_prune_like_their_maps() -> None:
    """Linear runs on raw, raw+std and raw+white (the normalised views' weights go to the right
    block of wide columns), beside a forest run; pruning to the raw+white run keeps the scores and
    drops the unused view."""
    from tunemix.core.calibration.registry import make_calibrator
    from tunemix.core.data.normalization import apply_view
    from tunemix.core.ensemble.registry import mixer_from_params
    from tunemix.core.scoring.ensemble_model import EnsembleModel, Member, RunInfo, prune
    from tunemix.core.scoring.forest import FlatForest

    rng = np.random.default_rng(9)
    d, views = 4, ["raw", "raw+std", "raw+white"]
    x = rng.normal(size=(60, d)).astype(np.float32)
    off = np.array([0, 20, 45, 60])
    linear, runs, members = {}, [], []
    for i, view in enumerate(views):
        width = d if view == "raw" else 2 * d
        linear[i] = {"weights": rng.normal(size=(width, 3)), "intercept": rng.normal(size=3),
                     "mean": rng.normal(size=width), "scale": rng.uniform(0.5, 2.0, size=width)}
        runs.append(RunInfo(view, "original", 3, 0, 0, {"type": "svm"}, kind="linear"))
        raw = linear_scores(linear[i], apply_view(x, off, view))
        cal = make_calibrator("cpc:ls").fit(raw, rng.integers(0, 3, 60), off, np.array([0.0, 1.0, 3.0]))
        members.append(Member(view, i, 0, cal))
    weights = np.array([0.0, 0.0, 1.0])
    mixer = mixer_from_params({"mixer": "exp_forecaster", "n_members": 3, "measure": "ndcg@10",
                               "convention": "yahoo", "c_grid": [1.0], "omega_min_grid": None,
                               "omega_min_quantiles": [0.5], "rescale": "none",
                               "omega": np.array([0.1, 0.2, 0.9]), "c": 1.0, "omega_min": 0.5,
                               "weights": weights, "c_grid_searched": np.array([1.0]),
                               "omega_min_grid_searched": np.array([0.5]), "grid_quality": np.zeros((1, 1)),
                               "validation_quality": 0.9, "rescale_scale": np.zeros(0)})
    model = EnsembleModel(n_features=d, extra_views=views[1:], forest=FlatForest.empty(3 * d, 1), runs=runs,
                          members=members, mixer=mixer, linear=linear)
    for i, (view, raw) in enumerate(zip(views, model.raw_scores(x, off), strict=True)):
        np.testing.assert_allclose(raw, linear_scores(linear[i], apply_view(x, off, view)), rtol=1e-12, atol=1e-12)
    small = prune(model)
    assert [m.name for m in small.members] == ["raw+white"] and small.extra_views == ("raw+white",)
    np.testing.assert_allclose(small.score(x, off), model.score(x, off), rtol=1e-12, atol=1e-12)
    doc, arrays = small.to_artifact()
    again = EnsembleModel.from_artifact(doc, arrays)
    np.testing.assert_array_equal(again.score(x, off), small.score(x, off))
