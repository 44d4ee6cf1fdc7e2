"""The relevance head: rank matching against a per-query loop (its slow twin), never contradicting
the ranking (a property test on random lists, ties and probabilities), probabilities that are
probabilities, storage bit for bit, and a trained head whose probabilities are calibrated across
queries."""

from __future__ import annotations

import itertools
import json
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tunemix.core.calibration.expected_relevance import softmax_probabilities as softmax
from tunemix.core.data.dataset import RankingData
from tunemix.core.scoring.forest import FlatForest, concatenate, score_forest
from tunemix.core.scoring.relevance_head import (
    RelevanceHead,
    cumulative_from_probabilities,
    probabilities_from_cumulative,
    rank_match,
    recalibrated,
)
from tunemix.train.relevance.fit import (
    expected_calibration_error,
    fit_recalibration,
    fit_relevance_head,
    recalibration_gain,
    relevance_metrics,
)


def rank_match_slow(values: np.ndarray, scores: np.ndarray, off: np.ndarray) -> np.ndarray:
    """Per query and column: sort the values high to low, give the k-th largest to the k-th ranked
    document (ties in the ranking keep the posted order), then give every run of equal scores
    its mean."""
    out = np.empty_like(values, dtype=np.float64)
    for q in range(len(off) - 1):
        lo, hi = int(off[q]), int(off[q + 1])
        ranked = sorted(range(lo, hi), key=lambda i: -scores[i])  # stable: posted order among ties
        for j in range(values.shape[1]):
            handed = sorted((float(v) for v in values[lo:hi, j]), reverse=True)
            for pos, i in enumerate(ranked):
                out[i, j] = handed[pos]
            for _, run in itertools.groupby(ranked, key=lambda i: scores[i]):
                idx = list(run)
                out[idx, j] = sum(out[i, j] for i in idx) / len(idx)
    return out


def _lists(rng: np.random.Generator, ties: bool) -> tuple[np.ndarray, np.ndarray]:
    sizes = rng.integers(0, 12, size=int(rng.integers(1, 6)))
    off = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    n = int(off[-1])
    scores = rng.integers(0, 3, size=n).astype(float) if ties else rng.normal(size=n)
    return scores, off


@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), k=st.integers(2, 5), ties=st.booleans())
def test_rank_matching_equals_its_slow_twin_and_never_contradicts_the_ranking(seed: int, k: int, ties: bool) -> None:
    rng = np.random.default_rng(seed)
    scores, off = _lists(rng, ties)
    probs = softmax(rng.normal(scale=2.0, size=(scores.shape[0], k)))
    cum = cumulative_from_probabilities(probs)
    matched = rank_match(cum, scores, off)
    np.testing.assert_allclose(matched, rank_match_slow(cum, scores, off), rtol=0, atol=1e-12)
    out = probabilities_from_cumulative(matched)
    assert out.shape == (scores.shape[0], k) and np.all((out >= 0) & (out <= 1))
    np.testing.assert_allclose(out.sum(axis=1), 1.0, atol=1e-12)
    expected = matched.sum(axis=1)
    for q in range(len(off) - 1):
        lo, hi = off[q], off[q + 1]
        order = lo + np.argsort(-scores[lo:hi], kind="stable")  # the ranking /rank gives
        assert np.all(np.diff(expected[order]) <= 1e-12)
        assert np.all(np.diff(matched[order], axis=0) <= 1e-12)
        for a, b in itertools.combinations(range(lo, hi), 2):  # tied documents get the same estimate
            if scores[a] == scores[b]:
                np.testing.assert_allclose(matched[a], matched[b], atol=1e-12)
        # each query keeps what its documents were given in total (how many relevant it holds)
        np.testing.assert_allclose(matched[lo:hi].sum(axis=0), cum[lo:hi].sum(axis=0), atol=1e-9)


def test_rank_matching_follows_the_ranking_not_the_posted_order() -> None:
    cum = np.array([[0.9], [0.1], [0.5], [0.3], [0.2]])
    scores = np.array([1.0, 3.0, 2.0, 5.0, 5.0])
    out = rank_match(cum, scores, np.array([0, 3, 5]))
    np.testing.assert_array_equal(out[:, 0], [0.1, 0.9, 0.5, 0.25, 0.25])


