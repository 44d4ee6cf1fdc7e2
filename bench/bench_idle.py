"""How much slower a scoring call is after the machine has been idle: ``EnsembleModel.score`` of
one 1,000-document query of the MQ2008 Fold1 ensemble, called back to back and called after a
pause (sleeping, or busy-waiting on the calling thread), on one and on two scoring threads.

    python -m bench.bench_idle [--pause-ms 50] [--calls 30] [--rounds 2]

At 20 requests/s a service worker is idle 30-50 ms between 1,000-document requests; this
separates what the idle spell costs from what the request costs. Modes are interleaved call by
call within a round (back to back, after a sleep, after busy-waiting) so that the machine's
phase affects them alike; medians per round, with the machine probe before and after. Writes
``bench/results/idle.json``. The thread counts are ``set_scoring_threads`` of one process, with
numba's OpenMP threads waiting passively as the service's do (``OMP_WAIT_POLICY``, set by
``tunemix.core.scoring.forest`` unless given).
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import numpy as np

from bench.common import SHARED_DATA, ensure_model, machine_probe_ms, write_result

MODES = ("back_to_back", "after_sleep", "after_busy_wait")


def pause(mode: str, seconds: float) -> None:
    if mode == "after_sleep":
        time.sleep(seconds)
    elif mode == "after_busy_wait":
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            pass


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pause-ms", type=float, default=50.0)
    ap.add_argument("--calls", type=int, default=30, help="calls per mode, thread count and round")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--docs", type=int, default=1000)
    args = ap.parse_args(argv)

    from tunemix.core.scoring import runtime

    runtime.limit_blas_threads(1)
    from tunemix.core.data.svmlight import read_svmlight
    from tunemix.core.scoring.ensemble_model import load_model

    model_dir = ensure_model()
    model, _ = load_model(model_dir)
    test = read_svmlight(SHARED_DATA / "MQ2008" / "Fold1" / "test.txt")
    rng = np.random.default_rng(0)
    n = min(args.docs, test.features.shape[0])
    x = np.ascontiguousarray(test.features[rng.choice(test.features.shape[0], n, replace=False)],
                             dtype=np.float32)
    off = np.array([0, n], dtype=np.int64)
    runtime.set_scoring_threads(2)
    threads = [1, 2] if runtime.get_scoring_threads() >= 2 else [1]  # numba's pool may have one
    for t in threads:
        runtime.set_scoring_threads(t)
        for _ in range(3):
            model.score(x, off)  # compile / warm
    rounds: list[dict[str, Any]] = []
    for r in range(args.rounds):
        probe_before = machine_probe_ms()
        times: dict[str, list[float]] = {}
        for _ in range(args.calls):
            for t in threads:
                runtime.set_scoring_threads(t)
                for mode in MODES:
                    pause(mode, args.pause_ms / 1e3)
                    stages: dict[str, float] = {}
                    t0 = time.perf_counter()
                    model.score(x, off, timings=stages)
                    times.setdefault(f"{t}_threads/{mode}/total", []).append(time.perf_counter() - t0)
                    for k, v in stages.items():
                        times.setdefault(f"{t}_threads/{mode}/{k}", []).append(v)
        row: dict[str, Any] = {"round": r, "probe_ms_before": probe_before, "probe_ms_after": machine_probe_ms()}
        row["median_ms"] = {k: round(statistics.median(v) * 1e3, 3) for k, v in sorted(times.items())}
        rounds.append(row)
        print(f"round {r} (probe {row['probe_ms_before']}/{row['probe_ms_after']} ms):")
        for t in threads:
            print("  " + f"{t} thread(s): " + ", ".join(
                f"{m} {row['median_ms'][f'{t}_threads/{m}/total']:.2f} ms" for m in MODES))
    path = write_result("idle", {
        "command": "python -m bench.bench_idle " + " ".join(argv or []),
        "model": str(model_dir), "documents": n, "pause_ms": args.pause_ms, "calls": args.calls,
        "threads": threads, "modes": list(MODES), "rounds": rounds,
    })
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
