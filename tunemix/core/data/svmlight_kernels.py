"""Numba kernels that parse LETOR / SVMlight ranking text straight from bytes.

A line is ``label [qid:Q] id:value id:value ... [# comment]``. The comment may carry a
document id as ``docid = X`` (LETOR 4.0 style: ``#docid = GX008-86-4444840 inc = 1``).
Blank lines and lines that start with ``#`` are skipped.

The parser runs in two passes over the same byte buffer: ``scan`` counts data lines and finds
the largest feature id and the longest qid/docid; ``parse`` fills preallocated arrays. Neither
pass creates Python objects per token. Errors are returned as a code plus the 1-based line
number and column so the caller can name file and line (see ``ERROR_MESSAGES``).
"""

from __future__ import annotations

import numpy as np
from numba import njit

import tunemix.core.numba_cache  # noqa: F401 - numba's cache written under a lock (tunemix/core/numba_cache.py)

# Error codes (0 = fine).
OK = 0
E_LABEL = 1
E_NEG_LABEL = 2
E_NO_QID = 3
E_PAIR = 4
E_FID = 5
E_VALUE = 6
E_NONFINITE = 7
E_FID_RANGE = 8
E_DUP_FID = 9
E_QID_EMPTY = 10

ERROR_MESSAGES = {
    E_LABEL: "the label is not an integer",
    E_NEG_LABEL: "the label is negative",
    E_NO_QID: "the line has no qid:Q (give a .query group file for LightGBM-style data)",
    E_PAIR: "malformed feature 'id:value' pair",
    E_FID: "feature id must be a positive integer (ids are 1-based)",
    E_VALUE: "feature value is not a number",
    E_NONFINITE: "feature value is NaN or infinite",
    E_FID_RANGE: "feature id is larger than the declared number of features",
    E_DUP_FID: "feature id appears twice on the line",
    E_QID_EMPTY: "qid: has no value",
}

_POW10 = np.array([10.0**i for i in range(23)], dtype=np.float64)


@njit(cache=True, inline="always")
def _is_space(c: int) -> bool:
    return c == 32 or c == 9 or c == 13 or c == 11 or c == 12


@njit(cache=True, inline="always")
def _is_qid_key(buf, tok, colon):
    """The token's key (bytes tok:colon) is ``qid``."""
    return colon - tok == 3 and buf[tok] == 113 and buf[tok + 1] == 105 and buf[tok + 2] == 100


@njit(cache=True, nogil=True)
def _parse_number(buf, pos, end, pow10):
    """Parse a decimal float at buf[pos:end]. Returns (value, new_pos, ok, is_nonfinite).

    Fast path (Clinger): up to 19 significant digits in an int64 mantissa, then one
    multiplication or division by an exact power of ten; correctly rounded for the usual
    LETOR values (<= 15 significant digits, small exponents).
    """
    i = pos
    neg = False
    if i < end and (buf[i] == 45 or buf[i] == 43):  # '-' '+'
        neg = buf[i] == 45
        i += 1
    # nan / inf spelled out
    if i < end and (buf[i] == 110 or buf[i] == 78 or buf[i] == 105 or buf[i] == 73):
        j = i
        while j < end and not _is_space(buf[j]) and buf[j] != 10 and buf[j] != 35:
            j += 1
        return 0.0, j, False, True
    mant = np.int64(0)
    ndig = 0
    exp10 = 0
    seen_digit = False
    while i < end and 48 <= buf[i] <= 57:
        seen_digit = True
        if ndig < 19:
            mant = mant * 10 + (buf[i] - 48)
            if mant != 0:
                ndig += 1
        else:
            exp10 += 1
        i += 1
    if i < end and buf[i] == 46:  # '.'
        i += 1
        while i < end and 48 <= buf[i] <= 57:
            seen_digit = True
            if ndig < 19:
                mant = mant * 10 + (buf[i] - 48)
                if mant != 0:
                    ndig += 1
                exp10 -= 1
            i += 1
    if not seen_digit:
        return 0.0, i, False, False
    if i < end and (buf[i] == 101 or buf[i] == 69):  # 'e' 'E'
        i += 1
        eneg = False
        if i < end and (buf[i] == 45 or buf[i] == 43):
            eneg = buf[i] == 45
            i += 1
        if not (i < end and 48 <= buf[i] <= 57):
            return 0.0, i, False, False
        e = 0
        while i < end and 48 <= buf[i] <= 57:
            if e < 100000:
                e = e * 10 + (buf[i] - 48)
            i += 1
        exp10 += -e if eneg else e
    value = float(mant)
    if exp10 > 0:
        while exp10 > 22:
            value *= 1e22
            exp10 -= 22
        value *= pow10[exp10]
    elif exp10 < 0:
        while exp10 < -22:
            value /= 1e22
            exp10 += 22
        value /= pow10[-exp10]
    if neg:
        value = -value
    if not np.isfinite(value):
        return value, i, False, True
    return value, i, True, False


