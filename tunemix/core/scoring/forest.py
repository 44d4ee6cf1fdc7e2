"""Flat forests of K-output base classifiers and the one kernel that scores them.

Imports numpy and numba only (the service uses it). Layout (docs/architecture.md): base
classifier b owns nodes ``base_node_start[b]:base_node_start[b+1]`` and leaves
``base_leaf_start[b]:base_leaf_start[b+1]``.

- ``base_kind[b] == 0``, a tree (a stump is a tree with one node and 2 leaves): node t tests
  ``x[node_feature[t]] >= node_threshold[t]`` -> ``node_right[t]`` else ``node_left[t]``; a child
  ``c >= 0`` is a node index relative to the base's first node (always greater than the parent's,
  so walks terminate), ``c < 0`` is leaf ``-c - 1`` relative to the base's first leaf. The root is
  the base's first node; a tree with no node has exactly one leaf (a constant).
- ``node_missing_right[t]`` (int8, 0 or 1) is where a missing value (NaN) of ``x[node_feature[t]]``
  goes: 1 to ``node_right[t]`` (for a product term: ``phi_j(x) = +1``), 0 to ``node_left[t]``
  (``phi_j(x) = -1``). 0 is what ``x >= t`` gives NaN, so a forest stored without this array
  (artifact schemas 1 to 3) sends every missing value left. How a node's direction is learned:
  ``docs/missing-values.md``.
- ``base_kind[b] == 1``, a product of m stumps (AdaBoost.MH products, Kégl and Busa-Fekete
  2009): its m nodes are the terms, it has one leaf row ``alpha * prod_j v_j`` and outputs
  ``prod_j phi_j(x) * leaf_row`` with ``phi_j(x) = +1 if x[f_j] >= t_j else -1``
  (``node_left``/``node_right`` are unused, stored as -1).

``leaf_values`` (float64, (n_leaves_total, K)) already include alpha, so the strong classifier
``f(x) = sum_b h_b(x)`` (Schapire and Singer 1999) is the plain sum of the bases' outputs.
``score_forest(forest, X, checkpoints)`` returns, for each checkpoint c, the running sum after
the first c bases: every snapshot of a boosting run is scored in the same single pass. The
kernel reads the trees through ``FlatForest.packed`` (``PackedNodes``: trees re-laid for a
branch-free walk, built once per forest); the flat arrays stay the stored format and the
contract.

Example: one stump on feature 2 at 0.5 with alpha 0.3 and votes (+1, -1)::

    base_kind = [0]; base_node_start = [0, 1]; base_leaf_start = [0, 2]
    node_feature = [2]; node_threshold = [0.5]; node_left = [-1]; node_right = [-2]
    leaf_values = [[-0.3, 0.3], [0.3, -0.3]]      # leaf 0 = x[2] < 0.5, leaf 1 = x[2] >= 0.5
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import numpy.typing as npt

from tunemix.core.scoring.forest_kernel import _score_run, block_features
from tunemix.core.scoring.packed import KIND_PRODUCT, KIND_TREE, PackedNodes
from tunemix.core.scoring.runtime import run_on_threads
from tunemix.core.threads import on_threads

__all__ = ["KIND_PRODUCT", "KIND_TREE", "PARALLEL_MIN_WORK", "FlatForest", "any_nan", "concatenate",
           "missing_wide", "score_forest"]


_ARRAY_SPEC: dict[str, tuple[type, int]] = {
    "base_kind": (np.int8, 1),
    "base_node_start": (np.int64, 1),
    "base_leaf_start": (np.int64, 1),
    "node_feature": (np.int32, 1),
    "node_threshold": (np.float32, 1),
    "node_left": (np.int32, 1),
    "node_right": (np.int32, 1),
    "leaf_values": (np.float64, 2),
    "n_features": (np.int64, 0),
    "node_missing_right": (np.int8, 1),
}
#: arrays a forest may be stored without, and the value of every entry then
_OPTIONAL_ZERO = ("node_missing_right",)

#: Below this many document-base pairs one thread scores the list: a parallel launch (waking the
#: pool's threads, which wait passively) costs more than it saves. Measured: 100 documents through
#: 300 8-leaf trees (30,000 pairs) took 5.2 ns per pair on one thread and 7.4 on two; through the
#: MQ2008 ensemble's 600 bases (60,000 pairs, OpenBLAS held to one thread) 0.43 ms on one thread
#: and 0.32 on two.
PARALLEL_MIN_WORK = 40_000


@dataclass(frozen=True, eq=False)
class FlatForest:
    """Plain-array forest (see module docstring). Construct through ``from_arrays`` to validate."""

    base_kind: npt.NDArray[np.int8]
    base_node_start: npt.NDArray[np.int64]
    base_leaf_start: npt.NDArray[np.int64]
    node_feature: npt.NDArray[np.int32]
    node_threshold: npt.NDArray[np.float32]
    node_left: npt.NDArray[np.int32]
    node_right: npt.NDArray[np.int32]
    leaf_values: npt.NDArray[np.float64]
    n_features: int
    node_missing_right: npt.NDArray[np.int8]

    @property
    def n_base(self) -> int:
        return int(self.base_kind.shape[0])

    @property
    def n_outputs(self) -> int:
        return int(self.leaf_values.shape[1])

    @cached_property
    def packed(self) -> PackedNodes:
        """The derived scoring layout (``PackedNodes``), built on first use and kept."""
        return PackedNodes.from_forest(self)

    @cached_property
    def _kernel_arrays(self) -> tuple[np.ndarray, ...]:
        """The scoring kernels' forest arguments, in their order (gathered once, not per call)."""
        p = self.packed
        return (p.base_route, self.base_node_start, self.base_leaf_start, self.node_feature,
                self.node_threshold, p.vnode, p.vthr, p.vleaf, p.base_vstart, p.base_depth,
                p.base_compact_at, p.base_small, p.small_off, p.small_thr, p.small_leaf, p.chunk_start,
                self.leaf_values, p.base_lane, p.leaf_lane, p.mask_keep)

    @cached_property
    def missing_columns(self) -> tuple[npt.NDArray[np.int64], FlatForest] | None:
        """How a forest with missing values to the right is scored: ``(right_cols, wide)``, or None
        when every node sends them left (``x >= t`` already does).

        ``right_cols`` are the features that some node sends right when missing; ``wide`` is this
        forest over ``n_features + len(right_cols)`` columns, those nodes reading column
        ``n_features + i`` (feature ``right_cols[i]`` with NaN read as +inf, which every
        threshold sends right: ``missing_wide``) and every node sending NaN left. For any input,
        ``score_forest(wide, missing_wide(X, right_cols))`` is this forest's score of ``X``; the
        kernels and the explanations then never test for NaN themselves."""
        right = self.node_missing_right != 0
        if not right.any():
            return None
        cols = np.unique(self.node_feature[right]).astype(np.int64)
        feat = self.node_feature.copy()
        feat[right] = (self.n_features + np.searchsorted(cols, self.node_feature[right])).astype(np.int32)
        arrays = self.to_arrays()
        arrays["node_feature"] = feat
        arrays["node_missing_right"] = np.zeros_like(self.node_missing_right)
        arrays["n_features"] = np.array(self.n_features + cols.shape[0], dtype=np.int64)
        return cols, FlatForest.from_arrays(arrays)

    def to_arrays(self) -> dict[str, np.ndarray]:
        """Plain arrays (for an ``.npz``); ``from_arrays`` reads them back."""
        out: dict[str, np.ndarray] = {
            name: np.ascontiguousarray(getattr(self, name)) for name in _ARRAY_SPEC
            if name != "n_features"
        }
        out["n_features"] = np.array(self.n_features, dtype=np.int64)
        return out

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray]) -> FlatForest:
        """Validate and wrap arrays; raise ValueError naming the bad array and entry."""
        missing = [name for name in _ARRAY_SPEC if name not in arrays and name not in _OPTIONAL_ZERO]
        if missing:
            raise ValueError(f"forest arrays are missing {missing}")
        conv: dict[str, np.ndarray] = {}
        for name, (dtype, ndim) in _ARRAY_SPEC.items():
            if name not in arrays:  # an optional array: every entry 0
                conv[name] = np.zeros(np.asarray(arrays["node_feature"]).shape[0], dtype=dtype)
                continue
            a = np.asarray(arrays[name])
            if a.ndim != ndim:
                raise ValueError(f"forest array {name!r} must be {ndim}-D, got shape {a.shape}")
            if a.dtype.kind not in "iuf" or (np.dtype(dtype).kind in "iu" and a.dtype.kind == "f"):
                raise ValueError(f"forest array {name!r} must be {np.dtype(dtype).name}, "
                                 f"got {a.dtype}")
            conv[name] = np.ascontiguousarray(a, dtype=dtype) if ndim else a.astype(dtype)
        _validate(conv)
        return cls(
            base_kind=conv["base_kind"],
            base_node_start=conv["base_node_start"],
            base_leaf_start=conv["base_leaf_start"],
            node_feature=conv["node_feature"],
            node_threshold=conv["node_threshold"],
            node_left=conv["node_left"],
            node_right=conv["node_right"],
            leaf_values=conv["leaf_values"],
            n_features=int(conv["n_features"]),
            node_missing_right=conv["node_missing_right"],
        )

    @classmethod
    def empty(cls, n_features: int, n_outputs: int) -> FlatForest:
        """A forest with no base classifier (scores are all zero)."""
        return cls.from_arrays({
            "base_kind": np.zeros(0, np.int8), "base_node_start": np.zeros(1, np.int64),
            "base_leaf_start": np.zeros(1, np.int64), "node_feature": np.zeros(0, np.int32),
            "node_threshold": np.zeros(0, np.float32), "node_left": np.zeros(0, np.int32),
            "node_right": np.zeros(0, np.int32),
            "leaf_values": np.zeros((0, n_outputs), np.float64),
            "n_features": np.array(n_features),
        })

    def truncate(self, n_base: int) -> FlatForest:
        """The forest of the first ``n_base`` base classifiers."""
        if not 0 <= n_base <= self.n_base:
            raise ValueError(f"n_base must be in 0..{self.n_base}, got {n_base}")
        ns = int(self.base_node_start[n_base])
        ls = int(self.base_leaf_start[n_base])
        return FlatForest(
            base_kind=self.base_kind[:n_base].copy(),
            base_node_start=self.base_node_start[: n_base + 1].copy(),
            base_leaf_start=self.base_leaf_start[: n_base + 1].copy(),
            node_feature=self.node_feature[:ns].copy(),
            node_threshold=self.node_threshold[:ns].copy(),
            node_left=self.node_left[:ns].copy(),
            node_right=self.node_right[:ns].copy(),
            leaf_values=self.leaf_values[:ls].copy(),
            n_features=self.n_features,
            node_missing_right=self.node_missing_right[:ns].copy(),
        )


