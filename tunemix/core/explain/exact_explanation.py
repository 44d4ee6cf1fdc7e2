"""Exact, deterministic explanations of the served score: one-reference TreeSHAP per member,
propagated through calibrators and the mix (generalized DeepSHAP).

Imports numpy/numba code only (the service uses it). tunemix's score of document i of a posted
list is a series of models (``tunemix.core.scoring.ensemble_model``): views -> members' raw K-vectors
u_m -> calibrators g_m -> per-query rescaling and weighted mix. With the views' statistics (the
per-query means, deviations and whitening matrix) **held at the posted list's values** and the
other documents' member scores as posted, each layer is a function of row i alone, and the
explanation of row i against the reference document r is built layer by layer
(Chen, Lundberg and Lee 2022, "Explaining a series of models by propagating Shapley values",
Nat. Commun. 13:4512):

1. **Views.** A raw feature j and its standardised copy (x_j - mean_j) / std_j are one player
   (a function of x_j alone); a whitened column c, ``(x - mean) . W[:, c]``, is a player of its
   own. Its change ``T_c = sum_j s_jc``, ``s_jc = (x_j - r_j) W[j, c]``, has a positive part P
   (the positive s_jc) and a negative part N. The column reaches the members only through the
   trees' threshold crossings between r_c and x_c, so its attribution phi_c is modelled as a step
   that arrives once the column has got to x_c's side: the two-player Shapley values of P and N
   for that step (DeepLIFT's RevealCancel rule, Shrikumar, Greenside and Kundaje 2017) give phi_c
   to the part along T_c and nothing to the other, and each feature of that part gets
   ``phi_c s_jc / (its part's sum)`` (``_unwhiten``). The shares of a column sum to 1 (the
   explanation stays exact), are non-negative, and no feature gets more than phi_c from a column.
   The linear split ``phi_c s_jc / T_c`` (the Shapley values of the linear map) lets shares
   cancel: features pushing a column by +3 and -2.9 would get +30 phi_c and -29 phi_c of a
   column that moved by 0.1 (measured on MQ2008: 0.18-0.37 of attribution turn into 1.6-50 of
   absolute contribution, against scores of about 1-1.8).
2. **Members.** Forests: the one-reference interventional TreeSHAP of ``tree_shap`` (exact
   Shapley values of every checkpoint's running sum, one pass); linear runs: ``W[c] (x_c - r_c)``
   per wide column c. Each member gets A_m (players, K): ``sum_p A_m[p, k] = u_mk(x) - u_mk(r)``.
3. **Calibrators** (nonlinear, K inputs): the exact Shapley values phi_mk of g_m over its K inputs
   between u_m(r) and u_m(r) + sum_p A_m (``calibrator_games``: the 2^K coalitions, g_m(u_m(r))
   once per list, g_m(u_m(x)) from the scoring pass, the others in calibration steps packed per
   game size; McRank's ordinal members through their class probabilities), each
   input's share split over the players in proportion to that input's own attributions (the
   rescale rule): ``C_m[p] = sum_k phi_mk A_m[p, k] / sum_p' A_m[p', k]`` (an input that does not
   move gives nothing; one whose attributions cancel to within ``CANCELLED`` of their absolute
   sum counts as not moving, so that no share is rounding noise over rounding noise).
4. **Mix.** Each member's weighted, rescaled score as a function of the document's member score,
   the rest of the list as posted (``mix_propagation``: linear without per-query rescaling,
   bounded z-scores or min-max otherwise), its change shared by the member's positive and
   negative attributions by their exact two-player Shapley values (RevealCancel).

Every layer's attributions add up to its output's change, so ``baseline + sum(contributions)``
equals the served score to float rounding; nothing is sampled. Where every layer is linear
(identity calibrators, a mix without per-query statistics, the raw view) this is exactly the
whole-model Shapley value of ``tunemix.core.explain.explanation``'s game (Shapley values are linear
in the game); with nonlinear calibrators or a per-query rescaled mix it is the propagated
approximation of Chen et al., and it holds the views' statistics at the posted list's where the
whole-model game recomputes them for every hybrid list. The baseline is the score the reference
document gets in row i's place (the views' statistics as posted): with the default reference
(the list's per-feature median) a function of the list and of which document it replaces -- "the
rest of the list". Without per-query rescaling it is the same for every document of the query;
with it, two documents' baselines differ by what the rest of the list does to each, and that
difference is a pair's named term.
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np
from numba import njit

import tunemix.core.numba_cache  # noqa: F401 - numba's cache written under a lock (tunemix/core/numba_cache.py)
from tunemix.core.data.normalization import (
    ILL_CONDITIONED,
    NULL_SPACE,
    WHITEN_EPS,
    _centre_cov,
    _whitening_matrix,
    fill_missing,
)
from tunemix.core.explain.calibrator_games import CalibratorGames, calibrator_games
from tunemix.core.explain.mix_propagation import mix_layer, reveal_cancel_at
from tunemix.core.explain.tree_shap import reference_sides, shapley_weights
from tunemix.core.explain.tree_shap_sets import documents_sets
from tunemix.core.scoring.ensemble_model import EnsembleModel
from tunemix.core.scoring.forest import KIND_PRODUCT, FlatForest, missing_wide

_NEVER = np.iinfo(np.int64).max
#: elements of one batch's largest arrays (documents x members x coalitions x inputs), to bound memory
BATCH_ELEMENTS = 1 << 21
#: an input's attributions summing to at most this times their absolute sum count as no change
CANCELLED = 1e-12


@njit(cache=True, nogil=True)
def _standardised_reference(x, r, out):  # pragma: no cover
    """out[j] = (r[j] - mean_j) / std_j with the list's mean and population deviation of column j
    summed as ``tunemix.core.data.normalization._standardise_feature`` sums them (0 for a flat column)."""
    n = x.shape[0]
    for j in range(x.shape[1]):
        mean = 0.0
        for i in range(n):
            mean += x[i, j]
        mean /= n
        var = 0.0
        for i in range(n):
            diff = x[i, j] - mean
            var += diff * diff
        std = np.sqrt(var / n)
        out[j] = 0.0 if std <= 1e-12 * max(1.0, abs(mean)) else (r[j] - mean) / std


def filled_list(xq: np.ndarray, r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the list, the reference row) as the views read them: unchanged without a missing value,
    else the list filled by ``fill_missing`` (float64) and the reference's missing values by the
    same means."""
    if not np.isnan(xq).any():
        return xq, r
    x64 = np.ascontiguousarray(xq, dtype=np.float64)
    filled = fill_missing(x64, np.array([0, xq.shape[0]], dtype=np.int64))
    if filled is None:
        return xq, r
    nan = np.isnan(x64)
    # a column's fill value is in every one of its missing places (the first one read here)
    fill = np.where(nan.any(axis=0), filled[np.argmax(nan, axis=0), np.arange(x64.shape[1])], x64.mean(axis=0))
    r_filled = np.where(np.isnan(r), fill, np.asarray(r, dtype=np.float64))
    return filled, r_filled


