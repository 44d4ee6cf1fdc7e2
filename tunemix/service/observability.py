"""Prometheus metrics and logging set-up.

Metrics (prefix ``tunemix_``): ``http_requests_total{endpoint,method,status}``,
``http_request_duration_seconds{endpoint}`` (histogram, from the handler's start to the answer's
end), ``http_request_queue_seconds{endpoint}`` (histogram, from the request's arrival, the first
byte of its head as the protocol read it, to its handler's start: the time a request waited in
the worker before any of its work; ``python -m tunemix.service`` only, whose protocol stamps the
arrival, ``ARRIVAL``), ``documents_scored_total{model}``,
``errors_total{kind}`` and ``model_info{name,version}`` (1 per model version a worker serves; with
several workers one series per worker, labelled ``pid``). With several uvicorn workers the client's
multiprocess mode sums the counters and histograms over the workers' files in
``PROMETHEUS_MULTIPROC_DIR`` (``python -m tunemix.service`` sets it before any worker imports prometheus-client).
``model_info`` is not kept in those files: each scrape reads what every running worker serves from the
state directory (``tunemix.service.worker_state``), so it follows reloads, restarts and deaths exactly.

When a worker exits the supervisor (``tunemix.service.supervisor``) calls ``bury_process``: prometheus-client's
``mark_process_dead``, then the dead worker's counter and histogram files are added into one file per
type (``counter_exited.db``, ...) and removed: the totals stay, the files do not pile up, and a scrape
does not read one file per worker that ever ran. Scrapes hold a shared lock and the burial an exclusive
one, so no scrape sees a worker's counts twice or not at all.

prometheus-client comes with the ``serve`` extra; without it the service still runs and ``/metrics``
answers 501.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

try:
    import prometheus_client as prom
    from prometheus_client import multiprocess
    from prometheus_client.core import GaugeMetricFamily, Metric
    from prometheus_client.mmap_dict import MmapedDict
except ImportError:  # pragma: no cover - the serve extra is not installed
    prom = None  # type: ignore[assignment]
    multiprocess = None  # type: ignore[assignment]

_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0)
#: the metric kinds whose dead workers' files are added up into one (gauges have none here)
_FOLDED_KINDS = ("counter", "histogram", "summary")
_LOCK_FILE = ".scrape.lock"  # not *.db: the collector reads only those

#: the scope's extension holding the request's arrival, the ``time.perf_counter()`` of the first byte of
#: its head (``tunemix.service.http_protocol``)
ARRIVAL = "tunemix-arrival"

#: what every running worker serves, {pid: {name: version}} (``ModelRegistry.served_by_worker``)
ServedSource = Callable[[], dict[int, dict[str, str]]]


class Metrics:
    """The service's metrics (no-ops without prometheus-client)."""

    def __init__(self) -> None:
        self.enabled = prom is not None
        #: set by the lifespan once the registry exists; model_info is empty until then
        self.served: ServedSource | None = None
        #: each label set's children, as ``labels`` returns them (as many as the label sets seen)
        self._request_children: dict[tuple[str, str, int], tuple[Any, Any, Any]] = {}
        self._document_children: dict[str, Any] = {}
        #: HTTP requests of this worker in flight (changed on the event loop only): the handler has
        #: started and not yet answered (``MetricsMiddleware``, ``tunemix.service.rank_dispatch``)
        self.in_flight = 0
        if prom is None:
            return
        multiproc_dir = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
        self.multiprocess_dir = Path(multiproc_dir) if multiproc_dir else None
        self.registry = prom.CollectorRegistry(auto_describe=True)
        kw: dict[str, Any] = {"registry": None if self.multiprocess_dir else self.registry}
        self.requests = prom.Counter("tunemix_http_requests_total", "HTTP requests by endpoint, method and status",
                                     ["endpoint", "method", "status"], **kw)
        self.latency = prom.Histogram("tunemix_http_request_duration_seconds", "Request latency by endpoint",
                                      ["endpoint"], buckets=_BUCKETS, **kw)
        self.queued = prom.Histogram("tunemix_http_request_queue_seconds",
                                     "Seconds from the request's arrival (the first byte of its head) to its "
                                     "handler's start, by endpoint", ["endpoint"], buckets=_BUCKETS, **kw)
        self.documents = prom.Counter("tunemix_documents_scored_total", "Documents scored, by model", ["model"], **kw)
        self.errors = prom.Counter("tunemix_errors_total", "Error responses by kind", ["kind"], **kw)
        if self.multiprocess_dir:
            multiprocess.MultiProcessCollector(self.registry)
        self.registry.register(_ModelInfo(self))

    def observe_request(self, endpoint: str, method: str, status: int, seconds: float,
                        queued: float | None = None) -> None:
        """Count a request and its latency; ``queued``: the seconds from its arrival to its handler's
        start (None: unknown, the server stamps no arrival)."""
        if self.enabled:
            key = (endpoint, method, status)
            children = self._request_children.get(key)
            if children is None:  # the labels' children, found once (``labels`` checks and locks each call)
                children = self._request_children[key] = (self.requests.labels(endpoint, method, str(status)),
                                                          self.latency.labels(endpoint), self.queued.labels(endpoint))
            children[0].inc()
            children[1].observe(seconds)
            if queued is not None:
                children[2].observe(max(queued, 0.0))

    def busy(self) -> bool:
        """Whether other requests than the asking one are in flight in this worker (a deadline's
        probe, read from a worker thread: one int read)."""
        return self.in_flight > 1

    def count_documents(self, model: str, n: int) -> None:
        if self.enabled:
            child = self._document_children.get(model)
            if child is None:
                child = self._document_children[model] = self.documents.labels(model)
            child.inc(n)

    def count_error(self, kind: str) -> None:
        if self.enabled:
            self.errors.labels(kind).inc()

    def exposition(self) -> tuple[bytes, str]:
        """(body, content type) of ``GET /metrics``."""
        if prom is None:
            raise RuntimeError("prometheus-client is not installed (pip install 'tunemix[serve]')")
        with _scrape_lock(self.multiprocess_dir, fcntl.LOCK_SH):
            return prom.generate_latest(self.registry), prom.CONTENT_TYPE_LATEST


