"""The thread hops. The event loop only reads bodies and writes responses, so ``/health`` answers
while a large list scores. Work leaves it through three limiters of the application (made in its
lifespan, on its event loop: an anyio limiter must not be shared by two event loops):

- ``python_work``: parsing, validation, evaluation, fusion, ranking: Python that holds the GIL.
  ``PYTHON_LANES`` threads at most: more would only queue for the GIL, and a thread returning
  from a scoring kernel would wait behind all of them (with anyio's default 40 threads, 200
  requests/s of 100 documents saturated the service at 170/s with the CPU at 63%).
- ``large_lane``: large work, a body over ``TUNEMIX_LARGE_BODY_BYTES`` or of more than
  ``TUNEMIX_LARGE_BODY_ITEMS`` items (``is_large``), on threads of its own
  (``TUNEMIX_LARGE_CONCURRENCY``, one by default, ``TUNEMIX_LARGE_NICE`` steps below the
  worker's priority): a /rank request's decoding, scoring (on one numba thread) and answer in
  one hop (``large_work``), another route's GIL-bound work on such a
  body (``python_work``'s ``body_size``). The lane holds none of the Python lanes or scoring
  slots small requests wait for: a 100,000-document request takes the worker's large lane and
  one core at most, and small requests queue behind small ones only.
- ``explain_lane``: /rank requests that ask for explanations, scored and explained on one thread
  (``TUNEMIX_EXPLAIN_CONCURRENCY`` of them at once, one by default: a thread pool of that many
  threads), outside the others: explain traffic never holds what plain requests wait for.
- ``scoring``: the model's kernels, which release the GIL (``nogil``), in ``Settings.concurrency``
  slots (default: cores / workers), so requests score side by side on the cores. A request uses
  several threads only when it is the worker's only one scoring or waiting to
  (``tunemix.core.scoring.runtime.single_threaded`` otherwise).
"""


from __future__ import annotations

import asyncio
import contextlib
import contextvars
import itertools
import os
import sys
import threading
import traceback
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar, cast

import anyio
import numpy as np
import numpy.typing as npt
from fastapi import Request

from tunemix.core.deadline import step_of_long_work
from tunemix.core.scoring.runtime import single_threaded
from tunemix.service.body import body_items
from tunemix.service.deadlines import request_deadline
from tunemix.service.settings import Settings

T = TypeVar("T")

#: Threads for GIL-bound request work (see the module docstring): two, so that one large body
#: being parsed does not hold up every other request.
PYTHON_LANES = 2


async def in_thread(fn: Callable[..., T], *args: Any) -> T:
    """Blocking I/O (model loading, directory listings) in anyio's default thread pool."""
    return await anyio.to_thread.run_sync(fn, *args)


def is_large(body: bytes, kind: str, settings: Settings) -> bool:
    """Whether a body's work goes to the large lane: more than ``settings.large_body_bytes``
    bytes, or more than ``settings.large_body_items`` items (``tunemix.service.body.body_items``:
    never fewer than its documents), so that a body of many documents in few bytes counts too.
    Items are counted only in a body of more bytes than ``large_body_items`` (an item takes one
    byte at least)."""
    if len(body) > settings.large_body_bytes:
        return True
    return len(body) > settings.large_body_items and body_items(body, kind) > settings.large_body_items


async def python_work(request: Request, fn: Callable[..., T], *args: Any, body_size: int = 0) -> T:
    """GIL-bound work (parsing, evaluation, fusion) in one of ``PYTHON_LANES`` threads; work on a
    body of more than ``TUNEMIX_LARGE_BODY_BYTES`` (``body_size``) in the worker's large lane
    instead (``large_work``): a decoder holds the GIL for the whole of its call (up to about a
    second at the body limit), and two such calls back to back would keep the event loop, and
    the thread that answers uvicorn's supervisor, waiting for twice that; in the Python lanes
    they would also keep small requests waiting for a lane."""
    state = request.app.state
    if body_size > state.settings.large_body_bytes:
        return await large_work(request, fn, *args)
    work, args = within_deadline(request, fn, args)
    return await anyio.to_thread.run_sync(work, *args, limiter=state.python_lanes)


def within_deadline(request: Request, fn: Callable[..., T], args: tuple[Any, ...]
                    ) -> tuple[Callable[..., T], tuple[Any, ...]]:
    """``fn`` and ``args`` to run on a thread under the request's deadline (``tunemix.service.deadlines``):
    checked before the work starts (it may have waited for a thread past it) and active while it
    runs, for the loops that check it."""
    deadline = request_deadline(request)
    if deadline is None:
        return frames_released, (fn, *args)
    return frames_released, (deadline.run, fn, *args)


