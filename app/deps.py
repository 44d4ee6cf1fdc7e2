"""Dependencies shared by the routers (``Annotated`` aliases) and the two thread hops.

Parsing and evaluation run in the default thread pool; scoring runs under the application's
one-slot limiter (the forest kernel already uses ``TUNEMIX_SCORING_THREADS`` cores, and numba's
workqueue threading layer must not be entered from two threads at once). The limiter belongs to
the application (made in its lifespan, on its event loop), not to the module: an anyio limiter
must not be shared by two event loops. The event loop itself only reads bodies and writes
responses, so ``/health`` answers while a large list scores.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, TypeVar

import anyio
import pydantic_core
from fastapi import Depends, Request
from fastapi.responses import Response

from app.errors import ServiceError, too_large
from app.observability import Metrics
from app.registry import ModelRegistry, ServedModel
from app.settings import Settings

T = TypeVar("T")


def get_settings_dep(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


def get_registry(request: Request) -> ModelRegistry:
    registry: ModelRegistry = request.app.state.registry
    return registry


def get_metrics(request: Request) -> Metrics:
    metrics: Metrics = request.app.state.metrics
    return metrics


SettingsDep = Annotated[Settings, Depends(get_settings_dep)]
RegistryDep = Annotated[ModelRegistry, Depends(get_registry)]
MetricsDep = Annotated[Metrics, Depends(get_metrics)]


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, refusing (HTTP 413) more than ``limit`` bytes before reading it all."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise too_large(f"the body has {int(declared)} bytes; the limit is {limit} (TUNEMIX_MAX_BODY_BYTES)")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_large(f"the body exceeds {limit} bytes (TUNEMIX_MAX_BODY_BYTES)")
        chunks.append(chunk)
    return b"".join(chunks)


def resolve_model(registry: ModelRegistry, name: str | None, version: str | None) -> ServedModel:
    """The model a scoring request names; an unknown name or version is the request's fault (422)."""
    try:
        return registry.get(name, version)
    except ServiceError as exc:
        if exc.status == 404:
            raise ServiceError(422, f"model: {exc.message}", kind=exc.kind) from None
        raise


def is_text(request: Request) -> bool:
    """True for a LETOR/SVMlight body (``Content-Type: text/plain``)."""
    return request.headers.get("content-type", "").split(";")[0].strip().lower() == "text/plain"


async def in_thread(fn: Callable[..., T], *args: Any) -> T:
    return await anyio.to_thread.run_sync(fn, *args)


async def scoring(request: Request, fn: Callable[..., T], *args: Any) -> T:
    """Run a model's scoring in the application's one scoring slot."""
    state = request.app.state
    slot: anyio.CapacityLimiter | None = getattr(state, "scoring_slot", None)
    if slot is None:  # first use (the lifespan normally makes it); made on the serving loop
        slot = state.scoring_slot = anyio.CapacityLimiter(1)
    return await anyio.to_thread.run_sync(fn, *args, limiter=slot)


def json_response(payload: Any) -> Response:
    """``payload`` as a compact JSON response, serialised by pydantic-core (Rust): about five
    times faster than ``json.dumps`` on a 1,000-document ranking, and the same text (shortest
    float repr, integers of any size, NaN as ``NaN``)."""
    return Response(content=pydantic_core.to_json(payload), media_type="application/json")
