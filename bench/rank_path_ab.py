"""/rank's decode path against the code before it, in one process, through the whole ASGI
application (routing, middleware, handler, answer), the two alternating phase by phase.

    python -m bench.rank_path_ab --model-set mslr-default --docs 1000 --requests 100 --rounds 6
    python -m bench.rank_path_ab --model-set mq2008 --docs 100 --requests 300 --rounds 6 --name rank_path_ab_mq2008

"before" is the code this branch replaced, put back by swapping three module attributes between
phases (the answers of both are checked to be the same bytes but ``server_time_ms`` first):

- ``tunemix.service.parsing.finite_rows``: dense rows by ``np.fromiter`` over the chained rows (now:
  ``struct.pack_into`` one row at a time);
- ``tunemix.service.routers.rank.gc_paused``: no pause around the whole decode (now: the cyclic collector is
  off until the parsed request is freed; ``tunemix.service.json_body.one_pass`` pauses it for its own call in
  both);
- ``tunemix.service.routers.rank.RankedDocument``: tracked by the cyclic collector (now ``gc=False``).

Per phase the wall and the process CPU (every thread) of each request and the collections it
started (``gc.callbacks``); medians and percentiles over all phases of a side. The model sets and
bodies are ``bench.bench_service``'s (``models/mq2008-fold1``, ``models/mslr-sample-default``,
the same seeds). Writes ``bench/results/<name>.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import itertools
import json
import os
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from bench.common import MODELS_DIR, MSLR_TEST, SHARED_DATA, write_result


def before_finite_rows(rows: Any, d: int, where: str, field: str) -> np.ndarray:
    """``tunemix.service.parsing.finite_rows`` as it was: ``np.fromiter`` over the rows chained."""
    from tunemix.service import parsing

    m = len(rows)
    if any(len(r) != d for r in rows):
        j = next(j for j, r in enumerate(rows) if len(r) != d)
        raise parsing.input_error(f"{where}: {field.format(j=j)} has {len(rows[j])} values; the model takes {d}")
    with np.errstate(over="ignore"):
        arr = np.fromiter(itertools.chain.from_iterable(rows), dtype=np.float32, count=m * d).reshape(m, d)
    parsing._check_finite(arr, where, field)
    return arr


def sides() -> dict[str, tuple[Any, ...]]:
    """(collector pause, rows to a matrix, ranked document type) of each side."""
    from tunemix.service import parsing
    from tunemix.service.rank_answer import Explained
    from tunemix.service.rank_body import Id
    from tunemix.service.routers import rank

    class TrackedRankedDocument(msgspec.Struct, omit_defaults=True):
        id: Id
        score: float
        rank: int
        relevance: float | None = None
        probabilities: list[float] | None = None
        explanation: Explained | None = None

    return {"before": (contextlib.nullcontext, before_finite_rows, TrackedRankedDocument),
            "now": (rank.gc_paused, parsing.finite_rows, rank.RankedDocument)}


def use(side: tuple[Any, ...]) -> None:
    from tunemix.service import parsing
    from tunemix.service.routers import rank

    for module, name, value in zip((rank, parsing, rank), ("gc_paused", "finite_rows", "RankedDocument"), side,
                                   strict=True):
        setattr(module, name, value)


def bodies_of(model_set: str, n_docs: int) -> tuple[Path, list[bytes]]:
    from bench.bench_service import make_bodies
    from tunemix.core.artifact import latest_version
    from tunemix.core.data.svmlight import read_svmlight

    if model_set == "mq2008":
        test = read_svmlight(SHARED_DATA / "MQ2008" / "Fold1" / "test.txt", n_features=46)
        name = "mq2008-fold1"
    else:
        test = read_svmlight(MSLR_TEST, n_features=136)
        name = "mslr-sample-default"
    path = latest_version(MODELS_DIR, name)
    if path is None:
        raise SystemExit(f"no model under {MODELS_DIR / name}: python -m bench.bench_service trains it")
    return path, make_bodies(test, n_docs, 8, seed=n_docs)


async def run(model_path: Path, bodies: list[bytes], requests: int, rounds: int) -> dict[str, Any]:
    from bench.service_breakdown import asgi_request
    from tunemix.service.main import create_app
    from tunemix.service.settings import Settings

    both = sides()
    app = create_app(Settings(models_dir=model_path.parent.parent, default_model=model_path.parent.name, workers=2))
    wall: dict[str, list[float]] = defaultdict(list)
    cpu: dict[str, list[float]] = defaultdict(list)
    started: dict[str, list[float]] = defaultdict(list)
    count = [0]

    def on_gc(phase: str, info: dict[str, Any]) -> None:
        count[0] += phase == "start"

    async with contextlib.AsyncExitStack() as stack:
        await stack.enter_async_context(app.router.lifespan_context(app))
        while not app.state.registry.all_warm:
            await asyncio.sleep(0.2)
        answers = {}
        for key, side in both.items():
            use(side)
            answers[key] = [json.loads((await asgi_request(app, b))[1]) for b in bodies * 2]
        for a, b in zip(answers["before"], answers["now"], strict=True):
            a.pop("server_time_ms"), b.pop("server_time_ms")
            if a != b:
                raise SystemExit("the two sides answered differently")
        gc.callbacks.append(on_gc)
        try:
            for r in range(rounds):
                for key in (("before", "now") if r % 2 == 0 else ("now", "before")):
                    use(both[key])
                    count[0] = 0
                    for i in range(requests):
                        c0, t0 = time.process_time(), time.perf_counter()
                        await asgi_request(app, bodies[i % len(bodies)])
                        wall[key].append((time.perf_counter() - t0) * 1e3)
                        cpu[key].append((time.process_time() - c0) * 1e3)
                    started[key].append(count[0] / requests)
        finally:
            gc.callbacks.remove(on_gc)
            use(both["now"])
    out: dict[str, Any] = {key: {"requests": len(wall[key]),
                                 "wall_p50_ms": round(float(np.percentile(wall[key], 50)), 3),
                                 "wall_p90_ms": round(float(np.percentile(wall[key], 90)), 3),
                                 "wall_p99_ms": round(float(np.percentile(wall[key], 99)), 3),
                                 "cpu_p50_ms": round(float(np.percentile(cpu[key], 50)), 3),
                                 "collections_per_request_by_phase": [round(c, 3) for c in started[key]]}
                           for key in ("before", "now")}
    for stat in ("wall_p50_ms", "cpu_p50_ms"):
        out[f"{stat}_ratio_now_over_before"] = round(out["now"][stat] / out["before"][stat], 4)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--model-set", choices=["mq2008", "mslr-default"], default="mslr-default")
    ap.add_argument("--docs", type=int, default=1000)
    ap.add_argument("--requests", type=int, default=100, help="requests a phase")
    ap.add_argument("--rounds", type=int, default=6, help="phases a side, alternated")
    ap.add_argument("--name", default="rank_path_ab")
    args = ap.parse_args(argv)
    path, bodies = bodies_of(args.model_set, args.docs)
    load = [round(x, 2) for x in os.getloadavg()]
    result = asyncio.run(run(path, bodies, args.requests, args.rounds))
    payload = {"command": "python -m bench.rank_path_ab " + " ".join(argv or sys.argv[1:]),
               "model": str(path.relative_to(MODELS_DIR.parent)), "docs": args.docs, "body_bytes": len(bodies[0]),
               "loadavg_start": load, "loadavg_end": [round(x, 2) for x in os.getloadavg()], **result}
    print(json.dumps(result), flush=True)
    print(f"wrote {write_result(args.name, payload)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