def frames_released(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)``; if it raises, the locals of the frames it ran are released before the error
    leaves the thread (``traceback.clear_frames``: file and line stay for the log). An error
    travels through futures and the awaiting coroutine's frame, which form a reference cycle that
    only the cyclic collector frees, and that may be many requests later: with the frames, the
    cycle would hold what the work had made (the decoded body of a request refused for its
    documents, about 100 MB at the body limit) for as long."""
    try:
        return fn(*args)
    except BaseException as exc:
        traceback.clear_frames(exc.__traceback__)
        raise


def explain_lane(concurrency: int) -> ThreadPoolExecutor:
    """The worker's explain lane: ``concurrency`` threads of its own (``TUNEMIX_EXPLAIN_CONCURRENCY``),
    made in the application's lifespan and shut down with it. A thread pool rather than anyio's
    worker threads under a ``CapacityLimiter``: the same bound (at most ``concurrency`` requests
    explained at once, the others queued in order), one hop cheaper. A round trip to an idle lane
    and back, measured with uvloop on this 2-core VM after 5 ms of idle (the gap between explain
    requests): 274 against 218 us median, 81 against 65 back to back (anyio's hop takes a
    ``CapacityLimiter`` token, a cancel scope and a ``queue.Queue`` handshake in Python;
    ``run_in_executor``'s a ``SimpleQueue`` put)."""
    return ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="tunemix-explain")


async def explain_work(request: Request, fn: Callable[..., T], *args: Any) -> T:
    """A request's scoring and explanations in the worker's explain lane (``explain_lane``:
    ``TUNEMIX_EXPLAIN_CONCURRENCY`` threads, one by default), under its deadline, in a copy of the
    request's context (as anyio's hop runs it). The lane holds none of the Python lanes or scoring
    slots plain requests wait for, and the work scores on one numba thread: explain traffic takes
    at most one core of the worker's share and queues behind itself only (a request that waited
    past its deadline gets 503 without running). Cancelled while queued, the work never starts;
    cancelled while it runs, the request waits for it to end (its body stays counted in the
    worker's admission until then, as with anyio's shielded hop)."""
    return await lane_work(request.app.state.explain_lane, request, fn, *args)


def large_lane(concurrency: int, nice: int = 0, idle: bool = False) -> ThreadPoolExecutor:
    """The worker's large lane: ``concurrency`` threads of its own (``TUNEMIX_LARGE_CONCURRENCY``),
    made in the application's lifespan and shut down with it, as ``explain_lane``; each thread
    ``nice`` steps below the worker's priority (``TUNEMIX_LARGE_NICE``, Linux: a thread has its
    own), and with ``idle`` (``TUNEMIX_LARGE_IDLE``) under Linux's ``SCHED_IDLE`` policy, so that a
    small request's threads take a core from it as soon as they wake."""
    return ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="tunemix-large",
                              initializer=lower_priority, initargs=(nice, idle))


def lower_priority(nice: int, idle: bool = False) -> None:
    """This thread ``nice`` steps below its current priority, and with ``idle`` under
    ``SCHED_IDLE`` (it runs only when no other thread of the machine wants the core, and gives the
    core up at once to one that wakes), where the system lets a thread have its own (Linux);
    elsewhere nothing."""
    if sys.platform != "linux":
        return
    tid = threading.get_native_id()
    if nice:
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + nice))
    if idle:
        with contextlib.suppress(OSError, AttributeError):
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))  # 0: this thread


async def large_work(request: Request, fn: Callable[..., T], *args: Any) -> T:
    """Large work (``is_large``) in the worker's large lane, under the request's deadline, on one
    numba thread (``single_threaded``): it holds none of the Python lanes or scoring slots small
    requests wait for, takes one core at most, and queues behind large work only. Cancelled, as
    ``explain_work``."""
    return await lane_work(request.app.state.large_lane, request, single_threaded_call, fn, *args)