def reference_views(model: EnsembleModel, xq: np.ndarray, r: np.ndarray,
                    whitening: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
                    ) -> tuple[np.ndarray, np.ndarray, int, np.ndarray | None]:
    """(r's wide row with the posted list's statistics, the player of each wide column, the number
    of players, the whitening matrix (d, d) or None): players 0..d-1 are the raw features (a
    standardised column belongs to its feature), d..2d-1 the whitened columns. ``whitening``: the
    list's (mean, eigenvalues, eigenvectors) as ``whiten_by_query`` computed them in the scoring
    pass (``ScoringPass.whitening``), else computed here with the same kernels."""
    n, d = xq.shape
    blocks = [r.astype(np.float32)]
    group = [np.arange(d)]
    # the views' statistics of a list with missing values: those of its filled list (normalization)
    xq, r_filled = filled_list(xq, r)
    white = None
    players = d
    for view in model.extra_views:
        if view == "raw+std":  # tunemix.core.data.normalization._standardise_feature's statistics
            r_std = np.empty(d)
            # float64 rows (the same values as float32 ones, summed alike): one compiled signature
            _standardised_reference(np.ascontiguousarray(xq, dtype=np.float64),
                                    np.ascontiguousarray(r, dtype=np.float64), r_std)
            blocks.append(r_std.astype(np.float32))
            group.append(np.arange(d))
        else:  # whiten_by_query's mean and matrix, the same kernels
            if whitening is None:
                means, cov = np.empty((1, d)), np.empty((1, d, d))
                _centre_cov(np.ascontiguousarray(xq, dtype=np.float64), np.array([0, n], dtype=np.int64), 0, means,
                            cov, _NEVER)
                lam, vec = np.linalg.eigh(cov)
                whitening = (means[0], np.ascontiguousarray(lam[0]), np.ascontiguousarray(vec[0]))
            centre, lam_q, vec_q = whitening
            white = np.empty((d, d))
            _whitening_matrix(lam_q, vec_q, WHITEN_EPS, ILL_CONDITIONED, NULL_SPACE, white)
            blocks.append(((r_filled.astype(np.float64) - centre) @ white).astype(np.float32))
            group.append(d + np.arange(d))
            players = 2 * d
    return np.concatenate(blocks), np.concatenate(group).astype(np.int64), players, white


