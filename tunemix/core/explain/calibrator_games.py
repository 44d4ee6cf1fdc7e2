"""Exact Shapley values of every member's calibrator over its K raw inputs: the calibrator layer of
an exact explanation (``tunemix.core.explain.exact_explanation``, step 3).

Imports numpy/numba code only (the service uses it). Member m reads the raw K-vector u of its
*source* (a forest snapshot, ``S[hi] - S[lo]``, or a linear run) and its calibrator g_m turns it
into the member score (McRank's ordinal members: g_m of the class probabilities
``ordinal_probabilities(u)``). Between the reference document's vector lo = u(r) and the explained
document's hi = lo + delta, the game of the K inputs ``v(T) = g_m(hi on T, lo elsewhere)`` has
the Shapley values (Shapley 1953; the K-input game of Chen, Lundberg and Lee 2022)

    phi_k = sum_T coef[T, k] v(T),   coef[T, k] = (|T| - 1)! (K - |T|)! / K!      if k in T,
                                                  -|T|! (K - |T| - 1)! / K!       if not,

over the 2^K coalitions T (``shapley_matrix``), and ``sum_k phi_k = v(all) - v(empty)``.

**What is evaluated.** Of the 2^K values of each member and explained document:

- ``v(empty) = g_m(u(r))`` is the same for every document of the list: one evaluation per list;
- ``v(all)`` is the document's own member score g_m(u(x)) (hi differs from u(x) by the rounding
  of a sum of attributions, and by inputs whose attributions cancel, ``exact_explanation.CANCELLED``):
  taken from the request's scoring pass, not evaluated again, so the layer adds up to the member
  score the mix served;
- the 2^K - 2 other coalitions, for the members whose game has K players only: the members are
  grouped by K and each group's calibrators packed into a calibration step of their own
  (``CalibrationStep``), which reads the hybrid K-vectors of the group's *sources*, built once per
  source (a model's members share a few dozen sources and differ in their calibrators).

A list with k explained documents so costs ``1 + k (2^K - 2)`` evaluations of a member with K
inputs (none beyond the first for K = 1): on the MQ2008 ensemble (K = 2 and 3) 2.7 thousand per
document, where evaluating the 2^3 coalitions of the largest K for every member would take 5.1 thousand.
A member whose inputs do not all move is no special case: a coalition and its union with an input
that does not move are the same vector, so that input's value is 0 and the others' are those of
the smaller game.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from functools import lru_cache
from math import factorial

import numpy as np
import numpy.typing as npt
from numba import njit

import tunemix.core.numba_cache  # noqa: F401 - numba's cache written under a lock (tunemix/core/numba_cache.py)
from tunemix.core.calibration.expected_relevance import OrdinalCalibrator
from tunemix.core.scoring.calibration_step import CalibrationStep, SourcePlan
from tunemix.core.scoring.ensemble_model import EnsembleModel

Float64Array = npt.NDArray[np.float64]
Int64Array = npt.NDArray[np.int64]

#: a source: ("forest", lo checkpoint, hi checkpoint) or ("linear", run, 0)
SourceKey = tuple[str, int, int]


@lru_cache(maxsize=16)
def shapley_matrix(k: int) -> Float64Array:
    """(2^K, K) read-only: ``phi = values @ shapley_matrix(K)`` for a game of K players whose
    coalition T is coded by its bits (module docstring)."""
    masks = coalition_masks(k)
    size = masks.sum(axis=1)
    coef = np.zeros((1 << k, k))
    for code in range(1 << k):
        s = int(size[code])
        for f in range(k):
            coef[code, f] = (factorial(s - 1) * factorial(k - s) / factorial(k) if masks[code, f]
                             else -factorial(s) * factorial(k - s - 1) / factorial(k))
    coef.setflags(write=False)
    return coef


@lru_cache(maxsize=16)
def coalition_masks(k: int) -> npt.NDArray[np.bool_]:
    """(2^K, K) read-only: row T holds the bits of T (input j is in T when bit j is set)."""
    masks = ((np.arange(1 << k)[:, None] >> np.arange(k)) & 1).astype(bool)
    masks.setflags(write=False)
    return masks


@dataclass(frozen=True, eq=False)
class GameGroup:
    """The members whose calibrator games have ``k`` players: their indices, the sources they read
    (slabs 0..U-1 of the hybrid array), the positions among those of the sources whose ordinal
    class probabilities are slabs U.. (``ordinal``), and their calibrators packed as one step with
    a plan reading those slabs (``width`` columns: k, or k + 1 with ordinal members)."""

    k: int
    members: Int64Array
    sources: Int64Array
    ordinal: Int64Array
    width: int
    step: CalibrationStep
    plan: SourcePlan
    #: the 2^K - 2 interior coalitions' bits, (2^K - 2, K) (``coalition_masks(k)[1:-1]``, contiguous)
    interior: npt.NDArray[np.bool_]


@dataclass(frozen=True, eq=False)
class CalibratorGames:
    """A model's sources (``keys``, the forest's first; ``src[m]``: member m's), the first member
    reading each source (``first``), the forest sources' checkpoints (``forest_lo``, ``forest_hi``),
    the linear sources' (source, first column, end column) in the model's folded linear map
    (``linear``, (L, 3)), and the members grouped by the size of their calibrator games (``groups``)."""

    keys: list[SourceKey]
    src: Int64Array
    first: Int64Array
    forest_lo: Int64Array
    forest_hi: Int64Array
    linear: Int64Array
    k_max: int
    groups: list[GameGroup]

    def shapley(self, lo: Float64Array, delta: Float64Array, full: Float64Array
                ) -> tuple[Float64Array, Float64Array]:
        """(v(empty) (M,), phi (k, M, k_max)) for k documents: ``lo`` (U, k_max) the sources' raw
        vectors for the reference document, ``delta`` (k, U, k_max) each document's change of them,
        ``full`` (k, M) the documents' member scores (v(all), module docstring)."""
        n = delta.shape[0]
        m_all = self.src.shape[0]
        g_lo = np.zeros(m_all)
        phi = np.zeros((n, m_all, self.k_max))
        lo = np.ascontiguousarray(lo, dtype=np.float64)
        delta = np.ascontiguousarray(delta, dtype=np.float64)
        full = np.ascontiguousarray(full, dtype=np.float64)
        for group in self.groups:
            _game_values(self._values(group, lo, delta), full, group.members, shapley_matrix(group.k), g_lo, phi)
        return g_lo, phi

    def ratios(self, lo: Float64Array, delta: Float64Array, full: Float64Array
               ) -> tuple[Float64Array, Float64Array]:
        """(v(empty) (M,), phi_mk / delta_{src(m), k} (k, M, k_max)): ``shapley``'s values divided by
        their input's change in the same kernel (``_game_ratios``; 0 where the input has not
        moved, ``delta`` 0), the rescale rule's factors (``exact_explanation``, step 3). The same
        arguments and the same bits as ``shapley`` followed by that division."""
        n = delta.shape[0]
        g_lo = np.empty(self.src.shape[0])
        ratio = np.empty((n, self.src.shape[0], self.k_max))
        lo = np.ascontiguousarray(lo, dtype=np.float64)
        delta = np.ascontiguousarray(delta, dtype=np.float64)
        full = np.ascontiguousarray(full, dtype=np.float64)
        for group in self.groups:
            _game_ratios(self._values(group, lo, delta), full, group.members, shapley_matrix(group.k), delta,
                         self.src, g_lo, ratio)
        return g_lo, ratio

    @staticmethod
    def _values(group: GameGroup, lo: Float64Array, delta: Float64Array) -> Float64Array:
        """(1 + n (2^K - 2), M_g): the group's calibrators on the empty coalition's vector (row 0)
        and on each document's interior coalitions' hybrid vectors."""
        k, n_src = group.k, group.sources.size
        hybrid = np.zeros((1 + delta.shape[0] * group.interior.shape[0], n_src + group.ordinal.size, group.width))
        _hybrids(lo, delta, group.sources, group.interior, hybrid)
        if group.ordinal.size:  # every ordinal source's class probabilities, in place
            _ordinal_slabs(hybrid, group.ordinal, n_src, k)
        return group.step.apply_plan(hybrid, group.plan)


