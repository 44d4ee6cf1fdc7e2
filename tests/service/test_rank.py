"""POST /rank: the three JSON forms and the LETOR text body give the scores of
``EnsembleModel.score`` on the same features, ranked best first."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from tests.service.conftest import N_FEATURES, WIDE_FEATURES, Store, offsets_of, rank_body
from tunemix.core.data.svmlight import format_float32

SIZES = [6, 1, 9]


def features(n: int, d: int = N_FEATURES, seed: int = 0) -> np.ndarray:
    """float32 features (exactly representable in JSON as float64)."""
    return np.random.default_rng(seed).normal(size=(n, d)).astype(np.float32)


def scores_by_id(result: dict[str, Any]) -> dict[Any, float]:
    return {doc["id"]: doc["score"] for doc in result["ranking"]}


def check_ranking(result: dict[str, Any], n: int) -> None:
    """Ranks are 1..len, scores never increase down the list, ids unique."""
    ranking = result["ranking"]
    assert [d["rank"] for d in ranking] == list(range(1, len(ranking) + 1))
    s = [d["score"] for d in ranking]
    assert all(a >= b for a, b in itertools.pairwise(s)), s
    assert len({str(d["id"]) for d in ranking}) == len(ranking)
    assert result["n_documents"] == n


def expected_scores(store: Store, x: np.ndarray, sizes: list[int], version: str = "v2") -> list[dict[str, float]]:
    """Per query {id: score} computed directly by the model."""
    path = store.default_v2 if version == "v2" else store.default_v1
    direct = store.model(path).score(x, offsets_of(sizes))
    off = offsets_of(sizes)
    return [{f"d{j}": float(direct[off[q] + j]) for j in range(n)} for q, n in enumerate(sizes)]


def test_columnar_several_queries_equal_model_scores(client: TestClient, store: Store) -> None:
    x = features(sum(SIZES))
    r = client.post("/rank", json=rank_body(x, SIZES))
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["model"] == "default" and body["version"] == "v2"
    assert isinstance(body["server_time_ms"], float) and body["server_time_ms"] >= 0
    assert [q["qid"] for q in body["results"]] == ["q0", "q1", "q2"]
    for res, want, n in zip(body["results"], expected_scores(store, x, SIZES), SIZES, strict=True):
        check_ranking(res, n)
        got = scores_by_id(res)
        assert got.keys() == want.keys()
        np.testing.assert_allclose([got[k] for k in want], list(want.values()), rtol=1e-12, atol=0)
        # the order is the order of the scores (ties keep the posted order)
        assert [d["id"] for d in res["ranking"]] == sorted(want, key=lambda k: (-want[k], int(k[1:])))


def test_each_query_is_scored_on_its_own_list(client: TestClient, store: Store) -> None:
    """The model has a query-wise view (raw+std): one query posted alone scores as in the batch,
    so the service passes per-query offsets, not one list."""
    x = features(sum(SIZES), seed=1)
    model = store.model(store.default_v2)
    one_list = model.score(x, np.array([0, sum(SIZES)]))
    per_query = model.score(x, offsets_of(SIZES))
    assert not np.allclose(one_list, per_query), "the fixture model should depend on the list"
    batch = client.post("/rank", json=rank_body(x, SIZES)).json()["results"]
    off = offsets_of(SIZES)
    for q, n in enumerate(SIZES):
        alone = client.post("/rank", json=rank_body(x[off[q]:off[q + 1]], [n])).json()["results"][0]
        assert scores_by_id(alone) == pytest.approx(scores_by_id(batch[q]), rel=1e-12)
        got = scores_by_id(batch[q])
        np.testing.assert_allclose([got[f"d{j}"] for j in range(n)], per_query[off[q]:off[q + 1]], rtol=1e-12)


def test_dense_documents_equal_columnar(client: TestClient) -> None:
    x = features(7, seed=2)
    docs = [{"id": f"d{j}", "features": x[j].tolist()} for j in range(7)]
    a = client.post("/rank", json={"queries": [{"qid": "q0", "documents": docs}]}).json()
    b = client.post("/rank", json=rank_body(x, [7])).json()
    assert a["results"] == b["results"]


def test_sparse_ids_are_one_based(client: TestClient, store: Store) -> None:
    x = np.zeros((4, N_FEATURES), dtype=np.float32)
    x[0, 0] = 1.5      # "1"
    x[1, 4] = -2.0     # "5": the last column
    x[2, [1, 2]] = [0.25, 3.0]
    x[3] = features(1, seed=3)[0]  # a dense document in the same query
    docs: list[dict[str, Any]] = [
        {"id": "d0", "features": {"1": 1.5}},
        {"id": "d1", "features": {"5": -2.0}},
        {"id": "d2", "features": {"3": 3.0, "2": 0.25}},
        {"id": "d3", "features": x[3].tolist()},
    ]
    r = client.post("/rank", json={"queries": [{"qid": "s", "documents": docs}]})
    assert r.status_code == 200, r.text
    want = expected_scores(store, x, [4])[0]
    got = scores_by_id(r.json()["results"][0])
    np.testing.assert_allclose([got[k] for k in want], list(want.values()), rtol=1e-12)
    # shifting every id by one (a 0-based reading) scores differently
    shifted = np.roll(x[:3], -1, axis=1)
    assert not np.allclose(list(expected_scores(store, np.vstack([shifted, x[3:]]), [4])[0].values()),
                           list(want.values()))


def test_top_k_returns_the_best_prefix(client: TestClient) -> None:
    x = features(sum(SIZES), seed=4)
    full = client.post("/rank", json=rank_body(x, SIZES)).json()["results"]
    top = client.post("/rank", json=rank_body(x, SIZES, top_k=2)).json()["results"]
    for f, t, n in zip(full, top, SIZES, strict=True):
        assert len(t["ranking"]) == min(2, n)
        assert t["ranking"] == f["ranking"][:2]
        assert t["n_documents"] == n


def test_equal_scores_keep_the_posted_order(client: TestClient) -> None:
    row = features(1, seed=5)[0].tolist()
    body = {"queries": [{"qid": "t", "ids": ["z", "a", "m"], "features": [row, row, row]}]}
    ranking = client.post("/rank", json=body).json()["results"][0]["ranking"]
    assert [d["id"] for d in ranking] == ["z", "a", "m"]
    assert ranking[0]["score"] == ranking[1]["score"] == ranking[2]["score"]


def test_ids_and_qids_are_echoed_with_their_type(client: TestClient) -> None:
    x = features(2, seed=6)
    body = {"queries": [{"qid": 17, "ids": [3, "3b"], "features": x.tolist()}]}
    res = client.post("/rank", json=body).json()["results"][0]
    assert res["qid"] == 17
    assert sorted(d["id"] for d in res["ranking"] if isinstance(d["id"], int)) == [3]
    assert {type(d["id"]) for d in res["ranking"]} == {int, str}


def test_version_and_model_selection(client: TestClient, store: Store) -> None:
    x = features(sum(SIZES), seed=7)
    r1 = client.post("/rank", json=rank_body(x, SIZES, version="v1")).json()
    assert (r1["model"], r1["version"]) == ("default", "v1")
    want1 = expected_scores(store, x, SIZES, "v1")
    want2 = expected_scores(store, x, SIZES, "v2")
    for res, w1 in zip(r1["results"], want1, strict=True):
        got = scores_by_id(res)
        np.testing.assert_allclose([got[k] for k in w1], list(w1.values()), rtol=1e-12)
    assert not np.allclose([v for w in want1 for v in w.values()], [v for w in want2 for v in w.values()])
    r2 = client.post("/rank", json=rank_body(x, SIZES, model="default", version="v2")).json()
    assert r2["version"] == "v2"
    # another model with another feature count
    xw = features(3, d=WIDE_FEATURES, seed=8)
    rw = client.post("/rank", json=rank_body(xw, [3], model="wide"))
    assert rw.status_code == 200, rw.text
    assert (rw.json()["model"], rw.json()["version"]) == ("wide", "v1")
    direct = store.model(store.wide_v1).score(xw, offsets_of([3]))
    got = scores_by_id(rw.json()["results"][0])
    np.testing.assert_allclose([got[f"d{j}"] for j in range(3)], direct, rtol=1e-12)


def letor_text(x: np.ndarray, sizes: list[int], labels: np.ndarray | None, *, docids: bool = True) -> bytes:
    """LETOR lines of ``x``; ``labels`` None: lines without a label, as serving data has none."""
    lines, lo = [], 0
    for q, n in enumerate(sizes):
        for j in range(n):
            vals = format_float32(x[lo + j])
            feats = " ".join(f"{f + 1}:{v}" for f, v in enumerate(vals))
            tail = f" # docid = d{j}" if docids else ""
            head = "" if labels is None else f"{int(labels[lo + j])} "
            lines.append(f"{head}qid:q{q} {feats}{tail}")
        lo += n
    return ("\n".join(lines) + "\n").encode()


def test_letor_text_body_ranks_like_json_and_ignores_labels(client: TestClient, store: Store) -> None:
    x = features(sum(SIZES), seed=9)
    json_res = client.post("/rank", json=rank_body(x, SIZES)).json()["results"]
    rng = np.random.default_rng(0)
    for labels in (np.zeros(sum(SIZES)), rng.integers(0, 3, sum(SIZES)), None):
        r = client.post("/rank", content=letor_text(x, SIZES, labels), headers={"Content-Type": "text/plain"})
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["version"] == "v2"
        assert [q["qid"] for q in body["results"]] == ["q0", "q1", "q2"]
        for t, j in zip(body["results"], json_res, strict=True):
            assert t["ranking"] == j["ranking"]
    # query parameters: version and top_k; without docid comments the ids are positions, as strings
    r = client.post("/rank?version=v1&top_k=3", content=letor_text(x, SIZES, np.zeros(sum(SIZES)), docids=False),
                    headers={"Content-Type": "text/plain; charset=utf-8"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["version"] == "v1"
    want = expected_scores(store, x, SIZES, "v1")
    for res, w, n in zip(body["results"], want, SIZES, strict=True):
        assert len(res["ranking"]) == min(3, n)
        for doc in res["ranking"]:
            assert isinstance(doc["id"], str)
            assert doc["score"] == pytest.approx(w[f"d{doc['id']}"], rel=1e-12)


def test_letor_lines_without_docid_among_lines_with_one(client: TestClient) -> None:
    text = b"0 qid:7 1:1 2:0.5 # docid = first\n1 qid:7 1:0.2\n2 qid:7 3:1\n"
    r = client.post("/rank", content=text, headers={"Content-Type": "text/plain"})
    assert r.status_code == 200, r.text
    assert sorted(d["id"] for d in r.json()["results"][0]["ranking"]) == ["1", "2", "first"]  # strings, all


def _dense_body(x: np.ndarray, sizes: list[int]) -> dict[str, Any]:
    queries, lo = [], 0
    for q, n in enumerate(sizes):
        queries.append({"qid": f"q{q}", "documents": [{"id": f"d{j}", "features": x[lo + j].tolist()}
                                                      for j in range(n)]})
        lo += n
    return {"queries": queries}


def _variants() -> list[tuple[str, bytes]]:
    """Bodies of the fast path's shape, valid and not, as raw JSON text."""
    import json

    x = features(16)
    good = _dense_body(x, SIZES)
    out = [("good", json.dumps(good)), ("top_k", json.dumps({**good, "top_k": 2})),
           ("model", json.dumps({**good, "model": "default", "version": "v1"}))]

    def edit(name: str, fn: Any) -> None:
        body = json.loads(json.dumps(good))
        fn(body)
        out.append((name, json.dumps(body)))

    d0 = lambda b: b["queries"][0]["documents"][0]  # noqa: E731
    edit("int ids and qid", lambda b: (b["queries"][1].update(qid=7), d0(b).update(id=3)))
    edit("ints and bools among floats", lambda b: d0(b)["features"].__setitem__(slice(0, 2), [2, True]))
    edit("numeric string", lambda b: d0(b)["features"].__setitem__(0, "1.5"))
    edit("word", lambda b: d0(b)["features"].__setitem__(0, "one"))
    edit("null value", lambda b: d0(b)["features"].__setitem__(0, None))
    edit("one feature short", lambda b: d0(b)["features"].pop())
    edit("one feature too many", lambda b: d0(b)["features"].append(0.5))
    edit("every row short", lambda b: [doc["features"].pop() for q in b["queries"] for doc in q["documents"]])
    edit("beyond float32", lambda b: d0(b)["features"].__setitem__(3, 1e39))
    edit("duplicate id", lambda b: b["queries"][0]["documents"][1].update(id="d0"))
    edit("empty documents", lambda b: b["queries"][1].update(documents=[]))
    edit("extra key", lambda b: d0(b).update(score=1.0))
    edit("bool id", lambda b: d0(b).update(id=True))
    edit("float qid", lambda b: b["queries"][0].update(qid=1.0))
    edit("top_k zero", lambda b: b.update(top_k=0))
    edit("top_k bool", lambda b: b.update(top_k=True))
    edit("unknown version", lambda b: b.update(version="v9"))
    edit("sparse document", lambda b: d0(b).update(features={"1": 0.5}))
    edit("huge integer", lambda b: d0(b)["features"].__setitem__(0, 2**60 + 1))
    out.append(("NaN token", json.dumps(good).replace(str(x[0, 0].item()), "NaN", 1)))
    out.append(("not json", "{\"queries\": ["))
    return [(name, text.encode()) for name, text in out]


