"""Dependencies shared by the routers (``Annotated`` aliases) and the thread hops.

The event loop only reads bodies and writes responses, so ``/health`` answers while a large
list scores. Work leaves it through three limiters of the application (made in its lifespan, on
its event loop: an anyio limiter must not be shared by two event loops):

- ``python_work``: parsing, validation, evaluation, fusion, ranking: Python that holds the GIL.
  ``PYTHON_LANES`` threads at most: more would only queue for the GIL, and a thread returning
  from a scoring kernel would wait behind all of them (measured: with anyio's default 40
  threads, 200 requests/s of 100 documents saturated the service at 170/s with the CPU at 63%).
  Bodies over ``LARGE_BODY_BYTES`` are decoded one at a time: a decoder holds the GIL for its
  whole call.
- ``explain_lane``: /rank requests that ask for explanations, scored and explained on one thread
  (``TUNEMIX_EXPLAIN_CONCURRENCY`` of them at once, one by default: a thread pool of that many
  threads, ``explain_lane``), outside the other two: explain traffic never holds what plain
  requests wait for.
- ``scoring``: the model's kernels, which release the GIL (``nogil``), in ``Settings.concurrency``
  slots (default: cores / workers), so requests score side by side on the cores. A request uses
  several threads only when it is the worker's only one scoring or waiting to
  (``tunemix.core.scoring.forest.single_threaded`` otherwise).

Bodies come in through ``read_body`` (bytes and time bounded) and, for the endpoints that take
large ones, count in the worker's ``Admission`` (``HoldDep``) as they are received, until the
request ends: past ``TUNEMIX_MAX_INFLIGHT_BYTES`` a body is answered 503 with ``Retry-After``.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar

import anyio
import pydantic_core
from fastapi import Depends, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from pydantic import BaseModel, ValidationError
from starlette.requests import ClientDisconnect

from tunemix.core.scoring.runtime import single_threaded
from tunemix.service.deadlines import request_deadline
from tunemix.service.errors import ServiceError, too_large
from tunemix.service.observability import Metrics
from tunemix.service.registry import ModelRegistry, ServedModel
from tunemix.service.settings import Settings

T = TypeVar("T")


# ``async def``: FastAPI runs a plain ``def`` dependency in its thread pool, a thread hop (and a
# GIL hand-over) per dependency per request for a mere attribute read.
async def get_settings_dep(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


async def get_registry(request: Request) -> ModelRegistry:
    registry: ModelRegistry = request.app.state.registry
    return registry


async def get_metrics(request: Request) -> Metrics:
    metrics: Metrics = request.app.state.metrics
    return metrics


SettingsDep = Annotated[Settings, Depends(get_settings_dep)]
RegistryDep = Annotated[ModelRegistry, Depends(get_registry)]
MetricsDep = Annotated[Metrics, Depends(get_metrics)]


class Admission:
    """The request bytes one worker holds at once (``TUNEMIX_MAX_INFLIGHT_BYTES``): bodies being
    read, waiting for a thread, decoded and answered. Changed on the event loop only (no race)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0


@dataclass
class BodyHold:
    """The bytes of one request's body counted in its worker's ``Admission`` until the request
    ends (``HoldDep`` releases them). A body that would take the worker past its limit while
    other requests hold bytes is refused (HTTP 503 with ``Retry-After``); a body alone is always
    let in (``max_body_bytes <= max_inflight_bytes``)."""

    admission: Admission
    held: int = 0

    def take(self, n: int) -> None:
        adm = self.admission
        others = adm.held - self.held
        if others and adm.held + n > adm.limit:
            raise ServiceError(503, f"the worker holds {others} bytes of other requests and this body would take it "
                                    f"past {adm.limit} (TUNEMIX_MAX_INFLIGHT_BYTES); retry after the time in "
                                    "Retry-After, or send smaller requests", kind="busy",
                               headers={"Retry-After": str(RETRY_AFTER_S), "Connection": "close"})
        adm.held += n
        self.held += n

    def release(self) -> None:
        self.admission.held -= self.held
        self.held = 0


#: seconds a client refused for the worker's in-flight bytes is told to wait (``Retry-After``)
RETRY_AFTER_S = 1


