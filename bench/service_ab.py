"""/rank over real HTTP, this tree against another (the code before a change), runs interleaved.

    python -m bench.service_ab --before /tmp/base --model-set mq2008 --docs 100 --rate 100 \\
        --duration 15 --rounds 4 --name service_ab_x
    python -m bench.service_ab --before /tmp/base --peer ...   # the LightGBM peer as a third side

Each side is a real ``python -m tunemix.service`` (two workers, ``bench.bench_service``'s environment) run
from its own tree (``PYTHONPATH`` and working directory the tree, its own numba cache
``<tree>/.numba-cache``), serving the same model; with ``--peer``, the LightGBM peer of
``bench.bench_service`` too. All servers start before the first run and stay up; then for
``--rounds`` rounds every side gets one ``bench.loadgen`` run of ``--duration`` seconds at
``--rate`` requests/s, the order of the sides rotated each round (so that no side always follows
another, or always runs first after the idle start). The bodies are ``bench_service``'s (the
same seed: one query of ``--docs`` real test rows each). Before the measured runs every side
gets 20 unmeasured requests.

Per run: p50, p90, p99 and server_time p50 (``bench_service.summarise``); per side: the median
of the runs' p50 and p99, and p50 and p99 over all of its requests pooled. A change is read from
the pooled figures and from how many rounds it won (on a shared machine one run's p99 is
mostly the neighbours'). Writes ``bench/results/<name>.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from bench.bench_service import (
    READY_TIMEOUT_S,
    Server,
    loadavg,
    make_bodies,
    pct,
    rounded,
    run_load,
    sequential,
    service_config,
)
from bench.common import ROOT, write_result
from bench.service_breakdown import log
from bench.service_models import check_data, prepare


def app_server(name: str, tree: Path, env: dict[str, str], port: int, workers: int, mset: Any,
               log_path: Path) -> Server:
    """``python -m tunemix.service`` of ``tree`` on ``port``, its code and numba cache the tree's own."""
    side_env = {**env, "PYTHONPATH": str(tree), "NUMBA_CACHE_DIR": str(tree / ".numba-cache"),
                "TUNEMIX_MODELS_DIR": str(mset.models_dir), "TUNEMIX_DEFAULT_MODEL": mset.model_name,
                "TUNEMIX_PORT": str(port), "TUNEMIX_WORKERS": str(workers), "TUNEMIX_HOST": "127.0.0.1"}
    return Server(f"{name} ({tree})", [sys.executable, "-m", "tunemix.service"], side_env, port, log_path, cwd=tree)


def same_answers(base_a: str, base_b: str, bodies: list[bytes]) -> bool:
    """Whether the two servers answer every body with the same JSON, ``server_time_ms`` aside (the
    scores are compared as the shortest repr of their float64: the same bits)."""
    import http.client
    from urllib.parse import urlsplit

    answers = []
    for base in (base_a, base_b):
        parts = urlsplit(base)
        conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port or 80, timeout=30.0)
        got = []
        for body in bodies:
            conn.request("POST", "/rank", body=body, headers={"Content-Type": "application/json"})
            doc = json.loads(conn.getresponse().read())
            doc.pop("server_time_ms", None)
            got.append(doc)
        conn.close()
        answers.append(got)
    return bool(answers[0] == answers[1])


