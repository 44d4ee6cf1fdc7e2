"""``python -m tunemix.service`` with two workers in a subprocess, for the tests of issue 37's reproductions.

Readiness is an event, not a guess: ``/ready`` answers 200 on ten fresh connections in a row
(each connection may land on either worker, so both serve), or the server exits (the test fails
with the end of its log)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.service.conftest import ROOT, free_port, stop_process


@dataclass
class TwoWorkers:
    url: str
    proc: subprocess.Popen[bytes]
    log: Path

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def worker_pids(self) -> list[int]:
        """The supervisor's live child processes (uvicorn's workers)."""
        out = subprocess.run(["pgrep", "-P", str(self.proc.pid)], capture_output=True, text=True).stdout
        pids = []
        for pid in out.split():
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes() if Path(f"/proc/{pid}").exists() else b""
            if b"resource_tracker" not in cmd and b"semaphore_tracker" not in cmd:
                pids.append(int(pid))
        return sorted(pids)

    def stop(self) -> None:
        stop_process(self.proc, timeout=20)


def start_two_workers(models_dir: Path, base: Path, *, wait: bool = True, **env_extra: str) -> TwoWorkers:
    port = free_port()
    env = dict(os.environ, TUNEMIX_MODELS_DIR=str(models_dir), TUNEMIX_DEFAULT_MODEL="default",
               TUNEMIX_PORT=str(port), TUNEMIX_HOST="127.0.0.1", TUNEMIX_WORKERS="2",
               TUNEMIX_LOG_LEVEL="info", **env_extra)
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    log_path = base / f"server-{port}.log"
    log = log_path.open("wb")
    proc = subprocess.Popen([sys.executable, "-m", "tunemix.service"], cwd=ROOT, env=env, stdout=log,
                            stderr=subprocess.STDOUT)
    server = TwoWorkers(url=f"http://127.0.0.1:{port}", proc=proc, log=log_path)
    if wait:
        wait_both_ready(server)
    return server


def wait_both_ready(server: TwoWorkers) -> None:
    in_a_row = 0
    while in_a_row < 10:
        if server.proc.poll() is not None:
            raise AssertionError(f"the server exited: {server.log_text()[-3000:]}")
        try:
            ok = httpx.get(server.url + "/ready", timeout=None, headers={"Connection": "close"}).status_code == 200
        except httpx.TransportError:
            ok = False
        in_a_row = in_a_row + 1 if ok else 0
        time.sleep(0.05 if ok else 0.2)
