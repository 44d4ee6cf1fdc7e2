"""``python -m app``: serve with uvicorn using ``Settings`` (``TUNEMIX_*`` environment variables).

It starts ``TUNEMIX_WORKERS`` workers (default: one per usable core) and passes the count on to
them. With several it prepares what the processes share before uvicorn forks: a fresh
``PROMETHEUS_MULTIPROC_DIR`` (metrics summed over workers) and a state directory through which a
reload in one worker reaches the others. Each worker may score a long list on every core; lists
shorter than ``TUNEMIX_PARALLEL_MIN_DOCUMENTS`` stay on one thread (``app.settings``).
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile

import uvicorn

from app.settings import Settings


def main() -> None:
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
    logging.getLogger("app").info("starting %d uvicorn worker(s)", workers)
    try:
        uvicorn.run("app.main:app", host=settings.host, port=settings.port, workers=workers,
                    log_level=settings.log_level, access_log=settings.access_log, timeout_keep_alive=5)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
