"""Target calibration functions (TCFs) of sigmoid class-probability calibration, with gradients.

Tune and mix (Busa-Fekete, Kégl, Éltető, Szarvas, Machine Learning 2013), Sect. 5.2-5.3.
With t_il = a (f_l(x_i) - b), s_il = 1 / (1 + exp(-t_il)) and u_il = log s_il, the calibrated
class distribution is p_il = s_il / sum_l' s_il' = softmax_l(u_i), and v_i = sum_l z_l p_il.
Labels y_i are class indices 0..K-1. The five TCFs (sums over the calibration documents):

- LS (eq. 15):       sum_i -log p(y_i | x_i)
- EWLS(C) (eq. 16):  sum_i -log p(y_i | x_i) * H(p_i)^C,   H(p) = -sum_l p_l log p_l; C of
  either sign ("distributions being less (or more) uniform", sect. 5.2; for C < 0, H is floored
  at 1e-12)
- EL (eq. 17):       sum_i sum_l (l - y_i)^2 p_il
- ELL (eq. 18):      sum_i (lbar_i - y_i)^2,   lbar_i = sum_l l p_il
- SNDCG(sigma) (eq. 19, after SmoothRank, Chapelle and Wu 2010): per query, with o_1 >= o_2 >= ...
  the sorted scores (o_r is the score of the document the ranking puts at position r),
  w_ir = exp(-(v~_i - o~_r)^2 / sigma) / sum_r' exp(-(v~_i - o~_r')^2 / sigma) spreads document
  i over the positions, and the TCF is  - sum_q (1 / IDCG_q) sum_i g_i sum_r c_r w_ir, g_i the
  document's own gain 2^l_i - 1 (``doc_gains``; the class gain z_{y_i} when not given),
  c_r = 1 / log2(r + 1).
  Our choices, where eq. 19 leaves them open: scores enter the similarity as v~ = v / max_l z_l
  (in [0, 1], so one sigma means the same for K = 3 and K = 5 gains); each query's soft DCG is
  divided by its ideal DCG over the whole list (no cutoff), so the TCF is minus the sum of
  per-query smoothed NDCGs; queries whose ideal DCG is 0 are left out. The permutation enters
  only through the sorted values o_r, so the function is continuous in (a, b) and does not depend
  on how ties are ordered; its gradient treats the permutation as fixed (exact almost everywhere).

Gradients: each TCF gives dL/du (n, K); then dL/da = sum_il dL/du_il (1 - s_il)(f_il - b) and
dL/db = -a sum_il dL/du_il (1 - s_il), since du_il/dt_il = 1 - s_il.

Two numba kernels: one pass over the documents for the pointwise TCFs (and for the chain rule
of SNDCG), and the O(sum_q n_q^2) soft DCG over queries.
"""

from __future__ import annotations

import numpy as np
from numba import njit

import tunemix.core.numba_cache  # noqa: F401 - numba's cache written under a lock (tunemix/core/numba_cache.py)
from tunemix.core.calibration.base import Float64Array, Int64Array, ideal_dcg

TCF_NAMES = ("ls", "ewls", "el", "ell", "sndcg")

_ENTROPY_FLOOR = 1e-12


_CODES = {"ls": 0, "ewls": 1, "el": 2, "ell": 3, "sndcg": 4}


