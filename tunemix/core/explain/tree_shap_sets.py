"""One-reference TreeSHAP of many documents in one walk per tree: the documents as a set (bits).

Imports numpy and numba only (the service uses it). The attributions are those of
``tunemix.core.explain.tree_shap`` (its module docstring: the game, the leaf formula with weights
``plus[a, b]`` and ``minus[a, b]``, products of stumps in closed form), computed the same way
value for value; only the walk differs.

``tree_shap.documents`` walks each tree once per document: from the root it follows the
children x or r goes to, tracking per player whether x and r still satisfy its conditions, so a
document visits the leaves some hybrid of x and r reaches. The documents explained against one
reference share most of that walk (on the MQ2008 ensemble, 10 documents of a list: 46,900
node visits one by one, 15,300 child steps as a set). Here a tree is walked once for a set of
up to 64 documents, each a bit of a ``uint64``:

- at a node, one comparison per document gives the set going right; the walk takes r's child
  first, then the other, as the per-document walk does;
- per player on the path: the set of documents that satisfy all its conditions so far (``e_x``)
  and whether r does (``e_r``);
- ``alive``: the documents that satisfy every player r fails (the A players of a leaf: a
  hybrid reaches it only with x's values for them). A child no document is alive for is not
  entered; a leaf some document is alive for is that document's leaf with A the players r fails
  and B those the document fails (r satisfies them, as it does every player not in A);
- A is one stack (the players r fails, pushed when r first fails one); each document's B is a
  stack of its own (a player pushed when the document first fails it), so the leaf adds, per
  alive document, ``+ v plus[a, b]`` to each of A and ``- v minus[a, b]`` to each of its B with
  the per-document walk's products, and every move is undone on the way back up;
- a product of stumps: each factor compared once for all the documents, the documents whose
  factors of a player differ an odd number of times kept per player (a mask), then
  ``tree_shap._product``'s closed form per document with such players.

**Bit for bit the per-document walk.** A document's walk visits the leaves it reaches in r's-child-
first order, as this walk does (it only skips leaves no document reaches), and a leaf adds to a
(document, output, player) at most once, so every running attribution receives the same
additions in the same order: ``tests/scoring/test_tree_shap_sets.py`` holds the two equal
with ``assert_array_equal``. On the MQ2008 ensemble's bench lists, 10 documents, thread CPU
min 1.02 ms walked one by one against 0.65 ms as a set; on the MSLR default model 0.95 against
0.67 ms (no products there).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

import tunemix.core.numba_cache  # noqa: F401 - numba's cache written under a lock (tunemix/core/numba_cache.py)
from tunemix.core.scoring.forest import KIND_PRODUCT

#: documents walked as one set (the bits of a uint64)
BLOCK = 64


def _lowest_typing(typingctx: Any, bits: Any) -> Any:  # pragma: no cover
    """The index of the lowest set bit of a non-zero ``uint64`` (LLVM ``cttz``, one instruction)."""
    if bits != types.uint64:
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        return builder.zext(builder.cttz(args[0], ir.Constant(ir.IntType(1), 0)), ir.IntType(64))

    return types.int64(types.uint64), codegen


# typed Any: mypy sees the typing function's (typingctx, bits), numba calls it with (bits)
lowest: Any = intrinsic(_lowest_typing)


@njit(cache=True, nogil=True)
def documents_sets(kind, node_start, leaf_start, feat, thr, left, right, leaves, x, r_dir, group, checkpoints, plus,
                   minus, out):  # pragma: no cover
    """``tree_shap.documents`` (same arguments, the same ``out`` (n, C, K, G) bit for bit), the
    trees walked once per block of up to 64 documents (module docstring)."""
    for b0 in range(0, x.shape[0], BLOCK):
        b1 = min(b0 + BLOCK, x.shape[0])
        _block(kind, node_start, leaf_start, feat, thr, left, right, leaves, x[b0:b1], r_dir, group, checkpoints,
               plus, minus, out[b0:b1])


@njit(cache=True, nogil=True)
def _block(kind, node_start, leaf_start, feat, thr, left, right, leaves, x, r_dir, group, checkpoints, plus, minus,
           out):  # pragma: no cover
    """``documents_sets`` for at most 64 documents. The walk is written out in the loop over the
    bases (numba's inliner refuses a function of this many arguments)."""
    n = x.shape[0]
    k_out = leaves.shape[1]
    n_g = out.shape[3]
    max_nodes = 1
    for b in range(node_start.shape[0] - 1):
        max_nodes = max(max_nodes, node_start[b + 1] - node_start[b])
    size = max_nodes + 2  # levels of a path, players on it
    lv_node = np.empty(size, dtype=np.int64)  # per level: the node, the children done, the alive set,
    lv_phase = np.empty(size, dtype=np.int64)  # the set going right, and the undo of the step below it
    lv_alive = np.empty(size, dtype=np.uint64)
    lv_xr = np.empty(size, dtype=np.uint64)
    u_slot = np.empty(size, dtype=np.int64)
    u_new = np.empty(size, dtype=np.bool_)
    u_oldx = np.empty(size, dtype=np.uint64)
    u_oldr = np.empty(size, dtype=np.bool_)
    u_flip = np.empty(size, dtype=np.bool_)
    u_nf = np.empty(size, dtype=np.uint64)
    slot = np.full(n_g, -1, dtype=np.int64)  # a player's entry on the path, or -1
    e_g = np.empty(size, dtype=np.int64)
    e_x = np.empty(size, dtype=np.uint64)
    e_r = np.empty(size, dtype=np.bool_)
    a_stack = np.empty(size, dtype=np.int64)  # the players r fails, in the order it fails them
    b_stack = np.empty((max(n, 1), size), dtype=np.int64)  # each document's players it fails (r satisfies)
    b_count = np.zeros(max(n, 1), dtype=np.int64)
    pl_g = np.empty(size, dtype=np.int64)  # a product's players and their odd-parity documents
    pl_odd = np.empty(size, dtype=np.uint64)
    acc = np.zeros((n, k_out, n_g))
    xt = np.ascontiguousarray(x.T)  # a feature's values of the documents side by side
    full = (np.uint64(1) << np.uint64(n)) - np.uint64(1) if n < 64 else ~np.uint64(0)
    n_base = kind.shape[0]
    n_ck = checkpoints.shape[0]
    c = 0
    for b in range(n_base + 1):
        while c < n_ck and checkpoints[c] == b:
            for i in range(n):
                out[i, c] = acc[i]
            c += 1
        if b == n_base or c == n_ck:
            break
        ns = node_start[b]
        ne = node_start[b + 1]
        if kind[b] == KIND_PRODUCT:  # tree_shap._product's closed form, its factors compared for all at once
            ls = leaf_start[b]
            sign = 1.0
            n_pl = 0
            for t in range(ns, ne):
                f = feat[t]
                r_right = r_dir[t]
                if not r_right:
                    sign = -sign
                th = thr[t]
                xm = np.uint64(0)
                for i in range(n):
                    xm |= np.uint64(xt[f, i] >= th) << np.uint64(i)
                differ = ~xm & full if r_right else xm
                g = group[f]
                q = 0
                while q < n_pl and pl_g[q] != g:
                    q += 1
                if q == n_pl:
                    pl_g[q] = g
                    pl_odd[q] = np.uint64(0)
                    n_pl += 1
                pl_odd[q] ^= differ  # the documents whose factors of player g differ an odd number of times
            any_odd = np.uint64(0)
            for q in range(n_pl):
                any_odd |= pl_odd[q]
            m = any_odd
            while m:
                j = lowest(m)
                bit = m & (~m + np.uint64(1))
                m ^= bit
                n_odd = 0
                for q in range(n_pl):
                    if pl_odd[q] & bit:
                        n_odd += 1
                if n_odd % 2 == 1:
                    w = -2.0 * sign / n_odd
                    for q in range(n_pl):
                        if pl_odd[q] & bit:
                            p = pl_g[q]
                            for k in range(k_out):
                                acc[j, k, p] += w * leaves[ls, k]
            continue
        if ne == ns:
            continue
        ls = leaf_start[b]
        level = 0
        lv_node[0] = 0
        lv_phase[0] = 0
        lv_alive[0] = full
        n_ent = 0
        na = 0
        while level >= 0:
            ph = lv_phase[level]
            if ph == 2:  # both children done: back up, undoing the step into this node
                level -= 1
                if level >= 0:
                    m = u_nf[level]
                    while m:
                        j = lowest(m)
                        m &= m - np.uint64(1)
                        b_count[j] -= 1
                    s = u_slot[level]
                    if u_new[level]:
                        slot[e_g[s]] = -1
                        n_ent -= 1
                    else:
                        e_x[s] = u_oldx[level]
                        e_r[s] = u_oldr[level]
                    if u_flip[level]:
                        na -= 1
                continue
            t = ns + lv_node[level]
            f = feat[t]
            r_right = r_dir[t]
            if ph == 0:
                th = thr[t]
                xm = np.uint64(0)
                for i in range(n):
                    xm |= np.uint64(xt[f, i] >= th) << np.uint64(i)
                lv_xr[level] = xm
                # the other child only if some alive document goes there
                lv_phase[level] = 1 if lv_alive[level] & (~xm & full if r_right else xm) else 2
            else:
                lv_phase[level] = 2
            go_right = r_right if ph == 0 else not r_right  # r's child first
            child = right[t] if go_right else left[t]
            xm = lv_xr[level] if go_right else ~lv_xr[level] & full
            r_ok = ph == 0
            g = group[f]
            s = slot[g]
            alive = lv_alive[level]
            old_x = full if s < 0 else e_x[s]
            old_r = True if s < 0 else e_r[s]
            new_x = old_x & xm
            new_r = old_r and r_ok
            if new_r:
                newly_failed = alive & old_x & ~new_x  # B grows for these documents
            else:
                alive &= new_x  # r fails the player: x must satisfy it
                newly_failed = np.uint64(0)
            if alive == 0:
                continue
            if s < 0:
                s = n_ent
                slot[g] = s
                e_g[s] = g
                n_ent += 1
                u_new[level] = True
            else:
                u_new[level] = False
                u_oldx[level] = old_x
                u_oldr[level] = old_r
            e_x[s] = new_x
            e_r[s] = new_r
            u_slot[level] = s
            flip = old_r and not new_r
            u_flip[level] = flip
            if flip:
                a_stack[na] = g
                na += 1
            u_nf[level] = newly_failed
            m = newly_failed
            while m:
                j = lowest(m)
                m &= m - np.uint64(1)
                b_stack[j, b_count[j]] = g
                b_count[j] += 1
            if child >= 0:
                level += 1
                lv_node[level] = child
                lv_phase[level] = 0
                lv_alive[level] = alive
                continue
            # a leaf: + v plus[a, b] to each of A, - v minus[a, b] to each of the document's B
            row = ls + (-child - 1)
            l0 = leaves[row, 0]
            l1 = leaves[row, min(1, k_out - 1)]
            l2 = leaves[row, min(2, k_out - 1)]
            l3 = leaves[row, min(3, k_out - 1)]
            l4 = leaves[row, min(4, k_out - 1)]
            m = alive
            while m:
                j = lowest(m)
                m &= m - np.uint64(1)
                nb = b_count[j]
                if na + nb == 0:  # x and r both reach it: nothing changes
                    continue
                wa = plus[na, nb]
                wb = minus[na, nb]
                # written out for 3 and 5 outputs (MQ2008's and MSLR's grades), as tree_shap._tree
                if k_out == 3:
                    for q in range(na):
                        p = a_stack[q]
                        acc[j, 0, p] += wa * l0
                        acc[j, 1, p] += wa * l1
                        acc[j, 2, p] += wa * l2
                    for q in range(nb):
                        p = b_stack[j, q]
                        acc[j, 0, p] -= wb * l0
                        acc[j, 1, p] -= wb * l1
                        acc[j, 2, p] -= wb * l2
                elif k_out == 5:
                    for q in range(na):
                        p = a_stack[q]
                        acc[j, 0, p] += wa * l0
                        acc[j, 1, p] += wa * l1
                        acc[j, 2, p] += wa * l2
                        acc[j, 3, p] += wa * l3
                        acc[j, 4, p] += wa * l4
                    for q in range(nb):
                        p = b_stack[j, q]
                        acc[j, 0, p] -= wb * l0
                        acc[j, 1, p] -= wb * l1
                        acc[j, 2, p] -= wb * l2
                        acc[j, 3, p] -= wb * l3
                        acc[j, 4, p] -= wb * l4
                else:
                    for q in range(na):
                        p = a_stack[q]
                        for k in range(k_out):
                            acc[j, k, p] += wa * leaves[row, k]
                    for q in range(nb):
                        p = b_stack[j, q]
                        for k in range(k_out):
                            acc[j, k, p] -= wb * leaves[row, k]
            # undo the step into the leaf
            m = newly_failed
            while m:
                j = lowest(m)
                m &= m - np.uint64(1)
                b_count[j] -= 1
            if u_new[level]:
                slot[g] = -1
                n_ent -= 1
            else:
                e_x[s] = old_x
                e_r[s] = old_r
            if flip:
                na -= 1
