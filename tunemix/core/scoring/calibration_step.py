"""Every member's calibrator in one step: one numba call for all members and documents.

At scoring time member m's raw K-vector (``tunemix.core.scoring.ensemble_model``) becomes one score
per document through its own calibrator (Tune and mix, Sect. 5). Calling 90 calibrators one by
one costs milliseconds of Python overhead for a 100-document list; here every calibrator's
parameters are packed once, when the model loads, into one flat float array with a header row
per member (the polynomials' integer program is written by the model's plan, once, as it groups
them), and one kernel walks blocks of documents. Per block it
first gathers each distinct raw source once (``raw[i, m, :K]``, or ``sums[i, hi, :K] -
sums[i, lo, :K]`` straight from the forest's running sums; a model's members share a few dozen
snapshots and differ in their calibrators), class-major; then for each member it copies its
source's rows into a small buffer and applies the member's formula with the documents in the
innermost loop (parameters stay in registers, the arithmetic vectorises), writing its scores to
the member's column of the output (``CalibrationStep.plan``: where each member reads, checked
once when a model loads):

- ``identity``: v = f_0 (the best single feature, LambdaMART's one score).
- ``er:<link>:<T>`` (McRank's expected relevance): softmax v = (sum_l T_l e_l) / (sum_l e_l),
              e_l = exp(f_l - max f); ordinal p_l = max(s(G_l) - s(G_{l-1}), 0) from the K-1
              cumulative logits (s(G_{-1}) = 0, s(G_{K-1}) = 1), v = (sum_l T_l p_l) / (sum_l p_l).
- ``shift``:  f'_l = max(0, 1 + f_l / R), p_l = f'_l / sum_l' f'_l', uniform where the sum is 0;
              v = z . p, computed as (sum_l z_l f'_l) / (sum_l f'_l), the mean gain where it is 0.
- ``cpc``:    p_l = s(y_l) / sum_l' s(y_l'), y_l = a (f_l - b), s(y) = 1 / (1 + exp(-y)); v = z . p,
              computed as (sum_l z_l w_l) / (sum_l w_l) with w_l = s(y_l) exp(-m) =
              e_l / (1 + exp(m) e_l), e_l = exp(y_l - m), m = min(max_l y_l, 0): no exponential
              overflows, the largest weight is >= 1/2, and only weights negligible next to it
              underflow (the reference works in the log domain, log s = -log(1 + exp(-y))).
- ``rbc``:    x = (f - mean) / scale; linear g = x . w + c; logistic g = sigmoid(eta), eta = x . w + c,
              = 1 / (1 + e) for eta >= 0 and e / (1 + e) below, e = exp(-|eta|); poly
              g = phi(clip(x)) . w + c, each monomial of total degree 1..D the product of a
              monomial of degree one less (its parent, computed before it) and one clipped input;
              nn g = tanh(x W1^T + b1) . w2 + b2; v = offset + out_scale * g. The polynomials of
              one source fitted on the same data (degrees 2 to 4, two targets: six per source in
              the MQ2008 ensemble) share x; the plan groups them, and a block computes the
              union of their monomials once (``CalibrationStep._poly_groups``).
- ``exp(x)``: x = k ln 2 + r, |r| <= ln(2) / 2; exp(r) - 1 by its Taylor polynomial of degree 13;
              2^k from its exponent bits; x clamped to [-708, 709]. Within 1 ulp of ``np.exp``,
              branch-free and call-free, so the document loops vectorise (numba calls libm's
              ``exp`` and ``tanh`` one value at a time, with data-dependent slow paths).
- ``tanh(z)``: sign(z) (-u) / (2 + u), u = expm1(-2 |z|) = 2^k (exp(r) - 1) + (2^k - 1); within
              2 ulp of ``np.tanh``.

The formulas are the calibrators' own ``transform`` (``tunemix.core.calibration``), which stays the
reference: the tests compare the two to 1e-12 (the forms above differ from it by a few units in
the last place; sums over classes, hidden units and monomials run in their index order; LLVM
may fuse a multiply and an add into one FMA, ``fastmath={"contract"}``, about a fifth faster
on the MQ2008 ensemble). A calibrator of a kind not listed falls back to its own ``transform``.

Threads: when the list is big enough (``PARALLEL_MIN_WORK``), ``get_scoring_threads()`` threads
(``tunemix.core.threads``) share the blocks of documents, each taking the next block not yet taken. Every
document's score is computed by the same instructions whatever its block (no sum runs across
documents; FMA contraction is decided at compile time, not per call), so the result is the same
to the last bit for any thread count.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

import tunemix.core.numba_cache  # noqa: F401 - numba's cache written under a lock (tunemix/core/numba_cache.py)
from tunemix.core.calibration.base import Calibrator
from tunemix.core.calibration.expected_relevance import ExpectedRelevanceCalibrator, IdentityCalibrator
from tunemix.core.calibration.regression_calibration import _POLY_CLIP, RegressionCalibrator
from tunemix.core.calibration.regression_models import unpack_network
from tunemix.core.calibration.shift import ShiftCalibrator
from tunemix.core.calibration.sigmoid_calibration import SigmoidCalibrator
from tunemix.core.scoring.forest_kernel import claim
from tunemix.core.scoring.runtime import run_on_threads
from tunemix.core.threads import on_threads

Float64Array = npt.NDArray[np.float64]
Int64Array = npt.NDArray[np.int64]

FAMILIES = ("shift", "cpc", "linear", "logistic", "poly", "nn", "identity", "er_softmax", "er_ordinal")
SHIFT, CPC, LINEAR, LOGISTIC, POLY, NN, IDENTITY, ER_SOFTMAX, ER_ORDINAL = range(len(FAMILIES))

#: Documents per block: the block's class-major raw buffer and the polynomials' monomials stay
#: in the L1/L2 cache while the members stream through.
DOC_BLOCK = 64

#: LLVM may fuse a multiply and an add into one FMA instruction (one rounding instead of two):
#: measured 6.4 ms against 7.9 ms without it for the MQ2008 ensemble's 640 calibrators on 1,000
#: documents; every document is still computed by the same instructions, so results stay
#: independent of the thread count.
_CONTRACT = {"contract"}

#: Below this many member-document pairs one thread calibrates the list (a launch costs more).
PARALLEL_MIN_WORK = 4_000

#: Header columns of a member's row in the packed program.
_H_FAMILY, _H_COLUMN, _H_K, _H_FLOAT, _H_INT, _H_SIZE = range(6)


def _family(cal: Calibrator) -> str | None:
    if isinstance(cal, IdentityCalibrator):
        return "identity"
    if isinstance(cal, ExpectedRelevanceCalibrator) and cal.link in ("softmax", "ordinal"):
        return f"er_{cal.link}"
    if isinstance(cal, ShiftCalibrator):
        return "shift"
    if isinstance(cal, SigmoidCalibrator):
        return "cpc"
    if isinstance(cal, RegressionCalibrator) and cal.model in FAMILIES:
        return str(cal.model)
    return None


def _poly_plan(exponents: Int64Array) -> tuple[list[int], list[int], list[int]] | None:
    """Evaluation order of the monomials (rows of ``exponents``): (term, parent, input) triples,
    each parent (a row, or -1 for the constant 1) before its children; None when a monomial's
    parent is missing from the table (the step then falls back to the calibrator's transform)."""
    rows = [tuple(int(e) for e in r) for r in exponents]
    index = {r: t for t, r in enumerate(rows)}
    if len(index) != len(rows) or any(min(r, default=0) < 0 or sum(r) == 0 for r in rows):
        return None
    terms, parents, inputs = [], [], []
    for t in sorted(range(len(rows)), key=lambda t: sum(rows[t])):
        r = rows[t]
        var = max(l for l, e in enumerate(r) if e > 0)
        parent_row = tuple(e - (l == var) for l, e in enumerate(r))
        if sum(parent_row) == 0:
            parent = -1
        elif parent_row in index:
            parent = index[parent_row]
        else:
            return None
        terms.append(t)
        parents.append(parent)
        inputs.append(var)
    return terms, parents, inputs


def _pack(family: str, cal: Any, k: int) -> tuple[list[float], int] | None:
    """(float params, size) of one calibrator in its kernel's layout (``size``: the hidden units of
    an nn, the monomials of a polynomial, whose integer program the plan writes:
    ``CalibrationStep._poly_groups``); None: use its transform."""
    if family == "identity":
        return [], 0
    if family in ("er_softmax", "er_ordinal"):
        relevance = [float(t) for t in cal.relevance_]
        return (relevance, 0) if len(relevance) == k + (family == "er_ordinal") else None
    if family == "shift":
        gains = [float(z) for z in cal.gains_]
        mean_gain = 0.0
        for z in gains:
            mean_gain += z * (1.0 / k)
        return [float(cal.scale_), mean_gain, *gains], 0
    if family == "cpc":
        return [float(cal.a_), float(cal.b_), *(float(z) for z in cal.gains_)], 0
    head = [*(float(v) for v in cal.mean_), *(float(v) for v in cal.scale_)]
    tail = [float(cal.intercept_), float(cal.output_offset_), float(cal.output_scale_)]
    coef = [float(v) for v in np.asarray(cal.coef_, dtype=np.float64)]
    if family in ("linear", "logistic"):
        return [*head, *coef, *tail], 0
    if family == "poly":
        plan = _poly_plan(np.asarray(cal.exponents_, dtype=np.int64))
        if plan is None:
            return None
        return [*head, *tail, float(_POLY_CLIP), *coef], len(plan[0])
    w1, b1, w2, b2 = unpack_network(np.asarray(cal.coef_, dtype=np.float64), k, int(cal.hidden))
    return ([*head, *(float(v) for v in w1.ravel()), *(float(v) for v in b1), *(float(v) for v in w2),
             float(b2), float(cal.output_offset_), float(cal.output_scale_)], int(w1.shape[0]))


# ----------------------------------------------------------------------------- kernels
# The block functions read the block's raw scores from ``x[l, j]`` (class l of the block's
# document j, ``j < nb``) and write the member's scores to ``res[j]``; ``fp[p:]`` are the member's
# float parameters in ``_pack``'s order; ``t0`` .. ``t3`` are scratch rows of the block's
# length. Every loop over j reads and writes contiguous rows only, so that it vectorises;
# ``error_model="numpy"``: a division is IEEE's (no zero check, which would stop that).

def _float_bits_typing(typingctx, x):  # pragma: no cover
    """The bits of a float64 as an int64 (an LLVM bitcast)."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(64))

    return types.int64(types.float64), codegen


def _bits_float_typing(typingctx, x):  # pragma: no cover
    """The float64 with the bits of an int64 (an LLVM bitcast)."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.DoubleType())

    return types.float64(types.int64), codegen


# typed Any: mypy sees the typing functions' (typingctx, x), numba calls them with x
_float_bits: Any = intrinsic(_float_bits_typing)
_bits_float: Any = intrinsic(_bits_float_typing)

_LOG2E = 1.4426950408889634
_LN2_HI = 6.93145751953125e-1  # few mantissa bits: k * _LN2_HI is exact
_LN2_LO = 1.42860682030941723212e-6
_ROUND = 6755399441055744.0  # 1.5 * 2^52: x + _ROUND rounds x to an integer, kept in the low bits
_INV_FACT = tuple(1.0 / math.factorial(i) for i in range(14))
_F2, _F3, _F4, _F5, _F6, _F7, _F8, _F9, _F10, _F11, _F12, _F13 = _INV_FACT[2:]


@njit(cache=True, inline="always", error_model="numpy", fastmath=_CONTRACT)
def _exp_parts(x):  # pragma: no cover
    """(2^k, exp(r) - 1) with exp(x) = 2^k exp(r) for x clamped to [-708, 709] (2^k normal):
    x = k ln 2 + r (Cody-Waite, k rounded to nearest), |r| <= ln(2) / 2, and
    exp(r) - 1 = r + r^2 d, d = sum_{i=2..13} r^(i-2) / i! (Taylor, remainder < 5e-18) by Estrin's
    scheme (short dependency chains, so that the loops over documents overlap their iterations).
    No branch and no call: the loops vectorise."""
    x = min(max(x, -708.0), 709.0)
    t = x * _LOG2E + _ROUND
    k = t - _ROUND
    r = (x - k * _LN2_HI) - k * _LN2_LO
    r2 = r * r
    r4 = r2 * r2
    b1 = (_F2 + _F3 * r) + (_F4 + _F5 * r) * r2
    b2 = (_F6 + _F7 * r) + (_F8 + _F9 * r) * r2
    b3 = (_F10 + _F11 * r) + (_F12 + _F13 * r) * r2
    d = (b1 + b2 * r4) + b3 * (r4 * r4)
    # the low bits of t hold k (two's complement); shifted into the exponent field with its bias
    return _bits_float((_float_bits(t) + 1023) << 52), r + r2 * d


@njit(cache=True, inline="always", error_model="numpy", fastmath=_CONTRACT)
def _exp(x):  # pragma: no cover
    """exp(x) = 2^k (1 + (exp(r) - 1)) (``_exp_parts``), within 1 ulp of ``np.exp``."""
    scale, q = _exp_parts(x)
    return scale * (1.0 + q)


@njit(cache=True, inline="always", error_model="numpy", fastmath=_CONTRACT)
def _tanh(z):  # pragma: no cover
    """tanh(z) = sign(z) (-u) / (2 + u), u = expm1(-2|z|) = 2^k q + (2^k - 1) (``_exp_parts``; exact
    cancellation-free for k = 0, and |u| > 0.29 otherwise), within 2 ulp of ``np.tanh``."""
    scale, q = _exp_parts(-2.0 * abs(z))
    u = scale * q + (scale - 1.0)
    t = -u / (2.0 + u)
    return t if z >= 0.0 else -t


@njit(cache=True, inline="always", error_model="numpy", fastmath=_CONTRACT)
def _shift_block(x, nb, k, fp, p, res, t0, t1):  # pragma: no cover
    """f'_l = max(0, 1 + f_l / R); v = (sum_l z_l f'_l) / (sum_l f'_l), mean gain where the sum is 0."""
    scale = fp[p]
    mean_gain = fp[p + 1]
    for j in range(nb):
        t0[j] = 0.0
        t1[j] = 0.0
    for l in range(k):
        z = fp[p + 2 + l]
        for j in range(nb):
            f = max(1.0 + x[l, j] / scale, 0.0)
            t0[j] += f
            t1[j] += z * f
    for j in range(nb):
        res[j] = t1[j] / t0[j] if t0[j] > 0.0 else mean_gain


@njit(cache=True, inline="always", error_model="numpy", fastmath=_CONTRACT)
def _cpc_block(x, nb, k, fp, p, res, t0, t1, t2, t3):  # pragma: no cover
    """y_l = a (f_l - b), m = min(max_l y_l, 0), c = exp(m); w_l = e_l / (1 + c e_l),
    e_l = exp(y_l - m) (= s(y_l) exp(-m)); v = (sum_l z_l w_l) / (sum_l w_l)."""
    a = fp[p]
    b = fp[p + 1]
    for j in range(nb):
        t2[j] = a * (x[0, j] - b)
    for l in range(1, k):
        for j in range(nb):
            t2[j] = max(t2[j], a * (x[l, j] - b))
    for j in range(nb):
        t0[j] = 0.0
        t1[j] = 0.0
        t2[j] = min(t2[j], 0.0)
        t3[j] = _exp(t2[j])
    for l in range(k):
        z = fp[p + 2 + l]
        for j in range(nb):
            e = _exp(a * (x[l, j] - b) - t2[j])
            w = e / (1.0 + t3[j] * e)
            t0[j] += w
            t1[j] += z * w
    for j in range(nb):
        res[j] = t1[j] / t0[j]


@njit(cache=True, inline="always", error_model="numpy", fastmath=_CONTRACT)
def _er_softmax_block(x, nb, k, fp, p, res, t0, t1, t2):  # pragma: no cover
    """McRank's expected relevance, softmax link: e_l = exp(f_l - max f); v = (sum_l T_l e_l) / (sum_l e_l)."""
    for j in range(nb):
        t2[j] = x[0, j]
    for l in range(1, k):
        for j in range(nb):
            t2[j] = max(t2[j], x[l, j])
    for j in range(nb):
        t0[j] = 0.0
        t1[j] = 0.0
    for l in range(k):
        rel = fp[p + l]
        for j in range(nb):
            e = _exp(x[l, j] - t2[j])
            t0[j] += e
            t1[j] += rel * e
    for j in range(nb):
        res[j] = t1[j] / t0[j]


@njit(cache=True, inline="always", error_model="numpy", fastmath=_CONTRACT)
def _er_ordinal_block(x, nb, k, fp, p, res, t0, t1, t2):  # pragma: no cover
    """McRank's expected relevance, ordinal link (k = K - 1 cumulative logits G): c_l = s(G_l),
    s(y) = 1 / (1 + e) for y >= 0 and e / (1 + e) below, e = exp(-|y|); p_l = max(c_l - c_{l-1}, 0)
    with c_{-1} = 0 and c_{K-1} = 1; v = (sum_l T_l p_l) / (sum_l p_l)."""
    for j in range(nb):
        t0[j] = 0.0
        t1[j] = 0.0
        t2[j] = 0.0  # the previous cumulative probability
    for l in range(k):
        rel = fp[p + l]
        for j in range(nb):
            y = x[l, j]
            e = _exp(-abs(y))
            c = (1.0 if y >= 0.0 else e) / (1.0 + e)
            q = max(c - t2[j], 0.0)
            t0[j] += q
            t1[j] += rel * q
            t2[j] = c
    rel = fp[p + k]
    for j in range(nb):
        q = max(1.0 - t2[j], 0.0)
        t0[j] += q
        t1[j] += rel * q
        res[j] = t1[j] / t0[j]


@njit(cache=True, inline="always", error_model="numpy", fastmath=_CONTRACT)
def _standardise(x, nb, k, fp, p):  # pragma: no cover
    """x_l <- (x_l - mean_l) / scale_l in place (``fp[p:p+k]`` means, ``fp[p+k:p+2k]`` scales)."""
    for l in range(k):
        mean = fp[p + l]
        scale = fp[p + k + l]
        for j in range(nb):
            x[l, j] = (x[l, j] - mean) / scale


@njit(cache=True, inline="always", error_model="numpy", fastmath=_CONTRACT)
def _linear_block(x, nb, k, fp, p, res, logistic, t0):  # pragma: no cover
    """eta = x . w + c; g = eta, or sigmoid(eta) with one exp; v = offset + out_scale * g."""
    _standardise(x, nb, k, fp, p)
    q = p + 2 * k
    for j in range(nb):
        t0[j] = 0.0
    for l in range(k):
        w = fp[q + l]
        for j in range(nb):
            t0[j] += x[l, j] * w
    intercept = fp[q + k]
    offset = fp[q + k + 1]
    out_scale = fp[q + k + 2]
    if logistic:
        for j in range(nb):
            eta = t0[j] + intercept
            e = _exp(-abs(eta))
            res[j] = offset + out_scale * ((1.0 if eta >= 0.0 else e) / (1.0 + e))
    else:
        for j in range(nb):
            res[j] = offset + out_scale * (t0[j] + intercept)


@njit(cache=True, inline="always", error_model="numpy", fastmath=_CONTRACT)
def _poly_monomials(x, nb, k, fp, p, ip, q, mono):  # pragma: no cover
    """A polynomial group's monomials (``ip[q:]``: group id, size G, then the G terms in evaluation
    order, their parents and their inputs): monomial t = its parent's monomial times one clipped
    standardised input (the group's members share the standardisation and the clip)."""
    _standardise(x, nb, k, fp, p)
    clip = fp[p + 2 * k + 3]
    for l in range(k):
        for j in range(nb):
            x[l, j] = min(max(x[l, j], -clip), clip)
    size = ip[q + 1]
    for u in range(size):
        t = ip[q + 2 + u]
        parent = ip[q + 2 + size + u]
        var = ip[q + 2 + 2 * size + u]
        if parent < 0:
            for j in range(nb):
                mono[t, j] = x[var, j]
        else:
            for j in range(nb):
                mono[t, j] = mono[parent, j] * x[var, j]


@njit(cache=True, inline="always", error_model="numpy", fastmath=_CONTRACT)
def _poly_block(nb, k, fp, p, ip, q, n_terms, res, t0, mono):  # pragma: no cover
    """g = sum_t w_t phi_t + c over the member's terms in their index order, phi_t its group's
    monomial ``ip[q + 2 + 3 G + t]`` (``_poly_monomials``); four terms per pass over the
    documents (the partial sum stays in a register; the additions keep their order)."""
    r = p + 2 * k
    intercept = fp[r]
    offset = fp[r + 1]
    out_scale = fp[r + 2]
    c = r + 4
    to_group = q + 2 + 3 * ip[q + 1]
    for j in range(nb):
        t0[j] = 0.0
    t = 0
    while t + 4 <= n_terms:
        w0, w1, w2, w3 = fp[c + t], fp[c + t + 1], fp[c + t + 2], fp[c + t + 3]
        m0, m1, m2, m3 = ip[to_group + t], ip[to_group + t + 1], ip[to_group + t + 2], ip[to_group + t + 3]
        for j in range(nb):
            v = t0[j] + mono[m0, j] * w0
            v = v + mono[m1, j] * w1
            v = v + mono[m2, j] * w2
            t0[j] = v + mono[m3, j] * w3
        t += 4
    while t < n_terms:
        w = fp[c + t]
        m = ip[to_group + t]
        for j in range(nb):
            t0[j] += mono[m, j] * w
        t += 1
    for j in range(nb):
        res[j] = offset + out_scale * (t0[j] + intercept)


@njit(cache=True, inline="always", error_model="numpy", fastmath=_CONTRACT)
def _nn_block(x, nb, k, fp, p, hidden, res, t0, t1):  # pragma: no cover
    """g = sum_h w2_h tanh(x . W1_h + b1_h) + b2; v = offset + out_scale * g."""
    _standardise(x, nb, k, fp, p)
    w1 = p + 2 * k
    b1 = w1 + hidden * k
    w2 = b1 + hidden
    r = w2 + hidden
    for j in range(nb):
        t1[j] = 0.0
    for h in range(hidden):
        for j in range(nb):
            t0[j] = 0.0
        for l in range(k):
            w = fp[w1 + h * k + l]
            for j in range(nb):
                t0[j] += x[l, j] * w
        bias = fp[b1 + h]
        w_out = fp[w2 + h]
        for j in range(nb):
            t1[j] += _tanh(t0[j] + bias) * w_out
    b2 = fp[r]
    offset = fp[r + 1]
    out_scale = fp[r + 2]
    for j in range(nb):
        res[j] = offset + out_scale * (t1[j] + b2)


@njit(cache=True, inline="always", error_model="numpy", fastmath=_CONTRACT)
def _calibrate_blocks(src, uhi, ulo, usrc, head, fp, ip, out, k_max, t_max, counter):  # pragma: no cover
    """Blocks of ``DOC_BLOCK`` documents, each the next one not yet taken (``claim`` on
    ``counter[0]``; threads sharing the counter share the blocks). Per block, first each distinct
    raw source u of the block (``src[i, uhi[u], :] - src[i, ulo[u], :]``, or ``src[i, uhi[u], :]``
    when ``ulo[u] < 0``; many members share a snapshot and differ only in their calibrator) is
    gathered once, class-major, into ``raws[u, l, j]``; then every member of ``head`` in turn
    copies its source's rows (packed row g reads source ``usrc[g]``) and applies its formula; the
    block's scores go to ``out[i, m]``, m its member (``head[g, _H_COLUMN]``)."""
    n_src = uhi.shape[0]
    n_members = head.shape[0]
    raws = np.empty((n_src, k_max, DOC_BLOCK))
    res = np.empty((n_members, DOC_BLOCK))
    x = np.empty((k_max, DOC_BLOCK))
    t0 = np.empty(DOC_BLOCK)
    t1 = np.empty(DOC_BLOCK)
    t2 = np.empty(DOC_BLOCK)
    t3 = np.empty(DOC_BLOCK)
    mono = np.empty((t_max, DOC_BLOCK))
    n = src.shape[0]
    i0 = claim(counter, 0) * DOC_BLOCK
    while i0 < n:
        nb = min(DOC_BLOCK, n - i0)
        group = -1  # the polynomial group whose monomials ``mono`` holds for this block
        for j in range(nb):
            row = src[i0 + j]
            for u in range(n_src):
                h = uhi[u]
                o = ulo[u]
                if o >= 0:
                    for l in range(k_max):
                        raws[u, l, j] = row[h, l] - row[o, l]
                else:
                    for l in range(k_max):
                        raws[u, l, j] = row[h, l]
        for g in range(n_members):
            family = head[g, _H_FAMILY]
            k = head[g, _H_K]
            p = head[g, _H_FLOAT]
            u = usrc[g]
            for l in range(k):
                for j in range(nb):
                    x[l, j] = raws[u, l, j]
            r = res[g]
            if family == SHIFT:
                _shift_block(x, nb, k, fp, p, r, t0, t1)
            elif family == CPC:
                _cpc_block(x, nb, k, fp, p, r, t0, t1, t2, t3)
            elif family == LINEAR or family == LOGISTIC:
                _linear_block(x, nb, k, fp, p, r, family == LOGISTIC, t0)
            elif family == POLY:
                q = head[g, _H_INT]
                if ip[q] != group:
                    _poly_monomials(x, nb, k, fp, p, ip, q, mono)
                    group = ip[q]
                _poly_block(nb, k, fp, p, ip, q, head[g, _H_SIZE], r, t0, mono)
            elif family == NN:
                _nn_block(x, nb, k, fp, p, head[g, _H_SIZE], r, t0, t1)
            elif family == ER_SOFTMAX:
                _er_softmax_block(x, nb, k, fp, p, r, t0, t1, t2)
            elif family == ER_ORDINAL:
                _er_ordinal_block(x, nb, k, fp, p, r, t0, t1, t2)
            else:  # IDENTITY: the first raw column
                for j in range(nb):
                    r[j] = x[0, j]
        for j in range(nb):
            orow = out[i0 + j]
            for g in range(n_members):
                orow[head[g, _H_COLUMN]] = res[g, j]
        i0 = claim(counter, 0) * DOC_BLOCK


@njit(cache=True, nogil=True, error_model="numpy", fastmath=_CONTRACT)
def _calibrate_run(src, uhi, ulo, usrc, head, fp, ip, out, k_max, t_max, counter):  # pragma: no cover
    """The blocks of documents not yet taken (``_calibrate_blocks``): every block on one thread,
    or on several sharing ``counter`` (``_calibrate_parallel``)."""
    _calibrate_blocks(src, uhi, ulo, usrc, head, fp, ip, out, k_max, t_max, counter)


def _calibrate_parallel(args: tuple[Any, ...], threads: int) -> None:
    """``_calibrate_run`` on ``threads`` threads (``tunemix.core.threads.on_threads``), each taking the
    next block of documents not yet taken until none is left (a thread that starts late does
    fewer blocks instead of holding the others up; see ``forest._score_parallel``)."""
    counter = np.zeros(1, dtype=np.int64)
    on_threads(lambda _p: _calibrate_run(*args, counter), threads)  # type: ignore[call-arg]


class CalibrationStep:
    """All calibrators of an ensemble, packed (see the module docstring).

    ``calibrators[m]`` turns member m's first ``n_classes[m]`` raw columns into its score.
    """

    def __init__(self, calibrators: Sequence[Calibrator], n_classes: Sequence[int]) -> None:
        if len(calibrators) != len(n_classes):
            raise ValueError("one class count per calibrator is needed")
        self.n_members = len(calibrators)
        self._calibrators = list(calibrators)
        self._n_classes = [int(k) for k in n_classes]
        self._k_need = max(self._n_classes, default=0)  # the columns a source must have (apply_plan)
        self.fallback: list[int] = []
        #: member m -> its family (None: its own transform)
        self.families: list[str | None] = []
        rows: list[list[int]] = []
        fp: list[float] = []
        for m, (cal, k) in enumerate(zip(self._calibrators, self._n_classes, strict=True)):
            fitted_k = getattr(cal, "gains_", np.zeros(k)).shape[0]
            if fitted_k != k:
                raise ValueError(f"calibrator {m} ({cal.name}) was fitted on K={fitted_k} classes, "
                                 f"its member has {k}")
            family = _family(cal)
            packed = None if family is None else _pack(family, cal, k)
            if family is None or packed is None:
                self.fallback.append(m)
                self.families.append(None)
                continue
            floats, size = packed
            rows.append([FAMILIES.index(family), m, k, len(fp), -1, size])  # ints: the plan's
            fp += floats
            self.families.append(family)
        self._head = np.array(rows, dtype=np.int64).reshape(len(rows), 6)
        self._fp = np.array(fp, dtype=np.float64)
        self._k_max = max([r[_H_K] for r in rows], default=1)
        self._no_base = np.full(self.n_members, -1, dtype=np.int64)
        self._raw_plan: SourcePlan | None = None

    def apply(self, raw: Float64Array) -> Float64Array:
        """Member scores (n, M) from raw scores (n, M, K_max) (member m reads its first K_m columns)."""
        raw = np.ascontiguousarray(raw, dtype=np.float64)
        if raw.ndim != 3 or raw.shape[1] != self.n_members or raw.shape[2] < max(self._n_classes, default=0):
            raise ValueError(f"raw must have shape (n, {self.n_members}, >= {max(self._n_classes, default=0)}), "
                             f"got {raw.shape}")
        if self._raw_plan is None:
            self._raw_plan = self.plan(self._no_base, np.arange(self.n_members, dtype=np.int64),
                                       n_rows=self.n_members)
        return self.apply_plan(raw, self._raw_plan)

    def apply_sums(self, sums: Float64Array, lo: Int64Array, hi: Int64Array) -> Float64Array:
        """Member scores (n, M) from the forest's running sums (n, C, K_max): member m's raw scores
        are ``sums[:, hi[m], :K_m] - sums[:, lo[m], :K_m]`` (no (n, M, K_max) block is built)."""
        plan = self.plan(lo, hi, n_rows=np.asarray(sums).shape[1] if np.ndim(sums) == 3 else 0)
        return self.apply_plan(sums, plan)

    def plan(self, lo: Int64Array, hi: Int64Array, *, n_rows: int) -> SourcePlan:
        """Where each member reads its raw scores (``sums[:, hi[m]] - sums[:, lo[m]]``, ``lo[m] < 0``:
        ``sums[:, hi[m]]``, rows below ``n_rows``), checked once so that a model can reuse it on
        every call (``apply_plan``). The distinct (hi, lo) pairs are gathered once per block of
        documents: many members share a snapshot and differ only in their calibrator."""
        lo = np.ascontiguousarray(lo, dtype=np.int64)
        hi = np.ascontiguousarray(hi, dtype=np.int64)
        if lo.shape != (self.n_members,) or hi.shape != (self.n_members,):
            raise ValueError(f"lo and hi need one checkpoint per member ({self.n_members})")
        if self.n_members and (hi.min() < 0 or hi.max() >= n_rows or lo.max() >= n_rows):
            raise ValueError(f"checkpoint indices must lie in 0..{n_rows - 1}")
        members = self._head[:, _H_COLUMN]
        pairs = np.stack([hi[members], np.maximum(lo[members], -1)], axis=1)
        uniq, usrc = np.unique(pairs.reshape(-1, 2), axis=0, return_inverse=True)
        usrc = usrc.reshape(-1).astype(np.int64)
        head, ip, group, t_max = self._poly_groups(usrc)
        # a group's members one after the other, so that a block computes its monomials once
        order = np.array(sorted(range(head.shape[0]), key=lambda g: (usrc[g], head[g, _H_FAMILY], group[g], g)),
                         dtype=np.int64).reshape(-1)
        return SourcePlan(hi=hi, lo=lo, n_rows=int(n_rows), uhi=np.ascontiguousarray(uniq[:, 0]),
                          ulo=np.ascontiguousarray(uniq[:, 1]), usrc=np.ascontiguousarray(usrc[order]),
                          head=np.ascontiguousarray(head[order]), ip=ip, t_max=t_max)

    def _poly_groups(self, usrc: Int64Array) -> tuple[Int64Array, Int64Array, list[int], int]:
        """The packed program with the polynomials in groups: members reading the same source with
        the same standardisation and clip share their monomials (a group's are the union of its
        members' exponent rows, each computed as in any member: its parent times one input, so
        with the same bits). Returns (head, ints, group of each packed row or -1, the largest
        group); a polynomial row's ints become (group, size G, the group's G terms, parents and
        inputs, then the group's index of each of the member's terms)."""
        head = self._head.copy()
        ints: list[int] = []
        groups: dict[tuple[Any, ...], list[int]] = {}
        for g in np.flatnonzero(head[:, _H_FAMILY] == POLY).tolist():
            k, p = int(head[g, _H_K]), int(head[g, _H_FLOAT])
            key = (int(usrc[g]), k, self._fp[p:p + 2 * k].tobytes(), float(self._fp[p + 2 * k + 3]))
            groups.setdefault(key, []).append(g)
        group = [-1] * head.shape[0]
        t_max = 1
        for gid, rows in enumerate(groups.values()):
            tables: dict[int, list[tuple[int, ...]]] = {}
            for g in rows:
                cal = self._calibrators[int(head[g, _H_COLUMN])]
                assert isinstance(cal, RegressionCalibrator)
                tables[g] = [tuple(int(e) for e in r) for r in np.asarray(cal.exponents_)]
            index: dict[tuple[int, ...], int] = {}
            for table in tables.values():
                for r in table:
                    index.setdefault(r, len(index))
            plan = _poly_plan(np.array(list(index), dtype=np.int64))
            if plan is None:  # each member's table has every parent, so their union has too
                raise AssertionError("a polynomial group without a plan")
            terms, parents, inputs = plan
            for g in rows:
                group[g] = gid
                head[g, _H_INT] = len(ints)
                ints += [gid, len(index), *terms, *parents, *inputs, *(index[r] for r in tables[g])]
            t_max = max(t_max, len(index))
        return head, np.array(ints, dtype=np.int64), group, t_max

    def apply_plan(self, sums: Float64Array, plan: SourcePlan) -> Float64Array:
        """Member scores (n, M) by ``plan`` from ``sums`` (n, plan's rows, >= K_max)."""
        sums = np.ascontiguousarray(sums, dtype=np.float64)
        k_need = self._k_need
        if sums.ndim != 3 or sums.shape[1] != plan.n_rows or sums.shape[2] < k_need:
            raise ValueError(f"sums must have shape (n, {plan.n_rows}, >= {k_need}), got {sums.shape}")
        n = sums.shape[0]
        out = np.empty((n, self.n_members), dtype=np.float64)
        if n == 0:
            return out
        if plan.head.shape[0]:
            args = (sums, plan.uhi, plan.ulo, plan.usrc, plan.head, self._fp, plan.ip, out, self._k_max, plan.t_max)
            run_on_threads(n, n * plan.head.shape[0] >= PARALLEL_MIN_WORK,
                           lambda: _calibrate_run(*args, np.zeros(1, dtype=np.int64)),
                           lambda threads: _calibrate_parallel(args, threads))
        for m in self.fallback:
            k = self._n_classes[m]
            h, lo_m = plan.hi[m], plan.lo[m]
            block = sums[:, h, :k] - sums[:, lo_m, :k] if lo_m >= 0 else sums[:, h, :k]
            out[:, m] = self._calibrators[m].transform(np.ascontiguousarray(block))
        return out


@dataclass(frozen=True, eq=False)
class SourcePlan:
    """``CalibrationStep.plan``'s result: each member's source (``hi``, ``lo``), checked, the
    distinct sources (``uhi``, ``ulo``) with each packed row's index among them (``usrc``), and
    the program the kernel runs: the packed rows in their order (``head``) and integers (``ip``)
    with the polynomials in groups (``CalibrationStep._poly_groups``), ``t_max`` monomials at most."""

    hi: Int64Array
    lo: Int64Array
    n_rows: int
    uhi: Int64Array
    ulo: Int64Array
    usrc: Int64Array
    head: Int64Array
    ip: Int64Array
    t_max: int
