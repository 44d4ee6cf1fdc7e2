"""What a hostile or careless client cannot do to the service: crash a worker, hold it with a slow
body, outgrow the documented bounds, or get a 500 from a broken model on disk."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from fastapi.testclient import TestClient

from tests.artifact.tampering import edit_manifest
from tests.service.conftest import (
    N_FEATURES,
    ROOT,
    LiveServer,
    Store,
    copy_version,
    ready_client,
    start_server,
    stop_server,
    wait_ready,
)
from tunemix.service.json_body import MAX_NUMBER_CHARS
from tunemix.service.settings import Settings

ROW = [0.1, 0.2, 0.3, 0.4, 0.5]
JSON = {"Content-Type": "application/json"}


def _rank(qid: Any = "q1", **query: Any) -> dict[str, Any]:
    return {"queries": [{"qid": qid, **query}]}


# ---------------------------------------------------------------------------- a corpus of bad bodies
def bad_bodies() -> list[tuple[str, bytes]]:
    good = json.dumps(_rank(ids=["a", "b"], features=[ROW, ROW])).encode()
    return [
        ("truncated", good[: len(good) // 2]),
        ("nested 50,000 deep", b"[" * 50_000 + b"]" * 50_000),
        ("nested 50,000 deep in queries", b'{"queries":' + b"[" * 50_000 + b"]" * 50_000 + b"}"),
        ("nested in features", b'{"queries":[{"qid":1,"ids":[1],"features":' + b"[" * 50_000 + b"]" * 50_000 + b"}]}"),
        ("NaN literal", good.replace(b"0.1", b"NaN", 1)),
        ("Infinity literal", good.replace(b"0.1", b"Infinity", 1)),
        ("1e400", good.replace(b"0.1", b"1e400", 1)),
        ("5,000-digit number", good.replace(b"0.1", b"9" * 5000, 1)),
        ("empty row (columnar)", json.dumps(_rank(ids=["a", "b"], features=[ROW, []])).encode()),
        ("ragged rows (columnar)", json.dumps(_rank(ids=["a", "b"], features=[ROW, [*ROW, 1.0]])).encode()),
        ("empty row (documents)", json.dumps(_rank(documents=[{"id": "a", "features": []}])).encode()),
        ("ragged rows (documents)", json.dumps(_rank(documents=[{"id": "a", "features": ROW},
                                                               {"id": "b", "features": ROW[:2]}])).encode()),
        ("the row locator's overflow", b'{"queries":[{"qid":1,"features":[[1]' + b",[]" * 21_900 + b"]}]}"),
        ("short rows after a long one",
         b'{"queries":[{"qid":1,"ids":[1,2,3],"features":[[1,2,3,4,5,6,7,8,9],[1],[2]]}]}'),
        ("invalid UTF-8 in a string", good.replace(b'"a"', b'"\xff\xfe"', 1)),
        ("invalid UTF-8 outside strings", good + b"\xff"),
        ("lone surrogate escape", good.replace(b'"a"', b'"\\ud800"', 1)),
        ("not an object", b"42"),
        ("empty", b""),
        ("whitespace", b" \n\t "),
        ("null byte", good.replace(b"0.2", b"0\x002", 1)),
        ("trailing garbage", good + b"}"),
        ("duplicate sparse key", b'{"queries":[{"qid":1,"documents":[{"id":1,"features":{"1":1,"1":2}}]}]}'),
    ]


@pytest.mark.parametrize(("name", "body"), bad_bodies(), ids=[n for n, _ in bad_bodies()])
def test_bad_bodies_are_4xx_and_the_worker_lives(client: TestClient, name: str, body: bytes) -> None:
    r = client.post("/rank", content=body, headers=JSON)
    assert 400 <= r.status_code < 500, (name, r.status_code, r.text)
    assert r.json()["detail"]
    ok = client.post("/rank", json=_rank(ids=["a"], features=[ROW]))
    assert ok.status_code == 200, ok.text


def test_a_long_fraction_is_just_a_number_up_to_the_bound(client: TestClient) -> None:
    """A fraction of ``MAX_NUMBER_CHARS`` characters is a number like any other; a longer one is a
    422 naming the field (past the bound the JSON libraries read one text differently)."""
    body = json.dumps(_rank(ids=["a", "b"], features=[ROW, ROW[::-1]])).encode()
    longest = b"0." + b"1" * (MAX_NUMBER_CHARS - 2)
    r = client.post("/rank", content=body.replace(b"0.1", longest, 1), headers=JSON)
    assert r.status_code == 200, r.text
    r = client.post("/rank", content=body.replace(b"0.1", b"0." + b"1" * 5000, 1), headers=JSON)
    assert r.status_code == 422 and "features[0][0]: a number of 5002 characters" in r.json()["detail"], r.text


@pytest.fixture(scope="module")
def slow_server(store: Store, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """A real server whose clients have one second to send a body."""
    base = tmp_path_factory.mktemp("slow")
    copy_version(store.default_v1, base / "models", "default", "v1")
    server = start_server(base / "models", token="t", log_path=base / "uvicorn.log", TUNEMIX_BODY_TIMEOUT_S="1")
    try:
        yield server
    finally:
        stop_server(server)


def _open_slow_body(port: int) -> socket.socket:
    """A connection that has sent its headers (a 1,000-byte body announced) and one body byte."""
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(b"POST /rank HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{")
    return sock


def _read_until_closed(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (the event waited on)."""
    sock.settimeout(None)
    out = b""
    while chunk := sock.recv(65536):
        out += chunk
    return out


