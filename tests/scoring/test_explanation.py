"""Whole-model Shapley explanations (``method="shapley"``, ``tunemix.core.explain.whole_model_shapley``) against their
slow twin: brute-force Shapley values of the game v(S) = score(list with row i := hybrid)[i]
computed from ``tunemix.Model.predict`` alone, on models of 6 features (every member type, every
view, calibrators and per-query mixing), plus additivity, the sampled estimator and pairs."""

from __future__ import annotations

import itertools
import warnings
from math import factorial
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tunemix
from tunemix.core.ensemble.registry import mixer_from_params
from tunemix.core.explain.explanation import explain_pair, explain_rows, reference_row
from tunemix.core.scoring.ensemble_model import EnsembleModel
from tunemix.train.config import load_config
from tunemix.train.train import train

pytest.importorskip("lightgbm")
pytest.importorskip("sklearn")

D = 6

MEMBERS = """
[[members.adaboost]]
base = "tree"
n_leaves = 4
n_iterations = 10
checkpoints = [4, 10]
[[members.adaboost]]
base = "product"
n_terms = 2
n_iterations = 6
checkpoints = [6]
"""

OTHER_TYPES = """
[[members.mcrank]]
variant = ["multiclass", "ordinal"]
n_leaves = 4
learning_rate = 0.2
n_iterations = 6
checkpoints = [3, 6]
min_data_in_leaf = 5
views = ["raw"]
label_groupings = ["original"]
[[members.lambdamart]]
n_leaves = 4
n_iterations = 6
checkpoints = [6]
min_data_in_leaf = 5
views = ["raw"]
"""


def config(views: list[str], members: str) -> str:
    return f"""
name = "explain"
seed = 3
[data.synthetic]
queries = [30, 15, 10]
docs_per_query = [5, 12]
features = {D}
levels = 3
seed = 2
[members]
views = {views}
label_groupings = ["original"]
calibrators = ["shift", "cpc:ls", "rbc:linear:gain"]
best_feature = true
{members}
[[members.svm]]
C = [1.0]
[mixer]
name = "uniform"
[run]
backend = "sequential"
report_plots = false
[relevance]
enabled = false
""".replace("'", '"')


def trained(tmp: Path, views: list[str], members: str) -> EnsembleModel:
    (tmp / "c.toml").write_text(config(views, members))
    cfg = load_config(tmp / "c.toml", {"run.models_dir": str(tmp / "models")})
    return train(cfg, progress=False, save=False).model


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, EnsembleModel]:
    """One model per game: query-wise standardisation (columns from two views) and whitening
    (every coalition rescores the list)."""
    return {
        "raw+std": trained(tmp_path_factory.mktemp("std"), ["raw", "raw+std"], MEMBERS + OTHER_TYPES),
        "raw+white": trained(tmp_path_factory.mktemp("white"), ["raw+white"], MEMBERS),
    }


def sub_model(model: EnsembleModel, keep: list[int]) -> EnsembleModel:
    """The same model with only the members ``keep``, mixed uniformly with per-query z-scores."""
    mixer = mixer_from_params({"mixer": "uniform", "n_members": len(keep), "rescale": "zscore_query",
                               "rescale_scale": np.zeros(0)})
    return EnsembleModel(n_features=model.n_features, extra_views=model.extra_views, forest=model.forest,
                         runs=model.runs, members=[model.members[m] for m in keep], mixer=mixer,
                         linear=model.linear)


def as_model(ensemble: EnsembleModel) -> tunemix.Model:
    return tunemix.Model(ensemble=ensemble, manifest={"name": "t", "version": "v0", "n_features": D},
                         path=Path("."))


