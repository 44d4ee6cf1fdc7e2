"""Every request's cost is bounded (issue 31, item 1): the hostile bodies of the issue's table
answer 413/422/503 with a message naming the setting, and what made them costly is gone
(work per measure, padding to the longest id, quadratic key checks, regex backtracking).

Where the outcome depends on real processes (a worker killed, its peak memory, /health during
a request), against ``python -m tunemix.service`` with two workers; the rest in-process."""

from __future__ import annotations

import json
import random
import socket
import subprocess
import threading
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from fastapi.testclient import TestClient

from tests.service.conftest import (
    N_FEATURES,
    HealthWatch,
    LiveServer,
    Store,
    copy_version,
    ready_client,
    start_server,
    stop_server,
    vm,
    wait_ready,
    worker_pids,
)
from tunemix.core.evaluation import conventions
from tunemix.core.evaluation import evaluate as evaluate_offsets
from tunemix.service.errors import ServiceError
from tunemix.service.json_body import _pairs, _Repeated, check_repeated_keys
from tunemix.service.letor import letor_lists
from tunemix.service.settings import DECODED_BODY_MULTIPLE, Settings

JSON = {"Content-Type": "application/json"}
MIB = 1024 * 1024
DEFAULTS = Settings()


def empty_rows(size: int) -> bytes:
    head, tail = b'{"queries":[{"qid":1,"ids":[1],"features":[', b"[]]}]}"
    return head + b"[]," * ((size - len(head) - len(tail)) // 3) + tail


BIG = {  # the 60 MiB bodies (60 MiB each, made by repetition)
    "/rank": (b'{"queries":[{"qid":1,"ids":[1],"features":[', b"[],", b"[]]}]}"),
    "/evaluate": (b'{"queries":[{"qid":1,"labels":[', b"0,", b"0]}]}"),
    "/fuse": (b'{"queries":[{"qid":1,"systems":[{"ids":[', b"0,", b"0]}]}]}"),
}


@pytest.mark.parametrize("path", sorted(BIG))
def test_a_60_mib_body_is_413_with_how_to_split(app_two: tuple[str, subprocess.Popen[bytes]], path: str) -> None:
    url, proc = app_two
    head, unit, tail = BIG[path]
    body = head + unit * ((60 * MIB - len(head) - len(tail)) // len(unit)) + tail
    pids = worker_pids(proc.pid)
    with HealthWatch(url) as watch, httpx.Client(base_url=url, timeout=None) as c:
        r = c.post(path, content=body, headers=JSON)
    assert r.status_code == 413, r.text[:300]
    detail = r.json()["detail"]
    assert "TUNEMIX_MAX_BODY_BYTES" in detail and "split the queries over several requests" in detail
    assert worker_pids(proc.pid) == pids and watch.failed is None
    assert watch.worst < 2.0  # refused from its length: well under a second, twice that for a busy machine


def test_bodies_at_the_limit_hold_no_worker_and_stay_within_the_memory_bound(
        app_two: tuple[str, subprocess.Popen[bytes]]) -> None:
    """Four of the costliest bodies the limit lets in (a list of empty rows) at once: each answered
    413 (documents) or 503 (the worker's in-flight bytes), no worker lost, each worker's peak
    memory within its documented bound, and /health answered throughout."""
    url, proc = app_two
    body = empty_rows(DEFAULTS.max_body_bytes)
    pids = worker_pids(proc.pid)
    resting = {p: vm(p, "VmRSS") for p in pids}
    answers: list[httpx.Response] = []

    def post() -> None:
        with httpx.Client(base_url=url, timeout=None, headers={"Connection": "close"}) as c:
            answers.append(c.post("/rank", content=body, headers=JSON))

    with HealthWatch(url) as watch:
        senders = [threading.Thread(target=post) for _ in range(4)]
        for t in senders:
            t.start()
        for t in senders:
            t.join()
    assert len(answers) == 4
    for r in answers:
        assert r.status_code in (413, 503), r.text[:300]
        if r.status_code == 413:
            assert "TUNEMIX_MAX_DOCUMENTS" in r.json()["detail"]
        else:
            assert r.headers["Retry-After"] and "TUNEMIX_MAX_INFLIGHT_BYTES" in r.json()["detail"]
    assert worker_pids(proc.pid) == pids and watch.failed is None
    bound = 2 * DECODED_BODY_MULTIPLE * DEFAULTS.max_body_bytes + DEFAULTS.max_inflight_bytes
    for p in pids:
        assert vm(p, "VmHWM") - resting[p] <= bound, (p, vm(p, "VmHWM") - resting[p], bound)
    assert watch.worst < 2.0  # about a second of decoding at most; twice that for a busy machine


# ---------------------------------------------------------------------------- admission (one worker)
@pytest.fixture(scope="module")
def admission_server(store: Store, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """One worker that takes bodies of 64 KiB and holds 100 KiB of requests at once."""
    base = tmp_path_factory.mktemp("admission")
    copy_version(store.default_v1, base / "models", "default", "v1")
    server = start_server(base / "models", token="t", log_path=base / "uvicorn.log",
                          TUNEMIX_MAX_BODY_BYTES=str(64 * 1024), TUNEMIX_MAX_INFLIGHT_BYTES=str(100 * 1024))
    try:
        yield server
    finally:
        stop_server(server)


def _rank_body(n: int) -> bytes:
    return json.dumps({"queries": [{"qid": "q", "ids": list(range(n)), "features": [[0.5] * N_FEATURES] * n}]},
                      separators=(",", ":")).encode()


def test_a_worker_past_its_in_flight_bytes_answers_503_with_retry_after(admission_server: LiveServer) -> None:
    held = socket.create_connection(("127.0.0.1", admission_server.port))
    body = _rank_body(2200)
    assert 60 * 1024 > len(body) > 50 * 1024
    try:  # a 60 KB body announced, all but its last byte sent: the worker holds what it received
        held.sendall(b"POST /rank HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     + f"Content-Length: {len(body)}\r\n\r\n".encode() + body[:-1])
        with httpx.Client(base_url=admission_server.url, timeout=None) as c:
            while True:  # until the worker has taken the held request in (the event)
                r = c.post("/rank", content=body, headers=JSON)
                if r.status_code == 503:
                    break
                assert r.status_code == 200, r.text[:300]
            assert r.headers["Retry-After"] == "1"
            assert "TUNEMIX_MAX_INFLIGHT_BYTES" in r.json()["detail"]
            assert c.get("/health").status_code == 200
            held.sendall(body[-1:])  # the held request completes: its bytes are released
            held.settimeout(None)
            answer = b""
            while b"\r\n\r\n" not in answer:
                answer += held.recv(65536)
            assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
            while (r := c.post("/rank", content=body, headers=JSON)).status_code == 503:
                pass  # the release follows the answer on the server's side
            assert r.status_code == 200, r.text[:300]
    finally:
        held.close()


# ---------------------------------------------------------------------------- in-process bounds
@pytest.fixture(scope="module")
def app_client(served_dir: Path) -> Iterator[TestClient]:
    with ready_client(Settings(models_dir=served_dir, default_model="default")) as c:
        wait_ready(c)
        yield c


def test_200_measures_per_query_is_413(app_client: TestClient) -> None:
    """The issue's 390 KB body (10,000 queries, 200 dcg@k, every convention, per_query): 220 MB
    of answer and 26.7 CPU-s before; now the measure count and the answer size are bounded."""
    queries = [{"qid": i, "labels": [1, 0], "scores": [0.5, 0.2]} for i in range(10_000)]
    body = {"queries": queries, "metrics": [f"dcg@{k}" for k in range(1, 201)], "convention": "all",
            "per_query": True}
    r = app_client.post("/evaluate", json=body)
    assert r.status_code == 413 and "200 measures" in r.json()["detail"], r.text[:300]
    assert "TUNEMIX_MAX_METRICS" in r.json()["detail"]
    body["metrics"] = body["metrics"][:DEFAULTS.max_metrics]
    r = app_client.post("/evaluate", json=body)
    assert r.status_code == 413 and "TUNEMIX_MAX_PER_QUERY_VALUES" in r.json()["detail"], r.text[:300]
    body["convention"] = "yahoo"
    body["metrics"] = body["metrics"][:20]  # 200,000 values: at the limit
    r = app_client.post("/evaluate", json=body)
    assert r.status_code == 200, r.text[:300]
    assert len(r.json()["results"][0]["per_query"]) == 20


def test_a_label_of_a_million_is_422_and_tables_are_built_once(app_client: TestClient,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    metrics = [f"dcg@{k}" for k in range(1, 1001)]
    body = {"queries": [{"qid": 1, "labels": [1_000_000], "scores": [1.0]}], "metrics": metrics,
            "convention": "all"}
    r = app_client.post("/evaluate", json=body)
    assert r.status_code == 413 and "TUNEMIX_MAX_METRICS" in r.json()["detail"], r.text[:300]
    body["metrics"] = metrics[:5]
    r = app_client.post("/evaluate", json=body)
    assert r.status_code == 422, r.text[:300]
    assert "labels[0] = 1000000" in r.json()["detail"] and "TUNEMIX_MAX_LABEL" in r.json()["detail"]
    # the library (which takes labels up to 1,000,000) builds each table once per evaluation
    built: list[str] = []
    for name in ("gain_values", "discount_values", "relevant_values", "err_values"):
        original = getattr(conventions.Convention, name)

        def counted(self: Any, *args: Any, _name: str = name, _f: Any = original) -> Any:
            built.append(_name)
            return _f(self, *args)
        monkeypatch.setattr(conventions.Convention, name, counted)
    res = evaluate_offsets(np.array([1_000_000]), np.array([1.0]), np.array([0, 1]), metrics, "yahoo")
    assert len(res.mean) == 1000 and res.mean["dcg@1000"] == res.mean["dcg@1"]
    assert sorted(built) == ["discount_values", "err_values", "gain_values", "relevant_values"]


def test_60000_sparse_keys_are_refused_by_their_range_first(app_client: TestClient) -> None:
    keys = ",".join(f'"{k}":0.5' for k in range(1, 60_001))
    body = (f'{{"model":"default","queries":[{{"qid":1,"labels":[1],"documents":[{{"id":"a","features":'
            f'{{{keys},"1":0.5}}}}]}}]}}').encode()
    r = app_client.post("/evaluate", content=body, headers=JSON)
    assert r.status_code == 422, r.text[:300]
    assert f"feature id {N_FEATURES + 1} is out of range" in r.json()["detail"]


def _first_repeat(keys: list[str]) -> str | None:
    """The slow twin of ``_pairs``: the first key equal to one before it."""
    for i, k in enumerate(keys):
        if k in keys[:i]:
            return k
    return None


def test_the_repeated_key_check_matches_its_slow_twin() -> None:
    rng = random.Random(0)
    for _ in range(300):
        keys = [str(rng.randint(1, 12)) for _ in range(rng.randint(0, 12))]
        out = _pairs([(k, 0.5) for k in keys])
        want = _first_repeat(keys)
        assert isinstance(out, _Repeated) == (want is not None)
        if want is not None:
            assert isinstance(out, _Repeated) and out.repeated == want
        assert dict(out) == dict((k, 0.5) for k in keys)


def test_a_key_repeated_after_60000_is_found_in_linear_time() -> None:
    """60,000 distinct keys then the first again (quadratic before: 1.8e9 comparisons): the same
    error, from one pass; its work is counted, not timed."""
    keys = ",".join(f'"{k}":0.5' for k in range(1, 60_001))
    body = f'{{"queries":[{{"qid":1,"documents":[{{"id":"a","features":{{{keys},"1":0.5}}}}]}}]}}'.encode()
    with pytest.raises(ServiceError, match=r"query '1' \(queries\[0\]\): documents\[0\]\.features: key '1' "
                                           "appears twice"):
        check_repeated_keys(body)


def test_one_long_docid_does_not_pad_the_others(app_client: TestClient) -> None:
    """One 256-character docid among 100,000 (1.1 MB): +480 MB before (every docid padded to the
    longest); now the evaluation's own allocations stay a small multiple of the ids' text."""
    ids = ["x" * DEFAULTS.max_id_length] + [str(i) for i in range(1, 100_000)]
    labels = np.arange(100_000) % 2
    scores = np.zeros(100_000)  # all tied: trec orders them by docid
    tracemalloc.start()
    try:
        res = evaluate_offsets(labels, scores, np.array([0, 100_000]), ["ndcg@10", "map"], "trec", docids=ids)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    text = sum(len(i) for i in ids)
    assert peak < 30 * text, (peak, text)  # a padded array alone is 100,000 x 256 x 4 = 102 MB
    short = evaluate_offsets(labels, scores, np.array([0, 100_000]), ["ndcg@10", "map"], "trec",
                             docids=np.array(["x", *ids[1:]]))
    assert res.mean == short.mean  # "x" * 256 and "x" sort alike among the digits
    body = {"queries": [{"qid": 1, "labels": labels.tolist(), "docids": ids, "ranking": ids[::-1]}],
            "metrics": ["ndcg@10"], "convention": "trec"}
    r = app_client.post("/evaluate", json=body)
    assert r.status_code == 200, r.text[:300]
    body["queries"][0]["ranking"] = [*ids[::-1][:-1], "y" * (DEFAULTS.max_id_length + 1)]
    r = app_client.post("/evaluate", json=body)
    assert r.status_code == 422 and "ranking entry at entry 99999" in r.json()["detail"], r.text[:300]


def test_a_16_mib_letor_line_is_refused_before_it_is_split(app_client: TestClient) -> None:
    """The issue's line ('0 qid:1' + ' 1:0' * 4,194,000): +2.8 GB and 5.2 CPU-s of regex
    backtracking before. Over HTTP it is past the body limit; read directly, it is refused for
    having more pairs than features, with no allocation beyond a few copies of the line."""
    line = b"0 qid:1" + b" 1:0" * 4_194_000
    r = app_client.post("/rank", content=line, headers={"Content-Type": "text/plain"})
    assert r.status_code == 413 and "TUNEMIX_MAX_BODY_BYTES" in r.json()["detail"]
    tracemalloc.start()
    try:
        with pytest.raises(ServiceError, match=f"more than {N_FEATURES} 'id:value' pairs"):
            letor_lists(line, N_FEATURES, DEFAULTS)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 6 * len(line), (peak, len(line))
    # a line of valid pairs, each feature once, still reads
    ok = letor_lists(b"2 qid:7 " + b" ".join(f"{f}:0.{f}".encode() for f in range(1, N_FEATURES + 1)),
                     N_FEATURES, DEFAULTS)
    assert ok.features.shape == (1, N_FEATURES) and ok.labels is not None and ok.labels.tolist() == [2]


@pytest.mark.parametrize(("path", "unit", "words"), [
    ("/fuse", b'{"ids":[0]},', ["query '1' (queries[0]):", "systems; the limit is 64", "TUNEMIX_MAX_FUSE_SYSTEMS"]),
    ("/evaluate", None, ["queries; the limit is 10000", "TUNEMIX_MAX_QUERIES"]),
])
def test_counts_are_checked_before_the_entries(app_client: TestClient, path: str, unit: bytes | None,
                                               words: list[str]) -> None:
    """A body at the limit of one-id /fuse systems or of /evaluate queries without labels: msgspec
    decodes it in one linear pass (no validator error list), and the counts refuse it before any
    entry is looked at."""
    if unit is not None:
        head, tail = b'{"queries":[{"qid":1,"systems":[', b'{"ids":[0]}]}]}'
    else:
        head, unit, tail = b'{"queries":[', b'{"qid":1,"labels":[]},', b'{"qid":1,"labels":[]}]}'
    body = head + unit * ((DEFAULTS.max_body_bytes - len(head) - len(tail)) // len(unit)) + tail
    r = app_client.post(path, content=body, headers=JSON)
    assert r.status_code == 413, r.text[:300]
    for w in words:
        assert w in r.json()["detail"], (w, r.text[:300])
