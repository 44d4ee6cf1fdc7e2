"""Every default calibrator on a real member: LightGBM multiclass on MQ2008 Fold1.

Needs ../shared/data (skips otherwise) and lightgbm (the bench extra). A quality smoke test:
no calibrator fails or produces NaN on real raw scores, and none ranks much worse than the
member's own expected gain.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from tunemix.core.calibration import DEFAULT_CALIBRATORS, make_calibrator
from tunemix.core.data.svmlight import read_svmlight
from tunemix.train.data.splits import split_by_query


def _ndcg10_yahoo(labels, scores, offsets) -> float:
    """Mean NDCG@10, gain 2^l - 1, ties in input order, no relevant document -> 1."""
    discounts = 1.0 / np.log2(np.arange(2, 12))
    out = []
    for lo, hi in itertools.pairwise(offsets):
        g = 2.0 ** labels[lo:hi] - 1.0
        top = min(10, hi - lo)
        ideal = np.sort(g)[::-1][:top] @ discounts[:top]
        got = g[np.argsort(-scores[lo:hi], kind="stable")][:top] @ discounts[:top]
        out.append(got / ideal if ideal > 0 else 1.0)
    return float(np.mean(out))


@pytest.mark.slow
@pytest.mark.shared_data
def test_default_calibrators_on_a_lightgbm_member(mq2008_fold1):
    lgb = pytest.importorskip("lightgbm")
    train = read_svmlight(mq2008_fold1 / "train.txt")
    test = read_svmlight(mq2008_fold1 / "test.txt", n_features=train.n_features)
    fit_part, cal_part = split_by_query(train, fraction=0.8, seed=0)
    booster = lgb.train(
        {"objective": "multiclass", "num_class": 3, "learning_rate": 0.05, "num_leaves": 8,
         "verbose": -1, "num_threads": 1, "seed": 0},
        lgb.Dataset(fit_part.features, fit_part.labels),
        num_boost_round=100,
    )
    raw_cal = np.asarray(booster.predict(cal_part.features, raw_score=True), dtype=np.float64)
    raw_test = np.asarray(booster.predict(test.features, raw_score=True), dtype=np.float64)
    gains = np.array([0.0, 1.0, 3.0])
    member = _ndcg10_yahoo(test.labels, np.asarray(booster.predict(test.features)) @ gains,
                           test.query_offsets)
    results = {}
    for spec in DEFAULT_CALIBRATORS:
        c = make_calibrator(spec).fit(raw_cal, cal_part.labels, cal_part.query_offsets, gains)
        scores = c.transform(raw_test)
        assert np.all(np.isfinite(scores)), spec
        results[spec] = _ndcg10_yahoo(test.labels, scores, test.query_offsets)
    print(f"member expected gain: {member:.4f}")
    for spec, value in results.items():
        print(f"{spec:24s} {value:.4f}")
    assert member > 0.75
    worst = min(results, key=results.__getitem__)
    assert results[worst] > member - 0.05, (worst, results, member)
