"""Read and write LETOR / SVMlight ranking files and LightGBM-style files with a ``.query`` file.

Format (one document per line)::

    2 qid:10002 1:0.007477 2:0 5:0.31 #docid = GX008-86-4444840 inc = 1 prob = 0.08

Feature ids are 1-based and may be sparse (an absent feature is 0). A query's documents must
be contiguous: a qid that reappears after another qid is an error (the rows of a query are the
unit of every ranking metric, and splitting them is almost always a file-concatenation bug).

LightGBM-style data has no ``qid:`` and a sidecar ``<file>.query`` with one group size per
line; ``read_svmlight`` picks it up automatically when it exists.

Errors are :class:`DataFormatError` with file, line and column.
"""

from __future__ import annotations

import logging
import os
import warnings
from pathlib import Path

import numpy as np

from tunemix.core.data import svmlight_kernels as K
from tunemix.core.data.dataset import RankingData, offsets_from_sizes

log = logging.getLogger(__name__)

#: what a feature a line omits is read as (``read_svmlight``'s ``missing``)
MISSING_RULES = ("zero", "nan")

PathLike = str | os.PathLike[str]


class DataFormatError(ValueError):
    """A ranking data file is malformed; the message names file, line and column."""

    def __init__(self, path: PathLike, line: int | None, message: str, column: int | None = None):
        self.path = str(path)
        self.line = line
        self.column = column
        where = self.path
        if line is not None:
            where += f":{line}"
            if column is not None:
                where += f":{column}"
        super().__init__(f"{where}: {message}")


def _bytes_to_str(arr: np.ndarray) -> np.ndarray:
    """(n, w) uint8, zero padded -> (n,) str array (vectorised; no per-row Python loop)."""
    n, w = arr.shape
    if w == 0:
        return np.full(n, "", dtype=np.str_)
    fixed = np.ascontiguousarray(arr).view(f"S{w}").reshape(n)
    try:
        return np.char.decode(fixed, "utf-8").astype(np.str_)
    except UnicodeDecodeError:
        return np.char.decode(fixed, "latin-1").astype(np.str_)


def read_group_file(path: PathLike) -> np.ndarray:
    """Group sizes, one positive integer per line (LightGBM ``.query`` / ``.group`` files)."""
    sizes: list[int] = []
    with open(path, encoding="utf-8") as fh:
        for line_no, line in enumerate(fh, start=1):
            text = line.strip()
            if not text:
                continue
            try:
                size = int(text)
            except ValueError:
                raise DataFormatError(path, line_no, f"group size {text!r} is not an integer") from None
            if size <= 0:
                raise DataFormatError(path, line_no, f"group size must be positive, got {size}")
            sizes.append(size)
    return np.asarray(sizes, dtype=np.int64)


def read_svmlight(
    path: PathLike,
    *,
    n_features: int | None = None,
    query_file: PathLike | None = None,
    missing: str = "zero",
) -> RankingData:
    """Read a LETOR/SVMlight ranking file into :class:`RankingData`.

    Args:
        path: the data file.
        n_features: the number of feature columns; default the largest feature id in the file.
            Give it to read a test file with the training file's width (a larger id is an error).
        query_file: group sizes for files without ``qid:``; default ``<path>.query`` if it exists.
        missing: what a feature a line omits is: ``"zero"`` (0, LETOR's rule) or ``"nan"`` (a
            missing value, NaN: docs/missing-values.md).
    """
    p = Path(path)
    try:
        buf = np.fromfile(p, dtype=np.uint8)
    except FileNotFoundError:
        raise FileNotFoundError(f"{p}: no such data file") from None
    except IsADirectoryError:
        raise DataFormatError(p, None, "is a directory, not a data file") from None
    if query_file is None and Path(str(p) + ".query").exists():
        query_file = Path(str(p) + ".query")
    sizes = None if query_file is None else read_group_file(query_file)
    try:
        data = parse_svmlight(buf, source=str(p), n_features=n_features, group_sizes=sizes, missing=missing)
    except _GroupSizeMismatch as exc:
        raise DataFormatError(query_file or p, None, str(exc)) from None
    log.debug("read %s: %d rows, %d features, %d queries", p, data.n_docs, data.n_features, data.n_queries)
    return data


