"""Fixtures of the service tests: tiny models trained once per session, an app serving them, and
a real uvicorn server in a subprocess for what only a real server can show (concurrency).

Models (all on synthetic data, a few seconds in all)::

    store/default/v1   5 features, views raw + raw+std (a query-wise view: scores depend on the list)
    store/default/v2   5 features, another seed (a different model, same feature count)
    store/wide/v1      7 features (a model with another feature count)
    store/small/v1     3 features, the feature count of the OpenAPI examples (the fuzz server's)

``served_dir`` holds a copy of all three; the session ``client`` serves it (default: default v2,
no reload token). Tests that change what is on disk build their own directory with
``copy_version``.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from fastapi.testclient import TestClient

from tests.conftest import tiny_config
from tunemix.core.scoring.ensemble_model import EnsembleModel, load_model
from tunemix.service.main import create_app
from tunemix.service.registry import ModelRegistry
from tunemix.service.settings import Settings

ROOT = Path(__file__).resolve().parents[2]

# Every request has a deadline (tunemix.service.deadlines, 10 s by default). With an empty numba cache the first
# request of a kind compiles its kernels first (tens of seconds on a busy machine): the suite's
# servers get a deadline that leaves room for that; the tests of the deadline ask for short ones
# (?timeout_s=), and one test checks the documented default.
os.environ.setdefault("TUNEMIX_REQUEST_TIMEOUT_S", "600")
os.environ.setdefault("TUNEMIX_MAX_REQUEST_TIMEOUT_S", "600")
N_FEATURES = 5
WIDE_FEATURES = 7

#: the models' configuration: the tiny one (tests/conftest.py) on the query-wise view too, and every
#: member on it (whichever the mix keeps, scores depend on the list)
CONFIG = {"members.views": ["raw", "raw+std"], "members.adaboost.0.views": ["raw+std"]}


def _train(work: Path, models_dir: Path, name: str, seed: int, features: int) -> Path:
    from tunemix.train.config import load_config
    from tunemix.train.train import train

    cfg_path = tiny_config(work, {**CONFIG, "name": name, "seed": seed, "data.synthetic.features": features},
                           f"{name}-{seed}.toml")
    cfg = load_config(cfg_path, {"run.models_dir": str(models_dir)})
    return Path(train(cfg, progress=False).path)


@dataclass(frozen=True)
class Store:
    """Trained versions (read-only: copy them, never modify them)."""

    default_v1: Path
    default_v2: Path
    wide_v1: Path
    small_v1: Path

    def model(self, path: Path) -> EnsembleModel:
        return load_model(path)[0]


@pytest.fixture(scope="session")
def store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    work = tmp_path_factory.mktemp("train")
    models = work / "models"
    v1 = _train(work, models, "default", seed=1, features=N_FEATURES)
    v2 = _train(work, models, "default", seed=7, features=N_FEATURES)
    wide = _train(work, models, "wide", seed=1, features=WIDE_FEATURES)
    small = _train(work, models, "small", seed=2, features=3)
    assert (v1.name, v2.name, wide.name, small.name) == ("v1", "v2", "v1", "v1")
    return Store(default_v1=v1, default_v2=v2, wide_v1=wide, small_v1=small)


def copy_version(src: Path, models_dir: Path, name: str, version: str) -> Path:
    """Copy a trained version directory to ``models_dir/name/version``."""
    dst = models_dir / name / version
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(src, dst)
    return dst


@pytest.fixture(scope="session")
def served_dir(store: Store, tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("served") / "models"
    copy_version(store.default_v1, d, "default", "v1")
    copy_version(store.default_v2, d, "default", "v2")
    copy_version(store.wide_v1, d, "wide", "v1")
    return d


@pytest.fixture(scope="module")
def registry(served_dir: Path) -> ModelRegistry:
    """A registry of ``served_dir`` with its default model loaded, in this process (no server)."""
    reg = ModelRegistry(served_dir, "default")
    reg.load_initial([])
    return reg


def wait_ready(client: TestClient | httpx.Client) -> dict[str, Any]:
    """Poll ``/ready`` until it answers 200 (the body of that answer) or says the start-up failed.
    No deadline: a slow machine only makes it wait longer; the suite's timeout is the only limit."""
    while True:
        r = client.get("/ready")
        if r.status_code == 200:
            body: dict[str, Any] = r.json()
            return body
        if r.json().get("status") == "failed":
            raise AssertionError(f"the service could not start: {r.text}")
        time.sleep(0.05)


@pytest.fixture(scope="session")
def client(served_dir: Path) -> Iterator[TestClient]:
    """The app serving ``served_dir`` (default v2), lifespan run, ready."""
    app = create_app(Settings(models_dir=served_dir, default_model="default", reload_token=None))
    with TestClient(app) as c:
        wait_ready(c)
        yield c


def ready_client(settings: Settings) -> TestClient:
    """A TestClient for a new app (use as a context manager, then ``wait_ready``)."""
    return TestClient(create_app(settings))