def _validate(a: dict[str, np.ndarray]) -> None:
    kind = a["base_kind"]
    nb = kind.shape[0]
    ns, ls = a["base_node_start"], a["base_leaf_start"]
    n_nodes = a["node_feature"].shape[0]
    n_leaves, K = a["leaf_values"].shape
    d = int(a["n_features"])
    if d < 0:
        raise ValueError(f"n_features must be non-negative, got {d}")
    if K < 1:
        raise ValueError("leaf_values must have at least one output column")
    for name in ("node_threshold", "node_left", "node_right", "node_missing_right"):
        if a[name].shape[0] != n_nodes:
            raise ValueError(f"shape mismatch: {name} has {a[name].shape[0]} entries, "
                             f"node_feature has {n_nodes}")
    for name, total in (("base_node_start", n_nodes), ("base_leaf_start", n_leaves)):
        st = a[name]
        if st.shape[0] != nb + 1:
            raise ValueError(f"shape mismatch: {name} must have n_base + 1 = {nb + 1} entries, "
                             f"got {st.shape[0]}")
        if st[0] != 0 or st[-1] != total or np.any(np.diff(st) < 0):
            raise ValueError(f"{name} must rise from 0 to {total} (the array length), got "
                             f"{st[0]}..{st[-1]}")
    bad = np.flatnonzero((kind != KIND_TREE) & (kind != KIND_PRODUCT))
    if bad.size:
        raise ValueError(f"base_kind[{bad[0]}] = {kind[bad[0]]} is neither 0 (tree) nor 1 "
                         "(product)")
    if not np.all(np.isfinite(a["leaf_values"])):
        raise ValueError("leaf_values contain NaN or infinity")
    if np.any(np.isnan(a["node_threshold"])):
        raise ValueError("node_threshold contains NaN")
    bad = np.flatnonzero((a["node_missing_right"] != 0) & (a["node_missing_right"] != 1))
    if bad.size:
        raise ValueError(f"node_missing_right[{bad[0]}] = {a['node_missing_right'][bad[0]]} is neither 0 (left) "
                         "nor 1 (right)")
    feat = a["node_feature"]
    bad = np.flatnonzero((feat < 0) | (feat >= d))
    if bad.size:
        raise ValueError(f"index out of range: node_feature[{bad[0]}] = {feat[bad[0]]} "
                         f"(n_features = {d})")
    node_count = np.diff(ns)
    leaf_count = np.diff(ls)
    prod = kind == KIND_PRODUCT
    bad = np.flatnonzero(prod & (leaf_count != 1))
    if bad.size:
        raise ValueError(f"product base {bad[0]} must have exactly 1 leaf, has "
                         f"{leaf_count[bad[0]]}")
    tree = ~prod
    bad = np.flatnonzero(tree & (leaf_count != node_count + 1))
    if bad.size:
        raise ValueError(f"tree base {bad[0]} has {node_count[bad[0]]} nodes and "
                         f"{leaf_count[bad[0]]} leaves; a binary tree needs nodes + 1")
    # children of tree nodes: relative indices, in range, after their parent, each used once
    base_of_node = np.repeat(np.arange(nb), node_count)
    local = np.arange(n_nodes) - ns[base_of_node]
    in_tree = tree[base_of_node]
    node_seen = np.zeros(n_nodes, dtype=np.int64)
    leaf_seen = np.zeros(n_leaves, dtype=np.int64)
    for side in ("node_left", "node_right"):
        c = a[side].astype(np.int64)
        is_node = in_tree & (c >= 0)
        is_leaf = in_tree & (c < 0)
        bad = np.flatnonzero(is_node & ((c <= local) | (c >= node_count[base_of_node])))
        if bad.size:
            raise ValueError(f"index out of range: {side}[{bad[0]}] = {c[bad[0]]} must point to a "
                             f"later node of base {base_of_node[bad[0]]} "
                             f"(it has {node_count[base_of_node[bad[0]]]} nodes)")
        leaf_rel = -c - 1
        bad = np.flatnonzero(is_leaf & (leaf_rel >= leaf_count[base_of_node]))
        if bad.size:
            raise ValueError(f"index out of range: {side}[{bad[0]}] = {c[bad[0]]} names leaf "
                             f"{leaf_rel[bad[0]]} of base {base_of_node[bad[0]]}, which has "
                             f"{leaf_count[base_of_node[bad[0]]]} leaves")
        np.add.at(node_seen, (ns[base_of_node] + c)[is_node], 1)
        np.add.at(leaf_seen, (ls[base_of_node] + leaf_rel)[is_leaf], 1)
    is_root = local == 0
    bad = np.flatnonzero(in_tree & (node_seen != np.where(is_root, 0, 1)))
    if bad.size:
        raise ValueError(f"tree node {bad[0]} is referenced {node_seen[bad[0]]} times; every "
                         "non-root node must have exactly one parent")
    base_of_leaf = np.repeat(np.arange(nb), leaf_count)
    leaf_in_tree = tree[base_of_leaf] & (node_count[base_of_leaf] > 0)
    bad = np.flatnonzero(leaf_in_tree & (leaf_seen != 1))
    if bad.size:
        raise ValueError(f"tree leaf {bad[0]} is referenced {leaf_seen[bad[0]]} times; every "
                         "leaf must have exactly one parent")


