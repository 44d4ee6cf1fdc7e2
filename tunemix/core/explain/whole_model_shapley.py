"""Whole-model Shapley values of the served score (``method="shapley"``: audits; the default is
``tunemix.core.explain.exact_explanation``).

Imports numpy code only (the service uses it). **The game.** For document i of a query with
candidate list X (n, d) and a reference document r (d,), a coalition S of features gives the
hybrid row ``z_S = x_i on S, r elsewhere``; its value is the score the model serves to row i
when the list is posted with row i replaced by z_S and **every other document held at its
posted values**:

    v(S) = score(X with row i := z_S)[i]

This is the whole model: views (their per-query statistics are recomputed for the modified
list, as scoring would), every member's forest or linear map, calibrators and the mix (per-query
rescaling included). The contributions are the Shapley values of v (Shapley 1953; with one
reference this is "baseline Shapley", Sundararajan and Najmi 2020, "The many Shapley values for
model explanation"):

    phi_f = sum_{S subset N \\ {f}} |S|! (d - |S| - 1)! / d! (v(S + f) - v(S))

so ``baseline + sum(phi) == v(N)``, the served score, to float rounding, where
``baseline = v(empty)`` is the score row i would get with the reference's features. The
reference is by default the list's per-feature median (``"median"``; ``"mean"`` or any (d,) array
may be given). ``explain_pair`` is the difference of two documents' explanations: contributions
to score(a) - score(b); their baselines differ only through the query-wise parts of the model
(views, per-query rescaling), and that difference is the pair's "rest of the list" (``rest_of_list``).

**Dummies.** A feature f for which v(S + f) = v(S) for every S has phi_f = 0 and leaves the game
(Shapley's dummy axiom). Without a whitened view every column of the model's input depends on
one raw feature (a raw column, or its standardised copy, which depends only on that feature's
column of the list), so wide row j under S takes each column from the posted list's view (f in S)
or from the view of the list with row i := r (f not in S). A feature is a dummy when, for every
document of the list, its columns take values on the same side of every split threshold of the
forest on that column and no linear run reads it with a non-zero weight; documents none of whose
columns cross a threshold keep their posted member scores and are not scored again. With a
whitened view (each whitened column mixes all features) a feature is a dummy only when x_if ==
r_f, and every coalition scores the whole modified list.

**Exact or sampled.** With m features left, the game is enumerated exactly (2^m coalitions) when
2^m times the cost of a coalition fits ``budget`` (and m <= ``EXACT_MAX_FEATURES``). A coalition
costs the documents it scores through the forest plus the mix of the list (n documents over M
members, counted as n M / n_base forest rows): ``budget`` bounds the forest rows per explained
document, and with it the time (each row walks the whole forest).
Otherwise the contributions are estimated by antithetic permutation sampling (Castro et al.
2009; Mitchell et al. 2022): for a permutation pi, the marginal contributions along the path
from r to x_i telescope to v(N) - v(empty), so the estimate adds up exactly as well; each
permutation is paired with its reverse and the reported ``standard_error`` (per feature) is the
standard error of the mean over the pairs. Coalitions are scored in batches through the forest
kernel, the calibration step and the mixer, never one ``predict`` call per coalition.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from math import factorial

import numpy as np
import numpy.typing as npt

from tunemix.core.scoring.ensemble_model import EnsembleModel

#: exact enumeration is never tried above this many relevant features (2^16 coalitions)
EXACT_MAX_FEATURES = 16
#: documents scored (forest rows) per explained document, by default: the cost bound
DEFAULT_BUDGET = 1 << 16
#: elements of one batch's largest array (rows x columns), to bound the memory of a call
BATCH_ELEMENTS = 1 << 21


@dataclass
class _Game:
    relevant: npt.NDArray[np.int64]        # the features left after the dummies
    cost: int                              # forest rows per coalition (the mix counted as rows)
    values: Callable[[npt.NDArray[np.bool_]], npt.NDArray[np.float64]]  # (B, m) masks -> (B,)


def _thresholds(model: EnsembleModel) -> list[npt.NDArray[np.float32]]:
    """Per wide column, the sorted distinct split thresholds of the forest on it."""
    f = model.forest
    feat = f.node_feature.astype(np.int64)
    return [np.unique(f.node_threshold[feat == c]) for c in range(f.n_features)]


def _linear_read(model: EnsembleModel) -> npt.NDArray[np.bool_]:
    """Wide columns a linear run reads with a non-zero weight."""
    w = getattr(model, "_linear_w", None)
    if w is None or w.size == 0:
        return np.zeros(model.forest.n_features, dtype=bool)
    return np.asarray(np.any(w != 0.0, axis=1))


def _mixing_cost(model: EnsembleModel, n: int) -> int:
    """Mixing a list of n documents over M members, in forest rows (one row walks n_base bases)."""
    return -(-n * model.n_members // max(model.forest.n_base, 1))


def _batch(total: int, per_item: int) -> int:
    return max(1, BATCH_ELEMENTS // max(per_item, 1)) if total else 1


def _mixed_at(model: EnsembleModel, member: np.ndarray, n: int, i: int) -> np.ndarray:
    """The mixed score of row i of each of the B lists stacked in ``member`` (B * n, M)."""
    b = member.shape[0] // n
    out = model.mixer.transform(member, np.arange(b + 1, dtype=np.int64) * n)
    return np.asarray(out, dtype=np.float64).reshape(b, n)[:, i]


def _column_game(model: EnsembleModel, xq: np.ndarray, i: int, r: np.ndarray,
                 thresholds: list[np.ndarray], linear_read: np.ndarray) -> _Game:
    """The game of a model without whitened views: columns taken from two precomputed views."""
    n, d = xq.shape
    one = np.array([0, n], dtype=np.int64)
    x0 = xq.copy()
    x0[i] = r
    w1, w0 = model.wide_features(xq, one), model.wide_features(x0, one)
    blocks = w1.shape[1] // d
    crosses = np.zeros(w1.shape, dtype=bool)
    # a missing value (NaN) goes its own way at every node: a change to or from missing crosses,
    # missing in both does not
    nan0, nan1 = np.isnan(w0), np.isnan(w1)
    moved = (w0 != w1) & ~(nan0 & nan1)
    for c in np.flatnonzero(np.any(moved, axis=0)):
        if linear_read[c]:
            crosses[:, c] = moved[:, c]
        elif thresholds[c].size:
            crosses[:, c] = (nan0[:, c] != nan1[:, c]) | (
                np.searchsorted(thresholds[c], w0[:, c], side="right")
                != np.searchsorted(thresholds[c], w1[:, c], side="right"))
    by_feature = crosses.reshape(n, blocks, d).any(axis=1)       # (n, d)
    relevant = np.flatnonzero(by_feature.any(axis=0)).astype(np.int64)
    docs = np.union1d(np.flatnonzero(np.any(by_feature, axis=1)), np.array([i])).astype(np.int64)
    posted = model.member_scores(xq, one)                         # (n, M)
    a1, a0 = w1[docs], w0[docs]
    per_coalition = len(docs) * w1.shape[1] + n * posted.shape[1]

    def values(masks: np.ndarray) -> np.ndarray:
        out = np.empty(masks.shape[0], dtype=np.float64)
        step = _batch(masks.shape[0], per_coalition)
        for s in range(0, masks.shape[0], step):
            mk = masks[s : s + step]
            take = np.ones((mk.shape[0], d), dtype=bool)
            take[:, relevant] = mk
            wide = np.where(np.tile(take, blocks)[:, None, :], a1[None], a0[None])
            scored = model._calibrate(model._sums(wide.reshape(-1, w1.shape[1])))
            if len(docs) == n:
                member = scored
            else:
                member = np.repeat(posted[None], mk.shape[0], axis=0)
                member[:, docs] = scored.reshape(mk.shape[0], len(docs), -1)
                member = member.reshape(-1, posted.shape[1])
            out[s : s + step] = _mixed_at(model, np.ascontiguousarray(member), n, i)
        return out

    return _Game(relevant=relevant, cost=len(docs) + _mixing_cost(model, n), values=values)


def _list_game(model: EnsembleModel, xq: np.ndarray, i: int, r: np.ndarray) -> _Game:
    """The game of a model with a whitened view: every coalition scores the whole modified list."""
    n, d = xq.shape
    relevant = np.flatnonzero(xq[i] != r).astype(np.int64)

    def values(masks: np.ndarray) -> np.ndarray:
        out = np.empty(masks.shape[0], dtype=np.float64)
        step = _batch(masks.shape[0], n * d * 2 + n * max(model.n_members, 1))
        for s in range(0, masks.shape[0], step):
            mk = masks[s : s + step]
            take = np.ones((mk.shape[0], d), dtype=bool)
            take[:, relevant] = mk
            lists = np.repeat(xq[None], mk.shape[0], axis=0)
            lists[:, i] = np.where(take, xq[i], r)
            mixed = model._mixed(lists.reshape(-1, d), np.arange(mk.shape[0] + 1, dtype=np.int64) * n)[1]
            out[s : s + step] = mixed.reshape(mk.shape[0], n)[:, i]
        return out

    return _Game(relevant=relevant, cost=n + _mixing_cost(model, n), values=values)


def _exact(game: _Game) -> tuple[float, float, np.ndarray]:
    """(v(empty), v(N), phi over the relevant features) by enumerating every coalition."""
    m = game.relevant.size
    codes = np.arange(1 << m, dtype=np.int64)
    masks = ((codes[:, None] >> np.arange(m)) & 1).astype(bool)
    v = game.values(masks)
    size = masks.sum(axis=1)
    weight = np.array([factorial(s) * factorial(m - s - 1) / factorial(m) for s in range(m)])
    phi = np.empty(m, dtype=np.float64)
    for f in range(m):
        without = codes[~masks[:, f]]
        phi[f] = float(np.sum(weight[size[without]] * (v[without | (1 << f)] - v[without])))
    return float(v[0]), float(v[-1]), phi


def _sampled(game: _Game, pairs: int, rng: np.random.Generator) -> tuple[float, float, np.ndarray, np.ndarray]:
    """(v(empty), v(N), phi, its standard error) from ``pairs`` antithetic permutation pairs."""
    m = game.relevant.size
    perms = np.empty((2 * pairs, m), dtype=np.int64)
    perms[0::2] = np.array([rng.permutation(m) for _ in range(pairs)])
    perms[1::2] = perms[0::2, ::-1]
    rank = np.argsort(perms, axis=1)                              # position of each feature
    steps = np.arange(1, m)                                       # prefixes of 1 .. m-1 features
    masks = rank[:, None, :] < steps[None, :, None]               # (P, m-1, m)
    ends = game.values(np.array([np.zeros(m, bool), np.ones(m, bool)]))
    inner = game.values(masks.reshape(-1, m)).reshape(2 * pairs, m - 1)
    path = np.hstack([np.full((2 * pairs, 1), ends[0]), inner, np.full((2 * pairs, 1), ends[1])])
    marginal = np.diff(path, axis=1)                              # (P, m): the k-th added feature's
    phi_p = np.empty_like(marginal)
    np.put_along_axis(phi_p, perms, marginal, axis=1)
    u = 0.5 * (phi_p[0::2] + phi_p[1::2])
    se = u.std(axis=0, ddof=1) / np.sqrt(pairs) if pairs > 1 else np.full(m, np.nan)
    return float(ends[0]), float(ends[1]), u.mean(axis=0), se


def explain_query(model: EnsembleModel, xq: np.ndarray, r: np.ndarray, rows: np.ndarray, slots: np.ndarray,
                  budget: int, exact_max_features: int, rng: np.random.Generator,
                  res: dict[str, np.ndarray]) -> None:
    """The whole-model Shapley values of rows ``rows`` of one query's list ``xq`` against ``r``, written
    to ``res[...][slots]`` (exact or sampled: the module docstring)."""
    whitened = "raw+white" in model.extra_views
    thresholds = [] if whitened else _thresholds(model)
    linear_read = _linear_read(model)
    served = model.score(xq, np.array([0, xq.shape[0]], dtype=np.int64))
    for kk, i in zip(slots.tolist(), rows.tolist(), strict=True):
        game = (_list_game(model, xq, i, r) if whitened
                else _column_game(model, xq, i, r, thresholds, linear_read))
        m = game.relevant.size
        res["scores"][kk] = served[i]
        res["reference"][kk] = r
        res["n_relevant"][kk] = m
        if m == 0:  # nothing the model reads differs from the reference
            res["baseline"][kk] = served[i]
            continue
        if m <= min(exact_max_features, EXACT_MAX_FEATURES) and (1 << m) * game.cost <= budget:
            v0, _, phi = _exact(game)
        else:
            pairs = max(2, (budget // game.cost - 2) // (2 * max(m - 1, 1)))
            v0, _, phi, se = _sampled(game, pairs, rng)
            res["exact"][kk] = False
            res["n_permutations"][kk] = 2 * pairs
            res["standard_error"][kk, game.relevant] = se
        res["baseline"][kk] = v0
        res["contributions"][kk, game.relevant] = phi
