"""``python -m tunemix.service``: serve with uvicorn using ``Settings`` (``TUNEMIX_*`` environment variables;
``--host``, ``--port``, ``--workers``, ``--models-dir`` and ``--model`` set theirs, ``tunemix.service.serve_options``;
``--help`` lists them; any other argument is refused).

It starts ``TUNEMIX_WORKERS`` workers (default: one per usable core) and passes the count on to
them. With several it prepares what the processes share before uvicorn forks: a fresh
``PROMETHEUS_MULTIPROC_DIR`` (metrics summed over workers) and a state directory through which the
workers serve the same versions and follow one another's reloads (``tunemix.service.worker_state``); the parent
(``tunemix.service.supervisor``) restarts a worker that dies and clears what it leaves behind. Each worker may
score a long list on every core; lists shorter than ``TUNEMIX_PARALLEL_MIN_DOCUMENTS`` stay on one
thread (``tunemix.service.settings``).

Connections are served by ``tunemix.service.http_protocol``: a request's line and headers must arrive within
``TUNEMIX_HEADER_TIMEOUT_S`` (else 408) and stay within ``TUNEMIX_MAX_HEADER_BYTES`` (else 431).
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import uvicorn

from tunemix.service import worker_state
from tunemix.service.observability import bury_process
from tunemix.service.serve_options import parser, to_environment
from tunemix.service.settings import Settings
from tunemix.service.supervisor import serve_workers

log = logging.getLogger("tunemix.service")

#: seconds an idle kept-alive connection stays open (uvicorn's ``timeout_keep_alive``); a proxy
#: that keeps connections to the service (deploy/nginx/nginx.conf's upstream) must close its idle
#: ones sooner, else it may send a request on one the service is closing
KEEP_ALIVE_S = 5


def http_protocol(settings: Settings) -> tuple[str | type[asyncio.Protocol], dict[str, int]]:
    """(uvicorn's ``http`` setting, extra Config arguments): the bounded httptools protocol, or, without
    httptools, h11 with its head size limit (and no head deadline: a warning says so). The class itself,
    not its import string: uvicorn before 0.31 takes only its own protocols' names as strings."""
    if importlib.util.find_spec("httptools") is not None:
        from tunemix.service.http_protocol import BoundedHttpToolsProtocol

        return BoundedHttpToolsProtocol, {}
    log.warning("httptools is not installed (pip install 'tunemix[serve]'): h11 serves, with a %d-byte head limit "
                "answered 400 and no head deadline (TUNEMIX_HEADER_TIMEOUT_S is not applied)",
                settings.max_header_bytes)
    return "h11", {"h11_max_incomplete_event_size": settings.max_header_bytes}


def worker_exited(metrics_dir: Path, state_dir: Path) -> Callable[[int], None]:
    """What the supervisor does when a worker exits: its metrics bookkeeping and state file."""

    def bury(pid: int) -> None:
        log.info("worker %d exited: its metrics folded, its state file removed", pid)
        bury_process(metrics_dir, pid)
        worker_state.forget_worker(state_dir, pid)

    return bury


def main(argv: list[str] | None = None) -> None:
    """Serve; ``argv``: the options (default: the command line's)."""
    to_environment(parser().parse_args(argv))
    settings = Settings()
    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    tmp: str | None = None
    workers = settings.worker_processes()
    os.environ["TUNEMIX_WORKERS"] = str(workers)  # the workers' own Settings see the count
    if workers > 1:
        tmp = tempfile.mkdtemp(prefix="tunemix-")
        metrics_dir = os.path.join(tmp, "metrics")
        os.makedirs(metrics_dir)
        os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR", metrics_dir)
        if settings.state_dir is None:
            os.environ["TUNEMIX_STATE_DIR"] = os.path.join(tmp, "state")
    http, extra = http_protocol(settings)
    log.info("starting %d uvicorn worker(s)", workers)
    options: dict[str, Any] = dict(host=settings.host, port=settings.port, workers=workers,
                                   log_level=settings.log_level, access_log=settings.access_log,
                                   timeout_keep_alive=KEEP_ALIVE_S, http=http, **extra)
    try:
        if workers > 1:
            serve_workers(uvicorn.Config("tunemix.service.main:app", **options),
                          worker_exited(Path(os.environ["PROMETHEUS_MULTIPROC_DIR"]),
                                        Path(os.environ["TUNEMIX_STATE_DIR"])))
        else:
            uvicorn.run("tunemix.service.main:app", **options)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
