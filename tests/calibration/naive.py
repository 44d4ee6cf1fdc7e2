"""Slow, obviously correct twins of the calibration code: plain Python loops over documents.

Each follows the formula in the paper (Tune and mix, Busa-Fekete et al. 2013, Sect. 5) as
literally as possible; the fast code is compared against these on fixed and random inputs.
"""

from __future__ import annotations

import math

import numpy as np


def naive_class_probs(row: list[float], a: float, b: float) -> list[float]:
    """p_l = s(f_l) / sum s, s(f) = 1 / (1 + exp(-a (f - b))), in plain floats (mpmath-free)."""
    s = [1.0 / (1.0 + math.exp(-a * (f - b))) for f in row]
    total = sum(s)
    return [x / total for x in s]


def naive_expected_gain(row: list[float], a: float, b: float, gains: list[float]) -> float:
    p = naive_class_probs(row, a, b)
    return sum(z * q for z, q in zip(gains, p, strict=True))


def naive_dcg(ranked_gains: list[float], cutoff: int | None = None) -> float:
    out = 0.0
    for r, g in enumerate(ranked_gains, start=1):
        if cutoff is not None and r > cutoff:
            break
        out += g / math.log2(r + 1)
    return out


def naive_ideal_dcg(doc_gains, query_offsets, cutoff: int | None) -> list[float]:
    out = []
    for q in range(len(query_offsets) - 1):
        g = sorted((float(x) for x in doc_gains[query_offsets[q] : query_offsets[q + 1]]),
                   reverse=True)
        out.append(naive_dcg(g, cutoff))
    return out


def naive_tcf(tcf, a, b, raw, labels, query_offsets, gains, C=2.0, sigma=0.1, doc_gains=None) -> float:
    """The TCF as a sum over documents (and queries for SNDCG), eqs. 15-19 of the paper; SNDCG's
    gains are the documents' own ``doc_gains`` when given, else their class gains."""
    n, k = len(raw), len(raw[0])
    probs = [naive_class_probs(list(map(float, raw[i])), a, b) for i in range(n)]
    if tcf == "sndcg":
        return naive_soft_dcg(
            [sum(gains[l] * probs[i][l] for l in range(k)) / max(gains) for i in range(n)],
            [float(gains[y]) for y in labels] if doc_gains is None else [float(g) for g in doc_gains],
            query_offsets,
            sigma,
        )
    total = 0.0
    for i in range(n):
        p, y = probs[i], int(labels[i])
        if tcf == "ls":
            total += -math.log(p[y])
        elif tcf == "ewls":
            h = -sum(q * math.log(q) for q in p if q > 0)
            total += -math.log(p[y]) * (h**C if C >= 0 else max(h, 1e-12) ** C)
        elif tcf == "el":
            total += sum((l - y) ** 2 * p[l] for l in range(k))
        elif tcf == "ell":
            lbar = sum(l * p[l] for l in range(k))
            total += (lbar - y) ** 2
        else:
            raise ValueError(tcf)
    return total


def naive_soft_dcg(v, doc_gains, query_offsets, sigma) -> float:
    """-sum_q sum_i sum_r z_i c_r h(i, j_r) / IDCG_q with the paper's h (eq. 19), normalised over
    documents i''; j the ranking by v (stable sort, descending); IDCG over the whole list."""
    total = 0.0
    for q in range(len(query_offsets) - 1):
        lo, hi = int(query_offsets[q]), int(query_offsets[q + 1])
        docs = list(range(lo, hi))
        idcg = naive_dcg(sorted((doc_gains[i] for i in docs), reverse=True))
        if idcg == 0:
            continue
        ranking = sorted(docs, key=lambda i: -v[i])
        for i in docs:
            denom = sum(math.exp(-((v[i] - v[i2]) ** 2) / sigma) for i2 in docs)
            for r, j in enumerate(ranking, start=1):
                h = math.exp(-((v[i] - v[j]) ** 2) / sigma) / denom
                total -= doc_gains[i] * (1.0 / math.log2(r + 1)) * h / idcg
    return total


def naive_ndcg_at(labels, scores, query_offsets, k: int = 10) -> float:
    """Mean NDCG@k with gain 2^l - 1, ties in input order; queries without relevant documents
    are skipped."""
    vals = []
    for q in range(len(query_offsets) - 1):
        lo, hi = int(query_offsets[q]), int(query_offsets[q + 1])
        docs = sorted(range(lo, hi), key=lambda i: -scores[i])
        g = [2.0 ** int(labels[i]) - 1 for i in docs]
        ideal = naive_dcg(sorted(g, reverse=True), k)
        if ideal > 0:
            vals.append(naive_dcg(g, k) / ideal)
    return float(np.mean(vals))


def synthetic_member(n_queries: int, docs_per_query: int, k: int, *, margin: float,
                     noise: float, seed: int):
    """An AdaBoost-like member: f_l = margin * (+1 if l is the label else -1) + noise."""
    rng = np.random.default_rng(seed)
    n = n_queries * docs_per_query
    probs = np.array([0.5, 0.25, 0.13, 0.08, 0.04][:k])
    labels = rng.choice(k, size=n, p=probs / probs.sum())
    raw = margin * (2.0 * (np.arange(k)[None, :] == labels[:, None]) - 1.0)
    raw = raw + rng.normal(0.0, noise, size=(n, k))
    offsets = np.arange(0, n + 1, docs_per_query, dtype=np.int64)
    gains = 2.0 ** np.arange(k) - 1.0
    return raw, labels.astype(np.int32), offsets, gains
