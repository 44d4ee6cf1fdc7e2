"""POST /fuse: RRF, CombSUM and CombMNZ against hand arithmetic, RRF against a naive twin on
random lists whose ids differ across systems, Condorcet against the library kernel."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from tunemix.core.ensemble.list_fusion import fuse_lists

# system 1 scores a > b > c; system 2 is a ranking c, a, d (b and d each appear in one system only)
EXAMPLE = {"qid": "q", "systems": [{"ids": ["a", "b", "c"], "scores": [12.1, 9.5, 3.2]}, {"ids": ["c", "a", "d"]}]}


def fuse(client: TestClient, queries: list[dict[str, Any]], method: str, **extra: Any) -> list[dict[str, Any]]:
    r = client.post("/fuse", json={"queries": queries, "method": method, **extra})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["method"] == method and body["server_time_ms"] >= 0
    results: list[dict[str, Any]] = body["results"]
    return results


def scores(result: dict[str, Any]) -> dict[Any, float]:
    return {d["id"]: d["score"] for d in result["ranking"]}


def test_rrf_by_hand_with_k_60(client: TestClient) -> None:
    (res,) = fuse(client, [EXAMPLE], "rrf")  # k defaults to 60
    want = {"a": 1 / 61 + 1 / 62, "b": 1 / 62, "c": 1 / 63 + 1 / 61, "d": 1 / 63}
    assert scores(res) == pytest.approx(want, abs=1e-15)
    assert [d["id"] for d in res["ranking"]] == ["a", "c", "b", "d"]
    assert [d["rank"] for d in res["ranking"]] == [1, 2, 3, 4]
    assert res["n_documents"] == 4
    (k1,) = fuse(client, [EXAMPLE], "rrf", k=1)
    assert scores(k1) == pytest.approx({"a": 1 / 2 + 1 / 3, "b": 1 / 3, "c": 1 / 4 + 1 / 2, "d": 1 / 4}, abs=1e-15)


def test_combsum_and_combmnz_by_hand(client: TestClient) -> None:
    # min-max per system: s1 a=1, b=(9.5-3.2)/(12.1-3.2), c=0; s2 (ranking: 3, 2, 1) c=1, a=0.5, d=0
    b = (9.5 - 3.2) / (12.1 - 3.2)
    (s,) = fuse(client, [EXAMPLE], "combsum")
    assert scores(s) == pytest.approx({"a": 1.5, "b": b, "c": 1.0, "d": 0.0}, abs=1e-12)
    (m,) = fuse(client, [EXAMPLE], "combmnz")  # times the number of systems that returned the document
    assert scores(m) == pytest.approx({"a": 3.0, "b": b, "c": 2.0, "d": 0.0}, abs=1e-12)
    assert [d["id"] for d in m["ranking"]] == ["a", "c", "b", "d"]


def test_condorcet_matches_the_kernel(client: TestClient) -> None:
    (res,) = fuse(client, [EXAMPLE], "condorcet")
    nan = np.nan
    mat = np.array([[12.1, 2.0], [9.5, nan], [3.2, 3.0], [nan, 1.0]])  # rows a, b, c, d
    want = fuse_lists(mat, [0, 4], "condorcet")
    assert scores(res) == pytest.approx(dict(zip("abcd", want.tolist(), strict=True)), abs=1e-12)
    # a beats b and d outright and ties c: first; d loses or ties everything: last
    assert res["ranking"][0]["id"] == "a" and res["ranking"][-1]["id"] == "d"


def naive_rrf(systems: list[dict[str, Any]], k: float) -> dict[str, float]:
    out: dict[str, float] = {}
    for s in systems:
        ids = s["ids"]
        if s.get("scores") is not None:  # distinct scores: rank = position after sorting descending
            ids = [i for _, i in sorted(zip(s["scores"], ids, strict=True), key=lambda t: -t[0])]
        for r, i in enumerate(ids, start=1):
            out[i] = out.get(i, 0.0) + 1.0 / (k + r)
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_rrf_equals_a_naive_twin_on_random_lists(client: TestClient, seed: int) -> None:
    rng = np.random.default_rng(seed)
    queries = []
    for q in range(3):
        pool = [f"doc{j}" for j in range(int(rng.integers(3, 15)))]
        systems = []
        for _ in range(int(rng.integers(1, 4))):
            ids = list(rng.choice(pool, size=int(rng.integers(1, len(pool) + 1)), replace=False))
            if rng.random() < 0.5:
                systems.append({"ids": ids, "scores": rng.permutation(len(ids)).astype(float).tolist()})
            else:
                systems.append({"ids": ids})
        queries.append({"qid": f"q{q}", "systems": systems})
    k = float(rng.choice([1.0, 60.0, 2.5]))
    results = fuse(client, queries, "rrf", k=k)
    for q, res in zip(queries, results, strict=True):
        want = naive_rrf(q["systems"], k)
        assert scores(res) == pytest.approx(want, rel=1e-12)
        got = [d["score"] for d in res["ranking"]]
        assert got == sorted(got, reverse=True)


def test_top_k_cuts_the_fused_list(client: TestClient) -> None:
    (full,) = fuse(client, [EXAMPLE], "rrf")
    (top,) = fuse(client, [EXAMPLE], "rrf", top_k=2)
    assert top["ranking"] == full["ranking"][:2]
    assert top["n_documents"] == 4


def test_several_queries_are_fused_independently(client: TestClient) -> None:
    other = {"qid": "r", "systems": [{"ids": ["x", "a"]}, {"ids": ["a"]}]}
    res = fuse(client, [EXAMPLE, other], "rrf")
    assert [r["qid"] for r in res] == ["q", "r"]
    assert scores(res[1]) == pytest.approx({"x": 1 / 61, "a": 1 / 62 + 1 / 61}, abs=1e-15)
    assert scores(res[0])["a"] == pytest.approx(1 / 61 + 1 / 62, abs=1e-15)
