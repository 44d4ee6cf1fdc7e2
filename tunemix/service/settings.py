"""Service settings: one ``Settings`` read from ``TUNEMIX_*`` environment variables (or ``.env``).

Every default lives here. Example::

    TUNEMIX_MODELS_DIR=models TUNEMIX_DEFAULT_MODEL=default TUNEMIX_WORKERS=2 python -m tunemix.service
"""

from __future__ import annotations

import math
import os
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """Configuration of one service instance (all workers share it through the environment)."""

    model_config = SettingsConfigDict(env_prefix="TUNEMIX_", env_file=".env", extra="ignore")

    models_dir: Path = Field(Path("models"), description="directory holding <name>/vN model versions")
    default_model: str = Field("default", description="model served when a request names none")
    preload: list[str] = Field(default_factory=list,
                               description="further model names loaded at start-up (JSON list)")
    host: str = Field("127.0.0.1", description="address to listen on: loopback unless told otherwise (the "
                                            "container image sets 0.0.0.0, its network being the boundary)")
    port: int = Field(8000, ge=1, le=65535)
    workers: int | None = Field(
        None, ge=1, le=64, description="uvicorn worker processes of `python -m tunemix.service` (default: one per "
                                       "usable core)")
    scoring_threads: int | None = Field(
        None, ge=1, le=256, description="threads a worker may score one list on (default: every usable core)")
    parallel_min_documents: int | None = Field(
        None, ge=0, description="lists shorter than this score on one thread (default: 0 with one worker, "
                                "256 with several: a short list then leaves the other cores to the other "
                                "workers, a long one still takes them all)")
    blas_threads: int = Field(1, ge=1, le=256, description="threads of numpy's OpenBLAS (its idle threads spin "
                                                         "on the cores numba's scoring threads need)")
    concurrency: int | None = Field(
        None, ge=1, le=256, description="requests one worker scores at once (default: cores / workers)")
    inline_max_bytes: int = Field(
        96 * 1024, ge=0, description="a /rank body of at most this many bytes and inline_max_items items is decoded, "
                                     "scored and answered on the event loop when no other request of the worker is "
                                     "scoring (no thread hop), under the request's deadline: a 100-document request "
                                     "holds the loop about 2 ms (100 MSLR documents of 136 features, 86 KB, 2.1 ms "
                                     "in-process); larger ones go to worker threads, so the loop keeps answering "
                                     "/health. 0: always threads")
    inline_max_items: int = Field(
        256, ge=0, description="a /rank body is answered on the event loop only when its items are at most this many "
                               "(tunemix.service.body.body_items: a JSON body's objects and arrays or a LETOR body's "
                               "lines, and one per 8 colons, its sparse keys or id:value pairs; never fewer than its "
                               "documents or its queries; the costliest shapes at 256 take 1.7-2.4 ms in-process): the "
                               "loop's work follows the queries and documents, not the bytes alone (8,000 one-line "
                               "LETOR queries fit in 87 KB and take 120 ms). 0: always threads")
    reload_token: str | None = Field(None, description="bearer token of POST /models/reload; unset disables it")
    log_level: Literal["critical", "error", "warning", "info", "debug"] = "info"
    access_log: bool = Field(False, description="one log line per request (off by default: /metrics counts "
                                                "requests, and a line costs the event loop about 0.1 ms)")
    max_documents: int = Field(100_000, ge=1, description="documents per request (more: HTTP 413)")
    max_queries: int = Field(10_000, ge=1, description="queries per request (more: HTTP 413)")
    max_body_bytes: int = Field(
        4 * 1024 * 1024, ge=1024,
        description="request body size, chunked or not (more: HTTP 413, saying how to split the request). "
                    "Decoding a body holds the worker's GIL in one call: at 4 MiB the costliest JSON shapes take "
                    "0.1-0.2 CPU-s on 2 busy cores (python -m bench.bench_request_cost); decoded, a body raises the "
                    "worker's peak memory by up to DECODED_BODY_MULTIPLE times the limit")
    max_inflight_bytes: int = Field(
        16 * 1024 * 1024, ge=1024,
        description="request bytes one worker holds at once: bodies being read, waiting and processed, and answers "
                    "not yet written (a body that would pass it while other requests hold bytes: HTTP 503 with "
                    "Retry-After; a body alone is always let in; an answer that would pass it while other answers or "
                    "large bodies hold bytes: dropped, its connection reset). Two bodies are decoded at a time "
                    "(tunemix.service.lanes.PYTHON_LANES), so a worker's peak memory stays below its resting size + 2 "
                    "x DECODED_BODY_MULTIPLE x max_body_bytes + max_inflight_bytes (224 MiB with the defaults)")
    inflight_reserve_bytes: int | None = Field(
        None, ge=0,
        description="the part of max_inflight_bytes only small bodies (at most small_body_bytes) may hold: larger "
                    "bodies together hold at most max_inflight_bytes - inflight_reserve_bytes (one more: HTTP 503 "
                    "with Retry-After), so a few large bodies held one byte short never refuse small requests. "
                    "Default: a quarter of max_inflight_bytes (4 MiB), at most max_inflight_bytes - max_body_bytes "
                    "(a body of the largest size alone is always let in)")
    small_body_bytes: int = Field(
        128 * 1024, ge=0,
        description="bodies of at most this many bytes may hold the in-flight reserve (inflight_reserve_bytes); a "
                    "body counts as large from its first byte past it")
    body_timeout_s: float = Field(30.0, gt=0, le=3600,
                                  description="seconds a client has to send the whole body of a request "
                                              "(more: HTTP 408 and the connection is closed)")
    body_stall_s: float = Field(
        5.0, gt=0, le=3600,
        description="a body being received must bring body_min_rate x body_stall_s bytes (or its end) within every "
                    "body_stall_s seconds (less: HTTP 408 and the connection is closed): a body that stops "
                    "arriving, one byte short or not, stops holding the worker's in-flight bytes within this many "
                    "seconds, not body_timeout_s. `python -m tunemix.service`: the same for an answer, whose bytes not "
                    "yet written count in the in-flight bytes as a large body's (a client that takes less of it, or "
                    "not all of it within body_timeout_s: the connection is reset, the bytes dropped)")
    body_min_rate: int = Field(
        8192, ge=0,
        description="bytes a second a body, or an answer, must keep moving at, measured over each body_stall_s "
                    "window (0: any byte starts a new window)")
    header_timeout_s: float = Field(10.0, gt=0, le=3600,
                                    description="`python -m tunemix.service`: seconds a client has to send a "
                                                "request's line and "
                                                "headers, from the connection's start or the end of the previous "
                                                "response (more: HTTP 408 and the connection is closed; an idle "
                                                "connection is closed without an answer)")
    max_header_bytes: int = Field(32 * 1024, ge=1024, le=16 * 1024 * 1024,
                                  description="`python -m tunemix.service`: bytes of a request's line and headers "
                                              "together "
                                              "(more: HTTP 431 and the connection is closed)")
    request_timeout_s: float = Field(
        10.0, gt=0, le=3600,
        description="seconds a request may take, counted from its first byte (`python -m tunemix.service` stamps "
                    "the moment it reads the first byte of the request's head; elsewhere the handler's start): its "
                    "wait in the worker, its body's arrival and its work count, on the event loop as on threads (the "
                    "deadline; a client may ask for another with ?timeout_s= or the X-Request-Timeout-S header, "
                    "0 < seconds <= max_request_timeout_s). A body still arriving when it passes is cut off: HTTP 504 "
                    "and the connection closed, nothing done. Checked between batches of every loop that can run "
                    "long; past it: HTTP 504 and the work stops; a request whose deadline passed while it waited for "
                    "a thread behind other requests: HTTP 503 with Retry-After")
    max_request_timeout_s: float = Field(60.0, gt=0, le=3600,
                                         description="the longest deadline a client may ask for (a longer ask: "
                                                     "HTTP 422 naming timeout_s or the header and this bound)")
    explain_timeout_s: float = Field(
        5.0, gt=0, le=3600,
        description="/rank \"explain\": seconds a request's explanations may take (within its deadline; more: "
                    "HTTP 504; checked before each explained query and between batches of coalitions)")
    explain_concurrency: int = Field(
        1, ge=1, le=64,
        description="/rank requests with explanations one worker works on at once (their own lane: they never "
                    "hold the scoring slots or Python lanes plain /rank requests wait for; the others wait for the "
                    "lane within their deadline)")
    large_body_bytes: int = Field(
        1024 * 1024, ge=0,
        description="a body of more than this many bytes is large work: a /rank request is decoded, scored (on one "
                    "thread) and answered in the worker's large lane, another route's body decoded there "
                    "(tunemix.service.lanes.large_work): its own threads, large_concurrency of them, never the "
                    "Python lanes or scoring slots small requests wait for")
    large_body_items: int = Field(
        20_000, ge=0,
        description="a /rank body of more than this many items (tunemix.service.body.body_items: never fewer than "
                    "its documents or its queries) is large work too, whatever its bytes (100,000 documents of 5 "
                    "features fit in 3.4 MB)")
    large_concurrency: int = Field(
        1, ge=1, le=64,
        description="large requests one worker works on at once (their own lane, one core each at most; the others "
                    "wait for the lane within their deadline). Each raises the worker's peak memory by up to "
                    "DECODED_BODY_MULTIPLE x max_body_bytes")
    large_nice: int = Field(
        19, ge=0, le=19,
        description="the large lane's threads run this many nice steps below the worker (Linux): a small request's "
                    "threads take a core from large work as soon as they wake. 0: the worker's priority")
    large_idle: bool = Field(
        True,
        description="the large lane's threads run under Linux's SCHED_IDLE policy: only on a core no other thread "
                    "wants, given up at once to a thread that wakes (plain /rank p99 beside two clients of 4 MiB "
                    "requests 2.7-2.8 times quiet, against 3.2-3.6 at nice 19 alone). On a machine whose cores are "
                    "always busy, large requests then wait, within their deadline")
    explain_max_documents: int = Field(
        20, ge=0, description="/rank \"explain\": documents explained per request at most (each query's returned "
                              "top_k; more: HTTP 422 asking for a smaller top_k). 0 disables explanations")
    explain_budget: int = Field(
        8192, ge=1, description="/rank \"explain\": forest rows an explanation may score per explained document. "
                                "The exact, deterministic explanations (every model but a rank-fusion mix) score "
                                "no coalitions; a model explained by method=\"shapley\" (a rank-fusion mixer) "
                                "samples within it, with its standard error. Enforced as the rows are scored: a "
                                "request may score at most (explained documents) x explain_budget rows for its "
                                "explanations (more: HTTP 422)")
    max_id_length: int = Field(256, ge=1, description="characters of a document id or qid (more: HTTP 422)")
    max_metrics: int = Field(32, ge=1, le=1000, description="/evaluate: measures per request (more: HTTP 413)")
    max_per_query_values: int = Field(
        200_000, ge=1, description="/evaluate with per_query: queries x measures x conventions in the answer "
                                   "(more: HTTP 413); their bytes, each keyed by its qid, count in "
                                   "max_answer_bytes")
    max_answer_bytes: int = Field(
        32 * 1024 * 1024, ge=64 * 1024,
        description="bytes of JSON one answer of /rank, /evaluate or /fuse may take, as bounded from the decoded "
                    "request before any scoring, fusion or evaluation (more: HTTP 413 naming the query where the "
                    "running total passes it). The bound counts every float at 24 bytes, every id and qid as "
                    "encoded (escapes included), the keys and punctuation: /rank and /fuse each query's top_k "
                    "documents (id, score, rank; with relevance the expected grade and one probability per grade; "
                    "with explanations their contributions), /evaluate per convention each measure's mean, flag "
                    "and warnings, and with per_query each query's value of each measure keyed by its qid (1,000 "
                    "queries of 256-character qids x 20 measures x the ten conventions: about 57 MB, refused). "
                    "An answer's bytes not yet written count in max_inflight_bytes")
    max_label: int = Field(1000, ge=1, le=1_000_000,
                           description="/evaluate: the largest relevance label (more: HTTP 422; the gain tables "
                                       "have one entry per label up to it)")
    max_fuse_systems: int = Field(64, ge=1, description="/fuse: systems per query (more: HTTP 413)")
    max_fuse_ids: int = Field(10_000, ge=1, description="/fuse: ids per system (more: HTTP 413)")
    max_condorcet_pairs: int = Field(
        25_000_000, ge=1,
        description="/fuse \"condorcet\": the sum over the request's queries of n^2, n a query's distinct ids "
                    "(more: HTTP 413 naming the query; the default is one query of 5,000 ids or, e.g., 25 of 1,000). "
                    "Condorcet compares every pair of a query's documents across its S systems: O(n^2 S) time, "
                    "O(n S) memory (no n x n matrix); at most 0.25 CPU-s per 25 million pairs with up to 64 "
                    "systems, measured by bench/bench_fuse_memory.py of commit d12ea4b)")
    max_cached_versions: int = Field(
        4, ge=1, description="older versions kept loaded for explicit requests. A request naming a version not in "
                             "memory loads it in a thread, never on the event loop, one load per version at a time "
                             "(concurrent requests for it wait for that load): about 30 ms of a thread for the demo "
                             "model, so rotating among more versions than this costs one load per request")
    max_artifact_bytes: int = Field(
        256 * 2**20, ge=1024,
        description="a model version's arrays, uncompressed, at most (the zip directory and every .npy header are "
                    "checked before any array is read: a zip bomb or an absurd shape is refused). A version that "
                    "cannot be loaded, for this or any reason, is logged and reported with the reason: by /ready "
                    "(status \"failed\") when it is the default model, by a 422 when a request names it")
    state_dir: Path | None = Field(None, description="shared directory of the workers: the versions served "
                                                      "(pinned by the first worker at start-up and by reloads, "
                                                      "for as long as the directory lives) and what each "
                                                      "worker serves (`python -m tunemix.service` makes a fresh one "
                                                      "per "
                                                      "start when workers > 1)")
    reload_wait_s: float = Field(60.0, ge=0, description="POST /models/reload waits up to this long for every "
                                                         "worker to serve the new version before it answers "
                                                         "(the answer says which have not)")
    state_poll_s: float = Field(1.0, gt=0, description="how often a worker checks state_dir for reloads")

    @model_validator(mode="after")
    def _a_body_alone_is_admitted(self) -> Settings:
        if self.max_inflight_bytes < self.max_body_bytes:
            raise ValueError(f"max_inflight_bytes ({self.max_inflight_bytes}) must be at least max_body_bytes "
                             f"({self.max_body_bytes}): a worker must be able to take one body of the largest size")
        room = self.max_inflight_bytes - self.max_body_bytes
        if self.inflight_reserve_bytes is not None and self.inflight_reserve_bytes > room:
            raise ValueError(f"inflight_reserve_bytes ({self.inflight_reserve_bytes}) must be at most "
                             f"max_inflight_bytes - max_body_bytes ({room}): a worker must be able to take one body "
                             "of the largest size")
        return self

    def inflight_reserve(self) -> int:
        """``inflight_reserve_bytes``, else a quarter of ``max_inflight_bytes``, at most what leaves
        room for one body of ``max_body_bytes``."""
        if self.inflight_reserve_bytes is not None:
            return self.inflight_reserve_bytes
        return min(self.max_inflight_bytes // 4, self.max_inflight_bytes - self.max_body_bytes)

    def worker_processes(self) -> int:
        """Workers ``python -m tunemix.service`` starts: ``workers``, else one per usable core."""
        return self.workers if self.workers is not None else usable_cores()

    def this_process_workers(self) -> int:
        """Workers sharing the machine as this process knows it: ``python -m tunemix.service`` passes its count
        on; an app served some other way (``uvicorn tunemix.service.main:app``, tests) counts as one."""
        return self.workers if self.workers is not None else 1

    def scoring_thread_count(self) -> int:
        """Threads one list may score on: ``scoring_threads``, else every usable core (CPU
        affinity capped by a cgroup quota, so a container limited by ``--cpus 2`` on a larger
        host takes 2, not numba's default of every host CPU)."""
        return self.scoring_threads if self.scoring_threads is not None else usable_cores()

    def scoring_concurrency(self) -> int:
        """Requests a worker scores side by side: ``concurrency``, else its share of the cores."""
        if self.concurrency is not None:
            return self.concurrency
        return max(1, usable_cores() // self.this_process_workers())

    def parallel_floor(self) -> int:
        """``parallel_min_documents``, else 0 for a lone worker and ``SHARED_PARALLEL_MIN_DOCUMENTS``
        when several share the cores."""
        if self.parallel_min_documents is not None:
            return self.parallel_min_documents
        return 0 if self.this_process_workers() == 1 else SHARED_PARALLEL_MIN_DOCUMENTS


#: How much a request raises a worker's peak memory, per byte of the body limit: measured worst
#: 25.5 (4 MiB of empty /rank rows, 102 MB; ``python -m bench.bench_request_cost``). A body of many
#: small objects reaches more times its own size and stays within this times the limit: the
#: 100,000 one-id /fuse systems the limits let in take 51 times their 1.2 MB (60 MB), as /fuse and
#: /evaluate are decoded by msgspec; a body at the limit refused after the typed decode, 14 times
#: (57 MB).
DECODED_BODY_MULTIPLE = 26

#: With several workers, lists of fewer documents score on one thread. Measured on 2 cores, the
#: MQ2008 model (640 members), two workers: 100-document lists at 200/s have the same p99 on one
#: thread as on two (15.4 and 15.9 ms against 18.8 and 16.2), and a parallel launch costs a
#: request about a tenth more CPU; 1,000-document lists at 20/s take p50 35-37 ms on one thread
#: against 26-29 ms on two.
SHARED_PARALLEL_MIN_DOCUMENTS = 256


def usable_cores(cpu_max: Path = Path("/sys/fs/cgroup/cpu.max")) -> int:
    """Cores this process may use: its CPU affinity where the system reports one, capped by a
    cgroup v2 CPU quota (a container started with ``--cpus 2`` on a larger host counts 2)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:
        quota, period = cpu_max.read_text().split()[:2]
        if quota != "max":
            cores = min(cores, max(1, math.ceil(int(quota) / int(period))))
    except (OSError, ValueError):
        pass
    return cores


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide settings (read once)."""
    return Settings()
