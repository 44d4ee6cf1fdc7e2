"""What one request costs a worker: CPU seconds per body byte, peak memory per body byte, and how
long the worker's event loop stalls, per endpoint, over a corpus of hostile and ordinary bodies.

    python -m bench.bench_request_cost              # every case (~5-10 min on 2 busy cores)
    python -m bench.bench_request_cost --only rank   # the cases whose name contains "rank"

Writes ``bench/results/request_cost.json`` (``--name``: another name).

1. **Server.** The real service, ``python -m tunemix.service`` with one worker (``TUNEMIX_WORKERS=1``: the
   worker is the process started), its default settings otherwise, on 127.0.0.1, serving a small
   model trained here on generated data (46 features, the MQ2008 count). A fresh server for each
   case: Python's allocator keeps freed memory, so a worker that served one large body would
   hide the next one's peak. The benchmark waits for ``/ready`` with ``"kernels": "warm"`` and
   sends one small request to the case's endpoint before measuring.
2. **Measures**, from ``/proc/<pid>``: CPU seconds (``utime + stime``, every thread) over the
   case; the peak resident memory's rise over the case (``VmHWM`` after, against ``VmRSS``
   before); the longest ``/health`` answer while the case runs (polled back to back on another
   connection: how long the event loop was held); the status of each answer, and whether the
   worker survived. Per endpoint the worst ``cpu_s_per_mib`` and ``peak_rise_per_body_byte``;
   a body under 64 KiB counts as 64 KiB there (a request's fixed cost is not a cost per byte).
3. **Corpus** (``cases()``): hostile shapes (empty rows, zeros, a long LETOR line, labels, ids,
   empty lists where ids go, a repeated or escaped key) at 60 MiB and at the body limit
   (``TUNEMIX_MAX_BODY_BYTES``: the largest body a client may send), small hostile bodies
   (60,000 sparse keys, 200 metrics a query, a label of 1e6, a 100,000-character docid), ordinary
   bodies, rows either side of the dense pass's row floor, and four large bodies at once.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from bench.common import ROOT, machine_probe_ms, write_result

N_FEATURES = 46
MIB = 1024 * 1024
#: bodies smaller than this count as this large in the per-byte figures
SMALL_BODY = 64 * 1024

MODEL_CONFIG = """
name = "default"
seed = 1
[data.synthetic]
queries = [30, 10, 10]
docs_per_query = [8, 20]
features = {features}
levels = 3
seed = 3
[members]
views = ["raw", "raw+std"]
label_groupings = ["original"]
calibrators = ["shift", "rbc:linear:gain"]
[[members.adaboost]]
base = "tree"
n_leaves = 4
n_iterations = 20
checkpoints = [10, 20]
[mixer]
compare = ["one_best"]
[run]
backend = "sequential"
report_plots = false
"""


# ---------------------------------------------------------------------------- bodies
def repeat_to(head: bytes, unit: bytes, tail: bytes, size: int) -> bytes:
    """``head + unit * k + tail`` of about ``size`` bytes (``unit`` a JSON list item with its comma;
    the last comma dropped)."""
    k = max(1, (size - len(head) - len(tail)) // len(unit))
    return head + (unit * k)[:-1] + tail


def rank_empty_rows(size: int) -> bytes:
    return repeat_to(b'{"queries":[{"qid":1,"ids":[1],"features":[', b"[],", b"]}]}", size)


def rank_zeros(size: int) -> bytes:
    return repeat_to(b'{"queries":[{"qid":1,"ids":[1],"features":[[', b"0,", b"]]}]}", size)


def dense_row(j: int) -> str:
    return "[" + ",".join(f"{((j * 7 + f) % 1000) / 1000:.6f}" for f in range(N_FEATURES)) + "]"


def rank_documents(size: int) -> bytes:
    """Ordinary queries of 1,000 documents each (the documents form) up to ``size`` bytes."""
    rows = [dense_row(j) for j in range(1000)]
    query = ",".join(f'{{"id":"d{j}","features":{r}}}' for j, r in enumerate(rows))
    one = len(query) + 40
    n = max(1, min(size // one, 100))
    body = ",".join(f'{{"qid":"q{q}","documents":[{query}]}}' for q in range(n))
    return f'{{"queries":[{body}]}}'.encode()


def sparse_keys(n: int, repeat_last: bool) -> str:
    keys = ",".join(f'"{k}":0.5' for k in range(1, n + 1))
    return "{" + keys + (',"1":0.5' if repeat_last else "") + "}"


def rank_sparse(_: int) -> bytes:
    return f'{{"queries":[{{"qid":1,"documents":[{{"id":"a","features":{sparse_keys(60_000, True)}}}]}}]}}'.encode()


def letor_long_line(size: int) -> bytes:
    return b"0 qid:1" + b" 1:0" * ((size - 8) // 4) + b"\n"


def letor_lines(size: int) -> bytes:
    line = "1 qid:{q} " + " ".join(f"{f + 1}:0.{f:03d}" for f in range(N_FEATURES)) + " #docid = d{j}\n"
    lines = [line.format(q=j // 1000, j=j) for j in range(max(1, size // len(line)))]
    return "".join(lines[:100_000]).encode()


def evaluate_labels(size: int) -> bytes:
    return repeat_to(b'{"queries":[{"qid":1,"labels":[', b"0,", b"]}]}", size)


def evaluate_scores(size: int) -> bytes:
    """Labels and scores of as many documents as fit, in queries of 1,000."""
    q = '{"qid":"q%d","labels":[' + ",".join(str(j % 3) for j in range(1000)) + '],"scores":[' + ",".join(
        f"{(j * 37 % 1000) / 1000:.6f}" for j in range(1000)) + "]}"
    n = max(1, min(size // len(q), 100))
    return ('{"queries":[' + ",".join(q % i for i in range(n)) + '],"metrics":["ndcg@10","err","map"]}').encode()


def evaluate_scores_all(size: int) -> bytes:
    """``evaluate_scores`` with 32 measures (the default TUNEMIX_MAX_METRICS) under every convention."""
    metrics = [f"ndcg@{k}" for k in range(1, 11)] + [f"p@{k}" for k in range(1, 11)] + [
        f"dcg@{k}" for k in range(1, 9)] + ["err", "map", "err@10", "dcg"]
    return evaluate_scores(size).replace(b'"metrics":["ndcg@10","err","map"]}', (
        '"metrics":' + json.dumps(metrics) + ',"convention":"all"}').encode())


def evaluate_metrics(_: int) -> bytes:
    queries = ",".join(f'{{"qid":{i},"labels":[1,0],"scores":[0.5,0.2]}}' for i in range(10_000))
    metrics = ",".join(f'"dcg@{k}"' for k in range(1, 201))
    return f'{{"queries":[{queries}],"metrics":[{metrics}],"convention":"all","per_query":true}}'.encode()


def evaluate_label(_: int) -> bytes:
    metrics = ",".join(f'"dcg@{k}"' for k in range(1, 1001))
    return (f'{{"queries":[{{"qid":1,"labels":[1000000],"scores":[1.0]}}],"metrics":[{metrics}],'
            '"convention":"all"}').encode()


def evaluate_sparse(_: int) -> bytes:
    return (f'{{"model":"default","queries":[{{"qid":1,"labels":[1],"documents":[{{"id":"a","features":'
            f'{sparse_keys(60_000, True)}}}]}}]}}').encode()


def evaluate_long_docid(_: int) -> bytes:
    ids = ["x" * 256] + [str(i) for i in range(1, 100_000)]
    body = {"queries": [{"qid": 1, "labels": [i % 2 for i in range(100_000)], "docids": ids,
                         "ranking": ids[::-1]}], "metrics": ["ndcg@10"], "convention": "trec"}
    return json.dumps(body, separators=(",", ":")).encode()


def fuse_one_id_systems(size: int) -> bytes:
    """Systems of one id each: a validated model object every 12 bytes (the costliest /fuse shape)."""
    return repeat_to(b'{"queries":[{"qid":1,"systems":[', b'{"ids":[0]},', b"]}]}", size)


def fuse_one_id_systems_accepted(_: int) -> bytes:
    """The most one-id systems the limits let in: 100,000, 64 to a query."""
    query = '{"qid":%d,"systems":[' + ",".join(['{"ids":[0]}'] * 64) + "]}"
    return ('{"queries":[' + ",".join(query % i for i in range(100_000 // 64)) + "]}").encode()


def evaluate_small_queries(_: int) -> bytes:
    """The most queries the limits let in (10,000), of one document each."""
    return ('{"queries":[' + ",".join(f'{{"qid":{i},"labels":[1],"scores":[0.5]}}' for i in range(10_000))
            + "]}").encode()


def evaluate_empty_queries(size: int) -> bytes:
    """Queries without labels: a validated model object every 23 bytes."""
    return repeat_to(b'{"queries":[', b'{"qid":1,"labels":[]},', b"]}", size)


def fuse_ids(size: int) -> bytes:
    return repeat_to(b'{"queries":[{"qid":1,"systems":[{"ids":[', b"0,", b"]}]}]}", size)


def fuse_systems(size: int) -> bytes:
    """Queries of 10 systems of 1,000 ids each (half shared), as many as fit."""
    systems = ",".join('{"ids":[' + ",".join(f'"d{(s * 500 + j) % 5000}"' for j in range(1000)) + "]}"
                       for s in range(10))
    q = '{"qid":"q%d","systems":[' + systems + "]}"
    n = max(1, min(size // len(q), 10))  # 100,000 entries at most: TUNEMIX_MAX_DOCUMENTS
    return ('{"queries":[' + ",".join(q % i for i in range(n)) + "]}").encode()


def fuse_empty_id_lists(size: int) -> bytes:
    """Empty lists where a system's ids go (a validator error each)."""
    return repeat_to(b'{"queries":[{"qid":"q","systems":[{"ids":[', b"[],", b"]}]}]}", size)


