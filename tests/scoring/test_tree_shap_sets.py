"""The set walk (``tunemix.core.explain.tree_shap_sets.documents_sets``) against the per-document walk
(``tunemix.core.explain.tree_shap.documents``) bit for bit, and against the brute-force twin of
``test_tree_shap`` (every hybrid row of every coalition): random forests of trees (features
repeated down a path, players of several columns), products of stumps and empty trees; every
class count; trees of up to 149 nodes; blocks of 64 documents and more; the reference among the
documents; identical documents."""

from __future__ import annotations

import numpy as np
import pytest

from tests.scoring.test_tree_shap import random_forest, twin
from tunemix.core.explain.tree_shap import documents, reference_sides, shapley_weights
from tunemix.core.explain.tree_shap_sets import BLOCK, _block, documents_sets
from tunemix.core.scoring.forest import FlatForest


def both(forest: FlatForest, x: np.ndarray, r: np.ndarray, group: np.ndarray, n_groups: int,
         checkpoints: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(per-document walk, set walk) attributions (n, C, K, G) of the same inputs."""
    xa = np.ascontiguousarray(x, dtype=np.float32)
    ra = np.ascontiguousarray(r, dtype=np.float32)
    ga = np.ascontiguousarray(group, dtype=np.int64)
    ck = np.ascontiguousarray(checkpoints, dtype=np.int64)
    depth = int(np.diff(forest.base_node_start).max(initial=0)) + 1
    plus, minus = shapley_weights(min(depth, n_groups))
    r_dir = reference_sides(forest.node_feature, forest.node_threshold, ra)
    outs = []
    for kernel in (documents, documents_sets):
        out = np.full((xa.shape[0], ck.size, forest.n_outputs, n_groups), np.nan)
        kernel(forest.base_kind, forest.base_node_start, forest.base_leaf_start, forest.node_feature,
               forest.node_threshold, forest.node_left, forest.node_right, forest.leaf_values, xa, r_dir, ga, ck, plus,
               minus, out)
        outs.append(out)
    return outs[0], outs[1]


def inputs(rng: np.random.Generator, cols: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    values = [-1.0, -0.25, 0.25, 1.0]
    return (rng.choice(values, size=(n, cols)).astype(np.float32), rng.choice(values, size=cols).astype(np.float32))


@pytest.mark.parametrize("seed", range(8))
def test_the_set_walk_is_the_per_document_walk_bit_for_bit(seed: int) -> None:
    rng = np.random.default_rng(300 + seed)
    cols, n_groups, k = 8, 5, [1, 2, 3, 5][seed % 4]
    forest = random_forest(rng, cols, k, 60)
    group = rng.integers(n_groups, size=cols)
    x, r = inputs(rng, cols, 12)
    x[3] = r  # the reference itself
    x[7] = x[5]  # two identical documents
    checkpoints = np.array([0, 5, 17, 17, 42, 60])
    per_document, sets = both(forest, x, r, group, n_groups, checkpoints)
    assert np.any(sets != 0.0)
    np.testing.assert_array_equal(sets, per_document)
    assert np.all(sets[3] == 0.0)
    np.testing.assert_array_equal(sets[7], sets[5])


@pytest.mark.parametrize("seed", range(4))
def test_missing_values_bit_for_bit(seed: int) -> None:
    """Rows and references with NaN through a forest whose nodes send it either way, in its wide
    form (``tree_shap.missing_as_columns``): the set walk is the per-document walk's bits, and both
    are ``forest_attributions``'."""
    from tunemix.core.explain.tree_shap import forest_attributions, missing_as_columns

    rng = np.random.default_rng(700 + seed)
    cols, n_groups, k = 7, 4, [1, 3][seed % 2]
    forest = random_forest(rng, cols, k, 40, missing_right=0.5)
    group = rng.integers(n_groups, size=cols)
    x, r = inputs(rng, cols, 11)
    x[rng.random(x.shape) < 0.3] = np.nan
    r[1] = np.nan
    checkpoints = np.array([0, 9, 40])
    wide, xw, rw, gw = missing_as_columns(forest, x, r, np.ascontiguousarray(group, dtype=np.int64))
    assert wide.n_features > cols
    per_document, sets = both(wide, xw, rw, gw, n_groups, checkpoints)
    assert np.any(sets != 0.0)
    np.testing.assert_array_equal(sets, per_document)
    np.testing.assert_array_equal(sets.transpose(0, 1, 3, 2),
                                  forest_attributions(forest, x, r, group, n_groups, checkpoints))


@pytest.mark.parametrize("seed", range(3))
def test_deep_trees_bit_for_bit(seed: int) -> None:
    """Trees of 65 to 149 nodes: long paths, features repeated far down, many players on a path."""
    rng = np.random.default_rng(400 + seed)
    cols, n_groups = 7, 4
    forest = random_forest(rng, cols, 3, 8, leaves=(66, 150))
    group = rng.integers(n_groups, size=cols)
    x, r = inputs(rng, cols, 20)
    per_document, sets = both(forest, x, r, group, n_groups, np.array([0, 3, 8]))
    np.testing.assert_array_equal(sets, per_document)


@pytest.mark.parametrize("n", [1, BLOCK - 1, BLOCK, BLOCK + 1, 2 * BLOCK + 5])
def test_blocks_of_documents_bit_for_bit(n: int) -> None:
    """Up to 64 documents walk as one set; more are walked a block at a time, each block its own set."""
    rng = np.random.default_rng(500 + n)
    cols, n_groups = 6, 6
    forest = random_forest(rng, cols, 3, 30)
    group = np.arange(cols)
    x, r = inputs(rng, cols, n)
    per_document, sets = both(forest, x, r, group, n_groups, np.array([0, 11, 30]))
    np.testing.assert_array_equal(sets, per_document)


def test_no_documents() -> None:
    rng = np.random.default_rng(7)
    forest = random_forest(rng, 4, 3, 5)
    per_document, sets = both(forest, np.zeros((0, 4)), np.zeros(4), np.arange(4), 4, np.array([5]))
    assert sets.shape == per_document.shape == (0, 1, 3, 4)


@pytest.mark.parametrize("seed", range(4))
def test_the_set_walk_equals_the_brute_force_twin(seed: int) -> None:
    """The Shapley values of every base's game by enumerating all 2^G coalitions (the slow twin)."""
    rng = np.random.default_rng(600 + seed)
    cols, n_groups, k = 7, 4, 3
    forest = random_forest(rng, cols, k, 12)
    group = rng.integers(n_groups, size=cols)
    x, r = inputs(rng, cols, 6)
    checkpoints = np.array([0, 4, 12])
    _, sets = both(forest, x, r, group, n_groups, checkpoints)
    expected = twin(forest, x, r, group, n_groups, checkpoints)  # (n, C, G, K)
    np.testing.assert_allclose(sets.transpose(0, 1, 3, 2), expected, atol=1e-12)


def test_kernels_release_the_gil_and_are_cached() -> None:
    """Explanations run beside other requests: compiled nogil (and cached on disk)."""
    for kernel in (documents_sets, _block):
        assert kernel.targetoptions["nogil"] is True
        assert kernel._cache.__class__.__name__ == "FunctionCache"
