"""/health, /ready (503 while the model loads or when it cannot), /metrics, /models; the
service's imports."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

import tunemix.service.registry as registry_module
from tests.service.conftest import N_FEATURES, WIDE_FEATURES, Store, rank_body, ready_client, wait_ready
from tunemix.service.main import create_app
from tunemix.service.settings import Settings
from tunemix.service.worker_state import STATE_FILE, live_workers, publish_worker, write_pins


def test_health(client: TestClient) -> None:
    r = client.get("/health")
    assert r.status_code == 200 and r.json() == {"status": "ok"}


def test_ready_names_the_served_version(client: TestClient) -> None:
    r = client.get("/ready")
    while r.json().get("kernels") == "warming":  # the background warm-up ends (an event, no clock)
        r = client.get("/ready")
    assert r.status_code == 200
    assert r.json() == {"status": "ready", "model": "default", "version": "v2", "kernels": "warm"}


def test_ready_is_503_until_the_model_is_loaded(served_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The start-up loader is held on an event: until it is released, /ready and the scoring
    endpoints answer 503 while /health answers 200."""
    release = threading.Event()
    entered = threading.Event()
    real = registry_module.load_served

    def held(*args: Any, **kwargs: Any) -> Any:
        entered.set()
        assert release.wait(60), "the test never released the loader"
        return real(*args, **kwargs)

    monkeypatch.setattr(registry_module, "load_served", held)
    app = create_app(Settings(models_dir=served_dir, default_model="default"))
    body = rank_body(np.ones((2, N_FEATURES), dtype=np.float32), [2])
    with TestClient(app) as c:
        try:
            assert entered.wait(30)
            r = c.get("/ready")
            assert r.status_code == 503 and r.json()["status"] == "loading"
            assert c.get("/health").status_code == 200
            rank = c.post("/rank", json=body)
            assert rank.status_code == 503 and "still loading" in rank.json()["detail"]
        finally:
            release.set()
        assert wait_ready(c)["version"] == "v2"
        assert c.post("/rank", json=body).status_code == 200


def test_ready_reports_a_model_that_cannot_load(tmp_path: Path) -> None:
    (tmp_path / "models").mkdir()
    app = create_app(Settings(models_dir=tmp_path / "models", default_model="missing"))
    with TestClient(app) as c:
        for _ in range(600):  # the loader fails quickly; wait for it to have tried
            body = c.get("/ready").json()
            if body["status"] != "loading":
                break
            threading.Event().wait(0.05)
        r = c.get("/ready")
        assert r.status_code == 503
        assert r.json()["status"] == "failed" and "missing" in r.json()["detail"]
        rank = c.post("/rank", json=rank_body(np.ones((1, N_FEATURES), dtype=np.float32), [1]))
        # "failed" with the reason, not "not loaded yet"
        assert rank.status_code == 503, rank.text
        assert rank.json()["detail"] == ("the default model 'missing' failed to load: model 'missing' has no "
                                         "trained version; available: none")
        assert c.get("/health").status_code == 200


