"""Generator families for ``bench.defaults``: ranking data that no default was chosen on.

Eight families, each a seeded recipe (a ``numpy`` Generator; the same seed gives the same arrays)
for train, validation and test queries with graded labels 0-4, most documents 0:

==================  =======  ================================================================
family              role     what it tests
==================  =======  ================================================================
``query_types``     choosing which features matter depends on a latent query type (four types,
                             each its own sparse weights), signalled only by noisy query-level
                             features
``sparse``          held out 3 informative features among 136 (the others noise, correlated
                             in groups of four)
``label_noise``     choosing heavy label noise: Gaussian noise as large as the signal, then one
                             label in ten replaced by a draw from the labels' marginal
``heavy_tailed``    held out lognormal, Pareto and count features with per-query scale
                             factors (as document lengths and popularity scale web features)
``tiny_queries``    held out many queries of 2 to 8 documents
``long_lists``      held out 300 to 1,000 documents a query, labels more skewed (three in
                             four documents 0)
``interactions``    choosing relevance from products and thresholds of features (tree-friendly)
``linear``          held out relevance linear in 50 features with per-query offsets (a linear
                             ranker on the raw features is the right model)
==================  =======  ================================================================

The default's choices (``tunemix/train/members/auto.py``) may be tuned on the *choosing* families
only (``CHOOSING``); the *held-out* families (``HELD_OUT``) are for reporting.

Every family has two sizes, ``small`` and ``large`` (training queries: about 10k and about 40k
training documents), validation a quarter of the training queries (at least 8), and a test set of
its own size. The recipe:

1. The family's parameters (weights, informative features, query-type embeddings) are drawn from
   ``default_rng([seed, family code])``: one truth for every split and size.
2. Each split draws its query sizes and documents from ``default_rng([seed, family code, split,
   size])``: the splits of one size are independent of each other and of the other size.
3. The family's documents give features ``x`` and a clean relevance score ``g``. Half the
   document features (``QUERY_DEPENDENT_SHARE``, drawn per family) are query-dependent: scaled
   and shifted per query, as a BM25 score is; the others mean the same in every query, as a
   PageRank does (a query-standardised view helps with the first kind, raw features serve the
   second; the share moves the comparison of a ranker that has such a view with one that has
   not, so it is one constant for every family). ``g`` is scaled
   to unit variance (on a probe of 20k documents), a per-query offset (standard deviation
   ``QUERY_OFFSET``: some queries have many relevant documents, some none) and Gaussian noise
   (``noise``) are added, and labels are cut at the probe's quantiles so that label ``l`` has the
   family's share (``GRADE_SHARES``: halving from 52% at 0, as in web data).
4. ``flip``: that share of labels is replaced by a draw from the labels' marginal distribution.

``python -m bench.defaults --datasets families --systems tunemix,lgbm_es --seeds 0`` measures
every family at every size (``families:small``: the small ones; ``family:<name>:<size>``: one).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.special import ndtr

from tunemix.core.data.dataset import RankingData, offsets_from_sizes

#: label shares of grades 0..4: each grade half as frequent as the one below
GRADE_SHARES = tuple(float(w) for w in 0.5 ** np.arange(5) / (0.5 ** np.arange(5)).sum())
#: standard deviation of the per-query offset added to the unit-variance relevance score
QUERY_OFFSET = 0.5
#: share of each family's document features that are query-dependent (scaled and shifted per
#: query, as a BM25 score is); the others mean the same in every query (as a PageRank does)
QUERY_DEPENDENT_SHARE = 0.5
#: documents of the probe that fixes the relevance scale and the label cut points
PROBE_DOCUMENTS = 20_000
SIZES = ("small", "large")
SPLITS = ("train", "vali", "test")

Params = dict[str, Any]
Documents = Callable[[Params, np.random.Generator, np.ndarray], tuple[np.ndarray, np.ndarray]]


@dataclass(frozen=True)
class Family:
    """One generator family: its shape, its truth (``draw``) and its documents (``documents``:
    parameters, a Generator and the query sizes to features ``x`` (n x d) and clean relevance
    ``g`` (n))."""

    name: str
    n_features: int
    docs_per_query: tuple[int, int]
    train_queries: dict[str, int]
    test_queries: int
    draw: Callable[[np.random.Generator, int], Params]
    documents: Documents
    noise: float = 0.3
    flip: float = 0.0
    shares: tuple[float, ...] = GRADE_SHARES
    vali_share: float = 0.25

    @property
    def code(self) -> int:
        """The family's stream number in the seed sequence (from its name: stable across runs)."""
        return zlib.crc32(self.name.encode())

    def vali_queries(self, size: str) -> int:
        return max(8, round(self.vali_share * self.train_queries[size]))


