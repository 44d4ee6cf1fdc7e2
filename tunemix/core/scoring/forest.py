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
kernel reads the trees through ``FlatForest.packed`` (``PackedNodes``: trees re-laid for a
branch-free walk, built once per forest); the flat arrays stay the stored format and the
contract.

Example: one stump on feature 2 at 0.5 with alpha 0.3 and votes (+1, -1)::

    base_kind = [0]; base_node_start = [0, 1]; base_leaf_start = [0, 2]
    node_feature = [2]; node_threshold = [0.5]; node_left = [-1]; node_right = [-2]
    leaf_values = [[-0.3, 0.3], [0.3, -0.3]]      # leaf 0 = x[2] < 0.5, leaf 1 = x[2] >= 0.5
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numba
import numpy as np
import numpy.typing as npt
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

import tunemix.core.numba_cache  # noqa: F401 - numba's cache written under a lock (tunemix/core/numba_cache.py)
from tunemix.core.threads import on_threads

# The OpenMP wait policy, BLAS threads and scoring threads are set once per process by
# ``tunemix.core.scoring.runtime.configure``; nothing here writes the environment.

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

#: Documents scored together: each tree is walked by the whole block, and the block's running
#: sums stay in cache while the forest streams through. 128 against 64, interleaved in-process:
#: a 100-document list is one block instead of a block and a short one, 3.84 against 4.08 ns per
#: document and tree through a LightGBM 8-leaf forest, 8.96 against 10.24 ns per document and
#: base through the MQ2008 ensemble (one thread); 1,000 documents the same within 4%.
DOC_BLOCK = 128

#: The forest is cut once, at load time, into chunks of equal cost, about this many nodes each
#: (a fixed cut, so that results do not depend on the thread count or the list length). A task is
#: one document block times one chunk; the chunks' sums are then added in order.
CHUNK_NODES = 2048

#: Trees deeper than ``COMPACT_MIN_DEPTH`` (lopsided 64-leaf trees reach depth 20) are walked
#: ``COMPACT_AT`` levels by the whole block; then the documents not yet on a leaf are gathered
#: into a list and only they take the remaining steps. On the MQ2008 ensemble's 64-leaf trees
#: (mean depth 11.7) this cuts the steps taken by about a fifth (measured on its test queries).
COMPACT_AT = 7
COMPACT_MIN_DEPTH = 9

#: Trees of at most ``SMALL_NODES`` internal nodes (8-leaf trees and smaller) and depth at least
#: ``SMALL_MIN_DEPTH`` are scored as a table: every node's test is evaluated for the whole block
#: (one contiguous row of the block per node, no gather), the tests' results form a bit mask per
#: document (bit k: node k of the tree, in its stored order, says ``>=``), and a table of
#: ``2**SMALL_NODES`` entries made at load time maps the mask to the leaf the walk would reach.
#: A lopsided 8-leaf tree (LightGBM's leaf-wise trees reach depth 7) costs 7 vector tests and one
#: lookup instead of up to 7 dependent gathers. (A per-tree table, not QuickScorer's per-feature
#: bit vectors.)
SMALL_NODES = 7  # the kernel's table pass is written out for exactly 7 tests (``_score_task``)
SMALL_MIN_DEPTH = 3
#: A small tree's cost in walk steps, for cutting the forest into chunks of equal cost: on one
#: thread a LightGBM 8-leaf forest (all tables) took 1.45 ns per document per tree and a 64-leaf
#: one about 1 ns per step of the walk. Counted as walks (4-8 steps), the MQ2008 ensemble's 240
#: tables made the chunk-by-chunk split uneven: two threads 3-7% slower at 100-1,000 documents.
SMALL_TABLE_STEPS = 1.5

#: Trees not scored as a table with at most ``MASK_LEAVES`` leaves (LambdaMART's and McRank's
#: 15- and 31-leaf trees) and depth at least ``SMALL_MIN_DEPTH`` are scored by leaf masks: a
#: 32-bit mask per document holds the tree's leaves still possible; every node's test is made
#: for the whole block (one contiguous row of the block per node, no gather, no dependence
#: between nodes: the compiler vectorises it) and clears the leaves of the side not taken (the
#: node's ``PackedNodes.mask_keep``); the one leaf left is the walk's. (The
#: exit-leaf idea of QuickScorer, Lucchese et al. 2015, per tree and with both sides cleared, so
#: that no node order is needed.) Measured on the MSLR default's 356 such trees (one thread,
#: a scratch A/B in which the walk side also paid ``score_forest``'s set-up): 0.39 against 0.59
#: ms at 100 documents, 1.81 against 5.50 ms at 1,000.
MASK_LEAVES = 32
#: ``PackedNodes.base_route`` of a tree scored by leaf masks (``KIND_TREE`` and ``KIND_PRODUCT``
#: are the other routes)
ROUTE_MASK = 2
#: A mask tree's cost in walk steps per node, for the chunk cut: about 0.18 ns per node and
#: document against about 1.7 per step of a walk (the same A/B).
MASK_NODE_STEPS = 0.11

#: Below this many document-base pairs one thread scores the list: a parallel launch (waking the
#: pool's threads, which wait passively) costs more than it saves. Measured: 100 documents through
#: 300 8-leaf trees (30,000 pairs) took 5.2 ns per pair on one thread and 7.4 on two; through the
#: MQ2008 ensemble's 600 bases (60,000 pairs, OpenBLAS held to one thread) 0.43 ms on one thread
#: and 0.32 on two.
PARALLEL_MIN_WORK = 40_000

