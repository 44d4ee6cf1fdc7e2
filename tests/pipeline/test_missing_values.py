"""Missing values (NaN) through the library: each member type fits and predicts with them, the
linear SVM's indicator is served as trained, and a ranker's model saves and loads with them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("lightgbm")
pytest.importorskip("sklearn")


def informative(seed: int, n_queries: int = 40, size: int = 15, d: int = 5) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """Queries whose relevant documents miss feature 0 (others miss it 5% of the time), and 20% of
    every other value missing at random."""
    rng = np.random.default_rng(seed)
    n = n_queries * size
    X = rng.normal(size=(n, d)).astype(np.float32)
    y = (rng.random(n) < 0.3).astype(np.int64) + (rng.random(n) < 0.1).astype(np.int64)
    X[:, 1] += y.astype(np.float32)
    X[rng.random((n, d)) < 0.2] = np.nan
    X[:, 0] = rng.normal(size=n).astype(np.float32)
    X[(y > 0) | (rng.random(n) < 0.05), 0] = np.nan
    return X, y, [size] * n_queries


def test_svm_indicator_served_as_trained() -> None:
    from tunemix.train.members.linear import fit_crammer_singer
    from tunemix.train.members.types import linear_scores

    X, y, _ = informative(0)
    linear, svc = fit_crammer_singer(X, np.minimum(y, 1), 2, C=10.0)
    nan = np.isnan(X)
    miss = np.flatnonzero(nan.any(axis=0))
    impute = np.array([np.nanmean(X[:, j]) for j in range(X.shape[1])])
    design = np.hstack([np.where(nan, impute, X), nan[:, miss]]).astype(np.float64)
    assert "missing" in linear
    mean = design.mean(axis=0)
    scale = np.where(design.std(axis=0) > 0, design.std(axis=0), 1.0)
    want = svc.decision_function((design - mean) / scale)
    np.testing.assert_allclose(linear_scores(linear, X)[:, 1], want, rtol=1e-9, atol=1e-9)
    # the indicator of feature 0 carries the label: a missing value raises the relevant class
    assert linear["missing"][0, 1] > 0


def test_default_ranker_fits_predicts_saves_and_loads_with_missing_values(tmp_path: Path) -> None:
    """The default members (AdaBoost.MH, LightGBM's, the SVM) trained on data with 20% missing and
    a feature whose missingness marks relevance: finite scores, the missing documents ranked above,
    the same scores from the saved and loaded model; infinities still refused."""
    import tunemix

    X, y, group = informative(1)
    ranker = tunemix.TuneMixRanker(n_jobs=1).fit(X, y, group=group)
    Xt, _, gt = informative(2, n_queries=20)
    scores = ranker.predict(Xt, group=gt)
    assert np.all(np.isfinite(scores))
    missing = np.isnan(Xt[:, 0])
    assert scores[missing].mean() > scores[~missing].mean()
    path = ranker.save(tmp_path, "nan")
    np.testing.assert_array_equal(tunemix.load(path).predict(Xt, group=gt), scores)
    Xt[3, 2] = np.inf
    with pytest.raises(ValueError, match=r"X\[3, 2\] is not a finite float32 number"):
        ranker.predict(Xt, group=gt)


def test_letor_files_with_omitted_features_as_missing_through_the_cli(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """``write_svmlight`` leaves missing values out (and writes zeros); ``read_letor(missing="nan")``
    reads them back bit for bit, ``missing="zero"`` as 0; ``tunemix train --missing nan`` and
    ``tunemix predict --missing nan`` give the library's scores of the NaN matrix."""
    import tunemix
    from tunemix.cli import main
    from tunemix.core.data.dataset import RankingData
    from tunemix.core.data.svmlight import write_svmlight

    paths = {}
    for name, seed, nq in (("train", 3, 30), ("vali", 4, 10), ("test", 5, 10)):
        X, y, group = informative(seed, n_queries=nq)
        X[0, 2] = 0.0  # a zero that is present
        off = np.concatenate([[0], np.cumsum(group)]).astype(np.int64)
        data = RankingData(features=X, labels=y.astype(np.int32), query_offsets=off,
                           qids=np.array([f"{name}{q}" for q in range(nq)]))
        paths[name] = tmp_path / f"{name}.txt"
        write_svmlight(data, paths[name])
        back = tunemix.read_letor(paths[name], n_features=X.shape[1], missing="nan")
        assert back.X.tobytes() == X.tobytes()
        zero = tunemix.read_letor(paths[name], n_features=X.shape[1]).X
        np.testing.assert_array_equal(zero, np.nan_to_num(X, nan=0.0))
    models = tmp_path / "models"
    assert main(["train", "--train", str(paths["train"]), "--vali", str(paths["vali"]), "--missing", "nan",
                 "--name", "nan", "--models-dir", str(models), "--n-jobs", "1", "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["predict", str(paths["test"]), "--model", "nan", "--models-dir", str(models),
                 "--missing", "nan"]) == 0
    printed = np.array([float(v) for v in capsys.readouterr().out.split()])
    test = tunemix.read_letor(paths["test"], missing="nan")
    want = tunemix.load(models / "nan").predict(test.X, group=test.group)
    np.testing.assert_array_equal(printed, want)
    assert main(["predict", str(paths["test"]), "--model", "nan", "--models-dir", str(models)]) == 0
    as_zero = np.array([float(v) for v in capsys.readouterr().out.split()])
    assert not np.array_equal(as_zero, printed)
    # the other commands that read a data file take the option too
    for command in (["explain", "--doc", "test0:1"], ["importance"]):
        assert main([command[0], str(paths["test"]), "--model", "nan", "--models-dir", str(models), "--missing",
                     "nan", *command[1:]]) == 0, capsys.readouterr().err
        assert capsys.readouterr().out.strip()
