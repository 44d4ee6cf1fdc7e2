"""The scoring service as users meet it: latency over HTTP under constant-rate load, next to a
plain FastAPI + LightGBM peer, plus where the time goes inside one request.

    python -m bench.bench_service              # full run, both model sets (~35 min after the models exist)
    python -m bench.bench_service --model-set mslr-default   # one set: mq2008, mslr-default or both
    python -m bench.bench_service --quick      # smoke test (~3 min; bench/results/service_quick.json)
    python -m bench.bench_service --duration 20 --rate 100 --rate-1000 10
    python -m bench.bench_service --model-set mq2008 --large-clients 2 --only-large --large-duration 20

Writes ``bench/results/service.json`` (``--name``: another name; ``--quick``: ``service_quick.json``):
one entry per model set under ``sets``, each with its own peer, servers, scenarios and
breakdown, and per set and scenario ``at_most_peer`` (p50 and p99 at most the peer's in the same
run, no error: the service's goal).

1. **Model sets** (``bench/service_models.py``): ``mq2008``, the MQ2008 Fold1 ensemble (the
   latest ``models/mq2008-fold1/vN``, trained from ``configs/mq2008.toml`` when absent, about 5
   min), against a LightGBM lambdarank ``Booster`` with as many trees as our forest has bases, 8
   leaves; ``mslr-default``, ``TuneMixRanker()``'s defaults trained on the MSLR-WEB10K sample
   (136 features; ``models/mslr-sample-default/vN``, trained when absent), against LightGBM
   lambdarank stopped early on held-out training queries. The sets run one after the other,
   each with its own pair of servers, stopped before the next set starts.
2. **Servers.** Ours is the real service, ``python -m tunemix.service`` (uvicorn, 127.0.0.1, its default
   worker count, one per usable core, or ``--workers``; its default log level), serving the
   set's model. The peer (``bench/peer_lightgbm_service.py``) is a plain FastAPI app under the
   same uvicorn, ranking with the set's LightGBM ``Booster``, under as many uvicorn workers as
   ours, ``num_threads`` = our scoring threads per worker, and one thread for lists shorter than
   our workers' parallel floor (``TUNEMIX_PARALLEL_MIN_DOCUMENTS``), as ours. Both take the same
   body and answer with the same shape. Each runs in its own process group; the benchmark waits
   (bounded) for ``GET /ready`` == 200 (with several workers, 10 per worker in a row on fresh
   connections).
3. **Requests.** Real test rows of the set's data (MQ2008 Fold1 or the MSLR sample), resampled
   (without replacement, from the whole file) into candidate lists of 100 and 1,000 documents,
   one query per request, dense ``documents`` form, features as printed in the data file (6
   decimals).
4. **Load.** ``bench/loadgen.py`` in its own process (no GIL shared with a server): open loop,
   request i issued at t0 + i/rate whatever the state of earlier ones, at most 256 in flight, a
   request more than 1 s behind the clock is an error (``overrun``). Latency is measured by the
   client from issue to the end of the response body; a response counts only with status 200
   and a ranking of as many entries as posted. Scenarios: 100 documents at 200/s for 60 s and
   1,000 documents at 20/s for 30 s, for ours and the peer, ``--rounds`` times each (default 3),
   the sides alternating (ours, peer, peer, ours, ours, peer for the first scenario, the reverse
   for the second, so neither always runs first or always follows the other); each side's
   p50 and p99 are over all its rounds' requests pooled, and every round's own figures are kept
   (one run's p99 on this shared machine is mostly what the neighbours did during it: two
   identical 40 s runs can differ by a third). Before each measured run: 20
   unmeasured warm-up requests, then a one-at-a-time baseline (the latency with no queueing);
   after it, one at a time again with a pause of 1/rate (at most 0.2 s) before each request,
   the idle a worker has between requests at that rate (this machine is slower after idle).
   The machine has 2 cores, shared by the generator, the measured server and anything else
   running: the CPU seconds of generator and server, the load average and the machine's phase
   (``machine_probe_ms``: a fixed Python loop, timed just before and after) around every run are
   recorded with the figures.
5. **Beside large requests** (``--large-clients N``, ``--large-docs D``): the 100-document
   scenario on our server alone, quiet, then beside N clients posting D-document requests back
   to back (real test rows in queries of 1,000, columnar; the most that fit in
   ``TUNEMIX_MAX_BODY_BYTES`` when D do not), each on a fresh connection; under ``beside_large``
   per set, both runs' p50 and p99 and whether those beside are at most ``BESIDE_LARGE_RATIO``
   (3) times the quiet ones. ``--only-large`` runs it alone.
6. **Where the time goes**, in this process, no HTTP: for 100 and 1,000 documents, the median
   time of each step our /rank handler takes (body decoding, conversion to arrays, the model's
   stages: views, forest pass, member differences, calibrators, mixer; ranking and response
   serialisation), and the same for the peer's handler (``bench.service_breakdown``).
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
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import ROOT, machine_probe_ms, write_result
from bench.service_breakdown import breakdown, peer_breakdown
from bench.service_models import MODEL_SETS, ModelSet, check_data, prepare
from bench.service_requests import large_body, log, make_bodies, service_config

TARGETS = {
    "docs_100": {"p50_ms": 5.0, "p99_ms": 20.0, "errors": 0},
    "docs_1000": {"p50_ms": 20.0},
}
READY_TIMEOUT_S = 240.0
# The 1,000-document rate by default: what keeps our server busy RATE_UTILISATION of one core
# one-at-a-time (so queueing stays moderate on 2 shared cores), at most the 20/s of the target.
RATE_UTILISATION = 0.5
RATE_1000_MIN, RATE_1000_MAX = 2.0, 20.0


def auto_rate(server_ms: float | None) -> float:
    if not server_ms or server_ms <= 0:
        return RATE_1000_MIN
    return float(min(RATE_1000_MAX, max(RATE_1000_MIN, np.floor(RATE_UTILISATION * 1000.0 / server_ms))))


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def free_port() -> int:
    """A free local port: the first free one of ``TUNEMIX_BENCH_PORTS`` (``"8710-8729"``) when set
    (a machine whose users share out port ranges), else one the kernel picks."""
    span = os.environ.get("TUNEMIX_BENCH_PORTS")
    candidates = [0]
    if span:
        lo, _, hi = span.partition("-")
        candidates = list(range(int(lo), int(hi or lo) + 1))
    for port in candidates:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return int(s.getsockname()[1])
    raise SystemExit(f"no free port in TUNEMIX_BENCH_PORTS={span}")


def pct(values: Sequence[float], q: float) -> float | None:
    a = np.asarray([v for v in values if v == v], dtype=np.float64)
    return float(np.percentile(a, q)) if a.size else None


def rounded(x: float | None, nd: int = 3) -> float | None:
    return None if x is None else round(x, nd)


# ---------------------------------------------------------------------------- servers
class Server:
    """A uvicorn process (its own process group) on 127.0.0.1:port, stopped on exit."""

    def __init__(self, name: str, cmd: list[str], env: dict[str, str], port: int, log_path: Path,
                 cwd: Path | None = None) -> None:
        self.name, self.port, self.log_path = name, port, log_path
        self.base = f"http://127.0.0.1:{port}"
        self._log = open(log_path, "wb")  # closed in stop()
        self.proc = subprocess.Popen(cmd, cwd=cwd or ROOT, env=env, stdout=self._log, stderr=subprocess.STDOUT,
                                     start_new_session=True)

    def wait_ready(self, timeout: float, streak: int = 1) -> float:
        """Seconds until ``GET /ready`` answered 200 ``streak`` times in a row (each on a fresh
        connection, which the kernel hands to any worker: each worker turns ready on its own),
        each answer saying, where the server tells (ours: ``"kernels": "warm"``), that its
        background warm-up is over too: latency is measured in the steady state, not while the
        parallel, evaluation and fusion kernels compile."""
        import httpx

        t0 = time.perf_counter()
        run = 0
        while time.perf_counter() - t0 < timeout:
            if self.proc.poll() is not None:
                raise SystemExit(f"{self.name} exited with {self.proc.returncode}; log:\n{self.tail()}")
            try:
                r = httpx.get(self.base + "/ready", timeout=2.0)
                if r.status_code == 200 and r.json().get("kernels", "warm") == "warm":
                    run += 1
                    if run >= streak:
                        return time.perf_counter() - t0
                    continue
            except httpx.HTTPError:
                pass
            run = 0
            time.sleep(0.25)
        raise SystemExit(f"{self.name} not ready after {timeout:.0f} s; log:\n{self.tail()}")

    def tail(self, n: int = 30) -> str:
        self._log.flush()
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])

    def cpu_seconds(self) -> float | None:
        """user + system CPU of the server process and its children (psutil, when installed)."""
        try:
            import psutil
        except ImportError:
            return None
        try:
            p = psutil.Process(self.proc.pid)
            total = sum(p.cpu_times()[:2])
            for c in p.children(recursive=True):
                try:
                    total += sum(c.cpu_times()[:2])
                except psutil.Error:
                    pass
            return float(total)
        except psutil.Error:
            return None

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGINT)
                self.proc.wait(timeout=15)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.proc.wait(timeout=5)
        self._log.close()


def post_rank(conn: Any, base: str, body: bytes) -> tuple[float, dict[str, Any]]:
    """POST ``body`` to /rank on the keep-alive ``http.client`` connection ``conn``: (seconds
    from sending to the end of the answer, the answer decoded); anything but 200 stops the run."""
    t0 = time.perf_counter()
    conn.request("POST", "/rank", body=body, headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    content = r.read()
    dt = time.perf_counter() - t0
    if r.status != 200:
        raise SystemExit(f"{base}/rank answered {r.status}: {content[:500]!r}")
    return dt, json.loads(content)


def sequential(base: str, bodies: list[bytes], n: int, expected: int, pause_s: float = 0.0) -> dict[str, Any]:
    """``n`` requests one at a time (no queueing): the floor under the loaded latencies, or with
    ``pause_s`` of idle before each request, which this machine makes slower on its own (the
    loaded runs of long lists have such pauses between a worker's requests). The client is the
    standard library's ``http.client`` on one keep-alive connection (httpx added about 1 ms for
    100 documents and 20 ms for 1,000 to the figure)."""
    import http.client
    from urllib.parse import urlsplit

    parts = urlsplit(base)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port or 80, timeout=30.0)
    lat, st = [], []
    try:
        for i in range(n):
            if pause_s:
                time.sleep(pause_s)
            dt, doc = post_rank(conn, base, bodies[i % len(bodies)])
            got = len(doc["results"][0]["ranking"])
            if got != expected:
                raise SystemExit(f"{base}/rank returned {got} ranked documents for {expected} posted")
            lat.append(dt * 1e3)
            st.append(float(doc.get("server_time_ms", float("nan"))))
    finally:
        conn.close()
    return {"n": n, "pause_ms": round(pause_s * 1e3, 1), "p50_ms": rounded(pct(lat, 50)),
            "p90_ms": rounded(pct(lat, 90)), "min_ms": rounded(min(lat)), "server_time_p50_ms": rounded(pct(st, 50))}


def run_load(server: Server, bodies_file: Path, rate: float, duration: float, workdir: Path,
             tag: str) -> dict[str, Any]:
    out = workdir / f"load-{tag}.json"
    cmd = [sys.executable, "-m", "bench.loadgen", "--url", server.base + "/rank", "--bodies", str(bodies_file),
           "--rate", str(rate), "--duration", str(duration), "--concurrency", "256", "--timeout", "10",
           "--max-lag", "1.0", "--out", str(out)]
    probe0 = machine_probe_ms()
    la0, cpu0 = loadavg(), server.cpu_seconds()
    t0 = time.perf_counter()
    subprocess.run(cmd, cwd=ROOT, check=True, timeout=duration + 120)
    wall = time.perf_counter() - t0
    cpu1, la1 = server.cpu_seconds(), loadavg()
    raw = json.loads(out.read_text())
    res = summarise(raw)
    res["server_cpu_s"] = rounded(cpu1 - cpu0, 2) if cpu0 is not None and cpu1 is not None else None
    res["server_cpu_utilisation"] = (rounded((cpu1 - cpu0) / raw["wall_s"], 3)
                                     if cpu0 is not None and cpu1 is not None else None)
    res["loadavg_before"], res["loadavg_after"] = la0, la1
    res["machine_probe_ms_before"], res["machine_probe_ms_after"] = probe0, machine_probe_ms()
    res["generator_process_wall_s"] = round(wall, 2)
    return res


def summarise(raw: dict[str, Any]) -> dict[str, Any]:
    err = raw["error"]
    ok = [e is None for e in err]
    lat = [x * 1e3 for x, g in zip(raw["latency_s"], ok, strict=True) if g]
    lat_sched = [x * 1e3 for x, g in zip(raw["latency_from_schedule_s"], ok, strict=True) if g]
    st = [x for x, g in zip(raw["server_time_ms"], ok, strict=True) if g]
    lag = [x * 1e3 for x in raw["issue_lag_s"] if x == x]
    kinds: dict[str, int] = {}
    for e in err:
        if e is not None:
            kinds[e] = kinds.get(e, 0) + 1
    n_sent = sum(1 for x in raw["issue_lag_s"] if x == x and x <= raw["max_lag_s"])
    n_ok = sum(ok)
    windows = []
    w = 10.0
    offs = raw["issue_offset_s"]
    for k in range(int(np.ceil(raw["duration_s"] / w))):
        sel = [x * 1e3 for x, o, g in zip(raw["latency_s"], offs, ok, strict=True) if g and k * w <= o < (k + 1) * w]
        if sel:
            windows.append({"from_s": k * w, "n_ok": len(sel), "p50_ms": rounded(pct(sel, 50)),
                            "p99_ms": rounded(pct(sel, 99))})
    return {
        "rate_target": raw["rate"], "duration_s": raw["duration_s"], "requests_scheduled": raw["n_requests"],
        "requests_sent": n_sent, "responses_ok": n_ok,
        "achieved_send_rate": rounded(n_sent / raw["schedule_span_s"], 2) if raw["schedule_span_s"] > 0 else None,
        "achieved_ok_rate": rounded(n_ok / raw["wall_s"], 2),
        "p50_ms": rounded(pct(lat, 50)), "p90_ms": rounded(pct(lat, 90)), "p99_ms": rounded(pct(lat, 99)),
        "max_ms": rounded(max(lat)) if lat else None,
        "mean_ms": rounded(float(np.mean(lat))) if lat else None,
        "errors": len(err) - n_ok, "errors_by_kind": kinds,
        "server_time_p50_ms": rounded(pct(st, 50)), "server_time_p99_ms": rounded(pct(st, 99)),
        "p99_from_schedule_ms": rounded(pct(lat_sched, 99)),
        "issue_lag_p50_ms": rounded(pct(lag, 50)), "issue_lag_p99_ms": rounded(pct(lag, 99)),
        "issue_lag_max_ms": rounded(max(lag)) if lag else None,
        "generator_cpu_s": round(raw["generator_cpu_s"], 2),
        "generator_cpu_utilisation": rounded(raw["generator_cpu_s"] / raw["wall_s"], 3),
        "by_10s_window": windows,
    }


def judge(res: dict[str, Any], targets: dict[str, Any]) -> dict[str, Any]:
    checks = {}
    if "p50_ms" in targets:
        checks["p50"] = res["p50_ms"] is not None and res["p50_ms"] < targets["p50_ms"]
    if "p99_ms" in targets:
        checks["p99"] = res["p99_ms"] is not None and res["p99_ms"] < targets["p99_ms"]
    if "errors" in targets:
        checks["errors"] = res["errors"] <= targets["errors"]
    return {"targets": targets, "checks": checks, "pass": all(checks.values())}


# ---------------------------------------------------------------------------- main
def run_set(mset: ModelSet, args: argparse.Namespace, scenarios: list[tuple[str, int, float | None, float]],
            tmp: Path) -> dict[str, Any]:
    """One model set's servers (ours and its peer, started for this set and stopped after it),
    scenarios and breakdown."""
    from tunemix.core.scoring.ensemble_model import load_model

    q = args.quick
    model, manifest = load_model(mset.model_path)
    workers, threads, floor = service_config(args.workers)
    result: dict[str, Any] = {}
    result["model"] = {"path": str(mset.model_path.relative_to(ROOT)) if mset.model_path.is_relative_to(ROOT)
                       else str(mset.model_path), "n_features": model.n_features, "n_bases": model.forest.n_base,
                       "n_members": model.n_members, "n_outputs": model.forest.n_outputs,
                       "views": ["raw", *model.extra_views],
                       "base_kinds": {"trees": int(np.sum(model.forest.base_kind == 0)),
                                      "products": int(np.sum(model.forest.base_kind != 0))},
                       "created": manifest.get("created"), "workers": workers, "scoring_threads": threads,
                       "parallel_min_documents": floor}
    result["peer_model"] = mset.peer_model
    n_bodies = {100: 16 if q else 64, 1000: 8 if q else 16}
    bodies = {nd: make_bodies(mset.test, nd, n_bodies[nd], seed=nd) for nd in (100, 1000)}
    result["requests"] = {"source": f"{mset.data}, drawn without replacement per list",
                          "form": "documents (row form), one query per request",
                          "body_bytes": {f"docs_{nd}": int(np.mean([len(b) for b in bl])) for nd, bl in bodies.items()},
                          "distinct_bodies": {f"docs_{nd}": len(bl) for nd, bl in bodies.items()}}
    with ExitStack() as stack:
        for nd, bl in bodies.items():
            (tmp / f"bodies-{nd}.jsonl").write_bytes(b"\n".join(bl) + b"\n")
        env = dict(os.environ)
        env.setdefault("NUMBA_CACHE_DIR", str(ROOT / ".venv" / "numba-cache"))  # as `make serve`
        port_ours, port_peer = free_port(), free_port()
        ours_env = {**env, "TUNEMIX_MODELS_DIR": str(mset.models_dir), "TUNEMIX_DEFAULT_MODEL": mset.model_name,
                    "TUNEMIX_PORT": str(port_ours), "TUNEMIX_WORKERS": str(workers), "TUNEMIX_HOST": "127.0.0.1"}
        # the peer's OpenMP waits passively, as ours does (tunemix.core.scoring.forest)
        peer_env = {**env, "PEER_LGB_MODEL": str(mset.peer_file), "PEER_LGB_THREADS": str(threads),
                    "PEER_LGB_MIN_PARALLEL_ROWS": str(floor),
                    "OMP_WAIT_POLICY": env.get("OMP_WAIT_POLICY", "PASSIVE")}
        servers = {
            "ours": Server("ours (python -m tunemix.service)", [sys.executable, "-m", "tunemix.service"], ours_env,
                           port_ours,
                           tmp / "ours.log"),
            "peer": Server("peer (uvicorn bench.peer_lightgbm_service:app)",
                           [sys.executable, "-m", "uvicorn", "bench.peer_lightgbm_service:app", "--host",
                            "127.0.0.1", "--port", str(port_peer), "--workers", str(workers)], peer_env, port_peer,
                           tmp / "peer.log"),
        }
        for s in servers.values():
            stack.callback(s.stop)
        result["servers"] = {}
        for key, s in servers.items():
            secs = s.wait_ready(READY_TIMEOUT_S, streak=1 if workers == 1 else 10 * workers)
            log(f"{mset.key}: {s.name} ready on port {s.port} after {secs:.1f} s")
            result["servers"][key] = {"command": " ".join(Path(a).name if a == sys.executable else str(a)
                                                         for a in s.proc.args),  # type: ignore[union-attr]
                                      "ready_after_s": round(secs, 1)}
        result["servers"]["ours"]["env"] = {k: v for k, v in ours_env.items() if k.startswith("TUNEMIX_")}
        result["servers"]["peer"]["env"] = {k: v for k, v in peer_env.items() if k.startswith(("PEER_", "OMP_"))}
        only_large = args.only_large and args.large_clients
        result["scenarios"] = {} if only_large else {
            tag: run_scenario(servers, bodies[nd], tmp / f"bodies-{nd}.jsonl", si, tag, nd, rate, duration, tmp,
                              judged=mset.key == "mq2008", rounds=args.rounds)
            for si, (tag, nd, rate, duration) in enumerate(scenarios)}
        if args.large_clients:
            result["beside_large"] = beside_large(servers["ours"], mset, bodies[100], tmp / "bodies-100.jsonl",
                                                  args, tmp)
        if not (args.skip_breakdown or only_large):
            log(f"{mset.key}: in-process breakdown (no HTTP)")
            result["breakdown_ours"] = breakdown(mset.model_path, bodies, q)
            result["breakdown_peer"] = peer_breakdown(mset.peer_file, threads, bodies, q)
    result["at_most_peer"] = {tag: e["at_most_peer"] for tag, e in result["scenarios"].items()}
    return result


def run_scenario(servers: dict[str, Server], bodies: list[bytes], bodies_file: Path, si: int, tag: str, nd: int,
                 rate_arg: float | None, duration: float, tmp: Path, judged: bool, rounds: int = 1) -> dict[str, Any]:
    """One scenario against both servers: ``rounds`` runs of each, the sides alternating (ours,
    peer, peer, ours, ... or the reverse for odd scenarios, so that neither always runs first or
    always follows the other). Each side's figures are over all its rounds' requests pooled (one
    40 s run's p99 is mostly what the neighbours did in those seconds: two identical runs of ours
    can differ by a third); every round's own figures are kept under ``rounds``, and ``rounds_won``
    counts the rounds ours was at most the peer's. ``judged``: ours against TARGETS too."""
    first = ["ours", "peer"] if si % 2 == 0 else ["peer", "ours"]
    entry: dict[str, Any] = {"n_docs": nd, "duration_s": duration, "rounds": rounds, "order": first}
    if rate_arg is None:
        sequential(servers["ours"].base, bodies, 10, nd)  # warm-up
        probe = sequential(servers["ours"].base, bodies, 20, nd)
        rate = auto_rate(probe["server_time_p50_ms"])
        entry["rate_choice"] = {"how": f"auto: {RATE_UTILISATION:g} x 1000 / our one-at-a-time server_time "
                                       f"p50, rounded down, within {RATE_1000_MIN:g}..{RATE_1000_MAX:g}/s",
                                "probe_server_time_p50_ms": probe["server_time_p50_ms"]}
    else:
        rate = float(rate_arg)
        entry["rate_choice"] = {"how": "given on the command line"}
    entry["rate"] = rate
    runs: dict[str, list[dict[str, Any]]] = {"ours": [], "peer": []}
    for r in range(rounds):
        for key in (first if r % 2 == 0 else first[::-1]):
            res = one_run(servers[key], bodies, bodies_file, tag, key, nd, rate, duration, tmp, r)
            runs[key].append(res)
            time.sleep(2.0)
    for key, rs in runs.items():
        raws = [res.pop("raw") for res in rs]
        pooled = summarise(pool_raw(raws)) if rounds > 1 else dict(rs[0])
        if rounds > 1:
            pooled["server_cpu_utilisation"] = rounded(float(np.mean([res["server_cpu_utilisation"] for res in rs
                                                                      if res["server_cpu_utilisation"] is not None]
                                                                     or [np.nan])), 3)
            pooled["one_at_a_time"] = rs[0]["one_at_a_time"]
            pooled["one_at_a_time_with_pauses"] = rs[0]["one_at_a_time_with_pauses"]
            pooled["rounds"] = rs
        if key == "ours" and judged and tag in TARGETS:
            pooled["verdict"] = judge(pooled, TARGETS[tag])
        entry[key] = pooled
    ours, peer = entry["ours"], entry["peer"]
    for p in ("p50", "p99"):
        if ours[f"{p}_ms"] and peer[f"{p}_ms"]:
            entry[f"{p}_ratio_ours_over_peer"] = round(ours[f"{p}_ms"] / peer[f"{p}_ms"], 3)
    if rounds > 1:
        entry["rounds_won"] = {p: sum(1 for a, b in zip(runs["ours"], runs["peer"], strict=True)
                                      if a[f"{p}_ms"] is not None and b[f"{p}_ms"] is not None
                                      and a[f"{p}_ms"] <= b[f"{p}_ms"]) for p in ("p50", "p99")}
    entry["at_most_peer"] = peer_verdict(ours, peer)
    if rounds > 1:
        log(f"{tag}: pooled over {rounds} rounds: ours p50 {ours['p50_ms']} p99 {ours['p99_ms']}, peer p50 "
            f"{peer['p50_ms']} p99 {peer['p99_ms']} ms; rounds ours at most the peer: {entry['rounds_won']}")
    return entry