#: Checkpoint lists a forest keeps checked and placed (``PackedNodes.checkpoint_plan``).
_CK_PLANS_KEPT = 16


@dataclass(frozen=True, eq=False)
class PackedNodes:
    """Scoring layout derived from a ``FlatForest`` (never stored: the flat arrays are the truth).

    Trees are re-laid breadth first with the two children of a node side by side, and leaves are
    nodes too, in four parallel arrays ``vfeat``, ``vthr``, ``vleft``, ``vleaf``. A step is
    ``r = vleft[r] + (x[vfeat[r]] >= vthr[r])``, the same instructions for every document (no
    branch to mispredict); a leaf has threshold NaN (the test is false for every x, NaN and
    infinities included) and ``vleft`` pointing at itself, so a walk of exactly
    ``base_depth[b]`` steps ends on the leaf for every document (Asadi, Lin and de Vries 2014,
    "VPred"); ``vleaf[r]`` is then the leaf's row in ``leaf_values`` (-1 for a node). Indices
    are absolute. Products keep the flat arrays (their terms are ``node_feature`` and
    ``node_threshold`` of their node range).

    The kernel reads ``vfeat`` and ``vleft`` through one word per entry, ``vnode[r] =
    (vfeat[r] * DOC_BLOCK) << 32 | vleft[r]``: the offset of the feature's row in a feature-major
    document block (``block_features``) and the left child, one load instead of two.

    ``chunk_start`` cuts the bases into chunks of about ``CHUNK_NODES`` nodes (see
    ``score_forest``).

    Small trees (``SMALL_NODES``) are also scored as tables: ``base_small[b]`` is tree b's row
    in ``small_off`` (node k's feature row offset in a block, ``feature * DOC_BLOCK``),
    ``small_thr`` (node k's threshold, NaN past the tree's nodes) and ``small_leaf`` (for every
    mask of node tests, the absolute leaf row the walk reaches), or -1 for a tree that walks.

    ``base_route[b]`` is the path the kernel takes for base b: its ``base_kind`` (``KIND_TREE``
    walks, ``KIND_PRODUCT``), or ``ROUTE_MASK`` for a tree scored by leaf masks
    (``MASK_LEAVES``); a table (``base_small[b] >= 0``) goes first. A mask tree's node k has
    ``mask_keep[k, 0]`` (the tree's leaves not under its left child, kept when the test says
    ``>=``) and ``mask_keep[k, 1]`` (not under its right child), indexed like the flat node
    arrays, bit i standing for the tree's leaf i.

    Single-output bases (a LambdaMART or McRank tree fills one output of K): ``base_lane[b]`` is
    the one output column in which base b has a non-zero leaf value (0 when it has none), or -1
    when it has several; ``leaf_lane[v]`` is leaf row v's value in its base's lane (its own
    contiguous float64 row, a fifth of ``leaf_values``' bytes at K = 5). The kernel adds only
    that lane: the other lanes would add exactly zero to a sum that starts at +0.0 (a sum of
    doubles from +0.0 is never -0.0 under round to nearest, and ``s + (+-0.0) == s`` bit for bit
    for every other ``s``), so the result is the same to the last bit.

    Example: the module docstring's stump becomes ``vfeat = [2, 0, 0]``, ``vthr = [0.5, NaN,
    NaN]``, ``vleft = [1, 1, 2]``, ``vleaf = [-1, 0, 1]``, with depth 1.
    """

    vfeat: npt.NDArray[np.int32]
    vthr: npt.NDArray[np.float32]
    vleft: npt.NDArray[np.int32]
    vleaf: npt.NDArray[np.int32]
    vnode: npt.NDArray[np.int64]
    base_vstart: npt.NDArray[np.int64]
    base_depth: npt.NDArray[np.int32]
    base_compact_at: npt.NDArray[np.int32]
    chunk_start: npt.NDArray[np.int64]
    base_small: npt.NDArray[np.int32]
    small_off: npt.NDArray[np.int64]
    small_thr: npt.NDArray[np.float32]
    small_leaf: npt.NDArray[np.int32]
    base_lane: npt.NDArray[np.int32]
    leaf_lane: npt.NDArray[np.float64]
    base_route: npt.NDArray[np.int8]
    mask_keep: npt.NDArray[np.uint32]
    #: checkpoint lists already seen (their bytes) -> the checked list and where each falls among
    #: the chunks (``checkpoint_plan``): a model passes the same list on every call
    _ck_plans: dict[bytes | None, tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]] = \
        field(default_factory=dict, repr=False)

    def checkpoint_plan(self, checkpoints: Sequence[int] | npt.ArrayLike | None
                        ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """(checkpoints, ck_chunk, ck_first) for ``score_forest``: the checkpoints checked
        (base counts in 0..n_base, non-decreasing; None: ``[n_base]``), the chunk each falls
        in (``n_chunks``: after the last base) and each chunk's first checkpoint. Kept per list
        (at most ``_CK_PLANS_KEPT``), so that a model's repeated calls skip the checks."""
        ck = None if checkpoints is None else np.ascontiguousarray(checkpoints, dtype=np.int64).reshape(-1)
        key = None if ck is None else ck.tobytes()
        plan = self._ck_plans.get(key)
        if plan is not None:
            return plan
        n_base = int(self.chunk_start[-1])  # the chunks end after the last base
        if ck is None:
            ck = np.array([n_base], dtype=np.int64)
        elif ck.size and (ck.min() < 0 or ck.max() > n_base):
            raise ValueError(f"checkpoints must lie in 0..{n_base} (the number of base "
                             f"classifiers), got {ck.min()}..{ck.max()}")
        elif np.any(np.diff(ck) < 0):
            raise ValueError("checkpoints must be non-decreasing")
        n_chunks = self.chunk_start.shape[0] - 1
        ck_chunk = np.searchsorted(self.chunk_start[1:], ck, side="right").astype(np.int64)
        ck_first = np.searchsorted(ck_chunk, np.arange(n_chunks), side="left").astype(np.int64)
        plan = (ck.copy(), ck_chunk, ck_first)
        for a in plan:
            a.flags.writeable = False
        if len(self._ck_plans) >= _CK_PLANS_KEPT:
            self._ck_plans.clear()
        self._ck_plans[key] = plan
        return plan

    @classmethod
    def from_forest(cls, forest: FlatForest) -> PackedNodes:
        """Re-lay ``forest``'s trees (a numba pass: fast enough to run on every load)."""
        kind = forest.base_kind
        n_nodes = np.diff(forest.base_node_start)
        size = np.where(kind == KIND_TREE, 2 * n_nodes + 1, 0)
        base_vstart = np.zeros(forest.n_base + 1, dtype=np.int64)
        np.cumsum(size, out=base_vstart[1:])
        total = int(base_vstart[-1])
        if total >= 2**31:
            raise ValueError(f"forest too large to score: {total} tree nodes and leaves")
        vfeat = np.zeros(total, dtype=np.int32)
        vthr = np.zeros(total, dtype=np.float32)
        vleft = np.zeros(total, dtype=np.int32)
        vleaf = np.zeros(total, dtype=np.int32)
        base_depth = np.zeros(forest.n_base, dtype=np.int32)
        _relayout(kind, forest.base_node_start, forest.base_leaf_start, forest.node_feature,
                  forest.node_threshold, forest.node_left, forest.node_right, base_vstart, vfeat,
                  vthr, vleft, vleaf, base_depth)
        vnode = (vfeat.astype(np.int64) * DOC_BLOCK << 32) | vleft.astype(np.int64)
        # levels walked by the whole block before the unfinished documents are compacted
        compact_at = np.where(base_depth > COMPACT_MIN_DEPTH, COMPACT_AT, base_depth).astype(np.int32)
        # chunks of equal cost, never a small remainder (threads split the tasks chunk by chunk,
        # so a short or cheap chunk leaves one thread idle). The cost of a base is the steps a
        # document takes through it, not its node count: a 32-leaf tree of depth 10 costs about
        # twice an 8-leaf tree of depth 5, not four times (cut by nodes, a forest of McRank's
        # 8- and 32-leaf trees gave one thread twice the other's work: no gain from 2 threads).
        # A small tree (scored as a table, below) costs SMALL_TABLE_STEPS.
        small = (kind == KIND_TREE) & (n_nodes <= SMALL_NODES) & (base_depth >= SMALL_MIN_DEPTH)
        masked = (kind == KIND_TREE) & ~small & (n_nodes < MASK_LEAVES) & (base_depth >= SMALL_MIN_DEPTH)
        steps = np.where(kind == KIND_TREE,
                         compact_at + 0.5 * (np.maximum(base_depth, 1) - compact_at) + 1.0,
                         n_nodes + 1.0)
        steps[small] = SMALL_TABLE_STEPS
        steps[masked] = MASK_NODE_STEPS * n_nodes[masked] + 1.0
        cum = np.cumsum(steps)
        total_cost = float(cum[-1]) if cum.size else 0.0
        n_nodes_total = int(np.maximum(n_nodes, 1).sum())
        n_chunks = max(1, round(n_nodes_total / CHUNK_NODES))
        cuts = np.searchsorted(cum, total_cost * np.arange(1, n_chunks) / n_chunks, side="right")
        chunk_start = np.unique(np.concatenate([[0], cuts, [forest.n_base]])).astype(np.int64)
        # trees scored as a table (SMALL_NODES): their row in the small arrays, else -1
        n_small = int(small.sum())
        base_small = np.full(forest.n_base, -1, dtype=np.int32)
        base_small[small] = np.arange(n_small, dtype=np.int32)
        small_off = np.zeros((n_small, SMALL_NODES), dtype=np.int64)
        small_thr = np.full((n_small, SMALL_NODES), np.nan, dtype=np.float32)
        small_leaf = np.zeros((n_small, 1 << SMALL_NODES), dtype=np.int32)
        _small_tables(np.flatnonzero(small).astype(np.int64), forest.base_node_start, forest.base_leaf_start,
                      forest.node_feature, forest.node_threshold, forest.node_left, forest.node_right,
                      small_off, small_thr, small_leaf)
        base_lane, leaf_lane = single_lanes(forest.leaf_values, forest.base_leaf_start)
        # trees scored by leaf masks: each node's leaves kept on either side
        base_route = kind.astype(np.int8)
        base_route[masked] = ROUTE_MASK
        mask_keep = np.zeros((forest.node_feature.shape[0], 2), dtype=np.uint32)
        _leaf_masks(np.flatnonzero(masked).astype(np.int64), forest.base_node_start, forest.node_left,
                    forest.node_right, mask_keep)
        return cls(vfeat=vfeat, vthr=vthr, vleft=vleft, vleaf=vleaf, vnode=vnode, base_vstart=base_vstart,
                   base_depth=base_depth, base_compact_at=compact_at, chunk_start=chunk_start,
                   base_small=base_small, small_off=small_off, small_thr=small_thr, small_leaf=small_leaf,
                   base_lane=base_lane, leaf_lane=leaf_lane, base_route=base_route, mask_keep=mask_keep)


def single_lanes(leaf_values: npt.NDArray[np.float64], base_leaf_start: npt.NDArray[np.int64]
                 ) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.float64]]:
    """(base_lane, leaf_lane) of ``PackedNodes``: each base's one output column with a non-zero
    leaf value (0 if none, -1 if several), and each leaf row's value in its base's column. Every
    base owns at least one leaf row (``_validate``)."""
    n_leaves = leaf_values.shape[0]
    n_base = base_leaf_start.shape[0] - 1
    if n_base == 0:
        return np.zeros(0, dtype=np.int32), np.zeros(n_leaves, dtype=np.float64)
    used = np.logical_or.reduceat(leaf_values != 0.0, base_leaf_start[:-1], axis=0)  # (n_base, K)
    lane = np.where(used.sum(axis=1) <= 1, np.argmax(used, axis=1), -1).astype(np.int32)
    of_leaf = np.repeat(np.maximum(lane, 0), np.diff(base_leaf_start))
    leaf_lane = np.ascontiguousarray(leaf_values[np.arange(n_leaves), of_leaf], dtype=np.float64)
    return lane, leaf_lane


