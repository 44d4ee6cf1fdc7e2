"""FlatForest and score_forest: a slow per-document walk twin, round trips, bad arrays rejected."""

from __future__ import annotations

import numpy as np
import pytest

from tunemix.core.scoring.forest import FlatForest, concatenate, score_forest

from . import naive


def random_forest(seed: int, n_base: int = 25, d: int = 6, K: int = 3, max_nodes: int = 7,
                  node_counts: list[int] | None = None, missing_right: float = 0.0) -> FlatForest:
    """Random trees (grown by splitting random leaves, nodes in creation order) of up to
    ``max_nodes`` nodes (or of a size drawn from ``node_counts``), stumps, constants and products
    (including a product with no term); a share ``missing_right`` of the nodes sends NaN right."""
    rng = np.random.default_rng(seed)
    kinds, ns, ls = [], [0], [0]
    feat, thr, left, right, leaves = [], [], [], [], []
    for _ in range(n_base):
        r = rng.random()
        if r < 0.6:  # tree with 1..7 nodes (or a constant with none)
            n_nodes = int(rng.integers(0, max_nodes + 1)) if node_counts is None else int(rng.choice(node_counts))
            if n_nodes == 0:
                kinds.append(0)
                leaves.append(rng.normal(size=K))
            else:
                lft, rgt = [-1], [-2]
                open_leaves = [(0, 0), (0, 1)]  # (node, side) pointing at a leaf
                n_leaves = 2
                for nn in range(1, n_nodes):
                    node, side = open_leaves.pop(int(rng.integers(len(open_leaves))))
                    old = (lft if side == 0 else rgt)[node]
                    (lft if side == 0 else rgt)[node] = nn
                    lft.append(old)
                    rgt.append(-n_leaves - 1)
                    n_leaves += 1
                    open_leaves += [(nn, 0), (nn, 1)]
                kinds.append(0)
                left += lft
                right += rgt
                feat += rng.integers(0, d, n_nodes).tolist()
                thr += rng.normal(size=n_nodes).tolist()
                leaves += list(rng.normal(size=(n_nodes + 1, K)))
        else:  # product with 0..4 terms
            m = int(rng.integers(0, 5))
            kinds.append(1)
            feat += rng.integers(0, d, m).tolist()
            thr += rng.normal(size=m).tolist()
            left += [-1] * m
            right += [-1] * m
            leaves.append(rng.normal(size=K))
        ns.append(len(feat))
        ls.append(len(leaves))
    arrays = {
        "base_kind": np.array(kinds), "base_node_start": np.array(ns),
        "base_leaf_start": np.array(ls), "node_feature": np.array(feat, dtype=np.int64),
        "node_threshold": np.array(thr), "node_left": np.array(left, dtype=np.int64),
        "node_right": np.array(right, dtype=np.int64), "leaf_values": np.array(leaves),
        "n_features": np.array(d),
    }
    if missing_right:
        arrays["node_missing_right"] = (rng.random(len(feat)) < missing_right).astype(np.int8)
    return FlatForest.from_arrays(arrays)


def stump_arrays() -> dict[str, np.ndarray]:
    return {
        "base_kind": np.array([0], np.int8), "base_node_start": np.array([0, 1]),
        "base_leaf_start": np.array([0, 2]), "node_feature": np.array([2], np.int32),
        "node_threshold": np.array([0.5], np.float32), "node_left": np.array([-1], np.int32),
        "node_right": np.array([-2], np.int32),
        "leaf_values": np.array([[-0.3, 0.3], [0.3, -0.3]]), "n_features": np.array(3),
    }


def test_docstring_stump_by_hand() -> None:
    f = FlatForest.from_arrays(stump_arrays())
    X = np.array([[0, 0, 0.4], [9, 9, 0.5], [0, 0, 0.6]], dtype=np.float32)
    out = score_forest(f, X, [0, 1])
    np.testing.assert_array_equal(out[:, 0], 0.0)
    np.testing.assert_array_equal(out[:, 1], [[-0.3, 0.3], [0.3, -0.3], [0.3, -0.3]])


