"""The /rank and /fuse answers are defined once: the msgspec structs that are encoded and sent.
The OpenAPI document's 200 schema of each route is those structs' own schema, and a real answer
(with relevance, explanations and a pair) is exactly an instance of them."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import numpy as np
import pytest
from fastapi.testclient import TestClient

from tunemix.service.rank_answer import ENCODER, RankAnswer
from tunemix.service.routers.fuse import FuseAnswer

from .conftest import N_FEATURES, rank_body

REF = "#/components/schemas/{name}"


@pytest.mark.parametrize(("path", "struct"), [("/rank", RankAnswer), ("/fuse", FuseAnswer)])
def test_the_documented_answer_is_the_struct_that_is_sent(client: TestClient, path: str,
                                                          struct: type[msgspec.Struct]) -> None:
    spec = client.get("/openapi.json").json()
    ok = spec["paths"][path]["post"]["responses"]["200"]
    assert ok["content"]["application/json"]["schema"] == {"$ref": REF.format(name=struct.__name__)}
    _, components = msgspec.json.schema_components([struct], ref_template=REF)
    assert components, struct
    for name, schema in components.items():
        assert spec["components"]["schemas"][name] == schema, name
    # every field the answer sends is described for the reader
    for name, schema in components.items():
        for field, prop in schema.get("properties", {}).items():
            assert prop.get("description"), f"{name}.{field} has no description"


def round_trip(content: bytes, struct: type[msgspec.Struct]) -> Any:
    """The answer decoded strictly as ``struct`` and encoded again: the same JSON, so the answer
    holds nothing the struct (and so the schema) does not describe."""
    decoded = msgspec.json.decode(content, type=struct, strict=True)
    assert json.loads(ENCODER.encode(decoded)) == json.loads(content)
    return decoded


def test_a_full_rank_answer_is_a_rank_answer(client: TestClient) -> None:
    x = np.random.default_rng(3).normal(size=(9, N_FEATURES)).round(4)
    body = rank_body(x, [6, 3], relevance=True, explain=2, top_k=4)
    body["queries"][0]["explain_pair"] = ["d2", "d5"]
    r = client.post("/rank", json=body)
    assert r.status_code == 200, r.text
    answer = round_trip(r.content, RankAnswer)
    first = answer.results[0]
    assert first.pair is not None and first.ranking[0].explanation is not None
    assert first.ranking[0].probabilities is not None and first.ranking[0].relevance is not None


def test_a_fuse_answer_is_a_fuse_answer(client: TestClient) -> None:
    queries = [{"qid": "q1", "systems": [{"ids": ["a", "b", "c"]}, {"ids": ["c", "a"]}]}]
    r = client.post("/fuse", json={"queries": queries, "method": "rrf"})
    assert r.status_code == 200, r.text
    answer = round_trip(r.content, FuseAnswer)
    assert [d.id for d in answer.results[0].ranking][:1] == ["a"]