@njit(cache=True, nogil=True)
def _relayout(kind, node_start, leaf_start, feat, thr, left, right, base_vstart, vfeat, vthr,
              vleft, vleaf, base_depth):  # pragma: no cover
    """Fill ``PackedNodes``' arrays: each tree breadth first, children side by side."""
    nan = np.float32(np.nan)
    max_nodes = 1
    for b in range(kind.shape[0]):
        max_nodes = max(max_nodes, 2 * (node_start[b + 1] - node_start[b]) + 1)
    item = np.empty(max_nodes, dtype=np.int64)  # position -> child code (>= 0 node, < 0 leaf)
    level = np.empty(max_nodes, dtype=np.int32)
    for b in range(kind.shape[0]):
        if kind[b] != 0:
            continue
        ns = node_start[b]
        ls = leaf_start[b]
        vs = base_vstart[b]
        total = base_vstart[b + 1] - vs
        item[0] = 0 if node_start[b + 1] > ns else -1
        level[0] = 0
        free = 1
        depth = 0
        for p in range(total):
            c = item[p]
            r = vs + p
            if c >= 0:
                t = ns + c
                vfeat[r] = feat[t]
                vthr[r] = thr[t]
                vleft[r] = vs + free
                vleaf[r] = -1
                item[free] = left[t]
                item[free + 1] = right[t]
                level[free] = level[p] + 1
                level[free + 1] = level[p] + 1
                free += 2
            else:
                vfeat[r] = 0
                vthr[r] = nan
                vleft[r] = r
                vleaf[r] = ls - c - 1
                depth = max(depth, level[p])
        base_depth[b] = depth