def concatenate(forests: Sequence[FlatForest]) -> FlatForest:
    """One forest holding the bases of ``forests`` in order (scored in one pass).

    All must share ``n_features`` and ``n_outputs``. Member m's own scores are the difference of
    the running sums at checkpoints ``sum(n_base[:m])`` and ``sum(n_base[:m+1])``.
    """
    if not forests:
        raise ValueError("concatenate needs at least one forest")
    d = forests[0].n_features
    K = forests[0].n_outputs
    for i, f in enumerate(forests):
        if f.n_features != d or f.n_outputs != K:
            raise ValueError(f"forest {i} has n_features={f.n_features}, n_outputs={f.n_outputs};"
                             f" forest 0 has {d}, {K}")
    node_off = np.cumsum([0] + [f.node_feature.shape[0] for f in forests])
    leaf_off = np.cumsum([0] + [f.leaf_values.shape[0] for f in forests])
    return FlatForest(
        base_kind=np.concatenate([f.base_kind for f in forests]),
        base_node_start=np.concatenate(
            [np.zeros(1, np.int64)]
            + [f.base_node_start[1:] + node_off[i] for i, f in enumerate(forests)]
        ),
        base_leaf_start=np.concatenate(
            [np.zeros(1, np.int64)]
            + [f.base_leaf_start[1:] + leaf_off[i] for i, f in enumerate(forests)]
        ),
        node_feature=np.concatenate([f.node_feature for f in forests]),
        node_threshold=np.concatenate([f.node_threshold for f in forests]),
        node_left=np.concatenate([f.node_left for f in forests]),
        node_right=np.concatenate([f.node_right for f in forests]),
        leaf_values=np.concatenate([f.leaf_values for f in forests], axis=0),
        n_features=d,
        node_missing_right=np.concatenate([f.node_missing_right for f in forests]),
    )


