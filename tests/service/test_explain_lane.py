"""The explain lane (``tunemix.service.lanes.explain_work`` on ``explain_lane``'s threads): its own
bound of concurrent requests, never the event loop's thread, the request's deadline and context
carried to the work, work cancelled while queued never started, work cancelled while running
waited for. Every wait is on an event, with a generous cap only against a hang."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from types import SimpleNamespace
from typing import Any

import pytest

from tunemix.core.deadline import Deadline, DeadlineExceeded, current_deadline
from tunemix.service.lanes import explain_lane, explain_work

#: seconds a test waits for an event before it fails (never reached when the code is right)
HANG = 60.0
PROBE: contextvars.ContextVar[str] = contextvars.ContextVar("explain_lane_probe", default="unset")


def fake_request(lane: Any, deadline: Deadline | None = None) -> Any:
    """What ``explain_work`` reads of a request: ``app.state.explain_lane`` and ``state.deadline``."""
    state = SimpleNamespace() if deadline is None else SimpleNamespace(deadline=deadline)
    return SimpleNamespace(app=SimpleNamespace(state=SimpleNamespace(explain_lane=lane)), state=state)


@pytest.mark.parametrize("concurrency", [1, 2])
def test_at_most_concurrency_requests_run_at_once_off_the_event_loop(concurrency: int) -> None:
    lane = explain_lane(concurrency)
    lock = threading.Lock()
    running = [0]
    most = [0]
    threads: set[int] = set()
    release = threading.Event()
    started = threading.Semaphore(0)

    def work(k: int) -> int:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
            threads.add(threading.get_ident())
        started.release()
        assert release.wait(HANG)
        with lock:
            running[0] -= 1
        return k * k

    async def main() -> tuple[list[int], int]:
        loop_thread = threading.get_ident()
        request = fake_request(lane)
        tasks = [asyncio.create_task(explain_work(request, work, k)) for k in range(concurrency + 2)]
        # the first `concurrency` start; the others wait in the lane's queue
        for _ in range(concurrency):
            assert await asyncio.to_thread(started.acquire, True, HANG)
        assert running[0] == concurrency
        release.set()
        return list(await asyncio.gather(*tasks)), loop_thread

    try:
        results, loop_thread = asyncio.run(main())
    finally:
        lane.shutdown(wait=True)
    assert results == [k * k for k in range(concurrency + 2)]
    assert most[0] == concurrency
    assert loop_thread not in threads and len(threads) <= concurrency


def test_the_work_sees_the_requests_deadline_and_context() -> None:
    lane = explain_lane(1)

    def work() -> tuple[Deadline | None, str]:
        return current_deadline(), PROBE.get()

    async def main(deadline: Deadline) -> tuple[Deadline | None, str]:
        PROBE.set("from the request")
        return await explain_work(fake_request(lane, deadline), work)

    try:
        deadline = Deadline.after(30.0)
        seen, probe = asyncio.run(main(deadline))
        assert seen is deadline and probe == "from the request"
        with pytest.raises(DeadlineExceeded):  # waited past it: never runs
            asyncio.run(main(Deadline.after(-1.0)))
    finally:
        lane.shutdown(wait=True)


def test_cancelled_while_queued_never_runs_and_while_running_is_waited_for() -> None:
    lane = explain_lane(1)
    release = threading.Event()
    first_started = threading.Event()
    ran: list[str] = []
    ended: list[str] = []

    def blocker() -> None:
        ran.append("blocker")
        first_started.set()
        assert release.wait(HANG)
        ended.append("blocker")

    def queued() -> None:
        ran.append("queued")

    async def main() -> None:
        request = fake_request(lane)
        running = asyncio.create_task(explain_work(request, blocker))
        assert await asyncio.to_thread(first_started.wait, HANG)
        waiting = asyncio.create_task(explain_work(request, queued))
        await asyncio.sleep(0)  # both submitted
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        running.cancel()
        await asyncio.sleep(0)
        assert not running.done()  # cancelled while it runs: the request waits for its end
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await running
        assert ended == ["blocker"]

    try:
        asyncio.run(main())
    finally:
        lane.shutdown(wait=True)
    assert ran == ["blocker"]
