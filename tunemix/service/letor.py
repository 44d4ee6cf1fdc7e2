"""LETOR/SVMlight text bodies (``Content-Type: text/plain``) as candidate lists.

One document a line, as in the LETOR files the trainer reads::

    2 qid:10002 1:0.007477 2:0 5:0.31 #docid = GX008-86-4444840

Untrusted bytes are read only by Python's own UTF-8 decoder, ``str.split`` and the ``re`` module
(one anchored pattern per line), then ``float``/``int`` on tokens the pattern has already
checked: no byte-level code of ours touches them. The rules:

- the label is a non-negative integer (``2`` or ``2.0``): /evaluate needs it; /rank ignores it
  and takes lines without one too (``qid:10002 1:0.007477 ...``, as serving data has none);
- ``qid:Q`` follows it; a query's lines are contiguous (a qid that reappears after another is an
  error);
- features are ``id:value`` with ``id`` a canonical 1-based integer no larger than the model's
  feature count (absent features are 0), each id at most once per line, ``value`` a plain
  decimal number (no ``nan``, ``inf``, hex or ``_``) that is finite in float32;
- a comment ``# ... docid = X ...`` names the document; without one its id is its 0-based
  position in its query, as a string (``"3"``): every id of a text body is a string.

Errors name the line: ``body:3: feature id 47 is out of range 1..46``.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import numpy.typing as npt

from tunemix.core.deadline import step_of_long_work
from tunemix.service.errors import input_error
from tunemix.service.parsing import CandidateLists, check_ids, check_limits
from tunemix.service.settings import Settings

#: a plain decimal number; one way to match any text (no nested choices: linear time on any token)
_NUMBER = r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
#: one ``id:value`` token (whitespace already split off: a fixed pattern per token, never a
#: repetition over the line, whose backtracking stack grows about 172 bytes per byte of a line)
_PAIR = re.compile(rf"([^\s:]+):({_NUMBER})", re.ASCII)
_SPACE = re.compile(r"\s+", re.ASCII)  # ASCII whitespace (str.split also splits at \x1c-\x1f, U+00A0...)
_FID = re.compile(r"[1-9][0-9]{0,9}", re.ASCII)
_LABEL = re.compile(_NUMBER, re.ASCII)
_DOCID = re.compile(r"docid\s*=\s*(\S+)")

#: lines read between two checks of the request's deadline
DEADLINE_LINES = 1024

#: the largest label a LETOR body may carry (the evaluation kernels' gain tables stop there)
MAX_LABEL = 2**31 - 1


def repeated_block(qids: list[str]) -> tuple[int | None, int]:
    """(index of the first block whose qid an earlier block had, index of that earlier block), or
    (None, -1): one pass with a dict, O(n) (a scan of the list is O(n^2): 1.6 CPU-s on a 2.7 MB
    body)."""
    seen: dict[str, int] = {}
    for i, q in enumerate(qids):
        first = seen.setdefault(q, i)
        if first != i:
            return i, first
    return None, -1


def letor_lists(body: bytes, d: int, settings: Settings, *, max_label: int = MAX_LABEL,
                require_labels: bool = False, missing: str = "zero") -> CandidateLists:
    """A LETOR/SVMlight text body as candidate lists (labels kept for /evaluate, at most
    ``max_label``; with ``require_labels`` a line without one is refused, else it counts as 0).
    A feature a line leaves out is 0, or with ``missing="nan"`` a missing value (NaN); a value
    written on a line is a finite number either way.
    Each line costs time and memory in proportion to its length: a line of more ``id:value``
    pairs than the model's ``d`` features is refused before it is split."""
    if not body.strip():
        raise input_error("the request body is empty; send LETOR lines 'label qid:Q 1:v 2:v ...'")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise input_error(f"body: invalid UTF-8 at byte {exc.start}") from None
    labels: list[int] = []
    qids: list[str] = []
    ids: list[Any] = []
    rows: list[int] = []
    fids: list[int] = []
    values: list[str] = []
    starts: list[int] = []  # the first row of each query
    start_lines: list[int] = []  # and its line number
    # the pairs of each DEADLINE_LINES lines as arrays: no conversion of a whole body in one call
    blocks: list[tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.float64]]] = []

    def flush() -> None:
        if rows:
            blocks.append((np.asarray(rows, dtype=np.int64), np.asarray(fids, dtype=np.int64),
                           np.asarray([float(v) for v in values], dtype=np.float64)))
            rows.clear()
            fids.clear()
            values.clear()

    for line_no, line in enumerate(text.split("\n"), start=1):
        if not line_no % DEADLINE_LINES:
            step_of_long_work("LETOR lines")
            flush()
        content, _, comment = line.partition("#")
        head = content.split(None, 2)
        if not head:
            continue
        where = f"body:{line_no}"
        if len(labels) >= settings.max_documents:
            check_limits(0, len(labels) + 1, settings)
        if head[0].startswith("qid:"):  # a line without a label
            if require_labels:
                raise input_error(f"{where}: the line has no label: each line starts with its grade, then "
                                  "'qid:<query id>'")
            head = ["0", *content.split(None, 1)]
        label = head[0]
        value = float(label) if _LABEL.fullmatch(label) else -1.0
        if not value.is_integer() or not 0 <= value <= max_label:
            limit = " (TUNEMIX_MAX_LABEL)" if max_label != MAX_LABEL else ""
            raise input_error(f"{where}: the label {label[:40]!r} is not an integer 0..{max_label}{limit}")
        if len(head) < 2 or not head[1].startswith("qid:") or len(head[1]) == 4:
            raise input_error(f"{where}: 'qid:<query id>' must follow the label")
        qid = head[1][4:]
        rest = head[2] if len(head) == 3 else ""
        if rest.count(":") > d:  # each feature at most once: no more pairs than features
            raise input_error(f"{where}: more than {d} 'id:value' pairs; the model takes {d} features, each at most "
                              "once a line")
        tokens = [t for t in _SPACE.split(rest) if t]
        matches = [_PAIR.fullmatch(t) for t in tokens]
        if not all(matches):
            bad = next(t for t, m in zip(tokens, matches, strict=True) if m is None)
            raise input_error(f"{where}: {bad[:40]!r} is not a feature 'id:value' (the value a plain decimal number: "
                              "no NaN, inf or hex)")
        row = len(labels)
        if not qids or qids[-1] != qid:
            starts.append(row)
            start_lines.append(line_no)
            qids.append(qid)
            position = 0
        else:
            position = row - starts[-1]
        pairs = [m.groups() for m in matches if m is not None]
        for fid, _ in pairs:
            if not _FID.fullmatch(fid) or int(fid) > d:
                raise input_error(f"{where}: feature id {fid[:20]!r} is not in 1..{d} (the model takes {d} features, "
                                  "ids 1-based)")
        line_fids = [int(f) for f, _ in pairs]
        if len(set(line_fids)) != len(line_fids):
            raise input_error(f"{where}: a feature id appears twice on the line")
        rows.extend([row] * len(pairs))
        fids.extend(line_fids)
        values.extend(v for _, v in pairs)
        labels.append(int(value))
        match = _DOCID.search(comment)
        ids.append(match.group(1) if match else str(position))
    if not labels:
        raise input_error("body: no data lines (LETOR lines 'label qid:Q 1:v 2:v ...')")
    check_limits(len(qids), len(labels), settings)
    again, first = repeated_block(qids)
    if again is not None:
        raise input_error(f"body:{start_lines[again]}: qid {qids[again]} appears in two separate blocks (the first "
                          f"starts at line {start_lines[first]}); a query's lines must be contiguous")
    flush()
    features = np.full((len(labels), d), np.nan if missing == "nan" else 0.0, dtype=np.float32)
    written = np.zeros((len(labels), d), dtype=bool)
    with np.errstate(over="ignore"):
        for block_rows, block_fids, block_values in blocks:
            features[block_rows, block_fids - 1] = block_values
            written[block_rows, block_fids - 1] = True
    bad = ~np.isfinite(features) & written
    if bad.any():
        row, f = (int(v) for v in np.argwhere(bad)[0])
        raise input_error(f"body: document {row} (0-based): feature {f + 1} is not a finite float32 number "
                          "(within ±3.4e38)")
    offsets = np.append(np.asarray(starts, dtype=np.int64), len(labels))
    for q, qid in enumerate(qids):
        check_ids(ids[offsets[q]:offsets[q + 1]], f"query {qid!r}", "docid", settings.max_id_length)
    check_ids(qids, "body", "qid", settings.max_id_length, scope="in a request")
    return CandidateLists(features=features, offsets=offsets, qids=qids, ids=ids,
                          labels=np.asarray(labels, dtype=np.int32))
