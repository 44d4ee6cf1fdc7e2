"""Slow, obviously correct twin of the evaluation kernels, written from docs/conventions.md.

One query at a time, plain Python lists, ``sorted``; it does not import the package's
convention tables (each rule is spelled out here from the spec's tables).
"""

from __future__ import annotations

import math
import struct

import numpy as np
from numba import njit

NAN = float("nan")
EXP_GAIN = ("yahoo", "ranklib", "lightgbm", "xgboost")
LINEAR_GAIN = ("trec", "sklearn", "ranx")
EMPTY_ONE = ("yahoo", "lightgbm", "xgboost")


@njit(cache=True)
def _numba_argsort(x):
    return np.argsort(x)


def to_float32(x: float) -> float:
    """Round to the nearest float32 (C's double -> float); beyond its range, +-infinity."""
    try:
        return float(struct.unpack("f", struct.pack("f", x))[0])
    except OverflowError:  # struct refuses only when the rounded value is infinite
        return math.copysign(math.inf, x)


def ranking(scores: list[float], docids: list[str] | None, convention: str) -> list[int]:
    """Positions (0-based, within the query) in ranked order."""
    idx = list(range(len(scores)))
    if convention == "ranx":
        # ranx's Run: numba's np.argsort (quicksort) of the negated scores, in input order
        return [int(i) for i in _numba_argsort(np.array([-s for s in scores], dtype=np.float64))]
    if convention == "xgboost":  # float32 predictions, stable
        s32 = [to_float32(s) for s in scores]
        return sorted(idx, key=lambda i: -s32[i])
    if convention == "trec":
        s32 = [to_float32(s) for s in scores]
        ids = docids if docids is not None else [str(i) for i in idx]
        # score descending, then docid descending byte-wise (strcmp).
        return sorted(idx, key=lambda i: (s32[i], ids[i].encode("utf-8")), reverse=True)
    # Python's sort is stable: equal scores keep input order.
    return sorted(idx, key=lambda i: -scores[i])


def gain(label: int, convention: str, variant: str | None = None) -> float:
    if variant == "exp":
        return 2.0**label - 1.0
    if variant == "linear":
        return float(label)
    if convention in ("letor3", "letor4"):
        return {0: 0.0, 1: 1.0, 2: 3.0}.get(label, 0.0)
    if convention == "mslr":
        return {0: 0.0, 1: 1.0, 2: 3.0, 3: 7.0, 4: 15.0}.get(label, 0.0)
    if convention in EXP_GAIN:
        return 2.0**label - 1.0
    return float(label) if label > 0 else 0.0  # trec, sklearn, ranx: linear


def weight(rank: int, convention: str) -> float:
    """Discount of 1-based rank."""
    if convention in ("letor3", "letor4", "mslr"):
        return 1.0 if rank <= 2 else 1.0 / math.log2(rank)
    return 1.0 / math.log2(rank + 1)


def relevant(label: int, convention: str) -> bool:
    if convention in ("letor3", "letor4"):
        return label in (1, 2)
    if convention == "mslr":
        return label in (2, 3, 4)
    return label >= 1


def err_prob(label: int, convention: str, top: int | None) -> float:
    if top is not None:
        if convention in ("letor3", "letor4", "mslr"):
            g = gain(label, convention)
        else:
            g = 2.0**label - 1.0
        return g / 2.0**top
    if convention in EXP_GAIN:
        return (2.0**label - 1.0) / 16.0
    if convention in ("letor3", "letor4"):
        return gain(label, convention) / 3.0
    if convention == "mslr":
        return gain(label, convention) / 15.0
    return label / 4.0  # trec, sklearn, ranx: top label 4


def _dcg(gains: list[float], k: int, convention: str) -> float:
    return sum(g * weight(r + 1, convention) for r, g in enumerate(gains[:k]))


def per_rank(values: list[float], ranked_scores: list[float], convention: str) -> list[float]:
    """The value at each rank; sklearn: the mean over the rank's group of equal scores."""
    if convention != "sklearn":
        return values
    out = []
    for s in ranked_scores:
        group = [v for v, t in zip(values, ranked_scores, strict=True) if t == s]
        out.append(sum(group) / len(group))
    return out


