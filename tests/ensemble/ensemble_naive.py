"""Slow, obviously correct twins of the ensemble kernels, and a reference NDCG@10.

Plain Python loops over queries and documents; used only by the tests.
"""

from __future__ import annotations

import math

import numpy as np


def queries(offsets):
    for q in range(len(offsets) - 1):
        yield int(offsets[q]), int(offsets[q + 1])


def ndcg10_yahoo(labels, scores, offsets, measure="ndcg@10", convention="yahoo"):
    """Mean NDCG@10, Yahoo convention: gain 2^l - 1, discount 1/log2(r + 1), ties by input
    order, a query with no relevant document scores 1.0, sums stop at n."""
    if measure != "ndcg@10" or convention != "yahoo":
        raise ValueError("the reference metric only knows ndcg@10 / yahoo")
    values = []
    for lo, hi in queries(offsets):
        lab = [int(v) for v in labels[lo:hi]]
        sc = [float(v) for v in scores[lo:hi]]
        order = sorted(range(len(sc)), key=lambda i: (-sc[i], i))
        dcg = sum((2 ** lab[i] - 1) / math.log2(r + 2) for r, i in enumerate(order[:10]))
        ideal = sorted(lab, reverse=True)
        idcg = sum((2**g - 1) / math.log2(r + 2) for r, g in enumerate(ideal[:10]))
        values.append(1.0 if idcg == 0 else dcg / idcg)
    return float(np.mean(values))


def average_ranks(S, offsets):
    out = np.zeros(S.shape)
    for lo, hi in queries(offsets):
        for m in range(S.shape[1]):
            col = S[lo:hi, m]
            for i in range(hi - lo):
                greater = sum(1 for v in col if v > col[i])
                equal = sum(1 for v in col if v == col[i])
                out[lo + i, m] = greater + (equal + 1) / 2
    return out


def rrf(S, offsets, k):
    ranks = average_ranks(S, offsets)
    return (1.0 / (k + ranks)).sum(axis=1) if S.shape[0] else np.zeros(0)


def comb(S, offsets, top_k, mnz):
    out = np.zeros(S.shape[0])
    for lo, hi in queries(offsets):
        for i in range(hi - lo):
            total, count = 0.0, 0
            for m in range(S.shape[1]):
                col = S[lo:hi, m]
                competition_rank = 1 + sum(1 for v in col if v > col[i])
                if top_k is not None and competition_rank > top_k:
                    continue
                count += 1
                if col.max() > col.min():
                    total += (col[i] - col.min()) / (col.max() - col.min())
            out[lo + i] = count * total if mnz else total
    return out


def rescale(S, offsets, mode):
    out = np.zeros(S.shape)
    for lo, hi in queries(offsets):
        block = S[lo:hi]
        for m in range(S.shape[1]):
            col = block[:, m]
            if hi == lo or col.max() == col.min():
                continue
            if mode == "zscore_query":
                out[lo:hi, m] = (col - col.mean()) / col.std()
            else:
                out[lo:hi, m] = (col - col.min()) / (col.max() - col.min())
    return out


def condorcet(S, offsets):
    """Majority graph -> transitive closure (Warshall) -> documents that reach more documents
    come first (earlier components of the chain reach strictly more), then Borda net wins,
    then input position."""
    out = np.zeros(S.shape[0])
    for lo, hi in queries(offsets):
        n = hi - lo
        if n == 0:
            continue
        block = S[lo:hi]
        wins = np.zeros((n, n), dtype=int)
        for i in range(n):
            for j in range(n):
                wins[i, j] = int(np.sum(block[i] > block[j]))
        reach = (wins >= wins.T) | np.eye(n, dtype=bool)
        for k in range(n):
            reach = reach | (reach[:, [k]] & reach[[k], :])
        reach_count = reach.sum(axis=1)
        net = (wins - wins.T).sum(axis=1)
        order = sorted(range(n), key=lambda i: (-reach_count[i], -net[i], i))
        for p, i in enumerate(order):
            out[lo + i] = n - p
    return out


def resolve_metric():
    """tunemix.core.evaluation.mean_metric once it has landed, else the reference above."""
    try:
        from tunemix.core.evaluation import mean_metric
    except ImportError:
        return ndcg10_yahoo
    return mean_metric


METRIC = resolve_metric()


def random_problem(rng, n_queries, n_members, max_size=12, tie_levels=None, empty=True):
    """Random member scores and query offsets; ``tie_levels`` rounds scores to make ties."""
    sizes = rng.integers(0 if empty else 1, max_size + 1, size=n_queries)
    offsets = np.zeros(n_queries + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    S = rng.normal(size=(int(offsets[-1]), n_members))
    if tie_levels is not None:
        S = np.round(S * tie_levels) / tie_levels
    return np.ascontiguousarray(S), offsets


def noisy_members(rng, n_queries, size, sigmas, scales):
    """Members that are noisy, rescaled versions of one true score; labels 0..4 from it."""
    n = n_queries * size
    offsets = np.arange(n_queries + 1, dtype=np.int64) * size
    truth = rng.normal(size=n)
    labels = np.clip(np.floor(truth + 0.5 * rng.normal(size=n) + 1.5), 0, 4).astype(np.int32)
    cols = [
        scale * (truth + sigma * rng.normal(size=n)) + 3.0
        for sigma, scale in zip(sigmas, scales, strict=True)
    ]
    return np.column_stack(cols), labels, offsets
