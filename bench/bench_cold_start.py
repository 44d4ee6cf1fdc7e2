"""Cold start of the service: process start to /ready, with an empty and with a warm numba cache,
and what a CPU-portable cache (``NUMBA_CPU_NAME=generic``) costs in scoring speed.

    python -m bench.bench_cold_start [--models-dir DIR --model NAME] [--repeat 2]

Each start is a real ``python -m tunemix.service`` (one worker, and two) on its own port; the time is taken
from ``Popen`` to the first 200 of ``/ready`` (polled every 20 ms), and to the log line that says
the parallel, evaluation and fusion kernels are warm too. Without ``--models-dir`` the demo model
is trained first (``tunemix demo``), as ``make serve`` does. JSON: bench/results/cold_start.json.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench.common import ROOT, machine_probe_ms, write_result


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_to_ready(models_dir: Path, model: str, cache: Path, workers: int,
                   extra_env: dict[str, str]) -> dict[str, Any]:
    port = free_port()
    env = dict(os.environ, TUNEMIX_MODELS_DIR=str(models_dir), TUNEMIX_DEFAULT_MODEL=model, TUNEMIX_PORT=str(port),
               TUNEMIX_HOST="127.0.0.1", TUNEMIX_WORKERS=str(workers), TUNEMIX_LOG_LEVEL="info",
               NUMBA_CACHE_DIR=str(cache), **extra_env)
    log_path = Path(tempfile.mkstemp(prefix="cold-start-", suffix=".log")[1])
    t0 = time.perf_counter()
    with log_path.open("wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "tunemix.service"], cwd=ROOT, env=env, stdout=log,
                                stderr=subprocess.STDOUT,
                                start_new_session=True)
    ready = all_warm = None
    try:
        with httpx.Client(timeout=None) as c:
            while ready is None:
                if proc.poll() is not None:
                    raise RuntimeError(f"the service exited: {log_path.read_text()[-2000:]}")
                try:
                    if c.get(f"http://127.0.0.1:{port}/ready").status_code == 200:
                        ready = time.perf_counter() - t0
                except httpx.TransportError:
                    pass
                time.sleep(0.02)
        while all_warm is None:
            if log_path.read_text().count("evaluation and fusion kernels warm") >= workers:
                all_warm = time.perf_counter() - t0
            time.sleep(0.05)
    finally:
        os.killpg(proc.pid, 15)
        proc.wait()
    log_text = log_path.read_text()
    log_path.unlink()
    return {"ready_s": round(ready, 2), "all_kernels_warm_s": round(all_warm, 2),
            "log_lines": [line for line in log_text.splitlines() if re.search(r"warm|ready in|runtime", line)][:12]}


def scoring_speed(model_path: Path, cache: Path, cpu_name: str | None, rounds: int) -> dict[str, float]:
    """Median ms of ``model.score`` on 100 and 1,000 documents, one thread, in a fresh process."""
    code = (
        "import sys, time, statistics, numpy as np\n"
        "from tunemix.core.scoring import runtime\n"
        "from tunemix.core.scoring.ensemble_model import load_model\n"
        "runtime.configure(scoring_threads=1)\n"
        "m = load_model(sys.argv[1])[0]\n"
        "rng = np.random.default_rng(0)\n"
        "for n in (100, 1000):\n"
        "    x = rng.random((n, m.n_features), dtype=np.float32); off = np.array([0, n])\n"
        "    m.score(x, off); ts = []\n"
        "    for _ in range(int(sys.argv[2])):\n"
        "        t = time.perf_counter(); m.score(x, off); ts.append(time.perf_counter() - t)\n"
        "    print(n, statistics.median(ts) * 1e3)\n"
    )
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache))
    if cpu_name:
        env["NUMBA_CPU_NAME"] = cpu_name
    out = subprocess.run([sys.executable, "-c", code, str(model_path), str(rounds)], env=env, cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    return {f"docs_{n}_ms": round(float(v), 4) for n, v in (line.split() for line in out.splitlines())}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--models-dir", type=Path, default=None)
    parser.add_argument("--model", default="default")
    parser.add_argument("--repeat", type=int, default=2, help="starts of each kind")
    parser.add_argument("--name", default="cold_start", help="bench/results/<name>.json")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="tunemix-cold-"))
    try:
        models_dir = args.models_dir
        if models_dir is None:
            models_dir = work / "models"
            subprocess.run([sys.executable, "-m", "tunemix.cli", "demo", "--models-dir", str(models_dir),
                            "--name", args.model], cwd=ROOT, check=True, capture_output=True,
                           env=dict(os.environ, NUMBA_CACHE_DIR=str(work / "train-cache")))
        version = sorted((models_dir / args.model).glob("v*"), key=lambda p: int(p.name[1:]))[-1]
        result: dict[str, Any] = {"probe_ms_start": machine_probe_ms(),
                                  "model": f"{args.model}/{version.name}", "starts": {}}
        for workers in (1, 2):
            for r in range(args.repeat):
                cache = work / f"cache-{workers}-{r}"
                empty = start_to_ready(models_dir, args.model, cache, workers, {})
                warm = start_to_ready(models_dir, args.model, cache, workers, {})
                result["starts"].setdefault(f"workers_{workers}", []).append({"empty_cache": empty, "warm_cache": warm})
                print(f"workers {workers}: empty cache ready {empty['ready_s']} s (all kernels "
                      f"{empty['all_kernels_warm_s']} s), warm cache ready {warm['ready_s']} s", flush=True)
        summary = {}
        for key, runs in result["starts"].items():
            summary[key] = {kind: statistics.median(r[kind]["ready_s"] for r in runs)
                            for kind in ("empty_cache", "warm_cache")}
        result["median_ready_s"] = summary
        # a CPU-portable cache: host code against generic x86-64 code, interleaved
        speeds: dict[str, list[dict[str, float]]] = {"host": [], "generic": []}
        for _ in range(3):
            for name, cpu in (("host", None), ("generic", "generic")):
                speeds[name].append(scoring_speed(version, work / f"speed-{name}", cpu, 30))
        result["scoring_speed_one_thread"] = {
            name: {k: round(statistics.median(s[k] for s in runs), 4) for k in runs[0]}
            for name, runs in speeds.items()}
        result["probe_ms_end"] = machine_probe_ms()
        write_result(args.name, result)
        print(result["median_ready_s"], result["scoring_speed_one_thread"], flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