def empty_value(convention: str, empty: int | None) -> float:
    if empty is not None:
        return float(empty)
    return 1.0 if convention in EMPTY_ONE else 0.0


def ndcg_at(ranked: list[int], k: int, convention: str, *, dcg_only: bool = False,
            ranked_scores: list[float] | None = None, variant: str | None = None,
            empty: int | None = None) -> float:
    n = len(ranked)
    if n < k and convention == "letor3":
        return NAN
    if n < k and convention in ("letor4", "mslr"):
        return 0.0
    gains = [gain(label, convention, variant) for label in ranked]
    ideal = _dcg(sorted(gains, reverse=True), k, convention)
    if ranked_scores is not None:
        gains = per_rank(gains, ranked_scores, convention)
    dcg = _dcg(gains, k, convention)
    if dcg_only:
        return dcg
    if ideal == 0:
        return empty_value(convention, empty)
    return dcg / ideal


def query_value(
    name: str,
    cutoff: int | None,
    top: int | None,
    labels: list[int],
    scores: list[float],
    convention: str,
    docids: list[str] | None = None,
    variant: str | None = None,
    empty: int | None = None,
) -> float:
    """One measure on one query, from the spec's tables (``variant``/``empty``: the measure's
    gain and empty-query overrides)."""
    order = ranking(scores, docids, convention)
    ranked = [labels[i] for i in order]
    ranked_scores = [scores[i] for i in order]
    n = len(ranked)
    k = cutoff if cutoff is not None else n
    if name == "ndcg" and cutoff is None and convention == "xgboost":
        k = min(n, 32)  # XGBoost's uncut ndcg: LambdaRankParam::TopK() = DefaultK() = 32
    if name in ("ndcg", "dcg"):
        return ndcg_at(ranked, k, convention, dcg_only=name == "dcg", ranked_scores=ranked_scores,
                       variant=variant, empty=empty)
    if name == "err":
        probs = per_rank([err_prob(label, convention, top) for label in ranked], ranked_scores, convention)
        total, p = 0.0, 1.0
        for r, big_r in enumerate(probs[:k]):
            total += p * big_r / (r + 1)
            p *= 1.0 - big_r
        return total
    rels = per_rank([1.0 if relevant(label, convention) else 0.0 for label in ranked], ranked_scores,
                    convention)
    if name == "p":
        if n < k and convention == "letor3":
            return NAN
        hits = sum(rels[:k])
        return hits / (min(k, n) if convention == "ranklib" else k)
    if name == "map":
        n_rel = sum(1 for label in ranked if relevant(label, convention))
        hits, total = 0.0, 0.0
        for r, v in enumerate(rels):
            if v:
                hits += v
                total += v * hits / (r + 1)
        return total / n_rel if n_rel else 0.0
    if name == "meanndcg":
        # NDCG@j for j = 1..n: no short-list rule applies (j <= n)
        values = [ndcg_at(ranked, j, convention, ranked_scores=ranked_scores, variant=variant,
                          empty=empty) for j in range(1, n + 1)]
        return sum(values) / n
    raise ValueError(name)


def evaluate_naive(
    name: str,
    cutoff: int | None,
    top: int | None,
    labels: list[int],
    scores: list[float],
    sizes: list[int],
    convention: str,
    docids: list[str] | None = None,
    variant: str | None = None,
    empty: int | None = None,
) -> tuple[list[float], float]:
    """Per-query values and the tool's mean (a missing value adds 0, divide by all queries).

    trec without docids: the 0-based position within the query's list, as a decimal string.
    """
    if docids is None and convention == "trec":
        docids = [str(i) for size in sizes for i in range(size)]
    values = []
    start = 0
    for size in sizes:
        sl = slice(start, start + size)
        values.append(
            query_value(
                name, cutoff, top, labels[sl], scores[sl], convention,
                None if docids is None else docids[sl], variant, empty,
            )
        )
        start += size
    mean = sum(0.0 if math.isnan(v) else v for v in values) / len(values)
    return values, mean
