"""LightGBM -> FlatForest: the converted forest scores like LightGBM itself (its raw predictions)
and like a slow walk of the model dump with LightGBM's own decision rule; McRank and LambdaMART
snapshots; the missing-value and default-direction rules."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tunemix.core.scoring.forest import score_forest
from tunemix.train.learners.lightgbm_forest import ZERO_THRESHOLD, float32_above, lightgbm_to_forest

lgb = pytest.importorskip("lightgbm")


# ----------------------------------------------------------------------------- slow twin
def _decide(node: dict[str, Any], x: float) -> bool:
    """LightGBM's Tree::NumericalDecision: True = left (x a double)."""
    missing = node.get("missing_type", "None")
    if np.isnan(x) and missing != "NaN":
        x = 0.0
    if (missing == "Zero" and -ZERO_THRESHOLD <= x <= ZERO_THRESHOLD) or (missing == "NaN" and np.isnan(x)):
        return bool(node["default_left"])
    return x <= float(node["threshold"])


def naive_predict(dump: dict[str, Any], X: np.ndarray) -> np.ndarray:
    """Raw scores (n, K) by walking every tree of the dump for every row, LightGBM's way."""
    k = int(dump.get("num_tree_per_iteration", 1))
    out = np.zeros((X.shape[0], k))
    for i, info in enumerate(dump["tree_info"]):
        for r in range(X.shape[0]):
            node = info["tree_structure"]
            while "leaf_value" not in node:
                x = float(X[r, node["split_feature"]])
                node = node["left_child"] if _decide(node, x) else node["right_child"]
            out[r, i % k] += node["leaf_value"]
    return out


def _data(seed: int, n: int = 400, d: int = 5, levels: int = 3) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)).astype(np.float32)
    X[:, 1] = np.round(X[:, 1] * 2) / 2  # ties and values exactly at thresholds
    y = np.clip(np.round(X[:, 0] + 0.5 * X[:, 1] + rng.normal(scale=0.5, size=n) + 1), 0, levels - 1)
    return X, y.astype(np.int64)


# ----------------------------------------------------------------------------- unit cases
def test_float32_above_is_the_next_float32() -> None:
    for t in (0.5, 1e-8, -3.25, 1.0 / 3.0, 0.0, -0.0, 1e300, -1e300):
        f = float32_above(t)
        assert f.dtype == np.float32 and float(f) > t
        with np.errstate(over="ignore"):
            below = np.nextafter(f, np.float32(-np.inf))
        assert float(below) <= t or np.isinf(f)
    assert float(float32_above(1e300)) == np.inf


def _stump(threshold: float, missing: str, default_left: bool) -> dict[str, Any]:
    return {"num_tree_per_iteration": 1, "max_feature_idx": 0, "tree_info": [{"tree_structure": {
        "split_feature": 0, "threshold": threshold, "decision_type": "<=", "missing_type": missing,
        "default_left": default_left, "left_child": {"leaf_value": -1.0}, "right_child": {"leaf_value": 2.0}}}]}


@pytest.mark.parametrize(("threshold", "missing", "default_left"), [
    (0.5, "None", True), (0.5, "NaN", False), (-0.25, "None", False), (0.5, "Zero", True),
    (-0.5, "Zero", False), (1e-30, "Zero", True), (0.1, "NaN", True), (-0.1, "NaN", True), (0.1, "NaN", False),
    (0.0, "None", False), (-1e-30, "None", True)])
def test_hand_made_stumps_match_lightgbm_rule(threshold: float, missing: str, default_left: bool) -> None:
    dump = _stump(threshold, missing, default_left)
    x = np.array([[threshold], [np.nextafter(np.float32(threshold), np.float32(9))], [0.0], [-0.0], [1e-38],
                  [-1.0], [1.0], [np.float32(threshold)], [np.nan]], dtype=np.float32)
    forest = lightgbm_to_forest(dump)
    np.testing.assert_array_equal(score_forest(forest, x)[:, 0, :], naive_predict(dump, x))


@pytest.mark.parametrize(("threshold", "default_left"), [(0.5, False), (-0.5, True), (0.0, False), (1e-36, False),
                                                         (-1e-36, True), (-1e-35, True)])
def test_zero_as_missing_against_its_comparison_is_converted_exactly(threshold: float, default_left: bool) -> None:
    """A zero-as-missing split whose comparison sends the zero region the other way: three nodes,
    LightGBM's rule on both sides of every bound, NaN and the zero region included."""
    dump = _stump(threshold, "Zero", default_left)
    forest = lightgbm_to_forest(dump)
    assert forest.node_feature.shape[0] == 3
    z = np.float32(ZERO_THRESHOLD)
    edges = [threshold, -z, z, 0.0, -0.0, 1e-38, -1e-38, -1.0, 1.0, np.nan]
    x = np.array([[v] for e in edges for v in (np.nextafter(np.float32(e), np.float32(-9)), np.float32(e),
                                              np.nextafter(np.float32(e), np.float32(9)))], dtype=np.float32)
    np.testing.assert_array_equal(score_forest(forest, x)[:, 0, :], naive_predict(dump, x))