async def body_hold(request: Request) -> AsyncIterator[BodyHold]:
    """A ``BodyHold`` on the worker's admission, released when the request ends."""
    state = request.app.state
    admission = getattr(state, "admission", None)
    if admission is None:  # made on first use, on the serving loop, once per application
        admission = state.admission = Admission(state.settings.max_inflight_bytes)
    hold = BodyHold(admission)
    try:
        yield hold
    finally:
        hold.release()


HoldDep = Annotated[BodyHold, Depends(body_hold)]
#: ``body_hold`` for a route that takes no dependencies: ``async with held_body(request) as hold``
held_body = contextlib.asynccontextmanager(body_hold)

M = TypeVar("M", bound=BaseModel)
#: ``query_model``'s instance of each frozen model's defaults
_DEFAULTS: dict[type[BaseModel], BaseModel] = {}


def query_model(request: Request, model: type[M]) -> M:
    """The request's query parameters as ``model``, read as FastAPI reads declared ones: pydantic's
    lax mode (``?relevance=true``, ``?top_k=3``), the last of a repeated one, unknown ones ignored;
    an invalid one is FastAPI's ``RequestValidationError`` (422 naming the query parameter). For a
    hot route that declares none (``tunemix.service.openapi.query_parameters`` documents them): FastAPI
    resolves each declared parameter and dependency on every request. A route that does nothing
    costs 0.48 ms CPU a request declaring /rank's eight parameters and four dependencies, 0.21
    reading them here, 0.21 declaring nothing (``route_overhead`` in
    bench/results/service_breakdown.json); a request without a query string costs nothing here: a
    frozen ``model``'s defaults are one instance, made once (pydantic's constructor took about 10
    us a request)."""
    if not request.scope.get("query_string"):
        if not model.model_config.get("frozen"):
            return model()
        default = _DEFAULTS.get(model)
        if default is None:
            default = _DEFAULTS[model] = model()
        return default  # type: ignore[return-value]
    try:
        return model.model_validate(dict(request.query_params))
    except ValidationError as exc:
        raise RequestValidationError([{**e, "loc": ("query", *e["loc"])} for e in exc.errors()]) from None


def split_hint(limit: int) -> str:
    """What a 413 for the body size tells the client to do."""
    return (f"the limit is {limit} bytes (TUNEMIX_MAX_BODY_BYTES); split the queries over several requests "
            "(each query's candidates stay together: a query-wise view standardises over the posted list), "
            "or send the columnar form (ids + features), which is smaller")


async def read_body(request: Request, settings: Settings, limit: int | None = None,
                    hold: BodyHold | None = None) -> bytes:
    """The request body: at most ``limit`` bytes (default ``max_body_bytes``; HTTP 413, refused
    from the declared length before reading when there is one, else as soon as the chunks add up
    to more), all of it within ``body_timeout_s`` seconds (HTTP 408, and the connection closed:
    a client that sends a byte a second holds no worker past that). With ``hold``, the bytes
    count in the worker's admission as they are received (HTTP 503 past it), never the length a
    client declares: 16 connections that announce 4 MiB and send a byte hold 16 bytes, not 64 MiB
    (a client that sends nothing holds nothing)."""
    limit = settings.max_body_bytes if limit is None else limit
    declared = request.headers.get("content-length")
    length = int(declared) if declared is not None and declared.isdigit() else None
    if length is not None and length > limit:
        raise too_large(f"the body has {length} bytes; {split_hint(limit)}")
    chunks: list[bytes] = []
    size = 0
    try:
        # asyncio's own timeout: one timer on the loop (anyio's fail_after first asks which async
        # library runs, about 2% of a 100-document /rank's event-loop time in a py-spy profile)
        async with asyncio.timeout(settings.body_timeout_s):
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise too_large(f"the body exceeds {limit} bytes; {split_hint(limit)}")
                if hold is not None and size > hold.held:
                    hold.take(size - hold.held)
                chunks.append(chunk)
    except ClientDisconnect:  # gone, or refused by the protocol (a chunked body past its wire limit)
        raise ServiceError(400, f"the client disconnected after {size} bytes of the body", kind="disconnected",
                           headers={"Connection": "close"}) from None
    except TimeoutError:
        raise ServiceError(408, f"the body did not arrive within {settings.body_timeout_s:g} s "
                                f"({size} bytes received; TUNEMIX_BODY_TIMEOUT_S)", kind="body_timeout",
                           headers={"Connection": "close"}) from None
    return b"".join(chunks)