def missing_inputs(model: EnsembleModel, wide: np.ndarray, r_wide: np.ndarray, group: np.ndarray
                   ) -> tuple[FlatForest, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(forest, wide, r_wide, group, linear W) for the kernels below, equal to the model's own
    when neither the rows nor the reference miss a value. Otherwise the columns are widened so that
    the kernels, which compare and multiply plain numbers, compute the model's own game: the
    forest's wide form (``FlatForest.missing_columns``: a feature some node sends right when
    missing, again with NaN read as +inf), then for the linear runs each wide column with NaN read
    as 0 and its missing indicator, whose weights are ``W`` and the runs' ``missing`` terms
    (``EnsembleModel.linear_terms``); the first block's linear weights are 0. Every added column
    belongs to its column's player, so each player's Shapley value is unchanged in meaning."""
    f = model.forest
    if not (np.isnan(wide).any() or np.isnan(r_wide).any()):
        return f, wide, r_wide, group, model._linear_w
    n_cols, n_lin = wide.shape[1], model._linear_w.shape[1]
    xs, rs, gs, ws = [wide], [r_wide[None]], [group], [np.zeros((n_cols, n_lin))]
    right = f.missing_columns
    if right is not None:
        cols, f = right
        xs.append(missing_wide(wide, cols)[:, n_cols:])
        rs.append(missing_wide(r_wide[None], cols)[:, n_cols:])
        gs.append(group[cols])
        ws.append(np.zeros((cols.shape[0], n_lin)))
    if n_lin:
        for a in (wide, r_wide[None]):
            (xs if a is wide else rs).append(np.nan_to_num(a, nan=0.0))
            (xs if a is wide else rs).append(np.isnan(a).astype(np.float32))
        gs += [group, group]
        ws += [model._linear_w, model._linear_nan_w]
    return (f, np.ascontiguousarray(np.concatenate(xs, axis=1), dtype=np.float32),
            np.ascontiguousarray(np.concatenate(rs, axis=1)[0], dtype=np.float32),
            np.ascontiguousarray(np.concatenate(gs), dtype=np.int64), np.ascontiguousarray(np.concatenate(ws)))


def _raw_attributions(model: EnsembleModel, games: CalibratorGames, wide: np.ndarray, r_wide: np.ndarray,
                      group: np.ndarray, players: int) -> tuple[np.ndarray, np.ndarray]:
    """(A (n, sources, K_max, players), their sums over the players (n, sources, K_max)): each
    source's raw K-vector attributed to the players, the players innermost (the mix layer's passes
    run over them): ``_moved_attributions`` with every player in its place."""
    at, total, active, n_active = _moved_attributions(model, games, wide, r_wide, group, players)
    full = np.zeros(at.shape)
    for i in range(at.shape[0]):
        full[i][..., active[i, : n_active[i]]] = at[i, ..., : n_active[i]]
    return full, total


_DEPTH: weakref.WeakKeyDictionary[EnsembleModel, int] = weakref.WeakKeyDictionary()


def _deepest(model: EnsembleModel) -> int:
    """The most players a path of the model's forest can hold (its largest base's nodes + 1), once per model."""
    depth = _DEPTH.get(model)
    if depth is None:
        depth = _DEPTH[model] = int(np.diff(model.forest.base_node_start).max(initial=0)) + 1
    return depth


def _moved_attributions(model: EnsembleModel, games: CalibratorGames, wide: np.ndarray, r_wide: np.ndarray,
                        group: np.ndarray, players: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(A, total, active (n, players), n_active (n,)): each source's raw K-vector attributed to the
    players, document i's ``n_active[i]`` moved players (those with a non-zero attribution; the others
    get 0 from every layer) first: ``A[i, u, q, j]`` belongs to player ``active[i, j]`` for
    j < n_active[i] (the rest of the row is not written), total[i, u, q] the sum over them. One numba
    pass per document (``_sources``): the forest's sources from one TreeSHAP walk over its
    checkpoints, the linear runs' in closed form. A sum within ``CANCELLED`` of its terms' absolute
    sum is 0: that input has not moved."""
    n = wide.shape[0]
    f, wide, r_wide, group, lin_w = missing_inputs(model, wide, r_wide, group)
    at = np.empty((n, len(games.keys), games.k_max, players))
    total = np.zeros((n, len(games.keys), games.k_max))
    active = np.empty((n, players), dtype=np.int64)
    n_active = np.zeros(n, dtype=np.int64)
    plus, minus = shapley_weights(min(_deepest(model), players))
    _sources(f.base_kind, f.base_node_start, f.base_leaf_start, f.node_feature, f.node_threshold, f.node_left,
             f.node_right, f.leaf_values, np.ascontiguousarray(wide, dtype=np.float32),
             np.ascontiguousarray(r_wide, dtype=np.float32), group, model._checkpoints, plus, minus,
             games.forest_lo, games.forest_hi, lin_w, games.linear, at, total, active, n_active)
    return at, total, active, n_active


