"""Attacks on what bounds a request besides its body's decoding, drawn from a seeded RNG, each run
against a real service while a steady client sends plain /rank requests (``python -m
bench.cost_search --attacks answers,held,artifacts``; ``tests/service/test_cost_attacks.py`` runs
one of each class at small scale).

Three classes (``draw``), each a few variants whose sizes, counts and rates are drawn:

- **answers**: clients send bodies whose answers are large and read them slowly or not at all
  (raw sockets with a small receive buffer): ``/evaluate`` with per-query values, long qids,
  up to 32 measures under every convention; ``/rank?relevance=true`` on a LETOR text body of
  thousands of documents with long ids; bodies under ``TUNEMIX_SMALL_BODY_BYTES`` and over it,
  up to 40 connections. The service counts an answer's unsent bytes in the worker's in-flight
  bytes, drops one that would take it past them while others are unsent, and resets a
  connection that does not take its answer (``TUNEMIX_BODY_STALL_S``, ``TUNEMIX_BODY_MIN_RATE``,
  ``TUNEMIX_BODY_TIMEOUT_S``).
- **held**: bodies sent to one byte short of their declared length at full speed, then held;
  bodies trickled just under or just over ``TUNEMIX_BODY_MIN_RATE``; many connections declaring
  the body limit and sending a few bytes.
- **artifacts**: a tampered version put in the models directory (a new model, or a version of the
  default model asked for with ``POST /models/reload`` and the token), its manifest declaring a
  huge width, counts its arrays do not have, hundreds of thousands of empty objects, nesting
  thousands deep, or its bytes changed under its checksum; then unauthenticated requests naming
  it (``GET /models/{name}``, ``/rank`` and ``/evaluate`` with its ``model`` and ``version``), each
  on a fresh connection.

Every attacker connection is reopened when the server closes it, until the attack stops: the
pressure stays the drawn one for the attack's whole length.

**Measures**, per attack: the steady client's plain 100-document ``/rank`` requests (a fresh
connection each, at a fixed rate, whatever the answers before): the fraction answered 200, p50
and p99 of their latency, their statuses; each worker's peak resident memory (``VmHWM``, reset
at the attack's start by ``/proc/<pid>/clear_refs``) less its resting size (``VmRSS`` once the
service is ready, before anything is sent) against ``memory_bound``; the worker pids before and
after; what the attackers saw (statuses, connections cut by a reset or closed by the server).
"""

from __future__ import annotations

import http.client
import json
import math
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench.crafted_artifacts import Tampered
from bench.raw_connections import Conn, Crowd, http_request
from tunemix.core.evaluation import CONVENTION_NAMES
from tunemix.service.settings import DECODED_BODY_MULTIPLE, Settings

CLASSES = ("answers", "held", "artifacts")
#: the documents of the steady client's plain /rank request
STEADY_DOCUMENTS = 100
#: the fraction of the steady client's requests that must be answered 200 during an attack
SERVED_FLOOR = 0.9


def memory_bound(settings: Settings) -> int:
    """The most a worker's peak resident memory may rise over its resting size: 2 x
    ``DECODED_BODY_MULTIPLE`` x ``max_body_bytes`` + ``max_inflight_bytes`` (two bodies decoded at a
    time, each at most ``DECODED_BODY_MULTIPLE`` times the body limit, and the in-flight bytes:
    bodies received, answers not yet written), as docs/service.md ("What a request may cost") and
    the description of ``Settings.max_inflight_bytes`` state it: 224 MiB with the defaults."""
    return 2 * DECODED_BODY_MULTIPLE * settings.max_body_bytes + settings.max_inflight_bytes


