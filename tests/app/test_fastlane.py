"""The fast lane of POST /rank (app.fastlane): what it takes, what it passes on, and that what it
passes on reaches the framework intact (answers equal to the route's are in test_rank.py)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anyio
import numpy as np
import pytest
from fastapi.testclient import TestClient

from app.fastlane import RankFastLane
from app.main import create_app
from app.registry import ModelRegistry, load_served
from app.settings import Settings
from tests.app.conftest import N_FEATURES, wait_ready


def _body(n_docs: int, seed: int = 0, **extra: Any) -> bytes:
    x = np.random.default_rng(seed).standard_normal((n_docs, N_FEATURES)).round(4)
    docs = [{"id": f"d{j}", "features": x[j].tolist()} for j in range(n_docs)]
    return json.dumps({"queries": [{"qid": "q", "documents": docs}], **extra}).encode()


class Inner:
    """The framework's stand-in: records the body it receives, answers 299."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        chunks = []
        while True:
            m = await receive()
            chunks.append(m.get("body", b""))
            if not m.get("more_body"):
                break
        self.bodies.append(b"".join(chunks))
        await send({"type": "http.response.start", "status": 299, "headers": []})
        await send({"type": "http.response.body", "body": b"inner"})


def _lane(served_dir: Path, **settings: Any) -> tuple[RankFastLane, Inner, SimpleNamespace]:
    registry = ModelRegistry(served_dir, "default")
    registry.install(load_served(served_dir, "default"))
    registry.warm = True
    metrics = SimpleNamespace(count_documents=lambda *a: None, count_error=lambda *a: None)
    state = SimpleNamespace(settings=Settings(models_dir=served_dir, default_model="default", **settings),
                            registry=registry, metrics=metrics, scoring_requests=0)
    inner = Inner()
    return RankFastLane(inner, state, route=SimpleNamespace(path="/rank")), inner, state


def _call(lane: RankFastLane, body: bytes, *, chunk: int | None = None, query: bytes = b"",
          content_type: bytes = b"application/json", length: bool = True) -> tuple[int, bytes, dict[str, Any]]:
    pieces = [body[i:i + chunk] for i in range(0, len(body), chunk)] if chunk else [body]
    messages = [{"type": "http.request", "body": p, "more_body": i < len(pieces) - 1} for i, p in enumerate(pieces)]
    headers = [(b"content-type", content_type)]
    if length:
        headers.append((b"content-length", str(len(body)).encode()))
    scope: dict[str, Any] = {"type": "http", "path": "/rank", "method": "POST", "query_string": query,
                             "headers": headers}
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(m: dict[str, Any]) -> None:
        sent.append(m)

    async def run() -> None:
        # the application's limiters, made on the event loop that uses them (as its lifespan does)
        lane.state.python_lanes = anyio.CapacityLimiter(2)
        lane.state.scoring_slots = anyio.CapacityLimiter(1)
        await lane(scope, receive, send)

    asyncio.run(run())
    return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:]), scope


def test_the_lane_answers_the_common_body_itself(served_dir: Path) -> None:
    lane, inner, state = _lane(served_dir)
    status, content, scope = _call(lane, _body(20), chunk=97)  # a body in many pieces
    assert status == 200 and inner.bodies == []
    answer = json.loads(content)
    assert answer["version"] == "v2" and len(answer["results"][0]["ranking"]) == 20
    assert scope["route"].path == "/rank"  # the metrics' endpoint label
    assert state.scoring_requests == 0


@pytest.mark.parametrize("case", ["query string", "text body", "over the budget", "budget off", "doubtful body",
                                  "other version", "unloaded model", "bad feature count", "big body, busy worker"])