def brute_force(model: tunemix.Model, x: np.ndarray, i: int) -> tuple[float, np.ndarray]:
    """(v(empty), Shapley values) of row i by enumerating all 2^d coalitions through ``predict``."""
    with np.errstate(all="ignore"), warnings.catch_warnings():  # a column missing throughout: NaN
        warnings.simplefilter("ignore", RuntimeWarning)
        r = np.nanmedian(x.astype(np.float64), axis=0).astype(np.float32)
    v: dict[tuple[int, ...], float] = {}
    for s in itertools.product((0, 1), repeat=D):
        xx = x.copy()
        xx[i] = np.where(np.array(s, dtype=bool), x[i], r)
        v[s] = float(model.predict(xx)[i])
    phi = np.zeros(D)
    for f in range(D):
        for s in v:
            if s[f] == 0:
                with_f = tuple(1 if j == f else s[j] for j in range(D))
                k = sum(s)
                phi[f] += factorial(k) * factorial(D - k - 1) / factorial(D) * (v[with_f] - v[s])
    return v[(0,) * D], phi


def candidate_list(seed: int, n: int = 9) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, D)).astype(np.float32)
    x[:, 2] = np.round(x[:, 2])  # ties with the median: a dummy for some rows
    x[:, 4] = 0.0                # a constant feature: a dummy for every row
    return x


def learner_type(model: EnsembleModel, m: int) -> str:
    run = model.runs[model.members[m].run]
    return f"{run.learner.get('type', 'adaboost')}/{run.learner.get('base', run.learner.get('variant', ''))}/{run.view}"


def check_against_brute_force(ensemble: EnsembleModel, x: np.ndarray, rows: list[int]) -> None:
    e = explain_rows(ensemble, x, [0, x.shape[0]], rows, method="shapley")
    scores = as_model(ensemble).predict(x)
    np.testing.assert_allclose(e.baseline + e.contributions.sum(axis=1), scores[rows], rtol=0, atol=1e-9)
    assert e.exact.all()
    assert np.all(e.contributions[:, 4] == 0.0)  # the constant feature
    for k, i in enumerate(rows):
        base, phi = brute_force(as_model(ensemble), x, i)
        np.testing.assert_allclose(e.contributions[k], phi, rtol=0, atol=1e-6)
        assert abs(e.baseline[k] - base) <= 1e-9


@pytest.mark.parametrize("game", ["raw+std", "raw+white"])
def test_whole_model_equals_brute_force_shapley(models: dict[str, EnsembleModel], game: str) -> None:
    check_against_brute_force(models[game], candidate_list(1), [0, 3, 8])


@pytest.mark.parametrize("game", ["raw+std", "raw+white"])
def test_every_member_type_and_view_alone(models: dict[str, EnsembleModel], game: str) -> None:
    """One member of each (type, view): additivity and brute force on its own."""
    model = models[game]
    first: dict[str, int] = {}
    for m in range(model.n_members):
        first.setdefault(learner_type(model, m), m)
    kinds = {k.split("/")[0] for k in first}
    assert kinds >= ({"adaboost", "svm", "best_feature"} | ({"mcrank", "lambdamart"} if game == "raw+std" else set()))
    views = {k.rsplit("/", 1)[1] for k in first}
    assert views == {"raw", game}  # the best single feature reads the raw view
    x = candidate_list(2, n=7)
    for m in first.values():
        check_against_brute_force(sub_model(model, [m]), x, [1, 5])


@pytest.mark.parametrize("game", ["raw+std", "raw+white"])
def test_whole_model_with_missing_values_equals_brute_force_shapley(models: dict[str, EnsembleModel],
                                                                    game: str) -> None:
    """A list with missing values: feature 0 above every threshold (so is the reference's, the
    median of the present values) except where it is missing, in two of the explained documents
    (a NaN and that value fall in the same interval of thresholds, yet go different ways), and
    others here and there: the whole model's game, dummies found with NaN, against brute force."""
    x = candidate_list(1)
    x[:, 0] = 1e6
    x[[0, 3], 0] = np.nan
    x[1, 3] = np.nan
    x[5, 5] = np.nan
    check_against_brute_force(models[game], x, [0, 3, 8])
    if game == "raw+std":  # one AdaBoost member of the raw view: no linear run reads feature 0
        model = models[game]
        forests = [m for m in range(model.n_members) if learner_type(model, m).startswith("adaboost/")
                   and learner_type(model, m).endswith("/raw")]
        check_against_brute_force(sub_model(model, forests[:1]), x, [0, 3, 8])


