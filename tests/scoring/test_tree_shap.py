"""The one-reference TreeSHAP kernel (``tunemix.core.explain.tree_shap``) against its slow twin: every
base classifier walked in pure NumPy on every hybrid row z_S (2^G coalitions of players) and the
Shapley formula applied, on random forests of trees (features repeated down a path), products of
stumps and empty trees, with columns grouped into players as the views group them."""

from __future__ import annotations

import itertools
from math import factorial

import numpy as np
import pytest

from tunemix.core.explain.tree_shap import _forest_attributions, forest_attributions, shapley_weights
from tunemix.core.scoring.forest import KIND_PRODUCT, KIND_TREE, FlatForest, score_forest


def random_tree(rng: np.random.Generator, cols: int, n_leaves: int) -> tuple[list[int], list[float], list[int],
                                                                           list[int]]:
    """(features, thresholds, left, right) of a random tree in pre-order (children after parents)."""
    feats: list[int] = []
    thrs: list[float] = []
    left: list[int] = []
    right: list[int] = []
    leaves = [0]

    def grow(budget: int) -> int:
        if budget <= 1:
            leaves[0] += 1
            return -leaves[0]  # leaf -c-1 = leaves[0] - 1
        t = len(feats)
        feats.append(int(rng.integers(cols)))
        thrs.append(float(rng.choice([-0.5, 0.0, 0.5])))
        left.append(0)
        right.append(0)
        split = int(rng.integers(1, budget))
        left[t] = grow(split)
        right[t] = grow(budget - split)
        return t

    grow(n_leaves)
    return feats, thrs, left, right


def random_forest(rng: np.random.Generator, cols: int, k: int, n_base: int, leaves: tuple[int, int] = (1, 9),
                  missing_right: float = 0.0) -> FlatForest:
    kind, ns, ls = [], [0], [0]
    feat: list[int] = []
    thr: list[float] = []
    left: list[int] = []
    right: list[int] = []
    n_rows = 0
    for _ in range(n_base):
        if rng.random() < 0.3:
            terms = int(rng.integers(1, 5))
            kind.append(KIND_PRODUCT)
            feat += [int(rng.integers(cols)) for _ in range(terms)]
            thr += [float(rng.choice([-0.5, 0.0, 0.5])) for _ in range(terms)]
            left += [-1] * terms
            right += [-1] * terms
            n_rows += 1
        else:
            n_leaves = int(rng.integers(*leaves))
            f, t, lft, rgt = random_tree(rng, cols, n_leaves)
            kind.append(KIND_TREE)
            feat += f
            thr += t
            left += lft
            right += rgt
            n_rows += n_leaves
        ns.append(len(feat))
        ls.append(n_rows)
    return FlatForest.from_arrays({
        "base_kind": np.array(kind, np.int8), "base_node_start": np.array(ns, np.int64),
        "base_leaf_start": np.array(ls, np.int64), "node_feature": np.array(feat, np.int32),
        "node_threshold": np.array(thr, np.float32), "node_left": np.array(left, np.int32),
        "node_right": np.array(right, np.int32), "leaf_values": rng.normal(size=(n_rows, k)),
        "n_features": np.array(cols),
        "node_missing_right": (rng.random(len(feat)) < missing_right).astype(np.int8)})


def goes_right(forest: FlatForest, t: np.ndarray | int, z: np.ndarray) -> np.ndarray:
    """Node(s) t's test on the row z: ``z >= threshold``, a NaN going the node's missing way."""
    v = z[forest.node_feature[t]]
    return np.where(np.isnan(v), forest.node_missing_right[t] == 1, v >= forest.node_threshold[t])


