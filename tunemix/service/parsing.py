"""From decoded request bodies to the project's array layout (docs/architecture.md), with errors
that name the query and the field.

Bodies are decoded into typed structs by ``tunemix.service.json_body`` (a repeated key refused there). What
comes out is checked here, before any array reaches a kernel:

- ``check_limits``: queries and documents per request (413 naming the setting);
- ``finite_rows`` / ``sparse_rows``: every row exactly the model's feature count, every value a
  finite float32 or missing (JSON ``null``, NaN in the matrix: docs/missing-values.md), sparse
  keys canonical 1-based feature ids (``"7"``; not ``"07"``, ``" 7"`` or full-width digits), none
  repeated;
- ``check_ids``: ids of bounded length, unique within their query (compared as text: 5 and
  ``"5"`` are the same id).
"""

from __future__ import annotations

import itertools
import re
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from tunemix.service.errors import ServiceError, input_error, too_large
from tunemix.service.settings import Settings

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
                   features: Sequence[Any] | None, d: int, where: str, *, ids_field: str = "ids",
                   ids_required: bool = True, block: npt.NDArray[np.float64] | None = None,
                   ) -> tuple[npt.NDArray[np.float32], list[Any]]:
    """(features (m, d), ids) of one candidate list given as ``documents`` (each with ``id`` and
    dense or sparse ``features``) or as columns (``ids_field`` + ``features``; without
    ``ids_required`` the ids may be left out and are then 0..m-1). /rank and /evaluate share it.
    With ``block`` (the list's rows as /rank's dense pass read them, ``tunemix.service.dense_body``: the
    features fields then hold the rows' bytes) the rows are that block (``dense_rows``)."""
    if documents is not None:
        if ids is not None or features is not None:
            raise input_error(f"{where}: send either documents or {ids_field} + features, not both")
        if not documents:
            raise input_error(f"{where}: documents is empty; a query needs at least one candidate")
        doc_ids = [doc.id for doc in documents]
        if block is not None:
            return dense_rows(block, d, where, "documents[{j}].features"), doc_ids
        feats = [doc.features for doc in documents]
        if all(type(f) is list for f in feats):
            return finite_rows(feats, d, where, "documents[{j}].features"), doc_ids
        return sparse_rows(feats, d, where, "documents[{j}].features"), doc_ids
    if features is None or (ids is None and ids_required):
        raise input_error(f"{where}: no candidates; send documents, or {ids_field} + features (both)")
    if ids is not None and len(ids) != len(features):
        raise input_error(f"{where}: {ids_field} has {len(ids)} entries but features has {len(features)} rows")
    if not features:
        raise input_error(f"{where}: features is empty; a query needs at least one candidate")
    rows = finite_rows(features, d, where, "features[{j}]") if block is None else dense_rows(
        block, d, where, "features[{j}]")
    return rows, list(ids) if ids is not None else list(range(len(features)))


def finite_rows(rows: Sequence[Sequence[float]], d: int, where: str, field: str) -> npt.NDArray[np.float32]:
    """Dense rows as an (m, d) float32 matrix; 422 naming the row (``field`` formats ``{j}``) that
    has another length than ``d`` or a value that is not a finite float32.

    The lengths are checked first (one ``len`` a row), then each row is packed straight into the
    matrix's buffer by the standard library's ``struct`` (``Struct(f"{d}f").pack_into``: one C call
    a row, each value cast as C casts a double to a float, the cast numpy makes), no nested
    sequence for numpy to inspect and no iterator per value: 1,000 MSLR rows of 136 floats in 2.4
    ms against 4.9 for ``np.fromiter`` over the rows chained and 5.6 for ``np.array(rows, float32)``
    (thread CPU, ``python -m bench.service_breakdown``). ``struct`` refuses a finite double beyond
    float32 (OverflowError) where numpy gives infinity: such rows, and anything else it refuses,
    take ``np.fromiter``, whose infinities the finiteness check names, and a missing value (``None``,
    the decode's ``null``) becomes NaN there. The rows are the typed decode's ``list[float | None]``."""
    m = len(rows)
    if any(len(r) != d for r in rows):
        j = next(j for j, r in enumerate(rows) if len(r) != d)
        raise input_error(f"{where}: {field.format(j=j)} has {len(rows[j])} values; the model takes {d}")
    arr = np.empty((m, d), dtype=np.float32)
    if m and d:
        try:
            _pack_rows(rows, d, arr)
        except (struct.error, OverflowError, TypeError):
            with np.errstate(over="ignore"):  # beyond float32: inf, refused below
                values = (np.nan if v is None else v for v in itertools.chain.from_iterable(rows))
                arr = np.fromiter(values, dtype=np.float32, count=m * d).reshape(m, d)
    _check_finite(arr, where, field)
    return arr


def _pack_rows(rows: Sequence[Sequence[float]], d: int, out: npt.NDArray[np.float32]) -> None:
    """Each row of ``d`` values packed as float32 into ``out`` (m, d), C-contiguous, in order."""
    fmt = struct.Struct(f"={d}f")
    pack, step = fmt.pack_into, fmt.size
    buf = out.data.cast("B")
    at = 0
    for r in rows:
        pack(buf, at, *r)
        at += step


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
                out[j] = [np.nan if v is None else v for v in row]
                continue
            for key, value in row.items():
                if not _SPARSE_KEY.fullmatch(key):
                    raise input_error(f"{where}: {field.format(j=j)}: sparse key {key!r} is not a feature id "
                                      "(a 1-based integer written plainly: \"7\", not \"07\" or \" 7\")")
                if len(key) > 10 or int(key) > d:
                    raise input_error(f"{where}: {field.format(j=j)}: feature id {key[:20]} is out of range 1..{d} "
                                      "(ids are 1-based, as in LETOR files)")
                out[j, int(key) - 1] = np.nan if value is None else value
    _check_finite(out, where, field)
    return out


def dense_rows(block: npt.NDArray[np.float64], d: int, where: str, field: str) -> npt.NDArray[np.float32]:
    """Rows as the dense pass read them (``tunemix.service.dense_body``: doubles, (m, k), every row of k) as an
    (m, d) float32 matrix, each double cast as ``finite_rows`` casts it, with its checks and
    messages (a width other than ``d`` is row 0's)."""
    if block.shape[1] != d:
        raise input_error(f"{where}: {field.format(j=0)} has {block.shape[1]} values; the model takes {d}")
    with np.errstate(over="ignore"):  # beyond float32: inf, refused below
        arr = block.astype(np.float32)
    _check_finite(arr, where, field)
    return arr


def _check_finite(arr: npt.NDArray[np.float32], where: str, field: str) -> None:
    """422 naming the first infinite value (NaN is a missing value)."""
    if np.isinf(arr).any():
        j, f = (int(v) for v in np.argwhere(np.isinf(arr))[0])
        raise input_error(f"{where}: {field.format(j=j)}: feature {f + 1} is not a finite float32 number "
                          "(infinity or beyond ±3.4e38; a missing value is null)")


__all__ = ["CandidateLists", "ServiceError", "candidate_rows", "check_ids", "check_limits", "check_unique",
           "dense_rows", "finite_rows", "sparse_rows"]
