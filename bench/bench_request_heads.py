"""Slow and huge request heads against the service (``tunemix.service.http_protocol``), with uvicorn's
own protocol as the peer.

    python -m bench.bench_request_heads [--models-dir DIR --model NAME] [--huge-mib 64]

Two servers on the same model, two workers each: uvicorn's own httptools protocol
(``python -m uvicorn tunemix.service.main:app --workers 2 --http httptools``) and
``python -m tunemix.service`` (head deadline ``TUNEMIX_HEADER_TIMEOUT_S``, default 10 s; head limit
``TUNEMIX_MAX_HEADER_BYTES``, default 32 KiB). Against each:

- slow heads: 100 connections send half a request head, then one more header byte every 5 s, and 20
  send nothing; after 20 s (the deadline plus 10 s) how many are still open, when the others were
  closed and what they were answered; ``/health`` is asked throughout on fresh connections (its
  slowest answer);
- a huge head: one request with a ``--huge-mib`` MiB header: its answer, the seconds to it and the
  workers' CPU-seconds (``/proc/<pid>/stat``) and peak RSS (``VmHWM``) after it.

Without ``--models-dir`` the demo model is trained first (``tunemix demo``). JSON:
bench/results/request_heads.json.
"""

from __future__ import annotations

import argparse
import os
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from bench.common import ROOT, machine_probe_ms, write_result

SLOW, SILENT, DRIP_S, OBSERVE_S = 100, 20, 5.0, 20.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(kind: str, models_dir: Path, model: str, port: int) -> subprocess.Popen[bytes]:
    env = dict(os.environ, TUNEMIX_MODELS_DIR=str(models_dir), TUNEMIX_DEFAULT_MODEL=model, TUNEMIX_PORT=str(port),
               TUNEMIX_HOST="127.0.0.1", TUNEMIX_WORKERS="2", TUNEMIX_LOG_LEVEL="warning")
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    cmd = [sys.executable, "-m", "tunemix.service"] if kind == "python -m tunemix.service" else [
        sys.executable, "-m", "uvicorn", "tunemix.service.main:app", "--workers", "2", "--http", "httptools", "--host",
        "127.0.0.1", "--port", str(port), "--log-level", "warning"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"{kind} exited with {proc.returncode}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/ready", timeout=None).status_code == 200:
                return proc
        except httpx.TransportError:
            pass
        time.sleep(0.1)


def workers_of(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat[stat.rfind(")") + 2:].split()[1]) == pid:
                out.append(int(entry.name))
    return out


def cpu_s(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / os.sysconf("SC_CLK_TCK")


def peak_rss_mib(pids: list[int]) -> float:
    peak = 0
    for pid in pids:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                peak = max(peak, int(line.split()[1]))
    return round(peak / 1024, 1)


class HealthWatch(threading.Thread):
    """/health on fresh connections, again and again; the slowest answer."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.port, self.slowest, self.failures, self.stop = port, 0.0, 0, threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            t0 = time.perf_counter()
            try:
                httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=30.0)
            except httpx.HTTPError:
                self.failures += 1
            self.slowest = max(self.slowest, time.perf_counter() - t0)
            time.sleep(0.05)


def slow_heads(port: int) -> dict[str, Any]:
    watch = HealthWatch(port)
    watch.start()
    t0 = time.monotonic()
    dripping = [socket.create_connection(("127.0.0.1", port)) for _ in range(SLOW)]
    silent = [socket.create_connection(("127.0.0.1", port)) for _ in range(SILENT)]
    for s in dripping:
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: ")
    closed: dict[socket.socket, float] = {}
    first_line: dict[socket.socket, bytes] = {}
    next_drip = t0 + DRIP_S
    while time.monotonic() - t0 < OBSERVE_S and len(closed) < SLOW + SILENT:
        if time.monotonic() >= next_drip:
            next_drip += DRIP_S
            for s in dripping:
                if s not in closed:
                    try:
                        s.send(b"a")
                    except OSError:
                        closed[s] = time.monotonic() - t0
        readable, _, _ = select.select([s for s in dripping + silent if s not in closed], [], [], 0.1)
        for s in readable:
            try:
                chunk = s.recv(65536)
            except OSError:
                chunk = b""
            first_line.setdefault(s, chunk.split(b"\r\n", 1)[0])
            if not chunk:
                closed[s] = time.monotonic() - t0
    watch.stop.set()
    watch.join()
    for s in dripping + silent:
        s.close()
    answers: dict[str, int] = {}
    for s in dripping + silent:
        if s in closed:
            key = first_line.get(s, b"").decode() or "closed without an answer"
            answers[key] = answers.get(key, 0) + 1
    times = sorted(closed.values())
    return {"connections": SLOW + SILENT, "open_after_s": OBSERVE_S, "still_open": SLOW + SILENT - len(closed),
            "closed_after_s": {"min": round(times[0], 2), "max": round(times[-1], 2)} if times else None,
            "answers": answers, "health_slowest_s": round(watch.slowest, 3), "health_failures": watch.failures}


def huge_head(port: int, workers: list[int], mib: int) -> dict[str, Any]:
    cpu0 = cpu_s(workers)
    t0 = time.perf_counter()
    s = socket.create_connection(("127.0.0.1", port))
    sent, error = 0, None
    block = b"a" * (1 << 20)
    try:
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Huge: ")
        for _ in range(mib):
            s.sendall(block)
            sent += len(block)
        s.sendall(b"\r\n\r\n")
    except OSError as exc:
        error = type(exc).__name__
    data = b""
    try:
        while chunk := s.recv(65536):
            data += chunk
    except OSError:
        pass
    s.close()
    return {"header_mib": mib, "answer": data.split(b"\r\n", 1)[0].decode() or None,
            "seconds": round(time.perf_counter() - t0, 2), "client_sent_mib": round(sent / (1 << 20), 1),
            "client_send_error": error, "workers_cpu_s": round(cpu_s(workers) - cpu0, 2),
            "workers_peak_rss_mib": peak_rss_mib(workers), "workers_alive": all(Path(f"/proc/{p}").exists()
                                                                                for p in workers)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--models-dir", type=Path, default=None)
    parser.add_argument("--model", default="default")
    parser.add_argument("--huge-mib", type=int, default=64)
    parser.add_argument("--name", default="request_heads", help="bench/results/<name>.json")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="tunemix-heads-"))
    try:
        models_dir = args.models_dir
        if models_dir is None:
            models_dir = work / "models"
            subprocess.run([sys.executable, "-m", "tunemix.cli", "demo", "--models-dir", str(models_dir),
                            "--name", args.model], cwd=ROOT, check=True, capture_output=True)
        result: dict[str, Any] = {"probe_ms_start": machine_probe_ms(), "servers": {}}
        for kind in ("uvicorn --http httptools", "python -m tunemix.service"):
            port = free_port()
            proc = start(kind, models_dir, args.model, port)
            try:
                workers = workers_of(proc.pid)
                run = {"slow_heads": slow_heads(port), "huge_head": huge_head(port, workers, args.huge_mib)}
            finally:
                os.killpg(proc.pid, 15)
                proc.wait()
            result["servers"][kind] = run
            print(kind, run, flush=True)
        result["probe_ms_end"] = machine_probe_ms()
        write_result(args.name, result)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