# ----------------------------------------------------------------------------- shared pieces
def _query_rows(sizes: np.ndarray) -> np.ndarray:
    return np.repeat(np.arange(sizes.size), sizes)


def _dependent(rng: np.random.Generator, d: int) -> np.ndarray:
    """Which of ``d`` features are query-dependent (``QUERY_DEPENDENT_SHARE`` of them, at random)."""
    return rng.permutation(d) < round(QUERY_DEPENDENT_SHARE * d)


def _query_affine(rng: np.random.Generator, u: np.ndarray, sizes: np.ndarray, spread: float,
                  dependent: np.ndarray, scale: bool = True) -> np.ndarray:
    """``u * s_q + t_q`` on the ``dependent`` columns, with ``s_q ~ logNormal(0, spread)``
    (``scale``) and ``t_q ~ N(0, spread)`` per query and feature: such a raw feature means
    different things in different queries; the other columns are ``u`` as it is."""
    rows = _query_rows(sizes)
    shift = np.where(dependent, spread * rng.standard_normal((sizes.size, u.shape[1])), 0.0)
    factor = np.where(dependent, np.exp(spread * rng.standard_normal((sizes.size, u.shape[1]))), 1.0)
    return (u * factor[rows] if scale else u) + shift[rows]


def _pairs(rng: np.random.Generator, features: np.ndarray, n: int) -> np.ndarray:
    """``n`` random pairs of distinct features from ``features``."""
    return np.array([rng.choice(features, size=2, replace=False) for _ in range(n)], dtype=np.int64)


def _pair_sum(u: np.ndarray, pairs: np.ndarray, coef: np.ndarray) -> np.ndarray:
    return (u[:, pairs[:, 0]] * u[:, pairs[:, 1]]) @ coef if len(pairs) else np.zeros(u.shape[0])


# ----------------------------------------------------------------------------- the families
def _draw_query_types(rng: np.random.Generator, d: int) -> Params:
    doc = d - 6  # the last 6 features are query-level: the type's embedding plus noise
    shared = rng.choice(doc, size=4, replace=False)
    own = np.stack([rng.choice(doc, size=8, replace=False) for _ in range(4)])
    weights = np.zeros((4, doc))
    for t in range(4):
        weights[t, shared] = 0.5
        weights[t, own[t]] += rng.standard_normal(8)
    return {"weights": weights, "embedding": rng.standard_normal((4, 6)), "doc": doc,
            "dependent": _dependent(rng, doc)}