@njit(cache=True, nogil=True)
def _leaf_masks(bases, node_start, left, right, keep):  # pragma: no cover
    """For the trees ``bases`` (at most 32 leaves): node k's leaves not under its left child
    (``keep[k, 0]``) and not under its right child (``keep[k, 1]``), bit i for the tree's leaf
    i. Nodes are visited last to first: a child always comes after its parent."""
    max_nodes = 1
    for s in range(bases.shape[0]):
        b = bases[s]
        max_nodes = max(max_nodes, node_start[b + 1] - node_start[b])
    under = np.zeros(max_nodes, dtype=np.uint64)  # node -> its leaves
    for s in range(bases.shape[0]):
        b = bases[s]
        ns = node_start[b]
        n = node_start[b + 1] - ns
        full = (np.uint64(1) << np.uint64(n + 1)) - np.uint64(1)
        for t in range(n - 1, -1, -1):
            lc = left[ns + t]
            rc = right[ns + t]
            lo = (np.uint64(1) << np.uint64(-lc - 1)) if lc < 0 else under[lc]
            hi = (np.uint64(1) << np.uint64(-rc - 1)) if rc < 0 else under[rc]
            under[t] = lo | hi
            keep[ns + t, 0] = np.uint32(full & ~lo)
            keep[ns + t, 1] = np.uint32(full & ~hi)


#: bit position of a 32-bit word with one bit set, by its de Bruijn product (``_one_bit``)
_DE_BRUIJN = np.array([0, 1, 28, 2, 29, 14, 24, 3, 30, 22, 20, 15, 25, 17, 4, 8, 31, 27, 13, 23, 21, 19,
                       16, 7, 26, 12, 18, 6, 11, 5, 10, 9], dtype=np.int64)


@njit(cache=True)
def _one_bit(m):  # pragma: no cover
    """The index of the one set bit of the 32-bit word ``m`` (Leiserson, Prokop and Randall 1998)."""
    return _DE_BRUIJN[((np.uint64(m) * np.uint64(0x077CB531)) & np.uint64(0xFFFFFFFF)) >> np.uint64(27)]