@njit(cache=True, nogil=True)
def _hybrids(lo, delta, sources, interior, hybrid):  # pragma: no cover
    """hybrid[0, u] = lo[sources[u]] (the empty coalition, once); hybrid[1 + i T + t, u, j] =
    lo + delta[i] on input j when ``interior[t, j]`` (document i's t-th interior coalition)."""
    n_t, k = interior.shape
    for u in range(sources.size):
        for j in range(k):
            hybrid[0, u, j] = lo[sources[u], j]
    for i in range(delta.shape[0]):
        for t in range(n_t):
            row = 1 + i * n_t + t
            for u in range(sources.size):
                s = sources[u]
                for j in range(k):
                    hybrid[row, u, j] = lo[s, j] + delta[i, s, j] if interior[t, j] else lo[s, j]


@njit(cache=True, nogil=True)
def _ordinal_slabs(hybrid, ordinal, n_src, k):  # pragma: no cover
    """hybrid[r, n_src + o, :k + 1] = ``ordinal_probabilities(hybrid[r, ordinal[o], :k])`` for every
    row r: the K + 1 class probabilities of the cumulative logits G, P(l <= j) = s(G_j) =
    exp(-logaddexp(0, -G_j)), p_l = max(P(l) - P(l - 1), 0) renormalised (``tunemix.core.calibration.
    expected_relevance``), the same operations one row at a time instead of NumPy's calls on a
    gathered block (three of them cost more than the arithmetic of a few dozen rows)."""
    cdf = np.empty(k + 2)
    p = np.empty(k + 1)
    for row in range(hybrid.shape[0]):
        for o in range(ordinal.size):
            u = ordinal[o]
            cdf[0] = 0.0
            cdf[k + 1] = 1.0
            for j in range(k):
                cdf[j + 1] = np.exp(-np.logaddexp(0.0, -hybrid[row, u, j]))
            total = 0.0
            for j in range(k + 1):
                p[j] = max(cdf[j + 1] - cdf[j], 0.0)
                total += p[j]
            for j in range(k + 1):
                hybrid[row, n_src + o, j] = p[j] / total