#: the 100-document scenario beside large clients: its p50 and p99 at most this many times its quiet figures
BESIDE_LARGE_RATIO = 3.0


class LargeClients:
    """``n`` threads posting ``body`` to /rank back to back, each on a fresh connection (so that
    they spread over the workers), from ``start`` until ``stop``; ``under_way`` is set once each
    has had one answer. Their answers' seconds in ``seconds``, anything but 200 in ``errors``."""

    def __init__(self, base: str, body: bytes, n: int) -> None:
        self.base, self.body = base, body
        self.seconds: list[float] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._first = threading.Barrier(n + 1)
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(n)]

    def _run(self) -> None:
        import http.client
        from urllib.parse import urlsplit

        parts = urlsplit(self.base)
        first = True
        while not self._stop.is_set():
            conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port or 80, timeout=120.0)
            try:
                t0 = time.perf_counter()
                conn.request("POST", "/rank", body=self.body,
                             headers={"Content-Type": "application/json", "Connection": "close"})
                r = conn.getresponse()
                content = r.read()
                self.seconds.append(time.perf_counter() - t0)
                if r.status != 200:
                    self.errors.append(f"{r.status} {content[:200]!r}")
            except OSError as exc:
                self.errors.append(repr(exc))
            finally:
                conn.close()
            if first:
                first = False
                self._first.wait()

    def start(self) -> None:
        for t in self._threads:
            t.start()
        self._first.wait()  # each client has had one answer: all under way

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join()