def _random_forest(rng: np.random.Generator, n_features: int, k: int, n_base: int) -> FlatForest:
    """A forest of stumps (one split each) with random thresholds and leaf values."""
    node_feature = rng.integers(0, n_features, size=n_base).astype(np.int32)
    leaves = np.zeros((2 * n_base, k))
    leaves[np.arange(2 * n_base), np.repeat(np.arange(n_base) % k, 2)] = rng.normal(size=2 * n_base)
    return FlatForest.from_arrays({
        "base_kind": np.zeros(n_base, np.int8), "base_node_start": np.arange(n_base + 1, dtype=np.int64),
        "base_leaf_start": 2 * np.arange(n_base + 1, dtype=np.int64), "node_feature": node_feature,
        "node_threshold": rng.normal(size=n_base).astype(np.float32),
        "node_left": np.full(n_base, -1, np.int32), "node_right": np.full(n_base, -2, np.int32),
        "leaf_values": leaves, "n_features": np.array(n_features),
    })


def _random_head(rng: np.random.Generator, k: int, n_features: int = 4, recalibrate: bool = False) -> RelevanceHead:
    parts = [_random_forest(rng, n_features, k, int(rng.integers(1, 4)) * k) for _ in range(int(rng.integers(1, 4)))]
    bounds = np.concatenate([[0], np.cumsum([p.n_base for p in parts])]).astype(np.int64)
    return RelevanceHead(n_grades=k, forest=concatenate(parts), bounds=bounds,
                         models=[{"iterations": p.n_base // k} for p in parts],
                         slopes=rng.uniform(0.2, 3.0, size=k - 1) if recalibrate else None,
                         intercepts=rng.normal(size=k - 1) if recalibrate else None)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), k=st.integers(2, 5), ties=st.booleans(), recalibrate=st.booleans())
def test_the_head_never_contradicts_the_ranking(seed: int, k: int, ties: bool, recalibrate: bool) -> None:
    rng = np.random.default_rng(seed)
    head = _random_head(rng, k, recalibrate=recalibrate)
    scores, off = _lists(rng, ties)
    x = rng.normal(size=(scores.shape[0], 4)).astype(np.float32)
    probs, expected = head.estimate(x, scores, off)
    assert np.all((probs >= 0) & (probs <= 1))
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, atol=1e-12)
    cum = cumulative_from_probabilities(probs)
    for q in range(len(off) - 1):
        lo, hi = off[q], off[q + 1]
        order = lo + np.argsort(-scores[lo:hi], kind="stable")
        assert np.all(np.diff(expected[order]) <= 1e-12)
        assert np.all(np.diff(cum[order], axis=0) <= 1e-12)


def test_the_head_averages_its_models_probabilities() -> None:
    rng = np.random.default_rng(5)
    head = _random_head(rng, 3)
    x = rng.normal(size=(7, 4)).astype(np.float32)
    sums = score_forest(head.forest, x, head.bounds)
    mean = np.mean([softmax(sums[:, i + 1] - sums[:, i]) for i in range(head.n_models)], axis=0)
    np.testing.assert_allclose(head.tree_probabilities(x), mean, atol=1e-12)
    probs, expected = head.estimate(x, np.arange(7.0), np.array([0, 7]))
    np.testing.assert_allclose(expected, probs @ np.arange(3.0), atol=1e-12)


@pytest.mark.parametrize("recalibrate", [False, True])
def test_the_head_survives_storage_bit_for_bit(recalibrate: bool) -> None:
    rng = np.random.default_rng(3)
    head = _random_head(rng, 4, recalibrate=recalibrate)
    doc, arrays = head.to_artifact()
    again = RelevanceHead.from_artifact(json.loads(json.dumps(doc)), arrays, 4)
    x = rng.normal(size=(9, 4)).astype(np.float32)
    s, off = rng.normal(size=9), np.array([0, 4, 9])
    for a, b in zip(head.estimate(x, s, off), again.estimate(x, s, off), strict=True):
        np.testing.assert_array_equal(a, b)
    if recalibrate:
        with pytest.raises(ValueError, match="positive"):
            RelevanceHead.from_artifact({**doc, "recalibration": {"slopes": [1.0, -1.0, 1.0],
                                                                  "intercepts": [0.0, 0.0, 0.0]}}, arrays, 4)
    with pytest.raises(ValueError, match="bounds"):
        RelevanceHead.from_artifact({**doc, "bounds": [0, 1]}, arrays, 4)
    with pytest.raises(ValueError, match="features"):
        RelevanceHead.from_artifact(doc, arrays, 5)