@njit(cache=True, nogil=True)
def _small_tables(bases, node_start, leaf_start, feat, thr, left, right, small_off, small_thr,
                  small_leaf):  # pragma: no cover
    """Fill the table arrays of ``PackedNodes`` for the trees ``bases`` (row s for ``bases[s]``):
    node k's feature offset in a block (``feature * DOC_BLOCK``) and threshold (feature 0 and NaN
    for k past the tree's nodes: the kernel makes all SMALL_NODES tests), and for every mask the
    absolute leaf row that the walk reaches when node k's test says ``>=`` exactly where bit k
    is set (the bits past the tree's nodes play no part)."""
    for s in range(bases.shape[0]):
        b = bases[s]
        ns = node_start[b]
        n = node_start[b + 1] - ns
        for k in range(n):
            small_off[s, k] = np.int64(feat[ns + k]) * DOC_BLOCK
            small_thr[s, k] = thr[ns + k]
        for mask in range(small_leaf.shape[1]):
            t = 0
            while True:
                c = right[ns + t] if (mask >> t) & 1 else left[ns + t]
                if c < 0:
                    small_leaf[s, mask] = leaf_start[b] - c - 1
                    break
                t = c


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

    @cached_property
    def _kernel_arrays(self) -> tuple[np.ndarray, ...]:
        """The scoring kernels' forest arguments, in their order (gathered once, not per call)."""
        p = self.packed
        return (p.base_route, self.base_node_start, self.base_leaf_start, self.node_feature,
                self.node_threshold, p.vnode, p.vthr, p.vleaf, p.base_vstart, p.base_depth,
                p.base_compact_at, p.base_small, p.small_off, p.small_thr, p.small_leaf, p.chunk_start,
                self.leaf_values, p.base_lane, p.leaf_lane, p.mask_keep)

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


@njit(cache=True, nogil=True)
def block_features(X):  # pragma: no cover
    """``X`` (n, d) re-laid feature-major per block of ``DOC_BLOCK`` documents, flat:
    ``out[(blk * d + f) * DOC_BLOCK + j] = X[blk * DOC_BLOCK + j, f]`` (the last block zero-padded).

    A tree step of document j then reads ``out[blk * d * DOC_BLOCK + f * DOC_BLOCK + j]``: a
    block's values of one feature are contiguous, and a block (``d * DOC_BLOCK`` floats) stays in
    the first-level cache while the trees stream through. ``X`` must be C-contiguous float32 (as
    ``score_forest`` makes it); one pass, no temporary.
    """
    n, d = X.shape
    n_blocks = (n + DOC_BLOCK - 1) // DOC_BLOCK
    out = np.zeros(n_blocks * DOC_BLOCK * d, dtype=np.float32)
    for blk in range(n_blocks):
        i0 = blk * DOC_BLOCK
        base = i0 * d
        for j in range(min(DOC_BLOCK, n - i0)):
            row = X[i0 + j]
            for f in range(d):
                out[base + f * DOC_BLOCK + j] = row[f]
    return out