# --------------------------------------------------------------------------- pointwise kernel
@njit(cache=True)
def _pointwise_kernel(
    raw: np.ndarray,
    labels: np.ndarray,
    a: float,
    b: float,
    code: int,
    c_exp: float,
    gains: np.ndarray,
    dl_dv: np.ndarray,
) -> tuple[float, float, float]:
    """One pass over the documents: (L, dL/da, dL/db) of the TCF ``code`` (see ``_CODES``).

    Code 4 is the chain rule of SNDCG only: value 0 and dL/du_il = dl_dv_i p_il (z_l - v_i).
    """
    n, k = raw.shape
    u = np.empty(k)
    oms = np.empty(k)
    logp = np.empty(k)
    p = np.empty(k)
    du = np.empty(k)
    total = 0.0
    grad_a = 0.0
    grad_b = 0.0
    for i in range(n):
        umax = -np.inf
        for l in range(k):
            t = a * (raw[i, l] - b)
            if t > 0.0:
                e = np.exp(-t)
                u[l] = -np.log1p(e)
                oms[l] = e / (1.0 + e)
            else:
                e = np.exp(t)
                u[l] = t - np.log1p(e)
                oms[l] = 1.0 / (1.0 + e)
            umax = max(umax, u[l])
        acc = 0.0
        for l in range(k):
            p[l] = np.exp(u[l] - umax)
            acc += p[l]
        lse = umax + np.log(acc)
        for l in range(k):
            logp[l] = u[l] - lse
            p[l] /= acc
        y = labels[i]
        if code == 0 or code == 1:
            nll = -logp[y]
            weight = 1.0
            entropy = 0.0
            if code == 1:
                for l in range(k):
                    entropy -= p[l] * logp[l]
                entropy = max(entropy, 0.0)
                # C < 0 (the paper allows either sign) weighs confident documents up: floor H
                weight = entropy**c_exp if c_exp >= 0.0 else max(entropy, _ENTROPY_FLOOR) ** c_exp
            total += nll * weight
            for l in range(k):
                du[l] = p[l] * weight
            du[y] -= weight
            if code == 1 and c_exp != 0.0:
                coef = nll * c_exp * max(entropy, _ENTROPY_FLOOR) ** (c_exp - 1.0)
                for l in range(k):
                    du[l] -= coef * p[l] * (logp[l] + entropy)
        elif code == 2:
            phi = 0.0
            for l in range(k):
                phi += (l - y) * (l - y) * p[l]
            total += phi
            for l in range(k):
                du[l] = p[l] * ((l - y) * (l - y) - phi)
        elif code == 3:
            lbar = 0.0
            for l in range(k):
                lbar += l * p[l]
            diff = lbar - y
            total += diff * diff
            for l in range(k):
                du[l] = p[l] * 2.0 * diff * (l - lbar)
        else:
            v = 0.0
            for l in range(k):
                v += gains[l] * p[l]
            for l in range(k):
                du[l] = dl_dv[i] * p[l] * (gains[l] - v)
        for l in range(k):
            w = du[l] * oms[l]
            grad_a += w * (raw[i, l] - b)
            grad_b -= a * w
    return total, grad_a, grad_b


@njit(cache=True)
def _expected_gain_kernel(raw: np.ndarray, a: float, b: float, gains: np.ndarray) -> np.ndarray:
    """v_i = sum_l z_l p_il with the sigmoid class distribution (log-sum-exp)."""
    n, k = raw.shape
    out = np.empty(n)
    u = np.empty(k)
    for i in range(n):
        umax = -np.inf
        for l in range(k):
            t = a * (raw[i, l] - b)
            u[l] = -np.log1p(np.exp(-t)) if t > 0.0 else t - np.log1p(np.exp(t))
            umax = max(umax, u[l])
        num = 0.0
        den = 0.0
        for l in range(k):
            e = np.exp(u[l] - umax)
            num += gains[l] * e
            den += e
        out[i] = num / den
    return out


# --------------------------------------------------------------------------- SNDCG kernel
@njit(cache=True)
def _soft_dcg_kernel(
    v: np.ndarray,
    doc_gains: np.ndarray,
    query_offsets: np.ndarray,
    inv_idcg: np.ndarray,
    discounts: np.ndarray,
    sigma: float,
    grad_out: np.ndarray,
) -> float:
    """L = -sum_q inv_idcg_q sum_i g_i sum_r c_r w_ir (module docstring); adds dL/dv to grad_out."""
    total = 0.0
    n_queries = query_offsets.shape[0] - 1
    max_n = 0
    for q in range(n_queries):
        max_n = max(max_n, query_offsets[q + 1] - query_offsets[q])
    ex = np.empty(max_n)
    g_pos = np.empty(max_n)
    for q in range(n_queries):
        start = query_offsets[q]
        m = query_offsets[q + 1] - start
        if m == 0 or inv_idcg[q] == 0.0:
            continue
        vq = v[start : start + m]
        order = np.argsort(-vq, kind="mergesort")
        for r in range(m):
            g_pos[r] = 0.0
        for i in range(m):
            gi = doc_gains[start + i]
            if gi == 0.0:
                continue
            s_sum = 0.0
            num = 0.0
            for r in range(m):
                d = vq[i] - vq[order[r]]
                e = np.exp(-d * d / sigma)
                ex[r] = e
                s_sum += e
                num += discounts[r] * e
            soft = num / s_sum
            coef = -gi * inv_idcg[q]
            total += coef * soft
            grad_i = 0.0
            for r in range(m):
                d = vq[i] - vq[order[r]]
                g = coef * ex[r] / s_sum * (discounts[r] - soft)
                grad_i -= g * 2.0 * d / sigma
                g_pos[r] += g * 2.0 * d / sigma
            grad_out[start + i] += grad_i
        for r in range(m):
            grad_out[start + order[r]] += g_pos[r]
    return total