#: what each variant gets: the valid ones 200 (null: a missing value), the rest a 4xx (strict: no
#: coercion of types)
VARIANT_STATUS = {"good": 200, "top_k": 200, "model": 200, "int ids and qid": 200, "sparse document": 200,
                  "huge integer": 200, "null value": 200}


@pytest.mark.parametrize(("name", "body"), _variants(), ids=[n for n, _ in _variants()])
def test_rank_answers_every_variant_of_the_body(client: TestClient, store: Store, name: str, body: bytes) -> None:
    """One path for every body: the valid variants are scored as their arrays are (the same
    scores as the model's own call), every other variant is a 4xx whose message names where the
    problem is, and nothing is coerced (a bool, a numeric string or a float qid is refused)."""
    import json

    r = client.post("/rank", content=body, headers={"Content-Type": "application/json"})
    want = VARIANT_STATUS.get(name, 422)
    assert r.status_code == want, (name, r.text)
    if want != 200:
        assert r.json()["detail"], r.text
        return
    assert [q["qid"] for q in r.json()["results"]][1:] == [q["qid"] for q in json.loads(body)["queries"]][1:]
    if name == "good":
        x = features(16)
        for res, exp in zip(r.json()["results"], expected_scores(store, x, SIZES), strict=True):
            np.testing.assert_allclose([scores_by_id(res)[k] for k in exp], list(exp.values()), rtol=1e-12, atol=0)