@pytest.mark.parametrize("seed", range(6))
def test_score_forest_matches_slow_walk(seed: int) -> None:
    forest = random_forest(seed)
    rng = np.random.default_rng(100 + seed)
    X = rng.normal(size=(150, 6)).astype(np.float32)  # 150 > one document block of 64
    X[:5] = forest.node_threshold[:5].mean()  # values equal to thresholds
    X[5, :] = forest.node_threshold[0]
    ck = [0, 1, 7, 7, forest.n_base]
    got = score_forest(forest, X, ck)
    want = naive.score_forest(forest.to_arrays(), X, ck)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(score_forest(forest, X)[:, 0], want[:, -1], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("seed", range(4))
def test_missing_values_go_each_nodes_way_on_every_kernel_path(seed: int) -> None:
    """NaN goes the way ``node_missing_right`` says, through tables, masks, walks (compacted too)
    and products alike: the kernel against the slow walk, and the scores of rows without NaN the
    same bits as the forest with every node sending NaN left."""
    from tunemix.core.scoring import packed

    forest = random_forest(seed, n_base=120, node_counts=[0, 1, 2, 3, 5, 7, 8, 12, 20, 31, 40],
                           missing_right=0.5)
    p = forest.packed
    for path in (p.base_small >= 0, p.base_route == packed.ROUTE_MASK, forest.base_kind == 1):
        assert np.any(path)
    assert forest.missing_columns is not None
    rng = np.random.default_rng(300 + seed)
    X = rng.normal(size=(300, 6)).astype(np.float32)
    X[rng.random(X.shape) < 0.25] = np.nan
    X[5] = np.nan  # a row with every value missing
    X[6] = forest.node_threshold[:6]
    ck = [0, 5, 40, forest.n_base]
    got = score_forest(forest, X, ck)
    np.testing.assert_allclose(got, naive.score_forest(forest.to_arrays(), X, ck), rtol=1e-12, atol=1e-12)
    left = forest.to_arrays()
    left["node_missing_right"][:] = 0
    all_left = FlatForest.from_arrays(left)
    np.testing.assert_allclose(score_forest(all_left, X, ck), naive.score_forest(left, X, ck), rtol=1e-12, atol=1e-12)
    assert not np.array_equal(got, score_forest(all_left, X, ck))
    clean = ~np.isnan(X).any(axis=1)
    np.testing.assert_array_equal(score_forest(forest, X[clean], ck), score_forest(all_left, X[clean], ck))
    np.testing.assert_array_equal(got[clean], score_forest(forest, X[clean], ck))


def test_missing_direction_stored_and_checked() -> None:
    """``node_missing_right`` survives a round trip; a forest stored without it sends NaN left, as
    ``x >= t`` does; other values than 0 and 1 are refused."""
    arrays = stump_arrays()
    X = np.array([[0, 0, np.nan], [0, 0, 0.7]], dtype=np.float32)
    old = FlatForest.from_arrays(arrays)
    np.testing.assert_array_equal(old.node_missing_right, [0])
    np.testing.assert_array_equal(score_forest(old, X)[0, 0], [-0.3, 0.3])
    arrays["node_missing_right"] = np.array([1], np.int8)
    f = FlatForest.from_arrays(arrays)
    np.testing.assert_array_equal(score_forest(f, X)[:, 0], [[0.3, -0.3], [0.3, -0.3]])
    np.testing.assert_array_equal(FlatForest.from_arrays(f.to_arrays()).node_missing_right, [1])
    arrays["node_missing_right"] = np.array([2], np.int8)
    with pytest.raises(ValueError, match=r"node_missing_right\[0\] = 2"):
        FlatForest.from_arrays(arrays)


def slow_single_lanes(forest: FlatForest) -> np.ndarray:
    """Each base's one output column with a non-zero leaf value (0 if none, -1 if several)."""
    lanes = []
    for b in range(forest.n_base):
        rows = forest.leaf_values[forest.base_leaf_start[b]:forest.base_leaf_start[b + 1]]
        cols = [k for k in range(forest.n_outputs) if np.any(rows[:, k] != 0.0)]
        lanes.append(-1 if len(cols) > 1 else (cols[0] if cols else 0))
    return np.array(lanes)


def slow_leaf_sets(forest: FlatForest, b: int) -> dict[int, int]:
    """Tree b's node (relative) -> the bits of the leaves under it, by recursion."""
    ns = int(forest.base_node_start[b])
    sets: dict[int, int] = {}

    def under(c: int) -> int:
        if c < 0:
            return 1 << (-c - 1)
        sets[c] = under(int(forest.node_left[ns + c])) | under(int(forest.node_right[ns + c]))
        return sets[c]

    under(0)
    return sets


def kernel_paths_twin(forest: FlatForest, *, masks: bool, lanes: bool) -> FlatForest:
    """The same forest with the kernel's leaf masks and single-output lanes each on or off."""
    import dataclasses

    twin = FlatForest.from_arrays(forest.to_arrays())
    p = forest.packed
    change: dict = {"_ck_plans": {}}
    if not masks:
        change["base_route"] = forest.base_kind.astype(np.int8)
    if not lanes:
        change["base_lane"] = np.full_like(p.base_lane, -1)
    twin.__dict__["packed"] = dataclasses.replace(p, **change)
    return twin


@pytest.mark.parametrize("seed", range(6))
def test_mask_trees_and_single_lanes_give_the_walks_bits(seed: int) -> None:
    """Trees of up to 32 leaves scored by leaf masks (``PackedNodes.base_route``) and bases whose
    leaves fill one output (LambdaMART and McRank trees in a K-output forest) added on that lane
    only (``base_lane``): the masks and lanes are the slow derivations', the scores the slow
    walk's, and equal to the last bit the scores with either or both off (every tree walked,
    every base on all K lanes). Among them: trees of exactly 32 leaves (a full 32-bit mask) and
    of 33 (walked), -0.0 leaves, all-zero bases, NaN and infinite features and values equal to
    thresholds."""
    from tunemix.core.scoring import packed

    rng = np.random.default_rng(200 + seed)
    K = 4
    base = random_forest(seed, n_base=160, K=K, node_counts=[0, 1, 2, 3, 5, 7, 8, 12, 20, 30, 31, 31, 32, 40])
    arrays = base.to_arrays()
    lv = arrays["leaf_values"].copy()
    ls = arrays["base_leaf_start"]
    for b in range(base.n_base):
        r = rng.random()
        rows = slice(ls[b], ls[b + 1])
        if r < 0.7:  # one lane kept (two for a few bases), the others +0.0 or -0.0
            keep = rng.choice(K, 1 if r < 0.6 else 2, replace=False)
            zeros = np.where(rng.random((ls[b + 1] - ls[b], K)) < 0.5, 0.0, -0.0)
            zeros[:, keep] = lv[rows][:, keep]
            lv[rows] = zeros
        elif r < 0.8:  # no lane at all
            lv[rows] = -0.0
    arrays["leaf_values"] = lv
    forest = FlatForest.from_arrays(arrays)
    p = forest.packed
    np.testing.assert_array_equal(p.base_lane, slow_single_lanes(forest))
    of_leaf = np.repeat(np.maximum(p.base_lane, 0), np.diff(ls))
    np.testing.assert_array_equal(p.leaf_lane, lv[np.arange(lv.shape[0]), of_leaf])
    n_nodes = np.diff(forest.base_node_start)
    masked = p.base_route == packed.ROUTE_MASK
    np.testing.assert_array_equal(masked, (forest.base_kind == 0) & (p.base_small < 0) & (n_nodes <= 31)
                                  & (p.base_depth >= packed.SMALL_MIN_DEPTH))
    for b in np.flatnonzero(masked):
        full = (1 << (int(n_nodes[b]) + 1)) - 1
        ns = int(forest.base_node_start[b])
        sets = slow_leaf_sets(forest, int(b))
        for t in range(int(n_nodes[b])):
            lc, rc = int(forest.node_left[ns + t]), int(forest.node_right[ns + t])
            left = 1 << (-lc - 1) if lc < 0 else sets[lc]
            right = 1 << (-rc - 1) if rc < 0 else sets[rc]
            assert p.mask_keep[ns + t, 0] == full & ~left and p.mask_keep[ns + t, 1] == full & ~right
    one = p.base_lane >= 0
    # every path of the kernel meets single-lane and K-lane bases: tables, masks, walks (compacted
    # too), products; masks of 32 leaves, walks of 33
    walked = (forest.base_kind == 0) & (p.base_small < 0) & ~masked
    for path in (p.base_small >= 0, masked, walked, forest.base_kind == 1):
        assert np.any(one & path) and np.any(~one & path)
    assert np.any(masked & (n_nodes == 31)) and np.any(walked & (n_nodes == 32))
    assert np.any(walked & (p.base_depth > packed.COMPACT_MIN_DEPTH))
    X = rng.normal(size=(300, 6)).astype(np.float32)
    X[:7] = forest.node_threshold[:7, None]  # values equal to thresholds
    X[7::11, 0] = np.nan
    X[8::13, 1] = np.inf
    X[9::17, 2] = -np.inf
    ck = [0, 3, 17, 17, forest.n_base]
    got = score_forest(forest, X, ck)
    np.testing.assert_allclose(got, naive.score_forest(arrays, X, ck), rtol=1e-12, atol=1e-12)
    for masks, lanes in ((False, True), (True, False), (False, False)):
        other = score_forest(kernel_paths_twin(forest, masks=masks, lanes=lanes), X, ck)
        assert np.array_equal(got.view(np.int64), other.view(np.int64)), (masks, lanes)


def test_round_trip_through_npz(tmp_path) -> None:
    forest = random_forest(3)
    path = tmp_path / "forest.npz"
    np.savez(path, **forest.to_arrays())  # type: ignore[arg-type]
    with np.load(path, allow_pickle=False) as z:
        back = FlatForest.from_arrays(dict(z))
    for k, v in forest.to_arrays().items():
        np.testing.assert_array_equal(back.to_arrays()[k], v)
        assert back.to_arrays()[k].dtype == v.dtype
    X = np.random.default_rng(0).normal(size=(40, 6)).astype(np.float32)
    np.testing.assert_array_equal(score_forest(back, X), score_forest(forest, X))


def test_concatenate_scores_are_running_sums() -> None:
    a, b = random_forest(1, n_base=10), random_forest(2, n_base=7)
    ab = concatenate([a, b])
    X = np.random.default_rng(0).normal(size=(70, 6)).astype(np.float32)
    out = score_forest(ab, X, [a.n_base, a.n_base + b.n_base])
    np.testing.assert_allclose(out[:, 0], score_forest(a, X)[:, 0], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(out[:, 1] - out[:, 0], score_forest(b, X)[:, 0], atol=1e-12)
    FlatForest.from_arrays(ab.to_arrays())  # valid
    with pytest.raises(ValueError, match="n_features"):
        concatenate([a, random_forest(2, d=7)])


def test_truncate_and_empty() -> None:
    forest = random_forest(4)
    X = np.random.default_rng(1).normal(size=(20, 6)).astype(np.float32)
    np.testing.assert_allclose(score_forest(forest.truncate(9), X)[:, 0],
                               score_forest(forest, X, [9])[:, 0])
    empty = FlatForest.empty(6, 3)
    np.testing.assert_array_equal(score_forest(empty, X), np.zeros((20, 1, 3)))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"node_feature": np.array([3], np.int32)}, "index out of range: node_feature"),
        ({"node_feature": np.array([-1], np.int32)}, "index out of range"),
        ({"node_right": np.array([-3], np.int32)}, "index out of range: node_right"),
        ({"node_left": np.array([0], np.int32)}, "later node"),
        ({"node_threshold": np.array([0.5, 1.0], np.float32)}, "shape mismatch"),
        ({"base_node_start": np.array([0, 1, 1])}, "shape mismatch"),
        ({"base_leaf_start": np.array([0, 3])}, "base_leaf_start"),
        ({"base_kind": np.array([2], np.int8)}, "base_kind"),
        ({"leaf_values": np.array([[np.nan, 0.3], [0.3, -0.3]])}, "NaN"),
        ({"leaf_values": np.zeros(4)}, "2-D"),
        ({"node_left": np.array([-2], np.int32)}, "exactly one parent"),
        ({"node_feature": np.array([0.5])}, "must be int32"),
    ],
)
def test_bad_arrays_rejected(change: dict, message: str) -> None:
    arrays = {**stump_arrays(), **change}
    with pytest.raises(ValueError, match=message):
        FlatForest.from_arrays(arrays)


