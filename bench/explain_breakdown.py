"""Where the time an explanation adds to /rank goes, in-process through the ASGI application.

    python -m bench.explain_breakdown --model MQ2008_VERSION_DIR --mslr-model VERSION_DIR [--rounds 60]
                                      [--name explain_breakdown]

Writes ``bench/results/NAME.json``. For each model, ``bench.bench_explain``'s request bodies (100
real test documents, ``top_k`` 10, with ``"explain": 10`` and without) go through
``tunemix.service.main.create_app`` (one worker's settings) in this process, the two kinds in turn
(``bench.service_breakdown.asgi_request``): wall and CPU ms (every thread) of the whole request and
the handler's ``server_time_ms``, medians. For the explained requests, the explain lane's part
(``tunemix.service.lanes.explain_work``): the wait from handing the work over to its start on the lane's thread,
and the lane's work; within it the steps (``scoring_pass``, ``explain_rows``,
``explained_documents``, ``ranked``) and within ``explain_rows`` the exact method's steps (the
reference row and views, the mix layer's list statistics, the reference's source vectors, the
TreeSHAP pass, the calibrator games, the mix layer's propagation, the whitened columns' split),
each timed by wrapping the module attribute the caller looks up (wall and thread CPU ms, medians
over the explained requests after the first quarter). Nothing here is a goal: the goal is
``bench.bench_explain``'s ratio over HTTP.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common import MSLR, SHARED_DATA, write_result

ROUNDS = 60
WARM = 5


def _timed(owner: Any, name: str, label: str, acc: dict[str, list[tuple[float, float]]]) -> Callable[[], None]:
    """Wrap ``owner.name`` so that each call's wall and thread CPU ms go to ``acc[label]``; returns the undo."""
    fn = getattr(owner, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t0, c0 = time.perf_counter(), time.thread_time()
        try:
            return fn(*args, **kwargs)
        finally:
            acc[label].append(((time.perf_counter() - t0) * 1e3, (time.thread_time() - c0) * 1e3))

    setattr(owner, name, wrapper)
    return lambda: setattr(owner, name, fn)


def _medians(samples: list[tuple[float, float]]) -> dict[str, float]:
    kept = samples[len(samples) // 4:]
    return {"n": len(kept), "wall_ms": round(statistics.median(a for a, _ in kept), 4),
            "cpu_ms": round(statistics.median(b for _, b in kept), 4)}


async def _run(model_path: Path, bodies: dict[str, list[bytes]], rounds: int) -> dict[str, Any]:
    import tunemix.service.routers.rank as rank
    from bench.service_breakdown import asgi_request
    from tunemix.core.explain.calibrator_games import CalibratorGames
    from tunemix.core.scoring import exact_explanation, explanation
    from tunemix.core.scoring.ensemble_model import EnsembleModel
    from tunemix.service.main import create_app
    from tunemix.service.settings import Settings

    acc: dict[str, list[tuple[float, float]]] = collections.defaultdict(list)
    hops: list[float] = []
    undo = [_timed(owner, name, label, acc) for owner, name, label in (
        (EnsembleModel, "scoring_pass", "lane.scoring_pass"), (rank, "explain_rows", "lane.explain_rows"),
        (rank, "explained_documents", "lane.explained_documents"), (rank, "ranked", "ranked"),
        (explanation, "reference_row", "explain.reference_row"),
        (exact_explanation, "reference_views", "explain.reference_views"),
        (exact_explanation, "mix_layer", "explain.mix_layer_list_statistics"),
        (exact_explanation, "_reference_sources", "explain.reference_sources"),
        (exact_explanation, "_moved_attributions", "explain.tree_shap_and_linear_sources"),
        (CalibratorGames, "ratios", "explain.calibrator_games"),
        (exact_explanation, "reveal_cancel_at", "explain.mix_propagation"),
        (exact_explanation, "_unwhiten", "explain.unwhiten"))]
    lane_work = rank.explain_work

    async def timed_lane(request: Any, fn: Callable[..., Any], *args: Any) -> Any:
        handed = time.perf_counter()

        def work(*a: Any) -> Any:
            hops.append((time.perf_counter() - handed) * 1e3)
            t0, c0 = time.perf_counter(), time.thread_time()
            try:
                return fn(*a)
            finally:
                acc["lane.work"].append(((time.perf_counter() - t0) * 1e3, (time.thread_time() - c0) * 1e3))

        return await lane_work(request, work, *args)

    rank.explain_work = timed_lane
    try:
        application = create_app(Settings(models_dir=model_path.parent.parent, default_model=model_path.parent.name,
                                          workers=1))
        async with application.router.lifespan_context(application):
            registry = application.state.registry
            while not registry.all_warm:
                if registry.failed:
                    raise SystemExit(f"the model failed to load: {registry.failed}")
                await asyncio.sleep(0.2)
            for samples in acc.values():
                samples.clear()
            wall: dict[str, list[float]] = {k: [] for k in bodies}
            cpu: dict[str, list[float]] = {k: [] for k in bodies}
            server: dict[str, list[float]] = {k: [] for k in bodies}
            for i in range(rounds + WARM):
                for kind, group in bodies.items():
                    c0, t0 = time.process_time(), time.perf_counter()
                    status, content = await asgi_request(application, group[i % len(group)])
                    t1, c1 = time.perf_counter(), time.process_time()
                    if status != 200:
                        raise SystemExit(f"/rank answered {status}: {content[:300]!r}")
                    if i >= WARM:
                        wall[kind].append((t1 - t0) * 1e3)
                        cpu[kind].append((c1 - c0) * 1e3)
                        server[kind].append(float(json.loads(content)["server_time_ms"]))
    finally:
        rank.explain_work = lane_work
        for u in undo:
            u()
    out: dict[str, Any] = {"model": str(model_path), "rounds": rounds, "requests": {
        kind: {"wall_p50_ms": round(statistics.median(wall[kind]), 3),
               "cpu_p50_ms": round(statistics.median(cpu[kind]), 3),
               "server_time_p50_ms": round(statistics.median(server[kind]), 3)} for kind in bodies}}
    w, e = out["requests"]["without_explain"], out["requests"]["with_explain"]
    out["added_ms"] = {k: round(e[k] - w[k], 3) for k in w}
    out["ratio"] = {k: round(e[k] / w[k], 2) for k in w}
    out["lane_wait_p50_ms"] = round(statistics.median(hops[len(hops) // 4:]), 3)
    out["steps"] = {label: _medians(samples) for label, samples in sorted(acc.items()) if samples}
    return out


def bodies_for(test: Any) -> dict[str, list[bytes]]:
    """``bench.bench_explain``'s bodies: 8 lists of 100 documents, top_k 10, without and with explain 10."""
    from bench.bench_explain import EXPLAIN, N_DOCS, TOP
    from bench.bench_service import make_bodies

    plain = make_bodies(test, N_DOCS, 8, seed=1)
    return {"without_explain": [json.dumps({**json.loads(b), "top_k": TOP}, separators=(",", ":")).encode()
                                for b in plain],
            "with_explain": [json.dumps({**json.loads(b), "top_k": TOP, "explain": EXPLAIN},
                                        separators=(",", ":")).encode() for b in plain]}


def main(argv: list[str] | None = None) -> int:
    import os
    import sys

    from bench.common import machine_probe_ms
    from tunemix.core.data.svmlight import read_svmlight

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    p.add_argument("--model", type=Path, required=True, help="the MQ2008 version directory")
    p.add_argument("--mslr-model", type=Path, required=True, help="the default model trained on the MSLR sample")
    p.add_argument("--rounds", type=int, default=ROUNDS, help=f"requests of each kind (default {ROUNDS})")
    p.add_argument("--name", default="explain_breakdown", help="bench/results/NAME.json")
    args = p.parse_args(argv)
    probe = machine_probe_ms()
    load = os.getloadavg()
    mq = read_svmlight(SHARED_DATA / "MQ2008" / "Fold1" / "test.txt")
    mslr = read_svmlight(MSLR / "msn1.fold1.test.5k.txt", n_features=136)
    result: dict[str, Any] = {
        "command": "python -m bench.explain_breakdown " + " ".join(argv if argv is not None else sys.argv[1:]),
        "load_average_before": [round(v, 2) for v in load]}
    for key, path, test in (("mq2008", args.model, mq), ("mslr_sample_default", args.mslr_model, mslr)):
        result[key] = asyncio.run(_run(path, bodies_for(test), args.rounds))
        print(f"[explain_breakdown] {key}: {json.dumps(result[key])}", flush=True)
    result["load_average_after"] = [round(v, 2) for v in os.getloadavg()]
    result["machine_probe_ms"] = {"before": probe, "after": machine_probe_ms()}
    print(f"[explain_breakdown] wrote {write_result(args.name, result)}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