def side_summary(runs: list[dict[str, Any]], latencies: list[float]) -> dict[str, Any]:
    return {"runs_p50_ms": [r["p50_ms"] for r in runs], "runs_p99_ms": [r["p99_ms"] for r in runs],
            "median_run_p50_ms": rounded(statistics.median(r["p50_ms"] for r in runs)),
            "median_run_p99_ms": rounded(statistics.median(r["p99_ms"] for r in runs)),
            "pooled_p50_ms": rounded(pct(latencies, 50)), "pooled_p90_ms": rounded(pct(latencies, 90)),
            "pooled_p99_ms": rounded(pct(latencies, 99)), "requests_ok": len(latencies),
            "errors": sum(r["errors"] for r in runs),
            "server_time_p50_ms_by_run": [r["server_time_p50_ms"] for r in runs]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--before", type=Path, required=True, help="the other tree (e.g. a git archive of main)")
    ap.add_argument("--model-set", choices=["mq2008", "mslr-default"], default="mq2008")
    ap.add_argument("--docs", type=int, default=100)
    ap.add_argument("--rate", type=float, default=100.0)
    ap.add_argument("--duration", type=float, default=15.0, help="seconds a run")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--peer", action="store_true", help="the LightGBM peer as a third side")
    ap.add_argument("--port", type=int, default=8710, help="the first of the servers' ports")
    ap.add_argument("--name", default="service_ab")
    args = ap.parse_args(argv)
    check_data([args.model_set])
    workers, threads, floor = service_config(2)
    before = args.before.resolve()
    out: dict[str, Any] = {"command": "python -m bench.service_ab " + " ".join(argv or sys.argv[1:]),
                           "before_tree": str(before), "after_tree": str(ROOT), "workers": workers,
                           "loadavg_start": loadavg()}
    with tempfile.TemporaryDirectory(prefix="service-ab-") as tmp_name, ExitStack() as stack:
        tmp = Path(tmp_name)
        mset = prepare(args.model_set, threads, tmp)
        bodies = make_bodies(mset.test, args.docs, 64 if args.docs <= 100 else 16, seed=args.docs)
        bodies_file = tmp / "bodies.jsonl"
        bodies_file.write_bytes(b"\n".join(bodies) + b"\n")
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "NUMBA_CACHE_DIR")}
        servers = {"before": app_server("before", before, env, args.port, workers, mset, tmp / "before.log"),
                   "after": app_server("after", ROOT, env, args.port + 1, workers, mset, tmp / "after.log")}
        if args.peer:
            peer_env = {**env, "PEER_LGB_MODEL": str(mset.peer_file), "PEER_LGB_THREADS": str(threads),
                        "PEER_LGB_MIN_PARALLEL_ROWS": str(floor),
                        "OMP_WAIT_POLICY": env.get("OMP_WAIT_POLICY", "PASSIVE")}
            servers["peer"] = Server("peer", [sys.executable, "-m", "uvicorn", "bench.peer_lightgbm_service:app",
                                              "--host", "127.0.0.1", "--port", str(args.port + 2), "--workers",
                                              str(workers)], peer_env, args.port + 2, tmp / "peer.log")
        for s in servers.values():
            stack.callback(s.stop)
        for key, s in servers.items():
            log(f"{key}: ready after {s.wait_ready(READY_TIMEOUT_S, streak=10 * workers):.1f} s")
            sequential(s.base, bodies, 20, args.docs)
        out["answers_identical"] = same_answers(servers["before"].base, servers["after"].base, bodies)
        log(f"before and after answer every body the same (server_time_ms aside): {out['answers_identical']}")
        keys = list(servers)
        runs: dict[str, list[dict[str, Any]]] = {k: [] for k in keys}
        pooled: dict[str, list[float]] = {k: [] for k in keys}
        for r in range(args.rounds):
            order = keys[r % len(keys):] + keys[: r % len(keys)]
            for key in order:
                res = run_load(servers[key], bodies_file, args.rate, args.duration, tmp, f"{key}-{r}")
                raw = json.loads((tmp / f"load-{key}-{r}.json").read_text())
                pooled[key] += [x * 1e3 for x, e in zip(raw["latency_s"], raw["error"], strict=True) if e is None]
                res.pop("by_10s_window", None)
                res["round"], res["position"] = r, order.index(key)
                runs[key].append(res)
                log(f"round {r} {key}: p50 {res['p50_ms']} p99 {res['p99_ms']} ms, server p50 "
                    f"{res['server_time_p50_ms']}, errors {res['errors']}, load {res['loadavg_after']}")
                time.sleep(1.0)
        out["sides"] = {k: side_summary(runs[k], pooled[k]) for k in keys}
        out["rounds_after_below_before"] = {
            p: sum(a[f"{p}_ms"] < b[f"{p}_ms"] for a, b in zip(runs["after"], runs["before"], strict=True))
            for p in ("p50", "p99")}
        out["runs"] = runs
    out["loadavg_end"] = loadavg()
    print(json.dumps(out["sides"], indent=1), flush=True)
    print(f"wrote {write_result(args.name, out)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
