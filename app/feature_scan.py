"""The feature arrays of a /rank JSON body read straight from its bytes to float32 (numba).

Reading a 100-document body with pydantic-core's JSON reader makes a Python float of every
feature value, then numpy converts the lists; for MQ2008-like lists that was about 0.55 ms per
100 documents, the largest cost of a request after scoring. ``scan_features`` walks the body
once: every ``"features": [numbers]`` value is parsed here into one float32 buffer and replaced,
in a *skeleton* copy of the body, by its index (``0``, ``1``, ...); pydantic-core then reads the
small skeleton (ids, qids, keys: no feature values), and ``app.parsing.fast_rank_body`` checks its
shape exactly as it checks a full body, taking each document's row from the buffer.

The values must be those the reference path gives: the JSON number to the nearest float64
(what pydantic-core returns), then to float32 (numpy's ``astype``). The scan computes the double
as ``w * 10^e`` or ``w / 10^-e`` from the decimal digits ``w`` (at most 19) and exponent ``e``
(|e| <= 22: ``10^|e|`` is exact): with ``w <= 2^53`` one correctly rounded operation gives the
nearest double itself (Clinger's fast path). With more digits, or 22 < |e| <= 44 (two
operations by exact powers of ten), the result is within 3 ulp of it, which rounds to the same
float32 unless a float32 rounding boundary (a float32 midpoint) lies within a few ulp: then the
scan gives up. It gives up too, returning a status other than 0 so
that the caller uses the reference path, on anything else it does not read exactly: more
digits or a larger exponent, a value outside float32's normal range (other than zero),
``true``/``false``/``null``/strings or nested values among the numbers, numbers that break
JSON's grammar, an unterminated string or array. Integer tokens keep their integer value
(``-0`` is 0, as pydantic-core reads it); ``-0.0`` is -0.0.

Everything outside the feature arrays is copied to the skeleton unchanged, so the skeleton is
valid JSON exactly when the body is (a replaced array and its index are both one JSON value);
a ``"features"`` key is recognised only as raw bytes (an escaped spelling is left in place, and
the shape check then sends the body to the full validation).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from numba import njit

from training.scoring.calibration_step import _float_bits

OK = 0
#: statuses other than OK: the caller falls back to the reference path
GIVE_UP_NUMBER, GIVE_UP_SYNTAX, GIVE_UP_RANGE = 1, 2, 3

_POW10 = np.array([10.0 ** i for i in range(23)], dtype=np.float64)
_KEY = np.frombuffer(b'"features"', dtype=np.uint8).copy()
_F32_MIN_NORMAL = 2.0 ** -126
_F32_MAX = float(np.finfo(np.float32).max)
#: half a float32 ulp in the low mantissa bits of a float64 (52 - 23 = 29 bits below float32's)
_MID = 1 << 28
_LOW29 = (1 << 29) - 1
#: how close (in float64 ulps) to a float32 midpoint an inexact double may come (its error: 3)
_MARGIN = 8


@njit(cache=True, inline="always")
def _is_ws(c):  # pragma: no cover
    return c == 32 or c == 9 or c == 10 or c == 13


@njit(cache=True, inline="always")
def _number(buf, i, n, pow10):  # pragma: no cover
    """(status, next index, value as float64 exactly rounded to float32) of the number at ``i``."""
    neg = False
    if i < n and buf[i] == 45:  # '-'
        neg = True
        i += 1
    if i >= n or not (48 <= buf[i] <= 57):
        return GIVE_UP_SYNTAX, i, 0.0
    w = np.uint64(0)
    digits = 0
    exp10 = 0
    if buf[i] == 48:  # a leading 0 stands alone
        i += 1
        if i < n and 48 <= buf[i] <= 57:
            return GIVE_UP_SYNTAX, i, 0.0
    else:
        while i < n and 48 <= buf[i] <= 57:
            if digits >= 19:
                return GIVE_UP_NUMBER, i, 0.0
            w = w * np.uint64(10) + np.uint64(buf[i] - 48)
            digits += 1
            i += 1
    integer = True
    if i < n and buf[i] == 46:  # '.'
        integer = False
        i += 1
        if i >= n or not (48 <= buf[i] <= 57):
            return GIVE_UP_SYNTAX, i, 0.0
        while i < n and 48 <= buf[i] <= 57:
            if w == 0 and buf[i] == 48:
                exp10 -= 1  # leading zeros of the fraction carry no digit
            else:
                if digits >= 19:
                    return GIVE_UP_NUMBER, i, 0.0
                w = w * np.uint64(10) + np.uint64(buf[i] - 48)
                digits += 1
                exp10 -= 1
            i += 1
    if i < n and (buf[i] == 101 or buf[i] == 69):  # 'e', 'E'
        integer = False
        i += 1
        eneg = False
        if i < n and (buf[i] == 43 or buf[i] == 45):
            eneg = buf[i] == 45
            i += 1
        if i >= n or not (48 <= buf[i] <= 57):
            return GIVE_UP_SYNTAX, i, 0.0
        e = 0
        while i < n and 48 <= buf[i] <= 57:
            if e < 100000:
                e = e * 10 + (buf[i] - 48)
            i += 1
        exp10 += -e if eneg else e
    if w == 0:
        if integer or not neg:
            return OK, i, 0.0
        return OK, i, -0.0
    if exp10 < -44 or exp10 > 44:
        return GIVE_UP_NUMBER, i, 0.0
    exact = bool(w <= np.uint64(9007199254740992))  # 2^53: w itself is a double
    if integer and not exact:
        return GIVE_UP_NUMBER, i, 0.0  # the reference path declines such integers too
    wd = float(w)
    if exp10 > 22:  # two roundings more than the one below
        exact = False
        v = wd * pow10[22] * pow10[exp10 - 22]
    elif exp10 < -22:
        exact = False
        v = wd / pow10[22] / pow10[-exp10 - 22]
    else:
        v = wd * pow10[exp10] if exp10 >= 0 else wd / pow10[-exp10]
    if not exact:
        # within 3 ulp of the nearest double: the same float32 unless a midpoint is near
        low = _float_bits(v) & _LOW29
        if abs(low - _MID) <= _MARGIN:
            return GIVE_UP_NUMBER, i, 0.0
    if v < _F32_MIN_NORMAL or v > _F32_MAX:
        return GIVE_UP_RANGE, i, 0.0
    return OK, i, -v if neg else v


@njit(cache=True)
def scan_features(buf, key, pow10, values, starts, skeleton):  # pragma: no cover
    """Scan ``buf`` (the body's bytes): the numbers of every ``"features": [...]`` value go to
    ``values`` (float32), array a holding ``values[starts[a]:starts[a + 1]]``; the skeleton
    (the body with array a replaced by the digits of a) to ``skeleton``. Returns (status,
    number of arrays, skeleton length). ``values`` needs one slot per two bytes of ``buf``,
    ``starts`` one per four bytes plus one, ``skeleton`` twice as many bytes as ``buf``."""
    n = buf.shape[0]
    nk = key.shape[0]
    i = 0
    o = 0
    n_arrays = 0
    n_values = 0
    starts[0] = 0
    while i < n:
        c = buf[i]
        if c != 34:  # not a string: copied as it is
            skeleton[o] = c
            o += 1
            i += 1
            continue
        # a string: find its end (a quote not escaped)
        j = i + 1
        while j < n and buf[j] != 34:
            j += 2 if buf[j] == 92 else 1
        if j >= n:
            return GIVE_UP_SYNTAX, 0, 0
        j += 1  # past the closing quote
        for t in range(i, j):
            skeleton[o] = buf[t]
            o += 1
        is_key = j - i == nk
        if is_key:
            for t in range(nk):
                if buf[i + t] != key[t]:
                    is_key = False
                    break
        i = j
        if not is_key:
            continue
        # "features": is it a key followed by an array?
        j = i
        while j < n and _is_ws(buf[j]):
            j += 1
        if j >= n or buf[j] != 58:  # ':'
            continue
        j += 1
        while j < n and _is_ws(buf[j]):
            j += 1
        if j >= n or buf[j] != 91:  # '[': another value stays as it is (the shape check decides)
            continue
        for t in range(i, j):  # the colon and the blanks
            skeleton[o] = buf[t]
            o += 1
        j += 1
        while j < n and _is_ws(buf[j]):
            j += 1
        if j < n and buf[j] != 93:  # not empty: number (, number)*
            while True:
                status, j, v = _number(buf, j, n, pow10)
                if status != OK:
                    return status, 0, 0
                values[n_values] = v
                n_values += 1
                while j < n and _is_ws(buf[j]):
                    j += 1
                if j < n and buf[j] == 44:  # ','
                    j += 1
                    while j < n and _is_ws(buf[j]):
                        j += 1
                    continue
                break
        if j >= n or buf[j] != 93:  # ']'
            return GIVE_UP_SYNTAX, 0, 0
        i = j + 1
        # the array's index as its placeholder
        a = n_arrays
        width = 1
        while a >= 10:
            a //= 10
            width += 1
        a = n_arrays
        for t in range(width):
            skeleton[o + width - 1 - t] = 48 + a % 10
            a //= 10
        o += width
        n_arrays += 1
        starts[n_arrays] = n_values
    return OK, n_arrays, o


def scan_body(body: bytes) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.int64], bytes] | None:
    """(feature values, array starts (n_arrays + 1), skeleton) of ``body``, or None when the scan
    gives up (see the module docstring)."""
    buf = np.frombuffer(body, dtype=np.uint8)
    n = buf.shape[0]
    values = np.empty(n // 2 + 1, dtype=np.float32)
    starts = np.empty(n // 4 + 2, dtype=np.int64)
    skeleton = np.empty(2 * n + 16, dtype=np.uint8)  # an index may be longer than its array ("[]")
    status, n_arrays, length = scan_features(buf, _KEY, _POW10, values, starts, skeleton)
    if status != OK:
        return None
    return values[:starts[n_arrays]], starts[:n_arrays + 1], skeleton[:length].tobytes()
