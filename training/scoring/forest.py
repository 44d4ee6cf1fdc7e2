"""Flat forests of K-output base classifiers and the one kernel that scores them.

Imports numpy and numba only (the service uses it). Layout (docs/architecture.md): base
classifier b owns nodes ``base_node_start[b]:base_node_start[b+1]`` and leaves
``base_leaf_start[b]:base_leaf_start[b+1]``.

- ``base_kind[b] == 0``, a tree (a stump is a tree with one node and 2 leaves): node t tests
  ``x[node_feature[t]] >= node_threshold[t]`` -> ``node_right[t]`` else ``node_left[t]``; a child
  ``c >= 0`` is a node index relative to the base's first node (always greater than the parent's,
  so walks terminate), ``c < 0`` is leaf ``-c - 1`` relative to the base's first leaf. The root is
  the base's first node; a tree with no node has exactly one leaf (a constant).
- ``base_kind[b] == 1``, a product of m stumps (AdaBoost.MH products, Kégl and Busa-Fekete
  2009): its m nodes are the terms, it has one leaf row ``alpha * prod_j v_j`` and outputs
  ``prod_j phi_j(x) * leaf_row`` with ``phi_j(x) = +1 if x[f_j] >= t_j else -1``
  (``node_left``/``node_right`` are unused, stored as -1).

``leaf_values`` (float64, (n_leaves_total, K)) already include alpha, so the strong classifier
``f(x) = sum_b h_b(x)`` (Schapire and Singer 1999) is the plain sum of the bases' outputs.
``score_forest(forest, X, checkpoints)`` returns, for each checkpoint c, the running sum after
the first c bases: every snapshot of a boosting run is scored in the same single pass. The
kernel reads the nodes through ``FlatForest.packed`` (``PackedNodes``: the four node arrays
interleaved, built on first use); the flat arrays stay the stored format and the contract.

Example: one stump on feature 2 at 0.5 with alpha 0.3 and votes (+1, -1)::

    base_kind = [0]; base_node_start = [0, 1]; base_leaf_start = [0, 2]
    node_feature = [2]; node_threshold = [0.5]; node_left = [-1]; node_right = [-2]
    leaf_values = [[-0.3, 0.3], [0.3, -0.3]]      # leaf 0 = x[2] < 0.5, leaf 1 = x[2] >= 0.5
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import numpy.typing as npt
import numba
from numba import njit

KIND_TREE = 0
KIND_PRODUCT = 1

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
}

#: Documents scored together: each tree is walked by the whole block at once (independent walks
#: overlap in the CPU), and the block's running sums stay in cache while the forest streams.
DOC_BLOCK = 128


@dataclass(frozen=True, eq=False)
class PackedNodes:
    """Scoring layout derived from a ``FlatForest`` (never stored: the flat arrays are the truth).

    One record of four 32-bit words per node, ``node_int[t] = (node_feature[t], threshold bits,
    node_left[t], node_right[t])``, with ``node_thr = node_int.view(float32)`` (column 1 is
    ``node_threshold[t]``): one node's test and both children share a cache line (an array of
    structs instead of four arrays). Node indices, base offsets and the child encoding (c >= 0 a
    node relative to the base's first node, c < 0 leaf -c - 1) are the flat forest's.

    Example: the module docstring's stump becomes ``node_int = [[2, bits(0.5), -1, -2]]``.
    """

    node_int: npt.NDArray[np.int32]
    node_thr: npt.NDArray[np.float32]

    @classmethod
    def from_forest(cls, forest: FlatForest) -> PackedNodes:
        """Interleave ``forest``'s node arrays."""
        node_int = np.empty((forest.node_feature.shape[0], 4), dtype=np.int32)
        node_thr = node_int.view(np.float32)
        node_int[:, 0] = forest.node_feature
        node_thr[:, 1] = forest.node_threshold
        node_int[:, 2] = forest.node_left
        node_int[:, 3] = forest.node_right
        return cls(node_int=node_int, node_thr=node_thr)


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
        missing = [name for name in _ARRAY_SPEC if name not in arrays]
        if missing:
            raise ValueError(f"forest arrays are missing {missing}")
        conv: dict[str, np.ndarray] = {}
        for name, (dtype, ndim) in _ARRAY_SPEC.items():
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
    for name in ("node_threshold", "node_left", "node_right"):
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
    )


