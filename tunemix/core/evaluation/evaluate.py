"""Evaluate ranked lists under one of the ten tool conventions.

>>> import numpy as np
>>> labels = np.array([2, 0, 1, 0, 0, 1])          # three queries of 2, 3 and 1 documents
>>> scores = np.array([0.9, 0.1, 0.2, 0.8, 0.5, 0.3])
>>> offsets = np.array([0, 2, 5, 6])
>>> res = evaluate(labels, scores, offsets, ["ndcg@2", "err"], "yahoo")
>>> res.per_query["ndcg@2"].tolist()
[1.0, 0.0, 1.0]
>>> round(res.mean["err"], 6)
0.090278

The public functions validate and dispatch; the loops are in :mod:`.kernels`, the rules in
:mod:`.conventions` (spec: docs/conventions.md). Formulas are in the kernel module docstring
(NDCG: Järvelin and Kekäläinen 2002; ERR: Chapelle et al. 2009).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from tunemix.core.deadline import check_deadline
from tunemix.core.evaluation import kernels, ranking_kernels
from tunemix.core.evaluation.conventions import METRIC_CODES, Convention, get_convention
from tunemix.core.evaluation.measures import Measure, parse_measures

log = logging.getLogger(__name__)

MAX_LABEL = 1_000_000
MeasureSpec = str | Measure | Sequence[str | Measure]


class EvaluationInputError(ValueError):
    """Input the evaluation (or the tool it reproduces) cannot accept; names the query."""


@dataclass(frozen=True)
class EvaluationResult:
    """Per-query values (float64, NaN = the tool has no value), means, derived flags, warnings.

    All dicts are keyed by the canonical measure string (``str(Measure)``), e.g. ``"ndcg@10"``.
    """

    convention: str
    qids: npt.NDArray[np.str_]
    per_query: dict[str, npt.NDArray[np.float64]]
    mean: dict[str, float]
    derived: dict[str, bool]
    warnings: list[str] = field(default_factory=list)

    @property
    def measures(self) -> list[str]:
        return list(self.mean)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict: ``mean``, ``per_query`` (keyed by qid), ``derived``, ``warnings``;
        NaN becomes None (JSON null)."""

        def clean(v: float) -> float | None:
            return None if np.isnan(v) else float(v)

        per_query = {
            name: {str(q): clean(float(v)) for q, v in zip(self.qids, vals, strict=True)}
            for name, vals in self.per_query.items()
        }
        return {
            "convention": self.convention,
            "mean": {k: clean(v) for k, v in self.mean.items()},
            "per_query": per_query,
            "derived": dict(self.derived),
            "warnings": list(self.warnings),
        }


@dataclass
class _Prepared:
    """The ranked rows (``labels``, ``scores``, ``tiebreak``, ``offsets``: the documents the run
    ranks) and every judged document (``judged_labels``, ``judged_offsets``: the same arrays
    unless the run leaves some judged documents out, ``retrieved``)."""

    labels: npt.NDArray[np.int32]
    scores: npt.NDArray[np.float64]
    tiebreak: npt.NDArray[np.int64]
    offsets: npt.NDArray[np.int64]
    qids: npt.NDArray[np.str_] | None
    max_label: int
    max_n: int
    warnings: list[str]
    judged_labels: npt.NDArray[np.int32]
    judged_offsets: npt.NDArray[np.int64]
    max_judged: int


def _query_name(q: int, qids: npt.NDArray[np.str_] | None) -> str:
    if qids is not None:
        return f"query {str(qids[q])!r} (index {q})"
    return f"query {q} (0-based index)"


def _query_of_row(offsets: npt.NDArray[np.int64], row: int) -> int:
    return int(np.searchsorted(offsets, row, side="right")) - 1


