"""POST /evaluate: hand-computed NDCG and ERR, every convention equal to ``tunemix.core.evaluation``
called directly, rankings of ids, scoring by a model first, and LETOR text bodies."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from tests.service.conftest import N_FEATURES, Store, offsets_of
from tests.service.test_rank import letor_text
from tunemix.core.evaluation import CONVENTION_NAMES, evaluate

LABELS = [2, 0, 1]
SCORES = [0.9, 0.8, 0.3]  # ranked labels: 2, 0, 1
LOG2_3 = math.log2(3)


def post(client: TestClient, **body: Any) -> dict[str, Any]:
    r = client.post("/evaluate", json=body)
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()
    return out


def one(client: TestClient, convention: str, metrics: list[str], **query: Any) -> dict[str, Any]:
    q = {"qid": "a", "labels": LABELS, "scores": SCORES, **query}
    res = post(client, queries=[q], metrics=metrics, convention=convention)["results"]
    assert [r["convention"] for r in res] == [convention]
    out: dict[str, Any] = res[0]
    return out


def test_yahoo_ndcg_and_err_by_hand(client: TestClient) -> None:
    res = one(client, "yahoo", ["ndcg@10", "err"])
    # gain 2^l - 1, discount 1/log2(r + 1): DCG = 3/1 + 0/log2(3) + 1/2; ideal = 3 + 1/log2(3)
    assert res["mean"]["ndcg@10"] == pytest.approx(3.5 / (3 + 1 / LOG2_3), abs=1e-12)
    # ERR with R = (2^l - 1)/16: 3/16 + (1 - 3/16) * (1 - 0) * (1/16) / 3
    assert res["mean"]["err"] == pytest.approx(3 / 16 + (13 / 16) * (1 / 16) / 3, abs=1e-12)
    assert res["derived"] == {"ndcg@10": False, "err": False}
    assert "per_query" not in res or res["per_query"] is None


def test_letor4_and_trec_ndcg_by_hand(client: TestClient) -> None:
    # letor4: gain table 2 -> 3, 1 -> 1; weights 1, 1, 1/log2(3): DCG@2 = 3 + 0, ideal 3 + 1
    assert one(client, "letor4", ["ndcg@2"])["mean"]["ndcg@2"] == pytest.approx(0.75, abs=1e-12)
    # trec: linear gain: DCG = 2 + 0 + 1/2, ideal = 2 + 1/log2(3)
    trec = one(client, "trec", ["ndcg@10"])
    assert trec["mean"]["ndcg@10"] == pytest.approx(2.5 / (2 + 1 / LOG2_3), abs=1e-12)
    assert any("docid" in w for w in trec["warnings"])  # trec needs docids: positions are used, and said
    # letor3 has no value for a list shorter than the cutoff: null per query, 0 in the mean
    r = post(client, queries=[{"qid": "a", "labels": LABELS, "scores": SCORES}], metrics=["ndcg@10"],
             convention="letor3", per_query=True)["results"][0]
    assert r["per_query"]["ndcg@10"] == {"a": None}
    assert r["mean"]["ndcg@10"] == 0.0


def test_a_ranking_of_ids_is_the_same_as_scores(client: TestClient) -> None:
    by_scores = one(client, "yahoo", ["ndcg@10", "err", "map"])
    ranking = post(client, queries=[{"qid": "a", "labels": LABELS, "docids": ["x", "y", "z"],
                                     "ranking": ["x", "y", "z"]}],
                   metrics=["ndcg@10", "err", "map"], convention="yahoo")["results"][0]
    assert ranking["mean"] == pytest.approx(by_scores["mean"], abs=1e-12)
    # the reversed ranking puts label 1 first: DCG = 1 + 0 + 3/2
    rev = post(client, queries=[{"qid": "a", "labels": LABELS, "docids": ["x", "y", "z"],
                                 "ranking": ["z", "y", "x"]}], metrics=["ndcg@10"])["results"][0]
    assert rev["mean"]["ndcg@10"] == pytest.approx(2.5 / (3 + 1 / LOG2_3), abs=1e-12)


def random_queries(seed: int, n_queries: int = 6) -> tuple[list[dict[str, Any]], np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 12, n_queries).tolist()
    labels = rng.integers(0, 3, sum(sizes))
    scores = np.round(rng.normal(size=sum(sizes)), 2)  # ties on purpose
    off = offsets_of(sizes)
    queries = [{"qid": f"q{q}", "labels": labels[off[q]:off[q + 1]].tolist(),
                "scores": scores[off[q]:off[q + 1]].tolist()} for q in range(n_queries)]
    return queries, labels, scores, off


def same(a: float | None, b: float) -> bool:
    return (a is None and math.isnan(b)) or (a is not None and abs(a - b) <= 1e-12)


@pytest.mark.parametrize("seed", [0, 1])
def test_all_conventions_equal_the_library(client: TestClient, seed: int) -> None:
    queries, labels, scores, off = random_queries(seed)
    metrics = ["ndcg@5", "ndcg@10", "err", "err@5", "p@3", "map", "meanndcg", "err@10:top=2"]
    body = post(client, queries=queries, metrics=metrics, convention="all", per_query=True)
    assert body["n_queries"] == len(queries)
    results = body["results"]
    assert [r["convention"] for r in results] == list(CONVENTION_NAMES)
    qids = np.array([q["qid"] for q in queries])
    for r in results:
        want = evaluate(labels, scores, off, metrics, r["convention"], qids=qids)
        assert set(r["mean"]) == set(want.mean) == set(metrics)
        for m in metrics:
            assert same(r["mean"][m], want.mean[m]), (r["convention"], m)
            assert r["derived"][m] == want.derived[m]
            for q, qid in enumerate(qids):
                assert same(r["per_query"][m][qid], float(want.per_query[m][q])), (r["convention"], m, qid)
        assert r["warnings"] == want.warnings
    # ERR is native to yahoo and ranklib only
    derived = {r["convention"]: r["derived"]["err"] for r in results}
    assert derived == {"letor3": True, "letor4": True, "mslr": True, "yahoo": False, "ranklib": False, "trec": True,
                       "lightgbm": True, "xgboost": True, "sklearn": True, "ranx": True}


@pytest.mark.parametrize("convention", ["lightgbm", "xgboost", "sklearn", "ranx"])
def test_learner_and_library_conventions(client: TestClient, convention: str) -> None:
    metrics = ["ndcg@2", "ndcg@2:empty=0", "ndcg_burges@2"]
    res = one(client, convention, metrics)
    want = evaluate(np.array(LABELS), np.array(SCORES, dtype=np.float64), np.array([0, len(LABELS)]), metrics,
                    convention)
    for m in want.mean:
        assert same(res["mean"][m], want.mean[m]), m


def test_metric_names_are_canonical_and_deduplicated(client: TestClient) -> None:
    res = one(client, "yahoo", ["NDCG@10", " ndcg@10", "ERR"])
    assert list(res["mean"]) == ["ndcg@10", "err"]


def test_labels_beyond_the_gain_table_warn(client: TestClient) -> None:
    res = post(client, queries=[{"qid": "w", "labels": [3, 0, 1], "scores": SCORES}], metrics=["ndcg@3"],
               convention="letor4")["results"][0]
    assert res["warnings"] and any("3" in w for w in res["warnings"])


def test_model_scores_posted_features_first(client: TestClient, store: Store) -> None:
    rng = np.random.default_rng(3)
    sizes = [5, 8]
    x = rng.normal(size=(sum(sizes), N_FEATURES)).astype(np.float32)
    labels = rng.integers(0, 3, sum(sizes))
    off = offsets_of(sizes)
    queries = [
        {"qid": "f0", "labels": labels[:5].tolist(), "features": x[:5].tolist()},
        {"qid": "f1", "labels": labels[5:].tolist(),
         "documents": [{"id": f"doc{j}", "features": x[5 + j].tolist()} for j in range(8)]},
    ]
    body = post(client, queries=queries, metrics=["ndcg@10", "err"], convention="ranklib", model="default",
                per_query=True)
    assert (body["model"], body["version"]) == ("default", "v2")
    direct = store.model(store.default_v2).score(x, off)
    want = evaluate(labels, direct, off, ["ndcg@10", "err"], "ranklib", qids=np.array(["f0", "f1"]))
    r = body["results"][0]
    for m in ("ndcg@10", "err"):
        assert r["mean"][m] == pytest.approx(want.mean[m], abs=1e-12)
        assert r["per_query"][m]["f1"] == pytest.approx(float(want.per_query[m][1]), abs=1e-12)
    # an explicit older version scores differently and says so
    v1 = post(client, queries=queries, metrics=["ndcg@10"], convention="ranklib", model="default", version="v1")
    assert v1["version"] == "v1"
    direct1 = store.model(store.default_v1).score(x, off)
    want1 = evaluate(labels, direct1, off, ["ndcg@10"], "ranklib")
    assert v1["results"][0]["mean"]["ndcg@10"] == pytest.approx(want1.mean["ndcg@10"], abs=1e-12)


def test_letor_text_body_is_scored_by_the_model(client: TestClient, store: Store) -> None:
    rng = np.random.default_rng(4)
    sizes = [7, 4, 9]
    x = rng.normal(size=(sum(sizes), N_FEATURES)).astype(np.float32)
    labels = rng.integers(0, 3, sum(sizes))
    text = letor_text(x, sizes, labels)
    r = client.post("/evaluate?model=default&metrics=ndcg@3,err@5&convention=letor4&per_query=true",
                    content=text, headers={"Content-Type": "text/plain"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert (body["model"], body["version"], body["n_queries"]) == ("default", "v2", 3)
    off = offsets_of(sizes)
    direct = store.model(store.default_v2).score(x, off)
    want = evaluate(labels, direct, off, ["ndcg@3", "err@5"], "letor4", qids=np.array(["q0", "q1", "q2"]))
    res = body["results"][0]
    assert res["convention"] == "letor4"
    for m in ("ndcg@3", "err@5"):
        assert same(res["mean"][m], want.mean[m])
        assert res["mean"][m] > 0
        for q in range(3):
            assert same(res["per_query"][m][f"q{q}"], float(want.per_query[m][q]))
    # the labels are the file's: other labels give another value
    other = client.post("/evaluate?model=default&metrics=ndcg@3&convention=letor4",
                        content=letor_text(x, sizes, 2 - labels), headers={"Content-Type": "text/plain"}).json()
    assert other["results"][0]["mean"]["ndcg@3"] != pytest.approx(res["mean"]["ndcg@3"], abs=1e-9)


def test_documents_scored_by_evaluate_are_counted(client: TestClient) -> None:
    def scored() -> float:
        for line in client.get("/metrics").text.splitlines():
            if line.startswith('tunemix_documents_scored_total{model="default"}'):
                return float(line.split()[-1])
        return 0.0

    before = scored()
    post(client, queries=[{"qid": "c", "labels": [1, 0, 2], "features": np.eye(3, N_FEATURES).tolist()}],
         model="default")
    assert scored() == before + 3


def test_a_letor_line_without_its_label_is_refused_naming_the_line(client: TestClient) -> None:
    """/evaluate needs the grades: a line that starts with ``qid:`` (which /rank takes) is a 422."""
    text = b"1 qid:7 1:1 2:0.5\nqid:7 1:0.2\n"
    r = client.post("/evaluate?model=default&metrics=ndcg@10", content=text, headers={"Content-Type": "text/plain"})
    assert r.status_code == 422 and "body:2" in r.json()["detail"] and "no label" in r.json()["detail"], r.text