@njit(cache=True)
def _score_kernel(X, base_kind, base_node_start, base_leaf_start, node_int, node_thr,
                  leaf_values, checkpoints, out, k_lanes):  # pragma: no cover
    """``out[i, c, :] = sum_{b < checkpoints[c]} h_b(x_i)`` over the ``PackedNodes`` records.

    Documents go in blocks of ``DOC_BLOCK``. A tree is walked by the whole block at once, one
    level per sweep over the documents not yet at a leaf (a compacted list): the walks are
    independent, so the CPU overlaps their memory loads instead of waiting on one walk's chain
    of dependent loads. Then each document adds its leaf row. ``k_lanes`` is a tuple of length
    K (compile-time K: the per-output loops unroll).
    """
    n = X.shape[0]
    K = len(k_lanes)
    n_base = base_kind.shape[0]
    n_ck = checkpoints.shape[0]
    acc = np.zeros((DOC_BLOCK, K))
    at = np.zeros(DOC_BLOCK, dtype=np.int64)  # where each document is: node c >= 0, leaf -c-1
    act_doc = np.zeros(DOC_BLOCK, dtype=np.int64)  # the documents still walking ...
    act_at = np.zeros(DOC_BLOCK, dtype=np.int64)  # ... and their nodes
    for i0 in range(0, n, DOC_BLOCK):
        nb = min(DOC_BLOCK, n - i0)
        acc[:, :] = 0.0
        ci = 0
        for b in range(n_base + 1):
            while ci < n_ck and checkpoints[ci] == b:
                for j in range(nb):
                    for l in range(K):
                        out[i0 + j, ci, l] = acc[j, l]
                ci += 1
            if b == n_base:
                break
            ns = base_node_start[b]
            ne = base_node_start[b + 1]
            ls = base_leaf_start[b]
            if base_kind[b] == 0:
                if ne == ns:
                    for j in range(nb):
                        for l in range(K):
                            acc[j, l] += leaf_values[ls, l]
                    continue
                # level 1: every document tests the root
                f0 = node_int[ns, 0]
                t0 = node_thr[ns, 1]
                go_left = node_int[ns, 2]
                go_right = node_int[ns, 3]
                w = 0
                for j in range(nb):
                    c = go_right if X[i0 + j, f0] >= t0 else go_left
                    at[j] = c
                    act_doc[w] = j
                    act_at[w] = c
                    w += c >= 0
                n_active = w
                # deeper levels: one sweep per level over the documents not yet at a leaf
                while n_active > 0:
                    w = 0
                    for a in range(n_active):
                        j = act_doc[a]
                        g = ns + act_at[a]
                        if X[i0 + j, node_int[g, 0]] >= node_thr[g, 1]:
                            c = node_int[g, 3]
                        else:
                            c = node_int[g, 2]
                        at[j] = c
                        act_doc[w] = j
                        act_at[w] = c
                        w += c >= 0
                    n_active = w
                for j in range(nb):
                    leaf = ls - at[j] - 1
                    for l in range(K):
                        acc[j, l] += leaf_values[leaf, l]
            else:
                for j in range(nb):
                    sg = 1.0
                    for g in range(ns, ne):
                        if not X[i0 + j, node_int[g, 0]] >= node_thr[g, 1]:
                            sg = -sg
                    for l in range(K):
                        acc[j, l] += sg * leaf_values[ls, l]


def score_forest(
    forest: FlatForest,
    X: npt.ArrayLike,
    checkpoints: Sequence[int] | npt.ArrayLike | None = None,
) -> npt.NDArray[np.float64]:
    """Running sums of the bases' outputs: ``out[i, c, :] = sum_{b < checkpoints[c]} h_b(x_i)``.

    ``X`` is (n, n_features) float32 (converted if needed); ``checkpoints`` are base counts in
    0..n_base, non-decreasing (default: ``[n_base]``). Returns float64 (n, len(checkpoints), K).
    Single-threaded; documents are scored in blocks of ``DOC_BLOCK`` while the forest streams
    through the cache once per block, through the derived layout ``forest.packed``.
    """
    Xa = np.ascontiguousarray(X, dtype=np.float32)
    if Xa.ndim != 2 or Xa.shape[1] != forest.n_features:
        raise ValueError(f"X must have shape (n, {forest.n_features}), got {Xa.shape}")
    if checkpoints is None:
        ck = np.array([forest.n_base], dtype=np.int64)
    else:
        ck = np.ascontiguousarray(checkpoints, dtype=np.int64).reshape(-1)
        if ck.size and (ck.min() < 0 or ck.max() > forest.n_base):
            raise ValueError(f"checkpoints must lie in 0..{forest.n_base} (the number of base "
                             f"classifiers), got {ck.min()}..{ck.max()}")
        if np.any(np.diff(ck) < 0):
            raise ValueError("checkpoints must be non-decreasing")
    out = np.zeros((Xa.shape[0], ck.shape[0], forest.n_outputs), dtype=np.float64)
    if Xa.shape[0] == 0 or ck.shape[0] == 0:
        return out
    packed = forest.packed
    _score_kernel(Xa, forest.base_kind, forest.base_node_start, forest.base_leaf_start,
                  packed.node_int, packed.node_thr, forest.leaf_values, ck, out, (0,) * forest.n_outputs)
    return out


_scoring_threads = 0  # 0: every numba thread (NUMBA_NUM_THREADS); set by the service per worker


def set_scoring_threads(n: int) -> None:
    """Threads ``score_forest`` may use in this process (at most numba's pool size).

    Several uvicorn workers on one machine each take ``cores // workers`` so that they do not
    oversubscribe the cores; results do not depend on this number.
    """
    global _scoring_threads
    if n < 1:
        raise ValueError(f"scoring threads must be >= 1, got {n}")
    _scoring_threads = n


def get_scoring_threads() -> int:
    """The threads ``score_forest`` uses: the setting, capped by numba's thread pool."""
    pool = int(numba.config.NUMBA_NUM_THREADS)  # type: ignore[attr-defined]
    return pool if _scoring_threads == 0 else min(_scoring_threads, pool)
