"""Open-loop (constant-rate) HTTP load generator: asyncio + httpx, run in its own process.

    python -m bench.loadgen --url http://127.0.0.1:8000/rank --bodies bodies.jsonl \\
        --rate 200 --duration 60 --out result.json

Request i is issued at ``t0 + i / rate`` whether or not earlier requests have been answered
(open loop: a slow server meets the same arrival rate and its queueing shows in the latencies,
instead of slowing the generator down as a closed loop would). At most ``--concurrency``
requests are in flight (one connection each); a request that cannot start within
``--max-lag`` seconds of its scheduled time (pool full, or the generator itself fell behind)
is not sent and counts as the error ``overrun``, so an overloaded generator cannot pass for a
fast server. Every loop is bounded: ``rate * duration`` requests, then at most
``--timeout`` + 5 s of draining.

``--bodies`` holds one request body per line (compact JSON); request i posts body
``i % n_bodies``. A response counts as OK when its status is 200 and every query of the body
comes back with a ranking of as many entries as documents posted (so a fast error page is
never counted as a fast answer). The latency of a request is measured from the moment the
generator issues it (after any wait for a free connection) to the end of the response body;
the lag of each issue behind the clock and the latency from the scheduled time are
recorded too. Writes raw per-request figures (JSON) to ``--out``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import httpx

try:  # orjson parses a 1,000-entry ranking several times faster than json
    import orjson

    _loads: Any = orjson.loads
except ImportError:  # pragma: no cover
    _loads = json.loads


def expected_counts(body: bytes) -> list[int]:
    """Number of documents posted per query (row form ``documents`` or columnar ``ids``)."""
    doc = json.loads(body)
    return [len(q["documents"]) if "documents" in q else len(q["ids"]) for q in doc["queries"]]


def check_response(content: bytes, counts: list[int]) -> tuple[bool, float | None]:
    """(rankings complete, server_time_ms) for one 200 response."""
    try:
        doc = _loads(content)
        results = doc["results"]
        ok = len(results) == len(counts) and all(
            len(r["ranking"]) == n for r, n in zip(results, counts, strict=True))
        st = doc.get("server_time_ms")
        return ok, (float(st) if st is not None else None)
    except (ValueError, KeyError, TypeError):
        return False, None


async def run(url: str, bodies: list[bytes], rate: float, duration: float, concurrency: int,
              timeout: float, max_lag: float) -> dict[str, Any]:
    n = max(1, round(rate * duration))
    counts = [expected_counts(b) for b in bodies]
    latency = [float("nan")] * n        # issue -> response complete (s)
    latency_sched = [float("nan")] * n  # scheduled time -> response complete (s)
    lag = [float("nan")] * n            # issue - scheduled time (s)
    server_ms = [float("nan")] * n
    status = [0] * n                    # HTTP status, 0 when none
    error: list[str | None] = [None] * n
    sem = asyncio.Semaphore(concurrency)
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    headers = {"content-type": "application/json"}
    tasks: set[asyncio.Task[None]] = set()

    async with httpx.AsyncClient(limits=limits, timeout=httpx.Timeout(timeout)) as client:
        # open a few connections first so the first requests do not pay connection setup
        # (not counted; a GET that 404s or 405s is fine, it only warms the pool)
        base = url.rsplit("/", 1)[0]
        for _ in range(4):
            try:
                await client.get(base + "/ready")
            except httpx.HTTPError:
                pass

        async def one(i: int, sched: float) -> None:
            body = bodies[i % len(bodies)]
            try:
                await asyncio.wait_for(sem.acquire(), timeout=max(0.0, sched + max_lag - time.perf_counter()))
            except TimeoutError:
                error[i] = "overrun"
                return
            try:
                t_issue = time.perf_counter()
                lag[i] = t_issue - sched
                if lag[i] > max_lag:
                    error[i] = "overrun"
                    return
                try:
                    r = await client.post(url, content=body, headers=headers)
                    content = r.content
                except httpx.TimeoutException:
                    error[i] = "timeout"
                    return
                except httpx.HTTPError as exc:
                    error[i] = f"transport:{type(exc).__name__}"
                    return
                t_done = time.perf_counter()
                latency[i] = t_done - t_issue
                latency_sched[i] = t_done - sched
                status[i] = r.status_code
                if r.status_code != 200:
                    error[i] = f"status_{r.status_code}"
                    return
                ok, st = check_response(content, counts[i % len(bodies)])
                if st is not None:
                    server_ms[i] = st
                if not ok:
                    error[i] = "bad_response"
            finally:
                sem.release()

        gc.collect()
        gc.freeze()
        cpu0 = time.process_time()
        t0 = time.perf_counter() + 0.05
        for i in range(n):
            sched = t0 + i / rate
            delay = sched - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            task = asyncio.create_task(one(i, sched))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        t_last_issue = time.perf_counter()
        deadline = time.perf_counter() + timeout + 5.0
        if tasks:
            _done, pending = await asyncio.wait(set(tasks), timeout=max(0.0, deadline - time.perf_counter()))
            for task in pending:
                task.cancel()
            for i in range(n):
                if error[i] is None and latency[i] != latency[i] and status[i] == 0:
                    error[i] = "unfinished"
        t_end = time.perf_counter()
        cpu = time.process_time() - cpu0

    return {
        "url": url, "rate": rate, "duration_s": duration, "n_requests": n, "concurrency": concurrency,
        "timeout_s": timeout, "max_lag_s": max_lag, "n_bodies": len(bodies),
        "schedule_span_s": t_last_issue - t0, "wall_s": t_end - t0, "generator_cpu_s": cpu,
        "pid": os.getpid(),
        "latency_s": latency, "latency_from_schedule_s": latency_sched, "issue_lag_s": lag,
        "server_time_ms": server_ms, "status": status, "error": error,
        "issue_offset_s": [i / rate for i in range(n)],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--url", required=True)
    ap.add_argument("--bodies", required=True, type=Path, help="one JSON request body per line")
    ap.add_argument("--rate", type=float, required=True, help="requests per second")
    ap.add_argument("--duration", type=float, required=True, help="seconds of scheduled requests")
    ap.add_argument("--concurrency", type=int, default=256, help="connections / requests in flight")
    ap.add_argument("--timeout", type=float, default=10.0, help="per-request timeout (s)")
    ap.add_argument("--max-lag", type=float, default=1.0, help="later than this behind the clock = overrun (s)")
    ap.add_argument("--out", required=True, type=Path)
    args = ap.parse_args(argv)
    if not (0 < args.rate <= 10_000 and 0 < args.duration <= 3600 and 1 <= args.concurrency <= 4096):
        ap.error("rate, duration or concurrency out of range")
    bodies = [line.encode() for line in args.bodies.read_text().splitlines() if line.strip()]
    if not bodies:
        ap.error(f"{args.bodies} holds no request bodies")
    result = asyncio.run(run(args.url, bodies, args.rate, args.duration, args.concurrency, args.timeout,
                             args.max_lag))
    args.out.write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