def test_a_small_body_is_answered_on_the_event_loop(client: TestClient, store: Store,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """No thread hop for a small body when the worker is idle; the same answer as through the
    threads (the same functions run)."""
    from tunemix.service import lanes
    from tunemix.service.routers import rank as rank_module

    x = features(sum(SIZES), seed=5)
    threads = client.post("/rank", json=rank_body(x, SIZES), params={})  # inline_max_bytes default: inline
    calls: list[str] = []

    async def no_hop(*args: Any) -> Any:
        calls.append("hop")
        return await lanes.parse_and_score(*args)

    monkeypatch.setattr(rank_module, "parse_and_score", no_hop)
    inline = client.post("/rank", json=rank_body(x, SIZES))
    assert inline.status_code == 200 and calls == []
    monkeypatch.setattr(client.app.state.settings, "inline_max_bytes", 0)  # type: ignore[attr-defined]
    hopped = client.post("/rank", json=rank_body(x, SIZES))
    assert calls == ["hop"]
    assert inline.json()["results"] == hopped.json()["results"] == threads.json()["results"]


def test_an_idle_worker_parses_and_scores_in_one_hop_a_busy_one_in_two(
        client: TestClient, store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """A request goes to a single thread hop when no other request is scoring or waiting to
    (``tunemix.service.lanes.parse_and_score``), and to the two hops otherwise (parsing in ``python_work``,
    then ``scoring``); the answers are the same, and the counter and the scoring slot are given
    back either way, also after a 422. (Bodies up to ``inline_max_bytes`` are answered on the
    event loop instead: set to 0 here.)"""
    from tunemix.service.routers import rank as rank_module

    monkeypatch.setattr(client.app.state.settings, "inline_max_bytes", 0)  # type: ignore[attr-defined]
    hops: list[str] = []
    for name in ("python_work", "scoring"):
        original = getattr(rank_module, name)

        async def spy(*args: Any, _original: Any = original, _name: str = name, **kwargs: Any) -> Any:
            hops.append(_name)
            return await _original(*args, **kwargs)

        monkeypatch.setattr(rank_module, name, spy)
    state = client.app.state  # type: ignore[attr-defined]
    slots = state.scoring_slots.available_tokens
    x = features(sum(SIZES), seed=4)
    idle = client.post("/rank", json=rank_body(x, SIZES))
    assert idle.status_code == 200, idle.text
    assert hops == []
    state.scoring_requests = 1  # as if another request were scoring
    try:
        busy = client.post("/rank", json=rank_body(x, SIZES))
    finally:
        state.scoring_requests = 0
    assert busy.status_code == 200, busy.text
    assert hops == ["python_work", "scoring"]
    assert idle.json()["results"] == busy.json()["results"]
    for res, want in zip(idle.json()["results"], expected_scores(store, x, SIZES), strict=True):
        np.testing.assert_allclose([scores_by_id(res)[k] for k in want], list(want.values()), rtol=1e-12, atol=0)
    bad = rank_body(x, SIZES)
    bad["queries"][1]["features"][0] = bad["queries"][1]["features"][0][:-1]
    r = client.post("/rank", json=bad)
    assert r.status_code == 422 and "q1" in r.text
    assert state.scoring_requests == 0 and state.scoring_slots.available_tokens == slots


def test_null_is_a_missing_value_in_every_form(client: TestClient, store: Store) -> None:
    """JSON null per feature value: columnar rows, dense documents and sparse documents give the
    model's scores of the matrix with NaN there; explanations of such a list are exact; an
    infinity is still refused, naming the query, row and feature."""
    x = features(9, seed=5)
    x[np.random.default_rng(5).random(x.shape) < 0.2] = np.nan
    x[:, 1] = np.nan
    rows = [[None if np.isnan(v) else float(v) for v in row] for row in x]
    want = store.model(store.default_v2).score(x, offsets_of([9]))
    assert np.all(np.isfinite(want))
    columnar = client.post("/rank", json={"queries": [{"qid": "q0", "ids": [f"d{j}" for j in range(9)],
                                                        "features": rows}]})
    assert columnar.status_code == 200, columnar.text
    got = scores_by_id(columnar.json()["results"][0])
    np.testing.assert_allclose([got[f"d{j}"] for j in range(9)], want, rtol=1e-12, atol=0)
    dense = [{"id": f"d{j}", "features": rows[j]} for j in range(9)]
    sparse = [{"id": f"d{j}", "features": {str(k + 1): v for k, v in enumerate(rows[j])}} for j in range(9)]
    for docs in (dense, sparse):
        r = client.post("/rank", json={"queries": [{"qid": "q0", "documents": docs}]})
        assert r.status_code == 200, r.text
        assert r.json()["results"] == columnar.json()["results"]
    explained = client.post("/rank", json={"queries": [{"qid": "q0", "documents": dense}], "explain": 3})
    assert explained.status_code == 200, explained.text
    rows[4][2] = 1e39
    bad = client.post("/rank", json={"queries": [{"qid": "q0", "ids": [f"d{j}" for j in range(9)],
                                                   "features": rows}]})
    assert bad.status_code == 422 and "features[4]: feature 3 is not a finite float32 number" in bad.text


def test_letor_text_with_omitted_features_as_missing(client: TestClient, store: Store) -> None:
    """``?missing=nan``: a feature a line leaves out is missing (the model's score of NaN there),
    without it 0; a written NaN is refused either way."""
    text = b"0 qid:7 1:0.5 3:-1 # docid = a\n0 qid:7 2:0.25 # docid = b\n0 qid:7 1:2 2:1 3:0 # docid = c\n"
    x = np.full((3, N_FEATURES), np.nan, dtype=np.float32)
    x[0, [0, 2]] = [0.5, -1.0]
    x[1, 1] = 0.25
    x[2, :3] = [2.0, 1.0, 0.0]
    model = store.model(store.default_v2)
    for query, want in (("?missing=nan", model.score(x, offsets_of([3]))),
                        ("", model.score(np.nan_to_num(x, nan=0.0), offsets_of([3])))):
        r = client.post(f"/rank{query}", content=text, headers={"Content-Type": "text/plain"})
        assert r.status_code == 200, r.text
        got = scores_by_id(r.json()["results"][0])
        np.testing.assert_allclose([got[k] for k in "abc"], want, rtol=1e-12, atol=0)
    for query in ("?missing=nan", ""):
        bad = client.post(f"/rank{query}", content=b"0 qid:7 1:nan 2:1\n", headers={"Content-Type": "text/plain"})
        assert bad.status_code == 422 and "body:1: '1:nan'" in bad.json()["detail"], bad.text
    assert client.post("/rank?missing=maybe", content=text, headers={"Content-Type": "text/plain"}).status_code == 422