@njit(cache=True, inline="always")
def _score_task(Xb, d_feat, i0, nb, b0, b1, base_route, base_node_start, base_leaf_start, node_feature,
                node_threshold, vnode, vthr, vleaf, base_vstart, base_depth, compact_at, base_small,
                small_off, small_thr, small_leaf, leaf_values, base_lane, leaf_lane, mask_keep, checkpoints, ci0,
                out, total, k_lanes):  # pragma: no cover
    """Documents ``i0:i0+nb`` (``i0`` a multiple of ``DOC_BLOCK``) through bases ``b0:b1``,
    summed from zero.

    The running sum before base ``c`` for each checkpoint ``c`` in ``[b0, b1)`` (from index
    ``ci0`` of ``checkpoints``) goes to ``out[i, ci, :]``; the chunk's sum to ``total[i, :]``.
    ``Xb`` is the feature-major block layout of ``block_features``. A tree step is
    ``r = low32(vnode[r]) + (Xb[base + high32(vnode[r]) + j] >= vthr[r])``: four loads, no
    branch. Indices are cast to unsigned before use: numba then drops its negative-index
    wraparound, which halves the cost of a step.
    """
    K = len(k_lanes)
    n_ck = checkpoints.shape[0]
    xbase = np.int64(i0) * d_feat
    acc = np.zeros((nb, K))
    pos = np.empty(nb, dtype=np.int64)
    late = np.empty(nb, dtype=np.int64)
    mask = np.empty(nb, dtype=np.int32)  # a small tree's node tests, one bit each (SMALL_NODES)
    keep = np.empty(nb, dtype=np.uint32)  # a mask tree's leaves still possible (MASK_LEAVES)
    ci = ci0
    for b in range(b0, b1):
        while ci < n_ck and checkpoints[ci] == b:
            for j in range(nb):
                for l in range(K):
                    out[i0 + j, ci, l] = acc[j, l]
            ci += 1
        if base_small[b] >= 0:
            # a small tree (never a product): SMALL_NODES node tests over the block in one pass
            # (past the tree's nodes: feature 0 against NaN, bits its table ignores), then the
            # mask's leaf
            sm = base_small[b]
            x0 = xbase + small_off[sm, 0]
            x1 = xbase + small_off[sm, 1]
            x2 = xbase + small_off[sm, 2]
            x3 = xbase + small_off[sm, 3]
            x4 = xbase + small_off[sm, 4]
            x5 = xbase + small_off[sm, 5]
            x6 = xbase + small_off[sm, 6]
            t0 = small_thr[sm, 0]
            t1 = small_thr[sm, 1]
            t2 = small_thr[sm, 2]
            t3 = small_thr[sm, 3]
            t4 = small_thr[sm, 4]
            t5 = small_thr[sm, 5]
            t6 = small_thr[sm, 6]
            for j in range(nb):
                mask[j] = (np.int32(Xb[np.uint64(x0 + j)] >= t0)
                           | (np.int32(Xb[np.uint64(x1 + j)] >= t1) << 1)
                           | (np.int32(Xb[np.uint64(x2 + j)] >= t2) << 2)
                           | (np.int32(Xb[np.uint64(x3 + j)] >= t3) << 3)
                           | (np.int32(Xb[np.uint64(x4 + j)] >= t4) << 4)
                           | (np.int32(Xb[np.uint64(x5 + j)] >= t5) << 5)
                           | (np.int32(Xb[np.uint64(x6 + j)] >= t6) << 6))
            ln = base_lane[b]
            if ln >= 0:
                for j in range(nb):
                    acc[j, ln] += leaf_lane[small_leaf[sm, np.uint32(mask[j])]]
            else:
                for j in range(nb):
                    leaf = small_leaf[sm, np.uint32(mask[j])]
                    for l in range(K):
                        acc[j, l] += leaf_values[leaf, l]
        elif base_route[b] == ROUTE_MASK:
            # a tree of at most MASK_LEAVES leaves: every node's test over the block clears the
            # leaves of the side not taken; the one leaf left is the walk's
            ls = base_leaf_start[b]
            full = np.uint32((np.uint64(1) << np.uint64(base_leaf_start[b + 1] - ls)) - np.uint64(1))
            for j in range(nb):
                keep[j] = full
            for k in range(base_node_start[b], base_node_start[b + 1]):
                xk = xbase + np.int64(node_feature[k]) * DOC_BLOCK
                tk = node_threshold[k]
                kr = mask_keep[k, 0]
                kl = mask_keep[k, 1]
                for j in range(nb):
                    keep[j] &= kr if Xb[np.uint64(xk + j)] >= tk else kl
            ln = base_lane[b]
            if ln >= 0:
                for j in range(nb):
                    acc[j, ln] += leaf_lane[ls + _one_bit(keep[j])]
            else:
                for j in range(nb):
                    leaf = ls + _one_bit(keep[j])
                    for l in range(K):
                        acc[j, l] += leaf_values[leaf, l]
        elif base_route[b] == 0:
            r0 = base_vstart[b]
            depth = base_depth[b]
            if depth == 0:
                leaf = vleaf[r0]
                for j in range(nb):
                    for l in range(K):
                        acc[j, l] += leaf_values[leaf, l]
                continue
            # the root: one node for the whole block (a contiguous row of the block), then one
            # step per level for every document
            w0 = vnode[r0]
            x0 = xbase + (w0 >> 32)
            c0 = w0 & 0xFFFFFFFF
            t0 = vthr[r0]
            for j in range(nb):
                pos[j] = c0 + (Xb[np.uint64(x0 + j)] >= t0)
            for _ in range(compact_at[b] - 1):
                for j in range(nb):
                    r = np.uint64(pos[j])
                    w = vnode[r]
                    pos[j] = (w & 0xFFFFFFFF) + (Xb[np.uint64(xbase + (w >> 32) + j)] >= vthr[r])
            if depth > compact_at[b]:
                # the documents still on a node, listed without a branch; only they walk on
                n_late = 0
                for j in range(nb):
                    late[n_late] = j
                    n_late += vleaf[np.uint64(pos[j])] < 0
                for _ in range(depth - compact_at[b]):
                    for q in range(n_late):
                        j = late[q]
                        r = np.uint64(pos[j])
                        w = vnode[r]
                        pos[j] = (w & 0xFFFFFFFF) + (Xb[np.uint64(xbase + (w >> 32) + j)] >= vthr[r])
            ln = base_lane[b]
            if ln >= 0:
                for j in range(nb):
                    acc[j, ln] += leaf_lane[vleaf[np.uint64(pos[j])]]
            else:
                for j in range(nb):
                    leaf = vleaf[np.uint64(pos[j])]
                    for l in range(K):
                        acc[j, l] += leaf_values[leaf, l]
        else:
            ns = base_node_start[b]
            ne = base_node_start[b + 1]
            ls = base_leaf_start[b]
            # term by term over the block (each term reads one contiguous row of the block);
            # pos[j] holds the parity of the terms that said -1
            for j in range(nb):
                pos[j] = 0
            for g in range(ns, ne):
                xg = xbase + np.int64(node_feature[g]) * DOC_BLOCK
                tg = node_threshold[g]
                for j in range(nb):
                    pos[j] ^= 1 - (Xb[np.uint64(xg + j)] >= tg)
            for j in range(nb):
                sg = 1.0 - 2.0 * pos[j]
                for l in range(K):
                    acc[j, l] += sg * leaf_values[ls, l]
    for j in range(nb):
        for l in range(K):
            total[i0 + j, l] = acc[j, l]


