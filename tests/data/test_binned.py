"""The binning stage (tunemix.train.data.binned) and the learners that read its codes."""

from __future__ import annotations

import numpy as np
import pytest

from tunemix.core.data.normalization import apply_view
from tunemix.core.scoring.forest import score_forest
from tunemix.train.data.binned import MAX_SHARED_BINS, bin_view, fit_view_bins, view_in_chunks
from tunemix.train.data.synthetic import make_synthetic_splits
from tunemix.train.learners.lightgbm_data import code_sample_rows, code_threshold


@pytest.fixture(scope="module")
def sets():
    out = make_synthetic_splits(n_queries={"train": 60, "vali": 15}, docs_per_query=(20, 90), n_features=12,
                                n_levels=5, noise=0.3, seed=3)
    tr = out["train"]
    tr.features[:, 3] = np.round(tr.features[:, 3])  # a feature of few distinct values
    tr.features[:, 5] = 1.5  # a constant one
    return out


@pytest.mark.parametrize("view", ["raw", "raw+std", "raw+white"])
def test_codes_in_chunks_equal_the_codes_of_the_whole_view(sets, view):
    """Chunks of whole queries (one query bigger than a chunk) give the codes of the view computed
    at once; the float view in chunks is apply_view to the last bit."""
    tr = sets["train"]
    full = apply_view(tr.features, tr.query_offsets, view)
    b = bin_view(tr.features, tr.query_offsets, view, chunk_documents=50)
    assert b.codes.dtype == np.uint8 and b.codes.shape == (full.shape[1], tr.n_docs)
    np.testing.assert_array_equal(b.codes, b.bins.transform_columns(full))
    assert int(b.bins.n_bins.max()) <= MAX_SHARED_BINS and int(b.bins.n_bins[5]) == 1
    np.testing.assert_array_equal(view_in_chunks(tr.features, tr.query_offsets, view, chunk_documents=50), full)
    va = sets["vali"]
    bv = bin_view(va.features, va.query_offsets, view, bins=b.bins)
    assert bv.bins is b.bins
    np.testing.assert_array_equal(bv.codes, b.bins.transform_columns(apply_view(va.features, va.query_offsets, view)))
    part = b.rows(10, 30)
    np.testing.assert_array_equal(part.contiguous_codes(), b.codes[:, 10:30])
    with pytest.raises(ValueError, match="out of range"):
        b.rows(5, tr.n_docs + 1)
    with pytest.raises(ValueError, match="columns"):
        bin_view(va.features[:, :6], va.query_offsets, view, bins=b.bins)


def test_edges_on_a_sample_of_whole_queries(sets):
    """Above ``sample_documents`` the edges come from the view of whole sampled queries: the
    standardised half of a sampled query is its own, not a slice of a bigger computation."""
    tr = sets["train"]
    bins = fit_view_bins(tr.features, tr.query_offsets, "raw+std", sample_documents=500, seed=1)
    assert bins.n_features == 24 and int(bins.n_bins.max()) <= MAX_SHARED_BINS
    full = apply_view(tr.features, tr.query_offsets, "raw+std")
    finite = bins.edges[np.isfinite(bins.edges)]
    assert np.isin(finite, full).all()  # every edge is a value of the view


def test_code_thresholds():
    from tunemix.train.data.binning import fit_bins

    x = np.array([[0.0], [1.0], [2.0], [3.0]], dtype=np.float32)
    bins = fit_bins(x, 255)  # one bin per value: codes 0..3, edges 1, 2, 3
    assert code_threshold(bins, 0, 1e-35) == np.float32(1.0)  # code <= 0: x < 1
    assert code_threshold(bins, 0, 1.5) == np.float32(2.0)
    assert code_threshold(bins, 0, 3.5) == np.inf  # every code left
    assert code_threshold(bins, 0, -0.5) == -np.inf  # no code left
    assert code_sample_rows(1_000) == 1_000 and code_sample_rows(300_000) == 60_000
    assert code_sample_rows(10**6) == 100_000 and code_sample_rows(100_000) == 50_000


@pytest.mark.parametrize("view", ["raw", "raw+std"])
def test_lightgbm_members_on_codes_score_real_features_exactly(sets, view):
    """LambdaMART and McRank trained on the codes, stopped early on the validation codes: the
    converted forest on real features equals LightGBM's own scores of their codes (the slow twin)."""
    from tunemix.train.learners.lambdamart import LambdaMART
    from tunemix.train.learners.mcrank import McRank

    tr, va = sets["train"], sets["vali"]
    b = bin_view(tr.features, tr.query_offsets, view)
    bv = bin_view(va.features, va.query_offsets, view, bins=b.bins)
    xv = apply_view(va.features, va.query_offsets, view)
    lm = LambdaMART(n_leaves=7, n_iterations=60, min_data_in_leaf=5).fit(
        b, tr.labels, tr.query_offsets, eval_set=(bv, va.labels, va.query_offsets), early_stopping_rounds=10)
    ours = score_forest(lm.to_forest(), xv)[:, -1, 0]
    np.testing.assert_allclose(ours, lm.decision_function(xv, num_iteration=lm.best_iteration_)[:, 0],
                               rtol=0, atol=1e-12)
    mc = McRank(n_leaves=7, n_iterations=40, min_data_in_leaf=5).fit(b, tr.labels, eval_set=(bv, va.labels),
                                                                    early_stopping_rounds=10)
    np.testing.assert_allclose(score_forest(mc.to_forest(), xv)[:, -1, :],
                               mc.decision_function(xv, num_iteration=mc.best_iteration_), rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match="same bins"):
        LambdaMART(n_iterations=5).fit(b, tr.labels, tr.query_offsets,
                                       eval_set=(xv, va.labels, va.query_offsets))