def any_nan(X: npt.NDArray[Any]) -> bool:
    """Whether ``X`` holds a NaN: its minimum, which numpy's SIMD loop makes NaN when any value is
    (3-4 us for 1,000 x 46 float32 values, a third of a scalar loop's time, and no temporary)."""
    return X.size > 0 and bool(np.isnan(X.min()))


def missing_wide(X: npt.NDArray[np.float32], right_cols: npt.NDArray[np.int64]) -> npt.NDArray[np.float32]:
    """``X`` (n, d) followed by its columns ``right_cols`` with NaN read as +inf (the input of
    ``FlatForest.missing_columns``' wide forest): C-contiguous float32 (n, d + len(right_cols))."""
    n, d = X.shape
    out = np.empty((n, d + right_cols.shape[0]), dtype=np.float32)
    out[:, :d] = X
    cols = X[:, right_cols]
    cols[np.isnan(cols)] = np.inf
    out[:, d:] = cols
    return out


def score_forest(
    forest: FlatForest,
    X: npt.ArrayLike,
    checkpoints: Sequence[int] | npt.ArrayLike | None = None,
) -> npt.NDArray[np.float64]:
    """Running sums of the bases' outputs: ``out[i, c, :] = sum_{b < checkpoints[c]} h_b(x_i)``.

    ``X`` is (n, n_features) float32 (converted if needed); ``checkpoints`` are base counts in
    0..n_base, non-decreasing (default: ``[n_base]``). Returns float64 (n, len(checkpoints), K).

    The forest's fixed chunks (``PackedNodes.chunk_start``) times blocks of ``DOC_BLOCK``
    documents are independent tasks, spread over ``get_scoring_threads()`` threads when the
    list is big enough (``PARALLEL_MIN_WORK``); each chunk is summed from zero and the chunks are
    added in order, so the result is the same for any thread count and any list length. A
    parallel launch already in progress in another Python thread makes this call score on its own
    thread instead of waiting. A missing value (NaN) goes the way its node's
    ``node_missing_right`` says (``FlatForest.missing_columns``); infinities compare as numbers.
    """
    Xa = np.ascontiguousarray(X, dtype=np.float32)
    if Xa.ndim != 2 or Xa.shape[1] != forest.n_features:
        raise ValueError(f"X must have shape (n, {forest.n_features}), got {Xa.shape}")
    wide = forest.missing_columns
    if wide is not None and any_nan(Xa):
        # some node sends a missing value right: its feature is read again as a column of its own
        # (NaN as +inf); the kernel is the same, and the chunks too (same bases, same order)
        forest, Xa = wide[1], missing_wide(Xa, wide[0])
    p = forest.packed
    ck, ck_chunk, ck_first = p.checkpoint_plan(checkpoints)
    n = Xa.shape[0]
    out = np.zeros((n, ck.shape[0], forest.n_outputs), dtype=np.float64)
    if n == 0 or ck.shape[0] == 0:
        return out
    totals = np.empty((p.chunk_start.shape[0] - 1, n, forest.n_outputs), dtype=np.float64)
    args = (block_features(Xa), np.int64(Xa.shape[1]), *forest._kernel_arrays, ck, ck_chunk, ck_first, out,
            totals, (0,) * forest.n_outputs)
    counter = np.zeros(2, dtype=np.int64)
    run_on_threads(n, n * forest.n_base >= PARALLEL_MIN_WORK, lambda: _score_run(*args, counter, 2),  # type: ignore[call-arg]
                   lambda threads: _score_parallel(args, counter, threads))
    return out


def _score_parallel(args: tuple[Any, ...], counter: npt.NDArray[np.int64], threads: int) -> None:
    """``_score_run`` on ``threads`` threads sharing ``counter``: every task taken before any
    combine starts (the combines read every chunk's totals)."""
    on_threads(lambda _p: _score_run(*args, counter, 0), threads)  # type: ignore[call-arg]
    on_threads(lambda _p: _score_run(*args, counter, 1), threads)  # type: ignore[call-arg]