def resolve_model(registry: ModelRegistry, name: str | None, version: str | None) -> ServedModel:
    """The model a scoring request names; an unknown name or version is the request's fault (422)."""
    try:
        return registry.get(name, version)
    except ServiceError as exc:
        if exc.status == 404:
            raise ServiceError(422, f"model: {exc.message}", kind=exc.kind) from None
        raise


JSON_TYPES = frozenset({"application/json"})
TEXT_TYPES = frozenset({"text/plain"})


def body_kind(request: Request, *, text: bool = True) -> str:
    """``"json"`` for ``Content-Type: application/json`` (or ``application/<x>+json``), ``"text"``
    for ``text/plain`` (a LETOR/SVMlight body) where the endpoint takes one; HTTP 415 with a hint
    for anything else, a missing type included (a LETOR body read as JSON would get a misleading
    error)."""
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if ctype in JSON_TYPES or (ctype.startswith("application/") and ctype.endswith("+json")):
        return "json"
    if text and ctype in TEXT_TYPES:
        return "text"
    accepted = "application/json, or text/plain for LETOR lines" if text else "application/json"
    got = f"Content-Type {ctype!r}" if ctype else "no Content-Type"
    raise ServiceError(415, f"{request.url.path} takes {accepted}; the request has {got} "
                            "(curl: -H 'Content-Type: application/json')", kind="unsupported_media_type")


#: Threads for GIL-bound request work (see the module docstring): two, so that one large body
#: being parsed does not hold up every other request.
PYTHON_LANES = 2


async def in_thread(fn: Callable[..., T], *args: Any) -> T:
    """Blocking I/O (model loading, directory listings) in anyio's default thread pool."""
    return await anyio.to_thread.run_sync(fn, *args)


#: Bodies larger than this are decoded one at a time per worker (``python_work``'s ``body_size``)
LARGE_BODY_BYTES = 1024 * 1024


async def python_work(request: Request, fn: Callable[..., T], *args: Any, body_size: int = 0) -> T:
    """GIL-bound work (parsing, evaluation, fusion) in one of ``PYTHON_LANES`` threads. Work on a
    body of more than ``LARGE_BODY_BYTES`` (``body_size``) also waits for the worker's one large
    lane: a decoder holds the GIL for the whole of its call (up to about a second at the body
    limit), and two such calls back to back would keep the event loop, and the thread that
    answers uvicorn's supervisor, waiting for twice that."""
    state = request.app.state
    work, args = within_deadline(request, fn, args)
    if body_size <= LARGE_BODY_BYTES:
        return await anyio.to_thread.run_sync(work, *args, limiter=state.python_lanes)
    large = getattr(state, "large_lane", None)
    if large is None:  # made on first use, on the serving loop, once per application
        large = state.large_lane = anyio.CapacityLimiter(1)
    async with large:
        return await anyio.to_thread.run_sync(work, *args, limiter=state.python_lanes)


def within_deadline(request: Request, fn: Callable[..., T], args: tuple[Any, ...]
                    ) -> tuple[Callable[..., T], tuple[Any, ...]]:
    """``fn`` and ``args`` to run on a thread under the request's deadline (``tunemix.service.deadlines``):
    checked before the work starts (it may have waited for a thread past it) and active while it
    runs, for the loops that check it."""
    deadline = request_deadline(request)
    if deadline is None:
        return fn, args
    return deadline.run, (fn, *args)


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
    work, args = within_deadline(request, fn, args)
    future = request.app.state.explain_lane.submit(contextvars.copy_context().run, work, *args)
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


def score_call(fn: Callable[..., T], args: tuple[Any, ...], alone: bool) -> T:
    """``fn(*args)``, on one numba thread unless ``alone`` (no other request of the worker scoring)."""
    if alone:
        return fn(*args)
    with single_threaded():
        return fn(*args)


def json_response(payload: Any) -> Response:
    """``payload`` as a compact JSON response, serialised by pydantic-core (Rust): about five
    times faster than ``json.dumps`` on a 1,000-document ranking, and the same text (shortest
    float repr, integers of any size, NaN as ``NaN``)."""
    return json_bytes_response(pydantic_core.to_json(payload))


def json_bytes_response(content: bytes) -> Response:
    """A JSON response of already serialised ``content``."""
    return Response(content=content, media_type="application/json")