@njit(cache=True, nogil=True)
def _line_end(buf, pos, n):
    while pos < n and buf[pos] != 10:
        pos += 1
    return pos


@njit(cache=True, nogil=True)
def scan(buf):
    """First pass: (n_lines, max_feature_id, max_qid_len, max_docid_len, n_line_total).

    Only structure is looked at; values are validated in ``parse``.
    """
    n = buf.shape[0]
    pos = 0
    n_data = 0
    max_fid = 0
    max_qid = 0
    max_doc = 0
    while pos < n:
        end = _line_end(buf, pos, n)
        i = pos
        while i < end and _is_space(buf[i]):
            i += 1
        if i < end and buf[i] != 35:
            n_data += 1
            # walk tokens
            while i < end and buf[i] != 35:
                while i < end and _is_space(buf[i]):
                    i += 1
                if i >= end or buf[i] == 35:
                    break
                tok = i
                colon = -1
                while i < end and not _is_space(buf[i]) and buf[i] != 35:
                    if buf[i] == 58 and colon < 0:
                        colon = i
                    i += 1
                if colon > 0:
                    if _is_qid_key(buf, tok, colon):
                        if i - colon - 1 > max_qid:
                            max_qid = i - colon - 1
                    else:
                        fid = 0
                        ok = colon > tok
                        for k in range(tok, colon):
                            c = buf[k]
                            if 48 <= c <= 57:
                                if fid < 100000000:
                                    fid = fid * 10 + (c - 48)
                            else:
                                ok = False
                                break
                        if ok and fid > max_fid:
                            max_fid = fid
            if i < end and buf[i] == 35:
                s, e = _find_docid(buf, i + 1, end)
                if e - s > max_doc:
                    max_doc = e - s
        pos = end + 1
    return n_data, max_fid, max_qid, max_doc


@njit(cache=True, nogil=True)
def _find_docid(buf, i, end):
    """Span of the value after 'docid' [spaces] '=' [spaces] in a comment, or (0, 0)."""
    while i + 5 <= end:
        if (
            buf[i] == 100
            and buf[i + 1] == 111
            and buf[i + 2] == 99
            and buf[i + 3] == 105
            and buf[i + 4] == 100
        ):
            j = i + 5
            while j < end and _is_space(buf[j]):
                j += 1
            if j < end and buf[j] == 61:
                j += 1
                while j < end and _is_space(buf[j]):
                    j += 1
                s = j
                while j < end and not _is_space(buf[j]):
                    j += 1
                return s, j
        i += 1
    return 0, 0