def test_categorical_and_linear_trees_are_refused() -> None:
    dump = _stump(0.5, "None", True)
    dump["tree_info"][0]["tree_structure"]["decision_type"] = "=="
    with pytest.raises(ValueError, match="unsupported split"):
        lightgbm_to_forest(dump)
    with pytest.raises(ValueError, match="random-forest"):
        lightgbm_to_forest({**_stump(0.5, "None", True), "average_output": True})


# ----------------------------------------------------------------------------- against LightGBM
@pytest.mark.parametrize("leaves", [2, 7, 31])
@pytest.mark.parametrize("objective", ["multiclass", "binary", "lambdarank"])
def test_converted_forest_equals_lightgbm_and_the_slow_walk(objective: str, leaves: int) -> None:
    X, y = _data(leaves)
    X_train = X.copy()
    X_train[::17, 2] = np.nan  # NaN in training: NaN-missing nodes, finite inputs compare
    params: dict[str, Any] = {"objective": objective, "num_leaves": leaves, "min_data_in_leaf": 3, "verbose": -1,
                              "num_threads": 1, "deterministic": True, "seed": 0, "learning_rate": 0.3}
    if objective == "multiclass":
        params["num_class"] = 3
        target = y
    elif objective == "binary":
        target = (y >= 1).astype(np.float64)
    else:
        target = y
    group = np.full(20, 20) if objective == "lambdarank" else None
    bst = lgb.train(params, lgb.Dataset(X_train, target, group=group), num_boost_round=12)
    forest = lightgbm_to_forest(bst)
    Xt, _ = _data(leaves + 100, n=300)
    Xt[::5, 2] = np.nan  # NaN-missing nodes: their default way
    Xt[1::7, 0] = np.nan  # None-missing nodes: NaN read as 0
    k = forest.n_outputs
    for t in (1, 5, 12):
        ours = score_forest(forest, Xt, [t * k])[:, 0, :]
        ref = np.asarray(bst.predict(Xt, raw_score=True, num_iteration=t)).reshape(Xt.shape[0], -1)
        np.testing.assert_allclose(ours, ref, rtol=0, atol=1e-9)
    np.testing.assert_allclose(score_forest(forest, Xt)[:, 0, :], naive_predict(bst.dump_model(), Xt),
                               rtol=0, atol=1e-12)


def test_mcrank_and_lambdamart_snapshots_equal_lightgbm() -> None:
    from tunemix.train.learners.lambdamart import LambdaMART
    from tunemix.train.learners.mcrank import McRank

    X, y = _data(3, n=600, levels=3)
    Xt, _ = _data(4, n=200)
    for variant in ("multiclass", "ordinal"):
        m = McRank(variant=variant, n_leaves=5, n_iterations=9, checkpoints=[3, 9, 50], min_data_in_leaf=5).fit(X, y)
        assert m.checkpoints_ == [3, 9] and m.n_outputs_ == (3 if variant == "multiclass" else 2)
        forest = m.to_forest()
        assert forest.n_base == 9 * m.n_outputs_
        sums = score_forest(forest, Xt, [t * m.n_outputs_ for t in m.checkpoints_])
        for c, t in enumerate(m.checkpoints_):
            np.testing.assert_allclose(sums[:, c, :], m.decision_function(Xt, num_iteration=t), atol=1e-9, rtol=0)
    offsets = np.arange(0, 601, 20)
    lm = LambdaMART(n_leaves=6, n_iterations=7, checkpoints=[2], min_data_in_leaf=5).fit(X, y, offsets)
    sums = score_forest(lm.to_forest(), Xt, lm.checkpoints_)
    for c, t in enumerate(lm.checkpoints_):
        np.testing.assert_allclose(sums[:, c, :], lm.decision_function(Xt, num_iteration=t), atol=1e-9, rtol=0)