@njit(cache=True, inline="always")
def _combine(i, chunk_start, checkpoints, ck_chunk, out, totals, k_lanes):  # pragma: no cover
    """Document ``i``: add the chunks' sums in chunk order to the in-chunk running sums."""
    K = len(k_lanes)
    n_chunks = chunk_start.shape[0] - 1
    run = np.zeros(K)
    ci = 0
    n_ck = checkpoints.shape[0]
    for ch in range(n_chunks + 1):
        while ci < n_ck and ck_chunk[ci] == ch:
            if ch == n_chunks:
                for l in range(K):
                    out[i, ci, l] = run[l]
            else:
                for l in range(K):
                    out[i, ci, l] += run[l]
            ci += 1
        if ch < n_chunks:
            for l in range(K):
                run[l] += totals[ch, i, l]


def _claim_typing(typingctx, counter, slot):  # pragma: no cover
    """``counter[slot] += 1`` as one atomic instruction (LLVM ``atomicrmw add``); returns the
    value before. Threads taking work items by it each get distinct items."""
    if not (isinstance(counter, types.Array) and counter.dtype == types.int64 and counter.ndim == 1
            and counter.layout == "C"):
        return None

    def codegen(context, builder, signature, args):
        data = context.make_array(signature.args[0])(context, builder, args[0]).data
        slot_ptr = builder.gep(data, [args[1]])
        return builder.atomic_rmw("add", slot_ptr, ir.Constant(ir.IntType(64), 1), "monotonic")

    return types.int64(counter, types.int64), codegen


# typed Any: mypy sees the typing function's (typingctx, ...), numba calls it with (counter, slot)
claim: Any = intrinsic(_claim_typing)

#: Documents per work item of the combine.
COMBINE_BLOCK = 256


@njit(cache=True, inline="always")
def _take_tasks(Xb, d_feat, base_route, base_node_start, base_leaf_start, node_feature, node_threshold,
                vnode, vthr, vleaf, base_vstart, base_depth, compact_at, base_small, small_off, small_thr,
                small_leaf, chunk_start, leaf_values, base_lane, leaf_lane, mask_keep,
                checkpoints, ck_first, out, totals, k_lanes, counter):  # pragma: no cover
    """The (chunk, document block) tasks, each the next one not yet taken (``claim`` on
    ``counter[0]``; threads sharing the counter share the tasks) until none is left. Tasks are
    numbered chunk by chunk, so that a chunk's trees stay in cache while the blocks of documents
    pass through them (and both threads read the same chunk's trees)."""
    n = out.shape[0]
    n_blocks = (n + DOC_BLOCK - 1) // DOC_BLOCK
    n_tasks = n_blocks * (chunk_start.shape[0] - 1)
    t = claim(counter, 0)
    while t < n_tasks:
        ch = t // n_blocks
        blk = t - ch * n_blocks
        i0 = blk * DOC_BLOCK
        _score_task(Xb, d_feat, i0, min(DOC_BLOCK, n - i0), chunk_start[ch], chunk_start[ch + 1],
                    base_route, base_node_start, base_leaf_start, node_feature, node_threshold,
                    vnode, vthr, vleaf, base_vstart, base_depth, compact_at, base_small, small_off,
                    small_thr, small_leaf, leaf_values, base_lane, leaf_lane, mask_keep,
                    checkpoints, ck_first[ch], out, totals[ch], k_lanes)
        t = claim(counter, 0)


@njit(cache=True, inline="always")
def _take_combines(chunk_start, checkpoints, ck_chunk, out, totals, k_lanes, counter):  # pragma: no cover
    """The ordered combine (``_combine``) of every document, ``COMBINE_BLOCK`` documents at a
    time, each block the next one not yet taken (``claim`` on ``counter[1]``)."""
    n = out.shape[0]
    i0 = claim(counter, 1) * COMBINE_BLOCK
    while i0 < n:
        for i in range(i0, min(i0 + COMBINE_BLOCK, n)):
            _combine(i, chunk_start, checkpoints, ck_chunk, out, totals, k_lanes)
        i0 = claim(counter, 1) * COMBINE_BLOCK