@njit(cache=True, nogil=True)
def _coalition_sums(values, coef, i, acc):  # pragma: no cover
    """acc[j, g] = sum over the coalitions T but the full one of coef[T, j] v_i(T) for every member g
    of the group: v(empty) from row 0 of ``values``, the interior coalitions from document i's rows,
    summed in that order, a row of ``values`` at a time (``_game_values`` and ``_game_ratios``)."""
    n_t = coef.shape[0] - 2
    k = coef.shape[1]
    n_g = acc.shape[1]
    for j in range(k):
        c0 = coef[0, j]
        for g in range(n_g):
            acc[j, g] = c0 * values[0, g]
    for t in range(n_t):
        row = 1 + i * n_t + t
        for j in range(k):
            ct = coef[1 + t, j]
            for g in range(n_g):
                acc[j, g] += ct * values[row, g]


@njit(cache=True, nogil=True)
def _game_values(values, full, members, coef, g_lo, phi):  # pragma: no cover
    """g_lo[m] = v(empty); phi[i, m, j] = sum_T coef[T, j] v_i(T) over the 2^K coalitions, v(empty)
    from row 0 of ``values``, the interior ones from document i's rows, v(all) = full[i, m]; summed
    in that order, a row of ``values`` (every member of the group) at a time."""
    n_t = coef.shape[0] - 2
    k = coef.shape[1]
    n_g = members.size
    acc = np.empty((k, n_g))
    for g in range(n_g):
        g_lo[members[g]] = values[0, g]
    for i in range(full.shape[0]):
        _coalition_sums(values, coef, i, acc)
        for g in range(n_g):
            m = members[g]
            for j in range(k):
                phi[i, m, j] = acc[j, g] + coef[n_t + 1, j] * full[i, m]


