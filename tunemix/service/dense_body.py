"""/rank's dense pass: a body's features as float64 blocks, without a Python float per value.

The one pass (``tunemix.service.json_body.one_pass``) builds a Python float for every feature value, then
packs them into the float32 matrix: for 100 MSLR documents of 136 features, 0.85 of the 1.40 ms
the handler takes (``python -m bench.service_breakdown``). The dense pass reads the same body
with two fuzzed parsers, neither of which makes an object per number:

1. **msgspec** decodes the body into the skeleton structs of ``tunemix.service.routers.rank``
   (``DenseRequest``): every field exactly as ``RankRequest`` types it (the same rules, no
   coercion, unknown fields refused), except that each document's ``features`` and each row of a
   columnar ``features`` is kept as ``msgspec.Raw`` (the value's bytes, skipped, not decoded).
2. **simdjson** (pysimdjson; simdjson is fuzzed continuously in OSS-Fuzz and passes the JSON
   test suites) parses the body into its tape; each features value is copied out of the tape as
   doubles (``Array.as_buffer``), which refuses anything but numbers (strings, booleans, null,
   objects); the objects of the body (the request, each query, each document) are checked for a
   repeated key by their size against their distinct keys (simdjson keeps every pair).

A value both parsers read as an array of numbers only is flat exactly when its bytes hold one
``[`` (no string can be among its values to hold another): ``as_buffer`` flattens nested arrays,
so ``[[0.1],[0.2]]`` would otherwise pass as two values. Every row holds at least its own, so the
rows are all flat exactly when their bytes together hold one a row (``_flat``).

The pass takes the valid dense body only. Anything else (a sparse document, a repeated key, a
number beyond float64 or 64-bit integers, rows of unequal length, anything either parser refuses)
returns None, and the caller's one pass and two passes take the body and name its error
(``tunemix.service.routers.rank.json_lists``). simdjson's own numbers are correctly rounded, as
msgspec's and jiter's are: the same doubles (``tests/service/test_one_pass.py`` compares the bytes of
every matrix the paths make).

Bodies up to ``ONE_PASS_MAX_BYTES`` only (the caller's rule), of at least ``MIN_ROW_BYTES`` a
row. Peak memory: simdjson's tape (16 bytes a number) and structural indexes (C++ allocations),
the doubles (8 bytes a value) and their joined copy, each row's objects: measured in a fresh
process on the costliest shapes at the size limit (``tests/service/test_dense_pass.py``) within the
one pass's ``ONE_PASS_MULTIPLE`` times the body.
Without pysimdjson installed, the pass is off (``AVAILABLE``) and every body takes the one pass.
"""

from __future__ import annotations

from typing import Any

import msgspec
import numpy as np
import numpy.typing as npt

from tunemix.service.json_body import gc_paused

try:
    import simdjson as _simdjson
except ImportError:  # pragma: no cover - pysimdjson is a serving dependency; without it the one pass serves
    _simdjson = None  # type: ignore[assignment]
simdjson: Any = _simdjson

#: whether the dense pass can run (pysimdjson importable)
AVAILABLE = simdjson is not None

#: the dense pass takes a body of at least this many bytes per row (document or columnar row):
#: each row costs it a few objects of its own (a Raw, a buffer, their list slots, about 150
#: bytes), so a body of many tiny rows goes to the one pass, whose peak is bounded per body byte
#: (``ONE_PASS_MULTIPLE``); a row of 5 features of 3-digit decimals is 21 bytes, of 136 MSLR
#: features about 850
MIN_ROW_BYTES = 16

#: what either parser raises for a body it refuses, or the walk for a shape it does not take
#: (an Object where an Array of numbers should be: AttributeError; a missing key: KeyError)
_REFUSALS = (ValueError, TypeError, RuntimeError, AttributeError, KeyError, IndexError, RecursionError,
             UnicodeDecodeError, msgspec.MsgspecError)


def _flat(raws: list[msgspec.Raw]) -> bool:
    """The values' bytes hold as many ``[`` as there are values: with ``as_buffer``'s proof (in
    ``_blocks``, else the pass is refused) that each value is an array (one ``[`` of its own at
    least) whose leaves are numbers (no string to hold a ``[``), each holds exactly its own, and
    is flat. One count over the values joined (a copy of their bytes, freed before simdjson's
    parse) instead of one per value: 0.031 against 0.054 ms for 100 MSLR rows (thread CPU, medians
    of 2,000, the two alternating)."""
    return b"".join(raws).count(b"[") == len(raws)


def _distinct_keys(obj: Any) -> bool:
    """No key of a simdjson ``Object`` appears twice (its size counts every pair)."""
    return len(obj) == len(set(obj.keys()))


def _block(buffers: list[Any]) -> npt.NDArray[np.float64] | None:
    """Rows of doubles (``ArrayBuffer``s) as an (m, k) matrix; None for rows of unequal length."""
    k = buffers[0].size
    if any(b.size != k for b in buffers):
        return None
    return np.frombuffer(b"".join(buffers), dtype=np.float64).reshape(len(buffers), k // 8)


def dense_pass(decoder: msgspec.json.Decoder[Any], body: bytes) -> tuple[Any, list[npt.NDArray[np.float64]]] | None:
    """(the skeleton request, one float64 block per query) for a body whose every query has rows
    (``documents`` with list features, else ``features``) of numbers only, valid as the skeleton
    types it; None for anything else (the caller's other passes take it). The query's form (one
    of the two, ids as many as rows) is checked with the rows by ``candidate_rows``."""
    if simdjson is None:
        return None
    try:
        with gc_paused():
            req = decoder.decode(body)
            # each query's rows, by the form it takes first (its other checks are candidate_rows')
            raws = [[doc.features for doc in q.documents] if q.documents is not None else q.features or []
                    for q in req.queries]
            both = any(q.documents is not None and (q.ids, q.features) != (None, None) for q in req.queries)
            if (both or not all(raws) or sum(map(len, raws)) * MIN_ROW_BYTES > len(body)
                    or not all(_flat(r) for r in raws)):
                return None  # both forms in a query, no rows, narrow rows, nested rows: the others'
            return req, _blocks(body, req)
    except _REFUSALS:
        return None


def _blocks(body: bytes, req: Any) -> list[npt.NDArray[np.float64]]:
    """The features of each query of ``req`` (checked dense by ``dense_pass``) out of simdjson's
    tape; raises ValueError where a block cannot be made (a repeated key, unequal rows)."""
    doc: Any = simdjson.Parser().parse(body)  # a parser per body: nothing shared between threads
    if not _distinct_keys(doc):
        raise ValueError("a repeated key")
    blocks = []
    for parsed, q in zip(doc["queries"], req.queries, strict=True):
        if not _distinct_keys(parsed):
            raise ValueError("a repeated key")
        if q.documents is not None:
            # a document has exactly the skeleton's two required keys: a third is one repeated
            buffers = [d["features"].as_buffer(of_type="d") for d in parsed["documents"] if len(d) == 2]
            if len(buffers) != len(q.documents):
                raise ValueError("a repeated key")
        else:
            buffers = [row.as_buffer(of_type="d") for row in parsed["features"]]
        block = _block(buffers)
        if block is None:
            raise ValueError("rows of unequal length")
        blocks.append(block)
    return blocks
