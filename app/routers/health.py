"""Liveness (``/health``), readiness (``/ready``) and Prometheus metrics (``/metrics``)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response

from app.deps import MetricsDep, RegistryDep

router = APIRouter(tags=["operations"])


@router.get("/health", summary="Liveness: the process answers (never waits for scoring)")
async def health() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/ready", summary="Readiness: 200 once the default model is loaded and its kernels are warm",
            responses={503: {"description": "still loading, or the default model could not be loaded"}})
async def ready(registry: RegistryDep) -> JSONResponse:
    served = registry.current(registry.default_model)
    if served is None or not registry.warm:
        status = "failed" if registry.load_error else "loading"
        body = {"status": status, "model": registry.default_model}
        if registry.load_error:
            body["detail"] = registry.load_error
        return JSONResponse(body, status_code=503)
    # "kernels": "warming" while the parallel, evaluation and fusion kernels compile after readiness
    kernels = "warm" if registry.all_warm else "warming"
    return JSONResponse({"status": "ready", "model": served.name, "version": served.version, "kernels": kernels})


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