def base_value(forest: FlatForest, b: int, z: np.ndarray) -> np.ndarray:
    """h_b(z) (K,) by walking the flat arrays as the module docstring of ``forest`` states them."""
    ns, ne = forest.base_node_start[b], forest.base_node_start[b + 1]
    ls = forest.base_leaf_start[b]
    if forest.base_kind[b] == KIND_PRODUCT:
        signs = np.where(goes_right(forest, np.arange(ns, ne), z), 1.0, -1.0)
        return np.prod(signs) * forest.leaf_values[ls]
    if ne == ns:
        return forest.leaf_values[ls]
    c = 0
    while c >= 0:
        t = ns + c
        c = forest.node_right[t] if goes_right(forest, t, z) else forest.node_left[t]
    return forest.leaf_values[ls - c - 1]


def twin(forest: FlatForest, x: np.ndarray, r: np.ndarray, group: np.ndarray, n_groups: int,
         checkpoints: np.ndarray) -> np.ndarray:
    """Brute-force Shapley values of every base's game over all 2^G coalitions, summed per checkpoint."""
    out = np.zeros((x.shape[0], checkpoints.size, n_groups, forest.n_outputs))
    coalitions = [np.array(s, dtype=bool) for s in itertools.product([False, True], repeat=n_groups)]
    g = n_groups
    for i in range(x.shape[0]):
        per_base = np.zeros((forest.n_base, n_groups, forest.n_outputs))
        for b in range(forest.n_base):
            v = {s.tobytes(): base_value(forest, b, np.where(s[group], x[i], r)) for s in coalitions}
            for f in range(g):
                for s in coalitions:
                    if s[f]:
                        continue
                    with_f = s.copy()
                    with_f[f] = True
                    size = int(s.sum())
                    w = factorial(size) * factorial(g - size - 1) / factorial(g)
                    per_base[b, f] += w * (v[with_f.tobytes()] - v[s.tobytes()])
        for c, n_b in enumerate(checkpoints):
            out[i, c] = per_base[:n_b].sum(axis=0)
    return out


@pytest.mark.parametrize("seed", range(4))
def test_missing_values_equal_the_twin(seed: int) -> None:
    """Rows and references with NaN, nodes sending it either way: the kernel against the
    brute-force Shapley values, and additive to the scoring kernel's difference."""
    rng = np.random.default_rng(50 + seed)
    cols, n_groups, k = 6, 4, 2
    forest = random_forest(rng, cols, k, 14, missing_right=0.5)
    assert forest.missing_columns is not None
    group = rng.integers(n_groups, size=cols)
    x = rng.choice([-1.0, -0.25, 0.25, 1.0, np.nan], size=(6, cols)).astype(np.float32)
    r = rng.choice([-1.0, 0.25, np.nan], size=cols).astype(np.float32)
    x[0] = np.nan
    checkpoints = np.array([0, 5, 14])
    got = forest_attributions(forest, x, r, group, n_groups, checkpoints)
    np.testing.assert_allclose(got, twin(forest, x, r, group, n_groups, checkpoints), atol=1e-12)
    delta = score_forest(forest, x, checkpoints) - score_forest(forest, r[None], checkpoints)
    np.testing.assert_allclose(got.sum(axis=2), delta, atol=1e-12)
    assert np.abs(got[0]).sum() > 0


def test_weights_are_the_leaf_games_shapley_values() -> None:
    plus, minus = shapley_weights(6)
    for a in range(7):
        for b in range(7):
            if a + b == 0 or a + b > 6:
                continue
            # v(S) = [A in S][S cap B empty]: each of A gains the same, each of B loses the same,
            # and the total is [b == 0] - [a == 0]
            assert a * plus[a, b] - b * minus[a, b] == pytest.approx(float(b == 0) - float(a == 0), abs=1e-15)
    assert plus[1, 0] == 1.0 and minus[0, 1] == 1.0 and plus[2, 1] == pytest.approx(1 / 6)


