"""``encode_answer`` (an answer encoded in pieces of at most ``ENCODE_PIECE`` documents) against
its slow twin, one ``ENCODER.encode`` of the whole answer: the same bytes, for answers of every
shape, with names and ids that hold the bytes the splice looks for."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tunemix.service import rank_answer
from tunemix.service.rank_answer import ENCODER, RankAnswer, RankedDocument, RankedQuery, encode_answer
from tunemix.service.routers.fuse import FuseAnswer

TRICKY = ['"results":[]', '"ranking":[]', 'a"b', "\\", "ü", "\u2028", "results", ""]
texts = st.one_of(st.sampled_from(TRICKY), st.text(max_size=12))
ids = st.one_of(texts, st.integers(-(2**63), 2**63 - 1))
numbers = st.floats(allow_nan=False, allow_infinity=False)


@st.composite
def a_document(draw: Any) -> RankedDocument:
    relevance = draw(st.none() | numbers)
    return RankedDocument(id=draw(ids), score=draw(numbers), rank=draw(st.integers(1, 10**6)), relevance=relevance,
                          probabilities=None if relevance is None else draw(st.lists(numbers, max_size=3)))


@st.composite
def a_query(draw: Any) -> RankedQuery:
    ranking = draw(st.lists(a_document(), max_size=9))
    return RankedQuery(qid=draw(ids), n_documents=len(ranking) + draw(st.integers(0, 3)), ranking=ranking)


@settings(max_examples=400, deadline=None)
@given(results=st.lists(a_query(), max_size=5), name=texts, version=texts, piece=st.integers(1, 4),
       fuse=st.booleans())
def test_the_pieces_make_the_bytes_of_one_encode(results: list[RankedQuery], name: str, version: str, piece: int,
                                                 fuse: bool) -> None:
    answer: Any = (FuseAnswer(method=name, results=results, server_time_ms=1.5) if fuse else
                   RankAnswer(model=name, version=version, results=results, server_time_ms=0.25))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(rank_answer, "ENCODE_PIECE", piece)
        got = encode_answer(answer)
    assert got == ENCODER.encode(answer)


def test_a_large_answer_is_encoded_in_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    """100,000 documents: no call encodes more than ``ENCODE_PIECE`` of them."""
    sizes: list[int] = []

    class Counting:
        def encode(self, obj: Any) -> bytes:
            if isinstance(obj, list):
                sizes.append(len(obj))
            elif isinstance(obj, RankedQuery):
                sizes.append(len(obj.ranking))
            else:
                sizes.append(sum(len(q.ranking) for q in obj.results))
            return ENCODER.encode(obj)

    docs = [RankedDocument(id=str(j), score=j / 7, rank=j + 1) for j in range(50_000)]
    answer = RankAnswer(model="m", version="v1", results=[
        RankedQuery(qid="big", n_documents=50_000, ranking=docs),
        *[RankedQuery(qid=f"q{i}", n_documents=500, ranking=docs[:500]) for i in range(100)]], server_time_ms=1.0)
    monkeypatch.setattr(rank_answer, "ENCODER", Counting())
    got = encode_answer(answer)
    assert got == ENCODER.encode(answer)
    assert max(sizes) <= rank_answer.ENCODE_PIECE
