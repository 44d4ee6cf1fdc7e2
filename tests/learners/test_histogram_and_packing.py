"""The histogram kernel and the packed scoring layout against slow twins (tests/learners/naive.py)."""

from __future__ import annotations

import numpy as np
import pytest

from tunemix.core.scoring import packed, runtime
from tunemix.core.scoring.forest import FlatForest, concatenate, score_forest
from tunemix.core.scoring.packed import DOC_BLOCK, PackedNodes
from tunemix.train.learners.stump_search import ROW_BLOCK, accumulate_histogram, class_lanes

from . import naive
from .test_forest import random_forest, stump_arrays

NO_SIGN = np.zeros(0, dtype=np.int8)
ALL_ROWS = np.zeros(0, dtype=np.int64)


def random_codes(seed: int, n: int, d: int, K: int, n_bins: int = 9):
    rng = np.random.default_rng(seed)
    codes = rng.integers(0, n_bins, size=(d, n)).astype(np.uint8)
    s = rng.normal(size=(n, K))
    sign = np.where(rng.random(n) < 0.4, -1, 1).astype(np.int8)
    return rng, codes, s, sign


def run_kernel(codes, s, sign, order, start, end, feats, n_bins):
    hist = np.zeros((feats.shape[0], n_bins, s.shape[1]))
    accumulate_histogram(codes, s, sign, order, start, end, feats, hist, class_lanes(s.shape[1]))
    return hist


def test_histogram_by_hand() -> None:
    # one feature, rows with codes 0, 2, 0 and two classes: bin 0 gets rows 0 and 2, bin 2 row 1
    codes = np.array([[0, 2, 0]], dtype=np.uint8)
    s = np.array([[1.0, -2.0], [3.0, 4.0], [0.5, 0.25]])
    feats = np.array([0], dtype=np.int64)
    hist = run_kernel(codes, s, NO_SIGN, ALL_ROWS, 0, 3, feats, 3)
    np.testing.assert_array_equal(hist[0], [[1.5, -1.75], [0.0, 0.0], [3.0, 4.0]])
    # row 0 negated, only rows 0..1 (through an explicit order)
    sign = np.array([-1, 1, 1], dtype=np.int8)
    hist = run_kernel(codes, s, sign, np.array([0, 1, 2]), 0, 2, feats, 3)
    np.testing.assert_array_equal(hist[0], [[-1.0, 2.0], [0.0, 0.0], [3.0, 4.0]])


@pytest.mark.parametrize("K", [1, 2, 3, 5, 9])
@pytest.mark.parametrize("n_feats", [1, 2, 5])  # an odd count exercises the unpaired feature
def test_histogram_matches_naive_on_all_rows(K: int, n_feats: int) -> None:
    rng, codes, s, sign = random_codes(K * 10 + n_feats, n=300, d=6, K=K)
    feats = rng.choice(6, size=n_feats, replace=False).astype(np.int64)
    rows = np.arange(300)
    for sg in (None, sign):
        got = run_kernel(codes, s, NO_SIGN if sg is None else sg, ALL_ROWS, 0, 300, feats, 9)
        # same additions in the same order: equal to the last bit
        np.testing.assert_array_equal(got, naive.histogram(codes, s, rows, sg, feats, 9))


