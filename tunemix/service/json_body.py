"""From a request's JSON bytes to the typed structs of its endpoint, with errors that name the
query and the field; a key repeated in an object is an error.

Two ways to the same structs and the same errors:

- **One pass** (``one_pass``, /rank bodies up to ``ONE_PASS_MAX_BYTES``): jiter (pydantic's
  JSON parser, fuzzed in its own CI) builds the Python objects and refuses a repeated key
  (``catch_duplicate_keys``), NaN and Infinity (``allow_inf_nan=False``), invalid UTF-8, nesting
  past 200 levels and integers of more than 4,300 digits; ``msgspec.convert(..., strict=True)``
  validates the objects into the structs by the rules of msgspec's decoder (no coercion: ``true``
  or ``"2"`` is not a number, ``2.0`` not an integer; unknown fields refused; the same error
  texts and paths). A body the pass refuses goes to the two passes below, which name the error
  (``tunemix.service.routers.rank.json_lists``): the fast path is the valid body's.
- **Two passes** (``decode_json`` then ``check_repeated_keys``: larger /rank bodies, /evaluate,
  /fuse, /models/reload): msgspec decodes the bytes into the structs in one linear pass, first
  error only; the caller checks the counts; then jiter's pass looks for repeated keys, and only
  a body it refuses takes the standard library's pass (``name_repeated_key``) to name the object.

Why two ways: the one pass builds a generic tree (dicts and lists) and then the structs, before
any count is checked, so its peak is the two together: measured with tracemalloc on 1 MiB bodies
(``tests/service/test_one_pass.py``), at most 42.7 times the body (empty rows; msgspec's decode
21.5), 27 for empty or one-field objects, 15 for rows of five decimals. Within
``ONE_PASS_MAX_BYTES`` that is under ``ONE_PASS_MULTIPLE`` MiB, far within the per-body bound of
``DECODED_BODY_MULTIPLE`` times the body limit (104 MiB at 4 MiB); at the limit it would not be.
Past ``ONE_PASS_MAX_BYTES`` the typed decode comes first and the counts refuse a body before a
second tree is built.

**One reading of every number.** Each path reads a number with another library (msgspec's
decoder, jiter, simdjson): within ``MAX_NUMBER_CHARS`` characters they read every number text
as Python's ``float(text)`` does (correctly rounded), past it they part (msgspec reads
``0.`` + 99,999 zeros + ``1e100000`` as 0.0, jiter and simdjson as 1.0). So no value read from
a longer number is used: the fast passes (one pass, /rank's dense pass) leave a body that may
hold one (``long_run``) to the two passes, and the two passes refuse it after their counts,
before the repeated-key pass (``check_number_lengths``): a 422 naming the query and the field,
whichever path the body would take (``tests/service/test_number_readings.py``).
"""

from __future__ import annotations

import contextlib
import gc
import json
import re
import threading
from collections.abc import Iterator, Sequence
from typing import Any, TypeVar

import jiter
import msgspec

from tunemix.service.errors import input_error, query_label

T = TypeVar("T")

#: /rank bodies up to this size are parsed in one pass (``one_pass``); larger ones in two
ONE_PASS_MAX_BYTES = 1024 * 1024
#: the one pass's peak memory per body byte, at most (measured worst 42.7: a list of empty rows)
ONE_PASS_MULTIPLE = 48
#: the longest number a JSON body may hold, in characters: every double fits written out in full
#: (its exact decimal expansion, at most 1,077 characters with its sign; 17 significant digits
#: name it), and within it msgspec, jiter and simdjson read every number text alike
MAX_NUMBER_CHARS = 1100


# ---------------------------------------------------------------------------- two passes: msgspec's decode
class _QidOnly(msgspec.Struct):
    qid: Any = None


class _QueriesOnly(msgspec.Struct):
    queries: list[msgspec.Raw] = []


def qid_at(body: bytes, index: int) -> Any:
    """The qid of ``queries[index]`` in a body that failed validation (None if it cannot be read)."""
    try:
        raw = msgspec.json.decode(body, type=_QueriesOnly).queries[index]
        return msgspec.json.decode(raw, type=_QidOnly).qid
    except (msgspec.MsgspecError, UnicodeDecodeError, RecursionError, IndexError, TypeError):
        return None


_PATH_PART = re.compile(r"\.([A-Za-z_]\w*)|\[(\d{1,18})\]|\[(\.\.\.)\]")