class _GroupSizeMismatch(ValueError):
    pass


class DataWidthWarning(UserWarning):
    """A file read with ``n_features`` (a model's width) whose largest feature id is smaller."""


def _token_at(arr: np.ndarray, line_no: int, col: int) -> str:
    """The whitespace-delimited token at 1-based ``line_no``, ``col`` (for an error message)."""
    starts = np.concatenate([[0], np.flatnonzero(arr == 10) + 1])
    if line_no - 1 >= starts.shape[0]:
        return ""
    lo = int(starts[line_no - 1])
    hi = int(starts[line_no]) - 1 if line_no < starts.shape[0] else arr.shape[0]
    line = bytes(arr[lo:hi]).decode("utf-8", "replace")
    return (line[col - 1:].split() or [""])[0].split("#")[0][:40]


def _error_message(arr: np.ndarray, code: int, line_no: int, col: int, width: int, declared: bool) -> str:
    """``K.ERROR_MESSAGES[code]`` with what was found and what was expected."""
    tok = _token_at(arr, line_no, col)
    key = tok.partition(":")[0]
    if code == K.E_FID_RANGE:
        whose = "the model takes" if declared else "the file declares"
        return f"feature id {key} is larger than the number of features: {whose} {width} (ids 1-{width})"
    if code == K.E_FID:
        if key and not key.lstrip("-").isdigit():
            hint = " (did you mean qid:?)" if sorted(key.lower()) == sorted("qid") else ""
            return (f"unknown key {key!r} in {tok!r}{hint}: expected qid:Q or a feature id:value with a "
                    "positive integer id (ids are 1-based)")
        return f"feature id {key!r} in {tok!r} must be a positive integer (ids are 1-based)"
    found = f" (found {tok!r})" if tok else ""
    return K.ERROR_MESSAGES[code] + found


def parse_svmlight(
    buf: bytes | np.ndarray,
    *,
    source: str = "<bytes>",
    n_features: int | None = None,
    group_sizes: np.ndarray | None = None,
    missing: str = "zero",
) -> RankingData:
    """Parse LETOR/SVMlight text held in memory (``bytes`` or a uint8 array).

    ``source`` names the text in errors (``source:line:column: problem``); ``group_sizes``
    replaces ``qid:`` (LightGBM style). Otherwise as :func:`read_svmlight`.
    """
    arr = np.frombuffer(buf, dtype=np.uint8) if isinstance(buf, bytes | bytearray | memoryview) else buf
    if n_features is not None and n_features < 0:
        raise ValueError("n_features must be non-negative")
    if missing not in MISSING_RULES:
        raise ValueError(f"missing must be one of {', '.join(map(repr, MISSING_RULES))}, got {missing!r}")
    n_lines, max_fid, qid_w, doc_w = K.scan(arr)
    width = int(max_fid) if n_features is None else int(n_features)
    features = np.full((n_lines, width), np.nan if missing == "nan" else 0.0, dtype=np.float32)
    labels = np.zeros(n_lines, dtype=np.int32)
    qid_bytes = np.zeros((n_lines, qid_w), dtype=np.uint8)
    doc_bytes = np.zeros((n_lines, doc_w), dtype=np.uint8)
    code, line_no, col, _ = K.parse(
        arr, n_lines, width, group_sizes is None, qid_w, doc_w,
        features, labels, qid_bytes, doc_bytes, K._POW10,
    )
    if code != K.OK:
        raise DataFormatError(source, int(line_no), _error_message(arr, int(code), int(line_no), int(col), width,
                                                                   n_features is not None), int(col))
    if n_lines == 0:
        raise DataFormatError(source, None, "contains no data lines")
    if n_features is not None and int(max_fid) < width:
        warnings.warn(f"{source}: its largest feature id is {int(max_fid)} but {width} features are expected "
                      f"(the model's width): features {int(max_fid) + 1}-{width} are read as 0 in every row. "
                      "Harmless if the file is sparse and those features are 0; otherwise it is another "
                      "data set's file", DataWidthWarning, stacklevel=2)

    docids = _bytes_to_str(doc_bytes) if doc_w > 0 else None
    if group_sizes is not None:
        sizes = np.asarray(group_sizes, dtype=np.int64)
        if int(sizes.sum()) != n_lines:
            raise _GroupSizeMismatch(
                f"group sizes add up to {int(sizes.sum())} but {source} has {n_lines} data lines")
        offsets = offsets_from_sizes(sizes)
        qids = np.arange(sizes.shape[0]).astype(np.str_)
    else:
        starts = K.qid_blocks(qid_bytes)
        block_qids = _bytes_to_str(qid_bytes[starts[:-1]])
        uniq, _first, counts = np.unique(block_qids, return_index=True, return_counts=True)
        if np.any(counts > 1):
            dup = int(np.argmax(counts > 1))
            qid = uniq[dup]
            blocks = np.flatnonzero(block_qids == qid)
            lines = K.line_numbers(arr, n_lines)
            raise DataFormatError(
                source, int(lines[starts[blocks[1]]]),
                f"qid {qid} appears in two separate blocks (first block starts at line "
                f"{int(lines[starts[blocks[0]]])}); a query's documents must be contiguous",
            )
        offsets = starts.astype(np.int64)
        qids = block_qids
    return RankingData(
        features=features, labels=labels, query_offsets=offsets, qids=qids,
        docids=docids, source=source,
    )


