"""Answers bounded before the work: each endpoint's upper estimate of its answer
(``tunemix.service.answer_size``) holds every answer sent, over generated requests (ids and qids
of any characters, relevance, explanations, pairs, top_k, every method and convention, per_query),
and a request past ``TUNEMIX_MAX_ANSWER_BYTES`` is a 413 naming the query and the setting, from
two workers, before any evaluation."""

from __future__ import annotations

import json
import math
import struct
import subprocess
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import msgspec
import pydantic_core
import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.service.conftest import N_FEATURES, vm, worker_pids
from tunemix.service import answer_size
from tunemix.service.routers import evaluate as evaluate_module
from tunemix.service.routers import fuse as fuse_module
from tunemix.service.routers import rank as rank_module
from tunemix.service.settings import Settings

DEFAULTS = Settings()
JSON = {"Content-Type": "application/json"}
EXAMPLES = settings(max_examples=120, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

# ids and qids of any character a JSON string can carry (control characters, quotes, backslashes,
# astral ones; no lone surrogates), or integers of 64 bits
TEXT = st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=24)
IDS = st.one_of(TEXT, st.integers(-(2**63), 2**63 - 1))
FINITE = st.floats(allow_nan=False, allow_infinity=False)


class Estimates:
    """The estimates an endpoint's check returned (it wraps the route's own check)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> None:
        self.seen: list[int] = []
        real: Callable[..., int] = getattr(module, name)

        def spy(*args: Any, **kwargs: Any) -> int:
            estimate = real(*args, **kwargs)
            self.seen.append(estimate)
            return estimate

        monkeypatch.setattr(module, name, spy)

    def check(self, r: httpx.Response) -> None:
        """An answered request's bytes are at most the one estimate made for it."""
        seen, self.seen = self.seen, []
        event(f"HTTP {r.status_code}")
        if r.status_code != 200:
            return
        assert len(seen) == 1, seen
        assert len(r.content) <= seen[0], (len(r.content), seen[0], r.text[:300])


def unique(ids: list[Any]) -> list[Any]:
    return list({str(i): i for i in ids}.values())


@st.composite
def rank_bodies(draw: st.DrawFn) -> dict[str, Any]:
    explain = draw(st.sampled_from([0, 0, 1, 3, 50]))
    queries = []
    for q in unique(draw(st.lists(IDS, min_size=1, max_size=4))):
        ids = unique(draw(st.lists(IDS, min_size=1, max_size=8)))
        rows = [[draw(st.floats(-1e6, 1e6)) for _ in range(N_FEATURES)] for _ in ids]
        query: dict[str, Any] = {"qid": q}
        if draw(st.booleans()):
            query.update(ids=ids, features=rows)
        else:
            query["documents"] = [{"id": i, "features": r} for i, r in zip(ids, rows, strict=True)]
        if len(ids) >= 2 and draw(st.booleans()):
            query["explain_pair"] = ids[:2]
        queries.append(query)
    body: dict[str, Any] = {"queries": queries, "relevance": draw(st.booleans()), "explain": explain}
    top_k = draw(st.one_of(st.none(), st.integers(1, 10), st.just(2**62)))
    body["top_k"] = 4 if explain and (top_k is None or top_k > 4) else top_k
    return body


@pytest.fixture
def rank_estimates(monkeypatch: pytest.MonkeyPatch) -> Estimates:
    return Estimates(monkeypatch, rank_module, "check_rank_answer")


@EXAMPLES
@given(body=rank_bodies())
def test_the_rank_estimate_holds_every_answer(client: TestClient, rank_estimates: Estimates,
                                              body: dict[str, Any]) -> None:
    r = client.post("/rank", content=json.dumps(body), headers=JSON)
    assert r.status_code in (200, 422), r.text[:300]  # 422: a query without a pair's second id, say
    rank_estimates.check(r)


@EXAMPLES
@given(lines=st.lists(st.tuples(st.integers(0, 3), st.sampled_from(["1", "2", "q\u00e9"]),
                                st.text(st.characters(exclude_categories=("Cs", "Zs", "Zl", "Zp", "Cc"),
                                                      include_characters="\x01\x1f\"\\"),
                                        min_size=1, max_size=16)),
                      min_size=1, max_size=12),
       relevance=st.booleans())
def test_the_rank_estimate_holds_for_letor_bodies(client: TestClient, rank_estimates: Estimates,
                                                  lines: list[tuple[int, str, str]], relevance: bool) -> None:
    text = "".join(f"{label} qid:{qid} 1:0.5 3:{label} # docid = {docid}\n"
                   for label, qid, docid in sorted(lines, key=lambda line: line[1]))  # a query's lines together
    r = client.post(f"/rank?relevance={str(relevance).lower()}", content=text.encode(),
                    headers={"Content-Type": "text/plain"})
    assert r.status_code in (200, 422), r.text[:300]
    rank_estimates.check(r)