def test_slow_bodies_are_cut_off_and_hold_no_one_up(slow_server: LiveServer) -> None:
    """A hundred clients that send headers and then stall: other requests are answered meanwhile,
    and each stalled client gets a 408 and a closed connection once its body timeout has passed."""
    slow = [_open_slow_body(slow_server.port) for _ in range(100)]
    try:
        with httpx.Client(base_url=slow_server.url, timeout=None) as c:
            r = c.post("/rank", json=_rank(ids=["a", "b"], features=[ROW, ROW[::-1]]))
            assert r.status_code == 200, r.text
        answers = [_read_until_closed(s) for s in slow]
    finally:
        for s in slow:
            s.close()
    for answer in answers:
        assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
        assert b"TUNEMIX_BODY_TIMEOUT_S" in answer


def test_the_crash_body_is_refused_by_a_real_worker(slow_server: LiveServer) -> None:
    """The 65,740-byte body that crashed a worker through the old hand-written reader."""
    body = b'{"queries":[{"qid":1,"features":[[1]' + b",[]" * 21_900 + b"]}]}"
    with httpx.Client(base_url=slow_server.url, timeout=None) as c:
        for _ in range(3):
            r = c.post("/rank", content=body, headers=JSON)
            assert r.status_code == 422, r.text
        assert c.get("/health").status_code == 200
    assert slow_server.proc.poll() is None


# ---------------------------------------------------------------------------- bounds
@pytest.fixture(scope="module")
def bounded(served_dir: Path) -> Iterator[TestClient]:
    settings = Settings(models_dir=served_dir, default_model="default", max_body_bytes=4096, max_id_length=8,
                        max_fuse_systems=3, max_fuse_ids=4, max_queries=2, max_documents=6)
    with ready_client(settings) as c:
        wait_ready(c)
        yield c


def test_a_chunked_body_over_the_limit_is_413(bounded: TestClient) -> None:
    big = json.dumps(_rank(ids=[str(i) for i in range(200)], features=[ROW] * 200)).encode()
    assert len(big) > 4096

    def chunks() -> Iterator[bytes]:  # no Content-Length: the limit must hold as the chunks add up
        yield big

    r = bounded.post("/rank", content=chunks(), headers=JSON)
    assert r.status_code == 413 and "TUNEMIX_MAX_BODY_BYTES" in r.json()["detail"], r.text