def beside_large(s: Server, mset: ModelSet, bodies: list[bytes], bodies_file: Path, args: argparse.Namespace,
                 tmp: Path) -> dict[str, Any]:
    """The 100-document scenario on our server quiet, then beside ``--large-clients`` clients
    posting ``--large-docs``-document requests back to back (real test rows in queries of 1,000,
    columnar; fewer documents when those would pass ``TUNEMIX_MAX_BODY_BYTES``): p50 and p99 of
    both, and whether the figures beside them are at most ``BESIDE_LARGE_RATIO`` times the quiet ones."""
    from tunemix.service.settings import Settings

    rate = args.rate or (100.0 if args.quick else 200.0)
    duration = args.large_duration or args.duration or (10.0 if args.quick else 30.0)
    body, n_docs = large_body(mset.test, args.large_docs, Settings().max_body_bytes)
    log(f"beside large: {args.large_clients} clients of {n_docs} documents ({len(body)} bytes), "
        f"100 documents at {rate:g}/s for {duration:g} s")
    sequential(s.base, bodies, 20, 100)  # warm-up
    quiet = run_load(s, bodies_file, rate, duration, tmp, "ours-quiet")
    clients = LargeClients(s.base, body, args.large_clients)
    clients.start()
    try:
        beside = run_load(s, bodies_file, rate, duration, tmp, "ours-beside-large")
    finally:
        clients.stop()
    keep = ("p50_ms", "p90_ms", "p99_ms", "max_ms", "errors", "achieved_ok_rate", "server_cpu_utilisation")
    out: dict[str, Any] = {
        "rate": rate, "duration_s": duration,
        "large": {"clients": args.large_clients, "documents": n_docs, "documents_asked": args.large_docs,
                  "body_bytes": len(body), "answers": len(clients.seconds),
                  "p50_s": rounded(pct(clients.seconds, 50)), "errors": clients.errors[:5]},
        "quiet": {k: quiet[k] for k in keep}, "beside": {k: beside[k] for k in keep},
    }
    for p in ("p50", "p99"):
        q, b = quiet[f"{p}_ms"], beside[f"{p}_ms"]
        out[f"{p}_ratio"] = rounded(b / q, 2) if q and b else None
    out["at_most_ratio"] = BESIDE_LARGE_RATIO
    out["pass"] = (all(out[f"{p}_ratio"] is not None and out[f"{p}_ratio"] <= BESIDE_LARGE_RATIO
                       for p in ("p50", "p99")) and beside["errors"] == 0 and not clients.errors)
    log(f"beside large: quiet p50 {quiet['p50_ms']} p99 {quiet['p99_ms']} ms; beside p50 {beside['p50_ms']} "
        f"p99 {beside['p99_ms']} ms; {len(clients.seconds)} large answers; pass {out['pass']}")
    return out


