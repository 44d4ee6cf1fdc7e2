"""The /rank results as JSON bytes without a Python dict per document.

``ranked`` (``app.parsing``) builds ``{"qid", "n_documents", "ranking": [{"id", "score", "rank"}]}``
per query for pydantic-core to serialise: for a 1,000-document list the 1,000 dicts and their
serialisation took about 1 ms. Here one stable sort orders every query's documents (query by
query, best first, ties in the posted order, NaN last: ``np.argsort(-s, kind="stable")`` per
query), pydantic-core serialises three flat lists at once, ``[qids, ids, scores]`` (so every id,
qid and score is written by the same serialiser as before: escapes, big integers, the shortest
float text, ``NaN``), and a numba kernel cuts that text into its elements and interleaves them
into the nested result. The bytes are those of ``pydantic_core.to_json(ranked(...))``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pydantic_core
from numba import njit

_ENTRY = np.frombuffer(b'{"id":,"score":,"rank":},', dtype=np.uint8).copy()
_QUERY = np.frombuffer(b'{"qid":,"n_documents":,"ranking":[]},', dtype=np.uint8).copy()


@njit(cache=True, inline="always")
def _element_end(blob, i):  # pragma: no cover
    """The end of the array element starting at ``blob[i]`` in pydantic-core's compact output: a
    string (escapes skipped) or a scalar token up to the next ',' or ']'."""
    if blob[i] == 34:  # '"'
        i += 1
        while blob[i] != 34:
            i += 2 if blob[i] == 92 else 1
        return i + 1
    while blob[i] != 44 and blob[i] != 93:
        i += 1
    return i


@njit(cache=True, inline="always")
def _put(out, o, src, a, b):  # pragma: no cover
    for t in range(a, b):
        out[o] = src[t]
        o += 1
    return o


@njit(cache=True, inline="always")
def _put_int(out, o, v):  # pragma: no cover
    """The decimal digits of ``v`` >= 0."""
    width = 1
    w = v
    while w >= 10:
        w //= 10
        width += 1
    for t in range(width):
        out[o + width - 1 - t] = 48 + v % 10
        v //= 10
    return o + width


@njit(cache=True)
def results_json(blob, kept, n_documents, out):  # pragma: no cover
    """Write the results array to ``out`` from ``blob`` = ``to_json([qids, ids, scores])``: query q
    keeps ``kept[q]`` entries (its ids and scores in ``blob``, in order) of ``n_documents[q]``.
    Returns the length written. ``out`` needs ``len(blob)`` + 45 bytes per entry + 80 per query."""
    n_q = kept.shape[0]
    n = 0
    for q in range(n_q):
        n += kept[q]
    qs = np.empty(n_q + 1, dtype=np.int64)
    ids = np.empty(n + 1, dtype=np.int64)
    scores = np.empty(n + 1, dtype=np.int64)
    i = 2  # past '[['
    for q in range(n_q):
        qs[q] = i
        i = _element_end(blob, i) + 1  # past its ',' or ']'
    qs[n_q] = i
    i += 2  # past ',['
    if n == 0:
        i += 1
    for r in range(n):
        ids[r] = i
        i = _element_end(blob, i) + 1
    ids[n] = i
    i += 2
    for r in range(n):
        scores[r] = i
        i = _element_end(blob, i) + 1
    scores[n] = i
    o = 0
    out[o] = 91  # '['
    o += 1
    r = 0
    for q in range(n_q):
        o = _put(out, o, _QUERY, 0, 7)  # {"qid":
        o = _put(out, o, blob, qs[q], qs[q + 1] - 1)
        o = _put(out, o, _QUERY, 7, 22)  # ,"n_documents":
        o = _put_int(out, o, n_documents[q])
        o = _put(out, o, _QUERY, 22, 34)  # ,"ranking":[
        for rank in range(1, kept[q] + 1):
            o = _put(out, o, _ENTRY, 0, 6)  # {"id":
            o = _put(out, o, blob, ids[r], ids[r + 1] - 1)
            o = _put(out, o, _ENTRY, 6, 15)  # ,"score":
            o = _put(out, o, blob, scores[r], scores[r + 1] - 1)
            o = _put(out, o, _ENTRY, 15, 23)  # ,"rank":
            o = _put_int(out, o, rank)
            o = _put(out, o, _ENTRY, 23, 24 if rank == kept[q] else 25)  # } or },
            r += 1
        o = _put(out, o, _QUERY, 34, 36 if q == n_q - 1 else 37)  # ]} or ]},
    out[o] = 93  # ']'
    return o + 1


def ranked_json(scores: npt.NDArray[np.float64], offsets: npt.NDArray[np.int64], qids: list[Any], ids: list[Any],
                top_k: int | None) -> bytes:
    """``pydantic_core.to_json(ranked(scores, lists, top_k))`` (``app.parsing.ranked``), faster."""
    counts = np.diff(offsets)
    n = int(offsets[-1])
    query = np.repeat(np.arange(counts.shape[0]), counts)
    order = np.lexsort((-scores[:n], query))  # stable: within a query, equal scores keep their order
    if top_k is not None and top_k < n:  # (a top_k beyond int64 keeps everything)
        order = order[np.arange(n) - np.repeat(offsets[:-1], counts) < top_k]
        kept = np.minimum(counts, top_k)
    else:
        kept = counts
    blob = pydantic_core.to_json([qids, [ids[j] for j in order.tolist()], scores[order].tolist()])
    buf = np.frombuffer(blob, dtype=np.uint8)
    out = np.empty(len(blob) + 45 * order.shape[0] + 80 * counts.shape[0] + 2, dtype=np.uint8)
    length = results_json(buf, kept.astype(np.int64), counts.astype(np.int64), out)
    return out[:length].tobytes()