@njit(cache=True, nogil=True)
def _reference_sources(kind, node_start, leaf_start, feat, thr, left, right, leaves, r, checkpoints, lo, hi, w, b,
                       linear, out):  # pragma: no cover
    """The sources' raw K-vectors for the reference row r (``EnsembleModel._raw_block`` of one row
    without its calibration slabs): ``out[u, q]`` the forest's running sum at checkpoint ``hi[u]``
    less that at ``lo[u]`` (r walked down every base: a tree to its leaf, a product of stumps as the
    product of its signs), a linear source ``(u, c0, c1)`` ``sum_c r[c] w[c, c0 + q] + b[c0 + q]``."""
    k_out = leaves.shape[1]
    n_ck = checkpoints.shape[0]
    ck = np.zeros((n_ck, k_out))
    acc = np.zeros(k_out)
    c = 0
    for base in range(kind.shape[0] + 1):
        while c < n_ck and checkpoints[c] == base:
            ck[c] = acc
            c += 1
        if base == kind.shape[0] or c == n_ck:
            break
        ns = node_start[base]
        ne = node_start[base + 1]
        ls = leaf_start[base]
        if kind[base] == KIND_PRODUCT:
            sign = 1.0
            for t in range(ns, ne):
                if not r[feat[t]] >= thr[t]:
                    sign = -sign
            for k in range(k_out):
                acc[k] += sign * leaves[ls, k]
            continue
        node = 0 if ne > ns else -1
        while node >= 0:
            t = ns + node
            node = right[t] if r[feat[t]] >= thr[t] else left[t]
        for k in range(k_out):
            acc[k] += leaves[ls - node - 1, k]
    kf = min(k_out, out.shape[1])
    for u in range(lo.shape[0]):
        for q in range(kf):
            out[u, q] = ck[hi[u], q] - ck[lo[u], q]
    for j in range(linear.shape[0]):
        u = linear[j, 0]
        c0 = linear[j, 1]
        for q in range(linear[j, 2] - c0):
            v = 0.0
            for col in range(r.shape[0]):
                if w[col, c0 + q] != 0.0:  # a column the runs do not read may be NaN (missing_inputs)
                    v += np.float64(r[col]) * w[col, c0 + q]
            out[u, q] = v + b[c0 + q]