def evaluate_empty_docid_lists(size: int) -> bytes:
    return repeat_to(b'{"queries":[{"qid":"q","labels":[0],"scores":[0],"docids":[', b"[],", b"]}]}", size)


def evaluate_empty_label_lists(size: int) -> bytes:
    return repeat_to(b'{"queries":[{"qid":"q","labels":[', b"[],", b"]}]}", size)


def rank_columnar(size: int) -> bytes:
    """Ordinary columnar queries of 1,000 documents, as many as fit (the common large body)."""
    rows = ",".join(dense_row(j) for j in range(1000))
    ids = ",".join(f'"d{j}"' for j in range(1000))
    q = '{"qid":"q%d","ids":[' + ids + '],"features":[' + rows + "]}"
    n = max(1, min(size // len(q), 100))
    return ('{"queries":[' + ",".join(q % i for i in range(n)) + "]}").encode()


def rank_narrow_rows(width: int) -> Callable[[int], bytes]:
    """Columnar rows of ``width`` zeros (``[0,0,...]``, 2 * width + 2 bytes with the comma), as many as
    fit in ``size`` (the dense pass's ``MIN_ROW_BYTES`` floor: 16 bytes is 7 zeros, 14 bytes 6)."""
    unit = ("[" + ",".join(["0"] * width) + "],").encode()
    return lambda size: repeat_to(b'{"queries":[{"qid":1,"ids":[1],"features":[', unit, b"]}]}", size)


def rank_columnar_repeated_key(size: int) -> bytes:
    """``rank_columnar`` with ``"top_k"`` twice (refused: a repeated key is a 422)."""
    return rank_columnar(size)[:-1] + b',"top_k":1,"top_k":2}'


def rank_escaped_explain(size: int) -> bytes:
    """``"\u0065xplain"`` (an escaped key) on a body under the inline threshold (64 KiB)."""
    rows = ",".join(dense_row(j) for j in range(size))
    ids = ",".join(f'"d{j}"' for j in range(size))
    return ('{"queries":[{"qid":"q","ids":[' + ids + '],"features":[' + rows + ']}],"top_k":20,'
            '"\\u0065xplain":5}').encode()


@dataclass(frozen=True)
class Case:
    name: str
    path: str
    make: Callable[[int], bytes]
    size: str  # "60MiB", "limit", "1MiB", "fixed" or a count passed as it is
    content_type: str = "application/json"
    query: str = ""
    concurrent: int = 1


def cases() -> list[Case]:
    out = []
    for size in ("60MiB", "limit"):
        out += [Case(f"rank_empty_rows_{size}", "/rank", rank_empty_rows, size),
                Case(f"rank_zeros_{size}", "/rank", rank_zeros, size),
                Case(f"rank_letor_line_{size}", "/rank", letor_long_line, size, "text/plain"),
                Case(f"evaluate_labels_{size}", "/evaluate", evaluate_labels, size),
                Case(f"fuse_ids_{size}", "/fuse", fuse_ids, size)]
    out += [Case("rank_zeros_limit_x4", "/rank", rank_zeros, "limit", concurrent=4),
            Case("evaluate_labels_limit_x4", "/evaluate", evaluate_labels, "limit", concurrent=4),
            Case("fuse_ids_limit_x4", "/fuse", fuse_ids, "limit", concurrent=4),
            Case("rank_letor_line_16MiB", "/rank", letor_long_line, "16MiB", "text/plain"),
            Case("rank_sparse_60000_keys", "/rank", rank_sparse, "fixed"),
            Case("evaluate_200_metrics_per_query", "/evaluate", evaluate_metrics, "fixed"),
            Case("evaluate_label_1e6_dcg1000_all", "/evaluate", evaluate_label, "fixed"),
            Case("evaluate_sparse_60000_keys", "/evaluate", evaluate_sparse, "fixed"),
            Case("evaluate_long_docid_100000", "/evaluate", evaluate_long_docid, "fixed"),
            Case("rank_documents_1MiB", "/rank", rank_documents, "1MiB"),
            Case("rank_documents_limit", "/rank", rank_documents, "limit"),
            Case("rank_letor_lines_limit", "/rank", letor_lines, "limit", "text/plain"),
            Case("evaluate_scores_limit", "/evaluate", evaluate_scores, "limit"),
            Case("evaluate_scores_32_measures_all_limit", "/evaluate", evaluate_scores_all, "limit"),
            Case("fuse_systems_limit", "/fuse", fuse_systems, "limit"),
            Case("fuse_one_id_systems_limit", "/fuse", fuse_one_id_systems, "limit"),
            Case("evaluate_empty_queries_limit", "/evaluate", evaluate_empty_queries, "limit"),
            Case("fuse_one_id_systems_accepted", "/fuse", fuse_one_id_systems_accepted, "fixed"),
            Case("evaluate_small_queries_10000", "/evaluate", evaluate_small_queries, "fixed"),
            # empty lists, repeated and escaped keys
            Case("fuse_empty_id_lists_limit", "/fuse", fuse_empty_id_lists, "limit"),
            Case("evaluate_empty_docid_lists_limit", "/evaluate", evaluate_empty_docid_lists, "limit"),
            Case("evaluate_empty_label_lists_limit", "/evaluate", evaluate_empty_label_lists, "limit"),
            Case("rank_columnar_limit", "/rank", rank_columnar, "limit"),
            Case("rank_columnar_repeated_key_limit", "/rank", rank_columnar_repeated_key, "limit"),
            Case("rank_escaped_explain_150_documents", "/rank", rank_escaped_explain, "150"),
            # the dense pass's floor of MIN_ROW_BYTES a row (tunemix/service/dense_body.py), at 1 MiB: at the floor
            # (taken by the dense pass) and just under it (the one pass's)
            Case("rank_rows_of_16_bytes_1MiB", "/rank", rank_narrow_rows(7), str(MIB - 64)),
            Case("rank_rows_of_14_bytes_1MiB", "/rank", rank_narrow_rows(6), str(MIB - 64))]
    return out


def body_size(size: str, limit: int) -> int:
    if size.isdigit():
        return int(size)
    return {"60MiB": 60 * MIB, "16MiB": 16 * MIB, "1MiB": MIB, "fixed": 0}.get(size, limit - 1024)


# ---------------------------------------------------------------------------- the server
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def train_model(models: Path) -> None:
    from tunemix.train.config import load_config
    from tunemix.train.train import train

    cfg_path = models.parent / "model.toml"
    cfg_path.write_text(MODEL_CONFIG.format(features=N_FEATURES))
    train(load_config(cfg_path, {"run.models_dir": str(models)}), progress=False)


def proc_status(pid: int) -> dict[str, int]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmHWM", "VmRSS"):
            out[key] = int(value.split()[0]) * 1024
    return out


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Server:
    """``python -m tunemix.service`` of the tree ``cwd`` (default: this one) with ``workers`` workers."""

    def __init__(self, models: Path, log_path: Path, *, workers: int = 1, cwd: Path = ROOT,
                 env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "TUNEMIX_MODELS_DIR": str(models), "TUNEMIX_DEFAULT_MODEL": "default",
               "TUNEMIX_WORKERS": str(workers), "TUNEMIX_PORT": str(self.port), "TUNEMIX_HOST": "127.0.0.1",
               "TUNEMIX_LOG_LEVEL": "warning",
               # the tree first; the caller's own entries after it (packages installed beside the venv)
               "PYTHONPATH": os.pathsep.join([str(cwd), *filter(None, [os.environ.get("PYTHONPATH")])]),
               **(env or {})}
        env.pop("PROMETHEUS_MULTIPROC_DIR", None)
        self.log = log_path.open("ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "tunemix.service"], cwd=cwd, env=env, stdout=self.log,
                                     stderr=subprocess.STDOUT, start_new_session=True)

    def wait_warm(self, timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        with httpx.Client(base_url=self.url, timeout=10) as c:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"the server exited with {self.proc.returncode}")
                try:
                    r = c.get("/ready")
                    if r.status_code == 200 and r.json().get("kernels") == "warm":
                        return
                except httpx.TransportError:
                    pass
                time.sleep(0.2)
        raise RuntimeError("the server did not get ready")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()


WARM_BODIES = {
    "/rank": b'{"queries":[{"qid":1,"ids":["a","b"],"features":[' + (dense_row(1) + "," + dense_row(2)).encode()
             + b"]}]}",
    "/evaluate": b'{"queries":[{"qid":1,"labels":[1,0],"scores":[0.5,0.2]}],"convention":"all",'
                 b'"metrics":["ndcg@10","err","map","p@5","dcg@3"]}',
    "/fuse": b'{"queries":[{"qid":1,"systems":[{"ids":["a","b"]},{"ids":["b"],"scores":[1.0]}]}]}',
}


def health_poller(url: str, stop: threading.Event, worst: list[float]) -> None:
    """``/health`` back to back until ``stop``; ``worst[0]``: the slowest answer (s)."""
    with httpx.Client(base_url=url, timeout=120) as c:
        while not stop.is_set():
            t0 = time.perf_counter()
            try:
                c.get("/health")
            except httpx.TransportError:
                worst[0] = float("inf")
                return
            worst[0] = max(worst[0], time.perf_counter() - t0)
            time.sleep(0.02)


def measure(case: Case, body: bytes, models: Path, work: Path) -> dict[str, Any]:
    server = Server(models, work / "server.log")
    try:
        server.wait_warm()
        pid = server.proc.pid
        with httpx.Client(base_url=server.url, timeout=600) as c:
            ctype = {"Content-Type": "text/plain" if case.path == "/rank" and case.content_type == "text/plain"
                     else "application/json"}
            warm = WARM_BODIES[case.path] if ctype["Content-Type"] == "application/json" else (
                b"1 qid:1 1:0.5 2:0.1\n0 qid:1 1:0.1\n")
            assert c.post(case.path, content=warm, headers=ctype).status_code == 200
        before_rss = proc_status(pid)["VmRSS"]
        before_cpu = cpu_seconds(pid)
        stop, worst = threading.Event(), [0.0]
        poller = threading.Thread(target=health_poller, args=(server.url, stop, worst), daemon=True)
        poller.start()
        results: list[tuple[int, str]] = []

        def send() -> None:
            try:
                with httpx.Client(base_url=server.url, timeout=600) as c:
                    r = c.post(case.path + case.query, content=body, headers=ctype)
                    results.append((r.status_code, r.text[:300]))
            except httpx.TransportError as exc:
                results.append((0, f"{type(exc).__name__}: {exc}"))

        t0 = time.perf_counter()
        senders = [threading.Thread(target=send) for _ in range(case.concurrent)]
        for t in senders:
            t.start()
        for t in senders:
            t.join()
        wall = time.perf_counter() - t0
        stop.set()
        poller.join()
        alive = server.proc.poll() is None
        after = proc_status(pid) if alive else {"VmHWM": 0}
        cpu = cpu_seconds(pid) - before_cpu if alive else None
        total = len(body) * case.concurrent
        counted = max(total, SMALL_BODY)
        rise = after["VmHWM"] - before_rss if alive else None
        return {
            "endpoint": case.path, "body_bytes": len(body), "concurrent": case.concurrent,
            "statuses": sorted({s for s, _ in results}), "detail": results[0][1] if results else "",
            "worker_survived": alive, "wall_s": round(wall, 3), "cpu_s": None if cpu is None else round(cpu, 3),
            "cpu_s_per_mib": None if cpu is None else round(cpu / counted * MIB, 4),
            "peak_rise_mib": None if rise is None else round(rise / MIB, 1),
            "peak_rise_per_body_byte": None if rise is None else round(max(rise, 0) / counted, 2),
            "worst_health_s": round(worst[0], 3) if worst[0] != float("inf") else None,
        }
    finally:
        server.stop()


def summary(rows: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Per endpoint: the worst figures over its cases (a killed worker counts as unbounded)."""
    out: dict[str, Any] = {}
    for name, r in rows.items():
        e = out.setdefault(r["endpoint"], {"cases": 0, "workers_lost": 0, "worst_cpu_s_per_mib": 0.0,
                                           "worst_peak_rise_per_body_byte": 0.0, "worst_cpu_s": 0.0,
                                           "worst_health_s": 0.0, "worst_case": {}})
        e["cases"] += 1
        if not r["worker_survived"]:
            e["workers_lost"] += 1
            continue
        for key, field in (("worst_cpu_s_per_mib", "cpu_s_per_mib"), ("worst_peak_rise_per_body_byte",
                                                                       "peak_rise_per_body_byte"),
                           ("worst_cpu_s", "cpu_s"), ("worst_health_s", "worst_health_s")):
            if r[field] is not None and r[field] >= e[key]:
                e[key] = r[field]
                e["worst_case"][key] = name
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default="", help="run the cases whose name contains this (or one of these, "
                                                   "comma-separated)")
    parser.add_argument("--name", default="request_cost", help="result file name (bench/results/<name>.json)")
    args = parser.parse_args(argv)
    from tunemix.service.settings import Settings

    limit = Settings().max_body_bytes
    probe_before = machine_probe_ms()
    rows: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="request-cost-") as tmp:
        work = Path(tmp)
        models = work / "models"
        train_model(models)
        for case in cases():
            if not any(part in case.name for part in args.only.split(",")):
                continue
            body = case.make(body_size(case.size, limit))
            rows[case.name] = measure(case, body, models, work)
            print(case.name, json.dumps(rows[case.name]), flush=True)
    out = {"command": "python -m bench.bench_request_cost" + (f" --only {args.only}" if args.only else ""),
           "max_body_bytes": limit, "small_body_counted_as": SMALL_BODY,
           "machine_probe_ms": [probe_before, machine_probe_ms()], "summary": summary(rows), "cases": rows}
    path = write_result(args.name, out)
    print(json.dumps(out["summary"], indent=1))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