@pytest.mark.parametrize(("path", "body", "status", "words"), [
    ("/rank", {"queries": [{"qid": i, "ids": ["a"], "features": [ROW]} for i in range(3)]}, 413,
     ["3 queries", "TUNEMIX_MAX_QUERIES"]),
    ("/rank", _rank(ids=[str(i) for i in range(7)], features=[ROW] * 7), 413, ["7 documents", "TUNEMIX_MAX_DOCUMENTS"]),
    ("/rank", _rank(ids=["a" * 9], features=[ROW]), 422, ["query 'q1'", "9 characters", "TUNEMIX_MAX_ID_LENGTH"]),
    ("/rank", _rank(qid="q" * 9, ids=["a"], features=[ROW]), 422, ["qid", "TUNEMIX_MAX_ID_LENGTH"]),
    ("/fuse", {"queries": [{"qid": "f", "systems": [{"ids": [str(i)]} for i in range(4)]}]}, 413,
     ["query 'f'", "4 systems", "TUNEMIX_MAX_FUSE_SYSTEMS"]),
    ("/fuse", {"queries": [{"qid": "f", "systems": [{"ids": [str(i) for i in range(5)]}]}]}, 413,
     ["systems[0]", "5 ids", "TUNEMIX_MAX_FUSE_IDS"]),
])
def test_every_bound_answers_naming_its_setting(bounded: TestClient, path: str, body: Any, status: int,
                                                words: list[str]) -> None:
    r = bounded.post(path, json=body)
    assert r.status_code == status, r.text
    for w in words:
        assert w in r.json()["detail"], (w, r.text)


def test_fuse_memory_follows_the_entries_posted(client: TestClient) -> None:
    """The body that once cost a worker 670-860 MB (one query of 6,000 one-id systems, another of
    one system of 6,000 ids) is refused by the systems bound; with the bound raised, the fusion
    works system by system (``tunemix.service.routers.fuse.fuse_entries``: no documents x systems matrix)."""
    body = {"queries": [{"qid": "a", "systems": [{"ids": [str(i)]} for i in range(6000)]},
                        {"qid": "b", "systems": [{"ids": [str(i) for i in range(6000)]}]}]}
    r = client.post("/fuse", json=body)
    assert r.status_code == 413 and "TUNEMIX_MAX_FUSE_SYSTEMS" in r.text


@pytest.mark.parametrize("method", ["rrf", "combsum", "combmnz", "condorcet"])
@pytest.mark.parametrize("top_k", [None, 1, 3])
def test_fusion_by_entries_equals_the_dense_matrix(method: str, top_k: int | None) -> None:
    """The slow twin: the dense documents x systems matrix through ``fuse_lists``, to the bit."""
    import msgspec

    from tunemix.core.ensemble.list_fusion import fuse_lists
    from tunemix.service.routers.fuse import FuseRequest, fuse_entries

    rng = np.random.default_rng(5)
    queries = []
    for q in range(4):
        systems = []
        for _ in range(int(rng.integers(1, 5))):
            ids = [f"d{j}" for j in rng.choice(9, size=int(rng.integers(1, 7)), replace=False)]
            scored = bool(rng.integers(0, 2))
            systems.append({"ids": ids, **({"scores": rng.integers(0, 4, len(ids)).astype(float).tolist()}
                                           if scored else {})})
        queries.append({"qid": q, "systems": systems})
    req = msgspec.convert({"queries": queries, "method": method, "top_k": top_k}, FuseRequest)
    lists, got = fuse_entries(req, Settings())
    n_sys = max(len(q["systems"]) for q in queries)
    want = []
    for q in queries:
        ids = list(dict.fromkeys(d for s in q["systems"] for d in s["ids"]))
        mat = np.full((len(ids), n_sys), np.nan)
        for m, s in enumerate(q["systems"]):
            vals = s.get("scores") or list(range(len(s["ids"]), 0, -1))
            mat[[ids.index(d) for d in s["ids"]], m] = vals
        want.append((ids, mat))
    off = np.cumsum([0] + [len(ids) for ids, _ in want])
    dense = fuse_lists(np.concatenate([m for _, m in want]), off, method,
                       top_k=None if top_k is None else min(top_k, int(off[-1])))
    assert lists.ids == [d for ids, _ in want for d in ids]
    np.testing.assert_array_equal(got, dense)


