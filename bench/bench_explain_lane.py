"""What explain traffic does to plain /rank latency: explanations run on each worker's explain
lane, and plain requests must not queue behind them.

    python -m bench.bench_explain_lane [--requests 300]   # ~2-4 min on 2 busy cores

Writes ``bench/results/explain_lane.json`` (``--name``: another name).

The real service, ``python -m tunemix.service`` with two workers and its default settings, serving the
46-feature model ``bench.bench_request_cost`` trains. One client sends ``--requests`` plain /rank
requests of 100 documents back to back (columnar, no explanations) and records each latency. The
peer is the same client in the same run without explain traffic: **quiet** before and after the
**explain** phase, in which two more clients send explain requests back to back (100 documents,
``"explain": 5`` on each query's top 20: ``TUNEMIX_EXPLAIN_MAX_DOCUMENTS``). Reported: p50 and p99 of
each phase, their ratio to the quiet phases' pooled figures, and the explain clients' answers
(statuses, count, median latency).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from bench.bench_request_cost import N_FEATURES, Server, train_model
from bench.common import machine_probe_ms, write_result

JSON = {"Content-Type": "application/json"}


def body(n: int, seed: int, **extra: Any) -> bytes:
    x = np.random.default_rng(seed).random((n, N_FEATURES)).round(4)
    return json.dumps({"queries": [{"qid": "q", "ids": [f"d{j}" for j in range(n)], "features": x.tolist()}],
                       **extra}, separators=(",", ":")).encode()


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))


def plain_phase(url: str, n: int) -> list[float]:
    """Latencies (ms) of ``n`` back-to-back plain /rank requests of 100 documents."""
    plain = body(100, 1)
    out = []
    with httpx.Client(base_url=url, timeout=600) as c:
        for _ in range(n):
            t0 = time.perf_counter()
            r = c.post("/rank", content=plain, headers=JSON)
            out.append((time.perf_counter() - t0) * 1e3)
            if r.status_code != 200:
                raise RuntimeError(f"/rank answered {r.status_code}: {r.text[:300]}")
    return out


def summarise(lat: list[float]) -> dict[str, float]:
    return {"requests": len(lat), "p50_ms": round(percentile(lat, 50), 2), "p99_ms": round(percentile(lat, 99), 2)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=300, help="plain /rank requests per phase")
    parser.add_argument("--name", default="explain_lane", help="result file name (bench/results/<name>.json)")
    args = parser.parse_args(argv)
    probe = machine_probe_ms()
    with tempfile.TemporaryDirectory(prefix="explain-lane-") as tmp:
        work = Path(tmp)
        models = work / "models"
        train_model(models)
        server = Server(models, work / "server.log", workers=2)
        try:
            server.wait_warm(timeout=1800)  # a cold numba cache compiles every kernel first
            plain_phase(server.url, 20)  # both workers past their first request
            quiet = plain_phase(server.url, args.requests)
            stop = threading.Event()
            explain_body = body(100, 2, explain=5, top_k=20)
            answers: list[tuple[int, float]] = []

            def explain_client() -> None:
                with httpx.Client(base_url=server.url, timeout=600) as c:
                    while not stop.is_set():
                        t0 = time.perf_counter()
                        r = c.post("/rank", content=explain_body, headers=JSON)
                        answers.append((r.status_code, (time.perf_counter() - t0) * 1e3))

            clients = [threading.Thread(target=explain_client) for _ in range(2)]
            for t in clients:
                t.start()
            while len(answers) < 2:  # the explain traffic runs
                time.sleep(0.01)
            busy = plain_phase(server.url, args.requests)
            stop.set()
            for t in clients:
                t.join()
            quiet_after = plain_phase(server.url, args.requests)
        finally:
            server.stop()
    pooled = summarise(quiet + quiet_after)
    explain_ms = [ms for _, ms in answers]
    out = {
        "command": "python -m bench.bench_explain_lane" + (f" --requests {args.requests}" if args.requests != 300
                                                           else ""),
        "explain_body_bytes": len(body(100, 2, explain=5, top_k=20)), "plain_body_bytes": len(body(100, 1)),
        "machine_probe_ms": [probe, machine_probe_ms()],
        "quiet_before": summarise(quiet), "explain_traffic": summarise(busy), "quiet_after": summarise(quiet_after),
        "p50_ratio_to_quiet": round(percentile(busy, 50) / pooled["p50_ms"], 2),
        "p99_ratio_to_quiet": round(percentile(busy, 99) / pooled["p99_ms"], 2),
        "explain_answers": {"count": len(answers), "statuses": sorted({s for s, _ in answers}),
                            "median_ms": round(statistics.median(explain_ms), 1) if explain_ms else None},
    }
    path = write_result(args.name, out)
    print(json.dumps(out, indent=1))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
