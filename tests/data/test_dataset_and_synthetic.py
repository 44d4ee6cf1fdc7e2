from __future__ import annotations

import numpy as np
import pytest

from tunemix.core.data.dataset import RankingData, offsets_from_sizes
from tunemix.train.data.splits import split_by_query
from tunemix.train.data.synthetic import make_synthetic, make_synthetic_splits


def test_offsets_from_sizes() -> None:
    assert offsets_from_sizes([2, 3, 1]).tolist() == [0, 2, 5, 6]
    with pytest.raises(ValueError):
        offsets_from_sizes([1, -1])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"labels": [0, 1]}, "labels must have shape"),
        ({"labels": [0, -1, 2]}, "non-negative"),
        ({"labels": [0.5, 1, 2]}, "integers"),
        ({"query_offsets": [0, 2]}, "must equal the number of rows"),
        ({"query_offsets": [1, 3]}, r"\[0\] must be 0"),
        ({"query_offsets": [0, 2, 1, 3]}, "non-decreasing"),
        ({"features": [[0.0], [np.inf], [1.0]]}, r"infinity \(row 1\)"),
    ],
)
def test_ranking_data_validation(kwargs: dict, message: str) -> None:
    base = {"features": np.zeros((3, 1)), "labels": [0, 1, 2], "query_offsets": [0, 1, 3]}
    base.update(kwargs)
    nq = len(base["query_offsets"]) - 1
    with pytest.raises(ValueError, match=message):
        RankingData(qids=np.arange(max(nq, 0)).astype(str), **base)  # type: ignore[arg-type]


def test_ranking_data_keeps_missing_values() -> None:
    data = RankingData(features=np.array([[0.0], [np.nan], [1.0]]), labels=[0, 1, 2], query_offsets=[0, 1, 3],
                       qids=np.array(["a", "b"]))
    assert np.isnan(data.features[1, 0]) and data.features.dtype == np.float32


def test_subset_queries_keeps_groups() -> None:
    data = make_synthetic(n_queries=6, docs_per_query=(1, 5), n_features=3, seed=2)
    sub = data.subset_queries([4, 1])
    assert sub.qids.tolist() == [data.qids[4], data.qids[1]]
    s4, e4 = data.query_offsets[4], data.query_offsets[5]
    np.testing.assert_array_equal(sub.features[: e4 - s4], data.features[s4:e4])


def test_synthetic_is_deterministic_and_graded() -> None:
    a = make_synthetic_splits(seed=7)
    b = make_synthetic_splits(seed=7)
    c = make_synthetic_splits(seed=8)
    np.testing.assert_array_equal(a["train"].features, b["train"].features)
    assert not np.array_equal(a["train"].features, c["train"].features)
    counts = np.bincount(a["train"].labels, minlength=5)
    assert counts.shape == (5,) and np.all(counts > 0)
    assert np.all(np.diff(counts) < 0)  # each level rarer than the one below
    # qids do not collide across splits
    assert not set(a["train"].qids) & set(a["test"].qids)


def test_synthetic_labels_are_learnable() -> None:
    """The label is a function of the latent features: a linear fit on the query-standardised
    features must beat chance clearly (checks the generator is not pure noise)."""
    from tunemix.core.data.normalization import standardise_by_query

    d = make_synthetic(n_queries=200, n_features=10, seed=4)
    z = standardise_by_query(d.features, d.query_offsets)
    coef, *_ = np.linalg.lstsq(np.c_[z, np.ones(d.n_docs)], d.labels, rcond=None)
    pred = np.c_[z, np.ones(d.n_docs)] @ coef
    assert np.corrcoef(pred, d.labels)[0, 1] > 0.3


def test_split_by_query_is_query_disjoint() -> None:
    data = make_synthetic(n_queries=50, docs_per_query=3, n_features=2, seed=0)
    fit, cal = split_by_query(data, fraction=0.8, seed=1)
    assert fit.n_queries == 40 and cal.n_queries == 10
    assert not set(fit.qids) & set(cal.qids)
    assert fit.n_docs + cal.n_docs == data.n_docs
    with pytest.raises(ValueError):
        split_by_query(data.subset_queries([0]))


def test_query_slices_share_the_arrays_and_equal_the_copies() -> None:
    """The trainer's parts are query slices of one reordered copy of the training set: they hold
    what ``split_by_query``'s copies hold and share that copy's memory."""
    from tunemix.train.data.splits import query_split

    data = make_synthetic(n_queries=30, docs_per_query=(2, 9), n_features=3, seed=2)
    first, second = query_split(data.n_queries, fraction=0.7, seed=5)
    whole = data.subset_queries(np.concatenate([first, second]))
    fit, cal = whole.query_slice(0, first.size), whole.query_slice(first.size, whole.n_queries)
    fit_copy, cal_copy = split_by_query(data, fraction=0.7, seed=5)
    for part, copy in ((fit, fit_copy), (cal, cal_copy)):
        np.testing.assert_array_equal(part.features, copy.features)
        np.testing.assert_array_equal(part.labels, copy.labels)
        np.testing.assert_array_equal(part.query_offsets, copy.query_offsets)
        np.testing.assert_array_equal(part.qids, copy.qids)
        assert np.shares_memory(part.features, whole.features)
    with pytest.raises(ValueError, match="out of range"):
        whole.query_slice(3, whole.n_queries + 1)
