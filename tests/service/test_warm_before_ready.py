"""Issue 37, reproduction 12: ``/ready`` says 200 only once every kernel a request can reach is
compiled or loaded from numba's cache (``tunemix.compile.serving.warm_all``): after it, requests of every
endpoint, convention and method, explanations of every shape and bodies drawn from the cost
search's grammar compile nothing (numba's dispatchers gain no signature). The
check is an event (a dispatcher's signature list), not a clock."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx

from tests.service.conftest import ROOT, Store, copy_version
from tests.service.two_workers import start_two_workers

#: bodies per endpoint drawn from ``bench.cost_search.Grammar``
GRAMMAR_BODIES = 60

PROBE = r"""
import json, sys, time
import numpy as np
from numba.core.dispatcher import Dispatcher
from fastapi.testclient import TestClient
from tunemix.service.main import create_app
from tunemix.service.settings import Settings

def dispatchers():
    out = {}
    for name, mod in list(sys.modules.items()):
        if mod is None or not name.startswith("tunemix."):
            continue
        for attr, value in list(vars(mod).items()):
            if isinstance(value, Dispatcher):
                out[f"{name}.{attr}"] = len(value.signatures)
    return out

app = create_app(Settings(models_dir=sys.argv[1], default_model="default", scoring_threads=2,
                          parallel_min_documents=0))
with TestClient(app) as c:
    while (r := c.get("/ready")).status_code != 200:
        assert r.json()["status"] in ("loading", "warming"), r.text
    before = dispatchers()
    rng = np.random.default_rng(0)
    n_features = c.get("/models").json()["models"][0]["n_features"]
    def docs(n):
        return [{"id": f"d{i}", "features": rng.normal(size=n_features).round(3).tolist()} for i in range(n)]
    for n in (3, 40, 600):
        assert c.post("/rank", json={"queries": [{"qid": "q", "documents": docs(n)}], "top_k": 5}).status_code == 200
    assert c.post("/rank", json={"queries": [{"qid": "q", "documents": docs(8), "explain_pair": ["d0", "d1"]}],
                                 "explain": 2}).status_code == 200
    labels = rng.integers(0, 3, size=60).tolist()
    scores = rng.normal(size=60).round(1).tolist()
    metrics = ["ndcg@3", "ndcg@40", "ndcg", "dcg@3", "err", "err@3", "p@3", "map", "meanndcg"]
    body = {"queries": [{"qid": "a", "labels": labels[:45], "scores": scores[:45]},
                        {"qid": "b", "labels": labels[45:], "scores": scores[45:],
                         "docids": [f"x{i}" for i in range(15)]}],
            "metrics": metrics, "convention": "all", "per_query": True}
    assert c.post("/evaluate", json=body).status_code == 200
    fuse = {"queries": [{"qid": "q", "systems": [{"ids": ["a", "b", "c"], "scores": [3.0, 2.0, 1.0]},
                                                 {"ids": ["c", "a", "d"]}]}]}
    for method in ("rrf", "combsum", "combmnz", "condorcet"):
        for top_k in (None, 2):
            assert c.post("/fuse", json={**fuse, "method": method, "top_k": top_k}).status_code == 200
    # explanations of every shape: one document explained (its arrays are (1, M), numba's
    # read-only trap), one with the relevance head, a pair alone, sparse features
    sparse = [{"id": f"d{i}", "features": {str(j + 1): 0.5 for j in range(0, n_features, 3)}} for i in range(2)]
    for body in ({"queries": [{"qid": "q", "documents": docs(1)}], "explain": 1},
                 {"queries": [{"qid": "q", "documents": docs(1)}], "explain": 5, "relevance": True},
                 {"queries": [{"qid": "q", "documents": docs(2), "explain_pair": ["d1", "d0"]}]},
                 {"queries": [{"qid": "q", "documents": sparse}, {"qid": "r", "documents": docs(30)}],
                  "explain": 3, "top_k": 1}):
        assert c.post("/rank", json=body).status_code == 200, body
    # and the cost search's grammar (bench.cost_search): bodies of every shape each endpoint's
    # schema allows, hostile ones too, kept small; whatever they are answered, nothing compiles
    import random
    from bench.cost_search import Grammar
    grammar = Grammar(random.Random(0), 48 * 1024, n_features=n_features)
    statuses = set()
    for endpoint in ("/rank", "/evaluate", "/fuse"):
        for _ in range(int(sys.argv[2])):
            r = c.post(endpoint, content=grammar.body(endpoint), headers={"Content-Type": "application/json"})
            assert r.status_code < 500, (endpoint, r.status_code, r.text[:300])
            statuses.add((endpoint, r.status_code))
    assert {e for e, code in statuses if code == 200} == {"/rank", "/evaluate", "/fuse"}, statuses
    after = dispatchers()
print(json.dumps({k: [before.get(k, 0), v] for k, v in after.items() if v != before.get(k, 0)}))
"""


def test_reproduction_12_nothing_compiles_after_ready(store: Store, tmp_path: Path) -> None:
    copy_version(store.default_v1, tmp_path / "models", "default", "v1")
    env = dict(os.environ)
    out = subprocess.run([sys.executable, "-c", PROBE, str(tmp_path / "models"), str(GRAMMAR_BODIES)], cwd=ROOT,
                         env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    compiled_after_ready = json.loads(out.stdout.strip().splitlines()[-1])
    assert compiled_after_ready == {}, compiled_after_ready


def test_two_workers_say_ready_only_with_every_kernel_warm(store: Store, tmp_path: Path) -> None:
    copy_version(store.default_v1, tmp_path / "models", "default", "v1")
    server = start_two_workers(tmp_path / "models", tmp_path)  # ten 200s in a row: both workers
    try:
        for _ in range(6):
            r = httpx.get(server.url + "/ready", timeout=None, headers={"Connection": "close"})
            assert r.status_code == 200 and r.json()["kernels"] == "warm", r.text
            assert r.json()["workers_serving"] == 2
    finally:
        server.stop()
