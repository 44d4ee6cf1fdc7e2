"""LightGBM models as :class:`~tunemix.core.scoring.forest.FlatForest` (training side only).

LightGBM (Ke et al., "LightGBM: a highly efficient gradient boosting decision tree", NIPS 2017)
is a training engine of the McRank and LambdaMART members; serving never imports it: the trees
are converted here into the artifact's own flat arrays and scored by our kernel.

**Splits.** LightGBM sends ``x <= t`` left (``t`` a float64); our kernel sends ``x >= t'`` right
(``t'`` a float32). For a float32 input ``x`` (the service's dtype; LightGBM reads float32 rows
as exact doubles), ``x <= t`` iff ``x < t'`` iff not ``x >= t'`` with ``t'`` the smallest float32
strictly above ``t`` (:func:`float32_above`): the conversion is exact, with ``t' = +inf`` above
the float32 range.

**Missing values and the default direction.** A node's ``missing_type`` says which inputs go
its ``default_left`` way instead of being compared (LightGBM's ``Tree::NumericalDecision``):
``None`` (NaN is read as 0, then compared: it goes left iff ``0 <= t``), ``NaN`` (NaN goes the
default way), ``Zero`` (NaN is read as 0, and |x| <= 1e-35 goes the default way). The node's
``node_missing_right`` is that way for NaN, so every ``None`` and ``NaN`` node converts to one
node exactly. A ``Zero`` node also sends the zero region Z its default way: when that is the way
its comparison sends Z anyway (left with ``t >= 1e-35``, right with ``t < -1e-35``) it is one node
too; otherwise it becomes three, the subtree on Z's side repeated (LightGBM produces such nodes
only with ``zero_as_missing=true``, which the members never set)::

    default left:   x >= t' ? (x >= lo ? (x >= hi ? right : left) : right) : left
    default right:  x >= t' ? right : (x >= lo ? (x >= hi ? left : right) : left)

with Z = {lo <= x < hi} (lo = -1e-35, hi the smallest float32 above 1e-35) and NaN taking the
default way at the first node. On codes (``bins``), LightGBM's 0 is code 0 (Z = {x < edges[j, 0]})
and ``t`` its code threshold.
Categorical splits (``==``), linear trees and random-forest averaging raise as well.

**Classes.** A model with ``num_tree_per_iteration = K`` (multiclass) stores its trees
iteration-major: tree ``i`` adds to class ``i mod K``. Each tree becomes one base whose leaf rows
are zero except in column ``i mod K``, so the running sum after ``t K`` bases is the model's raw
K-vector after t iterations (``Booster.predict(X, raw_score=True, num_iteration=t)``). The
initial score (``boost_from_average``) is already inside the first tree's leaves.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from tunemix.core.scoring.forest import FlatForest

#: LightGBM's kZeroThreshold: |x| <= this is "zero" for ``missing_type == "Zero"``
ZERO_THRESHOLD = float(np.float32(1e-35))


def float32_above(t: float) -> np.float32:
    """The smallest float32 strictly above ``t``: for float32 x, ``x <= t`` iff not ``x >= it``.

    >>> float(float32_above(0.5)) == float(np.nextafter(np.float32(0.5), np.float32(1)))
    True
    """
    with np.errstate(over="ignore"):
        f = np.float32(t)
    if float(f) <= t:
        f = np.nextafter(f, np.float32(np.inf))
    return np.float32(f)


def missing_goes_right(node: dict[str, Any], threshold: float) -> bool:
    """Where LightGBM's split ``node`` (``x <= threshold`` left) sends NaN: right or not (module
    docstring)."""
    missing = node.get("missing_type", "None")
    if missing == "None":
        return not 0.0 <= threshold
    if missing in ("NaN", "Zero"):
        return not bool(node.get("default_left", True))
    raise ValueError(f"unknown missing_type {missing!r}")


def zero_against_comparison(node: dict[str, Any], threshold: float) -> bool:
    """Whether ``node`` is a ``Zero`` node whose default way for the zero region is not the way
    its comparison sends it (module docstring: three nodes, not one)."""
    if node.get("missing_type", "None") != "Zero":
        return False
    left = bool(node.get("default_left", True))
    return not ((left and threshold >= ZERO_THRESHOLD) or (not left and threshold < -ZERO_THRESHOLD))


def zero_region(bins: Any, feature: int) -> tuple[np.float32, np.float32]:
    """(lo, hi): LightGBM's zero region of ``feature`` is ``lo <= x < hi`` (module docstring)."""
    if bins is None:
        return np.float32(-ZERO_THRESHOLD), float32_above(ZERO_THRESHOLD)
    if int(bins.n_bins[feature]) <= 1:
        return np.float32(-np.inf), np.float32(np.inf)
    return np.float32(-np.inf), np.float32(bins.edges[feature, 0])


