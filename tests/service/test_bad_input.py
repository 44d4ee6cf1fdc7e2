"""Bad input is a 4xx that names the query and the field, never a 500; bodies above the
configured limits are 413; JSON integers beyond 64 bits are handled."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.service.conftest import N_FEATURES, wait_ready
from tunemix.service.main import create_app
from tunemix.service.settings import Settings

ROW = [0.1, 0.2, 0.3, 0.4, 0.5]
assert len(ROW) == N_FEATURES
HUGE = 10**30  # beyond int64


def rank_q(**q: Any) -> dict[str, Any]:
    return {"queries": [{"qid": "q1", **q}]}


def eval_q(extra: dict[str, Any] | None = None, **q: Any) -> dict[str, Any]:
    return {"queries": [{"qid": "e1", **q}], **(extra or {})}


GOOD_EVAL = {"labels": [2, 0, 1], "scores": [0.9, 0.8, 0.3]}

# (path, JSON body or raw bytes, words the detail must contain)
CASES: list[tuple[str, Any, list[str]]] = [
    # /rank: feature count, in each form
    ("/rank", rank_q(ids=["a"], features=[ROW[:4]]), ["query 'q1'", "features[0]", "4", "5"]),
    ("/rank", rank_q(documents=[{"id": "a", "features": ROW}, {"id": "b", "features": [*ROW, 1.0]}]),
     ["query 'q1'", "documents[1].features", "6"]),
    # NaN, infinity (JSON literals) and float32 overflow
    ("/rank", b'{"queries":[{"qid":"q1","ids":["a"],"features":[[0.1,NaN,0.3,0.4,0.5]]}]}',
     ["malformed", "near", "NaN", "not JSON"]),
    ("/rank", b'{"queries":[{"qid":"q1","documents":[{"id":"a","features":[0.1,0.2,Infinity,0.4,0.5]}]}]}',
     ["malformed", "Infinity"]),
    ("/rank", b'{"queries":[{"qid":"q1","documents":[{"id":"a","features":{"4":-Infinity}}]}]}',
     ["malformed", "-Infinity"]),
    ("/rank", b'{"queries":[{"qid":"q1","documents":[{"id":"a","features":[1e400,0,0,0,0]}]}]}',
     ["query 'q1'", "documents[0].features[0]", "out of range"]),
    ("/rank", rank_q(ids=["a"], features=[[1e39, 0, 0, 0, 0]]), ["query 'q1'", "features[0]", "feature 1"]),
    # sparse ids out of range (1-based)
    ("/rank", rank_q(documents=[{"id": "a", "features": {"0": 1.0}}]), ["query 'q1'", "documents[0].features", "0"]),
    ("/rank", rank_q(documents=[{"id": "a", "features": {"6": 1.0}}]), ["query 'q1'", "feature id 6", "1..5"]),
    ("/rank", rank_q(documents=[{"id": "a", "features": {"x": 1.0}}]), ["query 'q1'", "'x'"]),
    ("/rank", rank_q(documents=[{"id": "a", "features": {str(HUGE): 1.0}}]), ["query 'q1'", "out of range"]),
    # empty candidate lists, missing parts, duplicate ids
    ("/rank", rank_q(documents=[]), ["query 'q1'", "documents", "empty"]),
    ("/rank", rank_q(ids=[], features=[]), ["query 'q1'", "features", "empty"]),
    ("/rank", rank_q(), ["query 'q1'", "no candidates"]),
    ("/rank", rank_q(ids=["a"]), ["query 'q1'", "features"]),
    ("/rank", rank_q(ids=["a", "b"], features=[ROW]), ["query 'q1'", "ids", "2", "1"]),
    ("/rank", rank_q(ids=["a", "a"], features=[ROW, ROW]), ["query 'q1'", "duplicate id 'a'"]),
    ("/rank", rank_q(ids=[7, "7"], features=[ROW, ROW]), ["query 'q1'", "duplicate id"]),
    ("/rank", rank_q(documents=[{"id": "a", "features": ROW}], ids=["a"], features=[ROW]), ["query 'q1'", "not both"]),
    # the body's shape (pydantic), naming query and field
    ("/rank", rank_q(ids=["a"], features=[["x", 0, 0, 0, 0]]), ["query 'q1'", "features[0][0]"]),
    ("/rank", {"queries": [{"qid": "q1", "ids": ["a"], "features": [ROW], "colour": 1}]}, ["query 'q1'", "colour"]),
    ("/rank", {"queries": []}, ["queries"]),
    ("/rank", {"queries": [{"ids": ["a"], "features": [ROW]}]}, ["queries[0]", "qid"]),
    ("/rank", {**rank_q(ids=["a"], features=[ROW]), "top_k": 0}, ["top_k"]),
    ("/rank", b"", ["empty"]),
    ("/rank", b"{nope", ["JSON"]),
    # unknown model or version
    ("/rank", {**rank_q(ids=["a"], features=[ROW]), "model": "nope"}, ["model", "nope"]),
    ("/rank", {**rank_q(ids=["a"], features=[ROW]), "version": "v9"}, ["model", "v9", "v1, v2"]),
    ("/rank", {**rank_q(ids=["a"], features=[ROW]), "model": "../etc"}, ["model", "../etc"]),
    # /evaluate
    ("/evaluate", eval_q({"metrics": ["ndcg@10", "bleu"]}, **GOOD_EVAL), ["metrics[1]", "bleu"]),
    ("/evaluate", eval_q({"metrics": ["p"]}, **GOOD_EVAL), ["metrics[0]", "cutoff"]),
    ("/evaluate", eval_q({"metrics": [f"ndcg@{HUGE}"]}, **GOOD_EVAL), ["metrics[0]", "too large"]),
    ("/evaluate", eval_q({"convention": "trec_eval8"}, **GOOD_EVAL), ["convention", "yahoo"]),
    ("/evaluate", eval_q({"metrics": ["err"], "convention": "yahoo"}, labels=[5, 0, 1], scores=[1, 2, 3]),
     ["query 'e1'", "label 5", "yahoo"]),
    ("/evaluate", eval_q({"metrics": ["err"], "convention": "ranklib"}, labels=[0, 9, 1], scores=[1, 2, 3]),
     ["query 'e1'", "label 9"]),
    ("/evaluate", eval_q(labels=[1, -1, 0], scores=[1, 2, 3]), ["query 'e1'", "labels[1]", "-1"]),
    ("/evaluate", eval_q(labels=[1, HUGE, 0], scores=[1, 2, 3]), ["query 'e1'", "labels[1]", str(HUGE)]),
    ("/evaluate", eval_q(labels=[1, 2.5, 0], scores=[1, 2, 3]), ["query 'e1'", "labels[1]"]),
    ("/evaluate", eval_q(labels=[], scores=[]), ["query 'e1'", "labels", "empty"]),
    ("/evaluate", eval_q(labels=[1, 0], scores=[1.0]), ["query 'e1'", "scores", "2"]),
    # NaN is not JSON: refused by the decoder, as on /rank
    ("/evaluate", b'{"queries":[{"qid":"e1","labels":[1,0],"scores":[1.0,NaN]}]}',
     ["malformed", "near", "NaN", "not JSON"]),
    ("/evaluate", eval_q(labels=[1, 0]), ["query 'e1'", "no scores"]),
    ("/evaluate", eval_q(labels=[1, 0], ranking=["a", "b"]), ["query 'e1'", "docids"]),
    ("/evaluate", eval_q(labels=[1, 0], docids=["a", "b"], ranking=["a", "c"]), ["query 'e1'", "ranking", "'c'"]),
    ("/evaluate", eval_q(labels=[1, 0], docids=["a", "b"], ranking=["a", "a"]), ["query 'e1'", "duplicate", "'a'"]),
    ("/evaluate", eval_q(labels=[1, 0], docids=["a", "a"], scores=[1, 2]), ["query 'e1'", "duplicate docid 'a'"]),
    ("/evaluate", eval_q(labels=[1, 0], docids=["a", "b"], scores=[1, 2], ranking=["b", "a"]),
     ["query 'e1'", "not both"]),
    ("/evaluate", {"queries": [{"qid": "e1", **GOOD_EVAL}, {"qid": "e1", **GOOD_EVAL}]}, ["duplicate qid 'e1'"]),
    ("/evaluate", eval_q(labels=[1, 0], features=[ROW, ROW]), ["query 'e1'", "model"]),
    ("/evaluate", eval_q({"model": "default"}, labels=[1, 0], features=[ROW, ROW[:3]]),
     ["query 'e1'", "features[1]", "3"]),
    ("/evaluate", eval_q({"model": "default"}, labels=[1, 0, 1], features=[ROW, ROW]), ["query 'e1'", "2", "3"]),
    ("/evaluate", eval_q({"model": "nope"}, labels=[1, 0], features=[ROW, ROW]), ["model", "nope"]),
    ("/evaluate", eval_q({"model": "default", "version": "v7"}, labels=[1], features=[ROW]), ["model", "v7"]),
    # /fuse
    ("/fuse", {"queries": [{"qid": "f1", "systems": [{"ids": ["a", "b"], "scores": [1.0]}]}]},
     ["query 'f1'", "systems[0]", "2 ids", "1 scores"]),
    ("/fuse", {"queries": [{"qid": "f1", "systems": [{"ids": ["a"]}, {"ids": ["b", "b"]}]}]},
     ["query 'f1'", "systems[1]", "duplicate id 'b'"]),
    ("/fuse", b'{"queries":[{"qid":"f1","systems":[{"ids":["a","b"],"scores":[1,NaN]}]}]}',
     ["malformed", "NaN", "not JSON"]),
    ("/fuse", b'{"queries":[{"qid":"f1","systems":[{"ids":["a","b"],"scores":[1,1e400]}]}]}',
     ["query 'f1'", "systems[0].scores[1]", "out of range"]),
    ("/evaluate", b'{"queries":[{"qid":"e1","labels":[1,0],"scores":[1.0,1e400]}]}',
     ["query 'e1'", "scores[1]", "out of range"]),
    ("/fuse", {"queries": [{"qid": "f1", "systems": [{"ids": []}]}]}, ["query 'f1'", "systems[0].ids"]),
    ("/fuse", {"queries": [{"qid": "f1", "systems": []}]}, ["query 'f1'", "systems"]),
    ("/fuse", {"queries": [{"qid": "f1", "systems": [{"ids": ["a"]}]}], "method": "borda"}, ["method", "rrf"]),
    ("/fuse", {"queries": [{"qid": "f1", "systems": [{"ids": ["a"]}]}], "k": 0}, ["k"]),
    ("/fuse", {"queries": [{"qid": "f1", "systems": [{"ids": ["a"]}]}], "k": -1}, ["k"]),
]


@pytest.mark.parametrize(("path", "body", "words"), CASES, ids=[f"{i}-{c[0][1:]}" for i, c in enumerate(CASES)])
def test_bad_json_is_422_naming_query_and_field(client: TestClient, path: str, body: Any, words: list[str]) -> None:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    r = client.post(path, content=content, headers={"Content-Type": "application/json"})
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    for w in words:
        assert w in detail, (w, detail)


TEXT_CASES: list[tuple[str, bytes, list[str]]] = [
    ("/rank", b"0 qid:1 1:0.5 6:0.2\n", ["body:1", "'6'", "5 features"]),
    ("/rank", b"0 qid:1 1:nan\n", ["body:1", "NaN"]),
    ("/rank", b"0 qid:1 01:1\n", ["body:1", "'01'"]),
    ("/rank", b"0 qid:1 1:1 1:2\n", ["body:1", "twice"]),
    ("/rank", b"0 qid:1 1:1_0\n", ["body:1", "1:1_0"]),
    ("/rank", b"0 qid:1 1:0x10\n", ["body:1", "hex"]),
    ("/rank", b"0 qid:1 1:1\xff\n", ["UTF-8"]),
    ("/rank", b"-1 qid:1 1:1\n", ["body:1", "label"]),
    ("/rank", b"0 1:1\n", ["body:1", "qid"]),
    # found by the fuzzer (tests/service/fuzz_rank.py): a label beyond float64, a separator str.split knows
    ("/rank", b"222001E2040\n", ["body:1", "label"]),
    ("/rank", b"0 qid:1 1:0.4\x1d2:0.5\n", ["body:1", "1:0.4"]),
    ("/rank", b"0 qid:1 1:1e39\n", ["body", "float32"]),
    ("/rank", b"0 qid:1 1:0.5 # docid = a\n1 qid:1 2:0.5 # docid = a\n", ["query '1'", "duplicate docid 'a'"]),
    ("/rank", b"0 qid:1 1:1\n0 qid:2 1:1\n0 qid:1 1:1\n", ["body:3", "qid 1"]),
    ("/rank", b"x qid:1 1:1\n", ["body:1", "label"]),
    ("/rank", b"\n\n", ["empty"]),
    ("/rank?version=v9", b"0 qid:1 1:1\n", ["model", "v9"]),
    ("/evaluate?model=default&metrics=ndcg@10,nope", b"0 qid:1 1:1\n", ["metrics[1]", "nope"]),
    ("/evaluate?model=default&convention=ir", b"0 qid:1 1:1\n", ["convention", "'ir'"]),
    ("/evaluate?metrics=ndcg@10", b"0 qid:1 1:1\n", ["model"]),
    ("/evaluate?model=default&metrics=err&convention=yahoo", b"6 qid:1 1:1\n0 qid:1 1:2\n", ["label 6"]),
]


@pytest.mark.parametrize(("path", "body", "words"), TEXT_CASES, ids=[str(i) for i in range(len(TEXT_CASES))])
def test_bad_letor_text_is_422(client: TestClient, path: str, body: bytes, words: list[str]) -> None:
    r = client.post(path, content=body, headers={"Content-Type": "text/plain"})
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    for w in words:
        assert w in detail, (w, detail)


def test_bad_query_parameters_are_422(client: TestClient) -> None:
    r = client.post("/rank?top_k=0", content=b"0 qid:1 1:1\n", headers={"Content-Type": "text/plain"})
    assert r.status_code == 422 and "top_k" in r.json()["detail"]
    r = client.post("/evaluate?per_query=maybe", content=b"0 qid:1 1:1\n", headers={"Content-Type": "text/plain"})
    assert r.status_code == 422 and "per_query" in r.json()["detail"]


def test_integers_beyond_64_bits_are_a_422_naming_the_field(client: TestClient) -> None:
    """Integer ids are echoed back as JSON numbers, which every JSON library reads as 64-bit: a
    larger one is refused (send it as a string); a huge top_k is just larger than every list."""
    r = client.post("/rank", json={"queries": [{"qid": HUGE, "ids": ["a"], "features": [ROW]}]})
    assert r.status_code == 422 and "qid" in r.json()["detail"], r.text
    r = client.post("/rank", json={"queries": [{"qid": 1, "ids": [2**63 - 1, -(2**63)], "features": [ROW, ROW]}],
                                   "top_k": HUGE})
    assert r.status_code == 200, r.text
    assert [d["id"] for d in r.json()["results"][0]["ranking"]] in ([2**63 - 1, -(2**63)], [-(2**63), 2**63 - 1])
    r = client.post(f"/rank?top_k={HUGE}", content=b"0 qid:1 1:1\n", headers={"Content-Type": "text/plain"})
    assert r.status_code == 200, r.text
    r = client.post("/evaluate", json={"queries": [{"qid": HUGE, "labels": [1, 0], "docids": [5, 1],
                                                    "ranking": [1, 5]}], "per_query": True})
    assert r.status_code == 422 and "qid" in r.json()["detail"], r.text
    for method in ("rrf", "combsum", "combmnz", "condorcet"):
        r = client.post("/fuse", json={"queries": [{"qid": "f", "systems": [{"ids": [HUGE, 2], "scores": [1, 2]},
                                                                          {"ids": [2]}]}],
                                       "method": method, "top_k": HUGE})
        assert r.status_code == 422 and "systems[0]" in r.json()["detail"], (method, r.text)
        r = client.post("/fuse", json={"queries": [{"qid": "f", "systems": [{"ids": [1, 2], "scores": [1, 2]},
                                                                          {"ids": [2]}]}],
                                       "method": method, "top_k": HUGE})
        assert r.status_code == 200, (method, r.text)
    r = client.post("/evaluate", json=eval_q({"metrics": [f"err@{2**63}"]}, **GOOD_EVAL))
    assert r.status_code == 422


DIGITS = "9" * 5000  # past Python's 4,300-digit limit on int(text)
ROW_TEXT = json.dumps(ROW)
# (path, body, the field the 422 names): a 5,000-digit integer in every integer field and id
HUGE_INTEGERS: list[tuple[str, str, str]] = [
    ("/rank", f'{{"queries":[{{"qid":{DIGITS},"ids":["a"],"features":[{ROW_TEXT}]}}]}}', "qid"),
    ("/rank", f'{{"queries":[{{"qid":"q","ids":[{DIGITS}],"features":[{ROW_TEXT}]}}]}}', "ids[0]"),
    ("/rank", f'{{"queries":[{{"qid":"q","documents":[{{"id":{DIGITS},"features":{ROW_TEXT}}}]}}]}}',
     "documents[0].id"),
    ("/rank", f'{{"queries":[{{"qid":"q","ids":["a","b"],"features":[{ROW_TEXT},{ROW_TEXT}],'
              f'"explain_pair":["a",{DIGITS}]}}]}}', "explain_pair[1]"),
    ("/rank", f'{{"queries":[{{"qid":"q","ids":["a"],"features":[{ROW_TEXT}]}}],"top_k":{DIGITS}}}', "top_k"),
    ("/rank", f'{{"queries":[{{"qid":"q","ids":["a"],"features":[{ROW_TEXT}]}}],"explain":{DIGITS}}}', "explain"),
    ("/evaluate", f'{{"queries":[{{"qid":{DIGITS},"labels":[1],"scores":[1]}}]}}', "qid"),
    ("/evaluate", f'{{"queries":[{{"qid":"q","labels":[{DIGITS}],"scores":[1]}}]}}', "labels[0]"),
    ("/evaluate", f'{{"queries":[{{"qid":"q","labels":[1],"docids":[{DIGITS}],"ranking":[1]}}]}}', "docids[0]"),
    ("/evaluate", f'{{"queries":[{{"qid":"q","labels":[1],"docids":["a"],"ranking":[{DIGITS}]}}]}}', "ranking[0]"),
    ("/evaluate", f'{{"queries":[{{"qid":"q","labels":[1],"scores":[1]}}],"metrics":["ndcg@{DIGITS}"]}}',
     "metrics[0]"),
    ("/evaluate?model=default&metrics=ndcg@" + DIGITS, "0 qid:1 1:1\n", "metrics[0]"),
    ("/fuse", f'{{"queries":[{{"qid":{DIGITS},"systems":[{{"ids":["a"]}}]}}]}}', "qid"),
    ("/fuse", f'{{"queries":[{{"qid":"q","systems":[{{"ids":[{DIGITS}]}}]}}]}}', "ids[0]"),
    ("/fuse", f'{{"queries":[{{"qid":"q","systems":[{{"ids":["a"]}}]}}],"top_k":{DIGITS}}}', "top_k"),
    ("/rank", f"{DIGITS} qid:1 1:1\n", "label"),
    ("/rank", f"0 qid:{DIGITS} 1:1\n", "qid"),
    ("/rank", f"0 qid:1 {DIGITS}:1\n", "feature id"),
    ("/evaluate?model=default", f"0 qid:1 1:1 # docid = {DIGITS}\n", "docid"),
]


@pytest.mark.parametrize(("path", "body", "field"), HUGE_INTEGERS, ids=[str(i) for i in range(len(HUGE_INTEGERS))])
def test_a_5000_digit_integer_is_our_own_422_naming_the_field(client: TestClient, path: str, body: str,
                                                              field: str) -> None:
    """No message of Python's 4,300-digit limit on ``int(text)`` reaches a client: every integer
    field and id refuses a 5,000-digit integer with a 422 of the service's own, naming the field."""
    ctype = "text/plain" if "qid:" in body else "application/json"
    r = client.post(path, content=body.encode(), headers={"Content-Type": ctype})
    assert r.status_code == 422, r.text[:300]
    detail = r.json()["detail"]
    assert field in detail and "4300" not in detail and "int_max_str_digits" not in detail, detail[:300]


