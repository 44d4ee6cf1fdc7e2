"""Exact explanations (``method="exact"``, ``tunemix.core.explain.exact_explanation``): equal to brute-force
Shapley enumeration of the whole model where every layer is linear (identity calibrator, a uniform
mix without per-query statistics, the raw view) for every member type; additive to 1e-9 for every
member type, view, calibrator and mixer; deterministic; a pair is a difference; the sampled whole-model
values within 5 standard errors of their enumeration on the same small models."""

from __future__ import annotations

import numpy as np
import pytest

from tests.scoring.test_explanation import (
    MEMBERS,
    OTHER_TYPES,
    D,
    as_model,
    brute_force,
    candidate_list,
    learner_type,
    sub_model,
    trained,
)
from tunemix.core.calibration.expected_relevance import IdentityCalibrator
from tunemix.core.ensemble.base import Mixer
from tunemix.core.ensemble.exponential_forecaster import ExponentialForecaster
from tunemix.core.ensemble.member_rescaling import MemberRescaler
from tunemix.core.ensemble.registry import mixer_from_params
from tunemix.core.explain.explanation import explain_pair, explain_rows
from tunemix.core.explain.mix_propagation import mix_layer
from tunemix.core.scoring.ensemble_model import EnsembleModel, Member

pytest.importorskip("lightgbm")
pytest.importorskip("sklearn")

MIXERS = [
    {"mixer": "uniform", "rescale": "zscore_query"},
    {"mixer": "uniform", "rescale": "minmax_query"},
    {"mixer": "uniform", "rescale": "none"},
    {"mixer": "exp_forecaster", "rescale": "zscore_query"},
    {"mixer": "one_best"},
]


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, EnsembleModel]:
    return {
        "raw": trained(tmp_path_factory.mktemp("raw"), ["raw"], MEMBERS + OTHER_TYPES),
        "raw+std": trained(tmp_path_factory.mktemp("std"), ["raw", "raw+std"], MEMBERS + OTHER_TYPES),
        "raw+white": trained(tmp_path_factory.mktemp("white"), ["raw+white"], MEMBERS),
    }


def linear_layers(model: EnsembleModel, m: int) -> EnsembleModel:
    """Member m alone with its calibrator replaced by the identity (reads class 0 of its K-vector: a
    linear map) and a uniform mix without rescaling: every layer after the member is linear."""
    k = model.runs[model.members[m].run].n_classes
    identity = IdentityCalibrator()
    identity.gains_ = np.arange(k, dtype=np.float64)  # the calibration step checks the class count
    member = Member(name="id", run=model.members[m].run, iterations=model.members[m].iterations, calibrator=identity)
    mixer = mixer_from_params({"mixer": "uniform", "n_members": 1, "rescale": "none", "rescale_scale": np.zeros(0)})
    return EnsembleModel(n_features=model.n_features, extra_views=model.extra_views, forest=model.forest,
                         runs=model.runs, members=[member], mixer=mixer, linear=model.linear)


