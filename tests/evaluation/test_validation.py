"""Bad input raises EvaluationInputError naming the query; results carry warnings and JSON."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tunemix.core.evaluation import EvaluationInputError, evaluate, mean_metric

OFF = np.array([0, 2, 4])
QIDS = ["10", "20"]


def _ev(labels, scores, off=OFF, conv="yahoo", **kw):
    return evaluate(np.asarray(labels), np.asarray(scores), off, "ndcg@2", conv, **kw)


def test_is_value_error() -> None:
    assert issubclass(EvaluationInputError, ValueError)


def test_negative_label_names_qid_or_index() -> None:
    with pytest.raises(EvaluationInputError, match=r"query '20'.*negative label -1"):
        _ev([1, 0, -1, 0], [1.0, 2, 3, 4], qids=QIDS)
    with pytest.raises(EvaluationInputError, match=r"query 1 \(0-based index\)"):
        _ev([1, 0, -1, 0], [1.0, 2, 3, 4])


def test_non_integer_label() -> None:
    with pytest.raises(EvaluationInputError, match=r"query '10'.*1.5.*not an integer"):
        _ev([1.5, 0, 1, 0], [1.0, 2, 3, 4], qids=QIDS)
    with pytest.raises(EvaluationInputError, match="integers"):
        _ev(["a", "b", "c", "d"], [1.0, 2, 3, 4])
    # integral floats are accepted
    _ev([1.0, 0.0, 2.0, 0.0], [1.0, 2, 3, 4])


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_scores(bad: float) -> None:
    with pytest.raises(EvaluationInputError, match=r"query '20'.*not finite"):
        _ev([1, 0, 1, 0], [1.0, 2, bad, 4], qids=QIDS)
    with pytest.raises(EvaluationInputError, match="not finite"):
        mean_metric(np.array([1, 0, 1, 0]), np.array([1.0, 2, bad, 4]), OFF, "ndcg@2")


def test_empty_query() -> None:
    with pytest.raises(EvaluationInputError, match=r"query 'b'.*empty"):
        evaluate(np.array([1, 0, 1]), np.ones(3), np.array([0, 2, 2, 3]), "ndcg@1",
                 qids=["a", "b", "c"])
    with pytest.raises(EvaluationInputError, match="empty"):
        mean_metric(np.array([1, 0, 1]), np.ones(3), np.array([0, 2, 2, 3]), "ndcg@1",
                    validate=False)


def test_length_mismatch() -> None:
    with pytest.raises(EvaluationInputError, match=r"query '20'.*differ in length"):
        _ev([1, 0, 1, 0], [1.0, 2, 3], qids=QIDS)
    with pytest.raises(EvaluationInputError, match="differ in length"):
        _ev([1, 0, 1, 0], [1.0, 2, 3, 4, 5])
    with pytest.raises(EvaluationInputError, match=r"query_offsets\[-1\] = 4"):
        _ev([1, 0, 1], [1.0, 2, 3])


def test_bad_offsets_and_qids() -> None:
    with pytest.raises(EvaluationInputError, match="non-decreasing"):
        _ev([1, 0, 1, 0], [1.0, 2, 3, 4], off=np.array([0, 3, 2, 4]))
    with pytest.raises(EvaluationInputError, match=r"query_offsets\[0\]"):
        _ev([1, 0, 1, 0], [1.0, 2, 3, 4], off=np.array([1, 2, 4]))
    with pytest.raises(EvaluationInputError, match="qids"):
        _ev([1, 0, 1, 0], [1.0, 2, 3, 4], qids=["1"])
    with pytest.raises(EvaluationInputError, match="docids"):
        _ev([1, 0, 1, 0], [1.0, 2, 3, 4], conv="trec", docids=["a"])


def test_result_to_dict_is_json_with_nulls() -> None:
    res = evaluate(np.array([1, 0, 1, 0, 0]), np.arange(5.0), np.array([0, 2, 5]),
                   ["ndcg@3", "map"], "letor3", qids=["q1", "q2"])
    d = json.loads(json.dumps(res.to_dict()))
    assert d["per_query"]["ndcg@3"]["q1"] is None
    assert d["per_query"]["map"]["q1"] == 0.5
    assert d["mean"]["map"] == pytest.approx((0.5 + 1 / 3) / 2)
    assert d["derived"] == {"ndcg@3": False, "map": False}
    assert res.measures == ["ndcg@3", "map"]
    assert list(res.qids) == ["q1", "q2"]


def test_duplicate_measures_collapse() -> None:
    res = evaluate(np.array([1, 0]), np.arange(2.0), np.array([0, 2]), "ndcg@1,NDCG@1", "yahoo")
    assert list(res.per_query) == ["ndcg@1"]


def test_mean_metric_matches_evaluate() -> None:
    rng = np.random.default_rng(3)
    labels = rng.integers(0, 3, size=300)
    scores = rng.normal(size=300)
    off = np.arange(0, 301, 20)
    for conv in ("letor3", "yahoo", "trec"):
        res = evaluate(labels, scores, off, "ndcg@10", conv)
        assert mean_metric(labels, scores, off, "ndcg@10", conv) == res.mean["ndcg@10"]
        assert mean_metric(labels, scores, off, "ndcg@10", conv, validate=False) == \
            res.mean["ndcg@10"]