@njit(cache=True, nogil=True)
def _sources(kind, node_start, leaf_start, feat, thr, left, right, leaves, wide, r_wide, group, checkpoints, plus,
             minus, lo, hi, w, linear, at, total, active, n_active):  # pragma: no cover
    """The forest's checkpoint attributions of every document (``tree_shap_sets.documents_sets``:
    ``tree_shap.documents``'s (n, C, K, P) bit for bit, the documents walked as one set), then per
    document i the sources' full (U, K, P): forest source u (the first ``lo.size``)
    ``ck[hi[u], q, p] - ck[lo[u], q, p]``, linear source ``linear[j] = (u, c0, c1)``
    ``sum over the columns c of player p of (wide[i, c] - r_wide[c]) w[c, c0 + q]``; the moved
    players into ``active[i]``, their columns of full into ``at[i]``, and total[i, u, q] the sum of
    each row (0 when cancelled)."""
    n, n_src, k_max, n_p = at.shape
    k_out = leaves.shape[1]
    kf = min(k_out, k_max)
    cks = np.empty((n, checkpoints.shape[0], k_out, n_p))  # every checkpoint is written (they are <= n_base)
    if lo.shape[0]:
        r_dir = reference_sides(feat, thr, r_wide)
        documents_sets(kind, node_start, leaf_start, feat, thr, left, right, leaves, wide, r_dir, group, checkpoints,
                       plus, minus, cks)
    full = np.zeros((n_src, k_max, n_p))
    moved = np.zeros(n_p, dtype=np.bool_)
    for i in range(n):
        ck = cks[i]
        moved[:] = False
        for u in range(lo.shape[0]):
            hu, lu = hi[u], lo[u]
            for q in range(kf):
                for p in range(n_p):
                    v = ck[hu, q, p] - ck[lu, q, p]
                    full[u, q, p] = v
                    moved[p] |= v != 0.0
            full[u, kf:, :] = 0.0
        for j in range(linear.shape[0]):
            u = linear[j, 0]
            c0 = linear[j, 1]
            full[u, :, :] = 0.0
            for q in range(linear[j, 2] - c0):
                for c in range(wide.shape[1]):
                    if w[c, c0 + q] != 0.0:  # a column the runs do not read may be NaN (missing_inputs)
                        full[u, q, group[c]] += (np.float64(wide[i, c]) - np.float64(r_wide[c])) * w[c, c0 + q]
                for p in range(n_p):
                    moved[p] |= full[u, q, p] != 0.0
        m = 0
        for p in range(n_p):
            if moved[p]:
                active[i, m] = p
                m += 1
        n_active[i] = m
        for u in range(n_src):
            for q in range(k_max):
                sm = 0.0
                size = 0.0
                for j in range(m):
                    v = full[u, q, active[i, j]]
                    at[i, u, q, j] = v
                    sm += v
                    size += abs(v)
                total[i, u, q] = 0.0 if abs(sm) <= CANCELLED * size else sm


