"""A /rank JSON body of the common shape read straight from its bytes (numba), to the arrays.

The common body is ``{"queries": [{"qid": Q, "documents": [{"id": I, "features": [numbers]},
...]}, ...], "model": M, "version": V, "top_k": K}`` (``model``, ``version``, ``top_k`` optional),
a query being in the columnar form ``{"qid": Q, "ids": [I, ...], "features": [[numbers], ...]}``
as well. Reading a 1,000-document body with pydantic-core makes a Python dict per document and a
Python float per feature value; ``read_rank`` walks the bytes once and writes the feature values
to one float32 buffer (row after row, in document order), each id and qid as a string's byte span
or an integer's value, and the optional fields. Python then makes only the id strings (slices of
the body) and the qids; ``app.parsing.fast_rank_body`` turns the result into the request's arrays.

It accepts only what the full validation (``app.schemas.RankRequest``) accepts, with the same
values; on anything else it gives up (a status other than ``OK``) and the caller reads the body
the slow way, which names what is wrong or reads what this reader does not:
- keys spelled exactly (an escaped spelling gives up), each at most once, no other key: a query
  has ``qid`` with ``documents``, or ``qid`` with ``ids`` and ``features``; a document has ``id``
  and ``features``; ``queries`` is required; lists are not empty;
- strings without escapes or control characters (``\\"``, ``\\u00e9``, a raw tab: give up);
  integers of at most 18 digits (``-0`` is 0); ``model``/``version`` a string or ``null``,
  ``top_k`` an integer >= 1 or ``null``; ids and qids a string or an integer (a float or a bool
  gives up: pydantic's lax mode may convert them);
- every feature row of the body of one length (the model's feature count is checked after), as
  many ids as rows in a columnar query;
- feature values: JSON numbers only (``true``, strings, ``NaN``: give up), read as below.

The values must be those the reference path gives: the JSON number to the nearest float64
(what pydantic-core returns), then to float32 (numpy's ``astype``). The reader computes the
double as ``w * 10^e`` or ``w / 10^-e`` from the decimal digits ``w`` (at most 19) and exponent
``e`` (|e| <= 22: ``10^|e|`` is exact): with ``w <= 2^53`` one correctly rounded operation gives
the nearest double itself (Clinger's fast path). With more digits, or 22 < |e| <= 44 (two
operations by exact powers of ten), the result is within 3 ulp of it, which rounds to the same
float32 unless a float32 rounding boundary (a float32 midpoint) lies within a few ulp: then it
gives up. It gives up too on more digits or a larger exponent, a value outside float32's normal
range (other than zero) and numbers that break JSON's grammar. Integer tokens keep their integer
value (``-0`` is 0, as pydantic-core reads it); ``-0.0`` is -0.0.

The body is copied into a buffer with ``PAD`` zero bytes after it, so every loop stops at a zero
byte (not valid JSON anywhere: a string or number ending there gives up) without a bounds test.

A body of ``PARALLEL_MIN_BYTES`` or more is read in two passes when the scoring threads are
several: the structure on one thread, which reads the first feature row (it sets the width) and
only locates the others (the first ']' after their '[', eight bytes at a time), then the rows
on the scoring threads, each thread taking the next ``ROW_BLOCK`` rows not yet taken, each row
exactly ``width`` numbers or the body is given up. A row that held anything but numbers (a ']'
inside a string, say) fails its own reading, so the first pass may stop at a wrong ']' only in
a body that is given up anyway. The values are those of the one-pass reading (the same
``_number``). Measured in-process, 20 MQ2008 bodies of 1,000 documents x 5 rounds, interleaved:
1.75 ms on one thread, 1.22 ms on two.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from llvmlite import ir
from numba import njit, prange, types
from numba.extending import intrinsic

from training.scoring.calibration_step import _float_bits
from training.scoring.forest import claim, get_scoring_threads, run_on_threads

OK = 0
#: statuses other than OK: the caller falls back to the reference path
GIVE_UP_NUMBER, GIVE_UP_SYNTAX, GIVE_UP_RANGE, GIVE_UP_SHAPE = 1, 2, 3, 4

PAD = 16  # ``_number`` reads 8 bytes from one past the end of a number
_POW10 = np.array([10.0 ** i for i in range(23)], dtype=np.float64)
_F32_MIN_NORMAL = 2.0 ** -126
_F32_MAX = float(np.finfo(np.float32).max)
#: half a float32 ulp in the low mantissa bits of a float64 (52 - 23 = 29 bits below float32's)
_MID = 1 << 28
_LOW29 = (1 << 29) - 1
#: how close (in float64 ulps) to a float32 midpoint an inexact double may come (its error: 3)
_MARGIN = 8


_I64 = ir.IntType(64)


def _emit_load8(context: Any, builder: Any, signature: Any, args: Any) -> Any:  # pragma: no cover
    """LLVM: ``buf[i:i + 8]`` (``args``: the uint8 array, the index) as one little-endian i64,
    an unaligned load (the caller guarantees the 8 bytes)."""
    ary = context.make_array(signature.args[0])(context, builder, args[0])
    ptr = builder.gep(ary.data, [args[1]])
    return builder.load(builder.bitcast(ptr, _I64.as_pointer()), align=1)


def _load8_typing(typingctx, buf, i):  # pragma: no cover
    """``buf[i:i + 8]`` as one little-endian uint64 (``_emit_load8``)."""
    return types.uint64(buf, types.intp), _emit_load8


_load8: Any = intrinsic(_load8_typing)


def _digits_typing(typingctx, buf, i):  # pragma: no cover
    """The decimal digits at ``buf[i:]`` read eight bytes at a time (SWAR, one unaligned load; the
    caller guarantees 8 readable bytes): ``k + (value << 8)`` where ``k`` (0..8) is how many of the
    8 bytes are digits before the first other byte and ``value`` the number they spell.

    Byte b is a digit when a = b ^ '0' is at most 9: a + 0x76 then stays below 0x80 and so does a.
    A carry out of a non-digit byte can only reach the bytes after it, so the lowest flagged byte
    (little-endian: the first in the text) is the first non-digit. The k digits are shifted to
    the top bytes (zeros, i.e. leading zero digits, below them) and combined pairwise: bytes to
    2-digit, 4-digit, then 8-digit numbers by three multiplications (fast_float's
    ``parse_eight_digits_unrolled``)."""
    def codegen(context, builder, signature, args):
        x = _emit_load8(context, builder, signature, args)

        def c(v: int) -> ir.Constant:
            return ir.Constant(_I64, v)

        a = builder.xor(x, c(0x3030303030303030))
        flags = builder.and_(builder.or_(builder.add(a, c(0x7676767676767676)), a), c(0x8080808080808080))
        k = builder.lshr(builder.cttz(flags, ir.Constant(ir.IntType(1), 0)), c(3))  # cttz(0) = 64
        top = builder.shl(a, builder.sub(c(64), builder.shl(k, c(3))))  # poison for k = 0: not selected
        v = builder.select(builder.icmp_unsigned("==", k, c(0)), c(0), top)
        v = builder.add(builder.mul(v, c(10)), builder.lshr(v, c(8)))
        mask = c(0x000000FF000000FF)
        v = builder.add(builder.mul(builder.and_(v, mask), c(0x000F424000000064)),
                        builder.mul(builder.and_(builder.lshr(v, c(16)), mask), c(0x0000271000000001)))
        return builder.add(builder.shl(builder.lshr(v, c(32)), c(8)), k)

    return types.int64(buf, types.intp), codegen


_digits: Any = intrinsic(_digits_typing)


def _trailing_zeros_typing(typingctx, v):  # pragma: no cover
    """The number of trailing zero bits of a uint64 (64 for 0)."""
    def codegen(context, builder, signature, args):
        return builder.cttz(args[0], ir.Constant(ir.IntType(1), 0))

    return types.int64(v), codegen


_trailing_zeros: Any = intrinsic(_trailing_zeros_typing)
_POW10_INT = np.array([10 ** i for i in range(9)], dtype=np.int64)


def _key(text: str) -> npt.NDArray[np.uint8]:
    return np.frombuffer(text.encode(), dtype=np.uint8).copy()


_QUERIES, _MODEL, _VERSION, _TOP_K = _key('"queries"'), _key('"model"'), _key('"version"'), _key('"top_k"')
_QID, _DOCUMENTS, _IDS = _key('"qid"'), _key('"documents"'), _key('"ids"')
_FEATURES, _ID = _key('"features"'), _key('"id"')
#: top-level fields in ``read_rank``'s ``top`` array: kind (-1 absent, 0 null, 1 given), then two values
TOP_MODEL, TOP_VERSION, TOP_K = 0, 3, 6
#: the kinds of an id or qid
KIND_STRING, KIND_INT = 0, 1


@njit(cache=True, inline="always")
def _is_digit(c):  # pragma: no cover
    return 48 <= c <= 57  # '0' .. '9'


@njit(cache=True, inline="always")
def _ws(buf, i):  # pragma: no cover
    """The index of the first byte at or after ``i`` that is not JSON whitespace."""
    while True:
        c = buf[i]
        if c == 32 or c == 10 or c == 13 or c == 9:
            i += 1
        else:
            return i


@njit(cache=True, inline="always")
def _string(buf, i):  # pragma: no cover
    """The string token at ``i`` (``buf[i]`` is a quote): the index past its closing quote, or -1
    for an escape, a control character or the padding (the string's contents: ``i + 1 .. end - 1``)."""
    j = i + 1
    while True:
        c = buf[j]
        if c == 34:
            return j + 1
        if c == 92 or c < 32:
            return -1
        j += 1


@njit(cache=True, inline="always")
def _is(buf, i, end, key):  # pragma: no cover
    """Whether ``buf[i:end]`` is the bytes of ``key``."""
    if end - i != key.shape[0]:
        return False
    for t in range(key.shape[0]):
        if buf[i + t] != key[t]:
            return False
    return True


@njit(cache=True, inline="always")
def _integer(buf, i):  # pragma: no cover
    """The JSON integer at ``i`` (at most 18 digits; not the start of a fraction or an exponent):
    (index past it, value), index -1 when it is not one."""
    neg = buf[i] == 45  # '-'
    if neg:
        i += 1
    c = buf[i]
    if not _is_digit(c):
        return -1, 0
    v = 0
    if c == 48:  # a leading 0 stands alone
        i += 1
    else:
        start = i
        while _is_digit(buf[i]):
            if i - start >= 18:
                return -1, 0
            v = v * 10 + (buf[i] - 48)
            i += 1
    c = buf[i]
    if _is_digit(c) or c == 46 or c == 101 or c == 69:  # a digit after 0, '.', 'e', 'E'
        return -1, 0
    return i, -v if neg else v


@njit(cache=True, inline="always")
def _null(buf, i):  # pragma: no cover
    return buf[i] == 110 and buf[i + 1] == 117 and buf[i + 2] == 108 and buf[i + 3] == 108


@njit(cache=True, inline="always")
def _number(buf, i, pow10, pow10_int):  # pragma: no cover
    """(status, next index, value as float64 exactly rounded to float32) of the number at ``i``.

    The common number (an integer part of 1 to 7 digits, then optionally '.' and 1 to 7 digits,
    no exponent) is read with ``_digits``, without a branch: at most 14 digits, so ``w`` is an
    exact double, one correctly rounded division by 10^scale (exact) gives the nearest double,
    and the value lies between 1e-7 and 1e7 (float32's normal range) unless it is 0. Anything
    else is ``_number_slow``'s."""
    neg = buf[i] == 45  # '-'
    j = i + neg
    first = _digits(buf, j)
    k = first & 255
    bad = (k == 0) | (k == 8) | ((k > 1) & (buf[j] == 48))  # no digit, 8 or more, a leading zero
    j += k
    dot = buf[j] == 46  # '.'
    frac = _digits(buf, j + 1)  # read in any case (PAD covers it), used after a dot
    scale = (frac & 255) * dot
    bad |= dot & ((scale == 0) | (scale == 8))
    w = (first >> 8) * pow10_int[scale] + (frac >> 8) * dot
    j += dot + scale
    c = buf[j]
    bad |= (c == 101) | (c == 69)  # an exponent
    if bad:
        return _number_slow(buf, i, pow10)
    v = float(w) / pow10[scale]
    # "-0" is the integer 0, "-0.0" is -0.0
    return OK, j, -v if neg & (dot | (w != 0)) else v


@njit(cache=True, inline="always")
def _push_digit(w, digits, c):  # pragma: no cover
    """``w`` (uint64) with the digit byte ``c`` appended, and the digit count; a 20th digit is not
    taken (the count becomes 20 and the caller gives up: w stays below 10^19 < 2^64)."""
    if digits >= 19:
        return w, 20
    return w * np.uint64(10) + np.uint64(c - 48), digits + 1


@njit(cache=True)
def _number_slow(buf, i, pow10):  # pragma: no cover
    """``_number`` one digit at a time: any number of digits, an exponent, leading zeros of a
    fraction; gives up where the result might not be the nearest float32."""
    neg = False
    if buf[i] == 45:  # '-'
        neg = True
        i += 1
    if not _is_digit(buf[i]):
        return GIVE_UP_SYNTAX, i, 0.0
    w = np.uint64(0)
    digits = 0
    exp10 = 0
    if buf[i] == 48:  # a leading 0 stands alone
        i += 1
        if _is_digit(buf[i]):
            return GIVE_UP_SYNTAX, i, 0.0
    else:
        while _is_digit(buf[i]):
            w, digits = _push_digit(w, digits, buf[i])
            if digits > 19:
                return GIVE_UP_NUMBER, i, 0.0
            i += 1
    integer = True
    if buf[i] == 46:  # '.'
        integer = False
        i += 1
        if not _is_digit(buf[i]):
            return GIVE_UP_SYNTAX, i, 0.0
        while _is_digit(buf[i]):
            if w == 0 and buf[i] == 48:
                exp10 -= 1  # leading zeros of the fraction carry no digit
            else:
                w, digits = _push_digit(w, digits, buf[i])
                if digits > 19:
                    return GIVE_UP_NUMBER, i, 0.0
                exp10 -= 1
            i += 1
    if buf[i] == 101 or buf[i] == 69:  # 'e', 'E'
        integer = False
        i += 1
        eneg = False
        if buf[i] == 43 or buf[i] == 45:
            eneg = buf[i] == 45
            i += 1
        if not _is_digit(buf[i]):
            return GIVE_UP_SYNTAX, i, 0.0
        e = 0
        while _is_digit(buf[i]):
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


_ONES = np.uint64(0x0101010101010101)
_HIGHS = np.uint64(0x8080808080808080)
_BRACKETS = np.uint64(0x5D5D5D5D5D5D5D5D)  # ']' in every byte


@njit(cache=True, inline="always")
def _row_end(buf, i):  # pragma: no cover
    """The index of the first ']' or zero byte (the padding) after ``i``, eight bytes at a time:
    a byte b of v is zero where (v - 0x01..) & ~v & 0x80.. flags it; a borrow can only flag bytes
    above a zero byte, so the lowest flag is exact (for either test, hence for their union)."""
    i += 1
    while True:
        v = _load8(buf, i)
        b = v ^ _BRACKETS
        found = ((b - _ONES) & ~b & _HIGHS) | ((v - _ONES) & ~v & _HIGHS)
        if found != 0:
            return i + _trailing_zeros(found) // 8
        i += 8


@njit(cache=True, inline="always")
def _row(buf, i, pow10, pow10_int, values, r, width, row_at, defer):  # pragma: no cover
    """The array of numbers at ``i`` (``buf[i]`` is '[') as feature row ``r``: ``values[r * width:]``
    (every row as long as the first, ``width`` < 0 before it). Returns (status, index past it,
    width); an empty array gives up."""
    row_at[r] = i
    if defer and width >= 0:  # read later (``read_rows``): find its end
        return OK, _row_end(buf, i) + 1, width
    start = r * width if width > 0 else 0
    nv = start
    i = _ws(buf, i + 1)
    if buf[i] == 93:
        return GIVE_UP_SHAPE, i, width
    while True:
        status, i, v = _number(buf, i, pow10, pow10_int)
        if status != OK:
            return status, i, width
        values[nv] = v
        nv += 1
        i = _ws(buf, i)
        c = buf[i]
        if c == 44:  # ','
            i = _ws(buf, i + 1)
        elif c == 93:  # ']'
            break
        else:
            return GIVE_UP_SYNTAX, i, width
    if width >= 0 and nv - start != width:
        return GIVE_UP_SHAPE, i, width
    return OK, i + 1, nv - start


@njit(cache=True, inline="always")
def _id(buf, i, kind, a, b, slot):  # pragma: no cover
    """The string or integer at ``i`` into slot ``slot`` of (kind, a, b): a string's contents are
    ``buf[a:b]``, an integer's value is ``a``. Returns the index past it, -1 for anything else."""
    if buf[i] == 34:
        end = _string(buf, i)
        if end < 0:
            return -1
        kind[slot] = KIND_STRING
        a[slot] = i + 1
        b[slot] = end - 1
        return end
    end, v = _integer(buf, i)
    if end < 0:
        return -1
    kind[slot] = KIND_INT
    a[slot] = v
    b[slot] = 0
    return end


@njit(cache=True, inline="always")
def _key_at(buf, i):  # pragma: no cover
    """The key at ``i`` and its colon: (end of the key's token, index of its value), -1 if none."""
    if buf[i] != 34:
        return -1, -1
    end = _string(buf, i)
    if end < 0:
        return -1, -1
    j = _ws(buf, end)
    if buf[j] != 58:  # ':'
        return -1, -1
    return end, _ws(buf, j + 1)


@njit(cache=True, inline="always")
def _list_start(buf, i):  # pragma: no cover
    """The index of the first element of the non-empty array at ``i``, -1 for anything else (an
    empty list is the full validation's to name)."""
    if buf[i] != 91:  # '['
        return -1
    i = _ws(buf, i + 1)
    return -1 if buf[i] == 93 else i


@njit(cache=True, inline="always")
def _next_member(buf, i, close):  # pragma: no cover
    """After a value: (index of the next member, 0), (index past the closing ``close``, 1), or
    (i, -1) for anything else."""
    i = _ws(buf, i)
    c = buf[i]
    if c == 44:
        return _ws(buf, i + 1), 0
    if c == close:
        return _ws(buf, i + 1), 1
    return i, -1


@njit(cache=True, inline="always")
def _array_next(buf, i):  # pragma: no cover
    """After an array element: (index of the next element, True), (index past the ']', False),
    or (-1, False) for anything else."""
    i, end = _next_member(buf, i, 93)  # ']'
    return (i if end >= 0 else -1), end == 0


@njit(cache=True, inline="always")
def _document(buf, i, pow10, pow10_int, values, r, width, row_at, defer, id_kind, id_a, id_b):  # pragma: no cover
    """The document object at ``i``: its ``id`` to id slot ``r``, its ``features`` as row ``r``.
    Returns (status, index past it, width)."""
    if buf[i] != 123:  # '{'
        return GIVE_UP_SHAPE, i, width
    i = _ws(buf, i + 1)
    has_id = has_row = False
    while True:
        key = i
        k, i = _key_at(buf, i)
        if k < 0:
            return GIVE_UP_SHAPE, i, width
        if _is(buf, key, k, _ID) and not has_id:
            has_id = True
            i = _id(buf, i, id_kind, id_a, id_b, r)
            if i < 0:
                return GIVE_UP_SHAPE, i, width
        elif _is(buf, key, k, _FEATURES) and not has_row and buf[i] == 91:
            has_row = True
            status, i, width = _row(buf, i, pow10, pow10_int, values, r, width, row_at, defer)
            if status != OK:
                return status, i, width
        else:
            return GIVE_UP_SHAPE, i, width
        i, end = _next_member(buf, i, 125)  # '}'
        if end < 0:
            return GIVE_UP_SHAPE, i, width
        if end == 1:
            return (OK if has_id and has_row else GIVE_UP_SHAPE), i, width


@njit(cache=True, inline="always")
def _query(buf, i, pow10, pow10_int, values, r, width, row_at, defer, id_kind, id_a, id_b, q_kind, q_a, q_b,
           q):  # pragma: no cover
    """The query object at ``i``: its ``qid`` to query slot ``q``, its ``documents`` (or ``ids`` and
    ``features``) from row ``r`` on. Returns (status, index past it, rows so far, width)."""
    if buf[i] != 123:
        return GIVE_UP_SHAPE, i, r, width
    i = _ws(buf, i + 1)
    has_qid = has_docs = has_ids = has_rows = False
    n_ids = r
    while True:
        key = i
        k, i = _key_at(buf, i)
        if k < 0:
            return GIVE_UP_SHAPE, i, r, width
        if _is(buf, key, k, _QID) and not has_qid:
            has_qid = True
            i = _id(buf, i, q_kind, q_a, q_b, q)
            if i < 0:
                return GIVE_UP_SHAPE, i, r, width
        elif _is(buf, key, k, _DOCUMENTS) and not has_docs:
            has_docs = True
            i = _list_start(buf, i)
            while i >= 0:
                status, i, width = _document(buf, i, pow10, pow10_int, values, r, width, row_at, defer, id_kind, id_a,
                                                  id_b)
                if status != OK:
                    return status, i, r, width
                r += 1
                i, more = _array_next(buf, i)
                if not more:
                    break
            n_ids = r
        elif _is(buf, key, k, _IDS) and not has_ids:
            has_ids = True
            i = _list_start(buf, i)
            while i >= 0:
                i = _id(buf, i, id_kind, id_a, id_b, n_ids)
                if i < 0:
                    break
                n_ids += 1
                i, more = _array_next(buf, i)
                if not more:
                    break
        elif _is(buf, key, k, _FEATURES) and not has_rows:
            has_rows = True
            i = _list_start(buf, i)
            while i >= 0:
                if buf[i] != 91:
                    return GIVE_UP_SHAPE, i, r, width
                status, i, width = _row(buf, i, pow10, pow10_int, values, r, width, row_at, defer)
                if status != OK:
                    return status, i, r, width
                r += 1
                i, more = _array_next(buf, i)
                if not more:
                    break
        else:
            return GIVE_UP_SHAPE, i, r, width
        if i < 0:
            return GIVE_UP_SHAPE, i, r, width
        i, end = _next_member(buf, i, 125)
        if end < 0:
            return GIVE_UP_SHAPE, i, r, width
        if end == 1:
            break
    # exactly {qid, documents} or {qid, ids, features}, as many ids as rows
    if has_qid and has_docs != has_ids and has_ids == has_rows and n_ids == r:
        return OK, i, r, width
    return GIVE_UP_SHAPE, i, r, width


@njit(cache=True, inline="always")
def _optional(buf, i, top, t, string):  # pragma: no cover
    """``null``, or a string (``string``; its span to ``top[t + 1:t + 3]``) or an integer >= 1 (its
    value to ``top[t + 1]``), at ``i`` for the top-level field ``t``: the index past it, -1 for
    anything else or a second time."""
    if top[t] >= 0:
        return -1
    if _null(buf, i):
        top[t] = 0
        return i + 4
    if string:
        if buf[i] != 34:
            return -1
        end = _string(buf, i)
        top[t + 1] = i + 1
        top[t + 2] = end - 1
    else:
        end, v = _integer(buf, i)
        if v < 1:
            return -1
        top[t + 1] = v
    top[t] = 1
    return end


@njit(cache=True)
def read_rank(buf, n, pow10, pow10_int, values, row_at, defer, id_kind, id_a, id_b, q_first, q_kind, q_a, q_b,
              top):  # pragma: no cover
    """Read the body ``buf[:n]`` (``PAD`` zero bytes after it). Feature rows go to ``values``
    (row r: ``values[r * width:(r + 1) * width]``), the ids of the rows to ``id_kind``/``id_a``/
    ``id_b`` (``_id``), query q's first row to ``q_first[q]`` and its qid to ``q_kind``/``q_a``/
    ``q_b``, the optional fields to ``top`` (``TOP_MODEL``, ``TOP_VERSION``: kind and span;
    ``TOP_K``: kind and value). Returns (status, queries, rows, width). ``values`` needs one
    slot per two bytes of the body plus one, the id arrays as many, the query arrays one per
    eight bytes plus two."""
    r = 0
    q = 0
    width = -1
    for t in range(top.shape[0]):
        top[t] = -1
    has_queries = False
    i = _ws(buf, 0)
    if buf[i] != 123:  # '{'
        return GIVE_UP_SHAPE, 0, 0, 0
    i = _ws(buf, i + 1)
    while True:
        key = i
        k, i = _key_at(buf, i)
        if k < 0:
            return GIVE_UP_SHAPE, 0, 0, 0
        if _is(buf, key, k, _QUERIES) and not has_queries:
            has_queries = True
            i = _list_start(buf, i)
            while i >= 0:
                q_first[q] = r
                status, i, r, width = _query(buf, i, pow10, pow10_int, values, r, width, row_at, defer, id_kind,
                                             id_a, id_b, q_kind, q_a, q_b, q)
                if status != OK:
                    return status, 0, 0, 0
                q += 1
                i, more = _array_next(buf, i)
                if not more:
                    break
        elif _is(buf, key, k, _MODEL):
            i = _optional(buf, i, top, TOP_MODEL, True)
        elif _is(buf, key, k, _VERSION):
            i = _optional(buf, i, top, TOP_VERSION, True)
        elif _is(buf, key, k, _TOP_K):
            i = _optional(buf, i, top, TOP_K, False)
        else:
            return GIVE_UP_SHAPE, 0, 0, 0
        if i < 0:
            return GIVE_UP_SHAPE, 0, 0, 0
        i, end = _next_member(buf, i, 125)
        if end < 0:
            return GIVE_UP_SHAPE, 0, 0, 0
        if end == 1:
            break
    if not has_queries or i != n:
        return GIVE_UP_SHAPE, 0, 0, 0
    return OK, q, r, width


@njit(cache=True, inline="always")
def _row_exact(buf, i, pow10, pow10_int, values, start, width):  # pragma: no cover
    """The array of numbers at ``i`` ('[') into ``values[start:start + width]``: OK only if it
    holds exactly ``width`` numbers (nothing is written past them)."""
    i = _ws(buf, i + 1)
    nv = start
    end = start + width
    while True:
        if nv == end:
            return GIVE_UP_SHAPE
        status, i, v = _number(buf, i, pow10, pow10_int)
        if status != OK:
            return status
        values[nv] = v
        nv += 1
        i = _ws(buf, i)
        c = buf[i]
        if c == 44:
            i = _ws(buf, i + 1)
        elif c == 93:
            return OK if nv == end else GIVE_UP_SHAPE
        else:
            return GIVE_UP_SYNTAX


#: Rows a thread takes at a time in ``_read_rows_parallel``.
ROW_BLOCK = 32


@njit(cache=True, inline="always")
def _take_rows(buf, row_at, n_rows, pow10, pow10_int, values, width, status, counter):  # pragma: no cover
    """Rows 1 .. n_rows - 1 (row 0 was read with the structure), ``ROW_BLOCK`` at a time, each
    block the next one not yet taken; a block's status goes to ``status[block]``. Row r's slot
    ``values[r * width:(r + 1) * width]`` is checked against the buffer first: the rows were only
    located, so short rows after a long first one could place a slot beyond it (the body is then
    given up)."""
    b = claim(counter, 0)
    while b * ROW_BLOCK + 1 < n_rows:
        r0 = b * ROW_BLOCK + 1
        worst = OK
        for r in range(r0, min(r0 + ROW_BLOCK, n_rows)):
            if (r + 1) * width > values.shape[0]:
                worst = GIVE_UP_SHAPE
                break
            st = _row_exact(buf, row_at[r], pow10, pow10_int, values, r * width, width)
            if st != OK:
                worst = st
                break
        status[b] = worst
        b = claim(counter, 0)


@njit(cache=True, nogil=True)
def _read_rows_serial(buf, row_at, n_rows, pow10, pow10_int, values, width, status):  # pragma: no cover
    _take_rows(buf, row_at, n_rows, pow10, pow10_int, values, width, status, np.zeros(1, dtype=np.int64))


@njit(cache=True, nogil=True, parallel=True)
def _read_rows_parallel(buf, row_at, n_rows, pow10, pow10_int, values, width, status, n_tasks,
                        counter):  # pragma: no cover
    for _ in prange(n_tasks):
        _take_rows(buf, row_at, n_rows, pow10, pow10_int, values, width, status, counter)


#: A body of at least this many bytes reads its feature rows on the scoring threads, after the
#: structure (on one thread, which reads the first row and only locates the others).
PARALLEL_MIN_BYTES = 64 * 1024


@dataclass(frozen=True)
class FastRankBody:
    """A /rank body of the common shape: row r of ``features`` is the document ``ids[r]``, query
    q's rows are ``offsets[q]:offsets[q + 1]``; not yet checked against a model."""

    features: npt.NDArray[np.float32]
    offsets: npt.NDArray[np.int64]
    qids: list[Any]
    ids: list[Any]
    model: str | None
    version: str | None
    top_k: int | None

    @property
    def n_documents(self) -> int:
        return int(self.features.shape[0])


def _values(kind: npt.NDArray[np.int8], a: npt.NDArray[np.int64], b: npt.NDArray[np.int64],
            body: bytes, text: str | None) -> list[Any]:
    """Ids or qids: strings (slices of ``text``, the body when it is ASCII, else decoded spans of
    ``body``) and integers."""
    starts, ends = a.tolist(), b.tolist()
    if not kind.any():
        if text is not None:
            return [text[s:e] for s, e in zip(starts, ends, strict=True)]
        return [body[s:e].decode() for s, e in zip(starts, ends, strict=True)]
    if kind.all():
        return starts
    out: list[Any] = []
    for k, s, e in zip(kind.tolist(), starts, ends, strict=True):
        out.append(s if k == KIND_INT else (text[s:e] if text is not None else body[s:e].decode()))
    return out


def _read_rows(buf: npt.NDArray[np.uint8], row_at: npt.NDArray[np.int64], n_rows: int,
               values: npt.NDArray[np.float32], width: int) -> bool:
    """Read the rows ``read_rank`` located (all but the first) on the scoring threads (one if
    another request holds them); False if one is not ``width`` numbers."""
    status = np.zeros(max(1, (n_rows + ROW_BLOCK - 1) // ROW_BLOCK), dtype=np.int64)
    args = (buf, row_at, n_rows, _POW10, _POW10_INT, values, width, status)
    run_on_threads(n_rows, True, lambda: _read_rows_serial(*args),
                   lambda threads: _read_rows_parallel(*args, threads, np.zeros(1, dtype=np.int64)))
    return not status.any()


def read_body(body: bytes) -> FastRankBody | None:
    """The arrays of a /rank body of the common shape, or None when ``read_rank`` gives up (see the
    module docstring) or a string is not UTF-8."""
    n = len(body)
    buf = np.zeros(n + PAD, dtype=np.uint8)
    buf[:n] = np.frombuffer(body, dtype=np.uint8)
    values = np.empty(n // 2 + 1, dtype=np.float32)
    n_ids = n // 2 + 2
    id_kind = np.empty(n_ids, dtype=np.int8)
    id_a = np.empty(n_ids, dtype=np.int64)
    id_b = np.empty(n_ids, dtype=np.int64)
    n_q = n // 8 + 2
    q_first = np.empty(n_q, dtype=np.int64)
    q_kind = np.empty(n_q, dtype=np.int8)
    q_a = np.empty(n_q, dtype=np.int64)
    q_b = np.empty(n_q, dtype=np.int64)
    top = np.empty(9, dtype=np.int64)
    row_at = np.empty(n // 4 + 2, dtype=np.int64)
    # many rows: the structure first (rows after the first only located), then the rows in parallel
    defer = n >= PARALLEL_MIN_BYTES and get_scoring_threads() > 1
    status, nq, nr, width = read_rank(buf, n, _POW10, _POW10_INT, values, row_at, defer, id_kind, id_a, id_b, q_first,
                                      q_kind, q_a, q_b, top)
    if status != OK or (defer and not _read_rows(buf, row_at, nr, values, width)):
        return None
    text = body.decode("ascii") if body.isascii() else None
    try:
        ids = _values(id_kind[:nr], id_a[:nr], id_b[:nr], body, text)
        qids = _values(q_kind[:nq], q_a[:nq], q_b[:nq], body, text)
        model, version = (body[top[t + 1]:top[t + 2]].decode() if top[t] == 1 else None
                          for t in (TOP_MODEL, TOP_VERSION))
    except UnicodeDecodeError:
        return None  # pydantic-core rejects it too, with the full validation's message
    offsets = np.empty(nq + 1, dtype=np.int64)
    offsets[:nq] = q_first[:nq]
    offsets[nq] = nr
    return FastRankBody(features=values[:nr * width].reshape(nr, width), offsets=offsets, qids=qids, ids=ids,
                      model=model, version=version, top_k=int(top[TOP_K + 1]) if top[TOP_K] == 1 else None)


def warm_up() -> None:
    """Compile (or load from numba's cache) the reader's kernels: a small body, and one of
    ``PARALLEL_MIN_BYTES`` that reads its rows on the scoring threads (when there are several)."""
    read_body(b'{"queries": [{"qid": 1, "documents": [{"id": "a", "features": [1.5, 2e-3, 12345678901234567]}]}]}')
    docs = b",".join(b'{"id":%d,"features":[0.25,1,-3.5]}' % j for j in range(PARALLEL_MIN_BYTES // 30))
    read_body(b'{"queries":[{"qid":"q","documents":[' + docs + b"]}]}")