def _query_types(p: Params, rng: np.random.Generator, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    rows = _query_rows(sizes)
    types = rng.integers(0, 4, size=sizes.size)
    u = rng.standard_normal((rows.size, p["doc"]))
    g = np.einsum("nd,nd->n", u, p["weights"][types[rows]])
    query_feats = p["embedding"][types] + 0.7 * rng.standard_normal((sizes.size, 6))
    x = np.hstack([_query_affine(rng, u, sizes, 0.5, p["dependent"]), query_feats[rows]])
    return x, g


def _draw_sparse(rng: np.random.Generator, d: int) -> Params:
    return {"informative": rng.choice(d, size=3, replace=False), "groups": rng.permutation(d) % (d // 4),
            "dependent": _dependent(rng, d)}


def _sparse(p: Params, rng: np.random.Generator, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    n, d = int(sizes.sum()), p["groups"].size
    factors = rng.standard_normal((n, d // 4))
    u = 0.6 * factors[:, p["groups"]] + 0.8 * rng.standard_normal((n, d))
    i, j, k = p["informative"]
    u[:, [i, j, k]] = rng.standard_normal((n, 3))  # independent of the noise features' groups
    g = u[:, i] + 0.8 * np.tanh(1.5 * u[:, j]) + 0.6 * np.maximum(u[:, k], 0.0)
    return _query_affine(rng, u, sizes, 0.5, p["dependent"]), g


def _draw_polynomial(rng: np.random.Generator, d: int, n_pairs: int = 10) -> Params:
    return {"w": rng.standard_normal(d), "pairs": _pairs(rng, np.arange(d), n_pairs),
            "coef": 0.5 * rng.standard_normal(n_pairs), "dependent": _dependent(rng, d)}


def _polynomial(p: Params, rng: np.random.Generator, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    u = rng.standard_normal((int(sizes.sum()), p["w"].size))
    g = u @ p["w"] / np.sqrt(p["w"].size) + _pair_sum(u, p["pairs"], p["coef"])
    return _query_affine(rng, u, sizes, 0.5, p["dependent"]), g


def _draw_heavy_tailed(rng: np.random.Generator, d: int) -> Params:
    kinds = np.array(["lognormal"] * (d // 2) + ["pareto"] * (d // 4) + ["count"] * (d - d // 2 - d // 4))
    return {"w": np.where(rng.random(d) < 0.3, rng.standard_normal(d), 0.0), "pairs": _pairs(rng, np.arange(d), 2),
            "coef": 0.4 * rng.standard_normal(2), "kinds": rng.permutation(kinds),
            "sigma": rng.uniform(0.8, 2.0, d), "alpha": rng.uniform(1.1, 2.5, d), "dependent": _dependent(rng, d)}


def _heavy_tailed(p: Params, rng: np.random.Generator, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    n, d = int(sizes.sum()), p["w"].size
    u = rng.standard_normal((n, d))
    g = u @ p["w"] + _pair_sum(u, p["pairs"], p["coef"])
    # a per-query scale factor on the query-dependent features
    scale = np.where(p["dependent"], np.exp(rng.standard_normal((sizes.size, d))), 1.0)[_query_rows(sizes)]
    kinds = p["kinds"]
    x = np.empty_like(u)
    logn = kinds == "lognormal"
    x[:, logn] = np.exp(p["sigma"][logn] * u[:, logn]) * scale[:, logn]
    par = kinds == "pareto"
    x[:, par] = scale[:, par] * (1.0 - ndtr(u[:, par])).clip(1e-12) ** (-1.0 / p["alpha"][par])
    cnt = kinds == "count"
    x[:, cnt] = np.floor(2.0 * np.exp(p["sigma"][cnt] * u[:, cnt]) * scale[:, cnt])
    return x, g


def _draw_interactions(rng: np.random.Generator, d: int) -> Params:
    return {"steps": _pairs(rng, np.arange(d), 6), "cuts": rng.uniform(-0.5, 1.0, (6, 2)),
            "step_coef": rng.uniform(1.0, 2.0, 6), "pairs": _pairs(rng, np.arange(d), 3),
            "coef": rng.choice([-1.0, 1.0], 3) * rng.uniform(0.5, 1.0, 3), "dependent": _dependent(rng, d)}


def _interactions(p: Params, rng: np.random.Generator, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    u = rng.standard_normal((int(sizes.sum()), 20))
    a, b = p["steps"][:, 0], p["steps"][:, 1]
    steps = (u[:, a] > p["cuts"][:, 0]) & (u[:, b] > p["cuts"][:, 1])
    g = steps @ p["step_coef"] + _pair_sum(u, p["pairs"], p["coef"])
    return _query_affine(rng, u, sizes, 0.3, p["dependent"]), g


def _draw_linear(rng: np.random.Generator, d: int) -> Params:
    return {"w": rng.standard_normal(d), "dependent": _dependent(rng, d)}


def _linear(p: Params, rng: np.random.Generator, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    u = rng.standard_normal((int(sizes.sum()), p["w"].size))
    return _query_affine(rng, u, sizes, 0.5, p["dependent"], scale=False), u @ p["w"]


FAMILIES: dict[str, Family] = {f.name: f for f in (
    Family("query_types", 46, (20, 100), {"small": 170, "large": 670}, 300, _draw_query_types, _query_types),
    Family("sparse", 136, (40, 120), {"small": 125, "large": 500}, 200, _draw_sparse, _sparse),
    Family("label_noise", 30, (20, 100), {"small": 170, "large": 670}, 400, _draw_polynomial, _polynomial,
           noise=1.0, flip=0.1),
    Family("heavy_tailed", 40, (20, 100), {"small": 170, "large": 670}, 300, _draw_heavy_tailed, _heavy_tailed),
    Family("tiny_queries", 30, (2, 8), {"small": 2000, "large": 8000}, 1000, _draw_polynomial, _polynomial),
    Family("long_lists", 40, (300, 1000), {"small": 16, "large": 62}, 60, _draw_polynomial, _polynomial,
           shares=(0.75, 0.15, 0.06, 0.03, 0.01)),
    Family("interactions", 20, (20, 100), {"small": 170, "large": 670}, 300, _draw_interactions, _interactions),
    Family("linear", 50, (20, 100), {"small": 170, "large": 670}, 300, _draw_linear, _linear),
)}
#: the families the default's choices may be tuned on
CHOOSING = ("query_types", "label_noise", "interactions")
#: the families held out from those choices: the benchmark's report
HELD_OUT = tuple(name for name in FAMILIES if name not in CHOOSING)


def role(name: str) -> str:
    """``"choosing"`` or ``"held-out"``."""
    if name not in FAMILIES:
        raise ValueError(f"unknown family {name!r}; known: {', '.join(FAMILIES)}")
    return "choosing" if name in CHOOSING else "held-out"


# ----------------------------------------------------------------------------- sampling
def _documents(family: Family, params: Params, rng: np.random.Generator, n_queries: int
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    lo, hi = family.docs_per_query
    sizes = rng.integers(lo, hi + 1, size=n_queries)
    x, g = family.documents(params, rng, sizes)
    return sizes, x, g


def _scored(family: Family, rng: np.random.Generator, sizes: np.ndarray, g: np.ndarray, scale: float) -> np.ndarray:
    offset = QUERY_OFFSET * rng.standard_normal(sizes.size)
    return g * scale + offset[_query_rows(sizes)] + family.noise * rng.standard_normal(g.size)


def truth(family: Family, seed: int = 0) -> tuple[Params, float, np.ndarray]:
    """The family's parameters at ``seed``, the scale that gives its clean relevance unit
    variance, and the label cut points (both from a probe of ``PROBE_DOCUMENTS`` documents)."""
    rng = np.random.default_rng([seed, family.code])
    params = family.draw(rng, family.n_features)
    probe_queries = max(1, PROBE_DOCUMENTS * 2 // sum(family.docs_per_query))
    sizes, _, g = _documents(family, params, rng, probe_queries)
    scale = 1.0 / max(float(g.std()), 1e-12)
    cuts = np.quantile(_scored(family, rng, sizes, g, scale), np.cumsum(family.shares)[:-1])
    return params, scale, cuts


def make_family_splits(family: str | Family, size: str, seed: int = 0) -> dict[str, RankingData]:
    """Train, validation and test queries of ``family`` (a name of ``FAMILIES`` or a ``Family``)
    at ``size`` (``small``, ``large``)."""
    if isinstance(family, str):
        role(family)
        family = FAMILIES[family]
    name = family.name
    if size not in SIZES:
        raise ValueError(f"unknown size {size!r}; known: {', '.join(SIZES)}")
    params, scale, cuts = truth(family, seed)
    counts = {"train": family.train_queries[size], "vali": family.vali_queries(size), "test": family.test_queries}
    out, first_qid = {}, 1
    for split_no, split in enumerate(SPLITS, start=1):
        rng = np.random.default_rng([seed, family.code, split_no, SIZES.index(size)])
        sizes, x, g = _documents(family, params, rng, counts[split])
        labels = np.searchsorted(cuts, _scored(family, rng, sizes, g, scale), side="right")
        if family.flip:
            flipped = rng.random(labels.size) < family.flip
            labels[flipped] = rng.choice(len(family.shares), size=int(flipped.sum()), p=family.shares)
        qids = np.arange(first_qid, first_qid + sizes.size).astype(np.str_)
        out[split] = RankingData(features=x.astype(np.float32), labels=labels.astype(np.int32),
                                 query_offsets=offsets_from_sizes(sizes), qids=qids,
                                 source=f"family:{name}:{size}:{split}:seed={seed}")
        first_qid += sizes.size
    return out


def dataset_names(spec: str) -> list[str]:
    """``families`` -> every ``family:<name>:<size>``; ``families:<size>`` -> every family at that
    size; ``family:<name>`` -> that family at every size; ``family:<name>:<size>`` -> itself.
    ValueError for an unknown family or size."""
    head, _, rest = spec.partition(":")
    if head == "families":
        sizes = [rest] if rest else list(SIZES)
        names = list(FAMILIES)
    elif head == "family":
        name, _, size = rest.partition(":")
        names, sizes = [name], [size] if size else list(SIZES)
    else:
        raise ValueError(f"not a family data set: {spec!r}")
    for name in names:
        role(name)
    bad = [s for s in sizes if s not in SIZES]
    if bad:
        raise ValueError(f"unknown size {bad[0]!r} in {spec!r}; known: {', '.join(SIZES)}")
    return [f"family:{n}:{s}" for n in names for s in sizes]


def parse(dataset: str) -> tuple[str, str]:
    """``family:<name>:<size>`` -> (name, size)."""
    names = dataset_names(dataset)
    if len(names) != 1 or names[0] != dataset:
        raise ValueError(f"not one family data set (family:<name>:<size>): {dataset!r}")
    _, name, size = dataset.split(":")
    return name, size