def test_mcrank_stopped_early_with_subsampling_equals_lightgbm_at_its_best_iteration() -> None:
    from tunemix.train.learners.mcrank import McRank

    X, y = _data(5, n=600, levels=3)
    Xv, yv = _data(6, n=300, levels=3)
    m = McRank(n_leaves=7, learning_rate=0.3, n_iterations=200, min_data_in_leaf=5, feature_fraction=0.7,
               bagging_fraction=0.8, seed=3).fit(X, y, eval_set=(Xv, yv), early_stopping_rounds=5)
    assert m.best_iteration_ is not None and m.best_iteration_ == m.n_iterations_ < m.iterations_trained_ < 200
    assert m.stop_reason_ == "early_stopping" and m.best_loss_ is not None and m.best_loss_ > 0
    forest = m.to_forest()
    assert forest.n_base == m.best_iteration_ * 3
    np.testing.assert_allclose(score_forest(forest, Xv)[:, 0, :],
                               m.decision_function(Xv, num_iteration=m.best_iteration_), atol=1e-9, rtol=0)
    again = McRank(n_leaves=7, learning_rate=0.3, n_iterations=200, min_data_in_leaf=5, feature_fraction=0.7,
                   bagging_fraction=0.8, seed=3).fit(X, y, eval_set=(Xv, yv), early_stopping_rounds=5)
    np.testing.assert_array_equal(again.to_forest().leaf_values, forest.leaf_values)  # the draws follow the seed
    with pytest.raises(ValueError, match="multiclass"):
        McRank(variant="ordinal").fit(X, y, eval_set=(Xv, yv))


def test_lambdamart_stopped_early_equals_lightgbm_at_its_best_iteration() -> None:
    """LambdaMART stopped on an eval set's NDCG@10: the kept trees are LightGBM's up to its best
    iteration, whose eval NDCG@10 is the best of the history, and the draws follow the seed."""
    from tunemix.core.evaluation import mean_metric
    from tunemix.train.learners.lambdamart import LambdaMART

    X, y = _data(7, n=800, levels=3)
    Xv, yv = _data(8, n=400, levels=3)
    off, offv = np.arange(0, 801, 20), np.arange(0, 401, 20)
    kw = dict(n_leaves=7, learning_rate=0.3, n_iterations=300, min_data_in_leaf=5, feature_fraction=0.7,
              bagging_fraction=0.8, seed=3)
    m = LambdaMART(**kw).fit(X, y, off, eval_set=(Xv, yv, offv), early_stopping_rounds=5)
    assert m.best_iteration_ is not None and m.best_iteration_ == m.n_iterations_ < m.iterations_trained_ < 300
    assert m.stop_reason_ == "early_stopping"
    forest = m.to_forest()
    assert forest.n_base == m.best_iteration_
    scores = score_forest(forest, Xv)[:, 0, 0]
    np.testing.assert_allclose(scores, m.decision_function(Xv, num_iteration=m.best_iteration_)[:, 0],
                               atol=1e-9, rtol=0)
    # LightGBM's NDCG@10 of the kept model is ours under the yahoo convention, and the best seen
    assert mean_metric(yv, scores, offv, "ndcg@10", "yahoo") == pytest.approx(m.best_score_, abs=1e-9)
    for t in range(1, m.iterations_trained_ + 1):
        at_t = m.decision_function(Xv, num_iteration=t)[:, 0] if t <= m.best_iteration_ else None
        if at_t is not None:
            assert mean_metric(yv, at_t, offv, "ndcg@10", "yahoo") <= m.best_score_ + 1e-12
    again = LambdaMART(**kw).fit(X, y, off, eval_set=(Xv, yv, offv), early_stopping_rounds=5)
    np.testing.assert_array_equal(again.to_forest().leaf_values, forest.leaf_values)



def test_lambdamart_l2_is_lightgbm_lambda_l2() -> None:
    """``lambda_l2`` (the search's L2 axis) is LightGBM's: the converted forest equals a booster
    trained with it; it shrinks the leaf values; a negative one is refused."""
    import lightgbm as lgb

    from tunemix.train.learners.lambdamart import LambdaMART

    X, y = _data(9, n=600, levels=3)
    off = np.arange(0, 601, 20)
    plain = LambdaMART(n_leaves=6, n_iterations=5, min_data_in_leaf=5).fit(X, y, off)
    l2 = LambdaMART(n_leaves=6, n_iterations=5, min_data_in_leaf=5, lambda_l2=50.0).fit(X, y, off)
    params = {"objective": "lambdarank", "num_leaves": 6, "learning_rate": 0.1, "min_data_in_leaf": 5,
              "lambda_l2": 50.0, "deterministic": True, "force_row_wise": True, "verbose": -1, "seed": 0,
              "num_threads": 1, "zero_as_missing": False}
    booster = lgb.train(params, lgb.Dataset(X.astype(np.float32), y, group=np.diff(off)), num_boost_round=5)
    np.testing.assert_allclose(score_forest(l2.to_forest(), X)[:, 0, 0], booster.predict(X.astype(np.float32)),
                               atol=1e-9, rtol=0)
    assert np.abs(l2.to_forest().leaf_values).max() < np.abs(plain.to_forest().leaf_values).max()
    with pytest.raises(ValueError, match="lambda_l2"):
        LambdaMART(lambda_l2=-1.0).fit(X, y, off)