@pytest.mark.parametrize("seed", range(3))
def test_histogram_of_a_segment_through_order_across_row_blocks(seed: int) -> None:
    n = 2 * ROW_BLOCK + 37  # three row blocks, the last one partial
    rng, codes, s, sign = random_codes(seed, n=n + 50, d=3, K=4)
    order = rng.permutation(n + 50)
    feats = np.array([2, 0, 1], dtype=np.int64)
    start, end = 20, 20 + n
    got = run_kernel(codes, s, sign, order, start, end, feats, 9)
    want = naive.histogram(codes, s, order[start:end], sign, feats, 9)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    # rows start:end themselves (no order) and an empty segment
    got = run_kernel(codes, s, NO_SIGN, ALL_ROWS, start, end, feats, 9)
    np.testing.assert_allclose(got, naive.histogram(codes, s, np.arange(start, end), None, feats, 9),
                               rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(run_kernel(codes, s, NO_SIGN, order, 5, 5, feats, 9), 0.0)


def test_class_lanes() -> None:
    assert class_lanes(3) == (0, 0, 0)
    with pytest.raises(ValueError, match="n_classes"):
        class_lanes(0)


def test_packed_stump_by_hand() -> None:
    """The module docstring's stump: root, then its two leaves side by side."""
    p = FlatForest.from_arrays(stump_arrays()).packed
    np.testing.assert_array_equal(p.vfeat, [2, 0, 0])
    np.testing.assert_array_equal(p.vthr, [0.5, np.nan, np.nan])
    np.testing.assert_array_equal(p.vleft, [1, 1, 2])
    np.testing.assert_array_equal(p.vleaf, [-1, 0, 1])
    np.testing.assert_array_equal(p.base_depth, [1])


def flat_leaf(forest: FlatForest, b: int, x: np.ndarray) -> int:
    """The absolute leaf row a document reaches in tree ``b``, walking the flat arrays."""
    ns, ls = int(forest.base_node_start[b]), int(forest.base_leaf_start[b])
    if forest.base_node_start[b + 1] == ns:
        return ls
    t = 0
    while True:
        g = ns + t
        c = forest.node_right[g] if x[forest.node_feature[g]] >= forest.node_threshold[g] else forest.node_left[g]
        if c < 0:
            return ls - int(c) - 1
        t = int(c)


@pytest.mark.parametrize("seed", [0, 1])
def test_packed_walk_of_exactly_depth_steps_ends_on_the_flat_walks_leaf(seed: int) -> None:
    """``r = vleft[r] + (x[vfeat[r]] >= vthr[r])`` repeated ``base_depth`` times from the root ends
    on the leaf of the plain walk, for shallow, deep and lopsided trees (NaN included)."""
    forest = concatenate([random_forest(7 + seed, n_base=20), deep_forest(seed, n_base=6, d=6, K=3, n_leaves=40)])
    p = PackedNodes.from_forest(forest)
    assert forest.packed is forest.packed  # built once
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(60, 6)).astype(np.float32)
    X[0, 2] = np.nan
    for b in np.flatnonzero(forest.base_kind == 0):
        for x in X:
            r = int(p.base_vstart[b])
            for _ in range(int(p.base_depth[b])):
                r = int(p.vleft[r]) + int(x[p.vfeat[r]] >= p.vthr[r])
            assert p.vleaf[r] == flat_leaf(forest, int(b), x)
    assert p.chunk_start[0] == 0 and p.chunk_start[-1] == forest.n_base
    assert np.all(np.diff(p.chunk_start) > 0)


def deep_forest(seed: int, n_base: int, d: int, K: int, n_leaves: int) -> FlatForest:
    """Trees of ``n_leaves`` leaves grown by splitting random leaves (some deep and lopsided)."""
    rng = np.random.default_rng(seed)
    ns, ls, feat, thr, left, right, leaves = [0], [0], [], [], [], [], []
    for _ in range(n_base):
        lft, rgt = [-1], [-2]
        open_leaves = [(0, 0), (0, 1)]
        for nn in range(1, n_leaves - 1):
            # prefer the newest leaves: long chains as well as bushy parts
            pick = len(open_leaves) - 1 - int(rng.integers(min(3, len(open_leaves))))
            node, side = open_leaves.pop(pick)
            old = (lft if side == 0 else rgt)[node]
            (lft if side == 0 else rgt)[node] = nn
            lft.append(old)
            rgt.append(-(nn + 2))
            open_leaves += [(nn, 0), (nn, 1)]
        left += lft
        right += rgt
        feat += rng.integers(0, d, n_leaves - 1).tolist()
        thr += rng.normal(scale=0.5, size=n_leaves - 1).tolist()
        leaves += list(rng.normal(size=(n_leaves, K)))
        ns.append(len(feat))
        ls.append(len(leaves))
    return FlatForest.from_arrays({
        "base_kind": np.zeros(n_base, np.int8), "base_node_start": np.array(ns),
        "base_leaf_start": np.array(ls), "node_feature": np.array(feat, np.int32),
        "node_threshold": np.array(thr, np.float32), "node_left": np.array(left, np.int32),
        "node_right": np.array(right, np.int32), "leaf_values": np.array(leaves),
        "n_features": np.array(d),
    })


@pytest.mark.parametrize(("K", "n_leaves"), [(1, 64), (3, 8), (5, 33)])
def test_score_deep_trees_matches_slow_walk(K: int, n_leaves: int) -> None:
    forest = deep_forest(K, n_base=12, d=5, K=K, n_leaves=n_leaves)
    if n_leaves == 64:  # the unfinished documents are compacted on the deep trees
        assert np.any(forest.packed.base_compact_at < forest.packed.base_depth)
    rng = np.random.default_rng(K)
    X = rng.normal(scale=0.5, size=(DOC_BLOCK + 45, 5)).astype(np.float32)  # two blocks
    X[:8] = forest.node_threshold[:8, None]  # values equal to thresholds go right
    X[8, 1] = np.nan  # NaN fails every test: left
    ck = [0, 3, 12]
    want = naive.score_forest(forest.to_arrays(), X, ck)
    np.testing.assert_allclose(score_forest(forest, X, ck), want, rtol=1e-12, atol=1e-12)