def _decimal_string_rank(offsets: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """Per row, an integer key ordered (within its query) like str(position in the query) under
    strcmp: the trec docid of a document posted without one is its 0-based position in its
    query's list, so a query's result does not depend on which other queries come with it."""
    sizes = np.diff(offsets)
    longest = int(sizes.max()) if sizes.size else 0
    if longest > 10**18:
        raise EvaluationInputError("too many documents to use positions as trec docids")
    keys: npt.NDArray[np.int64] = kernels.decimal_string_keys(longest)
    within = np.arange(int(offsets[-1]), dtype=np.int64) - np.repeat(offsets[:-1], sizes)
    return np.ascontiguousarray(keys[within])


def _docid_texts(docids: npt.ArrayLike, n: int) -> list[str]:
    """The ``n`` docids as Python strings: no fixed-width array padded to the longest id (100,000
    ids one of which is 256 characters long would take 100 MB that way)."""
    if isinstance(docids, np.ndarray):
        shape: tuple[int, ...] = docids.shape
        texts = [str(d) for d in docids.tolist()] if docids.ndim == 1 else []
    else:
        texts = [str(d) for d in docids]  # type: ignore[union-attr]
        shape = (len(texts),)
    if shape != (n,):
        raise EvaluationInputError(f"docids must have one entry per document ({n}), got shape {shape}")
    return texts


def _docid_ranks(texts: list[str]) -> npt.NDArray[np.int64]:
    """Per row, the rank of its docid among the distinct docids in code-point order (which is
    strcmp order of their UTF-8 bytes); equal ids get the same rank."""
    distinct = sorted(set(texts))
    rank = {t: i for i, t in enumerate(distinct)}
    return np.fromiter((rank[t] for t in texts), dtype=np.int64, count=len(texts))


def _validate_labels(
    labels: npt.ArrayLike, offsets: npt.NDArray[np.int64], qids: npt.NDArray[np.str_] | None
) -> npt.NDArray[np.int32]:
    arr = np.asarray(labels)
    if arr.ndim != 1:
        raise EvaluationInputError(f"labels must be a 1-D array, got shape {arr.shape}")
    if arr.dtype.kind == "b":
        arr = arr.astype(np.int64)
    if arr.dtype.kind == "f":
        bad = ~np.isfinite(arr) | (arr != np.round(arr))
        if bad.any():
            row = int(np.argmax(bad))
            q = _query_of_row(offsets, row)
            raise EvaluationInputError(
                f"{_query_name(q, qids)}: label {arr[row].item()!r} at row {row} is not an integer; "
                "relevance labels must be whole numbers 0, 1, 2, ..."
            )
    elif arr.dtype.kind not in "iu":
        raise EvaluationInputError(
            f"labels must be integers (relevance grades), got dtype {arr.dtype}"
        )
    if arr.size:
        lo = arr.min()
        if lo < 0:
            row = int(np.argmax(arr < 0))
            q = _query_of_row(offsets, row)
            raise EvaluationInputError(
                f"{_query_name(q, qids)}: negative label {arr[row].item()!r} at row {row}; "
                "relevance labels must be >= 0"
            )
        if arr.max() > MAX_LABEL:
            row = int(np.argmax(arr > MAX_LABEL))
            q = _query_of_row(offsets, row)
            raise EvaluationInputError(
                f"{_query_name(q, qids)}: label {arr[row].item()!r} at row {row} exceeds {MAX_LABEL}"
            )
    return np.ascontiguousarray(arr, dtype=np.int32)


def _prepare(
    labels: npt.ArrayLike,
    scores: npt.ArrayLike,
    query_offsets: npt.ArrayLike,
    conv: Convention,
    docids: npt.ArrayLike | None,
    qids: npt.ArrayLike | None,
    *,
    validate: bool = True,
    retrieved: npt.ArrayLike | None = None,
) -> _Prepared:
    warnings: list[str] = []
    try:
        off = np.ascontiguousarray(query_offsets, dtype=np.int64)
    except (TypeError, ValueError) as exc:
        raise EvaluationInputError(f"query_offsets must be integers: {exc}") from None
    if off.ndim != 1 or off.shape[0] < 2:
        raise EvaluationInputError(
            "query_offsets must be a 1-D array of running totals [0, n_1, n_1 + n_2, ...] "
            "with at least one query"
        )
    nq = off.shape[0] - 1
    qid_arr: npt.NDArray[np.str_] | None = None
    if qids is not None:
        qid_arr = np.asarray(qids).astype(np.str_)
        if qid_arr.shape != (nq,):
            raise EvaluationInputError(
                f"qids must have one entry per query ({nq}), got shape {qid_arr.shape}"
            )
    if off[0] != 0:
        raise EvaluationInputError(f"query_offsets[0] must be 0, got {int(off[0])}")
    sizes = np.diff(off)
    if np.any(sizes <= 0):
        q = int(np.argmax(sizes <= 0))
        if sizes[q] < 0:
            raise EvaluationInputError(
                f"query_offsets must be non-decreasing; {_query_name(q, qid_arr)} has size "
                f"{int(sizes[q])}"
            )
        raise EvaluationInputError(
            f"{_query_name(q, qid_arr)} is empty (no documents); every query needs at least one"
        )

    n_lab = int(np.shape(labels)[0]) if np.ndim(labels) >= 1 else -1
    if off[-1] != n_lab:
        q = int(np.argmax(off[1:] > n_lab)) if off[-1] > n_lab else nq - 1
        raise EvaluationInputError(
            f"labels has {n_lab} entries but query_offsets[-1] = {int(off[-1])}; "
            f"{_query_name(q, qid_arr)} owns rows {int(off[q])}:{int(off[q + 1])}"
        )
    lab = _validate_labels(labels, off, qid_arr) if validate else np.ascontiguousarray(
        labels, dtype=np.int32
    )
    try:
        sc = np.ascontiguousarray(scores, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise EvaluationInputError(f"scores must be real numbers: {exc}") from None
    if sc.ndim != 1:
        raise EvaluationInputError(f"scores must be a 1-D array, got shape {sc.shape}")
    if sc.shape[0] != lab.shape[0]:
        if sc.shape[0] < lab.shape[0]:
            q = _query_of_row(off, sc.shape[0])
            raise EvaluationInputError(
                f"{_query_name(q, qid_arr)}: labels and scores differ in length "
                f"(labels has {lab.shape[0]} entries, scores {sc.shape[0]}); the query owns rows "
                f"{int(off[q])}:{int(off[q + 1])}"
            )
        raise EvaluationInputError(
            f"labels and scores differ in length: labels has {lab.shape[0]} entries, scores "
            f"{sc.shape[0]} ({_query_name(nq - 1, qid_arr)} is the last query, ending at row "
            f"{int(off[-1])})"
        )
    if validate:
        finite = np.isfinite(sc)
        if not finite.all():
            row = int(np.argmin(finite))
            q = _query_of_row(off, row)
            raise EvaluationInputError(
                f"{_query_name(q, qid_arr)}: score {sc[row].item()!r} at row {row} is not finite; "
                "scores must be real numbers (no NaN or infinity)"
            )
    max_label = int(lab.max())

    doc_texts = None if docids is None else _docid_texts(docids, lab.shape[0])

    tiebreak = np.zeros(0, dtype=np.int64)
    if conv.float32_scores:
        # trec_eval reads scores into a C float, XGBoost stores predictions (base_margin) as
        # float: round to nearest, beyond float32's range +-inf (C's double -> float and numpy
        # agree), so scores equal as float32 tie exactly as in those tools.
        with np.errstate(over="ignore"):
            sc = sc.astype(np.float32).astype(np.float64)
    if conv.tie_rule == "trec":
        # trec_eval sorts by score descending, then by docno descending (strcmp). UTF-8 byte
        # order equals code point order, which numpy uses.
        if doc_texts is None:
            tiebreak = _decimal_string_rank(off)
            warnings.append(
                "trec: no docids given; each document's docid is its 0-based position in its "
                "query's list written as a decimal string; ties go to the larger one in strcmp order"
            )
        else:
            tiebreak = _docid_ranks(doc_texts)
            if validate:
                _check_unique_docids(tiebreak, off, doc_texts, qid_arr)
    prep = _Prepared(
        labels=lab,
        scores=sc,
        tiebreak=tiebreak,
        offsets=off,
        qids=qid_arr,
        max_label=max_label,
        max_n=int(sizes.max()),
        warnings=warnings,
        judged_labels=lab,
        judged_offsets=off,
        max_judged=int(sizes.max()),
    )
    if retrieved is not None:
        _keep_retrieved(prep, conv, retrieved)
    return prep


def _retrieved_mask(retrieved: npt.ArrayLike, n: int) -> npt.NDArray[np.bool_]:
    mask = np.asarray(retrieved)
    if mask.shape != (n,):
        raise EvaluationInputError(f"retrieved must have one entry per document ({n}), got shape {mask.shape}")
    if mask.dtype.kind != "b":
        if mask.dtype.kind not in "iu" or not np.isin(mask, (0, 1)).all():
            raise EvaluationInputError(
                f"retrieved must be booleans (True: the run ranks the document), got dtype {mask.dtype}"
            )
        mask = mask.astype(bool)
    return mask


def _keep_retrieved(prep: _Prepared, conv: Convention, retrieved: npt.ArrayLike) -> None:
    """Narrow ``prep``'s ranked rows to the ``retrieved`` ones (a truncated run), keeping every
    judged document for the ideal DCG and AP's count of relevant documents; refused (naming the
    first query that leaves a judged document out) under a convention whose tool ranks every
    judged document (``Convention.truncated_refusal``)."""
    off = prep.judged_offsets
    mask = _retrieved_mask(retrieved, int(off[-1]))
    if mask.all():
        return
    ranked = np.add.reduceat(mask.astype(np.int64), off[:-1]) if off.shape[0] > 1 else np.zeros(0, np.int64)
    sizes = np.diff(off)
    if conv.truncated_refusal is not None:
        q = int(np.argmax(ranked < sizes))
        raise EvaluationInputError(
            f"{_query_name(q, prep.qids)}: the ranking holds {int(ranked[q])} of the query's {int(sizes[q])} judged "
            f"documents; {conv.truncated_refusal}. Rank every judged document, or evaluate the truncated run under "
            "trec or ranx, whose tools count the others as unretrieved"
        )
    prep.labels = np.ascontiguousarray(prep.judged_labels[mask])
    prep.scores = np.ascontiguousarray(prep.scores[mask])
    if prep.tiebreak.shape[0]:
        prep.tiebreak = np.ascontiguousarray(prep.tiebreak[mask])
    new_off = np.zeros_like(off)
    np.cumsum(ranked, out=new_off[1:])
    prep.offsets = new_off
    prep.max_n = int(ranked.max()) if ranked.size else 0


def _first_duplicate_docid(ranks: npt.NDArray[np.int64], off: npt.NDArray[np.int64]) -> int | None:
    """The row of the first repeated document id within a query (``ranks``: one integer per
    distinct id), or None when every query's ids are distinct."""
    nq = off.shape[0] - 1
    qidx = np.repeat(np.arange(nq, dtype=np.int64), np.diff(off))
    key = qidx * (int(ranks.max()) + 1 if ranks.size else 1) + ranks
    order = np.argsort(key, kind="stable")
    dup = np.flatnonzero(key[order][1:] == key[order][:-1])
    return int(order[dup[0] + 1]) if dup.size else None


def _check_unique_docids(
    ranks: npt.NDArray[np.int64],
    off: npt.NDArray[np.int64],
    docids: list[str],
    qids: npt.NDArray[np.str_] | None,
) -> None:
    row = _first_duplicate_docid(ranks, off)
    if row is not None:
        q = _query_of_row(off, row)
        raise EvaluationInputError(
            f"{_query_name(q, qids)}: document id {str(docids[row])!r} occurs more than once; "
            "trec_eval needs distinct docids within a query"
        )


def _letor_duplicate_warning(
    conv: Convention, docids: npt.ArrayLike | None, off: npt.NDArray[np.int64], qids: npt.NDArray[np.str_] | None
) -> str | None:
    """letor3/letor4: the LETOR scripts key a query's documents by ``#docid`` in a hash, so a
    repeated id keeps only its last line there (the MSLR script keys by line number instead)."""
    if conv.name not in ("letor3", "letor4") or docids is None:
        return None
    texts = _docid_texts(docids, int(off[-1]))
    row = _first_duplicate_docid(_docid_ranks(texts), off)
    if row is None:
        return None
    q = _query_of_row(off, row)
    return (
        f"{conv.name}: {_query_name(q, qids)} has document id {texts[row]!r} more than once; "
        f"{conv.tool} keys documents by id, so it would keep only the last such line and evaluate "
        "fewer documents than we do"
    )


def _check_err_labels(prep: _Prepared, conv: Convention, measure: Measure, table: Any) -> None:
    bad_labels = np.flatnonzero(table > 1.0)
    if bad_labels.size == 0:
        return
    first_bad = int(bad_labels[0])
    mask = prep.judged_labels >= first_bad
    if not mask.any():
        return
    row = int(np.argmax(mask))
    q = _query_of_row(prep.judged_offsets, row)
    top = measure.top if measure.top is not None else conv.err_top
    raise EvaluationInputError(
        f"{_query_name(q, prep.qids)}: label {int(prep.judged_labels[row])} at row {row} is above the "
        f"top grade {top} that {measure} assumes under {conv.name} (its stopping probability "
        f"would exceed 1); use labels 0..{top} or ask for err:top=<max label>"
    )


def _check_gain_labels(prep: _Prepared, conv: Convention, measure: Measure) -> None:
    """LightGBM (label_gain has 31 entries) and XGBoost (exponential gain) refuse high labels."""
    limit = conv.exp_label_limit
    if (
        limit is None
        or measure.name not in ("ndcg", "dcg", "meanndcg")
        or conv.measure_gain_kind(measure) != "exponential"
        or prep.max_label <= limit
    ):
        return
    row = int(np.argmax(prep.judged_labels > limit))
    q = _query_of_row(prep.judged_offsets, row)
    raise EvaluationInputError(
        f"{_query_name(q, prep.qids)}: label {int(prep.judged_labels[row])} at row {row} is above {limit}, "
        f"the largest label {conv.tool} accepts for {measure.name} with the gain 2^l - 1"
    )


def _single_document_warning(conv: Convention, prep: _Prepared, measures: list[Measure]) -> str | None:
    """sklearn's ndcg_score/dcg_score refuse a list of one document; we give its formula's value."""
    if not conv.average_ties or not any(m.name in ("ndcg", "dcg") for m in measures):
        return None
    sizes = np.diff(prep.judged_offsets)
    n_single = int(np.count_nonzero(sizes == 1))
    if n_single == 0:
        return None
    q = int(np.argmax(sizes == 1))
    return (
        f"{conv.name}: {n_single} single-document queries (first: {_query_name(q, prep.qids)}); "
        f"{conv.tool} refuses such a list, their values follow its per-query formula "
        "(NDCG 1 if the label is positive, else 0; DCG the label)"
    )


def _ranking(
    prep: _Prepared, conv: Convention, measures: list[Measure]
) -> tuple[npt.NDArray[np.int64], list[str]]:
    """Each query ranked once for all ``measures`` (the longest prefix any of them reads), and a
    warning naming the ranx queries whose tie order could not follow numba's quicksort within
    its cost bound (see :mod:`.ranking_kernels`)."""
    prefix = 1
    for m in measures:
        cutoff = conv.ndcg_cutoff(m) or 0
        full = METRIC_CODES[m.name] in (kernels.AP, kernels.MEANNDCG) or cutoff <= 0
        prefix = max(prefix, prep.max_n if full else cutoff)
    order, fallback = ranking_kernels.rank_queries(
        prep.scores, prep.tiebreak, conv.tie_code(), prep.offsets, prefix
    )
    warnings: list[str] = []
    tied = np.flatnonzero(fallback == 2)
    if tied.size:
        warnings.append(
            f"{conv.name}: {tied.size} queries (first: {_query_name(int(tied[0]), prep.qids)}) list "
            "their scores in an order on which numba's quicksort, ranx's sort, takes quadratic time; "
            "they were ranked by a merge sort instead, so their tied scores keep input order, "
            "which may differ from ranx's order of those ties"
        )
    return order, warnings


def _values(prep: _Prepared, conv: Convention, measure: Measure, order: npt.NDArray[np.int64],
            tables: dict[tuple[Any, ...], Any] | None = None) -> npt.NDArray[np.float64]:
    """One measure's per-query values, read from ``order`` (:func:`_ranking`). ``tables``: the
    lookup tables already built for ``prep`` under ``conv`` (filled here): each is built once
    per evaluation, not once per measure (a label of a million and a thousand measures would
    otherwise build a billion entries)."""
    tables = {} if tables is None else tables
    max_label = prep.max_label

    def table(key: tuple[Any, ...], build: Any) -> Any:
        if key not in tables:
            tables[key] = build()
        return tables[key]

    gain = table(("gain", conv.measure_gain_kind(measure)), lambda: conv.measure_gain_values(max_label, measure))
    disc = table(("disc",), lambda: conv.discount_values(max(prep.max_judged, 1)))
    rel = table(("rel",), lambda: conv.relevant_values(max_label))
    err_r = table(("err", measure.top), lambda: conv.err_values(max_label, measure.top))
    if measure.name == "err":
        _check_err_labels(prep, conv, measure, err_r)
    _check_gain_labels(prep, conv, measure)
    out: npt.NDArray[np.float64] = kernels.query_values(
        prep.labels,
        prep.scores,
        order,
        conv.average_ties,
        prep.offsets,
        METRIC_CODES[measure.name],
        conv.ndcg_cutoff(measure) or 0,
        conv.short_code(),
        conv.p_code(),
        conv.measure_empty_value(measure),
        gain,
        disc,
        rel,
        err_r,
        prep.judged_labels,
        prep.judged_offsets,
    )
    return out


def _check_supported(conv: Convention, measures: list[Measure]) -> None:
    for m in measures:
        reason = conv.unsupported_reason(m)
        if reason is not None:
            raise EvaluationInputError(reason)


def evaluate(
    labels: npt.ArrayLike,
    scores: npt.ArrayLike,
    query_offsets: npt.ArrayLike,
    measures: MeasureSpec,
    convention: str | Convention = "yahoo",
    *,
    docids: npt.ArrayLike | None = None,
    qids: npt.ArrayLike | None = None,
    retrieved: npt.ArrayLike | None = None,
) -> EvaluationResult:
    """Evaluate every query under ``convention`` (letor3|letor4|mslr|yahoo|ranklib|trec|
    lightgbm|xgboost|sklearn|ranx).

    ``retrieved`` (booleans, one per row; None: all True) marks the documents a truncated run
    ranks: a row marked False is judged but unretrieved, as trec_eval and ranx count a judged
    document missing from the run: it enters the ideal DCG and AP's count of relevant documents,
    never a rank; a query may retrieve none (every value then 0). The other eight tools score
    every judged document and refuse such a run (docs/conventions.md, "Truncated runs").

    ``measures``: ``"ndcg@10,err"``, a :class:`Measure`, or a list of either. Returns per-query
    values (NaN where the tool has no value: letor3 NDCG@k/P@k with n < k), the tool's mean
    (letor3 adds 0 for such queries and divides by all queries), ``derived`` flags for metrics
    the tool lacks, and warnings (labels the convention ignores, trec without docids, sklearn
    single-document queries).

    Raises :class:`EvaluationInputError` (a ValueError) naming the query (``qids`` when given,
    else the 0-based index) for negative or non-integer labels, NaN/inf scores, empty queries,
    length mismatches, duplicate docids under trec, ERR labels above the top grade, labels
    LightGBM (> 30) or XGBoost (> 31) refuse for NDCG with the gain 2^l - 1, cutoffs the
    tool does not support (letor3 1..16, letor4/mslr 1..10 for NDCG and P), and a truncated run
    under a convention whose tool ranks every judged document.
    """
    conv = get_convention(convention)
    ms = list(dict.fromkeys(parse_measures(measures)))
    _check_supported(conv, ms)
    prep = _prepare(labels, scores, query_offsets, conv, docids, qids, retrieved=retrieved)
    warnings = list(prep.warnings)
    dup_warning = _letor_duplicate_warning(conv, docids, prep.judged_offsets, prep.qids)
    if dup_warning is not None:
        warnings.append(dup_warning)
    if conv.meaningful_max_label is not None and prep.max_label > conv.meaningful_max_label:
        n_above = int(np.count_nonzero(prep.judged_labels > conv.meaningful_max_label))
        msg = conv.label_warning(prep.max_label, n_above)
        if msg is not None:
            warnings.append(msg)
    single = _single_document_warning(conv, prep, ms)
    if single is not None:
        warnings.append(single)
    per_query: dict[str, npt.NDArray[np.float64]] = {}
    mean: dict[str, float] = {}
    derived: dict[str, bool] = {}
    tables: dict[tuple[Any, ...], Any] = {}
    order, rank_warnings = _ranking(prep, conv, ms)
    warnings.extend(rank_warnings)
    for m in ms:
        check_deadline(f"evaluation under {conv.name}, before {m}")
        key = str(m)
        note = conv.extension_note(m)
        if note is not None:
            warnings.append(note)
        vals = _values(prep, conv, m, order, tables)
        per_query[key] = vals
        mean[key] = float(kernels.mean_of_values(vals))
        derived[key] = not conv.is_native(m)
    for w in warnings:
        log.debug("%s", w)
    nq = prep.offsets.shape[0] - 1
    qid_out = prep.qids if prep.qids is not None else np.arange(nq).astype(np.str_)
    return EvaluationResult(
        convention=conv.name,
        qids=qid_out,
        per_query=per_query,
        mean=mean,
        derived=derived,
        warnings=warnings,
    )


def mean_metric(
    labels: npt.ArrayLike,
    scores: npt.ArrayLike,
    query_offsets: npt.ArrayLike,
    measure: str | Measure,
    convention: str | Convention = "yahoo",
    *,
    docids: npt.ArrayLike | None = None,
    validate: bool = True,
) -> float:
    """The tool's mean of one measure: the fast path for training loops.

    Same rules and errors as :func:`evaluate` (no warnings). ``validate=False`` skips the O(n)
    checks of labels, scores and docids for inputs already validated once (e.g. a grid search
    scoring many candidate score vectors against the same labels).
    """
    conv = get_convention(convention)
    m = Measure.parse(measure)
    _check_supported(conv, [m])
    prep = _prepare(labels, scores, query_offsets, conv, docids, None, validate=validate)
    order, _ = _ranking(prep, conv, [m])
    return float(kernels.mean_of_values(_values(prep, conv, m, order)))