def lightgbm_to_forest(model: Any, n_features: int | None = None, num_iteration: int | None = None,
                       bins: Any = None) -> FlatForest:
    """The trees of a LightGBM ``Booster`` (or its ``dump_model()`` dict) as a K-output forest.

    ``num_iteration`` keeps the first iterations only (``K`` trees each). See the module
    docstring for the split, missing-value and class conventions. ``bins``
    (:class:`~tunemix.train.data.binning.FeatureBins`): the model was trained on these bins'
    codes (``tunemix.train.learners.lightgbm_data``); its thresholds become the real edges.
    """
    from tunemix.train.learners.lightgbm_data import code_threshold

    dump = model if isinstance(model, dict) else model.dump_model()
    if dump.get("average_output"):
        raise ValueError("random-forest models (average_output) are not converted")
    k = int(dump.get("num_tree_per_iteration", 1))
    trees = dump["tree_info"]
    if num_iteration is not None:
        trees = trees[: num_iteration * k]
    d = int(dump["max_feature_idx"]) + 1 if n_features is None else int(n_features)
    feat: list[int] = []
    thr: list[np.float32] = []
    nan_rights: list[int] = []
    left: list[int] = []
    right: list[int] = []
    leaves: list[tuple[int, float]] = []
    node_start, leaf_start = [0], [0]
    for i, info in enumerate(trees):
        n0, l0, cls = len(feat), len(leaves), i % k

        def split(f: int, t32: np.float32, goes_right: bool, lo: Callable[[], int], hi: Callable[[], int],
                  n0: int = n0) -> int:
            """A node ``x[f] >= t32`` (NaN right iff ``goes_right``), its children made in preorder."""
            me = len(feat) - n0
            feat.append(f)
            thr.append(t32)
            nan_rights.append(int(goes_right))
            left.append(0)
            right.append(0)
            left[n0 + me] = lo()
            right[n0 + me] = hi()
            return me

        def visit(node: dict[str, Any], l0: int = l0, cls: int = cls) -> int:
            if "leaf_value" in node:
                if "leaf_coeff" in node:
                    raise ValueError("linear trees are not converted")
                leaves.append((cls, float(node["leaf_value"])))
                return -(len(leaves) - l0)  # leaf r (relative) is coded -r - 1
            if node["decision_type"] != "<=":
                raise ValueError(f"unsupported split {node['decision_type']!r} (numerical '<=' only)")
            t = float(node["threshold"])
            f = int(node["split_feature"])
            t32 = float32_above(t) if bins is None else code_threshold(bins, f, t)
            nan_right = missing_goes_right(node, t)

            def lo() -> int:
                return visit(node["left_child"])

            def hi() -> int:
                return visit(node["right_child"])

            if not zero_against_comparison(node, t):
                return split(f, t32, nan_right, lo, hi)
            z_lo, z_hi = zero_region(bins, f)

            def zero_side(inside: Callable[[], int], outside: Callable[[], int]) -> int:
                # x >= lo ? (x >= hi ? outside : inside) : outside; NaN never reaches it
                return split(f, z_lo, False, lambda: outside(), lambda: split(f, z_hi, False, inside, outside))

            if nan_right:  # default right: below t' the zero region goes right
                return split(f, t32, True, lambda: zero_side(hi, lo), hi)
            return split(f, t32, False, lo, lambda: zero_side(lo, hi))

        visit(info["tree_structure"])
        node_start.append(len(feat))
        leaf_start.append(len(leaves))
    leaf_values = np.zeros((len(leaves), k), dtype=np.float64)
    for r, (cls, value) in enumerate(leaves):
        leaf_values[r, cls] = value
    return FlatForest.from_arrays({
        "base_kind": np.zeros(len(trees), np.int8),
        "base_node_start": np.array(node_start, np.int64),
        "base_leaf_start": np.array(leaf_start, np.int64),
        "node_feature": np.array(feat, np.int32),
        "node_threshold": np.array(thr, np.float32),
        "node_left": np.array(left, np.int32),
        "node_right": np.array(right, np.int32),
        "node_missing_right": np.array(nan_rights, np.int8),
        "leaf_values": leaf_values,
        "n_features": np.array(d, dtype=np.int64),
    })
