"""``GET /models``, ``GET /models/{name}``, ``POST /models/reload`` (bearer token)."""

from __future__ import annotations

import hmac
from typing import Annotated, Any

import anyio
import msgspec
from fastapi import APIRouter, Header, Request, Response

from tunemix.core.artifact import versions_on_disk
from tunemix.service.body import read_body
from tunemix.service.deps import RegistryDep, SettingsDep
from tunemix.service.errors import ServiceError
from tunemix.service.json_body import check_repeated_keys, decode_json
from tunemix.service.lanes import in_thread
from tunemix.service.openapi import msgspec_body_spec
from tunemix.service.schemas import ErrorResponse, ModelsResponse, ReloadResponse

router = APIRouter(prefix="/models", tags=["models"])

#: the reload body's largest size: two names
RELOAD_BODY_BYTES = 64 * 1024


class ReloadRequest(msgspec.Struct, forbid_unknown_fields=True):
    """The /models/reload JSON body (optional: no body reloads the default model's latest version).
    Decoded by msgspec like every other JSON body (strict types, unknown fields refused, first
    error only), then checked for repeated keys."""

    #: model name (default: the served default)
    model: str | None = None
    #: version to serve (default: the latest on disk)
    version: str | None = None


DECODER = msgspec.json.Decoder(ReloadRequest)


def reload_request(body: bytes) -> ReloadRequest:
    """The body decoded (an empty one: reload the default model's latest version); a 422 naming the
    field for a wrong type, an unknown field or a repeated key."""
    if not body.strip():
        return ReloadRequest()
    req = decode_json(DECODER, body, "/models/reload")
    check_repeated_keys(body)
    return req


@router.get("", summary="Served models and the versions on disk", response_model=ModelsResponse)
async def list_models(registry: RegistryDep) -> dict[str, Any]:
    served = [registry.current(n) for n in registry.names()]
    return {
        "default": registry.default_model,
        "models": [s.brief for s in served if s is not None],  # made when each version was loaded
        "on_disk": await in_thread(versions_on_disk, registry.models_dir),
    }


@router.get("/{name}", summary="One model's manifest summary (features, members, mixer, training metrics)",
            response_class=Response,
            responses={200: {"content": {"application/json": {}},
                             "description": "name, version, shape, members, the training record's parts "
                                            "(those past its size limit named in training_omitted), "
                                            "feature_names"},
                       404: {"model": ErrorResponse}, 422: {"model": ErrorResponse}})
async def get_model(name: str, registry: RegistryDep) -> Response:
    served = await in_thread(registry.get, name, None)
    # the JSON made once when the version was loaded (ServedModel.detail_json): sent as it is
    return Response(served.detail_json, media_type="application/json")


@router.post(
    "/reload",
    summary="Load a new version and swap it in atomically (the old one keeps serving on any error)",
    response_model=ReloadResponse,
    openapi_extra=msgspec_body_spec(ReloadRequest, None, required=False),
    responses={401: {"model": ErrorResponse}, 403: {"model": ErrorResponse}, 404: {"model": ErrorResponse},
               409: {"model": ErrorResponse}, 422: {"model": ErrorResponse}},
)
async def reload_model(
    request: Request,
    registry: RegistryDep,
    settings: SettingsDep,
    authorization: Annotated[str | None, Header(description="Bearer <TUNEMIX_RELOAD_TOKEN>")] = None,
) -> dict[str, Any]:
    if not settings.reload_token:
        raise ServiceError(403, "reloading is disabled: set TUNEMIX_RELOAD_TOKEN to enable it", kind="forbidden")
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), settings.reload_token.encode()):
        raise ServiceError(401, "missing or wrong bearer token (Authorization: Bearer <TUNEMIX_RELOAD_TOKEN>)",
                           kind="unauthorized")
    body = await read_body(request, settings, limit=RELOAD_BODY_BYTES)
    req = reload_request(body)  # at most 64 KiB: decoded on the event loop
    new, old = await in_thread(registry.reload, req.model, req.version)
    total = settings.this_process_workers()
    serving, lagging = registry.workers_serving(new.name, new.version)
    waited = 0.0
    while (serving < total or lagging) and waited < settings.reload_wait_s:  # the others follow within a poll
        await anyio.sleep(0.05)
        waited += 0.05
        serving, lagging = registry.workers_serving(new.name, new.version)
    return {"model": new.name, "version": new.version, "previous_version": old.version if old else None,
            "workers_serving": serving, "workers_total": max(total, serving + len(lagging)),
            "workers_lagging": lagging}