def single_threaded_call(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` with the scoring kernels on one thread."""
    with single_threaded():
        return fn(*args)


async def lane_work(lane: ThreadPoolExecutor, request: Request, fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` on one of ``lane``'s threads, under the request's deadline, in a copy of the
    request's context. Cancelled while queued, the work never starts; cancelled while it runs,
    the request waits for it to end."""
    work, args = within_deadline(request, fn, args)
    future = lane.submit(contextvars.copy_context().run, work, *args)
    try:
        return await asyncio.wrap_future(future)
    except asyncio.CancelledError:
        if not future.cancelled():  # running: wait for its end (cancelling it again abandons the wait)
            with contextlib.suppress(BaseException):
                await asyncio.wrap_future(future)
        raise


@contextlib.contextmanager
def scoring_turn(state: Any) -> Iterator[bool]:
    """Count a request as scoring or waiting to (``state.scoring_requests``, changed on the event
    loop only: no race) for as long as the block runs; yields whether it is the worker's only one
    and the parallel kernels are warm (then it may score on several threads)."""
    state.scoring_requests += 1
    try:
        yield state.scoring_requests == 1 and state.registry.parallel_warm
    finally:
        state.scoring_requests -= 1


async def scoring(request: Request, fn: Callable[..., T], *args: Any) -> T:
    """A model's scoring in one of the application's scoring slots. A request scores on several
    threads only when no other request of this worker is scoring or waiting to: under load the
    requests score side by side, one thread each (no cycles lost to splitting and joining)."""
    state = request.app.state
    with scoring_turn(state) as alone:
        work, call = within_deadline(request, score_call, (fn, args, alone))
        return await anyio.to_thread.run_sync(work, *call, limiter=state.scoring_slots)


async def parse_and_score(request: Request, fn: Callable[[bool], T]) -> T | None:
    """``fn(alone)`` (parse, score and serialise one request) in a single thread hop, holding a
    Python lane and a scoring slot, when the worker is idle: no request scoring or waiting to,
    and a lane and a slot free. None otherwise: the caller then takes the two hops
    (``python_work``, then ``scoring``), which let parsing overlap another request's scoring.

    A hop costs a cross-thread wake-up each way: measured with anyio on this 2-core VM, 0.17 ms
    back to back and 0.5 ms after 50 ms of idle, the gap a worker has between 1,000-document
    requests at 20/s."""
    state = request.app.state
    if state.scoring_requests or not state.python_lanes.available_tokens:
        return None
    slots = state.scoring_slots
    try:
        slots.acquire_nowait()
    except anyio.WouldBlock:
        return None
    try:
        with scoring_turn(state) as alone:
            work, args = within_deadline(request, fn, (alone,))
            return await anyio.to_thread.run_sync(work, *args, limiter=state.python_lanes)
    finally:
        slots.release()


#: documents a large request scores per call at most (``in_query_chunks``)
SCORE_CHUNK_DOCUMENTS = 1000


def in_query_chunks(fn: Callable[..., T]) -> Callable[..., T]:
    """``fn`` (a model's scoring: ``(features, offsets)`` -> an array, or a tuple of arrays, of a
    row per document) called on runs of whole queries of at most ``SCORE_CHUNK_DOCUMENTS``
    documents (a longer query alone), the parts joined: the same values (a query's scores depend on
    its own documents only), and no call of the scoring's numpy and Python stages holds the GIL
    for a whole large request (9,000 MQ2008 documents at once: up to 25 ms in the feature views and
    17 ms in the calibration, while the worker's other requests wait)."""
    def chunked(features: npt.NDArray[np.float32], offsets: npt.NDArray[np.int64]) -> Any:
        cuts = query_runs(offsets.tolist(), SCORE_CHUNK_DOCUMENTS)
        if len(cuts) <= 2:
            return fn(features, offsets)
        parts: list[Any] = []
        for a, b in itertools.pairwise(cuts):
            step_of_long_work("/rank: scoring")
            lo, hi = int(offsets[a]), int(offsets[b])
            parts.append(fn(features[lo:hi], offsets[a:b + 1] - lo))
        if isinstance(parts[0], tuple):
            return tuple(np.concatenate(p) for p in zip(*parts, strict=True))
        return np.concatenate(parts)
    return cast(Callable[..., T], chunked)


def query_runs(offsets: list[int], limit: int) -> list[int]:
    """The query indices that cut queries ``offsets`` delimits into runs of consecutive whole
    queries of at most ``limit`` documents each (a longer query a run of its own): ``[0, ...,
    n_queries]``."""
    cuts = [0]
    for q in range(1, len(offsets) - 1):
        if offsets[q + 1] - offsets[cuts[-1]] > limit:
            cuts.append(q)
    cuts.append(len(offsets) - 1)
    return cuts


def score_call(fn: Callable[..., T], args: tuple[Any, ...], alone: bool) -> T:
    """``fn(*args)``, on one numba thread unless ``alone`` (no other request of the worker scoring)."""
    if alone:
        return fn(*args)
    with single_threaded():
        return fn(*args)