@pytest.mark.shared_data
@pytest.mark.slow
@pytest.mark.parametrize("leaves", [4, 16, 64])
def test_mq2008_fold1_converted_scores_equal_lightgbm_raw_predictions(mq2008_fold1: Any, leaves: int) -> None:
    """The slow twin: McRank (both variants) and LambdaMART on MQ2008 Fold1 train, the converted
    forest against LightGBM's raw predictions on Fold1 test, to 1e-6, at every snapshot."""
    from tunemix.core.data.svmlight import read_svmlight
    from tunemix.train.learners.lambdamart import LambdaMART
    from tunemix.train.learners.mcrank import McRank

    train = read_svmlight(mq2008_fold1 / "train.txt")
    test = read_svmlight(mq2008_fold1 / "test.txt", n_features=train.n_features)
    models: list[Any] = [
        McRank(variant=v, n_leaves=leaves, n_iterations=60, checkpoints=[10, 30]).fit(train.features, train.labels)
        for v in ("multiclass", "ordinal")]
    models.append(LambdaMART(n_leaves=leaves, n_iterations=60, checkpoints=[10, 30]).fit(
        train.features, train.labels, train.query_offsets))
    for m in models:
        per = getattr(m, "n_outputs_", 1)
        sums = score_forest(m.to_forest(), test.features, [t * per for t in m.checkpoints_])
        for c, t in enumerate(m.checkpoints_):
            ref = m.decision_function(test.features, num_iteration=t)
            np.testing.assert_allclose(sums[:, c, :], ref, atol=1e-6, rtol=0)


@pytest.mark.parametrize("missing", ["None", "NaN", "Zero"])
@pytest.mark.parametrize("default_left", [True, False])
@pytest.mark.parametrize("threshold", [-0.5, 1e-35, 0.5, 2.5, 7.0])
def test_stumps_on_codes_follow_lightgbm_on_the_codes(missing: str, default_left: bool, threshold: float) -> None:
    """A split learned on codes (``bins``: LightGBM reads a row's codes, the missing one as NaN):
    the converted forest, on the real features, equals LightGBM's rule on their codes."""
    from tunemix.train.data.binning import fit_bins
    from tunemix.train.learners.lightgbm_capi import codes_as_float

    rng = np.random.default_rng(3)
    X = np.round(rng.normal(size=(200, 1)) * 2).astype(np.float32) / 2
    X[rng.random(200) < 0.2] = np.nan
    bins = fit_bins(X, 8)
    dump = _stump(threshold, missing, default_left)
    forest = lightgbm_to_forest(dump, bins=bins)
    codes = codes_as_float(bins.transform(X))
    np.testing.assert_array_equal(score_forest(forest, X)[:, 0, :], naive_predict(dump, codes))


@pytest.mark.parametrize("learner", ["mcrank", "lambdamart"])
def test_members_on_codes_learn_where_missing_values_go(learner: str) -> None:
    """McRank and LambdaMART trained on the shared codes of data whose relevant documents miss
    feature 0 (LightGBM reads the missing code as NaN and learns its default direction): the
    converted forest equals LightGBM's own prediction on the codes, and ranks the documents that
    miss the feature first, in either orientation of the feature."""
    from tunemix.train.data.binned import bin_view
    from tunemix.train.learners.lambdamart import LambdaMART
    from tunemix.train.learners.mcrank import McRank

    rng = np.random.default_rng(11)
    n = 800
    offsets = np.arange(0, n + 1, 20)
    y = (rng.random(n) < 0.3).astype(np.int64)
    for sign in (1.0, -1.0):
        X = (sign * rng.normal(size=(n, 4))).astype(np.float32)
        X[(y == 1) | (rng.random(n) < 0.05), 0] = np.nan
        X[rng.random((n, 4)) < 0.1] = np.nan
        X[:, 0] = np.where(np.isnan(X[:, 0]), np.nan, sign * np.abs(rng.normal(size=n))).astype(np.float32)
        codes = bin_view(X, offsets, "raw")
        if learner == "mcrank":
            m = McRank(n_leaves=4, n_iterations=20, min_data_in_leaf=5).fit(codes, y)
        else:
            m = LambdaMART(n_leaves=4, n_iterations=20, min_data_in_leaf=5).fit(codes, y, offsets)
        forest = m.to_forest()
        raw = score_forest(forest, X)[:, 0, :]
        np.testing.assert_allclose(raw, m.decision_function(X), atol=1e-9, rtol=0)
        score = raw[:, -1]
        missing = np.isnan(X[:, 0])
        assert score[missing].mean() > score[~missing].mean()