def test_missing_array_and_bad_inputs_rejected() -> None:
    arrays = stump_arrays()
    del arrays["leaf_values"]
    with pytest.raises(ValueError, match="missing"):
        FlatForest.from_arrays(arrays)
    f = FlatForest.from_arrays(stump_arrays())
    with pytest.raises(ValueError, match="shape"):
        score_forest(f, np.zeros((2, 2), np.float32))
    with pytest.raises(ValueError, match="checkpoints"):
        score_forest(f, np.zeros((2, 3), np.float32), [2])
    with pytest.raises(ValueError, match="non-decreasing"):
        score_forest(f, np.zeros((2, 3), np.float32), [1, 0])


def test_checkpoint_lists_kept_per_forest_stay_right() -> None:
    """A forest keeps the checkpoint lists it has placed (``PackedNodes.checkpoint_plan``): more
    lists than it keeps, repeated lists, a list changed by its caller after the call and a bad
    list after good ones all give the slow walk's sums or the error."""
    from tunemix.core.scoring.packed import _CK_PLANS_KEPT

    forest = random_forest(5, n_base=30)
    X = np.random.default_rng(1).normal(size=(20, forest.n_features)).astype(np.float32)
    lists = [[c, min(c + 3, 30), 30] for c in range(_CK_PLANS_KEPT + 5)]
    for ck in lists + lists[::-1]:
        np.testing.assert_allclose(score_forest(forest, X, ck), naive.score_forest(forest.to_arrays(), X, ck),
                                   rtol=1e-12, atol=1e-12)
    ck = np.array([2, 4, 8], dtype=np.int64)
    first = score_forest(forest, X, ck)
    ck[0] = 9  # now not non-decreasing: the kept plan must not be the one for [2, 4, 8]
    with pytest.raises(ValueError, match="non-decreasing"):
        score_forest(forest, X, ck)
    np.testing.assert_array_equal(score_forest(forest, X, np.array([2, 4, 8])), first)
    with pytest.raises(ValueError, match="checkpoints"):
        score_forest(forest, X, [0, 31])


def test_cycle_in_tree_rejected() -> None:
    # two nodes where node 1 points back to node 0
    arrays = {
        "base_kind": np.array([0]), "base_node_start": np.array([0, 2]),
        "base_leaf_start": np.array([0, 3]), "node_feature": np.array([0, 0]),
        "node_threshold": np.array([0.0, 1.0]), "node_left": np.array([1, 0]),
        "node_right": np.array([-1, -2]), "leaf_values": np.zeros((3, 2)),
        "n_features": np.array(1),
    }
    with pytest.raises(ValueError, match="later node"):
        FlatForest.from_arrays(arrays)