def test_a_trained_head_is_calibrated_across_queries() -> None:
    """Queries differ in how relevant their candidates are. The trained head's P(y >= 1) and
    P(y = top) match the observed frequencies on new queries, ranked by a noisy score."""
    rng = np.random.default_rng(0)

    def batch(n_queries: int) -> tuple[RankingData, np.ndarray]:
        sizes = rng.integers(5, 30, size=n_queries)
        off = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        level = np.repeat(rng.normal(size=n_queries), sizes)  # how good the query's candidates are
        x = rng.normal(size=(int(off[-1]), 5)).astype(np.float32)
        quality = x[:, 0] + 0.5 * x[:, 1] + level
        x[:, 4] = level + rng.normal(scale=0.3, size=level.shape)  # what the trees can see of the query
        labels = np.digitize(quality + rng.normal(scale=0.5, size=quality.shape), [0.8, 1.8])
        scores = quality + rng.normal(scale=0.3, size=quality.shape)
        return RankingData.from_arrays(x, labels, off), scores

    train, _ = batch(400)
    vali, vali_scores = batch(100)
    test, scores = batch(300)
    # leaves of >= 100,000 documents cannot split this data: those models barely learn and are left out
    settings_ = SimpleNamespace(n_leaves=[4, 15], min_data_in_leaf=[20, 100_000], learning_rate=0.1,
                                max_iterations=300, patience=20, keep_within=0.02,
                                feature_fraction=1.0, bagging_fraction=1.0)
    head, _ = fit_relevance_head(train, vali, vali_scores, 3, settings_)
    assert head.n_models == 2 and all(1 <= m["iterations"] <= 300 for m in head.models)
    assert [m["min_data_in_leaf"] for m in head.models] == [20, 20]
    probs, _ = head.estimate(test.features, scores, test.query_offsets)
    metrics = relevance_metrics(probs, test.labels)
    assert metrics["ece_relevant"] < 0.04 and metrics["ece_top"] < 0.04, metrics
    prior = np.bincount(train.labels, minlength=3) / train.n_docs
    assert metrics["log_loss"] < -np.mean(np.log(prior[test.labels])) - 0.2  # far better than the grade shares
    assert abs(expected_calibration_error([0.2, 0.8], [0, 1]) - 0.2) < 1e-12  # two bins, each 0.2 off


def test_recalibration_is_applied_only_when_it_pays_on_held_out_queries() -> None:
    """Trees that see little of what the ranking knows hand out cautious probabilities: in the
    ranking's order they are too low at the top and too high below, and the cross-validated map
    fixes that. Probabilities that are already right are left alone."""
    rng = np.random.default_rng(1)
    sizes = rng.integers(10, 30, size=200)
    off = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    n = int(off[-1])
    quality = rng.normal(size=n)
    p_true = 1.0 / (1.0 + np.exp(-3.0 * quality))
    events = (rng.random(n) < p_true).astype(np.float64)[:, None]
    cautious = rank_match(0.5 + 0.2 * (p_true[:, None] - 0.5), quality, off)  # right order, too timid
    gain = recalibration_gain(cautious, events, off)
    assert gain["applied"] and gain["gain"] > 2 * gain["standard_error"] > 0, gain
    slopes, intercepts = fit_recalibration(cautious, events)
    assert slopes[0] > 2.0  # it stretches the timid probabilities
    before = expected_calibration_error(cautious[:, 0], events[:, 0])
    after = expected_calibration_error(recalibrated(cautious, slopes, intercepts)[:, 0], events[:, 0])
    assert after < before / 3, (before, after)
    right = recalibration_gain(p_true[:, None], events, off)
    assert not right["applied"], right
    # the time budget's stop, asked before each fold's fit: reached after two folds, not applied;
    # never reached, the same answer as without it
    asked: list[int] = []

    def stop() -> bool:
        asked.append(1)
        return len(asked) > 2

    cut = recalibration_gain(cautious, events, off, stop=stop)
    assert not cut["applied"] and "after 2 of 5 folds" in cut["reason"] and len(asked) == 3
    assert recalibration_gain(cautious, events, off, stop=lambda: False) == gain