def test_the_lane_passes_on_the_body_intact(served_dir: Path, case: str) -> None:
    body = _body(20)
    kwargs: dict[str, Any] = {}
    settings: dict[str, Any] = {}
    if case == "query string":
        kwargs["query"] = b"top_k=3"
    elif case == "text body":
        kwargs["content_type"] = b"text/plain; charset=utf-8"
    elif case == "over the budget":
        settings["inline_budget_ms"] = 1.0  # reading fits, scoring (made to cost 1 ms per document) not
    elif case == "budget off":
        settings["inline_budget_ms"] = 0
    elif case == "doubtful body":
        body = body.replace(b'"qid": "q"', b'"qid": 1.5')
    elif case == "other version":
        body = _body(20, version="v1")
    elif case == "unloaded model":
        body = _body(20, model="wide")
    elif case == "bad feature count":
        body = body.replace(b"]}", b", 1.0]}", 1)
    elif case == "big body, busy worker":
        # 0.01 ms of reading budget is 500 bytes: a worker thread's, which another request holds
        settings["inline_budget_ms"] = 0.01
        kwargs.update(chunk=300, length=False)
    lane, inner, state = _lane(served_dir, **settings)
    if case == "big body, busy worker":
        state.scoring_requests = 1
    if case == "over the budget":
        served = state.registry.current("default")
        state.registry.install(dataclasses.replace(served, ns_per_document=1e6))
    status, content, _ = _call(lane, body, **kwargs)
    assert (status, content) == (299, b"inner")
    assert inner.bodies == [body]


def test_a_body_too_big_to_read_inline_is_answered_from_a_worker_thread(served_dir: Path) -> None:
    """0.01 ms of reading budget is 500 bytes: the lane reads the whole body (here in pieces,
    without a length) and parses, scores and answers it in one worker thread, with the answer
    it gives inline; a body it cannot take there goes on to the framework intact."""
    body = _body(20, top_k=5)
    inline, _, _ = _lane(served_dir)
    lane, inner, state = _lane(served_dir, inline_budget_ms=0.01)
    answers = []
    for one in (inline, lane):
        status, content, _ = _call(one, body, chunk=300, length=False)
        assert status == 200
        answer = json.loads(content)
        answer.pop("server_time_ms")
        answers.append(answer)
    assert answers[0] == answers[1] and len(answers[1]["results"][0]["ranking"]) == 5
    assert inner.bodies == [] and state.scoring_requests == 0
    doubtful = body.replace(b'"qid": "q"', b'"qid": 1.5')
    assert _call(lane, doubtful)[:2] == (299, b"inner") and inner.bodies == [doubtful]


def test_a_client_gone_mid_body_is_not_answered_as_a_short_body(served_dir: Path) -> None:
    lane, _, _ = _lane(served_dir)
    body = _body(20)

    async def run() -> list[Any]:
        messages = [{"type": "http.request", "body": body[:100], "more_body": True}, {"type": "http.disconnect"}]
        got: list[Any] = []

        async def receive() -> dict[str, Any]:
            return messages.pop(0)

        async def recording_inner(scope: Any, rcv: Any, send: Any) -> None:
            got.append(await rcv())
            got.append(await rcv())

        lane.app = recording_inner
        scope = {"type": "http", "path": "/rank", "method": "POST", "query_string": b"", "headers": []}
        await lane(scope, receive, lambda m: asyncio.sleep(0))
        return got

    got = asyncio.run(run())
    assert got[0] == {"type": "http.request", "body": body[:100], "more_body": True}
    assert got[1] == {"type": "http.disconnect"}


def test_fast_lane_requests_are_counted_and_scored_as_the_route_scores(served_dir: Path) -> None:
    body = _body(30, seed=3)
    answers = []
    for budget in (5.0, 0.0):
        settings = Settings(models_dir=served_dir, default_model="default", inline_budget_ms=budget)
        with TestClient(create_app(settings)) as c:
            wait_ready(c)
            r = c.post("/rank", content=body, headers={"Content-Type": "application/json"})
            assert r.status_code == 200 and r.headers["content-type"] == "application/json"
            answers.append({k: v for k, v in r.json().items() if k != "server_time_ms"})
            text = c.get("/metrics").text
            if "tunemix_http_requests_total" in text:
                assert 'tunemix_http_requests_total{endpoint="/rank",method="POST",status="200"} 1.0' in text
                assert 'tunemix_documents_scored_total{model="default"} 30.0' in text
    assert answers[0] == answers[1]


def test_the_model_cost_is_measured_at_load(served_dir: Path) -> None:
    served = load_served(served_dir, "default")
    assert 0 < served.ns_per_document < 1e7