@njit(cache=True, nogil=True)
def parse(buf, n_lines, n_features, require_qid, qid_width, doc_width, features, labels, qid_bytes, doc_bytes, pow10):
    """Second pass: fill ``features`` (n_lines, n_features) float32, ``labels`` int32,
    ``qid_bytes`` (n_lines, qid_width) uint8 and ``doc_bytes`` (n_lines, doc_width) uint8.

    Returns (error_code, line_number (1-based, of the file), column (1-based), n_rows_done).
    """
    n = buf.shape[0]
    pos = 0
    line_no = 0
    row = 0
    seen = np.full(n_features + 1, -1, dtype=np.int64)
    while pos < n:
        end = _line_end(buf, pos, n)
        line_no += 1
        i = pos
        while i < end and _is_space(buf[i]):
            i += 1
        if i >= end or buf[i] == 35:
            pos = end + 1
            continue
        # label
        tok = i
        while i < end and not _is_space(buf[i]) and buf[i] != 35:
            i += 1
        value, stop, ok, nonfin = _parse_number(buf, tok, i, pow10)
        if not ok or stop != i:
            return E_LABEL, line_no, tok - pos + 1, row
        if value != np.floor(value) or abs(value) > 2147483647.0:
            return E_LABEL, line_no, tok - pos + 1, row
        if value < 0:
            return E_NEG_LABEL, line_no, tok - pos + 1, row
        labels[row] = np.int32(value)
        have_qid = False
        while i < end and buf[i] != 35:
            while i < end and _is_space(buf[i]):
                i += 1
            if i >= end or buf[i] == 35:
                break
            tok = i
            colon = -1
            while i < end and not _is_space(buf[i]) and buf[i] != 35:
                if buf[i] == 58 and colon < 0:
                    colon = i
                i += 1
            if colon < 0:
                return E_PAIR, line_no, tok - pos + 1, row
            if _is_qid_key(buf, tok, colon):
                if i - colon - 1 <= 0:
                    return E_QID_EMPTY, line_no, tok - pos + 1, row
                for k in range(colon + 1, i):
                    qid_bytes[row, k - colon - 1] = buf[k]
                have_qid = True
                continue
            if colon == tok:
                return E_FID, line_no, tok - pos + 1, row
            fid = 0
            neg = False
            for k in range(tok, colon):
                c = buf[k]
                if 48 <= c <= 57:
                    if fid < 100000000:
                        fid = fid * 10 + (c - 48)
                elif c == 45 and k == tok:
                    neg = True
                else:
                    return E_FID, line_no, tok - pos + 1, row
            if neg or fid == 0:
                return E_FID, line_no, tok - pos + 1, row
            if fid > n_features:
                return E_FID_RANGE, line_no, tok - pos + 1, row
            if colon + 1 >= i:
                return E_PAIR, line_no, tok - pos + 1, row
            value, stop, ok, nonfin = _parse_number(buf, colon + 1, i, pow10)
            if nonfin:
                return E_NONFINITE, line_no, colon - pos + 2, row
            if not ok or stop != i:
                return E_VALUE, line_no, colon - pos + 2, row
            if seen[fid] == row:
                return E_DUP_FID, line_no, tok - pos + 1, row
            seen[fid] = row
            features[row, fid - 1] = np.float32(value)
        if require_qid and not have_qid:
            return E_NO_QID, line_no, 1, row
        if i < end and buf[i] == 35 and doc_width > 0:
            s, e = _find_docid(buf, i + 1, end)
            for k in range(s, e):
                doc_bytes[row, k - s] = buf[k]
        row += 1
        pos = end + 1
    return OK, line_no, 0, row


@njit(cache=True, nogil=True)
def line_numbers(buf, n_lines):
    """1-based file line number of each data row (blank and comment lines skipped)."""
    out = np.empty(n_lines, dtype=np.int64)
    n = buf.shape[0]
    pos = 0
    line_no = 0
    row = 0
    while pos < n and row < n_lines:
        end = _line_end(buf, pos, n)
        line_no += 1
        i = pos
        while i < end and _is_space(buf[i]):
            i += 1
        if i < end and buf[i] != 35:
            out[row] = line_no
            row += 1
        pos = end + 1
    return out


@njit(cache=True, nogil=True)
def qid_blocks(qid_bytes):
    """Start rows of each run of equal qids (consecutive identical rows of ``qid_bytes``)."""
    n = qid_bytes.shape[0]
    w = qid_bytes.shape[1]
    starts = np.empty(n + 1, dtype=np.int64)
    nb = 0
    for r in range(n):
        new = r == 0
        if not new:
            for k in range(w):
                if qid_bytes[r, k] != qid_bytes[r - 1, k]:
                    new = True
                    break
        if new:
            starts[nb] = r
            nb += 1
    starts[nb] = n
    return starts[: nb + 1]