@st.composite
def fuse_bodies(draw: st.DrawFn) -> dict[str, Any]:
    pool = unique(draw(st.lists(IDS, min_size=1, max_size=10)))
    queries = []
    for q in unique(draw(st.lists(IDS, min_size=1, max_size=3))):
        systems = []
        for _ in range(draw(st.integers(1, 4))):
            ids = draw(st.lists(st.sampled_from(pool), min_size=1, max_size=len(pool), unique=True))
            system: dict[str, Any] = {"ids": ids}
            if draw(st.booleans()):
                system["scores"] = [draw(FINITE) for _ in ids]
            systems.append(system)
        queries.append({"qid": q, "systems": systems})
    return {"queries": queries, "method": draw(st.sampled_from(fuse_module.METHODS)),
            "top_k": draw(st.one_of(st.none(), st.integers(1, 5), st.just(2**62)))}


@EXAMPLES
@given(body=fuse_bodies())
def test_the_fuse_estimate_holds_every_answer(client: TestClient, monkeypatch: pytest.MonkeyPatch,
                                              body: dict[str, Any]) -> None:
    estimates = Estimates(monkeypatch, fuse_module, "check_ranked_answer")
    r = client.post("/fuse", content=json.dumps(body), headers=JSON)
    assert r.status_code == 200, r.text[:300]
    estimates.check(r)


MEASURES = ["ndcg@10", "ndcg", "err", "err@5:top=4", "p@5", "map", "dcg@3", "meanndcg", "ndcg@20"]


@st.composite
def evaluate_bodies(draw: st.DrawFn) -> dict[str, Any]:
    ranking = draw(st.booleans())
    queries = []
    for q in unique(draw(st.lists(IDS, min_size=1, max_size=5))):
        n = draw(st.integers(1, 6))
        # labels up to 40: LightGBM and XGBoost refuse some (an error under "all"), letor ignores some
        query: dict[str, Any] = {"qid": q, "labels": draw(st.lists(st.integers(0, 40), min_size=n, max_size=n))}
        if ranking:
            docids = unique(draw(st.lists(IDS, min_size=n, max_size=n)))
            if len(docids) < n:
                docids = [*docids, *(f"pad{j}" for j in range(n - len(docids)))]
            query.update(docids=docids, ranking=draw(st.permutations(docids)))
        else:
            query["scores"] = [draw(st.one_of(FINITE, st.sampled_from([0.5, 0.5, 1e300, -2.2250738585072014e-308])))
                               for _ in range(n)]
        queries.append(query)
    return {"queries": queries, "metrics": draw(st.lists(st.sampled_from(MEASURES), min_size=1, max_size=5)),
            "convention": draw(st.sampled_from(evaluate_module.CONVENTIONS)), "per_query": draw(st.booleans())}


@EXAMPLES
@given(body=evaluate_bodies())
def test_the_evaluate_estimate_holds_every_answer(client: TestClient, monkeypatch: pytest.MonkeyPatch,
                                                  body: dict[str, Any]) -> None:
    estimates = Estimates(monkeypatch, evaluate_module, "check_evaluate_answer")
    r = client.post("/evaluate", content=json.dumps(body), headers=JSON)
    assert r.status_code in (200, 422), r.text[:300]
    estimates.check(r)


@settings(max_examples=2000, deadline=None)
@given(bits=st.integers(0, 2**64 - 1))
def test_no_double_is_written_longer_than_the_float_bound(bits: int) -> None:
    value = struct.unpack("<d", bits.to_bytes(8, "little"))[0]
    assert len(msgspec.json.encode(value)) <= answer_size.FLOAT_CHARS
    assert len(pydantic_core.to_json(value)) <= answer_size.FLOAT_CHARS
    for extreme in (-2.2250738585072014e-308, -1.7976931348623157e308, -5e-324, math.nan, -math.inf):
        assert len(pydantic_core.to_json(extreme)) <= answer_size.FLOAT_CHARS


@given(text=st.text(st.characters(exclude_categories=("Cs",)), max_size=8))
def test_ids_are_escaped_alike_by_both_encoders(text: str) -> None:
    """The estimate measures ids with msgspec; /evaluate's answer is written by pydantic-core."""
    assert msgspec.json.encode(text) == pydantic_core.to_json(text)
    assert len(pydantic_core.to_json(repr(text))) <= answer_size.REPR_BYTES_PER_CHAR * len(text) + 4


