"""``python -m app``: serve with uvicorn using ``Settings`` (``TUNEMIX_*`` environment variables).

With ``TUNEMIX_WORKERS`` > 1 it prepares what several processes share before uvicorn forks:
a fresh ``PROMETHEUS_MULTIPROC_DIR`` (metrics summed over workers), a state directory through
which a reload in one worker reaches the others, and ``TUNEMIX_SCORING_THREADS`` = cores /
workers unless set (so the workers' numba threads do not oversubscribe the cores).
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
    if settings.workers > 1:
        tmp = tempfile.mkdtemp(prefix="tunemix-")
        metrics_dir = os.path.join(tmp, "metrics")
        os.makedirs(metrics_dir)
        os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR", metrics_dir)
        if settings.state_dir is None:
            os.environ["TUNEMIX_STATE_DIR"] = os.path.join(tmp, "state")
        if settings.scoring_threads is None:
            cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
            os.environ["TUNEMIX_SCORING_THREADS"] = str(max(1, cores // settings.workers))
    try:
        uvicorn.run("app.main:app", host=settings.host, port=settings.port, workers=settings.workers,
                    log_level=settings.log_level, access_log=settings.access_log, timeout_keep_alive=5)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
