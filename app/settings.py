"""Service settings: one ``Settings`` read from ``TUNEMIX_*`` environment variables (or ``.env``).

Every default lives here. Example::

    TUNEMIX_MODELS_DIR=models TUNEMIX_DEFAULT_MODEL=default TUNEMIX_WORKERS=2 python -m app
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """Configuration of one service instance (all workers share it through the environment)."""

    model_config = SettingsConfigDict(env_prefix="TUNEMIX_", env_file=".env", extra="ignore")

    models_dir: Path = Field(Path("models"), description="directory holding <name>/vN model versions")
    default_model: str = Field("default", description="model served when a request names none")
    preload: list[str] = Field(default_factory=list,
                               description="further model names loaded at start-up (JSON list)")
    host: str = "0.0.0.0"
    port: int = Field(8000, ge=1, le=65535)
    workers: int = Field(1, ge=1, le=64, description="uvicorn worker processes")
    scoring_threads: int | None = Field(
        None, ge=1, le=256, description="numba threads per worker for scoring (default: all cores / workers)")
    blas_threads: int = Field(1, ge=1, le=256, description="threads of numpy's OpenBLAS (its idle threads spin "
                                                         "on the cores numba's scoring threads need)")
    concurrency: int | None = Field(
        None, ge=1, le=256, description="requests one worker scores at once (default: cores / workers)")
    inline_budget_ms: float = Field(
        5.0, ge=0, description="a common /rank request estimated to take at most this long (reading + scoring, "
                               "from the model's cost measured at load) is answered on the event loop, "
                               "without thread hops (app/fastlane.py); larger ones go to worker threads. "
                               "0: every request goes to worker threads")
    reload_token: str | None = Field(None, description="bearer token of POST /models/reload; unset disables it")
    log_level: Literal["critical", "error", "warning", "info", "debug"] = "info"
    access_log: bool = Field(False, description="one log line per request (off by default: /metrics counts "
                                                "requests, and a line costs the event loop about 0.1 ms)")
    max_documents: int = Field(100_000, ge=1, description="documents per request (more: HTTP 413)")
    max_queries: int = Field(10_000, ge=1, description="queries per request (more: HTTP 413)")
    max_body_bytes: int = Field(64 * 1024 * 1024, ge=1024, description="request body size (more: HTTP 413)")
    max_cached_versions: int = Field(4, ge=1, description="older versions kept loaded for explicit requests")
    state_dir: Path | None = Field(None, description="shared directory through which workers follow reloads "
                                                      "(set by `python -m app` when workers > 1)")
    state_poll_s: float = Field(1.0, gt=0, description="how often a worker checks state_dir for reloads")

    def scoring_concurrency(self) -> int:
        """Requests a worker scores side by side: ``concurrency``, else its share of the cores."""
        if self.concurrency is not None:
            return self.concurrency
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        return max(1, cores // self.workers)


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide settings (read once)."""
    return Settings()