def test_sampled_estimate_adds_up_and_reports_its_error(models: dict[str, EnsembleModel]) -> None:
    model = models["raw+std"]
    x = candidate_list(3, n=11)
    exact = explain_rows(model, x, [0, 11], [2, 6], method="shapley")
    sampled = explain_rows(model, x, [0, 11], [2, 6], method="shapley", budget=20_000, seed=5, exact_max_features=0)
    assert not sampled.exact.any() and (sampled.n_permutations >= 100).all()
    np.testing.assert_allclose(sampled.baseline + sampled.contributions.sum(axis=1), sampled.scores, atol=1e-9)
    np.testing.assert_allclose(sampled.baseline, exact.baseline, atol=1e-12)
    err = np.abs(sampled.contributions - exact.contributions)
    assert np.all(err <= 5 * sampled.standard_error + 1e-12)
    assert np.all(sampled.standard_error[:, 4] == 0)  # the dummy
    # at least two pairs, whatever the budget
    few = explain_rows(model, x, [0, 11], [2, 6], method="shapley", budget=1, seed=5)
    assert (few.n_permutations == 4).all()
    np.testing.assert_allclose(few.baseline + few.contributions.sum(axis=1), few.scores, atol=1e-9)
    again = explain_rows(model, x, [0, 11], [2, 6], method="shapley", budget=20_000, seed=5, exact_max_features=0)
    np.testing.assert_array_equal(again.contributions, sampled.contributions)


def test_pair_is_the_difference_of_two_explanations(models: dict[str, EnsembleModel]) -> None:
    model = models["raw+std"]
    x = np.vstack([candidate_list(4, n=8), candidate_list(5, n=6)])
    off = [0, 8, 14]
    single = explain_rows(model, x, off, [9, 12], method="shapley")
    pair = explain_pair(model, x, off, 9, 12, method="shapley")
    np.testing.assert_allclose(pair.contributions, single.contributions[0] - single.contributions[1], atol=1e-12)
    assert pair.baseline + pair.contributions.sum() == pytest.approx(pair.score_a - pair.score_b, abs=1e-9)
    with pytest.raises(ValueError, match="different queries"):
        explain_pair(model, x, off, 2, 12)


@pytest.mark.parametrize("n", [1, 2, 3, 8, 99, 100])
def test_median_reference_equals_numpy_median(n: int) -> None:
    """The median reference by one sort of the columns equals ``np.median`` of the float64 values bit for bit,
    odd and even list sizes, ties and repeated values included."""
    rng = np.random.default_rng(n)
    x = rng.normal(size=(n, 7)).astype(np.float32)
    x[:, 3] = rng.integers(0, 3, size=n)  # ties
    x[:, 4] = 0.5  # a constant column
    x[: n // 2, 5] = np.float32(1e30)  # large values: the mean of the two middle ones in float64
    np.testing.assert_array_equal(reference_row(x, "median"),
                                  np.median(x.astype(np.float64), axis=0).astype(np.float32))


def test_reference_and_rows_are_checked(models: dict[str, EnsembleModel]) -> None:
    model = models["raw+std"]
    x = candidate_list(6, n=5)
    np.testing.assert_array_equal(reference_row(x, "median"), np.median(x, axis=0).astype(np.float32))
    e = explain_rows(model, x, [0, 5], [0], reference="mean", method="shapley")
    np.testing.assert_array_equal(e.reference[0], x.astype(np.float64).mean(axis=0).astype(np.float32))
    e = explain_rows(model, x, [0, 5], [0], reference=x[0], method="shapley")  # the document itself: nothing to explain
    assert e.n_relevant[0] == 0 and np.all(e.contributions == 0) and e.baseline[0] == e.scores[0]
    for bad, match in (({"rows": [5]}, "outside"), ({"reference": "mode"}, "reference"),
                       ({"reference": np.zeros(3)}, "shape"), ({"budget": 0}, "budget"),
                       ({"method": "sampled"}, "method")):
        options: dict[str, Any] = {"rows": [0], **bad}
        with pytest.raises(ValueError, match=match):
            explain_rows(model, x, [0, 5], **options)
