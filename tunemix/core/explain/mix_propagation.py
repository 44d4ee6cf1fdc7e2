"""The mix layer of an exact explanation: each member's rescaled, weighted score as a function of
the explained document's member score, the rest of the list held as posted.

Imports numpy/numba code only (the service uses it). For document i of a list and member m, the mixer
(``tunemix.core.ensemble``) serves ``w_m r_m(s_im)`` summed over the members, where r_m rescales by
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
import numpy.typing as npt
from numba import njit

import tunemix.core.numba_cache  # noqa: F401 - numba's cache written under a lock (tunemix/core/numba_cache.py)
from tunemix.core.ensemble.base import Mixer
from tunemix.core.ensemble.exponential_forecaster import ExponentialForecaster
from tunemix.core.ensemble.simple_mixers import OneBest, Uniform

#: the layer's modes as the kernels code them
MODES = ("linear", "zscore", "minmax")


class MixLayer:
    """``value(rows, v)``: (k, M) the weighted, rescaled member scores ``w_m r_m(v)`` of documents
    ``rows`` of one list whose member scores are ``member`` (n, M), each document's own score
    replaced by v (module docstring). The list's statistics per member (its mean, the sum and the
    sum of squares of the deviations from it, its two smallest and two largest distinct scores and
    how many documents hold the extremes) are taken in one numba pass (``_list_stats``)."""

    def __init__(self, weights: np.ndarray, mode: str, member: np.ndarray,
                 coef: np.ndarray | None = None, shift: np.ndarray | None = None) -> None:
        self.weights, self.mode, self.n = np.asarray(weights, dtype=np.float64), mode, member.shape[0]
        m = member.shape[1]
        self.coef = np.zeros(m) if coef is None else np.asarray(coef, dtype=np.float64)
        self.shift = np.zeros(m) if shift is None else np.asarray(shift, dtype=np.float64)
        self.s = np.ascontiguousarray(member, dtype=np.float64)
        #: rows: mean, sum of deviations, sum of squared deviations, smallest, second smallest,
        #: documents at the smallest, largest, second largest, documents at the largest
        self.stats = np.zeros((9, m))
        if mode != "linear":
            _list_stats(self.s, self.stats)

    def others(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(k, M) each document's smallest and largest score among the list's other documents."""
        s, st = self.s[rows], self.stats
        omin = np.where((s == st[3]) & (st[5] == 1), st[4], st[3])
        omax = np.where((s == st[6]) & (st[8] == 1), st[7], st[6])
        return omin, omax

    def value(self, rows: np.ndarray, v: np.ndarray) -> np.ndarray:
        if self.mode == "linear":
            return np.asarray(self.coef * (v - self.shift))
        n = self.n
        if n <= 1:
            return np.zeros_like(v)
        omin, omax = self.others(rows)
        if self.mode == "minmax":
            lo, hi = np.minimum(omin, v), np.maximum(omax, v)
            span = hi - lo
            return np.where(span > 0, self.weights * (v - lo) / np.where(span > 0, span, 1.0), 0.0)
        centre, total, squares = self.stats[0], self.stats[1], self.stats[2]
        d = self.s[rows] - centre
        dv = v - centre
        t = total - d + dv
        q = squares - d * d + dv * dv
        mean = t / n
        std = np.sqrt(np.maximum(q / n - mean * mean, 0.0))
        constant = (omin == omax) & (v == omin)
        ok = (std > 0) & ~constant
        return np.where(ok, self.weights * (dv - mean) / np.where(ok, std, 1.0), 0.0)

    def shares(self, rows: np.ndarray, s_r: np.ndarray, pos: np.ndarray, neg: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(f(s_r), dP / P, dN / N), each (k, M): the two-player rule of the module docstring with
        f = ``value``, the four values of each member in one numba pass (``_shares``; a part that
        is 0 gets the ratio 0)."""
        k, m = pos.shape
        f0, k_pos, k_neg = np.empty((k, m)), np.empty((k, m)), np.empty((k, m))
        _shares(MODES.index(self.mode), self.n, self.weights, self.coef, self.shift, self.stats, *self.rows(rows),
                own_rows(s_r, k, m), pos, neg, f0, k_pos, k_neg)
        return f0, k_pos, k_neg

    def rows(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(k, M) each of ``rows``' own member scores and the others' extremes, for the kernels."""
        s = np.ascontiguousarray(self.s[rows])
        if self.mode == "linear":
            return s, s, s
        omin, omax = self.others(rows)
        return s, np.ascontiguousarray(omin), np.ascontiguousarray(omax)


@njit(cache=True, nogil=True)
def _list_stats(s, st):  # pragma: no cover
    """``MixLayer.stats`` of the list's member scores s (n, M) in two passes of plain reductions
    (members in the inner loop, so that it vectorises): the sums, smallest and largest scores; then
    the deviations from the mean, how many documents hold each extreme, and the second smallest and
    largest distinct scores (the extremes again when every document holds them)."""
    n, m = s.shape
    for j in range(m):
        st[0, j] = 0.0
        st[3, j] = np.inf
        st[6, j] = -np.inf
    for i in range(n):
        for j in range(m):
            v = s[i, j]
            st[0, j] += v
            st[3, j] = min(st[3, j], v)
            st[6, j] = max(st[6, j], v)
    if n == 0:
        for j in range(m):
            st[4, j] = np.inf
            st[7, j] = -np.inf
        return
    for j in range(m):
        st[0, j] /= n
        st[1, j] = 0.0
        st[2, j] = 0.0
        st[4, j] = np.inf
        st[5, j] = 0.0
        st[7, j] = -np.inf
        st[8, j] = 0.0
    for i in range(n):
        for j in range(m):
            v = s[i, j]
            d = v - st[0, j]
            st[1, j] += d
            st[2, j] += d * d
            lo, hi = st[3, j], st[6, j]
            st[5, j] += 1.0 if v == lo else 0.0
            st[8, j] += 1.0 if v == hi else 0.0
            st[4, j] = min(st[4, j], v if v > lo else np.inf)
            st[7, j] = max(st[7, j], v if v < hi else -np.inf)


@njit(cache=True, nogil=True)
def _value(mode, n, w, c, sh, centre, total, squares, d, omin, omax, v):  # pragma: no cover
    """One member's ``MixLayer.value`` (the same arithmetic, one value at a time)."""
    if mode == 0:
        return c * (v - sh)
    if n <= 1:
        return 0.0
    if mode == 2:
        lo = min(omin, v)
        span = max(omax, v) - lo
        return w * (v - lo) / span if span > 0 else 0.0
    dv = v - centre
    t = total - d + dv
    q = squares - d * d + dv * dv
    mean = t / n
    std = np.sqrt(max(q / n - mean * mean, 0.0))
    if std > 0 and not (omin == omax and v == omin):
        return w * (dv - mean) / std
    return 0.0


@njit(cache=True, nogil=True)
def _member_shares(mode, n, w, c, sh, st, m, s_row, lo, hi, v, p, q):  # pragma: no cover
    """(f(v), dP / P, dN / N) of member m for one document (``MixLayer.shares``)."""
    d = s_row - st[0, m]
    cen, tot, sq = st[0, m], st[1, m], st[2, m]
    a = _value(mode, n, w, c, sh, cen, tot, sq, d, lo, hi, v)
    # a part that is 0 moves nothing: its values are those already computed (the same bits)
    fp = _value(mode, n, w, c, sh, cen, tot, sq, d, lo, hi, v + p) if p != 0.0 else a
    fn = _value(mode, n, w, c, sh, cen, tot, sq, d, lo, hi, v + q) if q != 0.0 else a
    fpn = fn if p == 0.0 else fp if q == 0.0 else _value(mode, n, w, c, sh, cen, tot, sq, d, lo, hi, v + p + q)
    k_pos = (0.5 * (fp - a) + 0.5 * (fpn - fn)) / p if p != 0.0 else 0.0
    k_neg = (0.5 * (fn - a) + 0.5 * (fpn - fp)) / q if q != 0.0 else 0.0
    return a, k_pos, k_neg


@njit(cache=True, nogil=True)
def _shares(mode, n, w, c, sh, st, s_rows, omin, omax, s_r, pos, neg, f0, k_pos, k_neg):  # pragma: no cover
    """f0, k_pos, k_neg (k, M) of ``MixLayer.shares`` (``_member_shares`` per document and member)."""
    for i in range(pos.shape[0]):
        for m in range(pos.shape[1]):
            f0[i, m], k_pos[i, m], k_neg[i, m] = _member_shares(
                mode, n, w[m], c[m], sh[m], st, m, s_rows[i, m], omin[i, m], omax[i, m], s_r[i, m], pos[i, m],
                neg[i, m])


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
def _member_row(ratio, at, i, m, u, n_p, buf):  # pragma: no cover
    """buf[p] = C[i, m, p] = sum_q ratio[i, m, q] at[i, u, q, p] over the first n_p players (players in
    the innermost loop, so that it vectorises)."""
    r0 = ratio[i, m, 0]
    for p in range(n_p):
        buf[p] = r0 * at[i, u, 0, p]
    for q in range(1, at.shape[2]):
        rq = ratio[i, m, q]
        if rq != 0.0:
            for p in range(n_p):
                buf[p] += rq * at[i, u, q, p]


@njit(cache=True, nogil=True, fastmath={"reassoc"})
def _row_parts(buf, n_p):  # pragma: no cover
    """(sum of the positive entries, sum of the negative ones) of buf[:n_p], in any order (``reassoc``:
    the loop vectorises), the same order on every call."""
    sp = 0.0
    sn = 0.0
    for p in range(n_p):
        c = buf[p]
        sp += max(c, 0.0)
        sn += min(c, 0.0)
    return sp, sn


@njit(cache=True, nogil=True)
def _zscore_shares(n, w, st, s_rows, omin, omax, s_r, pos, neg, f0, k_pos, k_neg):  # pragma: no cover
    """``_member_shares`` of every member of one document in the ``zscore`` mode, written with
    selects instead of branches so that the members' loop vectorises (its square roots and
    divisions four at a time): the same arithmetic, value for value (a part that is 0 moves
    nothing: x + 0 is x)."""
    for m in range(w.shape[0]):
        v, p, q = s_r[m], pos[m], neg[m]
        cen, tot, sq = st[0, m], st[1, m], st[2, m]
        d = s_rows[m] - cen
        flat = omin[m] == omax[m]
        a = _zscore_value(n, w[m], cen, tot, sq, d, flat, omin[m], v)
        fp = _zscore_value(n, w[m], cen, tot, sq, d, flat, omin[m], v + p)
        fn = _zscore_value(n, w[m], cen, tot, sq, d, flat, omin[m], v + q)
        fpn = _zscore_value(n, w[m], cen, tot, sq, d, flat, omin[m], v + p + q)
        f0[m] = a
        k_pos[m] = (0.5 * (fp - a) + 0.5 * (fpn - fn)) / (p if p != 0.0 else 1.0) if p != 0.0 else 0.0
        k_neg[m] = (0.5 * (fn - a) + 0.5 * (fpn - fp)) / (q if q != 0.0 else 1.0) if q != 0.0 else 0.0


@njit(cache=True, nogil=True, inline="always")
def _zscore_value(n, w, centre, total, squares, d, flat, omin, v):  # pragma: no cover
    """``_value`` in the ``zscore`` mode (n >= 2), branch-free."""
    dv = v - centre
    t = total - d + dv
    q = squares - d * d + dv * dv
    mean = t / n
    std = np.sqrt(max(q / n - mean * mean, 0.0))
    ok = (std > 0) & ~(flat & (v == omin))
    return w * (dv - mean) / (std if ok else 1.0) if ok else 0.0


@njit(cache=True, nogil=True)
def _others(s, st, mode, s_row, omin, omax):  # pragma: no cover
    """One document's ``MixLayer.rows``: s_row its own member scores s (M,), omin and omax the
    smallest and largest among the list's other documents (``MixLayer.others``, the same selects;
    in the linear mode its own scores, which the linear rule does not read)."""
    for m in range(s.shape[0]):
        v = s[m]
        s_row[m] = v
        if mode == 0:
            omin[m] = v
            omax[m] = v
        else:
            omin[m] = st[4, m] if v == st[3, m] and st[5, m] == 1 else st[3, m]
            omax[m] = st[7, m] if v == st[6, m] and st[8, m] == 1 else st[6, m]


@njit(cache=True, nogil=True)
def _propagate(ratio, at, src, active, n_active, mode, n, w, c, sh, st, s, docs, s_r, f0, out):  # pragma: no cover
    """Per document: its own member scores ``s[docs[i]]`` and the others' extremes (``_others``),
    one pass over the members for their attributions ``C[i, m, j]`` over document
    i's ``n_active[i]`` players (``_member_row``; one document's (M, P) at a time, not (k, M, P))
    and their positive and negative parts, the mix layer's two-player shares of every member
    (``_zscore_shares``, or ``_member_shares`` one at a time), and a second pass adding
    ``C * (k_pos if C > 0 else k_neg)`` to ``out[i, active[i, j]]``; f0[i, m] the member's value at
    the reference."""
    n_m = ratio.shape[1]
    rows = np.empty((n_m, at.shape[3]))  # the members' rows of one document, kept for the second pass
    acc = np.empty(at.shape[3])
    pos, neg = np.empty(n_m), np.empty(n_m)
    kp, kn = np.empty(n_m), np.empty(n_m)
    s_row, omin, omax = np.empty(n_m), np.empty(n_m), np.empty(n_m)
    for i in range(ratio.shape[0]):
        n_p = n_active[i]
        _others(s[docs[i]], st, mode, s_row, omin, omax)
        for m in range(n_m):
            buf = rows[m]
            _member_row(ratio, at, i, m, src[m], n_p, buf)
            pos[m], neg[m] = _row_parts(buf, n_p)
        if mode == 1 and n > 1:
            _zscore_shares(n, w, st, s_row, omin, omax, s_r[i], pos, neg, f0[i], kp, kn)
        else:
            for m in range(n_m):
                f0[i, m], kp[m], kn[m] = _member_shares(mode, n, w[m], c[m], sh[m], st, m, s_row[m], omin[m],
                                                        omax[m], s_r[i, m], pos[m], neg[m])
        acc[:n_p] = 0.0
        for m in range(n_m):
            if kp[m] == 0.0 and kn[m] == 0.0:
                continue
            buf = rows[m]
            km, kq = kp[m], kn[m]
            for j in range(n_p):
                x = buf[j]
                # a zero share adds nothing (never 0 * an infinite ratio)
                acc[j] += x * km if x > 0.0 else (x * kq if x < 0.0 else 0.0)
        for j in range(n_p):
            out[i, active[i, j]] += acc[j]


def kernel_array(a: npt.ArrayLike, dtype: type) -> np.ndarray:
    """``a`` as the one array type the kernels are compiled for: C-contiguous and writable (copied
    only when it is not). A read-only one (``np.broadcast_to``'s view, which
    ``np.ascontiguousarray`` passes through uncopied when its strides are already C's: an (M,) row
    broadcast to (1, M)) would make numba compile another specialisation, after ``/ready`` has
    said every kernel is warm (``tests/service/test_warm_before_ready.py``)."""
    return np.require(a, dtype=dtype, requirements=("C", "W"))


def own_rows(a: npt.ArrayLike, k: int, m: int) -> np.ndarray:
    """``a`` broadcast to (k, m), for a kernel (``kernel_array``: a copy of its own)."""
    return kernel_array(np.broadcast_to(a, (k, m)), np.float64)


def reveal_cancel(layer: MixLayer, rows: np.ndarray, s_r: np.ndarray, ratio: np.ndarray, attr: np.ndarray,
                  src: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(contributions (k, P), baselines (k,)): member m's attributions
    ``C[i, m, p] = sum_q ratio[i, m, q] attr[i, src[m], p, q]`` of its change from ``s_r`` (k, M;
    or one (M,) row for all k) carried through the mix layer by the two-player rule of the module
    docstring, summed over the members (one numba pass, ``_propagate``;
    ``tests/scoring/test_mix_propagation.py`` has the NumPy twin)."""
    at = np.ascontiguousarray(np.asarray(attr, dtype=np.float64).transpose(0, 1, 3, 2))
    k, p = at.shape[0], at.shape[3]
    return reveal_cancel_at(layer, rows, s_r, ratio, at, src, np.tile(np.arange(p, dtype=np.int64), (k, 1)),
                            np.full(k, p, dtype=np.int64))


def reveal_cancel_at(layer: MixLayer, rows: np.ndarray, s_r: np.ndarray, ratio: np.ndarray, at: np.ndarray,
                     src: np.ndarray, active: np.ndarray, n_active: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``reveal_cancel`` with the attributions laid out (k, U, K, P), the players innermost and
    document i's first ``n_active[i]`` being players ``active[i, :n_active[i]]`` (the others get 0)."""
    ratio = kernel_array(ratio, np.float64)
    at = kernel_array(at, np.float64)
    k, m = ratio.shape[:2]
    f0, out = np.empty((k, m)), np.zeros((k, at.shape[3]))
    _propagate(ratio, at, kernel_array(src, np.int64), kernel_array(active, np.int64), kernel_array(n_active, np.int64),
               MODES.index(layer.mode), layer.n, layer.weights, layer.coef, layer.shift, layer.stats, layer.s,
               kernel_array(rows, np.int64), own_rows(s_r, k, m), f0, out)
    return out, f0.sum(axis=1)
