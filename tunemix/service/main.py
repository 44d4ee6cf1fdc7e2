"""The application factory: settings, lifespan (models load in the background), routers,
error handlers and metrics.

``uvicorn tunemix.service.main:app`` serves ``create_app()`` with ``Settings()`` from the environment;
``python -m tunemix.service`` does the same with the worker count and multiprocess metrics set up. Until the
default model is loaded and every kernel a request can reach is compiled or loaded from numba's
cache (``tunemix.compile.serving.warm_all``, in every worker), ``/ready`` answers 503; scoring endpoints
answer 503 until the default model is loaded;
``/health`` answers from the first moment. A worker started while the others serve (a restart after a
crash) loads before it takes connections.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import anyio
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi_offline import FastAPIOffline
from starlette.exceptions import HTTPException as StarletteHTTPException

from tunemix.compile.serving import warm_all
from tunemix.core.deadline import BudgetExceeded, DeadlineExceeded
from tunemix.core.scoring.runtime import configure as configure_runtime
from tunemix.core.scoring.runtime import get_scoring_threads as scoring_threads
from tunemix.core.version import __version__
from tunemix.service.body import AnswerBytes
from tunemix.service.deadlines import budget_answer, deadline_answer
from tunemix.service.errors import ServiceError, plain_errors, validation_message
from tunemix.service.lanes import PYTHON_LANES, explain_lane, large_lane
from tunemix.service.observability import Metrics, MetricsMiddleware
from tunemix.service.openapi import install_openapi
from tunemix.service.rank_dispatch import RankShortcut
from tunemix.service.registry import ModelRegistry
from tunemix.service.routers import evaluate, fuse, health, models, rank
from tunemix.service.settings import Settings, get_settings

log = logging.getLogger("tunemix.service")

DESCRIPTION = """Calibrated-ensemble learning to rank (tunemix): rank candidate lists with a trained
ensemble, evaluate rankings under ten tools' conventions (letor3, letor4, mslr, yahoo, ranklib, trec,
lightgbm, xgboost, sklearn, ranx), fuse several systems' result lists.
Every 4xx body is `{"detail": "<what is wrong, naming the query and field>"}`."""


def warm_in_background(registry: ModelRegistry) -> None:
    """After the default model is loaded (its one-thread kernels warm): every other kernel a
    request can reach, ``tunemix.compile.serving.warm_all`` (the served models' parallel scoring paths and
    explanations, evaluation under every convention, fusion). Until it ends ``/ready`` answers 503
    ("warming") and requests score on one thread. Each step is logged with its time."""
    started = time.perf_counter()
    models = [s.model for s in (registry.current(n) for n in registry.names()) if s is not None]
    try:
        warm_all(models, parallel=scoring_threads() > 1)
    except Exception as exc:  # a model whose warm-up fails: /ready says so, with the reason
        log.exception("the warm-up failed")
        registry.failed.setdefault(registry.default_model, f"warm-up failed: {type(exc).__name__}: {exc}")
        registry.publish_self()
        return
    registry.parallel_warm = True
    registry.all_warm = True
    registry.publish_self()
    log.info("every kernel warm (scoring, explanations, evaluation and fusion kernels warm) in %.1f s",
             time.perf_counter() - started)


async def _follow_reloads(registry: ModelRegistry, period: float) -> None:
    """Every ``period`` seconds, one ``stat`` of the pins file on the event loop; a thread hop (to
    read it and load what it pins: never on the event loop) only when it changed. A hop a second
    in each worker would be a thread taking the GIL from a request being answered inline."""
    while True:
        await asyncio.sleep(period)
        if registry.state_changed():
            await anyio.to_thread.run_sync(registry.follow_state)


@contextlib.asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    settings: Settings = app.state.settings
    log.info("scoring runtime: %s", configure_runtime(
        scoring_threads=settings.scoring_thread_count(), parallel_min_documents=settings.parallel_floor(),
        blas_threads=settings.blas_threads))
    registry = ModelRegistry(settings.models_dir, settings.default_model,
                             max_cached_versions=settings.max_cached_versions, state_dir=settings.state_dir,
                             max_artifact_bytes=settings.max_artifact_bytes)
    app.state.registry = registry
    # the thread hops' limiters (tunemix.service.deps), made here on the serving loop (an anyio limiter must
    # not be shared by two event loops), once per application
    app.state.python_lanes = anyio.CapacityLimiter(PYTHON_LANES)
    app.state.scoring_slots = anyio.CapacityLimiter(settings.scoring_concurrency())
    app.state.explain_lane = explain_lane(settings.explain_concurrency)  # its own threads, shut down below
    app.state.large_lane = large_lane(settings.large_concurrency, settings.large_nice, settings.large_idle)  # the same
    app.state.scoring_requests = 0  # requests scoring or waiting to (tunemix.service.lanes.scoring)
    metrics: Metrics = app.state.metrics
    metrics.served = registry.served_by_worker

    def load() -> None:
        started = time.perf_counter()
        try:
            registry.load_initial(settings.preload)
        except Exception as exc:  # whatever it is, /ready reports it (status "failed")
            log.exception("the start-up load failed")
            registry.failed.setdefault(settings.default_model, f"{type(exc).__name__}: {exc}")
            registry.publish_self()
            return
        registry.warm = True
        log.info("ready in %.1f s: %s", time.perf_counter() - started,
                 ", ".join(f"{n} {registry.current(n).version}"  # type: ignore[union-attr]
                           for n in registry.names()) or "no model")

    def start_up() -> None:
        load()
        warm_in_background(registry)

    if await anyio.to_thread.run_sync(registry.others_serve_default):
        # a worker started after the others (a restart after a crash): it takes no connection before it
        # serves the pinned default model too, while the others answer every request meanwhile
        await anyio.to_thread.run_sync(load)
        tasks = [asyncio.create_task(anyio.to_thread.run_sync(warm_in_background, registry))]
    else:  # the service's start: /health answers from the first moment, /ready once every worker serves
        tasks = [asyncio.create_task(anyio.to_thread.run_sync(start_up))]
    if settings.state_dir is not None:
        tasks.append(asyncio.create_task(_follow_reloads(registry, settings.state_poll_s)))
    try:
        yield
    finally:
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        app.state.explain_lane.shutdown(wait=False, cancel_futures=True)
        app.state.large_lane.shutdown(wait=False, cancel_futures=True)


def create_app(settings: Settings | None = None) -> FastAPI:
    """A new application (tests pass their own ``Settings``)."""
    settings = settings or get_settings()
    # each uvicorn worker process imports this module afresh: without a handler of its own the
    # service's lines (model loads, warm-up, readiness, reloads) would not reach the log
    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # Swagger UI and ReDoc from packaged assets (fastapi-offline): the docs pages work offline
    app = FastAPIOffline(title="tunemix", version=__version__, description=DESCRIPTION, lifespan=lifespan)
    app.state.settings = settings
    metrics = Metrics()
    app.state.metrics = metrics

    @app.exception_handler(ServiceError)
    async def service_error(request: Request, exc: ServiceError) -> JSONResponse:
        metrics.count_error(exc.kind)
        body: dict[str, Any] = {"detail": exc.message}
        if exc.errors:
            body["errors"] = exc.errors
        headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else exc.headers
        return JSONResponse(body, status_code=exc.status, headers=headers)

    @app.exception_handler(DeadlineExceeded)
    async def past_deadline(request: Request, exc: DeadlineExceeded) -> JSONResponse:
        return deadline_answer(exc, metrics)

    @app.exception_handler(BudgetExceeded)
    async def past_budget(request: Request, exc: BudgetExceeded) -> JSONResponse:
        return budget_answer(exc, metrics)

    @app.exception_handler(RequestValidationError)
    async def request_validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        metrics.count_error("invalid_input")
        errors = list(exc.errors())
        loc_names = {"query": "query parameter", "header": "header", "path": "path parameter"}
        first = errors[0].get("loc", ()) if errors else ()
        prefix = loc_names.get(str(first[0]), "") if first else ""
        msg = validation_message([{**e, "loc": tuple(e.get("loc", ()))[1:]} for e in errors[:1]] + errors[1:])
        return JSONResponse({"detail": f"{prefix} {msg}".strip(), "errors": plain_errors(errors)}, status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        metrics.count_error(f"http_{exc.status_code}")
        return JSONResponse({"detail": exc.detail}, status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(Exception)
    async def crash(request: Request, exc: Exception) -> JSONResponse:
        metrics.count_error("internal")
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return JSONResponse({"detail": "internal error; the server log has the traceback"}, status_code=500)

    for module in (health, rank, evaluate, fuse, models):
        app.include_router(module.router)
    app.add_middleware(MetricsMiddleware, metrics=metrics)
    app.add_middleware(RankShortcut, fastapi_app=app, route=rank.ROUTE, metrics=metrics)
    app.add_middleware(AnswerBytes, fastapi_app=app)  # outermost of ours: an answer counted until written
    app.state.rank_shortcut = True
    install_openapi(app)
    return app


app = create_app()
