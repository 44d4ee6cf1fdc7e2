"""The kernels against the plain-Python twin (tests/evaluation/naive.py), plus properties."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.evaluation.naive import evaluate_naive
from tunemix.core.evaluation import CONVENTION_NAMES, Measure, evaluate, mean_metric

MEASURES = ["ndcg@1", "ndcg@3", "ndcg@10", "ndcg@16", "ndcg@40", "ndcg", "dcg@5", "dcg",
            "err", "err@5", "err@40", "err@3:top=2", "err:top=4", "p@1", "p@5", "p@10", "map",
            "meanndcg", "ndcg@5:gain=exp", "dcg@3:gain=linear", "ndcg@10:empty=0", "ndcg:empty=1",
            "meanndcg:gain=exp:empty=1"]


def _supported(conv: str, m: str) -> bool:
    meas = Measure.parse(m)
    limit = {"letor3": 16, "letor4": 10, "mslr": 10}.get(conv)
    return not (limit and meas.name in ("ndcg", "p") and meas.cutoff and meas.cutoff > limit)


def random_case(rng: np.random.Generator, max_label: int, with_docids: bool):
    nq = int(rng.integers(1, 12))
    sizes = rng.choice([1, 2, 3, 5, 9, 10, 11, 17, 33, 40, 70], size=nq).tolist()
    n = int(sum(sizes))
    labels = rng.integers(0, max_label + 1, size=n)
    kind = rng.integers(0, 3)
    if kind == 0:
        scores = rng.normal(size=n)
    elif kind == 1:  # many exact ties
        scores = rng.integers(-3, 3, size=n).astype(np.float64)
    else:  # pairs that only tie after float32 rounding
        base = rng.integers(0, 4, size=n).astype(np.float64)
        scores = base + rng.integers(0, 2, size=n) * 1e-12
    docids = None
    if with_docids:
        pool = ["a", "b", "B", "10", "9", "d1", "d10", "d2", "z", "é", "Z9", "aa"]
        docids = []
        for s in sizes:
            docids += [pool[i] if i < len(pool) else f"x{i}" for i in rng.permutation(max(s, 12))[:s]]
    return labels, scores, sizes, docids


@pytest.mark.parametrize("conv", CONVENTION_NAMES)
def test_kernels_match_naive_random(conv: str) -> None:
    rng = np.random.default_rng(sum(map(ord, conv)))
    for trial in range(12):
        with_docids = conv == "trec" and trial % 2 == 0
        for m in MEASURES:
            if not _supported(conv, m):
                continue
            meas = Measure.parse(m)
            max_label = 2 if meas.top == 2 and conv != "letor3" and conv != "letor4" else 4
            labels, scores, sizes, docids = random_case(rng, max_label, with_docids)
            off = np.concatenate([[0], np.cumsum(sizes)])
            res = evaluate(labels, scores, off, m, conv, docids=docids)
            vals, mean = evaluate_naive(meas.name, meas.cutoff, meas.top, labels.tolist(),
                                        scores.tolist(), sizes, conv, docids, meas.gain, meas.empty)
            got = res.per_query[m]
            np.testing.assert_array_equal(np.isnan(got), np.isnan(vals), err_msg=f"{conv} {m}")
            np.testing.assert_allclose(got, vals, rtol=0, atol=1e-12, err_msg=f"{conv} {m}")
            assert res.mean[m] == pytest.approx(mean, abs=1e-12)
            fast = mean_metric(labels, scores, off, m, conv, docids=docids)
            assert fast == pytest.approx(mean, abs=1e-12)


def test_fixed_case_all_conventions() -> None:
    labels = [2, 0, 1, 3, 0, 1, 0, 4, 2, 1]
    scores = [0.5, 0.5, 0.2, 0.9, -1.0, 0.5, 0.5, 0.0, 2.0, 2.0]
    sizes = [4, 1, 5]
    off = np.concatenate([[0], np.cumsum(sizes)])
    for conv in CONVENTION_NAMES:
        for m in ["ndcg@1", "ndcg@5", "err", "p@2", "map", "meanndcg", "dcg@3"]:
            meas = Measure.parse(m)
            res = evaluate(np.array(labels), np.array(scores), off, m, conv)
            vals, mean = evaluate_naive(meas.name, meas.cutoff, meas.top, labels, scores,
                                        sizes, conv, None, meas.gain, meas.empty)
            np.testing.assert_allclose(res.per_query[m], vals, atol=1e-12)
            assert res.mean[m] == pytest.approx(mean, abs=1e-12)


# ----------------------------------------------------------------------------- properties
MEANINGFUL = {"letor3": 2, "letor4": 2, "mslr": 4, "yahoo": 4, "ranklib": 4, "trec": 4,
              "lightgbm": 4, "xgboost": 4, "sklearn": 4, "ranx": 4}


@st.composite
def queries(draw, max_label: int = 4):
    sizes = draw(st.lists(st.integers(1, 25), min_size=1, max_size=5))
    n = sum(sizes)
    labels = draw(st.lists(st.integers(0, max_label), min_size=n, max_size=n))
    scores = draw(st.lists(st.floats(-1e6, 1e6, allow_nan=False, width=32), min_size=n,
                           max_size=n))
    return np.array(labels), np.array(scores, dtype=np.float64), sizes


@settings(max_examples=60, deadline=None)
@given(data=queries(), conv=st.sampled_from(CONVENTION_NAMES), k=st.integers(1, 10))
def test_ndcg_in_unit_interval(data, conv, k) -> None:
    labels, scores, sizes = data
    labels = np.minimum(labels, MEANINGFUL[conv])
    off = np.concatenate([[0], np.cumsum(sizes)])
    res = evaluate(labels, scores, off, [f"ndcg@{k}", "meanndcg", "err", f"p@{k}", "map"], conv)
    for key, vals in res.per_query.items():
        v = vals[~np.isnan(vals)]
        assert np.all(v >= -1e-12) and np.all(v <= 1 + 1e-12), key


@settings(max_examples=60, deadline=None)
@given(data=queries(), conv=st.sampled_from(CONVENTION_NAMES), k=st.integers(1, 10))
def test_ideal_order_scores_one(data, conv, k) -> None:
    labels, _, sizes = data
    labels = np.minimum(labels, MEANINGFUL[conv])
    off = np.concatenate([[0], np.cumsum(sizes)])
    res = evaluate(labels, labels.astype(np.float64), off, [f"ndcg@{k}", "meanndcg"], conv)
    for q, size in enumerate(sizes):
        lab = labels[off[q]:off[q + 1]]
        has_rel = bool(np.any((lab > 0) & (lab <= MEANINGFUL[conv])))
        v = res.per_query[f"ndcg@{k}"][q]
        if size < k and conv in ("letor3", "letor4", "mslr"):
            assert math.isnan(v) if conv == "letor3" else v == 0.0
        elif has_rel:
            assert v == pytest.approx(1.0, abs=1e-12)
            assert res.per_query["meanndcg"][q] == pytest.approx(1.0, abs=1e-12)
        else:
            assert v == (1.0 if conv in ("yahoo", "lightgbm", "xgboost") else 0.0)


def _dense_rank(x: np.ndarray) -> np.ndarray:
    return np.unique(x, return_inverse=True)[1].astype(np.float64).reshape(-1)


@settings(max_examples=60, deadline=None)
@given(data=queries(), conv=st.sampled_from(CONVENTION_NAMES))
def test_invariant_under_increasing_transforms(data, conv) -> None:
    labels, scores, sizes = data  # scores are float32-representable: no rounding ties
    off = np.concatenate([[0], np.cumsum(sizes)])
    ms = ["ndcg@3", "ndcg@10", "err", "p@5", "map", "meanndcg"]
    docids = [f"d{i}" for i in range(len(labels))]
    base = evaluate(labels, scores, off, ms, conv, docids=docids)
    for transformed in (_dense_rank(scores), 2.0 * scores, _dense_rank(scores) * 0.5 - 7.0):
        other = evaluate(labels, transformed, off, ms, conv, docids=docids)
        for m in ms:
            np.testing.assert_array_equal(base.per_query[m], other.per_query[m])


def test_trec_not_invariant_when_float32_rounding_ties() -> None:
    labels, off = np.array([0, 1]), np.array([0, 2])
    scores = np.array([1.0 + 2e-9, 1.0])  # a float32 tie: docid "d1" > "d0" ranks label 1 first
    docids = ["d0", "d1"]
    tied = evaluate(labels, scores, off, "ndcg@1", "trec", docids=docids)
    spread = evaluate(labels, _dense_rank(scores), off, "ndcg@1", "trec", docids=docids)
    assert tied.per_query["ndcg@1"][0] == 1.0
    assert spread.per_query["ndcg@1"][0] == 0.0
