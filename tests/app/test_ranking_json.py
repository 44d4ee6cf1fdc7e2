"""The /rank results written by app.ranking_json against their slow twin: a dict per document
(``app.parsing.ranked``) serialised by pydantic-core. The bytes must be the same."""

from __future__ import annotations

from typing import Any

import numpy as np
import pydantic_core
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.parsing import CandidateLists, ranked
from app.ranking_json import ranked_json

ident = st.one_of(st.text(max_size=5), st.integers(-(10**25), 10**25))
score = st.one_of(st.floats(allow_infinity=True, allow_nan=True), st.sampled_from([0.0, -0.0, 1.0, 1e-300, 5e-324]))


def lists_of(sizes: list[int], qids: list[Any], ids: list[Any]) -> CandidateLists:
    offsets = np.zeros(len(sizes) + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    return CandidateLists(features=np.zeros((int(offsets[-1]), 1), dtype=np.float32), offsets=offsets, qids=qids,
                          ids=ids)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.tuples(ident, score), min_size=1, max_size=8), min_size=1, max_size=5),
       st.lists(ident, min_size=5, max_size=5), st.one_of(st.none(), st.integers(1, 9), st.just(2**70)))
def test_the_same_bytes_as_a_dict_per_document(queries: list[list[tuple[Any, float]]], qids: list[Any],
                                               top_k: int | None) -> None:
    lists = lists_of([len(q) for q in queries], qids[:len(queries)], [i for q in queries for i, _ in q])
    scores = np.array([s for q in queries for _, s in q], dtype=np.float64)
    want = pydantic_core.to_json(ranked(scores, lists, top_k))
    assert ranked_json(scores, lists.offsets, lists.qids, lists.ids, top_k) == want


@pytest.mark.parametrize("top_k", [None, 1, 3, 1000])
def test_ties_keep_the_posted_order_and_a_long_list(top_k: int | None) -> None:
    rng = np.random.default_rng(2)
    sizes = [1000, 1, 7, 250]
    scores = rng.integers(0, 5, sum(sizes)).astype(np.float64)  # many ties
    scores[3] = np.nan
    lists = lists_of(sizes, ["a", 2, 'q"3', "é"], [f"d{j}\\" if j % 7 else j for j in range(sum(sizes))])
    got = ranked_json(scores, lists.offsets, lists.qids, lists.ids, top_k)
    assert got == pydantic_core.to_json(ranked(scores, lists, top_k))
    first = pydantic_core.from_json(got)[0]["ranking"]
    assert [d["rank"] for d in first] == list(range(1, len(first) + 1))
