"""What an answer weighs against its bound (``tunemix.service.answer_size``): per case the body's
bytes, the answer's, the bound computed before the work, what computing it costs, and how much the
request raises a fresh worker's peak memory.

    python -m bench.bench_answer_size            # every case (~1 min on 2 busy cores)
    python -m bench.bench_answer_size --no-bound # the same with TUNEMIX_MAX_ANSWER_BYTES at 1 TB

Writes ``bench/results/answer_size.json`` (``--name``: another name).

The service is the application in process (``TestClient``), the default settings otherwise,
serving the small model ``bench.bench_request_cost`` trains (46 features, a relevance head of
3 grades). Each case runs in a fresh process: Python's allocator keeps freed memory, so a
process that served one large answer would hide the next one's peak (``VmHWM`` after the case
against before it, one small request of the endpoint served first). The bound's cost is timed
around the route's own check.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.bench_request_cost import N_FEATURES, train_model
from bench.common import ROOT, write_result

MEASURES = [f"ndcg@{k}" for k in range(1, 11)] + [f"p@{k}" for k in range(1, 10)] + ["map"]


def body(case: str) -> tuple[str, dict[str, Any]]:
    """(endpoint, body) of a case."""
    if case == "rank_100":
        rows = [[round(0.01 * ((j * 7 + f) % 100), 2) for f in range(N_FEATURES)] for j in range(100)]
        return "/rank", {"queries": [{"qid": "q", "ids": [f"d{j}" for j in range(100)], "features": rows}]}
    if case == "rank_40000_relevance":  # about the largest such body within TUNEMIX_MAX_BODY_BYTES
        return "/rank", {"relevance": True, "queries": [{"qid": "q", "ids": list(range(40_000)),
                                                         "features": [[0] * N_FEATURES] * 40_000}]}
    if case == "fuse_2x1000":
        return "/fuse", {"queries": [{"qid": "q", "systems": [
            {"ids": [f"d{j}" for j in range(1000)], "scores": [1 / (j + 1) for j in range(1000)]},
            {"ids": [f"d{j}" for j in range(500, 1500)]}]}]}
    if case.startswith("evaluate_long_qids_"):
        n = int(case.rsplit("_", 1)[1])
        return "/evaluate", {"queries": [{"qid": f"{q:06d}".ljust(256, "q"), "labels": [2, 0, 1],
                                          "scores": [0.9, 0.3, 0.5]} for q in range(n)],
                             "metrics": MEASURES, "convention": "all", "per_query": True}
    if case == "evaluate_short_qids":
        return "/evaluate", {"queries": [{"qid": q, "labels": [1, 0], "scores": [0.5, 0.2]} for q in range(10_000)],
                             "metrics": MEASURES, "convention": "yahoo", "per_query": True}
    raise SystemExit(f"unknown case {case!r}")


CASES = ["rank_100", "rank_40000_relevance", "fuse_2x1000", "evaluate_long_qids_560", "evaluate_long_qids_1000",
         "evaluate_short_qids"]
WARM = {"/rank": {"queries": [{"qid": 1, "ids": [1], "features": [[0] * N_FEATURES]}]},
        "/evaluate": {"queries": [{"qid": 1, "labels": [1], "scores": [1]}]},
        "/fuse": {"queries": [{"qid": 1, "systems": [{"ids": [1]}]}]}}
CHECKS = {"/rank": ("rank", "check_rank_answer"), "/evaluate": ("evaluate", "check_evaluate_answer"),
          "/fuse": ("fuse", "check_ranked_answer")}


def peak() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM")


def one_case(models: str, case: str) -> dict[str, Any]:
    """Run ``case`` in this process: its figures."""
    import importlib

    from fastapi.testclient import TestClient

    from tunemix.service.main import create_app
    from tunemix.service.settings import Settings

    path, payload = body(case)
    module = importlib.import_module(f"tunemix.service.routers.{CHECKS[path][0]}")
    real = getattr(module, CHECKS[path][1])
    seen: list[tuple[int, float]] = []

    def timed(*args: Any, **kwargs: Any) -> int:
        started = time.perf_counter()
        bound: int = real(*args, **kwargs)
        seen.append((bound, time.perf_counter() - started))
        return bound

    setattr(module, CHECKS[path][1], timed)
    raw = json.dumps(payload, separators=(",", ":")).encode()
    headers = {"Content-Type": "application/json"}
    with TestClient(create_app(Settings(models_dir=Path(models), default_model="default"))) as c:
        while c.get("/ready").status_code != 200:
            time.sleep(0.1)
        for _ in range(3):  # the route's first calls, and the check's
            c.post(path, content=json.dumps(WARM[path]).encode(), headers=headers)
        before = peak()
        seen.clear()
        r = c.post(path, content=raw, headers=headers)
        rise = peak() - before
        costs = []
        for _ in range(20 if len(raw) < 100_000 else 0):  # the check's cost: a small body, many times
            seen.clear()
            c.post(path, content=raw, headers=headers)
            costs.append(seen[-1][1])
    bound = seen[-1][0] if seen else None
    return {"case": case, "endpoint": path, "status": r.status_code, "body_bytes": len(raw),
            "answer_bytes": len(r.content), "bound_bytes": bound,
            "bound_over_answer": round(bound / len(r.content), 2) if bound and r.status_code == 200 else None,
            "check_us": round(sorted(costs)[len(costs) // 2] * 1e6, 1) if costs else None,
            "peak_rise_mib": round(rise / 2**20, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--case", help=argparse.SUPPRESS)
    parser.add_argument("--models", help=argparse.SUPPRESS)
    parser.add_argument("--no-bound", action="store_true", help="TUNEMIX_MAX_ANSWER_BYTES at 1 TB")
    parser.add_argument("--name", default="answer_size")
    args = parser.parse_args()
    if args.case:  # a child: one case, its figures on stdout
        print(json.dumps(one_case(args.models, args.case)))
        return
    env = dict(os.environ, TUNEMIX_REQUEST_TIMEOUT_S="600", TUNEMIX_MAX_REQUEST_TIMEOUT_S="600")
    if args.no_bound:
        env["TUNEMIX_MAX_ANSWER_BYTES"] = str(10**12)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        models = Path(tmp) / "models"
        train_model(models)
        for case in CASES:
            out = subprocess.run([sys.executable, "-m", "bench.bench_answer_size", "--case", case, "--models",
                                  str(models)], cwd=ROOT, env=env, capture_output=True, text=True, check=True)
            rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
            r = rows[-1]
            print(f"{case:26s} {r['status']} body {r['body_bytes']:>11,} answer {r['answer_bytes']:>11,} "
                  f"bound {r['bound_bytes'] or 0:>11,} x{r['bound_over_answer'] or '-'} "
                  f"check {r['check_us'] or '-'} us "
                  f"peak +{r['peak_rise_mib']} MiB", flush=True)
    print(write_result(args.name, {"max_answer_bytes": None if args.no_bound else "default", "cases": rows}))


if __name__ == "__main__":
    main()