def test_scores_whose_spread_overflows_fuse_to_finite_json(client: TestClient) -> None:
    body = {"queries": [{"qid": "f", "systems": [{"ids": ["a", "b", "c"], "scores": [1e308, 0.0, -1e308]}]}]}
    for method in ("combsum", "combmnz", "rrf", "condorcet"):
        r = client.post("/fuse", json={**body, "method": method})
        assert r.status_code == 200, r.text
        assert "NaN" not in r.text and "Infinity" not in r.text
        ranking = r.json()["results"][0]["ranking"]
        assert [d["id"] for d in ranking] == ["a", "b", "c"], method
    r = client.post("/fuse", json={**body, "method": "combsum"})
    assert [d["score"] for d in r.json()["results"][0]["ranking"]] == pytest.approx([1.0, 0.5, 0.0])


# ---------------------------------------------------------------------------- limits
@pytest.fixture(scope="module")
def limited(served_dir: Path) -> Iterator[TestClient]:
    settings = Settings(models_dir=served_dir, default_model="default", max_documents=5, max_queries=2,
                        max_body_bytes=2048)
    with TestClient(create_app(settings)) as c:
        wait_ready(c)
        yield c


def test_limits_allow_what_fits(limited: TestClient) -> None:
    r = limited.post("/rank", json={"queries": [{"qid": "a", "ids": list("abc"), "features": [ROW] * 3},
                                                {"qid": "b", "ids": list("ab"), "features": [ROW] * 2}]})
    assert r.status_code == 200, r.text


