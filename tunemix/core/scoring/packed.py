"""The scoring layout of a forest (``PackedNodes``), derived once from its flat arrays and never
stored: trees re-laid for a branch-free walk, small trees as tables, mid-size trees as leaf masks,
single-output bases as lanes, and the fixed cut of the bases into chunks of equal cost. The stored
format is ``tunemix.core.scoring.forest``; the kernel that reads this layout is
``tunemix.core.scoring.forest_kernel``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
from numba import njit

import tunemix.core.numba_cache  # noqa: F401 - numba's cache written under a lock

#: ``base_kind`` of a tree and of a product of stumps (the stored kinds; also two of the kernel's
#: routes, ``PackedNodes.base_route``)
KIND_TREE = 0
KIND_PRODUCT = 1


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
    def from_forest(cls, forest: Any) -> PackedNodes:
        """Re-lay the trees of ``forest`` (a ``FlatForest``; a numba pass: fast enough to run on every load)."""
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

