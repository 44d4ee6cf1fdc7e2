"""The numba kernel that scores a forest's ``PackedNodes`` over blocks of documents: one task is a
document block times a chunk of bases, and the chunks' running sums are combined in order, so the
result does not depend on the thread count. ``tunemix.core.scoring.forest.score_forest`` calls it."""

from __future__ import annotations

from typing import Any

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

import tunemix.core.numba_cache  # noqa: F401 - numba's cache written under a lock
from tunemix.core.scoring.packed import (
    DOC_BLOCK,
    ROUTE_MASK,
)

#: bit position of a 32-bit word with one bit set, by its de Bruijn product (``_one_bit``)
_DE_BRUIJN = np.array([0, 1, 28, 2, 29, 14, 24, 3, 30, 22, 20, 15, 25, 17, 4, 8, 31, 27, 13, 23, 21, 19,
                       16, 7, 26, 12, 18, 6, 11, 5, 10, 9], dtype=np.int64)


@njit(cache=True)
def _one_bit(m):  # pragma: no cover
    """The index of the one set bit of the 32-bit word ``m`` (Leiserson, Prokop and Randall 1998)."""
    return _DE_BRUIJN[((np.uint64(m) * np.uint64(0x077CB531)) & np.uint64(0xFFFFFFFF)) >> np.uint64(27)]


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


