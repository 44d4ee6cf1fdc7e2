"""``POST /rank`` past FastAPI's routing (``tunemix.service.rank_dispatch.RankShortcut``) answers what FastAPI's
routing answers: the same status, headers and body (``server_time_ms`` aside) for good requests
and for every kind of refusal, the same metrics; other paths and methods are FastAPI's."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from tests.service.conftest import N_FEATURES, rank_body, wait_ready
from tunemix.service.main import create_app
from tunemix.service.routers import rank as rank_module
from tunemix.service.settings import Settings


@pytest.fixture(scope="module")
def shortcut_client(served_dir: Path) -> Iterator[TestClient]:
    """An app serving ``served_dir`` whose crashes are answered 500 (not raised into the test)."""
    app = create_app(Settings(models_dir=served_dir, default_model="default", reload_token=None))
    with TestClient(app, raise_server_exceptions=False) as c:
        wait_ready(c)
        yield c


def _features(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n, N_FEATURES)).round(4)


def _requests() -> list[tuple[str, dict[str, Any]]]:
    """(label, httpx request arguments) of good and refused /rank requests."""
    good = rank_body(_features(9), [4, 5])
    json_headers = {"content-type": "application/json"}
    return [
        ("good", {"json": good}),
        ("good, top_k and relevance", {"json": {**good, "top_k": 2, "relevance": True}}),
        ("good, query parameters", {"json": good, "params": {"top_k": "3"}}),
        ("explain lane", {"json": {**good, "explain": 2}}),
        ("LETOR text", {"content": b"0 qid:1 1:0.5 2:0.1\n1 qid:1 1:0.2 3:0.4 # docid = a\n",
                        "headers": {"content-type": "text/plain"}, "params": {"top_k": "1"}}),
        ("bad query parameter", {"json": good, "params": {"top_k": "0"}}),
        ("bad timeout", {"json": good, "params": {"timeout_s": "soon"}}),
        ("past the deadline", {"json": good, "params": {"timeout_s": "1e-9"}}),
        ("not JSON", {"content": b"{\"queries\": [", "headers": json_headers}),
        ("repeated key", {"content": b'{"queries": [], "top_k": 1, "top_k": 2}', "headers": json_headers}),
        ("unknown field", {"json": {**good, "nope": 1}}),
        ("unknown model", {"json": {**good, "model": "missing"}}),
        ("wrong width", {"json": rank_body(np.ones((3, N_FEATURES + 1)), [3])}),
        ("not finite", {"content": json.dumps(good).replace("0.", "1e999", 1).encode(), "headers": json_headers}),
        ("no content type", {"content": json.dumps(good).encode()}),
        ("too large", {"content": b" " * (4 * 1024 * 1024 + 1), "headers": json_headers}),
    ]


def _answer(r: Any) -> tuple[int, dict[str, str], Any]:
    body = r.json()
    if isinstance(body, dict):
        body.pop("server_time_ms", None)
    headers = {k: v for k, v in r.headers.items() if k != "content-length"}
    return r.status_code, headers, body


@pytest.mark.parametrize("label", [label for label, _ in _requests()])
def test_rank_answers_the_same_past_the_routing(shortcut_client: TestClient, label: str) -> None:
    kwargs = dict(_requests())[label]
    state = shortcut_client.app.state  # type: ignore[attr-defined]
    answers = []
    for shortcut in (False, True, False):
        state.rank_shortcut = shortcut
        answers.append(_answer(shortcut_client.post("/rank", **kwargs)))
    state.rank_shortcut = True
    assert answers[1] == answers[0] == answers[2], label
    if label.startswith("good"):
        assert answers[1][0] == 200


def test_a_crash_is_answered_500_as_before(shortcut_client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """An exception no handler of the application takes reaches ServerErrorMiddleware either way."""

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("broken on purpose")

    monkeypatch.setattr(rank_module, "json_lists", broken)
    state = shortcut_client.app.state  # type: ignore[attr-defined]
    body = rank_body(_features(4), [4])
    answers = []
    for shortcut in (False, True):
        state.rank_shortcut = shortcut
        answers.append(_answer(shortcut_client.post("/rank", json=body)))
    state.rank_shortcut = True
    assert answers[0] == answers[1]
    assert answers[1][0] == 500 and "internal error" in answers[1][2]["detail"]


def _rank_count(client: TestClient, status: str) -> float:
    text = client.get("/metrics").text
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if (s.name == "tunemix_http_requests_total" and s.labels.get("endpoint") == "/rank"
                    and s.labels.get("method") == "POST" and s.labels.get("status") == status):
                return float(s.value)
    return 0.0


def test_requests_past_the_routing_are_counted(shortcut_client: TestClient) -> None:
    body = rank_body(_features(4), [4])
    before_ok, before_422 = _rank_count(shortcut_client, "200"), _rank_count(shortcut_client, "422")
    assert shortcut_client.post("/rank", json=body).status_code == 200
    assert shortcut_client.post("/rank", json={**body, "model": "missing"}).status_code == 422
    assert _rank_count(shortcut_client, "200") == before_ok + 1
    assert _rank_count(shortcut_client, "422") == before_422 + 1


def test_other_methods_and_paths_are_fastapis(shortcut_client: TestClient) -> None:
    assert shortcut_client.get("/rank").status_code == 405
    assert shortcut_client.post("/rank/", follow_redirects=False).status_code in (307, 404)  # FastAPI's answer
    assert shortcut_client.get("/health").json() == {"status": "ok"}
    assert "/rank" in shortcut_client.get("/openapi.json").json()["paths"]


def test_query_parameters_defaults_are_one_frozen_instance() -> None:
    """A /rank request without a query string gets the one instance of ``RankParams``' defaults
    (frozen: no request can change it for the next); one with a query string its own."""
    from pydantic import ValidationError
    from starlette.requests import Request

    from tunemix.service.deps import query_model

    def request(query: bytes) -> Request:
        return Request({"type": "http", "method": "POST", "path": "/rank", "query_string": query, "headers": []})

    a, b = query_model(request(b""), rank_module.RankParams), query_model(request(b""), rank_module.RankParams)
    assert a is b and a == rank_module.RankParams()
    with pytest.raises(ValidationError):
        a.top_k = 3  # type: ignore[misc]
    asked = query_model(request(b"top_k=3&relevance=true"), rank_module.RankParams)
    assert asked is not a and asked.top_k == 3 and asked.relevance and a.top_k is None