def samples(client: TestClient) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    r = client.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    out = {}
    for family in text_string_to_metric_families(r.text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def requests_total(m: dict[Any, float], endpoint: str, method: str, status: str) -> float:
    key = ("tunemix_http_requests_total", (("endpoint", endpoint), ("method", method), ("status", status)))
    return m.get(key, 0.0)


def test_metrics_count_requests_documents_and_errors(client: TestClient) -> None:
    before = samples(client)
    x = np.random.default_rng(0).normal(size=(7, N_FEATURES)).astype(np.float32)
    assert client.post("/rank", json=rank_body(x, [3, 4])).status_code == 200
    assert client.post("/rank", json=rank_body(x[:, :3], [7])).status_code == 422
    assert client.get("/health").status_code == 200
    after = samples(client)

    assert requests_total(after, "/rank", "POST", "200") == requests_total(before, "/rank", "POST", "200") + 1
    assert requests_total(after, "/rank", "POST", "422") == requests_total(before, "/rank", "POST", "422") + 1
    assert requests_total(after, "/health", "GET", "200") == requests_total(before, "/health", "GET", "200") + 1
    docs = ("tunemix_documents_scored_total", (("model", "default"),))
    assert after[docs] == before.get(docs, 0.0) + 7  # the rejected request scored nothing
    errors = ("tunemix_errors_total", (("kind", "invalid_input"),))
    assert after[errors] == before.get(errors, 0.0) + 1
    latency = ("tunemix_http_request_duration_seconds_count", (("endpoint", "/rank"),))
    assert after[latency] == before.get(latency, 0.0) + 2
    assert after[("tunemix_model_info", (("name", "default"), ("version", "v2")))] == 1.0


def test_models_lists_served_and_on_disk(client: TestClient) -> None:
    r = client.get("/models")
    assert r.status_code == 200
    body = r.json()
    assert body["default"] == "default"
    assert body["on_disk"] == {"default": ["v1", "v2"], "wide": ["v1"]}
    served = {m["name"]: m for m in body["models"]}
    assert served["default"]["version"] == "v2"
    assert served["default"]["n_features"] == N_FEATURES
    assert served["default"]["views"] == ["raw", "raw+std"]
    assert served["default"]["n_members"] >= 1 and served["default"]["n_bases"] >= 1


def test_one_model_summary(client: TestClient) -> None:
    r = client.get("/models/default")
    assert r.status_code == 200
    body = r.json()
    assert (body["name"], body["version"], body["n_features"]) == ("default", "v2", N_FEATURES)
    assert len(body["members"]) == body["n_members"] >= 1
    training = body["training"]
    assert training["config"]["name"] == "default"
    assert training["served"]["members"] == body["n_members"]
    assert set(training["evaluation"]["test"]["ensemble"]) >= {"yahoo", "trec"}
    wide = client.get("/models/wide").json()
    assert (wide["version"], wide["n_features"]) == ("v1", WIDE_FEATURES)
    missing = client.get("/models/nope")
    assert missing.status_code == 404 and "nope" in missing.json()["detail"]
    bad = client.get("/models/-bad")
    assert bad.status_code == 422 and "-bad" in bad.json()["detail"]


def test_model_summaries_show_no_server_path(client: TestClient, served_dir: Path, store: Store) -> None:
    manifest = json.loads((served_dir / "default" / "v2" / "manifest.json").read_text())
    trained_into = manifest["training_record"]["config"]["run"]["models_dir"]
    assert Path(trained_into).is_absolute()  # what the trainer wrote: the server's path
    for path in ("/models", "/models/default", "/models/wide"):
        text = client.get(path).text
        assert str(served_dir) not in text and str(store.default_v1.parents[2]) not in text, text[:300]
        assert '"/' not in text  # no absolute path at all
    body = client.get("/models/default").json()
    assert body["training"]["config"]["run"]["models_dir"] == Path(trained_into).name


def test_without_server_paths() -> None:
    models = Path("/srv/tunemix/models")
    record = {"run": {"models_dir": "/srv/tunemix/models", "report": "/srv/tunemix/models/default/v3/report.html"},
              "data": [{"path": "/home/ann/data/MQ2008/Fold1/train.txt"}, {"path": "~/data/vali.txt"},
                       {"path": "../../data/test.txt"}, {"path": "C:\\data\\test.txt"}],
              "views": ["raw", "raw+std"], "measure": "ndcg@10", "relative": "data/train.txt", "n": 3}
    assert registry_module.without_server_paths(record, models) == {
        "run": {"models_dir": ".", "report": "default/v3/report.html"},
        "data": [{"path": "train.txt"}, {"path": "vali.txt"}, {"path": "test.txt"}, {"path": "test.txt"}],
        "views": ["raw", "raw+std"], "measure": "ndcg@10", "relative": "data/train.txt", "n": 3}


def test_ready_means_every_worker(served_dir: Path, tmp_path: Path) -> None:
    """With a state directory /ready reads every worker's file: 200 only when each running worker
    serves the default model, "failed" with the reason when one could not load it. The other worker
    here is a stand-in process and the file it would write."""
    state = tmp_path / "state"
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        settings = Settings(models_dir=served_dir, default_model="default", workers=2, state_dir=state)
        with ready_client(settings) as c:
            wait_for_worker_file(state)
            r = c.get("/ready")  # the other worker has written nothing yet
            assert r.status_code == 503 and r.json()["status"] == "loading", r.text
            assert "1 of 2 workers" in r.json()["detail"]
            publish_worker(state, other.pid, {}, {"default": "model 'default' v2 cannot be loaded: bad"})
            r = c.get("/ready")
            assert r.status_code == 503 and r.json()["status"] == "failed", r.text
            why = f"worker {other.pid} failed to load it: model 'default' v2 cannot be loaded: bad"
            assert why in r.json()["detail"], r.text
            publish_worker(state, other.pid, {"default": "v2"}, {})  # serves, kernels still warming
            r = c.get("/ready")
            assert r.status_code == 503 and "1 of 2 workers" in r.json()["detail"], r.text
            publish_worker(state, other.pid, {"default": "v2"}, {}, warm=True)
            r = c.get("/ready")
            assert r.status_code == 200 and (r.json()["workers_serving"], r.json()["workers_total"]) == (2, 2), r.text
            other.kill()
            other.wait()
            r = c.get("/ready")  # its file goes with it
            assert r.status_code == 503 and r.json()["workers_serving"] == 1, r.text
            assert not (state / f"worker-{other.pid}.json").exists()
    finally:
        other.kill()
        other.wait()


def wait_for_worker_file(state: Path) -> None:
    """Until this process (the app's only worker here) has loaded the default model and warmed every
    kernel, and said so."""
    while not any(st["serving"].get("default") and st.get("kernels", {}).get("state") == "warm"
                  for st in live_workers(state).values()):
        threading.Event().wait(0.02)


def test_tunemix_serve_fails_clearly_on_a_missing_model(served_dir: Path, monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    from tunemix.cli import main

    for key in ("TUNEMIX_MODELS_DIR", "TUNEMIX_DEFAULT_MODEL"):  # restored after the test
        monkeypatch.setenv(key, "unset")
    assert main(["serve", "--models-dir", str(served_dir), "--model", "nosuch"]) == 2
    err = capsys.readouterr().err
    assert "model 'nosuch' has no trained version" in err and "models there: default, wide" in err, err


def test_openapi_documents_every_endpoint(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    paths = spec["paths"]
    for path in ("/rank", "/evaluate", "/fuse", "/health", "/ready", "/metrics", "/models", "/models/{name}",
                 "/models/reload"):
        assert path in paths, path
    body = paths["/rank"]["post"]["requestBody"]["content"]
    assert set(body) == {"application/json", "text/plain"}
    assert "RankRequest" in spec["components"]["schemas"]
    assert spec["components"]["schemas"]["RankRequest"]["examples"]


def test_the_service_imports_no_training_only_code() -> None:
    code = (
        "import sys, numpy, numba\n"
        "before = set(sys.modules)\n"
        "import tunemix.service.main\n"
        "bad = ['scipy', 'tqdm', 'matplotlib', 'dask', 'lightgbm', 'tunemix.train.learners', 'tunemix.train']\n"
        "print(sorted(m for m in set(sys.modules) - before if any(m == b or m.startswith(b + '.') for b in bad)))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_the_parallel_paths_are_warmed_after_readiness(store: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Loading a model warms its one-thread paths only (/ready turns 200 after them); the
    background warm-up then takes the views', the forest's and the calibration step's parallel
    kernels with two scoring threads, and only then lets requests score on several threads
    (the store's default model has the raw+std view)."""
    import numba

    from tunemix.core.data import normalization
    from tunemix.core.scoring import calibration_step, forest, runtime

    if int(numba.config.NUMBA_NUM_THREADS) < 2:  # type: ignore[attr-defined]
        pytest.skip("numba has one thread here: scoring never takes a parallel path")
    calls: list[str] = []
    for module, name in ((forest, "_score_parallel"), (calibration_step, "_calibrate_parallel"),
                         (normalization, "_standardise_parallel")):
        kernel = getattr(module, name)

        def spy(*args: Any, _kernel: Any = kernel, _name: str = name) -> Any:
            calls.append(_name)
            return _kernel(*args)

        monkeypatch.setattr(module, name, spy)
    monkeypatch.setattr(runtime, "_scoring_threads", 2)
    registry = registry_module.ModelRegistry(store.default_v1.parent.parent, "default")
    registry.install(registry_module.load_served(store.default_v1.parent.parent, "default", "v1"))
    assert calls == [] and not registry.parallel_warm
    from tunemix.service.main import warm_in_background

    warm_in_background(registry)
    assert set(calls) == {"_score_parallel", "_calibrate_parallel", "_standardise_parallel"}
    assert registry.parallel_warm


@pytest.mark.parametrize(("page", "asset"), [("/docs", "swagger-ui-bundle.js"), ("/redoc", "redoc.standalone.js")])
def test_the_docs_pages_work_offline(client: TestClient, page: str, asset: str) -> None:
    """Swagger UI and ReDoc load their scripts from the service itself, never from a CDN."""
    html = client.get(page)
    assert html.status_code == 200 and f"/static-offline-docs/{asset}" in html.text
    assert "cdn.jsdelivr" not in html.text and "unpkg.com" not in html.text
    script = client.get(f"/static-offline-docs/{asset}")
    assert script.status_code == 200 and len(script.content) > 100_000


def test_every_openapi_example_is_answered_200(client: TestClient) -> None:
    """What the docs page offers to "Try it out" works as it is against the served model."""
    spec = client.get("/openapi.json").json()
    comps = spec["components"]["schemas"]
    posted = []
    for path, operations in spec["paths"].items():
        for method, op in operations.items():
            content = op.get("requestBody", {}).get("content", {}).get("application/json")
            if not content:
                continue
            ref = content.get("schema", {}).get("$ref", "")
            example = content.get("example") or (comps.get(ref.rsplit("/", 1)[-1], {}).get("examples") or [None])[0]
            if example is None:
                continue
            r = client.request(method.upper(), path, json=example)
            assert r.status_code == 200, (path, example, r.text)
            posted.append(path)
    assert {"/rank", "/evaluate", "/fuse"} <= set(posted)
    rows = [d["features"] for d in spec["paths"]["/rank"]["post"]["requestBody"]["content"]["application/json"]
            ["example"]["queries"][0]["documents"] if isinstance(d["features"], list)]
    assert rows and all(len(r) == N_FEATURES for r in rows)  # written for the served model's feature count


def test_every_response_field_is_described(client: TestClient) -> None:
    comps = client.get("/openapi.json").json()["components"]["schemas"]
    for name in ("RankAnswer", "RankedQuery", "RankedDocument", "Explained", "PairExplained", "EvaluateResponse",
                 "ConventionResult", "FuseAnswer", "ModelsResponse", "ModelSummary", "ReloadResponse", "ErrorResponse"):
        for field, spec in comps[name]["properties"].items():
            assert spec.get("description"), f"{name}.{field} has no description"


def test_the_reload_poll_hops_to_a_thread_only_when_the_pins_change(served_dir: Path, tmp_path: Path) -> None:
    """``state_changed`` (the event loop's one ``stat`` a poll) is true exactly when the pins file's
    mtime is not the one last read: no file, the file as loaded, the file as followed are no
    change; a new write (a reload in another worker) is one, until ``follow_state`` adopts it."""
    state = tmp_path / "state"
    state.mkdir()
    registry = registry_module.ModelRegistry(served_dir, "default", state_dir=state)
    assert not registry.state_changed()  # nothing pinned yet
    registry.load_initial([])  # pins what it loaded
    assert (state / STATE_FILE).is_file()
    assert not registry.state_changed()
    version = registry.current("default").version  # type: ignore[union-attr]
    write_pins(state, {"default": version})
    path = state / STATE_FILE
    mtime = path.stat().st_mtime
    os.utime(path, (mtime + 5, mtime + 5))  # another worker's write, whatever the clock's resolution
    assert registry.state_changed()
    registry.follow_state()
    assert not registry.state_changed()
    assert registry.current("default").version == version  # type: ignore[union-attr]
    assert not registry_module.ModelRegistry(served_dir, "default").state_changed()  # no state directory


def queue_series(m: dict[Any, float], endpoint: str) -> tuple[float, float]:
    """(count, sum) of ``tunemix_http_request_queue_seconds`` for ``endpoint``."""
    labels = (("endpoint", endpoint),)
    return (m.get(("tunemix_http_request_queue_seconds_count", labels), 0.0),
            m.get(("tunemix_http_request_queue_seconds_sum", labels), 0.0))


def test_the_wait_before_the_handler_is_in_the_queue_histogram(served_dir: Path) -> None:
    """Requests that arrived 0.25 s before their handler started (the arrival the protocol stamps,
    set here by an outer layer): the queue histogram holds the wait, the latency histogram does not."""
    from tunemix.service.observability import ARRIVAL

    app = create_app(Settings(models_dir=served_dir, default_model="default"))
    waited = 0.25

    async def arrived_earlier(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] != "/metrics":
            scope["extensions"] = {**(scope.get("extensions") or {}), ARRIVAL: time.perf_counter() - waited}
        await app(scope, receive, send)

    with TestClient(arrived_earlier) as c:
        wait_ready(c)
        before = samples(c)
        x = np.random.default_rng(1).normal(size=(3, N_FEATURES)).astype(np.float32)
        assert c.post("/rank", json=rank_body(x, [3])).status_code == 200  # (the /rank shortcut)
        assert c.get("/health").status_code == 200
        after = samples(c)
    for endpoint in ("/rank", "/health"):
        (n0, s0), (n1, s1) = queue_series(before, endpoint), queue_series(after, endpoint)
        assert n1 == n0 + 1, (endpoint, n0, n1)
        assert s1 - s0 >= waited, (endpoint, s1 - s0)
    latency = ("tunemix_http_request_duration_seconds_sum", (("endpoint", "/health"),))
    assert after[latency] - before.get(latency, 0.0) < waited


def test_a_request_pipelined_behind_a_slow_one_shows_its_wait(app_two: tuple[str, subprocess.Popen[bytes]]) -> None:
    """``python -m tunemix.service``: a /health pipelined behind a /rank of 20,000 documents, both
    in one send, is read at once but handled after the /rank's answer: the queue histogram of
    /health holds that wait (the /rank's handling, as its latency histogram says), while /health's
    own latency is small."""
    url, _ = app_two
    port = int(url.rsplit(":", 1)[1])
    with httpx.Client(base_url=url) as c:
        before = samples(c)  # type: ignore[arg-type]
    x = np.random.default_rng(2).normal(size=(20_000, N_FEATURES)).astype(np.float32)
    body = json.dumps(rank_body(x, [20_000])).encode()
    post = (b"POST /rank HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
    last = b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(post + last)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    statuses = [part[:3] for part in answer.split(b"HTTP/1.1 ")[1:]]
    assert statuses[0] == b"200" and statuses[-1] == b"200", statuses
    with httpx.Client(base_url=url) as c:
        after = samples(c)  # type: ignore[arg-type]
    (n0, s0), (n1, s1) = queue_series(before, "/health"), queue_series(after, "/health")
    assert n1 == n0 + 1, (n0, n1)
    rank_key = ("tunemix_http_request_duration_seconds_sum", (("endpoint", "/rank"),))
    rank_took = after[rank_key] - before.get(rank_key, 0.0)
    health_key = ("tunemix_http_request_duration_seconds_sum", (("endpoint", "/health"),))
    health_took = after[health_key] - before.get(health_key, 0.0)
    assert s1 - s0 >= 0.5 * rank_took > health_took, (s1 - s0, rank_took, health_took)