def one_run(s: Server, bodies: list[bytes], bodies_file: Path, tag: str, key: str, nd: int, rate: float,
            duration: float, tmp: Path, r: int) -> dict[str, Any]:
    """One measured run of one side: warm-up, one at a time, the loaded run, one at a time with pauses."""
    sequential(s.base, bodies, 20, nd)  # warm-up, not recorded
    n_seq = 40 if nd <= 100 else 20
    base_line = sequential(s.base, bodies, n_seq, nd)
    time.sleep(1.0)
    log(f"{tag}: {key} at {rate:g}/s for {duration:g} s, round {r + 1} (one at a time: p50 {base_line['p50_ms']} ms)")
    res = run_load(s, bodies_file, rate, duration, tmp, f"{key}-{tag}-{r}")
    res["raw"] = json.loads((tmp / f"load-{key}-{tag}-{r}.json").read_text())  # run_scenario pools and drops it
    res["one_at_a_time"] = base_line
    # the same with the idle a worker has between requests at this rate (two workers
    # alternate): tells the machine's idle effect apart from queueing
    res["one_at_a_time_with_pauses"] = sequential(s.base, bodies, n_seq, nd, pause_s=min(0.2, 1.0 / rate))
    log(f"{tag}: {key}: p50 {res['p50_ms']} p90 {res['p90_ms']} p99 {res['p99_ms']} max {res['max_ms']} ms, "
        f"errors {res['errors']} {res['errors_by_kind'] or ''}, ok rate {res['achieved_ok_rate']}/s, "
        f"server p50 {res['server_time_p50_ms']} ms, server CPU {res['server_cpu_utilisation']}; "
        f"one at a time after {res['one_at_a_time_with_pauses']['pause_ms']} ms pauses: p50 "
        f"{res['one_at_a_time_with_pauses']['p50_ms']} ms")
    return res