def test_packed_layout_of_truncated_and_concatenated_forests() -> None:
    a, b = random_forest(11, n_base=9), deep_forest(2, n_base=4, d=6, K=3, n_leaves=20)
    X = np.random.default_rng(3).normal(size=(90, 6)).astype(np.float32)
    ab = concatenate([a, b])
    want = naive.score_forest(ab.to_arrays(), X, [5, 9, 13])
    np.testing.assert_allclose(score_forest(ab, X, [5, 9, 13]), want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(score_forest(ab.truncate(11), X)[:, 0],
                               naive.score_forest(ab.to_arrays(), X, [11])[:, 0], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("n_docs", [DOC_BLOCK + 17, 3 * DOC_BLOCK + 17, 6 * DOC_BLOCK + 5])
def test_two_threads_give_the_same_bits_as_one(monkeypatch: pytest.MonkeyPatch, n_docs: int) -> None:
    """The parallel pass (chunks x document blocks taken by the threads one task at a time, a
    short last block) adds in the same order as the serial one: equal to the last bit, and equal
    to the slow walk."""
    import numba

    from tunemix.core.scoring import forest as forest_module

    if int(numba.config.NUMBA_NUM_THREADS) < 2:  # type: ignore[attr-defined]
        pytest.skip("numba has one thread here")
    monkeypatch.setattr(packed, "CHUNK_NODES", 200)  # several chunks (the layout is built below)
    forest = concatenate([random_forest(5, n_base=30), deep_forest(9, n_base=40, d=6, K=3, n_leaves=64)])
    assert len(forest.packed.chunk_start) > 3
    X = np.random.default_rng(4).normal(scale=0.6, size=(n_docs, 6)).astype(np.float32)
    ck = [0, 7, 30, 31, 70]
    calls: list[int] = []
    kernel = forest_module._score_parallel

    def spy(*args: object) -> None:
        calls.append(1)
        kernel(*args)

    monkeypatch.setattr(forest_module, "PARALLEL_MIN_WORK", 1)
    monkeypatch.setattr(runtime, "_parallel_min_documents", 0)  # not the library's floor
    monkeypatch.setattr(runtime, "_scoring_threads", 1)
    one = score_forest(forest, X, ck)
    monkeypatch.setattr(forest_module, "_score_parallel", spy)
    monkeypatch.setattr(runtime, "_scoring_threads", 2)
    two = score_forest(forest, X, ck)
    assert calls, "the parallel pass was not taken"
    np.testing.assert_array_equal(one, two)
    np.testing.assert_allclose(two, naive.score_forest(forest.to_arrays(), X, ck), rtol=1e-12, atol=1e-12)


def two_threads_spied(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Scoring allowed two threads for any list (skipped where numba has one); returns the list
    that gets an entry per call of the forest's parallel kernel."""
    import numba

    from tunemix.core.scoring import forest as forest_module

    if int(numba.config.NUMBA_NUM_THREADS) < 2:  # type: ignore[attr-defined]
        pytest.skip("numba has one thread here")
    monkeypatch.setattr(runtime, "_scoring_threads", 2)
    monkeypatch.setattr(forest_module, "PARALLEL_MIN_WORK", 1)
    monkeypatch.setattr(runtime, "_parallel_min_documents", 0)  # not the library's floor
    calls: list[int] = []
    kernel = forest_module._score_parallel
    monkeypatch.setattr(forest_module, "_score_parallel", lambda *a: (calls.append(1), kernel(*a)))
    return calls


def test_single_threaded_caps_only_the_calling_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    import threading


    calls = two_threads_spied(monkeypatch)
    forest = random_forest(3, n_base=40)
    X = np.random.default_rng(1).normal(size=(150, 6)).astype(np.float32)
    seen: list[int] = []
    with runtime.single_threaded():
        assert runtime.get_scoring_threads() == 1
        inside = score_forest(forest, X)
        other = threading.Thread(target=lambda: seen.append(runtime.get_scoring_threads()))
        other.start()
        other.join()
    assert not calls and seen == [2]
    assert runtime.get_scoring_threads() == 2
    np.testing.assert_array_equal(inside, score_forest(forest, X))
    assert calls


def test_lists_below_the_parallel_floor_score_on_one_thread(monkeypatch: pytest.MonkeyPatch) -> None:

    calls = two_threads_spied(monkeypatch)
    forest = random_forest(3, n_base=40)
    X = np.random.default_rng(2).normal(size=(150, 6)).astype(np.float32)
    monkeypatch.setattr(runtime, "_parallel_min_documents", 0)
    free = score_forest(forest, X)
    assert calls == [1]
    runtime.set_parallel_min_documents(151)  # monkeypatch restores the module global
    assert runtime.get_parallel_min_documents() == 151
    below = score_forest(forest, X)
    assert calls == [1], "a list below the floor took the parallel pass"
    runtime.set_parallel_min_documents(150)
    at = score_forest(forest, X)
    assert calls == [1, 1]
    np.testing.assert_array_equal(free, below)
    np.testing.assert_array_equal(free, at)
    with pytest.raises(ValueError, match="parallel_min_documents"):
        runtime.set_parallel_min_documents(-1)


def chain_forest(n_nodes: int, d: int = 4, K: int = 2, seed: int = 0) -> FlatForest:
    """One lopsided tree: node k's right child is node k + 1 (depth ``n_nodes``), every left
    child a leaf; then a balanced 7-node tree of depth 3."""
    rng = np.random.default_rng(seed)
    left = [-(k + 1) for k in range(n_nodes)]
    right = [k + 1 for k in range(n_nodes - 1)] + [-(n_nodes + 1)]
    # balanced: 0 -> (1, 2), 1 -> (3, 4), 2 -> (5, 6), nodes 3..6 -> leaves 0..7
    left += [1, 3, 5, -1, -3, -5, -7]
    right += [2, 4, 6, -2, -4, -6, -8]
    n_all = n_nodes + 7
    return FlatForest.from_arrays({
        "base_kind": np.zeros(2, np.int8), "base_node_start": np.array([0, n_nodes, n_all]),
        "base_leaf_start": np.array([0, n_nodes + 1, n_nodes + 9]),
        "node_feature": rng.integers(0, d, n_all).astype(np.int32),
        "node_threshold": rng.normal(size=n_all).astype(np.float32),
        "node_left": np.array(left, np.int32), "node_right": np.array(right, np.int32),
        "leaf_values": rng.normal(size=(n_nodes + 9, K)), "n_features": np.array(d),
    })


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_small_trees_scored_by_table_equal_the_walk(seed: int) -> None:
    """Trees of at most SMALL_NODES nodes and depth >= SMALL_MIN_DEPTH take the table path: the
    same leaves as the slow walk on values equal to thresholds, NaN and infinities, for a
    lopsided chain of 7 nodes (depth 7), chains of 3 and 5 nodes (the kernel always makes 7
    tests: the bits past a tree's nodes must not matter), a balanced depth-3 tree and random
    small trees."""

    rng = np.random.default_rng(seed)
    for forest in (chain_forest(packed.SMALL_NODES, seed=seed), chain_forest(3, seed=seed),
                   chain_forest(5, seed=seed), random_forest(seed + 20, n_base=120)):
        p = forest.packed
        small = p.base_small >= 0
        expected = (forest.base_kind == 0) & (np.diff(forest.base_node_start) <= packed.SMALL_NODES) \
            & (p.base_depth >= packed.SMALL_MIN_DEPTH)
        np.testing.assert_array_equal(small, expected)
        assert small.sum() >= 2
        d = forest.n_features
        X = rng.normal(size=(150, d)).astype(np.float32)
        thr = forest.node_threshold
        X[::3] = rng.choice(thr, size=X[::3].shape)  # values equal to thresholds
        X[1::7, 0] = np.nan
        X[2::11, -1] = np.inf
        X[4::13, 1 % d] = -np.inf
        ck = [0, forest.n_base // 2, forest.n_base]
        got = score_forest(forest, X, ck)
        want = naive.score_forest(forest.to_arrays(), X, ck)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    # every mask of a chain's table leads where the walk does (a 3-node chain's walk reads bits
    # 0..2 only: the other bits are the kernel's padding tests)
    for n_nodes in (packed.SMALL_NODES, 3):
        forest = chain_forest(n_nodes, seed=seed)
        p = forest.packed
        for mask in range(1 << packed.SMALL_NODES):
            t = 0
            while True:
                c = forest.node_right[t] if (mask >> t) & 1 else forest.node_left[t]
                if c < 0:
                    break
                t = c
            assert p.small_leaf[p.base_small[0], mask] == -c - 1
