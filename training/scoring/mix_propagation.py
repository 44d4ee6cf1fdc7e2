"""The mix layer of an exact explanation: each member's rescaled, weighted score as a function of
the explained document's member score, the rest of the list held as posted.

Imports numpy/numba code only (the service uses it). For document i of a list and member m, the mixer
(``training.ensemble``) serves ``w_m r_m(s_im)`` summed over the members, where r_m rescales by
statistics of the member's scores on the whole list, document i's own included:

- ``none`` / ``std_global`` (and ``OneBest``): linear, ``c_m (s - o_m)``;
- ``zscore_query``: ``r(s) = (s - mean(s)) / std(s)``, the mean and population deviation of the
  list with document i's score set to s (0 when the list is constant); bounded by sqrt(n - 1);
- ``minmax_query``: ``r(s) = (s - min(s)) / (max(s) - min(s))``, in [0, 1].

Holding the list's statistics fixed instead would make the z-score linear and unbounded: a
member that is nearly flat on the list (a saturated calibrator: spread 7.7e-14 on an MQ2008 list,
coefficient 2.0e10) would then turn any hybrid document into thousands of list deviations, and
the contributions into large numbers that cancel (measured: +5241 and -4281 for a score
difference of 2.6 on an 8-document MQ2008 query). So the per-query rescaling is a nonlinear layer
of one input per member, and a member's change ``s_m(x) - s_m(r)`` arrives already split over the
features (C_m[p]). Its positive part P = sum of the positive C_m[p] and negative part N are two
players; their exact Shapley values (DeepLIFT's RevealCancel rule, Shrikumar, Greenside and
Kundaje 2017, "Learning important features through propagating activation differences")

    dP = (f(s_r + P) - f(s_r) + f(s_r + P + N) - f(s_r + N)) / 2,   dN likewise,

with f = w_m r_m, are shared by the features in proportion to their C_m[p] (``reveal_cancel``):
``dP + dN = f(s_r + P + N) - f(s_r)``, so the contributions still add up, and each is bounded by
the rescaling's range. For a linear mode both shares are ``c_m P`` and ``c_m N``: the plain
propagation. The baseline ``sum_m f_m(s_m(r))`` is the score of the reference document in
document i's place; it differs between documents of a list through the per-query rescaling only,
and that difference is a pair's "rest of the list".
"""

from __future__ import annotations

import numpy as np
from numba import njit

from training.ensemble.base import Mixer
from training.ensemble.exponential_forecaster import ExponentialForecaster
from training.ensemble.simple_mixers import OneBest, Uniform


class MixLayer:
    """``value(rows, v)``: (k, M) the weighted, rescaled member scores ``w_m r_m(v)`` of documents
    ``rows`` of one list whose member scores are ``member`` (n, M), each document's own score
    replaced by v (module docstring)."""

    def __init__(self, weights: np.ndarray, mode: str, member: np.ndarray,
                 coef: np.ndarray | None = None, shift: np.ndarray | None = None) -> None:
        self.weights, self.mode, self.n = weights, mode, member.shape[0]
        self.coef, self.shift = coef, shift
        if mode == "linear":
            return
        s = np.asarray(member, dtype=np.float64)
        n = self.n
        self.centre = s.mean(axis=0) if n else np.zeros(s.shape[1])
        d = s - self.centre
        self.d = d
        self.total, self.squares = d.sum(axis=0), (d * d).sum(axis=0)
        # the others' smallest and largest score per document: the list's extreme, or the second
        # one for the document that holds it alone (min and max passes, not a partition)
        if n == 0:
            self.others_min = self.others_max = np.zeros(s.shape[1])
            return
        lo1, hi1 = s.min(axis=0), s.max(axis=0)
        at_lo, at_hi = s == lo1, s == hi1
        alone_lo = at_lo & (at_lo.sum(axis=0) == 1)
        alone_hi = at_hi & (at_hi.sum(axis=0) == 1)
        lo2 = np.where(at_lo, np.inf, s).min(axis=0) if n > 1 else lo1
        hi2 = np.where(at_hi, -np.inf, s).max(axis=0) if n > 1 else hi1
        self.others_min = np.where(alone_lo, lo2, lo1)
        self.others_max = np.where(alone_hi, hi2, hi1)

    def value(self, rows: np.ndarray, v: np.ndarray) -> np.ndarray:
        if self.mode == "linear":
            assert self.coef is not None and self.shift is not None
            return np.asarray(self.coef * (v - self.shift))
        n = self.n
        if n <= 1:
            return np.zeros_like(v)
        omin, omax = self.others_min[rows], self.others_max[rows]
        if self.mode == "minmax":
            lo, hi = np.minimum(omin, v), np.maximum(omax, v)
            span = hi - lo
            return np.where(span > 0, self.weights * (v - lo) / np.where(span > 0, span, 1.0), 0.0)
        dv = v - self.centre
        t = self.total - self.d[rows] + dv
        q = self.squares - self.d[rows] ** 2 + dv * dv
        mean = t / n
        std = np.sqrt(np.maximum(q / n - mean * mean, 0.0))
        constant = (omin == omax) & (v == omin)
        ok = (std > 0) & ~constant
        return np.where(ok, self.weights * (dv - mean) / np.where(ok, std, 1.0), 0.0)


