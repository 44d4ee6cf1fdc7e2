"""Prometheus metrics and logging set-up.

Metrics (prefix ``tunemix_``): ``http_requests_total{endpoint,method,status}``,
``http_request_duration_seconds{endpoint}`` (histogram), ``documents_scored_total{model}``,
``errors_total{kind}`` and ``model_info{name,version}``. With several uvicorn workers the
client's multiprocess mode aggregates them: ``python -m app`` sets ``PROMETHEUS_MULTIPROC_DIR``
before any worker imports prometheus-client. prometheus-client comes with the ``serve`` extra;
without it the service still runs and ``/metrics`` answers 501.
"""

from __future__ import annotations

import os
import time
from typing import Any

try:
    import prometheus_client as prom
    from prometheus_client import multiprocess
except ImportError:  # pragma: no cover - the serve extra is not installed
    prom = None  # type: ignore[assignment]
    multiprocess = None  # type: ignore[assignment]

_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0)


class Metrics:
    """The service's metrics (no-ops without prometheus-client)."""

    def __init__(self) -> None:
        self.enabled = prom is not None
        if prom is None:
            return
        self.multiprocess = bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))
        self.registry = prom.CollectorRegistry(auto_describe=True)
        kw: dict[str, Any] = {"registry": None if self.multiprocess else self.registry}
        self.requests = prom.Counter("tunemix_http_requests_total", "HTTP requests by endpoint, method and status",
                                     ["endpoint", "method", "status"], **kw)
        self.latency = prom.Histogram("tunemix_http_request_duration_seconds", "Request latency by endpoint",
                                      ["endpoint"], buckets=_BUCKETS, **kw)
        self.documents = prom.Counter("tunemix_documents_scored_total", "Documents scored, by model", ["model"], **kw)
        self.errors = prom.Counter("tunemix_errors_total", "Error responses by kind", ["kind"], **kw)
        gauge_kw = dict(kw, multiprocess_mode="liveall") if self.multiprocess else kw
        self.model_info = prom.Gauge("tunemix_model_info", "1 for each model version this process serves",
                                     ["name", "version"], **gauge_kw)
        if self.multiprocess:
            multiprocess.MultiProcessCollector(self.registry)

    def observe_request(self, endpoint: str, method: str, status: int, seconds: float) -> None:
        if self.enabled:
            self.requests.labels(endpoint, method, str(status)).inc()
            self.latency.labels(endpoint).observe(seconds)

    def count_documents(self, model: str, n: int) -> None:
        if self.enabled:
            self.documents.labels(model).inc(n)

    def count_error(self, kind: str) -> None:
        if self.enabled:
            self.errors.labels(kind).inc()

    def set_model(self, name: str, version: str, previous: str | None) -> None:
        if not self.enabled:
            return
        if previous is not None and previous != version:
            try:
                self.model_info.remove(name, previous)
            except KeyError:
                pass
        self.model_info.labels(name, version).set(1)

    def exposition(self) -> tuple[bytes, str]:
        """(body, content type) of ``GET /metrics``."""
        if prom is None:
            raise RuntimeError("prometheus-client is not installed (pip install 'tunemix[serve]')")
        return prom.generate_latest(self.registry), prom.CONTENT_TYPE_LATEST


class MetricsMiddleware:
    """Pure ASGI middleware: counts and times every HTTP request by its route template."""

    def __init__(self, app: Any, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500

        async def send_wrapper(message: Any) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            route = scope.get("route")
            endpoint = getattr(route, "path", None) or "unmatched"
            self.metrics.observe_request(endpoint, scope.get("method", ""), status, time.perf_counter() - start)
