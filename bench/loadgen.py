"""Open-loop (constant-rate) HTTP load generator: asyncio streams, run in its own process.

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

The client is a minimal HTTP/1.1 keep-alive client over asyncio streams (request bytes built
once per body; a response read by its ``Content-Length``, or chunk by chunk): httpx's async
client costs about 8 ms of generator CPU per request on these machines, so that at 200
requests/s the generator, not the server, would be the bottleneck. Idle connections are
reused last-in first-out; one idle longer than ``--idle-timeout`` (default 4 s, under uvicorn's 5 s
keep-alive) is closed instead of reused, as a well-behaved client does, and a request whose
reused connection turns out closed by the server is sent once more on a new connection (not on
another idle one, which the server may have closed at the same moment).
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
from urllib.parse import urlsplit

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


class HttpError(Exception):
    """The connection failed or the response could not be read."""


class Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    async def exchange(self, request: bytes) -> tuple[int, bytes]:
        """Send one request (head and body) and read its response: (status, body)."""
        self.writer.write(request)
        await self.writer.drain()
        line = await self.reader.readline()
        if not line:
            raise HttpError("connection closed")
        status = int(line.split(b" ", 2)[1])
        length, chunked, close = -1, False, False
        while True:
            h = await self.reader.readline()
            if h in (b"\r\n", b"\n", b""):
                break
            name, _, value = h.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"transfer-encoding" and b"chunked" in value.lower():
                chunked = True
            elif name == b"connection" and b"close" in value.lower():
                close = True
        if chunked:
            parts = []
            while True:
                size = int((await self.reader.readline()).split(b";")[0], 16)
                if size == 0:
                    await self.reader.readline()
                    break
                parts.append(await self.reader.readexactly(size))
                await self.reader.readexactly(2)
            content = b"".join(parts)
        elif length >= 0:
            content = await self.reader.readexactly(length)
        else:
            content = await self.reader.read()
            close = True
        if close:
            self.close()  # the pool sees it closing and does not reuse it
        return status, content

    def close(self) -> None:
        self.writer.close()


class Pool:
    """Up to ``size`` keep-alive connections to one host, the most recently used reused first."""

    def __init__(self, host: str, port: int, size: int, idle_timeout: float = 4.0) -> None:
        self.host, self.port, self.size = host, port, size
        self.idle_timeout = idle_timeout
        self.idle: list[tuple[float, Connection]] = []  # (time it went idle, connection)
        self.open = 0

    def _take_idle(self) -> Connection | None:
        now = time.perf_counter()
        while self.idle:
            since, conn = self.idle.pop()
            if now - since < self.idle_timeout:
                return conn
            conn.close()  # idle too long: the server may be closing it right now
            self.open -= 1
        return None

    async def request(self, raw: bytes) -> tuple[int, bytes]:
        for attempt in range(2):
            conn = self._take_idle() if attempt == 0 else None
            fresh = conn is None
            if conn is None:
                conn = await self._connect()
            try:
                status, content = await conn.exchange(raw)
            except (OSError, HttpError, asyncio.IncompleteReadError, ValueError, IndexError) as exc:
                conn.close()
                self.open -= 1
                if fresh or attempt == 1:  # a new connection failing is the server's answer
                    raise HttpError(f"{type(exc).__name__}: {exc}") from None
                continue  # an idle connection the server had closed: once more on a new one
            if conn.writer.is_closing():
                self.open -= 1
            else:
                self.idle.append((time.perf_counter(), conn))
            return status, content
        raise HttpError("unreachable")

    async def _connect(self) -> Connection:
        reader, writer = await asyncio.open_connection(self.host, self.port, limit=1 << 22)
        self.open += 1
        return Connection(reader, writer)

    def close(self) -> None:
        for _, conn in self.idle:
            conn.close()
        self.idle.clear()


def request_bytes(url: str, body: bytes) -> bytes:
    parts = urlsplit(url)
    head = (f"POST {parts.path or '/'}{'?' + parts.query if parts.query else ''} HTTP/1.1\r\n"
            f"Host: {parts.netloc}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n")
    return head.encode() + body


async def run(url: str, bodies: list[bytes], rate: float, duration: float, concurrency: int,
              timeout: float, max_lag: float, idle_timeout: float = 4.0) -> dict[str, Any]:
    n = max(1, round(rate * duration))
    counts = [expected_counts(b) for b in bodies]
    raws = [request_bytes(url, b) for b in bodies]
    latency = [float("nan")] * n        # issue -> response complete (s)
    latency_sched = [float("nan")] * n  # scheduled time -> response complete (s)
    lag = [float("nan")] * n            # issue - scheduled time (s)
    server_ms = [float("nan")] * n
    status = [0] * n                    # HTTP status, 0 when none
    error: list[str | None] = [None] * n
    sem = asyncio.Semaphore(concurrency)
    parts = urlsplit(url)
    pool = Pool(parts.hostname or "127.0.0.1", parts.port or 80, concurrency, idle_timeout)
    tasks: set[asyncio.Task[None]] = set()

    async def one(i: int, sched: float) -> None:
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
                code, content = await asyncio.wait_for(pool.request(raws[i % len(raws)]), timeout=timeout)
            except TimeoutError:
                error[i] = "timeout"
                return
            except HttpError as exc:
                error[i] = f"transport:{exc}"
                return
            t_done = time.perf_counter()
            latency[i] = t_done - t_issue
            latency_sched[i] = t_done - sched
            status[i] = code
            if code != 200:
                error[i] = f"status_{code}"
                return
            ok, st = check_response(content, counts[i % len(bodies)])
            if st is not None:
                server_ms[i] = st
            if not ok:
                error[i] = "bad_response"
        finally:
            sem.release()

    # open a few connections first so the first requests do not pay connection setup
    warm = [await pool._connect() for _ in range(4)]
    pool.idle.extend((time.perf_counter(), c) for c in warm)
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
    pool.close()

    return {
        "url": url, "rate": rate, "duration_s": duration, "n_requests": n, "concurrency": concurrency,
        "timeout_s": timeout, "max_lag_s": max_lag, "idle_timeout_s": idle_timeout, "n_bodies": len(bodies),
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
    ap.add_argument("--idle-timeout", type=float, default=4.0,
                    help="close a keep-alive connection idle this long instead of reusing it (s)")
    ap.add_argument("--out", required=True, type=Path)
    args = ap.parse_args(argv)
    if not (0 < args.rate <= 10_000 and 0 < args.duration <= 3600 and 1 <= args.concurrency <= 4096):
        ap.error("rate, duration or concurrency out of range")
    bodies = [line.encode() for line in args.bodies.read_text().splitlines() if line.strip()]
    if not bodies:
        ap.error(f"{args.bodies} holds no request bodies")
    result = asyncio.run(run(args.url, bodies, args.rate, args.duration, args.concurrency, args.timeout,
                             args.max_lag, args.idle_timeout))
    args.out.write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
