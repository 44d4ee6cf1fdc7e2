"""/rank's answer: the msgspec structs that are encoded and sent (their schema is the OpenAPI
answer, ``tunemix.service.openapi.msgspec_answer_spec``) and ``ranked``, which sorts each query's
documents into them."""

from __future__ import annotations

from typing import Annotated

import msgspec
import numpy as np
import numpy.typing as npt

from tunemix.core.deadline import check_deadline, step_of_long_work
from tunemix.service.parsing import CandidateLists
from tunemix.service.rank_body import Id, Options


def described(description: str, *examples: object) -> msgspec.Meta:
    """A field's description (and examples) in the OpenAPI answer schema; no constraint."""
    return msgspec.Meta(description=description, examples=list(examples) if examples else None)


class Contribution(msgspec.Struct):
    """One feature's part of a document's score."""

    feature: Annotated[str, described("the feature's name (the model's feature_names; default f1, f2, ...)", "f40")]
    value: Annotated[float, described("the document's value of the feature", 0.83)]
    contribution: Annotated[float, described("its Shapley value: what it adds to the score from the baseline", 0.212)]


class Explained(msgspec.Struct, omit_defaults=True):
    """Why a document scores what it scores: baseline + contributions + rest = score."""

    baseline: Annotated[float, described("the rest of the list: the score the query's per-feature median document "
                                         "would "
                                  "get in this document's place", 0.04)]
    contributions: Annotated[list[Contribution], described('the "explain" largest contributions by absolute value')]
    rest: Annotated[float, described("the other features' contributions together: baseline + contributions + rest = "
                              "score", 0.013)]
    exact: Annotated[bool, described("true: exact (the default explanations, the same on every call); false: a sampled "
                              "estimate that still adds up")]
    standard_error: Annotated[float | None, described("sampled: the largest standard error of a contribution")] = None


# not tracked by the cyclic collector (gc=False: it holds an id, numbers, a list of numbers and an
# explanation, never a cycle): an answer of 1,000 of them would otherwise start a collection of its own
class RankedDocument(msgspec.Struct, omit_defaults=True, gc=False):
    """One ranked document."""

    id: Annotated[Id, described("the document's id, as posted", "d7")]
    score: Annotated[float, described("the ranking score: higher first; comparable within the query", 1.2731)]
    rank: Annotated[int, described("1-based position", 1)]
    relevance: Annotated[float | None, described('with "relevance": true: the expected grade E[y], comparable across '
                                          "queries (never higher further down a list)", 1.42)] = None
    probabilities: Annotated[list[float] | None, described('with "relevance": true: P(y = k) for grades k = 0, 1, ... '
                                                    "(sums to 1)", [0.21, 0.16, 0.63])] = None
    explanation: Annotated[Explained | None, described('with "explain": k: why this score')] = None


class PairContribution(msgspec.Struct):
    """One feature's part of score(a) - score(b)."""

    feature: Annotated[str, described("the feature's name", "f40")]
    value_a: Annotated[float, described("document a's value", 0.83)]
    value_b: Annotated[float, described("document b's value", 0.12)]
    contribution: Annotated[float, described("its contribution to score(a) - score(b)", 0.19)]


class PairExplained(msgspec.Struct, omit_defaults=True):
    """Why document a scores above (or below) document b: baseline + contributions + rest =
    score_difference."""

    a: Annotated[Id, described("document a's id, as posted")]
    b: Annotated[Id, described("document b's id, as posted")]
    score_difference: Annotated[float, described("score(a) - score(b)", 0.35)]
    baseline: Annotated[float, described("the rest of the list: baseline(a) - baseline(b), what the other documents "
                                         "do to "
                                  "a's score against b's (through the per-query rescaling of the mix; 0 without "
                                  "it)", 0.0)]
    contributions: Annotated[list[PairContribution], described("the largest contributions to the difference")]
    rest: Annotated[float,
                    described("the other features' together: baseline + contributions + rest = score_difference")]
    exact: Annotated[bool, described("true: exact; false: a sampled estimate that still adds up")]
    standard_error: Annotated[float | None, described("sampled: the largest standard error of a contribution")] = None


class RankedQuery(msgspec.Struct, omit_defaults=True):
    """One posted query, ranked."""

    qid: Annotated[Id, described("the query's id, as posted", "q1")]
    n_documents: Annotated[int, described("documents posted for the query (the ranking may hold fewer: top_k)", 2)]
    ranking: Annotated[list[RankedDocument], described("the documents best first (ties keep the posted order)")]
    pair: Annotated[PairExplained | None, described('with the query\'s "explain_pair": [a, b]: why a scores above (or '
                                             "below) b")] = None


