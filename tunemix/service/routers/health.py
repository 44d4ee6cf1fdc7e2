"""Liveness (``/health``), readiness (``/ready``) and Prometheus metrics (``/metrics``)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response

from tunemix.service.deps import MetricsDep, RegistryDep, SettingsDep

router = APIRouter(tags=["operations"])


@router.get("/health", summary="Liveness: the process answers (never waits for scoring)")
async def health() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/ready", summary="Readiness: 200 once every worker serves the default model (its kernels warm)",
            responses={503: {"description": "still loading (this worker or another), or the default model "
                                            "could not be loaded (status \"failed\" and the reason)"}})
async def ready(registry: RegistryDep, settings: SettingsDep) -> JSONResponse:
    # with several workers this reads their files in the state directory (a few small files)
    ok, body = registry.readiness(settings.this_process_workers())
    return JSONResponse(body, status_code=200 if ok else 503)


@router.get("/metrics", summary="Prometheus metrics (text exposition format)", response_class=Response,
            responses={200: {"description": "the Prometheus text exposition format",
                             "content": {"text/plain; version=0.0.4; charset=utf-8": {"schema": {"type": "string"}}}},
                       501: {"description": "prometheus-client is not installed"}})
async def metrics(m: MetricsDep) -> Response:
    if not m.enabled:
        return JSONResponse({"detail": "metrics need prometheus-client: pip install 'tunemix[serve]'"},
                            status_code=501)
    body, ctype = m.exposition()
    return Response(content=body, media_type=ctype)