def _json_path(path: str) -> list[str | int]:
    """``$.queries[3].documents[0].features[7]`` -> ["queries", 3, "documents", 0, "features", 7]
    (a key of a JSON object, which msgspec writes ``[...]``, stays ``"[...]"``)."""
    return [name or (int(index) if index else "[...]") for name, index, _ in _PATH_PART.findall(path.removeprefix("$"))]


def _dotted(parts: Sequence[str | int]) -> str:
    """``documents[0].features[7]`` for ["documents", 0, "features", 7]."""
    return "".join(f"[{p}]" if isinstance(p, int) else p if p == "[...]" else f".{p}" for p in parts).lstrip(".")


def _where(parts: Sequence[str | int], body: bytes, qid: Any = None, *, qid_known: bool = False) -> str:
    """``query 'q7' (queries[3]): documents[0].features[7]`` for a path into a /rank-like body
    (the qid read from ``body``, unless given: ``qid_known``)."""
    if len(parts) >= 2 and parts[0] == "queries" and isinstance(parts[1], int):
        label = query_label(parts[1], qid if qid_known else qid_at(body, parts[1]))
        return f"{label}: {_dotted(parts[2:]) or 'the query'}"
    return _dotted(parts) or "body"


_gc_lock = threading.Lock()
_gc_pausers = 0


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off while a body is decoded (on again once no thread is
    decoding). A decoder makes a container object every few bytes, and each 700 of them start a
    collection that walks the young ones, and now and then all of them: measured on 4 MiB bodies,
    a list of empty lists decoded in 0.78 CPU-s with the collector and 0.16 without, /fuse's
    one-id systems in 1.56 and 0.46. Decoded JSON has no reference cycles: nothing is left for
    the collector to find."""
    global _gc_pausers
    with _gc_lock:
        off_already = _gc_pausers == 0 and not gc.isenabled()  # by the application: leave it so
        if not off_already:
            _gc_pausers += 1
            gc.disable()
    if off_already:
        yield
        return
    try:
        yield
    finally:
        with _gc_lock:
            _gc_pausers -= 1
            if _gc_pausers == 0:
                gc.enable()


def decode_json(decoder: msgspec.json.Decoder[T], body: bytes, endpoint: str,
                choices: dict[str, Sequence[str]] | None = None) -> T:
    """``body`` decoded by ``decoder``; any failure is a 422 that names the query and the field
    (and, for a field in ``choices``, the values it takes). msgspec stops at the first error and
    its cost is linear in the body: no error list is ever built."""
    if not body.strip():
        raise input_error(f"the request body is empty; send JSON (Content-Type: application/json) to {endpoint}")
    try:
        with gc_paused():
            return decoder.decode(body)
    except msgspec.ValidationError as exc:
        msg, _, at = str(exc).partition(" - at `")
        parts = _json_path(at.rstrip("`"))
        if choices and parts and isinstance(parts[-1], str) and parts[-1] in choices:
            msg += f"; one of {', '.join(choices[parts[-1]])}"
        raise input_error(f"{_where(parts, body)}: {msg}") from None
    except msgspec.DecodeError as exc:
        raise input_error(f"body: {exc}{_near(body, str(exc))} (NaN, Infinity and comments are not JSON)") from None
    except UnicodeDecodeError as exc:
        raise input_error(f"body: invalid UTF-8 at byte {exc.start}") from None


def _near(body: bytes, message: str) -> str:
    """`` near '...'``: the body's text around the byte a decoder's message names."""
    found = re.search(r"\(byte (\d+)\)", message)
    if not found:
        return ""
    at = int(found.group(1))
    return f" near {body[max(0, at - 12):at + 12].decode('utf-8', 'replace')!r}"


# ---------------------------------------------------------------------------- numbers' length
#: the bytes a JSON number is made of, as 1; every other byte as 0 (a ``bytes.translate`` table)
_NUMBER_BYTES = bytes(int(chr(b) in "+-.0123456789Ee") for b in range(256))
#: a run of number bytes longer than a number may be
_LONG_RUN = b"\x01" * (MAX_NUMBER_CHARS + 1)


def long_run(body: bytes) -> bool:
    """Whether ``body`` holds a run of more than ``MAX_NUMBER_CHARS`` of the bytes a number is
    made of (``+-.0-9Ee``), in a number or a string: a body without one holds no longer number.
    ``bytes.translate`` maps those bytes to 1 and the others to 0, and ``bytes.find`` looks for
    the long run, both in C and linear (two-way search): 0.55-0.7 CPU-ms per MiB on the service
    benchmark's /rank bodies and on bodies of runs made to be just short (msgspec's decode of the
    same bodies: 3-7), and a transient copy of the body."""
    return len(body) > MAX_NUMBER_CHARS and body.translate(_NUMBER_BYTES).find(_LONG_RUN) >= 0


def check_number_lengths(body: bytes) -> None:
    """422 naming the query and the field of the first number longer than ``MAX_NUMBER_CHARS``
    characters (in document order). The two passes run it after their counts and checks, before
    ``check_repeated_keys``: the body's shape is then the endpoint's, and bounded, and the
    standard library's tree no larger than ``name_repeated_key``'s. A body with no long run
    (``long_run``) costs the scan alone."""
    if long_run(body):
        name_long_number(body)


class _LongNumber:
    """A number longer than ``MAX_NUMBER_CHARS`` in the standard library's tree: its length."""

    __slots__ = ("length",)

    def __init__(self, length: int) -> None:
        self.length = length


