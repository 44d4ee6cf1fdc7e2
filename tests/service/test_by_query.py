"""/rank bodies past ``ONE_PASS_MAX_BYTES`` read a query at a time
(``tunemix.service.rank_body.json_lists_by_query``) against the two passes of the whole body
(``json_lists_two_passes``), their slow twin: the same structs and matrix for a body both take,
the same status and message for one they refuse, on fixed and generated bodies. Also: a valid
large body never reaches the whole-body passes."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.service.conftest import N_FEATURES
from tests.service.test_one_pass import ROW, a_body, outcome
from tunemix.service import json_body, rank_body
from tunemix.service.json_body import ONE_PASS_MAX_BYTES
from tunemix.service.rank_body import json_lists, json_lists_two_passes
from tunemix.service.registry import ModelRegistry
from tunemix.service.settings import Settings

SETTINGS = Settings()


def padded(body: bytes, at: int) -> bytes:
    """``body`` past ``ONE_PASS_MAX_BYTES`` by white space after its ``at``-th structural byte
    (``{[,:``; after the last one when there are fewer): between the body's fields, between its
    queries, or inside a query."""
    places = [j + 1 for j, c in enumerate(body) if c in b"{[,:"]
    cut = places[min(at, len(places) - 1)] if places else len(body)
    return body[:cut] + b" " * (ONE_PASS_MAX_BYTES + 1 - len(body)) + body[cut:]


def same_verdict(body: bytes, registry: ModelRegistry) -> tuple[Any, ...]:
    assert len(body) > ONE_PASS_MAX_BYTES
    got, want = outcome(json_lists, body, registry), outcome(json_lists_two_passes, body, registry)
    assert got == want, (body.strip()[:300], got[:3], want[:3])
    return got


@settings(max_examples=200, deadline=None)
@given(body=a_body(), at=st.integers(0, 40))
def test_generated_large_bodies_match_the_two_passes(registry: ModelRegistry, body: bytes, at: int) -> None:
    same_verdict(padded(body, at), registry)


def columnar(n_queries: int, per_query: int, seed: int = 0) -> bytes:
    x = np.random.default_rng(seed).random((n_queries * per_query, N_FEATURES)).round(6)
    return json.dumps({"queries": [
        {"qid": f"q{q}", "ids": [f"d{j}" for j in range(per_query)],
         "features": x[q * per_query:(q + 1) * per_query].tolist()} for q in range(n_queries)],
        "top_k": 10}, separators=(",", ":")).encode()


def test_a_valid_large_body_is_read_a_query_at_a_time(registry: ModelRegistry,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """200 queries of 200 documents, one of them sparse: the matrix of the two passes, without
    msgspec's decode of the whole body or a repeated-key pass over it."""
    body = json.loads(columnar(200, 200))
    body["queries"][7] = {"qid": "sparse", "documents": [{"id": "a", "features": {"2": 0.5}},
                                                         {"id": "b", "features": json.loads(ROW)}]}
    raw = json.dumps(body, separators=(",", ":")).encode()
    assert len(raw) > ONE_PASS_MAX_BYTES
    want = outcome(json_lists_two_passes, raw, registry)
    whole: list[int] = []

    def counted(fn: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            if any(isinstance(a, bytes) and len(a) > ONE_PASS_MAX_BYTES for a in args):
                whole.append(1)
            return fn(*args, **kwargs)
        return call

    monkeypatch.setattr(rank_body, "decode_json", counted(rank_body.decode_json))
    monkeypatch.setattr(json_body.jiter, "from_json", counted(json_body.jiter.from_json))
    got = outcome(json_lists, raw, registry)
    assert got == want and got[0] == "taken"
    assert got[5] == (200 * 200 - 200 + 2, N_FEATURES)
    assert whole == [], "a pass over the whole body ran"


@pytest.mark.parametrize(("change", "words"), [
    (lambda b: b[:-1] + b',"top_k":3}', "top_k"),  # a repeated field of the body
    (lambda b: b[:-1] + b',"min_relevance":1' + b"0" * 1200 + b"}", "min_relevance"),  # a number past the bound
    (lambda b: b.replace(b'"qid":"q150"', b'"qid":"q150","qid":"x"', 1), "qid"),  # repeated in a query
    (lambda b: b.replace(b'"d3",', b'"d3",true,', 1), "ids"),
    (lambda b: b.replace(b'"qid":"q9"', b'"qid":"q8"', 1), "qid"),  # two queries with one qid
    (lambda b: b[:-2], None),  # cut short
])
def test_refused_large_bodies_are_named_as_by_the_two_passes(registry: ModelRegistry, change: Any,
                                                             words: str | None) -> None:
    body = change(columnar(200, 200))
    got = same_verdict(body, registry)
    assert got[0] == "refused" and got[1] == 422, got[:3]
    assert words is None or words in got[2], got[:3]


def test_more_queries_than_the_limit_are_refused_before_they_are_read(registry: ModelRegistry,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    def never(*args: Any) -> None:
        raise AssertionError("a query was read")

    monkeypatch.setattr(rank_body, "query_pass", never)
    small = Settings(max_queries=100)
    body = columnar(200, 200)
    with pytest.raises(Exception, match="TUNEMIX_MAX_QUERIES"):
        json_lists(body, registry, small)