# ---------------------------------------------------------------------------- refused before the work
def many_values_body(qid_chars: int = DEFAULTS.max_id_length) -> bytes:
    """The issue's /evaluate shape: 1,000 queries of long qids, 20 measures, every convention,
    per_query (200,000 values, within TUNEMIX_MAX_PER_QUERY_VALUES): about 57 MB of answer
    from a body of a few hundred KB."""
    queries = [{"qid": f"{q:06d}".ljust(qid_chars, "q"), "labels": [2, 0, 1], "scores": [0.9, 0.3, 0.5]}
               for q in range(1000)]
    metrics = [f"ndcg@{k}" for k in range(1, 11)] + [f"p@{k}" for k in range(1, 10)] + ["map"]
    return json.dumps({"queries": queries, "metrics": metrics, "convention": "all", "per_query": True},
                      separators=(",", ":")).encode()


def cpu_s(pids: list[int]) -> float:
    """The CPU seconds the processes have used (user + system)."""
    ticks = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        ticks += int(fields[11]) + int(fields[12])
    return ticks / 100


def test_an_answer_past_the_bound_is_refused_before_the_work(app_two: tuple[str, subprocess.Popen[bytes]]) -> None:
    """The body asks for a 53 MB answer (200,000 values under ten conventions): a 413 naming the
    query where the answer passes TUNEMIX_MAX_ANSWER_BYTES, from either worker, the workers
    having spent on it what decoding and checking the 300 KB body costs, not the evaluation's
    seconds; the same queries with short qids are answered."""
    url, proc = app_two
    pids = worker_pids(proc.pid)
    body = many_values_body()
    assert len(body) < 400_000
    rss = {pid: vm(pid, "VmHWM") for pid in pids}
    before = cpu_s(pids)
    answers = [httpx.post(url + "/evaluate", content=body, headers={**JSON, "Connection": "close"}, timeout=None)
               for _ in range(4)]
    spent = cpu_s(pids) - before
    for r in answers:
        assert r.status_code == 413, r.text[:300]
        detail = r.json()["detail"]
        assert "TUNEMIX_MAX_ANSWER_BYTES" in detail and f"the limit is {DEFAULTS.max_answer_bytes} bytes" in detail
        assert detail.startswith("query '000"), detail[:400]
    # four requests: the check's cost (about 0.02 CPU-s each), not four evaluations and their
    # 53 MB answers (about 0.4 CPU-s each)
    assert spent < 0.5, spent
    assert all(vm(pid, "VmHWM") - rss[pid] < 100 * 2**20 for pid in pids)
    # within the bound: a shorter qid answers
    small = many_values_body(qid_chars=8)
    r = httpx.post(url + "/evaluate", content=small, headers=JSON, timeout=None)
    assert r.status_code == 200, r.text[:300]


@pytest.fixture
def bounded_client(served_dir: Any) -> Iterator[TestClient]:
    from tests.service.conftest import ready_client, wait_ready

    with ready_client(Settings(models_dir=served_dir, default_model="default", max_answer_bytes=64 * 1024)) as c:
        wait_ready(c)
        yield c


def test_each_endpoint_names_the_query_past_the_bound(bounded_client: TestClient) -> None:
    """With a 64 KiB bound: the first query whose answer passes it is named, with the setting."""
    rows = [[0.1] * N_FEATURES] * 250
    body = {"queries": [{"qid": f"q{q}", "ids": [f"doc-{q}-{j}" for j in range(250)], "features": rows}
                        for q in range(3)], "relevance": True}
    r = bounded_client.post("/rank", json=body)
    assert r.status_code == 413, r.text[:300]
    assert r.json()["detail"].startswith("query 'q1' (queries[1]): the answer would take up to ")
    assert "TUNEMIX_MAX_ANSWER_BYTES" in r.json()["detail"] and "relevance" in r.json()["detail"]
    body["top_k"] = 10
    assert bounded_client.post("/rank", json=body).status_code == 200
    fuse = {"queries": [{"qid": f"q{q}", "systems": [{"ids": [f"doc-{q}-{j}" for j in range(1500)]}]}
                        for q in range(2)]}
    r = bounded_client.post("/fuse", json=fuse)
    assert r.status_code == 413 and r.json()["detail"].startswith("query 'q0' (queries[0]): "), r.text[:300]
    fuse["top_k"] = 10
    assert bounded_client.post("/fuse", json=fuse).status_code == 200
    evaluate = {"queries": [{"qid": f"q{q}", "labels": [1, 0], "scores": [0.5, 0.1]} for q in range(2000)],
                "metrics": ["ndcg@10", "map"], "per_query": True}
    r = bounded_client.post("/evaluate", json=evaluate)
    assert r.status_code == 413, r.text[:300]
    assert "TUNEMIX_MAX_ANSWER_BYTES" in r.json()["detail"] and "keyed by its qid" in r.json()["detail"]
    evaluate["per_query"] = False
    assert bounded_client.post("/evaluate", json=evaluate).status_code == 200