def format_float32(values: np.ndarray) -> list[str]:
    """Short decimal strings (flattened, row-major) that read back to exactly the same float32.

    ``%.8g`` is enough for most float32 values; where it does not round-trip, ``%.9g`` (always
    enough for float32) is used instead.
    """
    x = np.asarray(values, dtype=np.float32).ravel()
    xs = x.astype(np.float64).tolist()
    short = ["%.8g" % v for v in xs]  # noqa: UP031 (the fast formatter)
    back = np.array(short, dtype=np.float64).astype(np.float32) if short else np.zeros(0, np.float32)
    for i in np.flatnonzero(back != x).tolist():
        short[i] = "%.9g" % xs[i]  # noqa: UP031
    return short


def write_svmlight(
    data: RankingData,
    path: PathLike,
    *,
    write_qid: bool = True,
    sparse: bool = True,
    comments: list[str] | None = None,
) -> None:
    """Write ``data`` as a LETOR/SVMlight file (float32 values written exactly, round-trippable).

    With ``write_qid=False`` a LightGBM-style ``<path>.query`` group file is written beside it.
    Docids are written as ``#docid = X``; ``comments`` (one per row) replace that when given.
    Features with a missing value (NaN) are written sparse: a missing value is left out and every
    other value written, zeros too (read back with ``missing="nan"``).
    """
    feats = data.features
    n, d = feats.shape
    has_missing = bool(np.isnan(feats).any())
    if comments is not None and len(comments) != n:
        raise ValueError(f"comments must have one entry per row ({n}), got {len(comments)}")
    qidx = data.query_index
    ids = [f"{j + 1}:" for j in range(d)]
    chunk = 20_000  # rows formatted at a time (bounded memory)
    with open(path, "w", encoding="utf-8") as fh:
        for c0 in range(0, n, chunk):
            block = feats[c0 : c0 + chunk]
            text = format_float32(block)
            nonzero = ~np.isnan(block) if has_missing else block != 0
            out = []
            for r in range(block.shape[0]):
                i = c0 + r
                base = r * d
                cols = np.flatnonzero(nonzero[r]).tolist() if sparse or has_missing else range(d)
                parts = [f"{int(data.labels[i])}"]
                if write_qid:
                    parts.append(f"qid:{data.qids[qidx[i]]}")
                parts.extend(ids[j] + text[base + j] for j in cols)
                if comments is not None:
                    parts.append(f"#{comments[i]}")
                elif data.docids is not None:
                    parts.append(f"#docid = {data.docids[i]}")
                out.append(" ".join(parts))
            fh.write("\n".join(out))
            fh.write("\n")
    if not write_qid:
        with open(str(path) + ".query", "w", encoding="utf-8") as fh:
            fh.write("\n".join(str(int(s)) for s in data.query_sizes))
            fh.write("\n")