class RankAnswer(msgspec.Struct):
    """The answer of POST /rank."""

    model: Annotated[str, described("the model that scored the request", "default")]
    version: Annotated[str, described("its version", "v3")]
    results: Annotated[list[RankedQuery], described("one entry per posted query, in the posted order")]
    server_time_ms: Annotated[float, described("time in the handler, from the first body byte read to the answer "
                                        "serialised", 1.84)]


ENCODER = msgspec.json.Encoder()
#: the options of a request that asks for nothing but the ranking
NO_OPTIONS = Options()
#: documents ``encode_answer`` encodes per call at most
ENCODE_PIECE = 2000


def encode_answer(answer: msgspec.Struct) -> bytes:
    """``ENCODER.encode(answer)`` (a /rank or /fuse answer), the same bytes, made by calls of at most
    ``ENCODE_PIECE`` documents each: one call holds the GIL for its whole length (100,000 ranked
    documents: 25-50 ms), and a worker's other requests wait for it. The pieces are spliced into
    the encoding with empty lists (``splice``)."""
    results: list[RankedQuery] = answer.results  # type: ignore[attr-defined]
    if sum(len(q.ranking) for q in results) <= ENCODE_PIECE:
        return ENCODER.encode(answer)
    queries = []
    for q in results:
        step_of_long_work("/rank: encoding the answer")
        if len(q.ranking) <= ENCODE_PIECE:
            queries.append(ENCODER.encode(q))
            continue
        documents = [ENCODER.encode(q.ranking[i:i + ENCODE_PIECE])[1:-1]
                     for i in range(0, len(q.ranking), ENCODE_PIECE)]
        queries.append(splice(ENCODER.encode(msgspec.structs.replace(q, ranking=[])), b"ranking", documents))
    return splice(ENCODER.encode(msgspec.structs.replace(answer, results=[])), b"results", queries)


def splice(empty: bytes, field: bytes, items: list[bytes]) -> bytes:
    """``empty`` (an encoding whose list ``field`` is ``[]``) with ``items`` (encoded values) in that
    list. The key is found as the last ``"<field>":[]`` of the encoding: a string holds a quote
    only escaped, so no string value holds those bytes, and the fields after it (a number, the
    other fields' keys and values) are not it."""
    key = b'"' + field + b'":[]'
    at = empty.rindex(key) + len(key) - 1
    return empty[:at] + b",".join(items) + empty[at:]


def ranked(scores: npt.NDArray[np.float64], lists: CandidateLists, top_k: int | None,
           head: tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]] | None = None,
           options: Options = NO_OPTIONS, explained: dict[int, Explained] | None = None) -> list[RankedQuery]:
    """Each query's documents best first (a stable sort: ties keep the posted order; NaN last).
    With ``head`` (grade probabilities (n, K), expected grades (n,)): each list cut where the
    estimates fall below the thresholds (they never rise down a list, so the cut keeps a prefix
    of the ranking), and each document's relevance when ``options.relevance``."""
    out = []
    off = lists.offsets.tolist()
    ids = lists.ids
    with_relevance = head is not None and options.relevance
    for q, qid in enumerate(lists.qids):
        check_deadline("ranking the queries")
        lo, hi = off[q], off[q + 1]
        s = scores[lo:hi]
        order = np.argsort(-s, kind="stable")[:top_k]
        probs, expected = (head[0][lo:hi], head[1][lo:hi]) if head is not None else (None, None)
        if probs is not None and expected is not None:
            keep = np.ones(order.shape[0], dtype=bool)
            if options.min_relevance is not None:
                keep &= expected[order] >= options.min_relevance
            if options.min_probability is not None:
                keep &= 1.0 - probs[order, 0] >= options.min_probability
            order = order[: order.shape[0] if keep.all() else int(np.argmin(keep))]
        rows, values = order.tolist(), s[order].tolist()
        if with_relevance and probs is not None and expected is not None:
            ranking = [RankedDocument(id=ids[lo + j], score=v, rank=r, relevance=e, probabilities=p)
                       for r, (j, v, e, p) in enumerate(zip(rows, values, expected[order].tolist(),
                                                            probs[order].tolist(), strict=True), start=1)]
        else:
            ranking = [RankedDocument(id=ids[lo + j], score=v, rank=r)
                       for r, (j, v) in enumerate(zip(rows, values, strict=True), start=1)]
        if explained:
            for doc, j in zip(ranking, rows, strict=True):
                doc.explanation = explained.get(lo + j)
        out.append(RankedQuery(qid=qid, n_documents=hi - lo, ranking=ranking))
    return out