def explain_query(model: EnsembleModel, xq: np.ndarray, rows: np.ndarray, r: np.ndarray,
                  scored: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
                  whitening: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None) -> dict[str, Any] | None:
    """Exact explanations of ``rows`` (indices into the query's list ``xq`` (n, d)) against ``r``:
    ``{"scores": (k,), "baseline": float, "contributions": (k, d)}``; None when the mixer is not
    linear in the member scores (the caller falls back to the whole-model Shapley values).
    ``scored``: the list's (wide features, member scores, served scores) from the request's own
    scoring pass (``EnsembleModel.scoring_pass``), else computed here; ``whitening``: that pass's
    whitening of the list (``reference_views``)."""
    n, d = xq.shape
    if scored is None:
        off = np.array([0, n], dtype=np.int64)
        kept: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        wide = model._wide(xq, off, kept)
        whitening = kept.get(0)
        member = model._calibrate(model._sums(wide))
        served = None
    else:
        wide, member, served = scored
    layer = mix_layer(model.mixer, member)
    if layer is None:
        return None
    if served is None:
        served = np.asarray(model.mixer.transform(member, off), dtype=np.float64)
    r_wide, group, players, white = reference_views(model, xq, r, whitening)
    games = calibrator_games(model)
    k_max = games.k_max
    lo = np.zeros((len(games.keys), k_max))                                      # the sources' u(r)
    f, _, r_cols, _, lin_w = missing_inputs(model, r_wide[None], r_wide, group)
    _reference_sources(f.base_kind, f.base_node_start, f.base_leaf_start, f.node_feature, f.node_threshold,
                       f.node_left, f.node_right, f.leaf_values, r_cols, model._checkpoints, games.forest_lo,
                       games.forest_hi, lin_w, model._linear_b, games.linear, lo)
    contrib = np.zeros((rows.size, players))
    baseline = np.zeros(rows.size)
    mm = model.n_members
    step = max(1, BATCH_ELEMENTS // ((1 << k_max) * max(mm, 1) * k_max
                                     + (model._checkpoints.size + len(games.keys)) * players * k_max))
    for s in range(0, rows.size, step):
        chunk = rows[s : s + step]
        # (k, U, K, P) and (k, U, K): an input whose attributions cancel to within rounding of their
        # sizes has not moved (its share would be rounding noise divided by rounding noise)
        at, total, active, n_active = _moved_attributions(model, games, wide[chunk], r_wide, group, players)
        # the rescale rule: input k's share phi_mk over the players in proportion to A_m[., k]
        g_lo, ratio = games.ratios(lo, total, member[chunk])
        # every document of the chunk starts from the same member scores g_lo (M,), broadcast by the kernel's wrapper
        contrib[s : s + step], baseline[s : s + step] = reveal_cancel_at(layer, chunk, g_lo, ratio, at, games.src,
                                                                         active, n_active)
    if white is not None:
        x_filled, r_filled = filled_list(xq, r)
        contrib = contrib[:, :d] + _unwhiten(contrib[:, d:], x_filled[rows], r_filled, white)
    return {"scores": served[rows], "baseline": baseline, "contributions": contrib}


def _unwhiten(phi_white: np.ndarray, x: np.ndarray, r: np.ndarray, white: np.ndarray) -> np.ndarray:
    """Whitened columns' attributions (k, d) split over the raw features by the RevealCancel rule
    (module docstring, step 1): column c's change ``T_c = sum_j s_jc``, ``s_jc = (x_j - r_j) W[j, c]``,
    goes to the features that move it the way it moved, in proportion to their ``s_jc``; those
    moving it the other way get nothing (a column that did not move: by ``|s_jc|``). The shares
    of a column sum to 1, so nothing is lost and no share exceeds the column's attribution."""
    out = np.zeros(np.shape(phi_white))
    _unwhiten_kernel(np.ascontiguousarray(phi_white, dtype=np.float64), np.ascontiguousarray(x, dtype=np.float64),
                     np.ascontiguousarray(r, dtype=np.float64), np.ascontiguousarray(white, dtype=np.float64), out)
    return out


@njit(cache=True, nogil=True)
def _unwhiten_kernel(phi, x, r, white, out):  # pragma: no cover
    """``_unwhiten``, one document and column at a time (a column with no attribution is skipped)."""
    k, d = x.shape
    s = np.empty(d)
    for i in range(k):
        for c in range(white.shape[1]):
            f = phi[i, c]
            if f == 0.0:
                continue
            total = 0.0
            for j in range(d):
                s[j] = (x[i, j] - r[j]) * white[j, c]
                total += s[j]
            sign = np.sign(total)
            along = 0.0
            size = 0.0
            for j in range(d):
                if np.sign(s[j]) == sign:
                    along += s[j]
                size += abs(s[j])
            if along != 0.0:
                for j in range(d):
                    if np.sign(s[j]) == sign:
                        out[i, j] += f * (s[j] / along)
            elif size > 0.0:
                for j in range(d):
                    out[i, j] += f * (abs(s[j]) / size)