def test_adaboost_on_codes_is_adaboost_on_the_same_bins(sets):
    """AdaBoost.MH on the shared codes is the model it fits on the floats with the same bins (up to
    200,000 documents both bin every document): the same trees, the same scores."""
    from tunemix.train.learners.adaboost_mh import AdaBoostMH

    tr = sets["train"]
    x = apply_view(tr.features, tr.query_offsets, "raw+std")
    b = bin_view(tr.features, tr.query_offsets, "raw+std")
    own = AdaBoostMH(base="tree", n_leaves=4, n_iterations=15, n_bins=MAX_SHARED_BINS).fit(x, tr.labels)
    shared = AdaBoostMH(base="tree", n_leaves=4, n_iterations=15).fit(b, tr.labels)
    np.testing.assert_array_equal(own.bins_.edges, shared.bins_.edges)
    np.testing.assert_array_equal(own.decision_function(x), shared.decision_function(x))


def test_codes_of_reordered_queries_without_a_float_copy(sets):
    """``queries=``: the codes of a reordering of the queries, chunk by chunk from the original
    rows, equal the codes of the reordered copy."""
    tr = sets["train"]
    order = np.random.default_rng(0).permutation(tr.n_queries)[:45]
    copy = tr.subset_queries(order)
    b = bin_view(tr.features, tr.query_offsets, "raw+std", queries=order, chunk_documents=70)
    np.testing.assert_array_equal(
        b.codes, b.bins.transform_columns(apply_view(copy.features, copy.query_offsets, "raw+std")))


def test_runs_of_one_view_share_its_lightgbm_datasets(sets):
    """Inside ``sharing_datasets`` a LambdaMART and a McRank run on the same codes train and stop
    early on one training and one validation Dataset (built once each), and their models are
    exactly those trained on Datasets of their own; other labels get a Dataset of their own; a
    ranking run does not take a Dataset built without query sizes; closed, nothing is shared."""
    import threading

    from tunemix.train.learners import lightgbm_data
    from tunemix.train.learners.lambdamart import LambdaMART
    from tunemix.train.learners.mcrank import McRank

    tr, va = sets["train"], sets["vali"]
    b = bin_view(tr.features, tr.query_offsets, "raw")
    bv = bin_view(va.features, va.query_offsets, "raw", bins=b.bins)
    xv = apply_view(va.features, va.query_offsets, "raw")
    sizes, vsizes = np.diff(tr.query_offsets), np.diff(va.query_offsets)

    def fit_both():
        lm = LambdaMART(n_leaves=7, n_iterations=40, min_data_in_leaf=5, seed=1).fit(
            b, tr.labels, tr.query_offsets, eval_set=(bv, va.labels, va.query_offsets), early_stopping_rounds=10)
        mc = McRank(n_leaves=7, n_iterations=30, min_data_in_leaf=5, seed=2).fit(
            b, tr.labels, eval_set=(bv, va.labels), early_stopping_rounds=10, group=sizes, eval_group=vsizes)
        return lm, mc

    built = []
    original = lightgbm_data._build_code_dataset

    def counting(*args, **kwargs):
        built.append(kwargs.get("reference") is None)
        return original(*args, **kwargs)

    lightgbm_data._build_code_dataset = counting
    try:
        own_lm, own_mc = fit_both()
        assert built == [True, False, True, False]  # outside: a training and a validation Dataset per run
        built.clear()
        with lightgbm_data.sharing_datasets(seed=0):
            results: list = []
            threads = [threading.Thread(target=lambda: results.append(fit_both())) for _ in range(2)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert sorted(built) == [False, True]  # four runs on two threads: one Dataset of each kind
            first = lightgbm_data.make_code_dataset(b, tr.labels, {}, group=sizes)
            assert lightgbm_data.make_code_dataset(b, tr.labels, {}) is first  # a run without query sizes
            other = lightgbm_data.make_code_dataset(b, (tr.labels > 0).astype(np.int64), {}, group=sizes)
            assert other is not first
            built.clear()
        with lightgbm_data.sharing_datasets(seed=0):  # reopened: built anew
            lightgbm_data.make_code_dataset(b, tr.labels, {})
            assert built == [True]
            assert lightgbm_data.make_code_dataset(b, tr.labels, {}, group=sizes) is not None
            assert built == [True, True]  # the first had no query sizes: a ranking run builds its own
    finally:
        lightgbm_data._build_code_dataset = original
    assert len(results) == 2
    for lm, mc in results:
        np.testing.assert_array_equal(score_forest(lm.to_forest(), xv), score_forest(own_lm.to_forest(), xv))
        np.testing.assert_array_equal(score_forest(mc.to_forest(), xv), score_forest(own_mc.to_forest(), xv))
        assert lm.best_iteration_ == own_lm.best_iteration_ and mc.best_iteration_ == own_mc.best_iteration_
