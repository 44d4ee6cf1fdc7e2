"""What a thread hop's failed work made is freed when the error is answered, not when the cyclic
collector next runs (``tunemix.service.lanes.frames_released``): with the collector off, the
object a refused request's work made is gone once the route has handled the error."""

from __future__ import annotations

import asyncio
import gc
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
