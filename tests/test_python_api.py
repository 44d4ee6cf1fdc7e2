"""``import tunemix`` end to end on generated data: fit, predict, save, load, predict again (the
same scores), ``sklearn.base.clone``, ``evaluate`` against the CLI's numbers, and ``tunemix
predict`` against ``Model.predict``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tunemix
from tunemix.core.data.svmlight import write_svmlight
from tunemix.train.data.synthetic import make_synthetic_splits

ROOT = Path(__file__).resolve().parents[1]

#: a small configuration: one member type, a few iterations (seconds to train)
TABLES: dict[str, Any] = {
    "name": "api",
    "members": {"views": ["raw", "raw+std"], "label_groupings": ["original"],
                "calibrators": ["shift", "rbc:linear:gain"],
                "adaboost": [{"base": "tree", "n_leaves": 3, "n_iterations": 8, "checkpoints": [4, 8]}]},
    "mixer": {"compare": ["one_best"]},
    "run": {"backend": "sequential", "report_plots": False},
}


@pytest.fixture(scope="module")
def data() -> dict[str, Any]:
    sets = make_synthetic_splits(n_queries={"train": 24, "vali": 10, "test": 8}, docs_per_query=(4, 9),
                                 n_features=6, n_levels=3, seed=3)
    return {k: (v.features, v.labels, np.diff(v.query_offsets)) for k, v in sets.items()} | {"sets": sets}


@pytest.fixture(scope="module")
def fitted(data: dict[str, Any]) -> tunemix.TuneMixRanker:
    x, y, g = data["train"]
    xv, yv, gv = data["vali"]
    return tunemix.TuneMixRanker(TABLES, n_jobs=1, progress=False).fit(x, y, g, eval_set=[(xv, yv)], eval_group=[gv])


def test_fit_predict_save_load_predict_again(fitted: tunemix.TuneMixRanker, data: dict[str, Any],
                                             tmp_path: Path) -> None:
    xt, _, gt = data["test"]
    before = fitted.predict(xt, group=gt)
    assert before.shape == (xt.shape[0],) and np.isfinite(before).all()
    path = fitted.save(tmp_path / "models", "mine")
    assert path == tmp_path / "models" / "mine" / "v1"
    for loaded in (tunemix.load(path), tunemix.load("mine", models_dir=tmp_path / "models"),
                   tunemix.load(tmp_path / "models" / "mine"), tunemix.load("mine", models_dir=tmp_path / "models",
                                                                             version="v1")):
        np.testing.assert_array_equal(loaded.predict(xt, group=gt), before)
        assert (loaded.name, loaded.version, loaded.n_features) == ("mine", "v1", 6)
        assert loaded.created and loaded.members
    ranked = tunemix.load(path).rank(xt, group=gt, ids=[f"d{i}" for i in range(xt.shape[0])], top_k=2)
    assert len(ranked) == len(gt) and all(len(r) <= 2 for r in ranked)
    first = before[: gt[0]]
    assert ranked[0][0] == (f"d{int(np.argmax(first))}", float(first.max()))


def test_lightgbms_eval_x_and_eval_y_are_eval_set(fitted: tunemix.TuneMixRanker, data: dict[str, Any]) -> None:
    """LightGBM 4.7's ``eval_X``/``eval_y`` (a matrix or a tuple of them) train the same model as
    ``eval_set``; both spellings at once, or one half alone, are refused."""
    x, y, g = data["train"]
    xv, yv, gv = data["vali"]
    xt, _, gt = data["test"]
    want = fitted.predict(xt, group=gt)
    for ex, ey in ((xv, yv), ((xv,), (yv,))):
        other = tunemix.TuneMixRanker(TABLES, n_jobs=1, progress=False).fit(x, y, g, eval_X=ex, eval_y=ey,
                                                                           eval_group=[gv])
        np.testing.assert_array_equal(other.predict(xt, group=gt), want)
    ranker = tunemix.TuneMixRanker(TABLES, n_jobs=1, progress=False)
    with pytest.raises(ValueError, match="not both"):
        ranker.fit(x, y, g, eval_set=[(xv, yv)], eval_X=xv, eval_y=yv, eval_group=[gv])
    with pytest.raises(ValueError, match="go together"):
        ranker.fit(x, y, g, eval_X=xv, eval_group=[gv])
    with pytest.raises(ValueError, match="eval_group"):
        ranker.fit(x, y, g, eval_X=xv, eval_y=yv)


def test_fit_without_an_eval_set_holds_queries_out(data: dict[str, Any]) -> None:
    x, y, g = data["train"]
    ranker = tunemix.TuneMixRanker(TABLES, n_jobs=1, progress=False).fit(x, y, g)
    assert ranker.n_features_in_ == 6
    assert np.isfinite(ranker.predict(x[:5], group=[5])).all()


def test_the_estimator_contract(fitted: tunemix.TuneMixRanker) -> None:
    from sklearn.base import clone

    copy = clone(fitted)
    assert copy.get_params() == fitted.get_params() and not hasattr(copy, "model_")
    with pytest.raises(AttributeError, match="not fitted"):
        copy.predict(np.zeros((2, 6)))
    assert copy.set_params(n_jobs=2).n_jobs == 2
    with pytest.raises(ValueError, match="invalid parameter"):
        copy.set_params(learning_rate=0.1)


@pytest.mark.parametrize(("args", "words"), [
    ((np.zeros((3, 5)), None), ["5 features", "6"]),
    ((np.full((3, 6), np.inf), None), ["X[0, 0]", "finite", "missing value is NaN"]),
    ((np.zeros((3, 6)), [2, 2]), ["add up to 4", "3 documents"]),
    ((np.zeros((3, 6)), [3, 0]), ["group[1]"]),
    ((np.zeros(6), None), ["2-D"]),
])
def test_bad_arrays_name_the_argument(fitted: tunemix.TuneMixRanker, args: Any, words: list[str]) -> None:
    with pytest.raises(ValueError) as err:
        fitted.predict(*args)
    for w in words:
        assert w in str(err.value), (w, str(err.value))


def test_sparse_input_scores_as_dense(fitted: tunemix.TuneMixRanker, data: dict[str, Any]) -> None:
    sparse = pytest.importorskip("scipy.sparse")
    xt, _, gt = data["test"]
    np.testing.assert_array_equal(fitted.predict(sparse.csr_matrix(xt), gt), fitted.predict(xt, gt))


def test_evaluate_equals_the_cli(fitted: tunemix.TuneMixRanker, data: dict[str, Any], tmp_path: Path) -> None:
    xt, yt, gt = data["test"]
    scores = fitted.predict(xt, gt)
    ours = tunemix.evaluate(yt, scores, gt, metrics=["ndcg@10", "err", "map"], convention="lightgbm")
    write_svmlight(data["sets"]["test"], tmp_path / "test.txt")
    (tmp_path / "scores.txt").write_text("".join(f"{float(s)!r}\n" for s in scores))
    proc = subprocess.run([sys.executable, "-m", "tunemix.cli", "evaluate", "--data", str(tmp_path / "test.txt"),
                           "--scores", str(tmp_path / "scores.txt"), "--metrics", "ndcg@10,err,map",
                           "--convention", "lightgbm", "--json"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    cli = json.loads(proc.stdout)  # one convention: its result itself
    assert cli["derived"] == ours["derived"]
    for m, v in ours["mean"].items():
        assert cli["mean"][m] == pytest.approx(v, abs=1e-12), m


def test_tunemix_predict_matches_model_predict(fitted: tunemix.TuneMixRanker, data: dict[str, Any],
                                              tmp_path: Path) -> None:
    path = fitted.save(tmp_path / "models", "cli")
    write_svmlight(data["sets"]["test"], tmp_path / "test.txt")
    out = tmp_path / "scores.txt"
    proc = subprocess.run([sys.executable, "-m", "tunemix.cli", "predict", "--model", "cli", "--models-dir",
                           str(tmp_path / "models"), str(tmp_path / "test.txt"), "-o", str(out)],
                          cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    xt, _, gt = data["test"]
    want = tunemix.load(path).predict(xt, gt)
    np.testing.assert_array_equal(np.array([float(v) for v in out.read_text().split()]), want)
    proc = subprocess.run([sys.executable, "-m", "tunemix.cli", "predict", "--model", str(path), "--rank",
                           str(tmp_path / "test.txt")], cwd=ROOT, capture_output=True, text=True)
    lines = [line.split("\t") for line in proc.stdout.splitlines()]
    assert len(lines) == xt.shape[0] and lines[0][2] == "1"
    proc = subprocess.run([sys.executable, "-m", "tunemix.cli", "predict", "--model", str(path), "--proba",
                           str(tmp_path / "test.txt")], cwd=ROOT, capture_output=True, text=True)
    header, *body = proc.stdout.splitlines()
    rows = np.array([[float(v) for v in line.split("\t")] for line in body])
    proba = tunemix.load(path).predict_proba(xt, gt)
    assert header.split("\t") == ["score", "expected_grade", *(f"p{k}" for k in range(proba.shape[1]))]
    np.testing.assert_array_equal(rows[:, 0], want)  # score, expected grade, P(y = 0), P(y = 1), ...
    np.testing.assert_array_equal(rows[:, 2:], proba)
    np.testing.assert_allclose(rows[:, 1], proba @ np.arange(proba.shape[1]), atol=1e-12)
    proc = subprocess.run([sys.executable, "-m", "tunemix.cli", "models", "--models-dir", str(tmp_path / "models")],
                          cwd=ROOT, capture_output=True, text=True)
    assert "cli" in proc.stdout and "v1" in proc.stdout
    proc = subprocess.run([sys.executable, "-m", "tunemix.cli", "predict", "--model", "nope", "--models-dir",
                           str(tmp_path / "models"), str(tmp_path / "test.txt")], cwd=ROOT, capture_output=True,
                          text=True)
    assert proc.returncode == 2 and "model 'nope'" in proc.stderr and "models there: cli" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "tunemix.cli", "predict", "--help"], cwd=ROOT, capture_output=True,
                          text=True)
    assert proc.returncode == 0 and "``" not in proc.stdout and "--proba" in proc.stdout