class _ModelInfo:
    """``tunemix_model_info``: 1 for each (worker, name, version) served, read at each scrape."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def describe(self) -> list[Metric]:
        return []  # its labels depend on the worker count: not checked at registration

    def collect(self) -> Iterator[Metric]:
        served = self.metrics.served() if self.metrics.served is not None else {}
        several = self.metrics.multiprocess_dir is not None
        family = GaugeMetricFamily("tunemix_model_info", "1 for each model version a worker serves",
                                   labels=["name", "version", "pid"] if several else ["name", "version"])
        for pid, versions in sorted(served.items()):
            for name, version in sorted(versions.items()):
                family.add_metric([name, version, str(pid)] if several else [name, version], 1.0)
        yield family


@contextlib.contextmanager
def _scrape_lock(metrics_dir: Path | None, mode: int) -> Iterator[None]:
    """``mode`` (shared for a scrape, exclusive for a burial) on the lock file of ``metrics_dir``."""
    if metrics_dir is None:
        yield
        return
    with open(metrics_dir / _LOCK_FILE, "a") as fh:
        fcntl.flock(fh, mode)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def bury_process(metrics_dir: Path, pid: int) -> None:
    """Bookkeeping for a worker ``pid`` that exited: ``mark_process_dead`` (its live gauges go), then
    its counter, histogram and summary values are added into ``<kind>_exited.db`` and its files removed."""
    if prom is None:  # pragma: no cover - the serve extra is not installed
        return
    with _scrape_lock(metrics_dir, fcntl.LOCK_EX):
        multiprocess.mark_process_dead(pid, str(metrics_dir))
        for kind in _FOLDED_KINDS:
            src = metrics_dir / f"{kind}_{pid}.db"
            if not src.exists():
                continue
            into = MmapedDict(str(metrics_dir / f"{kind}_exited.db"))
            try:
                for key, value, timestamp, _ in MmapedDict.read_all_values_from_file(str(src)):
                    total, _ = into.read_value(key)
                    into.write_value(key, total + value, timestamp)
            finally:
                into.close()
            src.unlink()


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
        sender = StatusRecorder(send)
        self.metrics.in_flight += 1
        try:
            await self.app(scope, receive, sender)
        finally:
            self.metrics.in_flight -= 1
            route = scope.get("route")
            endpoint = getattr(route, "path", None) or "unmatched"
            self.metrics.observe_request(endpoint, scope.get("method", ""), sender.status,
                                         time.perf_counter() - start, queued_since(scope, start))


def queued_since(scope: Any, start: float) -> float | None:
    """Seconds from the request's arrival (``ARRIVAL``) to ``start``; None without an arrival stamp."""
    arrival = (scope.get("extensions") or {}).get(ARRIVAL)
    return start - arrival if isinstance(arrival, float) else None


class StatusRecorder:
    """An ASGI ``send`` that passes every message on and keeps the response's status (500 until
    ``http.response.start`` is sent: a request that fails before answering counts as a 500)."""

    __slots__ = ("send", "status")

    def __init__(self, send: Any) -> None:
        self.send = send
        self.status = 500

    async def __call__(self, message: Any) -> None:
        if message["type"] == "http.response.start":
            self.status = int(message["status"])
        await self.send(message)