def with_mixer(model: EnsembleModel, params: dict[str, object]) -> EnsembleModel:
    m = model.n_members
    full = {"n_members": m, "rescale_scale": np.zeros(0), **params}
    if params["mixer"] == "one_best":
        full.update(best=m // 2, omega=np.zeros(m), measure="ndcg@10", convention="yahoo")
    if params["mixer"] == "exp_forecaster":  # fitted weights 1 .. 2 (its params hold the whole grid search)
        mixer: Mixer = ExponentialForecaster(rescale=str(params["rescale"]))
        mixer.weights_ = np.linspace(1.0, 2.0, m)
        mixer.rescaler_ = MemberRescaler(str(params["rescale"]))
        mixer.n_members_ = m
    else:
        mixer = mixer_from_params(full)
    return EnsembleModel(n_features=model.n_features, extra_views=model.extra_views, forest=model.forest,
                         runs=model.runs, members=model.members, mixer=mixer, linear=model.linear)


def assert_adds_up(model: EnsembleModel, x: np.ndarray, off: list[int]) -> None:
    e = explain_rows(model, x, off)
    assert e.method == "exact" and e.exact.all() and np.all(e.standard_error == 0)
    np.testing.assert_allclose(e.baseline + e.contributions.sum(axis=1), model.score(x, off), rtol=0, atol=1e-9)
    # each query scored on its own (a whitened view's eigendecompositions of a batch of queries may
    # differ from one query's in the last bit)
    np.testing.assert_allclose(e.scores, model.score(x, off), rtol=0, atol=1e-12)


def assert_member_equals_brute_force(model: EnsembleModel, m: int, x: np.ndarray) -> None:
    """Member ``m`` alone: its exact values of rows 1 and 5 of the 7-row list ``x`` == the
    Shapley values by enumeration."""
    sub = linear_layers(model, m)
    e = explain_rows(sub, x, [0, 7], [1, 5])
    for k, i in enumerate([1, 5]):
        base, phi = brute_force(as_model(sub), x, i)
        np.testing.assert_allclose(e.contributions[k], phi, rtol=0, atol=1e-9)
        assert e.baseline[k] == pytest.approx(base, abs=1e-9)


def test_linear_layers_equal_brute_force_on_every_member_type(models: dict[str, EnsembleModel]) -> None:
    """Trees, products of stumps, Hamming trees (AdaBoost.MH), LightGBM trees (McRank, LambdaMART),
    the SVM and the best single feature (linear): exact == whole-model Shapley by enumeration."""
    model = models["raw"]
    first: dict[str, int] = {}
    for m in range(model.n_members):
        first.setdefault(learner_type(model, m), m)
    assert {k.split("/")[0] for k in first} >= {"adaboost", "svm", "best_feature", "mcrank", "lambdamart"}
    bases = {model.forest.base_kind[model.runs[model.members[m].run].base_start] for m in first.values()
             if model.runs[model.members[m].run].kind == "forest"}
    assert bases == {0, 1}  # trees and products of stumps
    x = candidate_list(2, n=7)
    for m in first.values():
        assert_member_equals_brute_force(model, m, x)


@pytest.mark.parametrize("view", ["raw", "raw+std", "raw+white"])
def test_additivity_on_every_member_type_view_and_calibrator(models: dict[str, EnsembleModel], view: str) -> None:
    """Each member alone (its own calibrator: shift, cpc, rbc, er, ordinal, identity) and the whole model."""
    model = models[view]
    x = np.vstack([candidate_list(7, n=9), candidate_list(8, n=5)])
    off = [0, 9, 14]
    for m in range(model.n_members):
        assert_adds_up(sub_model(model, [m]), x, off)
    assert_adds_up(model, x, off)


@pytest.mark.parametrize("params", MIXERS, ids=lambda p: f"{p['mixer']}-{p.get('rescale', '')}")
def test_additivity_on_every_linear_mixer(models: dict[str, EnsembleModel], params: dict[str, object]) -> None:
    model = with_mixer(models["raw+std"], params)
    x = candidate_list(9, n=10)
    member = model.member_scores(x, [0, 10])
    layer = mix_layer(model.mixer, member)
    assert layer is not None
    # each document's own score in its place: the served mix
    np.testing.assert_allclose(layer.value(np.arange(10), member).sum(axis=1), model.score(x, [0, 10]), atol=1e-12)
    assert_adds_up(model, x, [0, 10])


def test_rank_fusion_falls_back_to_the_whole_model_values(models: dict[str, EnsembleModel]) -> None:
    model = with_mixer(models["raw"], {"mixer": "rrf", "k": 60.0})
    x = candidate_list(10, n=6)
    e = explain_rows(model, x, [0, 6], [0, 3], budget=1 << 12)
    assert e.method == "shapley"
    np.testing.assert_allclose(e.baseline + e.contributions.sum(axis=1), e.scores, atol=1e-9)


def test_deterministic_and_pairs_are_differences(models: dict[str, EnsembleModel]) -> None:
    model = models["raw+std"]  # a uniform mix of per-query z-scores
    x = np.vstack([candidate_list(4, n=8), candidate_list(5, n=6)])
    off = [0, 8, 14]
    one, two = explain_rows(model, x, off), explain_rows(model, x, off)
    np.testing.assert_array_equal(one.contributions, two.contributions)
    np.testing.assert_array_equal(one.baseline, two.baseline)
    pair = explain_pair(model, x, off, 9, 12)
    np.testing.assert_array_equal(pair.contributions, one.contributions[9] - one.contributions[12])
    # the rest of the list: the two baselines' difference (through the per-query rescaling)
    assert pair.rest_of_list == one.baseline[9] - one.baseline[12] != 0.0
    assert pair.rest_of_list + pair.contributions.sum() == pytest.approx(pair.score_a - pair.score_b, abs=1e-9)
    assert all(c != 0.0 for _, c in pair.top(D))  # zero contributions are not listed
    assert np.all(one.contributions[:, 4] == 0.0)  # a constant feature
    # without per-query rescaling the baseline is one value per query, and a pair is the features alone
    flat = with_mixer(model, {"mixer": "uniform", "rescale": "none"})
    e = explain_rows(flat, x, off)
    assert len(set(e.baseline[:8].tolist())) == 1 and len(set(e.baseline[8:].tolist())) == 1
    assert explain_pair(flat, x, off, 9, 12).rest_of_list == 0.0


def test_a_member_flat_on_the_list_stays_bounded(models: dict[str, EnsembleModel]) -> None:
    """Members whose scores barely vary on the list (five documents that differ by 1e-6 in one
    feature, and one far from them): the mix layer keeps the contributions within the z-score's
    range, where fixed statistics would make them as large as 1 / spread."""
    model = with_mixer(models["raw"], {"mixer": "uniform", "rescale": "zscore_query"})
    x = np.repeat(candidate_list(11, n=1), 6, axis=0)
    x[:, 0] += np.float32(1e-6) * np.arange(6, dtype=np.float32)  # a tiny spread
    x[5] = candidate_list(12, n=1)[0]  # one document far from the others
    e = explain_rows(model, x, [0, 6])
    np.testing.assert_allclose(e.baseline + e.contributions.sum(axis=1), model.score(x, [0, 6]), atol=1e-9)
    # a z-score of one document among 6 lies in [-sqrt(5), sqrt(5)]: each of a member's two shares
    # moves its w_m z by at most 2 sqrt(5) w_m, so all members together by 4 sqrt(5)
    assert np.abs(e.contributions).sum(axis=1).max() <= 4 * np.sqrt(5) + 1e-9


def test_the_reference_itself_gets_nothing(models: dict[str, EnsembleModel]) -> None:
    model = models["raw+white"]
    x = candidate_list(6, n=5)
    e = explain_rows(model, x, [0, 5], [0, 2], reference=x[0])
    assert np.all(e.contributions[0] == 0.0) and e.n_relevant[0] == 0
    assert e.baseline[0] == pytest.approx(e.scores[0], abs=1e-9)


def test_sampled_option_within_five_standard_errors_of_enumeration(models: dict[str, EnsembleModel]) -> None:
    model = models["raw"]
    x = candidate_list(3, n=11)
    enumerated = explain_rows(model, x, [0, 11], [2, 6], method="shapley")
    assert enumerated.exact.all()
    sampled = explain_rows(model, x, [0, 11], [2, 6], method="shapley", budget=20_000, seed=1, exact_max_features=0)
    assert not sampled.exact.any()
    assert np.all(np.abs(sampled.contributions - enumerated.contributions) <= 5 * sampled.standard_error + 1e-12)


def test_the_request_scoring_pass_is_reused(models: dict[str, EnsembleModel]) -> None:
    """explain_rows(scoring=model.scoring_pass(...)) gives the same explanations as scoring the
    lists again, the pass's scores are score()'s; a pass of other arrays is refused."""
    for view in ("raw+std", "raw+white"):
        model = models[view]
        x = np.vstack([candidate_list(4, n=8), candidate_list(5, n=6)])
        off = [0, 8, 14]
        sp = model.scoring_pass(x, off)
        np.testing.assert_array_equal(sp.scores, model.score(x, off))
        again, reused = explain_rows(model, x, off, [1, 9, 12]), explain_rows(model, x, off, [1, 9, 12], scoring=sp)
        np.testing.assert_allclose(reused.contributions, again.contributions, rtol=0, atol=1e-12)
        np.testing.assert_allclose(reused.baseline, again.baseline, rtol=0, atol=1e-12)
        np.testing.assert_array_equal(reused.scores, sp.scores[[1, 9, 12]])
        pair = explain_pair(model, x, off, 9, 12, scoring=sp)
        np.testing.assert_array_equal(pair.contributions, reused.contributions[1] - reused.contributions[2])
        other = x.copy()
        other[3, 0] += 1.0
        with pytest.raises(ValueError, match="scoring pass of other"):
            explain_rows(model, other, off, scoring=sp)
        with pytest.raises(ValueError, match="scoring pass of other"):
            explain_rows(model, x, [0, 7, 14], scoring=sp)


def test_the_scoring_pass_whitening_is_reused(models: dict[str, EnsembleModel]) -> None:
    """A scoring pass asked for its whitening keeps each query's (mean, eigenvalues, eigenvectors)
    as whiten_by_query computed them (the same bits as one query alone, and as a query long enough
    for the threaded path), and explanations reusing them equal those that compute them again."""
    from tunemix.core.data.normalization import PARALLEL_MIN_DOCUMENTS, whiten_by_query

    model = models["raw+white"]
    x = np.vstack([candidate_list(4, n=8), candidate_list(5, n=6)])
    off = [0, 8, 14]
    sp = model.scoring_pass(x, off, whitening=True)
    assert sp.whitening is not None and sorted(sp.whitening) == [0, 1]
    np.testing.assert_array_equal(sp.scores, model.score(x, off))
    for q, (lo, hi) in enumerate([(0, 8), (8, 14)]):
        alone: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        whiten_by_query(x[lo:hi], [0, hi - lo], keep=alone)
        for got, want in zip(sp.whitening[q], alone[0], strict=True):
            np.testing.assert_array_equal(got, want)
    again, reused = explain_rows(model, x, off, [1, 9, 12]), explain_rows(model, x, off, [1, 9, 12], scoring=sp)
    np.testing.assert_array_equal(reused.contributions, again.contributions)
    np.testing.assert_array_equal(reused.baseline, again.baseline)
    assert model.scoring_pass(x, off).whitening is None
    assert models["raw"].scoring_pass(x, off, whitening=True).whitening is None
    n = PARALLEL_MIN_DOCUMENTS + 3
    big = np.random.default_rng(8).normal(size=(n, 5))
    threaded: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    one: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    np.testing.assert_array_equal(whiten_by_query(big, [0, 3, n], parts=2, keep=threaded),
                                  whiten_by_query(big, [0, 3, n], keep=one))
    assert sorted(threaded) == sorted(one) == [0, 1]
    for q in (0, 1):
        for got, want in zip(threaded[q], one[q], strict=True):
            np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("k", [1, 2, 3, 5])
def test_input_shapley_matrix_equals_permutation_enumeration(k: int) -> None:
    """The calibrators' K-input Shapley values as one matrix product equal the average marginal
    contribution over all K! orders (the slow, obvious twin) on a random game."""
    import itertools

    from tunemix.core.explain.calibrator_games import shapley_matrix

    values = np.random.default_rng(k).normal(size=1 << k)
    values[0] = 0.3
    want = np.zeros(k)
    orders = list(itertools.permutations(range(k)))
    for order in orders:
        code = 0
        for f in order:
            want[f] += values[code | (1 << f)] - values[code]
            code |= 1 << f
    want /= len(orders)
    got = values @ shapley_matrix(k)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
    assert got.sum() == pytest.approx(values[-1] - values[0], abs=1e-12)


def test_whitened_columns_split_along_their_change() -> None:
    """The whitened columns' attributions go to the features moving each column the way it moved
    (RevealCancel with a step): against a slow loop over columns and features, shares of a column
    add up to its attribution, features pushing against get nothing, and none exceeds it."""
    from tunemix.core.explain.exact_explanation import _unwhiten

    rng = np.random.default_rng(3)
    k, d = 4, 5
    x, r = rng.normal(size=(k, d)), rng.normal(size=d)
    white = rng.normal(size=(d, d))
    x[1] = r  # a document equal to the reference: nothing moves
    phi = rng.normal(size=(k, d))
    got = _unwhiten(phi, x, r, white)
    want = np.zeros((k, d))
    for i in range(k):
        for c in range(d):
            s = [(x[i, j] - r[j]) * white[j, c] for j in range(d)]
            t = sum(s)
            along = [v if (v > 0) == (t > 0) and v != 0 else 0.0 for v in s]
            total, size = sum(along), max(sum(map(abs, s)), 1e-300)
            for j in range(d):
                want[i, j] += phi[i, c] * (along[j] / total if total != 0 else abs(s[j]) / size)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
    np.testing.assert_allclose(got.sum(axis=1), phi.sum(axis=1) * [1, 0, 1, 1], rtol=0, atol=1e-12)
    # one column: a feature pushing against its change gets nothing, the others share it
    one = np.zeros((1, 2))
    one[0, 0] = 0.2
    split = _unwhiten(one, np.array([[3.0, -2.9]]), np.zeros(2), np.eye(2))
    assert split[0, 0] == pytest.approx(0.2) and split[0, 1] == 0.0



def test_standardised_reference_equals_the_view() -> None:
    """The reference's standardised block (``_standardised_reference``) against its NumPy twin (the
    list's mean and population deviation per column, 0 for a flat column), bit for bit, and equal to
    the view's own values (``standardise_by_query``) when the reference is a document of the list."""
    from tunemix.core.data.normalization import standardise_by_query
    from tunemix.core.explain.exact_explanation import _standardised_reference

    rng = np.random.default_rng(11)
    x = rng.normal(size=(13, 6)).astype(np.float32) * [1, 10, 1e-3, 1, 1, 1]
    x[:, 3] = 2.5  # flat
    x[:, 4] = rng.integers(0, 2, size=13)
    for r in (np.median(x, axis=0).astype(np.float32), x[5], rng.normal(size=6).astype(np.float32)):
        got = np.empty(6)
        _standardised_reference(x, r, got)
        x64 = x.astype(np.float64)
        mean = x64.sum(axis=0) / 13
        std = np.sqrt(((x64 - mean) ** 2).sum(axis=0) / 13)
        flat = std <= 1e-12 * np.maximum(1.0, np.abs(mean))
        np.testing.assert_array_equal(got, np.where(flat, 0.0, (r - mean) / np.where(flat, 1.0, std)))
    _standardised_reference(x, x[5], got)
    np.testing.assert_array_equal(got.astype(np.float32), standardise_by_query(x, np.array([0, 13]))[5])


def with_missing(x: np.ndarray, seed: int) -> np.ndarray:
    """``x`` with a quarter of its values missing (NaN), one column missing for every document."""
    out = x.copy()
    out[np.random.default_rng(seed).random(x.shape) < 0.25] = np.nan
    out[:, 3] = np.nan
    return out


def missing_both_ways(model: EnsembleModel) -> EnsembleModel:
    """``model`` with every other node of its forest sending a missing value right."""
    from tunemix.core.scoring.forest import FlatForest

    arrays = model.forest.to_arrays()
    arrays["node_missing_right"][::2] = 1
    return EnsembleModel(n_features=model.n_features, extra_views=model.extra_views,
                         forest=FlatForest.from_arrays(arrays), runs=model.runs, members=model.members,
                         mixer=model.mixer, linear=model.linear)


def test_missing_values_equal_brute_force_on_every_member_type(models: dict[str, EnsembleModel]) -> None:
    """Lists with missing values: each member type's exact values == the whole-model Shapley values
    by enumeration (the brute force's hybrid rows carry the NaN of the row or of the reference)."""
    model = missing_both_ways(models["raw"])
    first: dict[str, int] = {}
    for m in range(model.n_members):
        first.setdefault(learner_type(model, m), m)
    x = with_missing(candidate_list(2, n=7), 1)
    for m in first.values():
        assert_member_equals_brute_force(model, m, x)


@pytest.mark.parametrize("view", ["raw", "raw+std", "raw+white"])
def test_missing_values_add_up_on_every_view(models: dict[str, EnsembleModel], view: str) -> None:
    model = missing_both_ways(models[view])
    x = with_missing(np.vstack([candidate_list(7, n=9), candidate_list(8, n=5)]), 2)
    assert np.all(np.isfinite(model.score(x, [0, 9, 14])))
    assert_adds_up(model, x, [0, 9, 14])
