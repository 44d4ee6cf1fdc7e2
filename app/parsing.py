"""From decoded request bodies to the project's array layout (docs/architecture.md), with errors
that name the query and the field.

Untrusted JSON bytes are read by msgspec (``decode_json``: /rank, /evaluate, /fuse and
/models/reload, into typed structs, first error only, linear cost); a key repeated in an object
is refused (``check_repeated_keys``: jiter, then the standard library's decoder to name it).
What comes out is checked here, before any array reaches a kernel:

- ``check_limits``: queries and documents per request (413 naming the setting);
- ``finite_rows`` / ``sparse_rows``: every row exactly the model's feature count, every value a
  finite float32, sparse keys canonical 1-based feature ids (``"7"``; not ``"07"``, ``" 7"`` or
  full-width digits), none repeated;
- ``check_ids``: ids of bounded length, unique within their query (compared as text: 5 and
  ``"5"`` are the same id).
"""

from __future__ import annotations

import contextlib
import gc
import json
import re
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import jiter
import msgspec
import numpy as np
import numpy.typing as npt

from app.errors import ServiceError, input_error, query_label, too_large
from app.settings import Settings

T = TypeVar("T")

#: integer ids are echoed back as JSON numbers: 64-bit ones, as every JSON library reads them
INT_ID_RANGE = (-(2**63), 2**63 - 1)


@dataclass(frozen=True)
class CandidateLists:
    """Several queries' candidates: rows ``offsets[q]:offsets[q+1]`` belong to query q."""

    features: npt.NDArray[np.float32]
    offsets: npt.NDArray[np.int64]
    qids: list[Any]
    ids: list[Any]
    labels: npt.NDArray[np.int32] | None = None

    @property
    def n_documents(self) -> int:
        return int(self.features.shape[0])


# ---------------------------------------------------------------------------- decoding
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


def _where(parts: Sequence[str | int], body: bytes) -> str:
    """``query 'q7' (queries[3]): documents[0].features[7]`` for a path into a /rank-like body."""
    def path(ps: Sequence[str | int]) -> str:
        return "".join(f"[{p}]" if isinstance(p, int) else p if p == "[...]" else f".{p}" for p in ps).lstrip(".")
    if len(parts) >= 2 and parts[0] == "queries" and isinstance(parts[1], int):
        return f"{query_label(parts[1], qid_at(body, parts[1]))}: {path(parts[2:]) or 'the query'}"
    return path(parts) or "body"


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


# ---------------------------------------------------------------------------- limits and ids
def check_limits(n_queries: int, n_documents: int, settings: Settings) -> None:
    """413 when a request has more queries or documents than the service takes."""
    if n_queries > settings.max_queries:
        raise too_large(f"the request has {n_queries} queries; the limit is {settings.max_queries} "
                        "(TUNEMIX_MAX_QUERIES)")
    if n_documents > settings.max_documents:
        raise too_large(f"the request has {n_documents} documents; the limit is {settings.max_documents} "
                        "(TUNEMIX_MAX_DOCUMENTS)")


def check_ids(ids: Sequence[Any], where: str, what: str, max_length: int, *, scope: str = "within a query") -> None:
    """422 for a string id longer than ``max_length`` characters, an integer id beyond 64 bits, or
    an id that repeats one before it (ids compared as text: 5 and "5" are the same id)."""
    strings = [i for i in ids if type(i) is str]
    if strings and max(map(len, strings)) > max_length:
        j = next(j for j, i in enumerate(ids) if type(i) is str and len(i) > max_length)
        raise input_error(f"{where}: {what} at entry {j} has {len(ids[j])} characters; the limit is {max_length} "
                          "(TUNEMIX_MAX_ID_LENGTH)")
    if len(strings) != len(ids):
        lo, hi = INT_ID_RANGE
        for j, i in enumerate(ids):
            if type(i) is not str and not lo <= i <= hi:
                raise input_error(f"{where}: {what} at entry {j} is an integer beyond 64 bits; send it as a string")
    check_unique(ids, where, what, scope=scope)


def check_unique(ids: Sequence[Any], where: str, what: str, *, scope: str = "within a query") -> None:
    """A 422 naming the first id that repeats one before it (ids compared as text)."""
    if len(set(ids)) == len(ids) and (all(type(i) is str for i in ids) or all(type(i) is int for i in ids)):
        return  # distinct, and of one type whose text is one-to-one
    seen: set[str] = set()
    for j, i in enumerate(ids):
        key = str(i)
        if key in seen:
            raise input_error(f"{where}: duplicate {what} {i!r} (entry {j}); each {what} may appear only once {scope}")
        seen.add(key)