@pytest.mark.parametrize("seed", range(6))
def test_kernel_equals_its_twin_on_random_forests(seed: int) -> None:
    rng = np.random.default_rng(seed)
    cols, n_groups, k = 7, 4, 3
    forest = random_forest(rng, cols, k, 12)
    group = rng.integers(n_groups, size=cols)
    x = rng.choice([-1.0, -0.25, 0.25, 1.0], size=(5, cols)).astype(np.float32)
    r = rng.choice([-1.0, -0.25, 0.25, 1.0], size=cols).astype(np.float32)
    x[0] = r  # the reference itself: every attribution 0
    checkpoints = np.array([0, 3, 3, 7, 12])
    got = forest_attributions(forest, x, r, group, n_groups, checkpoints)
    np.testing.assert_allclose(got, twin(forest, x, r, group, n_groups, checkpoints), atol=1e-12)
    assert np.all(got[0] == 0.0)
    # additivity: the players' attributions sum to S_c(x) - S_c(r)
    delta = score_forest(forest, x, checkpoints) - score_forest(forest, r[None], checkpoints)
    np.testing.assert_allclose(got.sum(axis=2), delta, atol=1e-12)


@pytest.mark.parametrize("seed", range(3))
def test_trees_of_65_to_149_nodes_equal_the_twin(seed: int) -> None:
    """Trees of 65 to 149 nodes, deeper than the other tests' (their walks' stacks and paths longer,
    features repeated further down), against the twin."""
    rng = np.random.default_rng(100 + seed)
    cols, n_groups, k = 7, 4, 3
    forest = random_forest(rng, cols, k, 6, leaves=(66, 150))
    assert np.diff(forest.base_node_start).max() > 64
    group = rng.integers(n_groups, size=cols)
    x = rng.choice([-1.0, -0.25, 0.25, 1.0], size=(4, cols)).astype(np.float32)
    r = rng.choice([-1.0, -0.25, 0.25, 1.0], size=cols).astype(np.float32)
    x[0] = r
    checkpoints = np.array([0, 2, 6])
    got = forest_attributions(forest, x, r, group, n_groups, checkpoints)
    np.testing.assert_allclose(got, twin(forest, x, r, group, n_groups, checkpoints), atol=1e-12)
    assert np.all(got[0] == 0.0)


@pytest.mark.parametrize("k", [1, 2, 4, 5])
def test_kernel_equals_its_twin_for_every_class_count(k: int) -> None:
    """The leaves' additions are written out for 3 and 5 outputs and looped otherwise: every count
    against the twin."""
    rng = np.random.default_rng(10 + k)
    cols, n_groups = 6, 4
    forest = random_forest(rng, cols, k, 10)
    group = rng.integers(n_groups, size=cols)
    x = rng.choice([-1.0, -0.25, 0.25, 1.0], size=(4, cols)).astype(np.float32)
    r = rng.choice([-1.0, -0.25, 0.25, 1.0], size=cols).astype(np.float32)
    checkpoints = np.array([0, 4, 10])
    got = forest_attributions(forest, x, r, group, n_groups, checkpoints)
    np.testing.assert_allclose(got, twin(forest, x, r, group, n_groups, checkpoints), atol=1e-12)


@pytest.mark.parametrize("k", [3, 5])
def test_a_documents_attributions_do_not_depend_on_the_others_in_its_batch(k: int) -> None:
    """The walk runs every base for all the rows before the next base, each row's running
    attributions indexed in one array: a row explained with 11 others equals, bit for bit, the
    same row explained alone (the same additions in the same order)."""
    rng = np.random.default_rng(20 + k)
    cols, n_groups = 8, 5
    forest = random_forest(rng, cols, k, 40)
    group = rng.integers(n_groups, size=cols)
    x = rng.choice([-1.0, -0.25, 0.25, 1.0], size=(12, cols)).astype(np.float32)
    r = rng.choice([-1.0, -0.25, 0.25, 1.0], size=cols).astype(np.float32)
    checkpoints = np.array([0, 7, 19, 19, 40])
    together = forest_attributions(forest, x, r, group, n_groups, checkpoints)
    assert np.any(together != 0.0)
    for i in range(x.shape[0]):
        alone = forest_attributions(forest, x[i : i + 1], r, group, n_groups, checkpoints)
        np.testing.assert_array_equal(together[i], alone[0])