# ---------------------------------------------------------------------------- /proc
def vm(pid: int, key: str) -> int:
    """``VmHWM`` or ``VmRSS`` of ``pid`` in bytes (0 once it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def reset_peak(pid: int) -> bool:
    """Set ``VmHWM`` of ``pid`` to its ``VmRSS`` (``clear_refs`` 5); False where that is not allowed
    (the peak then runs from the process's start)."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
        return True
    except OSError:
        return False


# ---------------------------------------------------------------------------- the steady client
def rank_body(n_features: int, n: int = STEADY_DOCUMENTS, seed: int = 0) -> bytes:
    x = np.random.default_rng(seed).random((n, n_features)).round(4)
    return json.dumps({"queries": [{"qid": "q", "ids": [f"d{i}" for i in range(n)], "features": x.tolist()}]},
                      separators=(",", ":")).encode()


class Steady:
    """Plain ``/rank`` requests of ``STEADY_DOCUMENTS`` documents at ``rate`` a second, each on a
    fresh connection (either worker may take it), sent on time whatever the earlier ones' answers
    (a pool of threads): ``answers`` holds (sent at, status, seconds), status 0 for no answer
    within ``timeout``. ``count_reached(n)``: an event set once ``n`` answers are in."""

    def __init__(self, url: str, n_features: int, rate: float = 20.0, timeout: float = 15.0) -> None:
        self.url, self.rate, self.timeout = url, rate, timeout
        self.body = rank_body(n_features)
        self.answers: list[tuple[float, int, float]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._waits: list[tuple[int, threading.Event]] = []
        self._pool = ThreadPoolExecutor(max_workers=16, thread_name_prefix="steady")
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Steady:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._pool.shutdown(wait=True)

    def _run(self) -> None:
        t0 = time.monotonic()
        i = 0
        while not self._stop.is_set():
            self._pool.submit(self._one)
            i += 1
            self._stop.wait(max(0.0, t0 + i / self.rate - time.monotonic()))

    def _one(self) -> None:
        sent = time.monotonic()
        host, port = self.url.split("//")[1].rsplit(":", 1)
        conn = http.client.HTTPConnection(host, int(port), timeout=self.timeout)  # no TLS context to build
        try:
            conn.request("POST", "/rank", body=self.body, headers={"Content-Type": "application/json",
                                                                   "Connection": "close"})
            r = conn.getresponse()
            r.read()
            status = r.status
        except (OSError, http.client.HTTPException):
            status = 0
        finally:
            conn.close()
        with self._lock:
            self.answers.append((sent, status, time.monotonic() - sent))
            n = len(self.answers)
            for want, event in self._waits:
                if n >= want:
                    event.set()

    def count_reached(self, n: int) -> threading.Event:
        event = threading.Event()
        with self._lock:
            self._waits.append((n, event))
            if len(self.answers) >= n:
                event.set()
        return event

    def mark(self) -> float:
        return time.monotonic()

    def summary(self, since: float, until: float) -> dict[str, Any]:
        """The requests sent in [since, until): count, fraction answered 200, p50/p99 (ms) of the
        200s, statuses."""
        with self._lock:
            got = [(s, dt) for t, s, dt in self.answers if since <= t < until]
        ok = sorted(dt for s, dt in got if s == 200)

        def q(p: float) -> float | None:
            return round(1e3 * ok[min(len(ok) - 1, int(p * len(ok)))], 2) if ok else None

        return {"requests": len(got), "fraction_200": round(len(ok) / len(got), 4) if got else None,
                "p50_ms": q(0.5), "p99_ms": q(0.99),
                "statuses": {str(k): v for k, v in sorted(Counter(s for s, _ in got).items())}}


# ---------------------------------------------------------------------------- drawn bodies
def log_uniform(rng: random.Random, lo: float, hi: float) -> int:
    return int(math.exp(rng.uniform(math.log(lo), math.log(hi))))


def evaluate_answer_body(rng: random.Random, queries: int, measures: int, qid_chars: int) -> bytes:
    """/evaluate with ``queries`` queries of a few documents and long qids, ``measures`` measures under
    every convention, per-query values."""
    metrics = ([f"ndcg@{k}" for k in range(1, 11)] + [f"p@{k}" for k in range(1, 11)]
               + [f"dcg@{k}" for k in range(1, 9)] + ["err", "map", "err@10", "dcg"])[:measures]
    qs = []
    for i in range(queries):
        n = rng.randint(2, 8)
        qs.append({"qid": f"{i:08d}" + "q" * (qid_chars - 8), "labels": [rng.randint(0, 2) for _ in range(n)],
                   "scores": [round(rng.random(), 3) for _ in range(n)]})
    return json.dumps({"queries": qs, "metrics": metrics, "convention": "all", "per_query": True},
                      separators=(",", ":")).encode()


def letor_body(rng: random.Random, documents: int, n_features: int, id_chars: int) -> bytes:
    """LETOR lines of ``documents`` documents in queries of 1,000, each with a ``#docid`` of
    ``id_chars`` characters."""
    values = " ".join(f"{f + 1}:0.{rng.randrange(1000):03d}" for f in range(n_features))
    pad = "d" * max(0, id_chars - 8)
    return "".join(f"{j % 3} qid:{j // 1000} {values} #docid = {j:08d}{pad}\n" for j in range(documents)).encode()


# ---------------------------------------------------------------------------- drawing attacks
@dataclass(frozen=True)
class Target:
    """What the attacks need of the service under attack."""

    url: str
    settings: Settings
    n_features: int
    models_dir: Path
    base_version: Path  # a good version to tamper copies of (the default model's)
    token: str | None

    @property
    def host_port(self) -> tuple[str, int]:
        host, port = self.url.split("//")[1].rsplit(":", 1)
        return host, int(port)


VARIANTS = {"answers": ("evaluate_per_query", "rank_relevance_text"),
            "held": ("one_byte_short", "trickle", "declared_length"),
            "artifacts": ("width", "counts", "bloated", "nesting", "checksum")}


def draw(cls: str, variant: str, rng: random.Random, target: Target, scale: float = 1.0,
         seed: int = 0) -> tuple[dict[str, Any], Crowd | Tampered]:
    """One attack of ``cls``/``variant``, its sizes, counts and rates drawn from ``rng`` (``scale``
    shrinks the counts of connections and documents): its description and its driver."""
    s = target.settings
    host, port = target.host_port

    def count(lo: int, hi: int) -> int:
        return max(1, round(rng.randint(lo, hi) * scale))

    if cls == "answers":
        k = count(4, 40)
        read = rng.choice([None, None, s.body_min_rate * rng.uniform(0.3, 1.5)])
        rcvbuf = rng.choice([1024, 4096])
        if variant == "evaluate_per_query":
            measures = rng.randint(8, 32)
            most = s.max_per_query_values // (measures * len(CONVENTION_NAMES))  # more: 413, before the work
            queries = max(50, round(log_uniform(rng, 100, 1.1 * most) * scale))
            qid_chars = rng.choice([64, 128, s.max_id_length])
            body = evaluate_answer_body(rng, queries, measures, qid_chars)
            request = http_request("/evaluate", body)
            desc = {"queries": queries, "measures": measures, "conventions": "all", "qid_chars": qid_chars}
        else:
            line = 40 + 10 * target.n_features
            most = (s.max_body_bytes - 1024) // (line + 200)
            documents = max(200, round(log_uniform(rng, 2000, most) * scale))
            id_chars = rng.randint(16, 200)
            body = letor_body(rng, documents, target.n_features, id_chars)
            request = http_request("/rank?relevance=true", body, "text/plain")
            desc = {"documents": documents, "id_chars": id_chars}
        desc.update(connections=k, body_bytes=len(body), read_rate=None if read is None else round(read),
                    rcvbuf=rcvbuf)
        conns = [Conn(request, len(request), read_rate=read, rcvbuf=rcvbuf, hold_s=4 * s.body_stall_s)
                 for _ in range(k)]
        return desc, Crowd(host, port, conns)
    if cls == "held":
        if variant == "one_byte_short":
            k = count(4, 12)
            length = rng.choice([s.max_body_bytes, log_uniform(rng, s.small_body_bytes, s.max_body_bytes)])
            request = http_request("/rank", b"[" * length)
            conns = [Conn(request, len(request) - 1, read_rate=1e9) for _ in range(k)]
            desc = {"connections": k, "declared": length, "sent": length - 1}
        elif variant == "trickle":
            k = count(8, 48)
            factor = rng.choice([rng.uniform(0.5, 0.95), rng.uniform(1.05, 2.0)])
            rate = s.body_min_rate * factor
            request = http_request("/rank", b"[" * s.max_body_bytes)
            conns = [Conn(request, len(request), send_rate=rate, read_rate=1e9) for _ in range(k)]
            desc = {"connections": k, "declared": s.max_body_bytes, "rate": round(rate),
                    "of_min_rate": round(factor, 3)}
        else:
            k = count(50, 200)
            sent = rng.randint(0, 1000)
            request = http_request("/rank", b"[" * s.max_body_bytes)
            head = len(request) - s.max_body_bytes
            conns = [Conn(request, head + sent, read_rate=1e9) for _ in range(k)]
            desc = {"connections": k, "declared": s.max_body_bytes, "sent": sent}
        return desc, Crowd(host, port, conns)
    value = {"width": lambda: log_uniform(rng, 5_000, 10_000_000),
             "counts": lambda: log_uniform(rng, 10, 5_000_000),
             "bloated": lambda: log_uniform(rng, 20_000, 5_000_000),
             "nesting": lambda: log_uniform(rng, 33, 200_000),
             "checksum": lambda: rng.randrange(10**6)}[variant]()
    reload = target.token is not None and rng.random() < 0.5
    clients = count(2, 6)
    driver = Tampered(target.url, target.models_dir, target.base_version, variant, value, reload, clients,
                      target.n_features, target.token, rounds=max(12, round(40 * scale)), seed=seed)
    return {"tampering": variant, "value": value, "delivery": "reload" if reload else "dropped",
            "clients": clients}, driver


# ---------------------------------------------------------------------------- running one
def run_attack(driver: Crowd | Tampered, steady: Steady, pids: Callable[[], list[int]], resting: dict[int, int],
               bound: int, *, min_s: float, max_s: float, min_requests: int = 0) -> dict[str, Any]:
    """Run ``driver`` while ``steady`` sends, until its ``done`` event and ``min_requests`` more steady
    answers and ``min_s`` seconds, or ``max_s`` seconds; what it did to the service."""
    before = pids()
    peaks_reset = all([reset_peak(p) for p in before])
    rss_at_start = {p: vm(p, "VmRSS") for p in before}
    enough = steady.count_reached(len(steady.answers) + min_requests)
    since = steady.mark()
    driver.start()
    deadline = since + max_s
    done_at: float | None = None
    for event in (driver.done, enough):
        if not event.wait(max(0.0, deadline - time.monotonic())):
            break
    else:
        done_at = time.monotonic() - since
    if done_at is not None and done_at < min_s:
        time.sleep(min_s - done_at)  # the bench's attacks run a fixed length at least (the test's: min_s 0)
    until = steady.mark()
    rises = {p: vm(p, "VmHWM") - resting.get(p, 0) for p in before}
    driver.stop()
    after = pids()
    seen = dict(sorted(driver.seen.items()))
    return {"seconds": round(until - since, 1), "done_event_after_s": None if done_at is None else round(done_at, 1),
            "steady": steady.summary(since, until), "workers_before": before, "workers_after": after,
            "workers_lost": len(set(before) - set(after)),
            "peak_rise_mib": {str(p): round(r / 2**20, 1) for p, r in rises.items()},
            "rss_at_start_mib": {str(p): round((rss_at_start[p] - resting.get(p, 0)) / 2**20, 1) for p in before},
            "peak_reset_at_start": peaks_reset, "memory_bound_mib": round(bound / 2**20, 1),
            "within_memory_bound": all(r <= bound for r in rises.values()), "attackers_saw": seen}


def verdict(result: dict[str, Any]) -> bool:
    """The three properties: no worker lost, memory within the bound, plain /rank answered 200 at
    least ``SERVED_FLOOR`` of the time."""
    served = result["steady"]["fraction_200"]
    return (result["workers_lost"] == 0 and result["within_memory_bound"] and served is not None
            and served >= SERVED_FLOOR)


def run_attacks(classes: list[str], target: Target, pids: Callable[[], list[int]], resting: dict[int, int], *,
                seed: int, per_class: int, attack_s: float, steady_rate: float,
                log: Callable[[str], None] = print) -> tuple[dict[str, Any], dict[str, list[dict[str, Any]]]]:
    """The steady client alone for ``attack_s`` seconds (quiet), then ``per_class`` attacks of each
    class (0: one of each variant; the variants in turn, each drawn), one after another, each for
    ``attack_s`` seconds at least (at most four times that, waiting for its ``done`` event): the
    quiet figures and each attack's."""
    rng = random.Random(seed)
    bound = memory_bound(target.settings)
    out: dict[str, list[dict[str, Any]]] = {}
    with Steady(target.url, target.n_features, rate=steady_rate) as steady:
        since = steady.mark()
        time.sleep(attack_s)
        quiet = steady.summary(since, steady.mark())
        log(f"quiet: {json.dumps(quiet)}")
        for cls in classes:
            for i in range(per_class or len(VARIANTS[cls])):
                variant = VARIANTS[cls][i % len(VARIANTS[cls])]
                desc, driver = draw(cls, variant, rng, target, seed=seed * 1000 + len(out.get(cls, [])))
                result = run_attack(driver, steady, pids, resting, bound, min_s=attack_s, max_s=4 * attack_s)
                if isinstance(driver, Tampered):
                    desc["what"] = driver.what
                result = {"variant": variant, "drawn": desc, "drawn_text": describe(variant, desc), **result}
                result["holds"] = verdict(result)
                out.setdefault(cls, []).append(result)
                log(f"{cls}/{variant}: {json.dumps(result)}")
    return quiet, out


def describe(variant: str, d: dict[str, Any]) -> str:
    """An attack's drawn sizes in a few words."""
    if variant == "evaluate_per_query":
        what = (f"{d['queries']:,} queries ({d['qid_chars']}-character qids) x {d['measures']} measures, "
                "every convention")
    elif variant == "rank_relevance_text":
        what = f"{d['documents']:,} LETOR lines ({d['id_chars']}-character ids), relevance"
    elif variant == "one_byte_short":
        return f"{d['connections']} bodies of {d['declared']:,} bytes held one byte short"
    elif variant == "trickle":
        return f"{d['connections']} bodies trickled at {d['rate']:,} B/s ({d['of_min_rate']:g} x the minimum rate)"
    elif variant == "declared_length":
        return f"{d['connections']} connections declaring {d['declared']:,} bytes, sending {d['sent']}"
    else:
        via = "POST /models/reload with the token, then " if d["delivery"] == "reload" else ""
        return f"{d['what']}; {via}{d['clients']} unauthenticated clients naming it"
    read = "never read" if d["read_rate"] is None else f"read at {d['read_rate']:,} B/s"
    return f"{d['connections']} clients: {what}, {d['body_bytes']:,}-byte bodies; answers {read}"


def table(attacks: dict[str, list[dict[str, Any]]]) -> str:
    """The results as a short text table."""
    rows = [("attack", "200 %", "p50 ms", "p99 ms", "peak rise MiB (bound)", "workers lost", "holds")]
    for cls, results in attacks.items():
        for r in results:
            st = r["steady"]
            rise = max(r["peak_rise_mib"].values(), default=0.0)
            rows.append((f"{cls}/{r['variant']}", f"{100 * (st['fraction_200'] or 0):.1f}", str(st["p50_ms"]),
                         str(st["p99_ms"]), f"{rise} ({r['memory_bound_mib']:g})", str(r["workers_lost"]),
                         "yes" if r["holds"] else "NO"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) for row in rows)