# ---------------------------------------------------------------------------- strict input rules
@pytest.mark.parametrize("key", [" 3 ", "３", "01", "+1", "1.0", "0", "1e0", "١"])
def test_sparse_keys_are_canonical(client: TestClient, key: str) -> None:
    r = client.post("/rank", json=_rank(documents=[{"id": "a", "features": {key: 1.0}}]))
    assert r.status_code == 422 and "query 'q1'" in r.json()["detail"], r.text


def test_a_repeated_sparse_key_is_an_error_in_rank_and_evaluate(client: TestClient) -> None:
    body = b'{"queries":[{"qid":"q","documents":[{"id":1,"features":{"2":1}},{"id":2,"features":{"1":1,"1":2}}]}]}'
    r = client.post("/rank", content=body, headers=JSON)
    assert r.status_code == 422 and "documents[1].features" in r.text and "'1'" in r.text, r.text
    body = (b'{"model":"default","queries":[{"qid":"q","labels":[1],"documents":[{"id":1,"features":{"3":1,"3":2}}]}]}')
    r = client.post("/evaluate", content=body, headers=JSON)
    assert r.status_code == 422 and "documents[0].features" in r.text, r.text


@pytest.mark.parametrize("name", ["default\n", "default ", "default\x00", "../default"])
def test_model_names_match_to_the_end(client: TestClient, name: str) -> None:
    r = client.post("/rank", json={**_rank(ids=["a"], features=[ROW]), "model": name})
    assert r.status_code == 422, r.text
    r = client.post("/rank", json={**_rank(ids=["a"], features=[ROW]), "version": "v1\n"})
    assert r.status_code == 422, r.text


def test_an_empty_version_is_no_version(client: TestClient) -> None:
    body = _rank(ids=["a", "b"], features=[ROW, ROW[::-1]])
    want = client.post("/rank", json=body).json()
    for r in (client.post("/rank", json={**body, "version": ""}),
              client.post("/rank?version=", content=b"0 qid:q1 1:1 # docid = a\n",
                          headers={"Content-Type": "text/plain"})):
        assert r.status_code == 200, r.text
        assert r.json()["version"] == want["version"]


def test_fuse_refuses_booleans_as_scores(client: TestClient) -> None:
    r = client.post("/fuse", json={"queries": [{"qid": "f", "systems": [{"ids": ["a", "b"], "scores": [True, 0.5]}]}]})
    assert r.status_code == 422 and "scores" in r.text, r.text


def test_no_error_reveals_a_server_path(client: TestClient, served_dir: Path) -> None:
    answers = [client.get("/models/nope"), client.post("/rank", json={**_rank(ids=["a"], features=[ROW]),
                                                                        "model": "nope"})]
    for r in answers:
        assert r.status_code in (404, 422), r.text
        assert str(served_dir) not in r.text and "/tmp" not in r.text, r.text
        assert "available: default, wide" in r.text


SCRUB = """
import json, sys
from pathlib import Path
from tunemix.service.server_paths import without_paths
cases = json.loads(sys.argv[1])
print(json.dumps([[without_paths(m, Path(link)) for m in messages] for link, messages in cases]))
"""