def test_fixed_tree_with_a_repeated_feature() -> None:
    """x[0] >= 0 ? (x[0] >= 1 ? 5 : 3) : (x[1] >= 0 ? 2 : 0), x = (2, -1), r = (0.5, 1): x reaches 5,
    r reaches 3 (feature 1 never matters on r's side), so feature 0 gets all of 5 - 3."""
    forest = FlatForest.from_arrays({
        "base_kind": np.array([0], np.int8), "base_node_start": np.array([0, 3]),
        "base_leaf_start": np.array([0, 4]), "node_feature": np.array([0, 1, 0], np.int32),
        "node_threshold": np.array([0.0, 0.0, 1.0], np.float32), "node_left": np.array([1, -1, -3], np.int32),
        "node_right": np.array([2, -2, -4], np.int32),
        "leaf_values": np.array([[0.0], [2.0], [3.0], [5.0]]), "n_features": np.array(2)})
    got = forest_attributions(forest, np.array([[2.0, -1.0]]), np.array([0.5, 1.0]), [0, 1], 2, [1])
    np.testing.assert_array_equal(got[0, 0, :, 0], [2.0, 0.0])
    # x = (-1, -1) against r = (2, 1): z_{0} = (-1, 1) reaches 2, z_{1} = (2, -1) reaches 5, x 0, r 5:
    # phi_0 = ((2 - 5) + (0 - 5)) / 2 = -4, phi_1 = ((5 - 5) + (0 - 2)) / 2 = -1
    got = forest_attributions(forest, np.array([[-1.0, -1.0]]), np.array([2.0, 1.0]), [0, 1], 2, [1])
    np.testing.assert_allclose(got[0, 0, :, 0], [-4.0, -1.0])


def test_product_closed_form() -> None:
    """phi_1 phi_2 phi_3 * row with all three factors flipped: v(S) = c (-1)^|S|, each gets -2c/3."""
    forest = FlatForest.from_arrays({
        "base_kind": np.array([1], np.int8), "base_node_start": np.array([0, 3]),
        "base_leaf_start": np.array([0, 1]), "node_feature": np.array([0, 1, 2], np.int32),
        "node_threshold": np.array([0.0, 0.0, 0.0], np.float32), "node_left": np.full(3, -1, np.int32),
        "node_right": np.full(3, -1, np.int32), "leaf_values": np.array([[1.5, -3.0]]),
        "n_features": np.array(3)})
    r = np.array([1.0, 1.0, -1.0])  # c = (+1)(+1)(-1) row = -row
    got = forest_attributions(forest, -r[None], r, [0, 1, 2], 3, [1])
    np.testing.assert_allclose(got[0, 0], np.tile(2.0 / 3.0 * np.array([1.5, -3.0]), (3, 1)))
    # two of the factors in one player: they cancel, the third's player gets all of -2c
    got = forest_attributions(forest, -r[None], r, [0, 0, 1], 2, [1])
    np.testing.assert_allclose(got[0, 0], [[0.0, 0.0], [3.0, -6.0]])


def test_bad_shapes_are_refused() -> None:
    forest = random_forest(np.random.default_rng(0), 3, 1, 2)
    with pytest.raises(ValueError, match="group entries"):
        forest_attributions(forest, np.zeros((1, 3)), np.zeros(3), [0, 1, 5], 2, [2])
    with pytest.raises(ValueError, match="checkpoints"):
        forest_attributions(forest, np.zeros((1, 3)), np.zeros(3), [0, 1, 1], 2, [2, 1])
    with pytest.raises(ValueError, match=r"x \(n, 3\)"):
        forest_attributions(forest, np.zeros((1, 4)), np.zeros(3), [0, 1, 1], 2, [2])


def test_kernel_releases_the_gil_and_is_cached() -> None:
    """Explanations run beside other requests: the kernel is compiled nogil (and cached on disk)."""
    assert _forest_attributions.targetoptions["nogil"] is True
    assert _forest_attributions._cache.__class__.__name__ == "FunctionCache"