def pool_raw(raws: list[dict[str, Any]]) -> dict[str, Any]:
    """Several ``bench.loadgen`` runs of one side as one: their requests together, each run's
    issue offsets after the previous runs' durations, counts and seconds summed."""
    out = dict(raws[0])
    for k in ("error", "latency_s", "latency_from_schedule_s", "server_time_ms", "issue_lag_s"):
        out[k] = [x for raw in raws for x in raw[k]]
    shift, offsets = 0.0, []
    for raw in raws:
        offsets.extend(o + shift for o in raw["issue_offset_s"])
        shift += raw["duration_s"]
    out["issue_offset_s"] = offsets
    for k in ("duration_s", "n_requests", "schedule_span_s", "wall_s", "generator_cpu_s"):
        out[k] = sum(raw[k] for raw in raws)
    return out


def peer_verdict(ours: dict[str, Any], peer: dict[str, Any]) -> dict[str, bool]:
    """The service's goal for one scenario: our p50 and p99 at most the peer's in the same run (a
    missing figure fails), and none of our requests failed."""
    out = {p: ours[f"{p}_ms"] is not None and peer[f"{p}_ms"] is not None and ours[f"{p}_ms"] <= peer[f"{p}_ms"]
           for p in ("p50", "p99")}
    out["no_errors"] = ours["errors"] == 0
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--quick", action="store_true", help="smoke test: 10 s at 100/s and 10 s at 10/s")
    ap.add_argument("--model-set", choices=[*MODEL_SETS, "both"], default="both",
                    help="the MQ2008 ensemble, the default model trained on the MSLR sample, or both, each "
                         "against its own LightGBM peer (bench/service_models.py)")
    ap.add_argument("--duration", type=float, help="seconds of the 100-document scenario (default 60, quick 10)")
    ap.add_argument("--rate", type=float, help="requests/s of the 100-document scenario (default 200, quick 100)")
    ap.add_argument("--duration-1000", type=float, help="seconds of the 1,000-document scenario (default 30)")
    ap.add_argument("--rate-1000", type=float,
                    help="requests/s of the 1,000-document scenario (default: auto, see RATE_1000_MAX)")
    ap.add_argument("--rounds", type=int,
                    help="runs of each side per scenario, alternating, figures over all of them pooled (default 3, "
                         "quick 1)")
    ap.add_argument("--skip-breakdown", action="store_true", help="HTTP scenarios only")
    ap.add_argument("--workers", type=int,
                    help="uvicorn workers of both servers (default: our service's default, one per core)")
    ap.add_argument("--large-clients", type=int, default=0,
                    help="also run the 100-document scenario on our server quiet and beside this many clients "
                         "posting large requests back to back (results: beside_large, per set)")
    ap.add_argument("--large-docs", type=int, default=100_000,
                    help="documents of each large request (default 100,000; fewer when the body would pass "
                         "TUNEMIX_MAX_BODY_BYTES)")
    ap.add_argument("--large-duration", type=float,
                    help="seconds of each side of the beside-large scenario (default --duration, else 30, quick 10)")
    ap.add_argument("--only-large", action="store_true",
                    help="with --large-clients: the beside-large scenario alone (no peer scenarios, no breakdown)")
    ap.add_argument("--name", help="results file bench/results/<name>.json (default: service, with --quick "
                                   "service_quick, so that a smoke test never replaces the committed figures)")
    args = ap.parse_args(argv)
    if args.large_clients < 0 or args.large_docs < 1:
        ap.error("--large-clients must be at least 0 and --large-docs at least 1")
    q = args.quick
    args.rounds = args.rounds or (1 if q else 3)
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")
    scenarios: list[tuple[str, int, float | None, float]] = [
        ("docs_100", 100, args.rate or (100.0 if q else 200.0), args.duration or (10.0 if q else 60.0)),
        ("docs_1000", 1000, args.rate_1000,  # None: chosen from our one-at-a-time time (auto_rate)
         args.duration_1000 or (args.duration if args.duration and args.duration < 30 else (10.0 if q else 30.0))),
    ]
    keys = list(MODEL_SETS) if args.model_set == "both" else [args.model_set]
    check_data(keys)
    result: dict[str, Any] = {
        "model_set": args.model_set,
        "machine_extra": {"nproc": os.cpu_count(), "affinity": len(os.sched_getaffinity(0)),
                          "loadavg_start": loadavg(),
                          "note": "2 cores shared by the load generator (own process), the measured server "
                                  "(own process) and whatever else runs on the machine"},
        "sets": {},
    }
    _, threads, _ = service_config(args.workers)
    for key in keys:
        with tempfile.TemporaryDirectory(prefix=f"bench-service-{key}-") as tmp:
            log(f"{key}: our model and the LightGBM peer ({threads} thread(s))")
            mset = prepare(key, threads, Path(tmp))
            log(f"{key}: serving {mset.model_path}; peer {mset.peer_model}")
            result["sets"][key] = run_set(mset, args, scenarios, Path(tmp))
    result["machine_extra"]["loadavg_end"] = loadavg()
    result["targets"] = {"mq2008": TARGETS, "every set": "p50 and p99 at most the peer's in the same run, no error"}
    result["verdict"] = {key: {"targets": {tag: e["ours"].get("verdict", {}).get("pass")
                                           for tag, e in r["scenarios"].items()} if key == "mq2008" else None,
                               "at_most_peer": r["at_most_peer"]} for key, r in result["sets"].items()}
    path = write_result(args.name or ("service_quick" if q else "service"), result)
    log(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
