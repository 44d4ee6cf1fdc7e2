"""/rank's relevance: the expected grade and grade probabilities per document when asked, the same
ranking as without them, lists cut by min_relevance / min_probability, and a clear error for a
model without a relevance head."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient

from tests.artifact.tampering import reseal
from tests.service.conftest import N_FEATURES, Store, copy_version, rank_body, ready_client, wait_ready
from tunemix.service.settings import Settings

SIZES = [9, 4, 7]


def _x(seed: int = 0) -> np.ndarray:
    return np.round(np.random.default_rng(seed).normal(size=(sum(SIZES), N_FEATURES)), 3)


def test_relevance_keeps_the_ranking_and_agrees_with_it(client: TestClient) -> None:
    body = rank_body(_x(), SIZES)
    plain = client.post("/rank", json=body).json()
    rich = client.post("/rank", json={**body, "relevance": True}).json()
    assert "relevance" not in json.dumps(plain)  # off by default: today's answer, byte for byte in shape
    for p, r in zip(plain["results"], rich["results"], strict=True):
        assert [d["id"] for d in p["ranking"]] == [d["id"] for d in r["ranking"]]
        assert [d["score"] for d in p["ranking"]] == [d["score"] for d in r["ranking"]]
        expected = [d["relevance"] for d in r["ranking"]]
        assert all(a >= b - 1e-12 for a, b in itertools.pairwise(expected))
        for d in r["ranking"]:
            probs = d["probabilities"]
            assert len(probs) >= 2 and abs(sum(probs) - 1.0) < 1e-9 and all(0 <= v <= 1 for v in probs)
            assert abs(d["relevance"] - sum(k * v for k, v in enumerate(probs))) < 1e-9


@pytest.mark.parametrize("field", ["min_probability", "min_relevance"])
def test_a_threshold_cuts_each_list(client: TestClient, field: str) -> None:
    body = rank_body(_x(1), SIZES)
    rich = client.post("/rank", json={**body, "relevance": True}).json()["results"]
    values = [[(1 - d["probabilities"][0]) if field == "min_probability" else d["relevance"] for d in q["ranking"]]
              for q in rich]
    cut = float(np.median(np.concatenate(values)))
    got = client.post("/rank", json={**body, field: cut}).json()["results"]
    for q, v, full in zip(got, values, rich, strict=True):
        keep = sum(1 for x in v if x >= cut)
        assert [d["id"] for d in q["ranking"]] == [d["id"] for d in full["ranking"][:keep]]
        assert q["n_documents"] == full["n_documents"]
    text = "\n".join(f"0 qid:{q} " + " ".join(f"{j + 1}:{v}" for j, v in enumerate(row)) + f" # docid = d{i}"
                     for i, (q, row) in enumerate(zip(np.repeat([0, 1, 2], SIZES), _x(1), strict=True)))
    r = client.post(f"/rank?{field}={cut}&relevance=true", content=text.encode(),
                    headers={"Content-Type": "text/plain"})
    assert r.status_code == 200, r.text
    assert [len(q["ranking"]) for q in r.json()["results"]] == [len(q["ranking"]) for q in got]
    bad = client.post("/rank", json={**body, "min_probability": 1.5})
    assert bad.status_code == 422 and "min_probability" in bad.text


@pytest.mark.parametrize("head", ["absent", "older kind"])
def test_a_model_without_a_head_says_so(store: Store, tmp_path: Path, head: str) -> None:
    models = tmp_path / "models"
    old = copy_version(store.default_v1, models, "default", "v1")
    manifest = json.loads((old / "manifest.json").read_text())
    assert manifest["model"].get("relevance_head"), "the trainer fits a head for every model"
    if head == "absent":
        manifest["model"].pop("relevance_head")
    else:  # a head of the kind an earlier version wrote: the model loads and ranks, without relevance
        manifest["model"]["relevance_head"] = {"kind": "ordinal_logit", "n_grades": 3, "a": [0.5, 0.0], "g": 0.0,
                                               "b": [0.0, 0.0, 0.0], "theta": [0.0, 1.0]}
    (old / "manifest.json").write_text(json.dumps(manifest))
    reseal(old)
    with ready_client(Settings(models_dir=models, default_model="default")) as c:
        wait_ready(c)
        body = rank_body(_x(), SIZES)
        assert c.post("/rank", json=body).status_code == 200  # the ranking still works
        r = c.post("/rank", json={**body, "relevance": True})
        assert r.status_code == 422 and "no relevance head" in r.json()["detail"], r.text


def test_the_python_model_gives_probabilities(store: Store) -> None:
    import tunemix

    model = tunemix.load(store.default_v2)
    x = _x(2)
    proba = model.predict_proba(x, group=SIZES)
    assert proba.shape[0] == x.shape[0] and np.allclose(proba.sum(axis=1), 1.0)
    np.testing.assert_allclose(model.predict_relevance(x, SIZES), proba @ np.arange(proba.shape[1]), atol=1e-12)
    np.testing.assert_array_equal(model.predict(x, SIZES), model.ensemble.score_and_relevance(
        x.astype(np.float32), np.concatenate([[0], np.cumsum(SIZES)]))[0])


def test_an_infinite_min_relevance_is_refused_in_the_query_string_too(client: TestClient) -> None:
    """``?min_relevance=1e999`` (a text body's threshold) is a 422, as ``"min_relevance": 1e999``
    in a JSON body is, not an empty ranking."""
    text = b"qid:1 1:0.5\nqid:1 1:0.25\n"
    for value in ("1e999", "inf", "nan"):
        r = client.post(f"/rank?min_relevance={value}", content=text, headers={"Content-Type": "text/plain"})
        assert r.status_code == 422 and "min_relevance" in r.text, (value, r.text)