@pytest.mark.parametrize(("path", "body", "words"), [
    ("/rank", {"queries": [{"qid": "a", "ids": list("abcdef"), "features": [ROW] * 6}]},
     ["6 documents", "limit is 5", "TUNEMIX_MAX_DOCUMENTS"]),
    ("/rank", {"queries": [{"qid": "a", "documents": [{"id": i, "features": {"1": 1}} for i in range(4)]},
                           {"qid": "b", "documents": [{"id": i, "features": {"1": 1}} for i in range(2)]}]},
     ["6 documents"]),
    ("/rank", {"queries": [{"qid": q, "ids": ["a"], "features": [ROW]} for q in "abc"]},
     ["3 queries", "TUNEMIX_MAX_QUERIES"]),
    ("/evaluate", {"queries": [{"qid": "a", "labels": [0] * 6, "scores": list(range(6))}]}, ["6 documents"]),
    ("/fuse", {"queries": [{"qid": "a", "systems": [{"ids": list("abcd")}, {"ids": list("ab")}]}]}, ["6 documents"]),
])
def test_too_many_documents_or_queries_is_413(limited: TestClient, path: str, body: Any, words: list[str]) -> None:
    r = limited.post(path, json=body)
    assert r.status_code == 413, r.text
    for w in words:
        assert w in r.json()["detail"]