# ---------------------------------------------------------------------------- feature rows
def candidate_rows(documents: Sequence[Any] | None, ids: Sequence[Any] | None,
                   features: Sequence[Sequence[float]] | None, d: int, where: str, *, ids_field: str = "ids",
                   ids_required: bool = True) -> tuple[npt.NDArray[np.float32], list[Any]]:
    """(features (m, d), ids) of one candidate list given as ``documents`` (each with ``id`` and
    dense or sparse ``features``) or as columns (``ids_field`` + ``features``; without
    ``ids_required`` the ids may be left out and are then 0..m-1). /rank and /evaluate share it."""
    if documents is not None:
        if ids is not None or features is not None:
            raise input_error(f"{where}: send either documents or {ids_field} + features, not both")
        if not documents:
            raise input_error(f"{where}: documents is empty; a query needs at least one candidate")
        feats = [doc.features for doc in documents]
        doc_ids = [doc.id for doc in documents]
        if all(type(f) is list for f in feats):
            return finite_rows(feats, d, where, "documents[{j}].features"), doc_ids
        return sparse_rows(feats, d, where, "documents[{j}].features"), doc_ids
    if features is None or (ids is None and ids_required):
        raise input_error(f"{where}: no candidates; send documents, or {ids_field} + features (both)")
    if ids is not None and len(ids) != len(features):
        raise input_error(f"{where}: {ids_field} has {len(ids)} entries but features has {len(features)} rows")
    if not features:
        raise input_error(f"{where}: features is empty; a query needs at least one candidate")
    return finite_rows(features, d, where, "features[{j}]"), list(ids) if ids is not None else list(
        range(len(features)))


def finite_rows(rows: Sequence[Sequence[float]], d: int, where: str, field: str) -> npt.NDArray[np.float32]:
    """Dense rows as an (m, d) float32 matrix; 422 naming the row (``field`` formats ``{j}``) that
    has another length than ``d`` or a value that is not a finite float32."""
    try:
        with np.errstate(over="ignore"):  # beyond float32: inf, refused below
            arr = np.array(rows, dtype=np.float32)
    except ValueError:  # ragged rows
        arr = np.empty((0, 0), dtype=np.float32)
    if arr.ndim != 2 or arr.shape != (len(rows), d):
        j = next((j for j, r in enumerate(rows) if len(r) != d), 0)
        raise input_error(f"{where}: {field.format(j=j)} has {len(rows[j])} values; the model takes {d}")
    _check_finite(arr, where, field)
    return arr


#: a sparse feature key: a canonical positive decimal integer, ASCII digits only
_SPARSE_KEY = re.compile(r"[1-9][0-9]*")


def sparse_rows(feats: Sequence[Sequence[float] | dict[str, float]], d: int, where: str,
                field: str) -> npt.NDArray[np.float32]:
    """Rows given dense (a list of ``d`` values) or sparse (``{"<1-based id>": value}``, absent
    features 0) as an (m, d) float32 matrix, with the checks of ``finite_rows``."""
    out = np.zeros((len(feats), d), dtype=np.float32)
    with np.errstate(over="ignore"):
        for j, row in enumerate(feats):
            if not isinstance(row, dict):
                if len(row) != d:
                    raise input_error(f"{where}: {field.format(j=j)} has {len(row)} values; the model takes {d}")
                out[j] = row
                continue
            for key, value in row.items():
                if not _SPARSE_KEY.fullmatch(key):
                    raise input_error(f"{where}: {field.format(j=j)}: sparse key {key!r} is not a feature id "
                                      "(a 1-based integer written plainly: \"7\", not \"07\" or \" 7\")")
                if len(key) > 10 or int(key) > d:
                    raise input_error(f"{where}: {field.format(j=j)}: feature id {key[:20]} is out of range 1..{d} "
                                      "(ids are 1-based, as in LETOR files)")
                out[j, int(key) - 1] = value
    _check_finite(out, where, field)
    return out


def _check_finite(arr: npt.NDArray[np.float32], where: str, field: str) -> None:
    if not np.isfinite(arr).all():
        j, f = (int(v) for v in np.argwhere(~np.isfinite(arr))[0])
        raise input_error(f"{where}: {field.format(j=j)}: feature {f + 1} is not a finite float32 number "
                          "(NaN, infinity or beyond ±3.4e38)")


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


def check_repeated_keys(body: bytes) -> None:
    """422 naming the object (query and field) in which a key appears twice: JSON decoders keep the
    last value of a repeated key silently (``"top_k":1,"top_k":2``), so the client's intent is
    unknown. Run after a schema-checked decode (the body is valid JSON of bounded depth) and the
    counts. msgspec and orjson cannot report repeats (msgspec#648); jiter (pydantic's JSON parser,
    fuzzed in its own CI) does, with ``catch_duplicate_keys``: keys compared as decoded text
    (``"\\u0061"`` and ``"a"`` are one key), a hash set per object, so one linear pass. A body it
    passes is done; only one it refuses (a repeat, or anything it reads otherwise than msgspec
    did) takes the second pass, ``name_repeated_key``, which names the object or finds no repeat
    (then the body is taken, as before). jiter's cost is building the numbers (``cache_mode="keys"``:
    keys interned, ids not): 0.56-0.71 times the standard library's pass's CPU on the service
    benchmark's bodies, 0.31 against 0.54 ms for 100 MQ2008 documents; 1.6 times it on one object
    of 60,000 keys; peak memory about 4 times the body (``python -m bench.bench_repeated_keys``,
    docs/performance.md)."""
    try:
        with gc_paused():
            jiter.from_json(body, catch_duplicate_keys=True, cache_mode="keys")
        return
    except ValueError:
        pass  # named (or found to be no repeat) by the slow, exact pass
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


__all__ = ["CandidateLists", "ServiceError", "candidate_rows", "check_ids", "check_limits", "check_repeated_keys",
           "check_unique", "decode_json", "finite_rows", "name_repeated_key", "qid_at",
           "sparse_rows"]
