"""What an answer may weigh, known before the work: an upper bound of each endpoint's answer in
bytes, computed from the decoded request, and a 413 when it passes ``TUNEMIX_MAX_ANSWER_BYTES``.

Every part of an answer is counted at its largest JSON form:

- a float at ``FLOAT_CHARS`` (24) bytes: the longest form msgspec and pydantic-core write for a
  double (``-2.2250738585072014e-308``; NaN and infinities are shorter);
- an integer (a rank, a count) at the digits of the largest it can be;
- an id, a qid, a model name, a measure at its length as encoded: msgspec writes them, and
  pydantic-core escapes the same characters the same way (``\\u0000``-``\\u001f``, ``"``,
  ``\\``; any other character as its UTF-8 bytes), so the length is exact;
- the keys and punctuation of each struct as the encoder writes them (``fixed_bytes``: a struct
  encoded with empty values, less those values), with a comma after each item of a list;
- a message (an /evaluate warning or a convention's error) at ``MESSAGE_BYTES`` of text and
  numbers, plus ``ID_REPR_BYTES`` for each id it may quote (Python's ``repr`` inside JSON:
  at most 11 bytes a character, ``\\U000e0001`` with its backslash escaped).

A /rank or /fuse answer holds each query's documents (``top_k`` of them at most), ids as posted;
with ``relevance``, each one's expected grade and one probability per grade of the model's head;
with explanations, each explained document's contributions (at most ``explain`` features, named)
and each pair's. An /evaluate answer holds, per convention, each measure's mean and derived flag,
its warnings, and with ``per_query`` each query's value of each measure keyed by its qid.

A request past the bound is refused with the query where the running total passes it (the
queries before it fit), before any scoring, fusion or evaluation. The estimate is checked
against the encoded answers by ``tests/service/test_answer_size.py`` (generated requests).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec
import numpy as np
import numpy.typing as npt
import pydantic_core

from tunemix.service.errors import query_label, too_large
from tunemix.service.parsing import CandidateLists
from tunemix.service.rank_answer import (
    Contribution,
    Explained,
    PairContribution,
    PairExplained,
    RankAnswer,
    RankedDocument,
    RankedQuery,
)
from tunemix.service.rank_body import Options
from tunemix.service.registry import ServedModel

ENCODER = msgspec.json.Encoder()

#: bytes of the longest JSON form of a double, as msgspec and pydantic-core write it
FLOAT_CHARS = 24
#: bytes of an /evaluate message's text and numbers, besides the ids it quotes
MESSAGE_BYTES = 1024
#: bytes one character of an id takes in a message (``repr`` of a non-printable astral
#: character, ``\U000e0001``, with its backslash escaped in JSON)
REPR_BYTES_PER_CHAR = 11


def fixed_bytes(value: Any, *parts: Any) -> int:
    """The bytes of ``value`` encoded, less those of ``parts`` (the values in it):
    its keys and punctuation."""
    return len(ENCODER.encode(value)) - sum(len(ENCODER.encode(p)) for p in parts)


_EXPLAINED = Explained(baseline=0.0, contributions=[], rest=0.0, exact=False, standard_error=0.0)
_PAIR = PairExplained(a="", b="", score_difference=0.0, baseline=0.0, contributions=[], rest=0.0, exact=False,
                      standard_error=0.0)
#: a ranked document's keys and punctuation, and the comma after it
DOCUMENT = fixed_bytes(RankedDocument(id="", score=0.0, rank=0), "", 0.0, 0) + 1
#: what ``relevance`` adds to a document besides its floats (keys, the brackets of its probabilities)
RELEVANCE = fixed_bytes(RankedDocument(id="", score=0.0, rank=0, relevance=0.0, probabilities=[]), "", 0.0, 0, 0.0) - (
    DOCUMENT - 1)
#: what an explanation adds to a document besides its floats and contributions
EXPLANATION = fixed_bytes(RankedDocument(id="", score=0.0, rank=0, explanation=_EXPLAINED), "", 0.0, 0,
                     0.0, 0.0, False, 0.0) - (DOCUMENT - 1)
CONTRIBUTION = fixed_bytes(Contribution(feature="", value=0.0, contribution=0.0), "", 0.0, 0.0) + 1
#: a ranked query's keys and punctuation besides its documents, and the comma after it
QUERY = fixed_bytes(RankedQuery(qid="", n_documents=0, ranking=[]), "", 0) + 1
#: what a pair adds to its query besides its ids, floats and contributions
PAIR = fixed_bytes(RankedQuery(qid="", n_documents=0, ranking=[], pair=_PAIR), "", 0, "", "", 0.0, 0.0, 0.0, False,
              0.0) - (QUERY - 1)
PAIR_CONTRIBUTION = fixed_bytes(PairContribution(feature="", value_a=0.0, value_b=0.0, contribution=0.0), "", 0.0, 0.0,
                           0.0) + 1
#: /rank's envelope besides its model name and version
RANK_ENVELOPE = fixed_bytes(RankAnswer(model="", version="", results=[], server_time_ms=0.0), "", "", 0.0) + FLOAT_CHARS
#: ``false``, the longer of the two booleans
BOOL = 5


def encoded_bytes(values: Sequence[Any]) -> int:
    """The bytes of ``values`` as JSON, each alone (exact: one encoder call for them all)."""
    n = len(values)
    return len(ENCODER.encode(values)) - 2 - max(n - 1, 0) if n else 0


def id_repr_bytes(max_id_length: int) -> int:
    """The bytes an id of at most ``max_id_length`` characters takes quoted in a message."""
    return REPR_BYTES_PER_CHAR * max_id_length + 4


def refuse_past(limit: int, fixed: int, per_query: npt.NDArray[np.int64], qids: Sequence[Any], endpoint: str,
                what: str, hint: str) -> int:
    """``fixed + sum(per_query)``, the answer's bound in bytes; 413 when it passes ``limit``,
    naming the query where the running total does (the queries before it fit), or the endpoint
    when ``fixed`` alone does."""
    running = fixed + np.cumsum(per_query)
    total = int(running[-1]) if running.shape[0] else fixed
    if total <= limit:
        return total
    passed = running > limit
    if fixed > limit or not passed.any():
        raise too_large(f"{endpoint}: the answer would take up to {total} bytes of JSON ({what}); the limit is "
                        f"{limit} bytes (TUNEMIX_MAX_ANSWER_BYTES): {hint}")
    q = int(np.argmax(passed))
    raise too_large(f"{query_label(q, qids[q])}: the answer would take up to {int(running[q])} bytes of JSON with "
                    f"the queries up to this one, {int(per_query[q])} for this one ({what}); the limit is {limit} "
                    f"bytes (TUNEMIX_MAX_ANSWER_BYTES): {hint}")


def check_ranked_answer(limit: int, envelope: int, offsets: npt.NDArray[np.int64], qids: list[Any],
                        ids: list[Any], top_k: int | None, *, endpoint: str, per_document: int = 0,
                        extra: npt.NDArray[np.int64] | None = None, what: str, hint: str) -> int:
    """The bound in bytes of an answer of ranked queries (/rank's, /fuse's); 413 past ``limit``:
    ``envelope`` the answer's bytes besides its results; each query's first ``top_k`` documents
    with their score and rank and ``per_document`` bytes more (relevance, an explanation); each
    query's ``extra`` bytes (a pair's explanation); every id and qid as encoded (every id counts,
    though ``top_k`` may cut its list)."""
    n_queries, n_documents = len(qids), int(offsets[-1])
    sizes = None if n_queries == 1 else np.diff(offsets)
    longest = n_documents if sizes is None else int(sizes.max(initial=0))
    cut = longest if top_k is None else min(top_k, longest)  # top_k may exceed 64 bits
    if sizes is None or cut == longest:
        shown = min(n_documents, cut) if sizes is None else n_documents
    else:
        shown = int(np.minimum(sizes, cut).sum())
    digits = len(str(longest))  # a rank or n_documents has at most the digits of the longest list
    document = DOCUMENT + FLOAT_CHARS + digits + per_document
    total = (envelope + encoded_bytes(qids) + encoded_bytes(ids) + n_queries * (QUERY + digits) + shown * document
             + (int(extra.sum()) if extra is not None else 0))
    if total <= limit:
        return total
    # refused: each query's part, its own ids and qid included, to name the query
    sizes = np.diff(offsets)
    per_query = QUERY + digits + np.minimum(sizes, cut) * document
    if extra is not None:
        per_query = per_query + extra
    off = offsets.tolist()
    own = np.asarray([encoded_bytes(ids[off[q]:off[q + 1]]) + encoded_bytes(qids[q:q + 1])
                      for q in range(n_queries)], dtype=np.int64)
    return refuse_past(limit, envelope, per_query + own, qids, endpoint, what, hint)


def relevance_bytes(n_grades: int) -> int:
    """What ``relevance`` adds to a ranked document: its expected grade and ``n_grades`` probabilities."""
    return RELEVANCE + FLOAT_CHARS + n_grades * (FLOAT_CHARS + 1)


def _name_bytes(names: Sequence[str]) -> int:
    return max((len(ENCODER.encode(n)) for n in names), default=2)


def explanation_bytes(names: Sequence[str], shown: int) -> int:
    """What an explanation adds to a document: at most ``shown`` contributions, named ``names``."""
    return (EXPLANATION + 3 * FLOAT_CHARS + BOOL
            + min(shown, len(names)) * (CONTRIBUTION + _name_bytes(names) + 2 * FLOAT_CHARS))


def pair_bytes(names: Sequence[str], shown: int, a: Any, b: Any) -> int:
    """What the explained pair of ids ``a`` and ``b`` adds to its query: at most ``shown``
    contributions, named ``names``."""
    return (PAIR + encoded_bytes([a, b]) + 4 * FLOAT_CHARS + BOOL
            + min(shown, len(names)) * (PAIR_CONTRIBUTION + _name_bytes(names) + 3 * FLOAT_CHARS))


def check_rank_answer(served: ServedModel, lists: CandidateLists, options: Options, limit: int,
                      pair_top: int) -> int:
    """The bound in bytes of /rank's answer to ``lists`` with ``options``; 413 past ``limit``
    (``pair_top``: the contributions a pair shows when the request asks for no ``explain``)."""
    head = served.model.relevance_head
    per_document = relevance_bytes(head.n_grades) if options.relevance and head is not None else 0
    asked = ["relevance"] if per_document else []
    if options.explain:
        per_document += explanation_bytes(served.feature_names, options.explain)
        asked.append("explain")
    extra = None
    if options.pairs:
        extra = np.zeros(len(lists.qids), dtype=np.int64)
        for q, a, b in options.pairs:
            extra[q] += pair_bytes(served.feature_names, options.explain or pair_top, lists.ids[a], lists.ids[b])
        asked.append("explain_pair")
    envelope = RANK_ENVELOPE + encoded_bytes([served.name, served.version])
    with_ = ", ".join(asked)
    return check_ranked_answer(
        limit, envelope, lists.offsets, lists.qids, lists.ids, options.top_k, endpoint="/rank",
        per_document=per_document, extra=extra,
        what=f"each query's ranked documents with their ids{' and ' + with_ if with_ else ''}",
        hint="ask for a smaller top_k" + (", without relevance" if per_document else "")
             + ", or split the queries over several requests")


# ---------------------------------------------------------------------------- /evaluate
def _json_bytes(value: Any) -> int:
    return len(pydantic_core.to_json(value))


#: /evaluate's envelope besides its model name, version and query count
EVALUATE_ENVELOPE = _json_bytes({"results": [], "n_queries": 0, "model": "", "version": "",
                                 "server_time_ms": 0.0}) - 1 - 2 - 2 - 3 + FLOAT_CHARS
#: one convention's result besides its name, measures and messages, with an error besides it
#: (a convention that fails under "all" answers an error and empty values: fewer bytes), and the
#: comma after it
CONVENTION = _json_bytes({"convention": "", "error": "", "mean": {}, "per_query": {}, "derived": {},
                          "warnings": []}) - 2 - 2 + 1


def check_evaluate_answer(limit: int, qids: Sequence[Any], measures: Sequence[str], conventions: Sequence[str],
                          per_query: bool, model: str | None, version: str | None, max_id_length: int) -> int:
    """The bound in bytes of /evaluate's answer; 413 past ``limit``. Per convention: each
    measure's mean and derived flag, its messages (a note per measure, a few warnings or an
    error, quoting a qid or a docid), and with ``per_query`` each query's value of each measure
    keyed by its qid (``str(qid)``)."""
    keys = encoded_bytes(list(measures))
    n_measures = len(measures)
    # a note per measure, four warnings (trec's, labels', a repeated docid's, a tie order's) or an
    # error, and one more; those of the ids, tie orders and errors quote two ids at most
    messages = (n_measures + 6) * (MESSAGE_BYTES + 3) + 4 * 2 * id_repr_bytes(max_id_length)
    one = (CONVENTION + max(map(len, conventions), default=0) + 2 + messages
           + 2 * (keys + n_measures * 3) + n_measures * (FLOAT_CHARS + BOOL))
    if per_query:
        one += keys + n_measures * 4
    envelope = (EVALUATE_ENVELOPE + len(str(len(qids)))
                + (encoded_bytes([model]) if model is not None else 4)
                + (encoded_bytes([version]) if version is not None else 4))
    fixed = envelope + len(conventions) * one
    if per_query:
        texts = [str(q) for q in qids]
        per = (np.asarray([len(ENCODER.encode(t)) for t in texts], dtype=np.int64) + 2 + FLOAT_CHARS) * (
            n_measures * len(conventions))
    else:
        per = np.zeros(len(qids), dtype=np.int64)
    what = (f"{len(conventions)} convention(s) x {n_measures} measure(s)"
            + (" of each query's value keyed by its qid" if per_query else ""))
    hint = ("ask for fewer measures or one convention, send shorter qids, or split the queries over several "
            "requests" if per_query else "ask for fewer measures or one convention")
    return refuse_past(limit, fixed, per, qids, "/evaluate", what, hint)