def soft_dcg_loss(
    v: Float64Array,
    doc_gains: Float64Array,
    query_offsets: Int64Array,
    sigma: float,
    inv_idcg: Float64Array | None = None,
) -> tuple[float, Float64Array]:
    """Minus the sum of per-query smoothed NDCGs of scores ``v`` (already scaled), and dL/dv."""
    if inv_idcg is None:
        idcg = ideal_dcg(doc_gains, query_offsets, None)
        inv_idcg = np.zeros_like(idcg)
        np.divide(1.0, idcg, out=inv_idcg, where=idcg > 0)
    max_n = int(np.diff(query_offsets).max()) if query_offsets.shape[0] > 1 else 0
    discounts = 1.0 / np.log2(np.arange(max_n, dtype=np.float64) + 2.0)
    grad = np.zeros(v.shape[0], dtype=np.float64)
    value = _soft_dcg_kernel(
        np.ascontiguousarray(v, dtype=np.float64),
        np.ascontiguousarray(doc_gains, dtype=np.float64),
        np.ascontiguousarray(query_offsets, dtype=np.int64),
        np.ascontiguousarray(inv_idcg, dtype=np.float64),
        discounts,
        float(sigma),
        grad,
    )
    return float(value), grad


# --------------------------------------------------------------------------- the TCF object
class TargetCalibrationFunction:
    """L(a, b) of one TCF on fixed calibration data, with its gradient (module docstring).

    ``tcf`` is one of ``TCF_NAMES``; ``C`` is EWLS's entropy exponent, ``sigma`` SNDCG's width.
    Calling ``value_and_grad(a, b)`` returns (L, [dL/da, dL/db]); ``n_terms`` is the number of
    summands (documents, or queries with positive ideal DCG for SNDCG), for averaging.
    """

    def __init__(
        self,
        tcf: str,
        raw: Float64Array,
        labels: Int64Array,
        query_offsets: Int64Array,
        gains: Float64Array,
        *,
        C: float = 2.0,
        sigma: float = 0.01,
        doc_gains: Float64Array | None = None,
    ) -> None:
        if tcf not in TCF_NAMES:
            raise ValueError(f"tcf must be one of {TCF_NAMES}, got {tcf!r}")
        self.tcf = tcf
        self.raw = np.ascontiguousarray(raw, dtype=np.float64)
        self.labels = np.ascontiguousarray(labels, dtype=np.int64)
        self.query_offsets = np.ascontiguousarray(query_offsets, dtype=np.int64)
        self.gains = np.ascontiguousarray(gains, dtype=np.float64)
        self.C = float(C)
        self.sigma = float(sigma)
        self.n_terms = raw.shape[0]
        self._no_dv = np.zeros(0)
        if tcf == "sndcg":
            self._doc_gains = (self.gains[self.labels] if doc_gains is None
                               else np.ascontiguousarray(doc_gains, dtype=np.float64))
            idcg = ideal_dcg(self._doc_gains, self.query_offsets, None)
            self._inv_idcg = np.zeros_like(idcg)
            np.divide(1.0, idcg, out=self._inv_idcg, where=idcg > 0)
            self.n_terms = int(np.count_nonzero(idcg > 0))
            self._gain_scale = float(gains.max()) if gains.max() > 0 else 1.0

    def value_and_grad(self, a: float, b: float) -> tuple[float, Float64Array]:
        """(L(a, b), [dL/da, dL/db])."""
        a, b = float(a), float(b)
        if self.tcf != "sndcg":
            value, grad_a, grad_b = _pointwise_kernel(
                self.raw, self.labels, a, b, _CODES[self.tcf], self.C, self.gains, self._no_dv
            )
            return float(value), np.array([grad_a, grad_b])
        v = _expected_gain_kernel(self.raw, a, b, self.gains)
        value, dv_scaled = soft_dcg_loss(
            v / self._gain_scale, self._doc_gains, self.query_offsets, self.sigma, self._inv_idcg
        )
        _, grad_a, grad_b = _pointwise_kernel(
            self.raw, self.labels, a, b, 4, 0.0, self.gains, dv_scaled / self._gain_scale
        )
        return value, np.array([grad_a, grad_b])

    def value(self, a: float, b: float) -> float:
        return self.value_and_grad(a, b)[0]