_NAME = re.compile(r"[A-Za-z_]\w{0,63}", re.ASCII)


def name_long_number(body: bytes) -> None:
    """The standard library's decoder (fuzzed with CPython) tokenises the body and hands each
    number's text to ``parse_float`` / ``parse_int``: a number longer than ``MAX_NUMBER_CHARS``
    becomes a marker, a shorter one None (no number is built); an object is the tuple of its pairs
    (a repeated key's too; ``{}`` is the one empty tuple: at most 23 times the body). A body
    it refuses is not JSON (or nested past the interpreter's recursion limit, deeper than any
    endpoint's type): every reader refuses it, and the decoders name its error. Otherwise the
    first marker in document order is a 422 naming its query and field."""
    longest: list[int] = []

    def number(text: str) -> _LongNumber | None:
        if len(text) <= MAX_NUMBER_CHARS:
            return None
        longest.append(len(text))
        return _LongNumber(len(text))

    try:
        with gc_paused():
            doc = json.loads(body, object_pairs_hook=tuple, parse_float=number, parse_int=number, strict=False)
    except (ValueError, RecursionError):  # JSONDecodeError, UnicodeDecodeError: not JSON
        return
    if not longest:
        return
    path, length = _first_long_number(doc) or ([], longest[0])
    raise input_error(f"{_where_long(path, doc, body)}: a number of {length} characters; the limit is "
                      f"{MAX_NUMBER_CHARS} (send at most 17 significant digits and an exponent: "
                      "1.2345678901234567e-300)")


def _first_long_number(doc: Any) -> tuple[list[str | int], int] | None:
    """(the path to, the length of) the first ``_LongNumber`` in document order."""
    stack: list[tuple[Any, list[str | int]]] = [(doc, [])]
    while stack:
        node, path = stack.pop()
        if type(node) is _LongNumber:
            return path, node.length
        if type(node) is tuple:  # an object's pairs
            stack.extend((v, [*path, k if _NAME.fullmatch(k) else "[...]"]) for k, v in reversed(node))
        elif type(node) is list:
            stack.extend((v, [*path, j]) for j, v in reversed(list(enumerate(node))) if v is not None)
    return None


def _where_long(path: Sequence[str | int], doc: Any, body: bytes) -> str:
    """``_where`` for a long number's path; a query whose qid is itself a long number is named by
    its index alone (the decoders would read that qid otherwise than each other)."""
    if len(path) >= 2 and path[0] == "queries" and isinstance(path[1], int) and type(doc) is tuple:
        queries = dict(doc).get("queries")
        query = queries[path[1]] if type(queries) is list else None
        if type(query) is tuple and type(dict(query).get("qid")) is _LongNumber:
            return _where(path, body, None, qid_known=True)
    return _where(path, body)


# ---------------------------------------------------------------------------- one pass
def one_pass(decoder: msgspec.json.Decoder[T], body: bytes) -> T | None:
    """``body`` as ``decoder``'s type in one pass, or None where the pass refuses it (the caller's
    two passes then name the error): jiter's objects (a repeated key, NaN, Infinity, invalid
    UTF-8, an empty body refused), validated into the structs by ``msgspec.convert(strict=True)``.

    jiter reads a number beyond float64 (``1e400``) as infinity where msgspec's decoder refuses
    it ("Number out of range"): a caller's finiteness checks find it, and its two passes name it.
    Costs, 100 and 1,000 MSLR documents of 136 features: docs/performance.md
    (``python -m bench.service_breakdown``)."""
    try:
        with gc_paused():
            return msgspec.convert(jiter.from_json(body, allow_inf_nan=False, catch_duplicate_keys=True,
                                                   cache_mode="keys"), decoder.type, strict=True)
    except (ValueError, RecursionError):  # jiter's refusals, and msgspec's ValidationError (a ValueError)
        return None


