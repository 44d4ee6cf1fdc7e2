"""Slow, obviously correct twin of the evaluation kernels, written from docs/conventions.md.

One query at a time, plain Python lists, ``sorted``; it does not import the package's
convention tables (each rule is spelled out here from the spec's tables).
"""

from __future__ import annotations

import math
import struct

NAN = float("nan")


def to_float32(x: float) -> float:
    """Round to the nearest float32 (C's double -> float); beyond its range, +-infinity."""
    try:
        return float(struct.unpack("f", struct.pack("f", x))[0])
    except OverflowError:  # struct refuses only when the rounded value is infinite
        return math.copysign(math.inf, x)


def ranking(scores: list[float], docids: list[str] | None, convention: str) -> list[int]:
    """Positions (0-based, within the query) in ranked order."""
    idx = list(range(len(scores)))
    if convention == "trec":
        s32 = [to_float32(s) for s in scores]
        ids = docids if docids is not None else [str(i) for i in idx]
        # score descending, then docid descending byte-wise (strcmp).
        return sorted(idx, key=lambda i: (s32[i], ids[i].encode("utf-8")), reverse=True)
    # Python's sort is stable: equal scores keep input order.
    return sorted(idx, key=lambda i: -scores[i])


def gain(label: int, convention: str) -> float:
    if convention in ("letor3", "letor4"):
        return {0: 0.0, 1: 1.0, 2: 3.0}.get(label, 0.0)
    if convention == "mslr":
        return {0: 0.0, 1: 1.0, 2: 3.0, 3: 7.0, 4: 15.0}.get(label, 0.0)
    if convention in ("yahoo", "ranklib"):
        return 2.0**label - 1.0
    return float(label) if label > 0 else 0.0  # trec: linear


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
    if convention in ("yahoo", "ranklib"):
        return (2.0**label - 1.0) / 16.0
    if convention in ("letor3", "letor4"):
        return gain(label, convention) / 3.0
    if convention == "mslr":
        return gain(label, convention) / 15.0
    return label / 4.0  # trec, top label 4


def _dcg(gains: list[float], k: int, convention: str) -> float:
    return sum(g * weight(r + 1, convention) for r, g in enumerate(gains[:k]))


def ndcg_at(ranked: list[int], k: int, convention: str, *, dcg_only: bool = False) -> float:
    n = len(ranked)
    if n < k and convention == "letor3":
        return NAN
    if n < k and convention in ("letor4", "mslr"):
        return 0.0
    gains = [gain(label, convention) for label in ranked]
    dcg = _dcg(gains, k, convention)
    if dcg_only:
        return dcg
    ideal = _dcg(sorted(gains, reverse=True), k, convention)
    if ideal == 0:
        return 1.0 if convention == "yahoo" else 0.0
    return dcg / ideal


def query_value(
    name: str,
    cutoff: int | None,
    top: int | None,
    labels: list[int],
    scores: list[float],
    convention: str,
    docids: list[str] | None = None,
) -> float:
    """One measure on one query, from the spec's tables."""
    order = ranking(scores, docids, convention)
    ranked = [labels[i] for i in order]
    n = len(ranked)
    k = cutoff if cutoff is not None else n
    if name in ("ndcg", "dcg"):
        return ndcg_at(ranked, k, convention, dcg_only=name == "dcg")
    if name == "err":
        total, p = 0.0, 1.0
        for r, label in enumerate(ranked[:k]):
            big_r = err_prob(label, convention, top)
            total += p * big_r / (r + 1)
            p *= 1.0 - big_r
        return total
    if name == "p":
        if n < k and convention == "letor3":
            return NAN
        hits = sum(1 for label in ranked[:k] if relevant(label, convention))
        return hits / (min(k, n) if convention == "ranklib" else k)
    if name == "map":
        hits, total = 0, 0.0
        for r, label in enumerate(ranked):
            if relevant(label, convention):
                hits += 1
                total += hits / (r + 1)
        return total / hits if hits else 0.0
    if name == "meanndcg":
        values = []
        for j in range(1, n + 1):
            gains = [gain(label, convention) for label in ranked]
            ideal = _dcg(sorted(gains, reverse=True), j, convention)
            if ideal == 0:
                values.append(1.0 if convention == "yahoo" else 0.0)
            else:
                values.append(_dcg(gains, j, convention) / ideal)
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
                None if docids is None else docids[sl],
            )
        )
        start += size
    mean = sum(0.0 if math.isnan(v) else v for v in values) / len(values)
    return values, mean
