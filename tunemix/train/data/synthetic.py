"""Synthetic ranking data: McRank's "artificial" data set, made here from a seed.

McRank (Li, Burges, Wu, NIPS 2007, section 6.1) and RankNet (Burges et al. 2005) use data
"generated from random cubic polynomials" of the features, with graded labels. We follow that
recipe and make one choice of our own explicit:

1. A latent feature vector u ~ N(0, I_d) per document.
2. A random cubic polynomial g(u) = sum_j a_j u_j + sum_(j,k) b_jk u_j u_k + sum_(j,k,m) c_jkm u_j u_k u_m
   with coefficients ~ N(0, 1) over ``n_terms`` random pairs and triples each, scaled to unit
   variance, plus Gaussian label noise of standard deviation ``noise``.
3. Labels 0..K-1 by thresholding g at global quantiles chosen so that label frequencies fall
   geometrically (each level half as frequent as the one below), as in web data.
4. The observed features are a per-query affine distortion of u: x = u * s_q + t_q with
   s_q ~ logNormal(0, ``query_shift``) and t_q ~ N(0, ``query_shift``) per feature. This makes
   raw features query-dependent, as real features are (a BM25 score means little across
   queries), so query-wise standardisation has something to fix.

The polynomial depends only on ``seed``; :func:`make_synthetic_splits` samples train,
validation and test sets from the same polynomial.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tunemix.core.data.dataset import RankingData, offsets_from_sizes


@dataclass(frozen=True)
class CubicPolynomial:
    """A random cubic polynomial of d variables with unit output variance on N(0, I)."""

    linear: np.ndarray  # (d,)
    pairs: np.ndarray  # (t, 2) int
    pair_coef: np.ndarray  # (t,)
    triples: np.ndarray  # (t, 3) int
    triple_coef: np.ndarray  # (t,)
    scale: float

    @classmethod
    def random(cls, n_features: int, n_terms: int, rng: np.random.Generator) -> CubicPolynomial:
        linear = rng.standard_normal(n_features)
        pairs = rng.integers(0, n_features, size=(n_terms, 2))
        triples = rng.integers(0, n_features, size=(n_terms, 3))
        poly = cls(linear, pairs, rng.standard_normal(n_terms), triples, rng.standard_normal(n_terms), 1.0)
        probe = rng.standard_normal((4096, n_features))
        std = float(np.std(poly(probe)))
        return cls(linear, pairs, poly.pair_coef, triples, poly.triple_coef, 1.0 / max(std, 1e-12))

    def __call__(self, u: np.ndarray) -> np.ndarray:
        out = u @ self.linear
        out += (u[:, self.pairs[:, 0]] * u[:, self.pairs[:, 1]]) @ self.pair_coef
        out += (u[:, self.triples[:, 0]] * u[:, self.triples[:, 1]] * u[:, self.triples[:, 2]]) @ self.triple_coef
        return out * self.scale


def _level_thresholds(n_levels: int, polynomial: CubicPolynomial, noise: float, rng: np.random.Generator,
                      n_features: int) -> np.ndarray:
    """Global cut points so that P(level l) is proportional to 2^-l."""
    weights = 0.5 ** np.arange(n_levels)
    cum = np.cumsum(weights / weights.sum())[:-1]
    probe = rng.standard_normal((20000, n_features))
    values = polynomial(probe) + noise * rng.standard_normal(probe.shape[0])
    return np.quantile(values, cum)


def _check_args(n_queries: int, docs_per_query: int | tuple[int, int], n_features: int, n_levels: int) -> None:
    if n_queries < 1:
        raise ValueError(f"n_queries must be at least 1, got {n_queries}")
    if n_features < 1:
        raise ValueError(f"n_features must be at least 1, got {n_features}")
    if not 2 <= n_levels <= 16:
        raise ValueError(f"n_levels must be between 2 and 16, got {n_levels}")
    lo, hi = docs_per_query if isinstance(docs_per_query, tuple) else (docs_per_query, docs_per_query)
    if lo < 1 or hi < lo:
        raise ValueError(f"docs_per_query must be >= 1 (or a range lo <= hi), got {docs_per_query}")


def make_synthetic_splits(
    *,
    n_queries: dict[str, int] | None = None,
    docs_per_query: int | tuple[int, int] = (20, 60),
    n_features: int = 30,
    n_levels: int = 5,
    n_terms: int | None = None,
    noise: float = 0.3,
    query_shift: float = 0.5,
    seed: int = 0,
) -> dict[str, RankingData]:
    """Train/validation/test sets (default 300/100/100 queries) sampled from one polynomial."""
    sizes = n_queries if n_queries is not None else {"train": 300, "vali": 100, "test": 100}
    for nq in sizes.values():
        _check_args(nq, docs_per_query, n_features, n_levels)
    rng = np.random.default_rng(seed)
    poly = CubicPolynomial.random(n_features, n_terms if n_terms is not None else 2 * n_features, rng)
    cuts = _level_thresholds(n_levels, poly, noise, rng, n_features)
    out: dict[str, RankingData] = {}
    first_qid = 1
    for split_no, (name, nq) in enumerate(sizes.items()):
        split_rng = np.random.default_rng([seed, split_no + 1])
        out[name] = _sample(split_rng, poly, cuts, nq, docs_per_query, n_features, noise, query_shift,
                            first_qid, f"synthetic:{name}:seed={seed}")
        first_qid += nq
    return out


def make_synthetic(
    *,
    n_queries: int = 300,
    docs_per_query: int | tuple[int, int] = (20, 60),
    n_features: int = 30,
    n_levels: int = 5,
    n_terms: int | None = None,
    noise: float = 0.3,
    query_shift: float = 0.5,
    seed: int = 0,
) -> RankingData:
    """One synthetic data set (see the module docstring for the recipe)."""
    return make_synthetic_splits(
        n_queries={"data": n_queries}, docs_per_query=docs_per_query, n_features=n_features,
        n_levels=n_levels, n_terms=n_terms, noise=noise, query_shift=query_shift, seed=seed,
    )["data"]


def _sample(
    rng: np.random.Generator,
    poly: CubicPolynomial,
    cuts: np.ndarray,
    n_queries: int,
    docs_per_query: int | tuple[int, int],
    n_features: int,
    noise: float,
    query_shift: float,
    first_qid: int,
    source: str,
) -> RankingData:
    lo, hi = docs_per_query if isinstance(docs_per_query, tuple) else (docs_per_query, docs_per_query)
    sizes = rng.integers(lo, hi + 1, size=n_queries)
    n = int(sizes.sum())
    u = rng.standard_normal((n, n_features))
    g = poly(u) + noise * rng.standard_normal(n)
    labels = np.searchsorted(cuts, g, side="right").astype(np.int32)
    q_scale = np.exp(query_shift * rng.standard_normal((n_queries, n_features)))
    q_shift = query_shift * rng.standard_normal((n_queries, n_features))
    qrow = np.repeat(np.arange(n_queries), sizes)
    x = (u * q_scale[qrow] + q_shift[qrow]).astype(np.float32)
    offsets = offsets_from_sizes(sizes)
    qids = np.arange(first_qid, first_qid + n_queries).astype(np.str_)
    within = np.arange(n) - offsets[qrow]
    docids = np.char.add(np.char.add(np.char.add("q", qids[qrow]), "-d"), within.astype(np.str_))
    return RankingData(features=x, labels=labels, query_offsets=offsets, qids=qids, docids=docids,
                       source=source)