# ---------------------------------------------------------------------------- two passes: repeated keys
class _Repeated(dict[str, Any]):
    """A JSON object some key of which appeared twice (``repeated`` names it)."""

    repeated: str = ""


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object as a dict; a ``_Repeated`` naming the first key seen twice (one pass, linear)."""
    out = dict(pairs)
    if len(out) == len(pairs):
        return out
    repeated = _Repeated(out)
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            repeated.repeated = key
            break
        seen.add(key)
    return repeated


def _first_repeated(doc: Any) -> tuple[list[str | int], str] | None:
    """(the path to, the key of) the first object in document order with a repeated key."""
    stack: list[tuple[Any, list[str | int]]] = [(doc, [])]
    while stack:
        node, path = stack.pop()
        if isinstance(node, _Repeated):
            return path, node.repeated
        if isinstance(node, dict):
            stack.extend((v, [*path, k]) for k, v in reversed(node.items()))
        elif isinstance(node, list):
            stack.extend((v, [*path, j]) for j, v in reversed(list(enumerate(node))) if isinstance(v, dict | list))
    return None


def repeated_key(body: bytes) -> bool:
    """Whether jiter refuses ``body`` (valid JSON of bounded depth, its numbers within
    ``MAX_NUMBER_CHARS``) for a repeated key, or for anything it reads otherwise than msgspec:
    ``check_repeated_keys``'s first pass."""
    try:
        with gc_paused():
            jiter.from_json(body, catch_duplicate_keys=True, cache_mode="keys")
    except ValueError:
        return True
    return False


def check_repeated_keys(body: bytes) -> None:
    """422 naming the object (query and field) in which a key appears twice: JSON decoders keep the
    last value of a repeated key silently (``"top_k":1,"top_k":2``), so the client's intent is
    unknown. Run after a schema-checked decode (the body is valid JSON of bounded depth) and the
    counts. msgspec and orjson cannot report repeats (msgspec#648); jiter (pydantic's JSON parser,
    fuzzed in its own CI) does, with ``catch_duplicate_keys``: keys compared as decoded text
    (``"\\u0061"`` and ``"a"`` are one key), a hash set per object, so one linear pass. A body it
    passes is done; only one it refuses (a repeat, or anything it reads otherwise than msgspec
    did) takes the second pass, ``name_repeated_key``, which names the object or finds no repeat
    (then the body is taken). jiter's cost is building the numbers (``cache_mode="keys"``:
    keys interned, ids not): 0.56-0.71 times the standard library's pass's CPU on the service
    benchmark's bodies, 0.31 against 0.54 ms for 100 MQ2008 documents; 1.6 times it on one object
    of 60,000 keys; peak memory about 4 times the body (measured by ``bench/bench_repeated_keys.py``
    of commit d12ea4b)."""
    if repeated_key(body):  # named (or found to be no repeat) by the slow, exact pass
        name_repeated_key(body)


def name_repeated_key(body: bytes) -> None:
    """The repeated-key check by the standard library's decoder, which hands every object's pairs
    to ``object_pairs_hook`` in order: a 422 naming the first object in document order with a
    repeated key, and its key. Numbers are not built (``parse_float`` / ``parse_int`` = ``len``:
    a third of the decoder's time on numeric bodies, and no 4,300-digit limit to trip on), and the
    document is walked only to name a repeat found. ``check_repeated_keys`` runs it only on a body
    jiter refused; it is also the slow twin the tests hold jiter's verdict to."""
    repeats = 0

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        nonlocal repeats
        out = _pairs(items)
        if type(out) is _Repeated:
            repeats += 1
        return out

    with gc_paused():
        doc = json.loads(body, object_pairs_hook=pairs, parse_float=len, parse_int=len)
    found = _first_repeated(doc) if repeats else None  # the walk only to name a repeat found
    if found is not None:
        path, key = found
        raise input_error(f"{_where(path, body)}: key {key!r} appears twice in one object; send each key once")


__all__ = [
    "MAX_NUMBER_CHARS",
    "ONE_PASS_MAX_BYTES",
    "ONE_PASS_MULTIPLE",
    "check_number_lengths",
    "check_repeated_keys",
    "decode_json",
    "gc_paused",
    "long_run",
    "name_long_number",
    "name_repeated_key",
    "one_pass",
    "qid_at",
    "repeated_key",
]