@njit(cache=True, nogil=True)
def _score_run(Xb, d_feat, base_route, base_node_start, base_leaf_start, node_feature, node_threshold,
               vnode, vthr, vleaf, base_vstart, base_depth, compact_at, base_small, small_off, small_thr,
               small_leaf, chunk_start, leaf_values, base_lane, leaf_lane, mask_keep,
               checkpoints, ck_chunk, ck_first, out, totals, k_lanes, counter,
               phase):  # pragma: no cover
    """``phase`` 0: the (chunk, document block) tasks not yet taken (``_take_tasks``); 1: the
    ordered combines not yet taken (``_take_combines``); 2: both, one after the other (one
    thread). Threads sharing ``counter`` share the work: each takes the next item not yet taken,
    instead of a fixed half of them, so that a thread that starts late or runs slowly (a vCPU
    the host has just woken, another process on the core) costs only the work it does not do.
    Every item is computed and added in the same order whoever takes it: the same result to
    the last bit for any number of threads (``tunemix.core.threads``)."""
    if phase != 1:
        _take_tasks(Xb, d_feat, base_route, base_node_start, base_leaf_start, node_feature, node_threshold,
                    vnode, vthr, vleaf, base_vstart, base_depth, compact_at, base_small, small_off, small_thr,
                    small_leaf, chunk_start, leaf_values, base_lane, leaf_lane, mask_keep,
                    checkpoints, ck_first, out, totals, k_lanes, counter)
    if phase != 0:
        _take_combines(chunk_start, checkpoints, ck_chunk, out, totals, k_lanes, counter)


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
    thread instead of waiting.
    """
    Xa = np.ascontiguousarray(X, dtype=np.float32)
    if Xa.ndim != 2 or Xa.shape[1] != forest.n_features:
        raise ValueError(f"X must have shape (n, {forest.n_features}), got {Xa.shape}")
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


_PARALLEL = threading.Lock()


def run_on_threads(n_items: int, big_enough: bool, serial: Callable[[], object],
                   parallel: Callable[[int], object]) -> None:
    """Run ``parallel(threads)`` on ``get_scoring_threads()`` threads (at most ``n_items``; Python
    threads calling a nogil kernel, ``tunemix.core.threads.on_threads``) when there are several and
    the work is ``big_enough``, else ``serial()``. A parallel run already in progress in another
    Python thread makes this one run serially instead of queueing behind it. Lists shorter than
    ``set_parallel_min_documents``'s floor run serially too. The forest pass and the calibration
    step share it."""
    threads = min(get_scoring_threads(), n_items)
    if threads > 1 and big_enough and n_items >= get_parallel_min_documents() and _PARALLEL.acquire(blocking=False):
        try:
            parallel(threads)
        finally:
            _PARALLEL.release()
    else:
        serial()


_scoring_threads = 0  # 0: every numba thread (NUMBA_NUM_THREADS); set by the service per worker
_parallel_min_documents: int | None = None  # None: the library's floor (``library_parallel_min_documents``)

#: The library's floor when nothing set one: a call scoring fewer documents stays on one thread,
#: the service's rule for shared cores (``tunemix.service.settings.SHARED_PARALLEL_MIN_DOCUMENTS``), the same
#: number. One 100-document MQ2008 list beside two CPU burners on 2 cores (bench/results/
#: library_predict.json, load 17): median 1.31 ms on one thread against 115 ms on both (a parallel
#: launch waits for a core the burners hold); LightGBM's predict 58.4 ms in the same run.
LIBRARY_PARALLEL_MIN_DOCUMENTS = 256


def library_parallel_min_documents() -> int:
    """``TUNEMIX_PARALLEL_MIN_DOCUMENTS`` when set (the service's variable, same meaning), else
    ``LIBRARY_PARALLEL_MIN_DOCUMENTS``: the floor of a process nothing configured (the library,
    the CLI, a notebook)."""
    import os

    raw = os.environ.get("TUNEMIX_PARALLEL_MIN_DOCUMENTS", "").strip()
    if not raw:
        return LIBRARY_PARALLEL_MIN_DOCUMENTS
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"TUNEMIX_PARALLEL_MIN_DOCUMENTS={raw!r}: expected a whole number of documents "
                         "(0: only the work decides)") from None
    if value < 0:
        raise ValueError(f"TUNEMIX_PARALLEL_MIN_DOCUMENTS={raw!r}: must be >= 0")
    return value


def set_parallel_min_documents(n: int) -> None:
    """Lists of fewer than ``n`` documents score on one thread (0: only the work decides).

    Several uvicorn workers sharing the cores set it: a short list then costs its worker a
    single core instead of waking a second thread that another worker's request needs, while
    a long list still takes every core (see ``tunemix.service.settings.Settings.parallel_min_documents``).
    Unset, the floor is ``library_parallel_min_documents()``.
    """
    global _parallel_min_documents
    if n < 0:
        raise ValueError(f"parallel_min_documents must be >= 0, got {n}")
    _parallel_min_documents = n


def get_parallel_min_documents() -> int:
    """The floor set by ``set_parallel_min_documents``, else the library's
    (``library_parallel_min_documents``: ``TUNEMIX_PARALLEL_MIN_DOCUMENTS`` or 256), read once."""
    global _parallel_min_documents
    if _parallel_min_documents is None:
        _parallel_min_documents = library_parallel_min_documents()
    return _parallel_min_documents


def set_scoring_threads(n: int) -> None:
    """Threads ``score_forest`` may use in this process (at most numba's pool size).

    A service sets it per worker process; results do not depend on this number.
    """
    global _scoring_threads
    if n < 1:
        raise ValueError(f"scoring threads must be >= 1, got {n}")
    _scoring_threads = n


_local = threading.local()  # this Python thread's cap (``single_threaded``)


@contextlib.contextmanager
def single_threaded() -> Iterator[None]:
    """Score on this thread alone inside the block (a service does so when other requests are
    scoring or waiting: side by side, one thread each spends the cores better than one request
    on all of them). Results do not depend on it."""
    before = getattr(_local, "cap", None)
    _local.cap = 1
    try:
        yield
    finally:
        _local.cap = before


def get_scoring_threads() -> int:
    """The threads scoring uses: the setting, capped by numba's thread pool and by
    ``single_threaded`` on the calling thread."""
    if getattr(_local, "cap", None) == 1:
        return 1
    pool = int(numba.config.NUMBA_NUM_THREADS)  # type: ignore[attr-defined]
    return pool if _scoring_threads == 0 else min(_scoring_threads, pool)
