"""Dependencies shared by the routers (``Annotated`` aliases: settings, registry, metrics, the
body's hold on the worker's admission), the query parameters as a frozen pydantic model, the
model a request names, and JSON responses. A body's way in is ``tunemix.service.body``; the
thread hops are ``tunemix.service.lanes``."""


from __future__ import annotations

from typing import Annotated, Any, TypeVar

import pydantic_core
from fastapi import Depends, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from pydantic import BaseModel, ValidationError

from tunemix.service.body import BodyHold, body_hold
from tunemix.service.errors import ServiceError
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


HoldDep = Annotated[BodyHold, Depends(body_hold)]


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
    reading them here, 0.21 declaring nothing (``route_overhead`` of ``python -m
    bench.service_breakdown``); a request without a query string costs nothing here: a frozen
    ``model``'s defaults are one instance, made once (pydantic's constructor costs about 10 us)."""
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


def resolve_model(registry: ModelRegistry, name: str | None, version: str | None) -> ServedModel:
    """The model a scoring request names; an unknown name or version is the request's fault (422)."""
    try:
        return registry.get(name, version)
    except ServiceError as exc:
        if exc.status == 404:
            raise ServiceError(422, f"model: {exc.message}", kind=exc.kind) from None
        raise



def json_response(payload: Any) -> Response:
    """``payload`` as a compact JSON response, serialised by pydantic-core (Rust): about five
    times faster than ``json.dumps`` on a 1,000-document ranking, and the same text (shortest
    float repr, integers of any size, NaN as ``NaN``)."""
    return json_bytes_response(pydantic_core.to_json(payload))


def json_bytes_response(content: bytes) -> Response:
    """A JSON response of already serialised ``content``."""
    return Response(content=content, media_type="application/json")