@njit(cache=True, nogil=True)
def _game_ratios(values, full, members, coef, delta, src, g_lo, ratio):  # pragma: no cover
    """``_game_values`` with each value divided by its input's change: ratio[i, m, j] = phi[i, m, j] /
    delta[i, src[m], j] (the same phi, summed in the same order), 0 where delta is 0 and for the
    inputs j >= K a smaller game does not have."""
    n_t = coef.shape[0] - 2
    k = coef.shape[1]
    n_g = members.size
    acc = np.empty((k, n_g))
    for g in range(n_g):
        g_lo[members[g]] = values[0, g]
    for i in range(full.shape[0]):
        _coalition_sums(values, coef, i, acc)
        for g in range(n_g):
            m = members[g]
            u = src[m]
            for j in range(k):
                d = delta[i, u, j]
                ratio[i, m, j] = (acc[j, g] + coef[n_t + 1, j] * full[i, m]) / d if d != 0.0 else 0.0
            for j in range(k, ratio.shape[2]):
                ratio[i, m, j] = 0.0


_GAMES: weakref.WeakKeyDictionary[EnsembleModel, CalibratorGames] = weakref.WeakKeyDictionary()


def calibrator_games(model: EnsembleModel) -> CalibratorGames:
    """The model's ``CalibratorGames``, built once per model (a Python loop over its members)."""
    known = _GAMES.get(model)
    if known is None:
        known = _GAMES[model] = _build(model)
    return known


def _build(model: EnsembleModel) -> CalibratorGames:
    index: dict[SourceKey, int] = {}
    src = np.empty(model.n_members, dtype=np.int64)
    # forest sources first, then linear ones (exact_explanation fills them in that order)
    order = sorted(range(model.n_members), key=lambda i: model.runs[model.members[i].run].kind != "forest")
    for i in order:
        m = model.members[i]
        key: SourceKey = (("forest", int(model._lo[i]), int(model._hi[i])) if model.runs[m.run].kind == "forest"
                          else ("linear", m.run, 0))
        src[i] = index.setdefault(key, len(index))
    first = np.zeros(len(index), dtype=np.int64)
    for i in range(model.n_members - 1, -1, -1):
        first[src[i]] = i
    sizes = [model.runs[m.run].n_classes for m in model.members]
    cals = model._calibration._calibrators
    n_classes = model._calibration._n_classes
    groups = []
    for k in sorted(set(sizes)):
        members = np.array([i for i in range(model.n_members) if sizes[i] == k], dtype=np.int64)
        sources = np.unique(src[members])
        ordinal_src = np.unique([src[i] for i in members if isinstance(model.members[i].calibrator, OrdinalCalibrator)]
                                ).astype(np.int64)
        where = {int(u): j for j, u in enumerate(sources.tolist())}
        slab = np.array([sources.size + int(np.searchsorted(ordinal_src, src[i]))
                         if isinstance(model.members[i].calibrator, OrdinalCalibrator) else where[int(src[i])]
                         for i in members], dtype=np.int64)
        step = CalibrationStep([cals[i] for i in members], [n_classes[i] for i in members])
        plan = step.plan(np.full(members.size, -1, dtype=np.int64), slab, n_rows=sources.size + ordinal_src.size)
        groups.append(GameGroup(k=k, members=members, sources=sources,
                                ordinal=np.array([where[int(u)] for u in ordinal_src], dtype=np.int64),
                                width=max(n_classes[i] for i in members), step=step, plan=plan,
                                interior=np.ascontiguousarray(coalition_masks(k)[1:-1])))
    keys = list(index)
    forest = [key for key in keys if key[0] == "forest"]
    linear = []
    for u, (kind, run, _) in enumerate(keys):
        if kind == "linear":
            j = model._linear_runs.index(run)
            linear.append((u, int(model._linear_cols[j]), int(model._linear_cols[j + 1])))
    return CalibratorGames(keys=keys, src=src, first=first,
                           forest_lo=np.array([key[1] for key in forest], dtype=np.int64),
                           forest_hi=np.array([key[2] for key in forest], dtype=np.int64),
                           linear=np.array(linear, dtype=np.int64).reshape(-1, 3), k_max=max(sizes, default=1),
                           groups=groups)
