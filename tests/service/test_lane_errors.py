"""What a thread hop's failed work made is freed when the error is answered, not when the cyclic
collector next runs (``tunemix.service.lanes.frames_released``): with the collector off, the
object a refused request's work made is gone once the route has handled the error."""

from __future__ import annotations

import asyncio
import gc
import itertools
import weakref
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import anyio
import pytest

from tunemix.service.lanes import explain_lane, large_work, python_work


class Decoded:
    """Stands for a decoded body (weakly referable, unlike a list)."""


@pytest.fixture
def collector_off() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def refused(made: list[weakref.ref[Decoded]]) -> Callable[[], None]:
    def work() -> None:
        decoded = Decoded()
        made.append(weakref.ref(decoded))
        raise ValueError("413: too many documents")
    return work


def request() -> Any:
    state = SimpleNamespace(python_lanes=anyio.CapacityLimiter(2), large_lane=explain_lane(1),
                            explain_lane=explain_lane(1), settings=SimpleNamespace(large_body_bytes=1024))
    return SimpleNamespace(app=SimpleNamespace(state=state), state=SimpleNamespace())


@pytest.mark.parametrize("hop", ["python lane", "large lane"])
def test_a_refused_requests_work_is_freed_with_its_answer(collector_off: None, hop: str) -> None:
    made: list[weakref.ref[Decoded]] = []
    r = request()

    async def route() -> str:
        try:
            if hop == "large lane":
                await large_work(r, refused(made))
            else:
                await python_work(r, refused(made))
        except ValueError as exc:
            return str(exc)
        return "answered"

    assert asyncio.run(route()) == "413: too many documents"
    r.app.state.large_lane.shutdown(wait=True)
    r.app.state.explain_lane.shutdown(wait=True)
    assert len(made) == 1
    assert made[0]() is None, "the failed work's objects outlive its answer until the cyclic collector runs"


# ---------------------------------------------------------------------------- large requests scored in runs
def query_runs_twin(offsets: list[int], limit: int) -> list[list[int]]:
    """Runs of queries, greedily: a query joins the current run while the run stays within ``limit``."""
    runs: list[list[int]] = []
    for q in range(len(offsets) - 1):
        if runs and offsets[q + 1] - offsets[runs[-1][0]] <= limit:
            runs[-1].append(q)
        else:
            runs.append([q])
    return runs


@pytest.mark.parametrize("sizes", [[1], [5, 5, 5], [1000], [999, 2], [3000, 1, 1, 998, 2, 700, 300, 1]])
def test_query_runs_cut_whole_queries_within_the_limit(sizes: list[int]) -> None:
    import numpy as np

    from tunemix.service.lanes import query_runs

    offsets = [0, *np.cumsum(sizes).tolist()]
    cuts = query_runs(offsets, 1000)
    assert [list(range(a, b)) for a, b in itertools.pairwise(cuts)] == query_runs_twin(offsets, 1000)


def test_a_large_request_scored_in_runs_of_queries_scores_as_at_once(registry: Any,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The served model (its raw+std view standardises per query), scores and relevance head: the
    same bits in runs of at most 50 documents as in one call."""
    import numpy as np

    from tunemix.service import lanes
    from tunemix.service.deps import resolve_model

    served = resolve_model(registry, None, None)
    sizes = [30, 1, 80, 20, 20, 9, 51, 50]
    x = np.random.default_rng(3).random((sum(sizes), served.n_features)).astype(np.float32)
    off = np.array([0, *np.cumsum(sizes)], dtype=np.int64)
    calls: list[int] = []

    def counted(fn: Callable[..., Any]) -> Callable[..., Any]:
        def call(features: Any, offsets: Any) -> Any:
            calls.append(features.shape[0])
            return fn(features, offsets)
        return call

    monkeypatch.setattr(lanes, "SCORE_CHUNK_DOCUMENTS", 50)
    model = served.model
    assert lanes.in_query_chunks(counted(model.score))(x, off).tobytes() == model.score(x, off).tobytes()
    assert calls == [31, 80, 49, 51, 50], calls  # runs of whole queries: 30+1, 80 alone, 20+20+9, 51, 50
    if model.relevance_head is not None:
        got = lanes.in_query_chunks(model.score_and_relevance)(x, off)
        want = model.score_and_relevance(x, off)
        assert [a.tobytes() for a in got] == [b.tobytes() for b in want]
