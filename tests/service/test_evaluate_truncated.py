"""POST /evaluate with a truncated ranking (a run of the top k of a query's judged documents) and
with ``null`` features (missing values, as /rank takes them)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from tests.service.conftest import N_FEATURES, Store, offsets_of
from tunemix.core.evaluation import CONVENTION_NAMES, evaluate

LOG2_3 = math.log2(3)
# five judged documents; the run ranks c, then b
QUERY = {"qid": "t1", "labels": [2, 0, 1, 1, 0], "docids": ["a", "b", "c", "d", "e"], "ranking": ["c", "b"]}


def results(client: TestClient, convention: str, metrics: list[str], *queries: dict[str, Any]) -> list[Any]:
    r = client.post("/evaluate", json={"queries": list(queries) or [QUERY], "metrics": metrics,
                                       "convention": convention, "per_query": True})
    assert r.status_code == 200, r.text
    out: list[Any] = r.json()["results"]
    return out


@pytest.mark.parametrize("convention", ["trec", "ranx"])
def test_a_truncated_ranking_counts_the_rest_unretrieved(client: TestClient, convention: str) -> None:
    (res,) = results(client, convention, ["ndcg@3", "p@3", "map"])
    # ranked labels 1, 0: DCG@3 = 1; the ideal DCG@3 over all five judged labels 2, 1, 1: 2 + 1/log2(3) + 1/2
    assert res["per_query"]["ndcg@3"]["t1"] == pytest.approx(1 / (2.5 + 1 / LOG2_3), abs=1e-12)
    assert res["per_query"]["p@3"]["t1"] == pytest.approx(1 / 3, abs=1e-12)
    # AP divides by the three relevant judged documents
    assert res["per_query"]["map"]["t1"] == pytest.approx(1 / 3, abs=1e-12)


def test_an_empty_ranking_scores_zero_under_trec(client: TestClient) -> None:
    empty = {**QUERY, "qid": "none", "ranking": []}
    (res,) = results(client, "trec", ["ndcg@10", "map"], QUERY, empty)
    assert res["per_query"]["ndcg@10"]["none"] == 0.0
    assert res["mean"]["map"] == pytest.approx((1 / 3 + 0) / 2, abs=1e-12)


@pytest.mark.parametrize("convention", [c for c in CONVENTION_NAMES if c not in ("trec", "ranx")])
def test_tools_that_rank_every_judged_document_refuse_it_naming_query_and_field(
        client: TestClient, convention: str) -> None:
    full = {"qid": "ok", "labels": [1, 0], "docids": ["x", "y"], "ranking": ["y", "x"]}
    r = client.post("/evaluate", json={"queries": [full, QUERY], "metrics": ["ndcg@5"], "convention": convention})
    assert r.status_code == 422, r.text
    text = r.text
    assert "query 't1' (index 1)" in text and "ranking holds 2 of the query's 5 judged documents" in text
    assert f"convention {convention}" in text


def test_all_conventions_error_where_the_tool_refuses(client: TestClient) -> None:
    res = {r["convention"]: r for r in results(client, "all", ["ndcg@3"])}
    assert set(res) == set(CONVENTION_NAMES)
    for name, r in res.items():
        if name in ("trec", "ranx"):
            assert "error" not in r
            assert r["mean"]["ndcg@3"] == pytest.approx(1 / (2.5 + 1 / LOG2_3), abs=1e-12)
        else:
            assert "query 't1' (index 0)" in r["error"], name


@pytest.mark.parametrize(("ranking", "says"), [
    (["c", "zz"], "ranking[1] = 'zz' is not one of the query's docids"),
    (["c", "b", "c"], "duplicate ranking entry 'c' (entry 2)"),
])
def test_what_remains_refused_names_the_entry(client: TestClient, ranking: list[str], says: str) -> None:
    r = client.post("/evaluate", json={"queries": [{**QUERY, "ranking": ranking}], "convention": "trec"})
    assert r.status_code == 422
    assert "query 't1' (queries[0])" in r.text and says in r.text


def test_null_features_are_missing_values(client: TestClient, store: Store) -> None:
    rng = np.random.default_rng(11)
    x = rng.normal(size=(9, N_FEATURES)).astype(np.float32)
    x[0, 1] = x[4, 0] = x[7, 3] = np.nan
    labels = rng.integers(0, 3, 9)
    rows = [[None if math.isnan(v) else float(v) for v in row] for row in x.tolist()]
    queries = [{"qid": "c", "labels": labels[:4].tolist(), "features": rows[:4]},
               {"qid": "d", "labels": labels[4:].tolist(),
                "documents": [{"id": f"d{j}", "features": rows[4 + j]} for j in range(5)]}]
    r = client.post("/evaluate", json={"queries": queries, "metrics": ["ndcg@10"], "convention": "trec",
                                       "model": "default", "per_query": True})
    assert r.status_code == 200, r.text
    off = offsets_of([4, 5])
    scores = store.model(store.default_v2).score(x, off)
    assert np.isfinite(scores).all()
    want = evaluate(labels, scores, off, ["ndcg@10"], "trec", qids=["c", "d"],
                    docids=[str(j) for j in range(4)] + [f"d{j}" for j in range(5)])
    got = r.json()["results"][0]["per_query"]["ndcg@10"]
    assert got["c"] == pytest.approx(float(want.per_query["ndcg@10"][0]), abs=1e-12)
    assert got["d"] == pytest.approx(float(want.per_query["ndcg@10"][1]), abs=1e-12)
    # an infinity is still refused, naming the query and the field
    bad = [{"qid": "c", "labels": [0], "features": [[1e39] + [0.0] * (N_FEATURES - 1)]}]
    r = client.post("/evaluate", json={"queries": bad, "model": "default"})
    assert r.status_code == 422 and "query 'c'" in r.text and "features[0]" in r.text


def test_scored_queries_beside_a_truncated_ranking(client: TestClient) -> None:
    scored = {"qid": "s", "labels": [0, 1, 2], "docids": ["u", "v", "w"], "scores": [0.3, 0.2, 0.1]}
    (res,) = results(client, "ranx", ["ndcg@5", "map"], scored, QUERY)
    want = evaluate([0, 1, 2, 2, 0, 1, 1, 0], [0.3, 0.2, 0.1, 0.0, 1.0, 2.0, 0.0, 0.0], [0, 3, 8], ["ndcg@5", "map"],
                    "ranx", qids=["s", "t1"], retrieved=[True, True, True, False, True, True, False, False])
    for m in ("ndcg@5", "map"):
        assert res["per_query"][m]["s"] == pytest.approx(float(want.per_query[m][0]), abs=1e-12)
        assert res["per_query"][m]["t1"] == pytest.approx(float(want.per_query[m][1]), abs=1e-12)
    # the scored query is ranked whole: reversed labels 0, 1, 2 give AP (1/2 + 2/3) / 2
    assert res["per_query"]["map"]["s"] == pytest.approx((1 / 2 + 2 / 3) / 2, abs=1e-12)
