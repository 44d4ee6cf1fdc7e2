"""Explanations and feature names from Python: ``TuneMixRanker.fit(feature_names=)`` and ``[data]
feature_names`` stored in the artifact and read back, ``Model.explain`` / ``explain_pair`` adding up
to ``predict``, malformed names refused with the file and line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tunemix
from tests.artifact.tampering import edit_manifest
from tests.conftest import tiny_config
from tunemix.core.artifact import ArtifactError
from tunemix.core.data.svmlight import write_svmlight
from tunemix.train.config import ConfigError, load_config
from tunemix.train.data.synthetic import make_synthetic_splits
from tunemix.train.train import train

TABLES: dict[str, Any] = {
    "name": "names",
    "members": {"views": ["raw", "raw+std"], "label_groupings": ["original"],
                "calibrators": ["shift", "rbc:linear:gain"],
                "adaboost": [{"base": "tree", "n_leaves": 3, "n_iterations": 8, "checkpoints": [4, 8]}]},
    "run": {"backend": "sequential", "report_plots": False},
    "relevance": {"enabled": False},
}
NAMES = ["bm25", "tf", "idf", "pagerank", "url_len"]


@pytest.fixture(scope="module")
def data() -> dict[str, Any]:
    sets = make_synthetic_splits(n_queries={"train": 20, "vali": 8, "test": 6}, docs_per_query=(5, 10),
                                 n_features=len(NAMES), n_levels=3, seed=4)
    return {k: (v.features, v.labels, np.diff(v.query_offsets)) for k, v in sets.items()} | {"sets": sets}


@pytest.fixture(scope="module")
def fitted(data: dict[str, Any]) -> tunemix.TuneMixRanker:
    x, y, g = data["train"]
    xv, yv, gv = data["vali"]
    return tunemix.TuneMixRanker(TABLES, n_jobs=1, progress=False).fit(
        x, y, g, eval_set=[(xv, yv)], eval_group=[gv], feature_names=NAMES)


def test_names_round_trip_through_the_artifact(fitted: tunemix.TuneMixRanker, data: dict[str, Any],
                                               tmp_path: Path) -> None:
    assert fitted.feature_names_ == tuple(NAMES)
    path = fitted.save(tmp_path / "models", "named")
    assert json.loads((path / "manifest.json").read_text())["feature_names"] == NAMES
    model = tunemix.load(path)
    assert model.feature_names == tuple(NAMES)
    xt, _, gt = data["test"]
    e = model.explain(xt, group=gt, rows=[0, 7])
    assert e.feature_names == tuple(NAMES) and {name for name, _ in e.top(0, 5)} <= set(NAMES)
    assert e.method == "exact" and e.exact.all()
    scores = model.predict(xt, group=gt)
    np.testing.assert_allclose(e.baseline + e.contributions.sum(axis=1), scores[[0, 7]], rtol=0, atol=1e-9)
    np.testing.assert_array_equal(e.contributions, fitted.explain(xt, gt, rows=[0, 7]).contributions)
    # a manifest whose names do not fit is refused at load
    edit_manifest(path, lambda manifest: manifest.update(feature_names=NAMES[:-1]))
    with pytest.raises(ArtifactError, match="feature_names"):
        tunemix.load(path)


def test_pair_from_python(fitted: tunemix.TuneMixRanker, data: dict[str, Any]) -> None:
    xt, _, gt = data["test"]
    scores = fitted.predict(xt, group=gt)
    top, bottom = int(np.argmax(scores[: gt[0]])), int(np.argmin(scores[: gt[0]]))
    pair = fitted.explain_pair(xt, top, bottom, group=gt)
    assert pair.score_a - pair.score_b == pytest.approx(scores[top] - scores[bottom], abs=1e-12)
    assert pair.baseline + pair.contributions.sum() == pytest.approx(pair.score_a - pair.score_b, abs=1e-9)
    # the rest of the list: the baselines' difference (the default mix rescales per query)
    single = fitted.explain(xt, gt, rows=[top, bottom])
    assert pair.rest_of_list == single.baseline[0] - single.baseline[1]
    assert pair.top(2)[0][0] in NAMES
    old = fitted.explain_pair(xt, top, bottom, group=gt, method="shapley", budget=1 << 12, seed=1)
    assert old.method == "shapley"
    assert old.rest_of_list + old.contributions.sum() == pytest.approx(pair.score_a - pair.score_b, abs=1e-9)


def test_feature_importances(fitted: tunemix.TuneMixRanker, data: dict[str, Any], tmp_path: Path,
                             capsys: pytest.CaptureFixture[str]) -> None:
    from tunemix.cli import main

    imp = fitted.feature_importances_
    assert imp.shape == (len(NAMES),) and np.all(imp >= 0) and imp.sum() > 0
    xt, _, gt = data["test"]
    mean = fitted.model_.feature_importances(xt, gt)
    explained = fitted.explain(xt, gt)  # the test set is under the sample's cap: every row
    np.testing.assert_allclose(mean, np.abs(explained.contributions).mean(axis=0), rtol=1e-12)
    path = fitted.save(tmp_path / "models", "imp")
    write_svmlight(data["sets"]["test"], tmp_path / "test.txt")
    assert main(["importance", "--model", str(path), str(tmp_path / "test.txt"), "--top", "0"]) == 0
    out = capsys.readouterr().out
    assert f"over {xt.shape[0]} documents of {len(gt)} queries" in out
    best = NAMES[int(np.argmax(mean))]
    assert out.splitlines()[2].split()[0] == best


def test_fit_refuses_bad_names(data: dict[str, Any]) -> None:
    x, y, g = data["train"]
    ranker = tunemix.TuneMixRanker(TABLES, n_jobs=1, progress=False)
    with pytest.raises(ValueError, match="4 names for 5 features"):
        ranker.fit(x, y, g, feature_names=NAMES[:4])
    with pytest.raises(ValueError, match="repeats"):
        ranker.fit(x, y, g, feature_names=["a", "b", "c", "d", "a"])
    with pytest.raises(TypeError, match="strings"):
        ranker.fit(x, y, g, feature_names=[1, 2, 3, 4, 5])


def test_config_names_file_relative_to_the_toml(data: dict[str, Any], tmp_path: Path) -> None:
    for part in ("train", "vali"):
        write_svmlight(data["sets"][part], tmp_path / f"{part}.txt")
    (tmp_path / "names.txt").write_text("\n".join(NAMES) + "\n")
    tiny_config(tmp_path, {"name": "fromfile", "relevance.enabled": False,
                           "data": {"train": "train.txt", "vali": "vali.txt", "feature_names": "names.txt"}},
                "c.toml")
    cfg = load_config(tmp_path / "c.toml", {"run.models_dir": str(tmp_path / "models")})
    out = train(cfg, progress=False)
    assert out.path is not None and tunemix.load(out.path).feature_names == tuple(NAMES)
    (tmp_path / "names.txt").write_text("bm25\ntf\n\nidf\npagerank\n")
    with pytest.raises(ConfigError, match=r"names.txt, line 3"):  # refused as the configuration is read
        load_config(tmp_path / "c.toml", {"run.models_dir": str(tmp_path / "models")})


def test_feature_importances_are_lazy_and_kept(fitted: tunemix.TuneMixRanker, data: dict[str, Any],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """feature_importances_ is computed on first access, once, from the sample fit kept, and equals
    the importances of the training rows (``Model.feature_importances``, the same sample)."""
    import copy

    from tunemix.train import importance

    calls = []
    real = importance.sample_importance
    monkeypatch.setattr(importance, "sample_importance", lambda *a: calls.append(1) or real(*a))
    fresh = copy.copy(fitted)
    fresh._feature_importances = None
    first = fresh.feature_importances_
    assert fresh.feature_importances_ is first and len(calls) == 1
    x, _, g = data["train"]
    np.testing.assert_allclose(first, fitted.model_.feature_importances(x, g), rtol=0, atol=1e-15)
    with pytest.raises(AttributeError, match="not fitted"):
        _ = tunemix.TuneMixRanker().feature_importances_


def test_both_spellings_on_the_ranker_and_the_loaded_model(fitted: tunemix.TuneMixRanker, data: dict[str, Any],
                                                             tmp_path: Path) -> None:
    """LightGBM's two spellings on both objects: the attribute ``feature_importances_`` (the
    ranker's training sample; a loaded model reads what ``save`` stored) and the method
    ``feature_importances(X=None, group=None)`` (without X: the stored values; with X: over X)."""
    imp = fitted.feature_importances_
    np.testing.assert_array_equal(fitted.feature_importances(), imp)
    xt, _, gt = data["test"]
    over_test = fitted.feature_importances(xt, gt)
    np.testing.assert_array_equal(over_test, fitted.model_.feature_importances(xt, gt))
    assert not np.allclose(over_test, imp)  # another sample: the method's X is used
    loaded = tunemix.load(fitted.save(tmp_path / "models", "imp2"))
    np.testing.assert_array_equal(loaded.feature_importances_, imp)
    np.testing.assert_array_equal(loaded.feature_importances(), imp)
    np.testing.assert_allclose(loaded.feature_importances(xt, gt), over_test, rtol=0, atol=1e-15)
    record = json.loads((loaded.path / "manifest.json").read_text())["training_record"]
    x = data["train"][0]
    assert record["feature_importances_sample"]["documents"] == x.shape[0]  # under the sample's cap: every row
    with pytest.raises(ValueError, match="group without X"):
        loaded.feature_importances(group=gt)


def test_a_version_without_stored_importances_says_what_to_do(fitted: tunemix.TuneMixRanker, data: dict[str, Any],
                                                             tmp_path: Path) -> None:
    path = fitted.save(tmp_path / "models", "bare")
    edit_manifest(path, lambda m: m["training_record"].pop("feature_importances"))
    model = tunemix.load(path)
    assert not hasattr(model, "feature_importances_")
    with pytest.raises(AttributeError, match=r"feature_importances\(X, group\)"):
        model.feature_importances()
    xt, _, gt = data["test"]
    assert model.feature_importances(xt, gt).shape == (len(NAMES),)
    edit_manifest(path, lambda m: m["training_record"].__setitem__("feature_importances", [1.0, 2.0]))
    with pytest.raises(ArtifactError, match="5 finite numbers"):
        _ = tunemix.load(path).feature_importances_