def test_too_many_documents_in_a_letor_body_is_413(limited: TestClient) -> None:
    text = b"".join(b"0 qid:1 1:%d\n" % i for i in range(6))
    r = limited.post("/rank", content=text, headers={"Content-Type": "text/plain"})
    assert r.status_code == 413 and "6 documents" in r.json()["detail"]


def test_a_body_above_the_byte_limit_is_413(limited: TestClient) -> None:
    big = json.dumps({"queries": [{"qid": "a", "ids": ["a"], "features": [[0.123456789] * 300]}]}).encode()
    assert len(big) > 2048
    r = limited.post("/rank", content=big, headers={"Content-Type": "application/json"})
    assert r.status_code == 413
    assert f"{len(big)} bytes" in r.json()["detail"] and "TUNEMIX_MAX_BODY_BYTES" in r.json()["detail"]

    def chunks() -> Iterator[bytes]:  # no Content-Length: the limit holds while streaming
        for i in range(0, len(big), 512):
            yield big[i:i + 512]

    r = limited.post("/fuse", content=chunks(), headers={"Content-Type": "application/json"})
    assert r.status_code == 413 and "2048" in r.json()["detail"]
    r = limited.post("/evaluate?model=default", content=b"0 qid:1 1:1\n" * 400, headers={"Content-Type": "text/plain"})
    assert r.status_code == 413