def rank_body(features: np.ndarray, sizes: list[int], **extra: Any) -> dict[str, Any]:
    """A columnar /rank body: queries q0, q1... with ids d0, d1... (per query)."""
    queries, lo = [], 0
    for q, n in enumerate(sizes):
        rows = features[lo:lo + n]
        queries.append({"qid": f"q{q}", "ids": [f"d{j}" for j in range(n)], "features": rows.tolist()})
        lo += n
    return {"queries": queries, **extra}


def offsets_of(sizes: list[int]) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)


# ---------------------------------------------------------------------------- a real server
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class LiveServer:
    url: str
    port: int
    models_dir: Path
    token: str
    proc: subprocess.Popen[bytes]


def start_server(models_dir: Path, token: str, log_path: Path, **env_extra: str) -> LiveServer:
    """``uvicorn tunemix.service.main:app`` in a subprocess (settings from TUNEMIX_* variables), ready."""
    port = free_port()
    env = dict(os.environ)
    env.update({"TUNEMIX_MODELS_DIR": str(models_dir), "TUNEMIX_DEFAULT_MODEL": "default",
                "TUNEMIX_RELOAD_TOKEN": token, "TUNEMIX_LOG_LEVEL": "warning", **env_extra})
    log = log_path.open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "tunemix.service.main:app", "--host", "127.0.0.1", "--port", str(port),
         "--log-level", "warning"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
    )
    server = LiveServer(url=f"http://127.0.0.1:{port}", port=port, models_dir=models_dir, token=token, proc=proc)
    with httpx.Client(base_url=server.url, timeout=None) as c:
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"uvicorn exited with {proc.returncode}: {log_path.read_text()[-2000:]}")
            try:
                if c.get("/ready").status_code == 200:
                    return server
            except httpx.TransportError:
                pass
            time.sleep(0.1)


def stop_process(proc: subprocess.Popen, timeout: float = 15) -> None:
    """Terminate a server process; kill it if it has not exited within ``timeout`` seconds."""
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=timeout)


def stop_server(server: LiveServer) -> None:
    stop_process(server.proc)


@pytest.fixture(scope="module")
def live_server(store: Store, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """A real server on its own copy of default v1 (tests may add versions and reload)."""
    base = tmp_path_factory.mktemp("live")
    models = base / "models"
    copy_version(store.default_v1, models, "default", "v1")
    server = start_server(models, token="live-token", log_path=base / "uvicorn.log")
    try:
        yield server
    finally:
        stop_server(server)


# ---------------------------------------------------------------------------- python -m tunemix.service, two workers
def worker_pids(pid: int) -> list[int]:
    """The uvicorn worker processes under ``python -m tunemix.service`` (its children other than helpers)."""
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    out = []
    for child in map(int, children):
        cmd = Path(f"/proc/{child}/cmdline").read_bytes()
        if b"resource_tracker" not in cmd and b"semaphore_tracker" not in cmd:
            out.append(child)
    return sorted(out)


def vm(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no {key} for {pid}")


@pytest.fixture(scope="module")
def app_two(store: Store, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """``python -m tunemix.service`` with two workers and the default bounds, both workers ready."""
    base = tmp_path_factory.mktemp("cost")
    copy_version(store.default_v1, base / "models", "default", "v1")
    port = free_port()
    env = dict(os.environ, TUNEMIX_MODELS_DIR=str(base / "models"), TUNEMIX_DEFAULT_MODEL="default",
               TUNEMIX_PORT=str(port), TUNEMIX_HOST="127.0.0.1", TUNEMIX_WORKERS="2", TUNEMIX_LOG_LEVEL="warning")
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    for key in ("TUNEMIX_MAX_BODY_BYTES", "TUNEMIX_MAX_INFLIGHT_BYTES"):
        env.pop(key, None)
    log = (base / "server.log").open("wb")
    proc = subprocess.Popen([sys.executable, "-m", "tunemix.service"], cwd=ROOT, env=env, stdout=log,
                            stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        in_a_row = 0
        while in_a_row < 10:  # ten fresh connections ready in a row: both workers loaded
            if proc.poll() is not None:
                raise AssertionError(f"not ready: {(base / 'server.log').read_text()[-2000:]}")
            try:
                ok = httpx.get(url + "/ready", timeout=None, headers={"Connection": "close"}).status_code == 200
            except httpx.TransportError:
                ok = False
            in_a_row = in_a_row + 1 if ok else 0
            time.sleep(0.05 if ok else 0.2)
        yield url, proc
    finally:
        stop_process(proc, timeout=20)


class HealthWatch:
    """``/health`` polled back to back on its own connection while a block runs; ``worst``: the
    slowest answer in seconds, ``times``: every answer's (each poll waits for its answer: the event)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.worst = 0.0
        self.times: list[float] = []
        self.failed: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=None) as c:
            while not self._stop.is_set():
                t0 = time.perf_counter()
                try:
                    if c.get("/health").status_code != 200:
                        self.failed = "status"
                except httpx.TransportError as exc:
                    self.failed = repr(exc)
                    return
                self.times.append(time.perf_counter() - t0)
                self.worst = max(self.worst, self.times[-1])

    def __enter__(self) -> HealthWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