def mix_layer(mixer: Mixer, member: np.ndarray) -> MixLayer | None:
    """The mix layer of one query's member scores (n, M); None for a mixer that is not a weighted
    sum of rescaled member scores (rank fusion)."""
    m = member.shape[1]
    if isinstance(mixer, OneBest):
        c = np.zeros(m)
        c[mixer.best_] = 1.0
        return MixLayer(c, "linear", member, c, np.zeros(m))
    if isinstance(mixer, ExponentialForecaster):
        w = mixer.weights_ / mixer.weights_.sum()
    elif isinstance(mixer, Uniform):
        w = np.full(m, 1.0 / max(m, 1))
    else:
        return None
    rescaler = mixer.rescaler_
    if rescaler.mode == "none":
        return MixLayer(w, "linear", member, w.copy(), np.zeros(m))
    if rescaler.mode == "std_global":
        assert rescaler.scale_ is not None
        return MixLayer(w, "linear", member, w / rescaler.scale_, np.zeros(m))
    return MixLayer(w, "zscore" if rescaler.mode == "zscore_query" else "minmax", member)


@njit(cache=True, nogil=True)
def _moving(attr, i, nz, count):  # pragma: no cover
    """nz[u, :count[u]]: the players p with a non-zero attr[i, u, p, :] (the others give nothing)."""
    for u in range(attr.shape[1]):
        c = 0
        for p in range(attr.shape[2]):
            for q in range(attr.shape[3]):
                if attr[i, u, p, q] != 0.0:
                    nz[u, c] = p
                    c += 1
                    break
        count[u] = c


@njit(cache=True, nogil=True)
def _parts(ratio, attr, src, pos, neg):  # pragma: no cover
    """pos, neg (k, M): the sums of member m's positive and negative attributions
    ``C[i, m, p] = sum_q ratio[i, m, q] attr[i, src[m], p, q]`` (never built: (k, M, P) is large)."""
    nz = np.empty((attr.shape[1], attr.shape[2]), dtype=np.int64)
    count = np.empty(attr.shape[1], dtype=np.int64)
    for i in range(ratio.shape[0]):
        _moving(attr, i, nz, count)
        for m in range(ratio.shape[1]):
            u = src[m]
            sp = 0.0
            sn = 0.0
            for j in range(count[u]):
                p = nz[u, j]
                c = 0.0
                for q in range(ratio.shape[2]):
                    c += ratio[i, m, q] * attr[i, u, p, q]
                if c > 0.0:
                    sp += c
                elif c < 0.0:
                    sn += c
            pos[i, m] = sp
            neg[i, m] = sn


@njit(cache=True, nogil=True)
def _shared(ratio, attr, src, k_pos, k_neg, out):  # pragma: no cover
    """out[i, p] += C[i, m, p] * (k_pos[i, m] if C > 0 else k_neg[i, m]), over the members."""
    nz = np.empty((attr.shape[1], attr.shape[2]), dtype=np.int64)
    count = np.empty(attr.shape[1], dtype=np.int64)
    for i in range(ratio.shape[0]):
        _moving(attr, i, nz, count)
        for m in range(ratio.shape[1]):
            kp = k_pos[i, m]
            kn = k_neg[i, m]
            if kp == 0.0 and kn == 0.0:
                continue
            u = src[m]
            for j in range(count[u]):
                p = nz[u, j]
                c = 0.0
                for q in range(ratio.shape[2]):
                    c += ratio[i, m, q] * attr[i, u, p, q]
                if c > 0.0:
                    out[i, p] += c * kp
                elif c < 0.0:
                    out[i, p] += c * kn


def reveal_cancel(layer: MixLayer, rows: np.ndarray, s_r: np.ndarray, ratio: np.ndarray, attr: np.ndarray,
                  src: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(contributions (k, P), baselines (k,)): member m's attributions
    ``C[i, m, p] = sum_q ratio[i, m, q] attr[i, src[m], p, q]`` of its change from ``s_r`` (k, M)
    carried through the mix layer by the two-player rule of the module docstring, summed over the
    members (two numba passes; ``tests/scoring/test_mix_propagation.py`` has the NumPy twin)."""
    ratio = np.ascontiguousarray(ratio, dtype=np.float64)
    attr = np.ascontiguousarray(attr, dtype=np.float64)
    src = np.ascontiguousarray(src, dtype=np.int64)
    k, m = ratio.shape[:2]
    pos, neg = np.zeros((k, m)), np.zeros((k, m))
    _parts(ratio, attr, src, pos, neg)
    f0 = layer.value(rows, s_r)
    fp, fn, fpn = layer.value(rows, s_r + pos), layer.value(rows, s_r + neg), layer.value(rows, s_r + pos + neg)
    d_pos = 0.5 * (fp - f0) + 0.5 * (fpn - fn)
    d_neg = 0.5 * (fn - f0) + 0.5 * (fpn - fp)
    k_pos = np.where(pos != 0, d_pos / np.where(pos != 0, pos, 1.0), 0.0)
    k_neg = np.where(neg != 0, d_neg / np.where(neg != 0, neg, 1.0), 0.0)
    out = np.zeros((k, attr.shape[2]))
    _shared(ratio, attr, src, k_pos, k_neg, out)
    return out, f0.sum(axis=1)