def test_scrubbing_a_symlinked_models_dir_is_the_same_in_every_worker(tmp_path: Path) -> None:
    """A models directory given by a symlink whose path begins with the real one's, or the real
    one's with the link's: every error message loses both, whole, under every hash seed (each
    worker has its own; the roots were once taken out in a set's order)."""
    base = tmp_path.resolve()
    cases, want = [], []
    for real, link in ((base / "a" / "models", base / "a" / "models-link"),
                       (base / "b" / "models.real", base / "b" / "models")):
        (real / "default" / "v1").mkdir(parents=True)
        link.symlink_to(real)
        cases.append((str(link), [f"cannot read {d}/default/v1/manifest.json" for d in (link, real)]
                      + [f"bad models dir {real}"]))
        want.append(["cannot read default/v1/manifest.json"] * 2 + ["bad models dir <models>"])
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for seed in range(8):
        out = subprocess.run([sys.executable, "-c", SCRUB, json.dumps(cases)], capture_output=True, text=True,
                             check=True, env={**env, "PYTHONHASHSEED": str(seed)}, cwd=ROOT)
        assert json.loads(out.stdout) == want, (seed, out.stdout)


def test_the_metrics_content_type_is_documented(client: TestClient) -> None:
    content = client.get("/openapi.json").json()["paths"]["/metrics"]["get"]["responses"]["200"]["content"]
    assert any(t.startswith("text/plain") for t in content)


@pytest.mark.parametrize("ctype", [None, "application/x-www-form-urlencoded", "text/csv"])
def test_a_missing_or_wrong_content_type_is_415_with_a_hint(client: TestClient, ctype: str | None) -> None:
    headers = {"Content-Type": ctype} if ctype else {}
    r = client.post("/rank", content=b"0 qid:1 1:1\n", headers=headers)
    assert r.status_code == 415 and "Content-Type" in r.json()["detail"], r.text


# ---------------------------------------------------------------------------- broken models on disk
@pytest.mark.parametrize(("field", "value", "words"), [
    ("arrays", "broken", ["'arrays'", "dict", "str"]),
    ("n_features", None, ["'n_features'", "int"]),
    ("model", [], ["model"]),
])
def test_a_broken_manifest_is_a_clear_error_read_once(store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      field: str, value: Any, words: list[str]) -> None:
    from tunemix.service import registry as registry_module

    models = tmp_path / "models"
    copy_version(store.default_v1, models, "default", "v1")
    broken = copy_version(store.default_v2, models, "default", "v2")
    edit_manifest(broken, lambda manifest: manifest.update({field: value}))
    with ready_client(Settings(models_dir=models, default_model="default")) as c:
        # the latest version is broken: the service says so and is not ready
        status = c.get("/ready").json()
        while status["status"] == "loading":
            status = c.get("/ready").json()
        assert status["status"] == "failed" and "v2" in status["detail"], status
    (models / "default" / "v1").rename(models / "default" / "v3")  # a good latest version, v2 broken beside it
    reads: list[Path] = []
    original = registry_module.load_model

    def spy(path: Any, *args: Any, **kwargs: Any) -> Any:
        reads.append(Path(path))
        return original(path, *args, **kwargs)

    monkeypatch.setattr(registry_module, "load_model", spy)
    with ready_client(Settings(models_dir=models, default_model="default")) as c:
        wait_ready(c)
        for _ in range(3):
            r = c.post("/rank", json={**_rank(ids=["a"], features=[ROW]), "version": "v2"})
            assert r.status_code in range(400, 500) or r.status_code == 503, r.text
            assert "v2" in r.text and all(w in r.text for w in words), r.text
            assert str(models) not in r.text
        assert sum(p.name == "v2" for p in reads) == 1  # read once, remembered
        ok = c.post("/rank", json=_rank(ids=["a"], features=[ROW]))
        assert ok.status_code == 200 and ok.json()["version"] == "v3", ok.text
    assert N_FEATURES == len(ROW)
