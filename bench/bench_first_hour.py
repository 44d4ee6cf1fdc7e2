"""A new user's first hour, measured on a fresh clone with an empty numba cache.

    python -m bench.bench_first_hour [--install] [--cold-train] [--skip-train]

1. ``git clone`` of this repository's committed HEAD into a temporary folder.
2. What ``make serve`` does, timed step by step: with ``--install`` the real make targets one by
   one (the venv and ``uv pip install -e '.[train,serve]'`` with no download cache, ``make
   train-default``: ``tunemix demo``, which compiles the kernels first on the cold cache, its fit
   beside the last of them, what ``tunemix warm`` said kept as ``warm_said``); without it the same
   steps with this interpreter and the clone's code first on the path (the install is then not
   measured), then ``python -m tunemix.service`` until ``/ready`` answers 200. The numba cache is the clone's
   ``.venv/numba-cache``, empty at the start.
3. The first ``/rank``, ``/evaluate`` and ``/rank`` with explanations after ``/ready``; with
   ``--skip-train``, then the end of the demo's background part (the other learners' kernels,
   ``tunemix.compile.warm_child``), awaited on its lock, and what it said.
4. The first and the second ``tunemix train --config configs/mq2008.toml`` (MQ2008 Fold1 from
   ``../shared/data`` or ``TUNEMIX_SHARED_DATA``) with that cache, as a user does after ``make
   serve`` (the first waits for the demo's background part if it is still compiling);
   ``--cold-train`` also measures a first train on another empty cache (it warms first, saying so).

The machine's load is recorded (load averages and a fixed CPU probe before and after): on a shared
machine the times are upper bounds of a quiet one's. JSON: bench/results/first_hour.json.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import ROOT, SHARED_DATA, git, machine_probe_ms, write_result
from tunemix.compile.warm_child import BACKGROUND_LOG, wait_for_background


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def timed(cmd: list[str], cwd: Path, env: dict[str, str], log: Path) -> dict[str, Any]:
    t0 = time.perf_counter()
    with log.open("ab") as fh:
        fh.write(f"\n$ {' '.join(cmd)}\n".encode())
        fh.flush()
        proc = subprocess.run(cmd, cwd=cwd, env=env, stdout=fh, stderr=subprocess.STDOUT, timeout=7200)
    out = {"seconds": round(time.perf_counter() - t0, 1), "exit": proc.returncode}
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}); see {log}")
    return out


def serve_and_ask(clone: Path, python: str, env: dict[str, str], log: Path) -> dict[str, Any]:
    """``python -m tunemix.service`` (as make serve's last step) until /ready; then the first requests."""
    import httpx

    from tunemix.core.data.svmlight import read_svmlight

    port = free_port()
    env = dict(env, TUNEMIX_MODELS_DIR="models", TUNEMIX_DEFAULT_MODEL="default", TUNEMIX_PORT=str(port))
    t0 = time.perf_counter()
    with log.open("ab") as fh:
        proc = subprocess.Popen([python, "-m", "tunemix.service"], cwd=clone, env=env, stdout=fh,
                                stderr=subprocess.STDOUT,
                                start_new_session=True)
    out: dict[str, Any] = {}
    try:
        with httpx.Client(timeout=None, base_url=f"http://127.0.0.1:{port}") as c:
            while "ready_s" not in out:
                if proc.poll() is not None:
                    raise RuntimeError(f"the service exited; see {log}")
                try:
                    if c.get("/ready").status_code == 200:
                        out["ready_s"] = round(time.perf_counter() - t0, 2)
                except httpx.TransportError:
                    pass
                time.sleep(0.05)
            test = read_svmlight(clone / "data" / "synthetic" / "test.txt")
            lo, hi = int(test.query_offsets[0]), int(test.query_offsets[1])
            query = {"qid": str(test.qids[0]), "documents": [
                {"id": f"d{i}", "features": [float(v) for v in test.features[i]]} for i in range(lo, hi)]}
            for name, path, body in (
                    ("first_rank_ms", "/rank", {"queries": [query], "top_k": 10}),
                    ("first_evaluate_ms", "/evaluate", {"queries": [{"qid": "a", "labels": [int(v) for v in
                                                                                            test.labels[lo:hi]],
                                                                     "scores": [float(v) for v in
                                                                                range(hi - lo, 0, -1)]}],
                                                        "metrics": ["ndcg@10", "err"], "convention": "all"}),
                    ("first_explain_ms", "/rank", {"queries": [query], "top_k": 5, "explain": 5})):
                t = time.perf_counter()
                r = c.post(path, json=body)
                out[name] = round((time.perf_counter() - t) * 1e3, 1)
                if r.status_code != 200:
                    raise RuntimeError(f"{path}: {r.status_code} {r.text[:300]}")
            t = time.perf_counter()
            c.post("/rank", json={"queries": [query], "top_k": 10})
            out["second_rank_ms"] = round((time.perf_counter() - t) * 1e3, 1)
    finally:
        os.killpg(proc.pid, 15)
        proc.wait()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--install", action="store_true", help="time the real install too (make train-default)")
    ap.add_argument("--cold-train", action="store_true", help="also a first train on another empty cache")
    ap.add_argument("--skip-train", action="store_true", help="only make serve and the first requests")
    ap.add_argument("--keep", action="store_true", help="keep the temporary clone (its logs)")
    ap.add_argument("--name", default="first_hour")
    args = ap.parse_args(argv)
    fold = SHARED_DATA / "MQ2008" / "Fold1"
    if not args.skip_train and not (fold / "train.txt").is_file():
        raise SystemExit(f"bench_first_hour: MQ2008 Fold1 not found under {fold} (shared/data beside the "
                         "repository, or set TUNEMIX_SHARED_DATA); --skip-train measures make serve alone")
    work = Path(tempfile.mkdtemp(prefix="tunemix-first-hour-"))
    clone, log = work / "tunemix", work / "log.txt"
    result: dict[str, Any] = {"commit": git("rev-parse", "HEAD"), "cores": os.cpu_count(),
                              "loadavg_start": [round(v, 2) for v in os.getloadavg()],
                              "probe_ms_start": machine_probe_ms()}
    try:
        subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True)
        cache = clone / ".venv" / "numba-cache"
        env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "NUMBA_CACHE_DIR")}
        env.update(NUMBA_CACHE_DIR=str(cache), TUNEMIX_SHARED_DATA=str(SHARED_DATA), TUNEMIX_LOG_LEVEL="warning",
                   TUNEMIX_AUTO_WARM="1")
        steps: dict[str, Any] = {}
        if args.install:  # make serve's steps one by one, no download cache (a fresh machine has none)
            python = str(clone / ".venv" / "bin" / "python")
            env.pop("PYTHONPATH", None)  # the clone's installed code only, as for a user
            fresh = dict(env, UV_NO_CACHE="1", PIP_NO_CACHE_DIR="1")
            steps["install"] = timed(["make", ".venv/.stamp-train"], clone, fresh, log)
            steps["demo_with_warm"] = timed(["make", "train-default"], clone, env, log)
        else:
            python = sys.executable
            env["PYTHONPATH"] = str(clone)
            steps["install"] = "not measured (this interpreter, the clone's code first on the path)"
            steps["demo_with_warm"] = timed([python, "-m", "tunemix.cli", "demo", "--models-dir", "models", "--name",
                                             "default", "--no-progress"], clone, env, log)
        result["warm_said"] = [line for line in log.read_text().splitlines() if line.startswith("tunemix warm: ")]
        served = serve_and_ask(clone, python, env, log)
        steps["serve_to_ready_s"] = served.pop("ready_s")
        result["make_serve_to_ready_s"] = round(steps["serve_to_ready_s"] + sum(
            v["seconds"] for v in steps.values() if isinstance(v, dict)), 1)
        result["make_serve_steps"] = steps
        result["after_ready"] = served
        print(f"make serve to /ready: {result['make_serve_to_ready_s']} s {steps}; {served}", flush=True)
        if args.skip_train:  # the demo's background part (the other learners' kernels): its end, then its log
            waited = wait_for_background(cache, io.StringIO())
            result["background_part_done_after_first_requests_s"] = round(waited or 0.0, 1)
        background_log = cache / BACKGROUND_LOG
        if background_log.is_file():
            result["warm_said_background"] = [line for line in background_log.read_text().splitlines()
                                              if line.startswith("tunemix warm: ")]
        if not args.skip_train:
            trains = []
            for k in range(2):
                start = log.stat().st_size
                out = timed([python, "-m", "tunemix.cli", "train", "--config", "configs/mq2008.toml", "--models-dir",
                             str(work / "models"), "--no-progress"], clone, env, log)
                version = sorted((work / "models" / "mq2008-fold1").glob("v*"), key=lambda p: int(p.name[1:]))[-1]
                record = json.loads((version / "report.json").read_text())
                out["numba_compile_s"] = round(record.get("numba_compile", {}).get("total_s", float("nan")), 1)
                out["timings"] = {k2: round(v, 1) for k2, v in record["timings"].items()}
                out["waited_for_the_background_part"] = b"background compilation is done" in log.read_bytes()[start:]
                trains.append(out)
                print(f"tunemix train MQ2008 Fold1 #{k + 1}: {out['seconds']} s (numba {out['numba_compile_s']} s)",
                      flush=True)
            result["train_mq2008_fold1"] = {"first": trains[0], "second": trains[1],
                                            "ratio_first_to_second": round(trains[0]["seconds"] / trains[1]["seconds"],
                                                                           2)}
            if args.cold_train:
                cold_env = dict(env, NUMBA_CACHE_DIR=str(work / "cold-cache"))
                out = timed([python, "-m", "tunemix.cli", "train", "--config", "configs/mq2008.toml", "--models-dir",
                             str(work / "models-cold"), "--no-progress"], clone, cold_env, log)
                result["train_mq2008_fold1"]["first_on_an_empty_cache_with_auto_warm"] = out
        result["loadavg_end"] = [round(v, 2) for v in os.getloadavg()]
        result["probe_ms_end"] = machine_probe_ms()
        result["command"] = "python -m bench.bench_first_hour " + " ".join(argv if argv is not None else sys.argv[1:])
        path = write_result(args.name, result)
        print(f"-> {path}", flush=True)
    finally:
        if args.keep:
            print(f"kept {work}", flush=True)
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
