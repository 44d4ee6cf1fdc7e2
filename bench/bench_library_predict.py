"""One 100-document list through the library's ``predict`` beside two busy CPU burners, against
LightGBM's ``predict`` of the early-stopped model of the same data, in the same run.

    python -m bench.bench_library_predict [--rounds 300] [--seed 0]

Both models are trained here on MQ2008 Fold1 (``../shared/data`` or ``TUNEMIX_SHARED_DATA``):
tunemix's default ``TuneMixRanker`` (members chosen from the data) with the validation fold as
``eval_set``, and LightGBM's ``LGBMRanker`` (lambdarank, early-stopped on the same validation
fold). The list is 100 test documents scored as one query (``group=[100]``). Then two burner
processes spin on the two cores (each stops by itself after ``--burn-s`` seconds, and is ended
at the end) while the three are timed interleaved, round by round:

- ``tunemix``: ``Model.predict`` as a user calls it (the library's floor: lists under
  ``TUNEMIX_PARALLEL_MIN_DOCUMENTS``, default 256, score on one thread);
- ``tunemix_every_thread``: the same with the floor at 0 (every numba thread for any list long
  enough in work: what the floor avoids);
- ``lightgbm``: ``LGBMRanker.predict`` (its own threads, as a user calls it);
- ``lightgbm_one_thread``: ``predict(x, num_threads=1)``, the stricter peer.

The goal: tunemix's median at most 1.5 times LightGBM's. JSON: bench/results/library_predict.json.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import sys
import time
from typing import Any

import numpy as np

from bench.common import SHARED_DATA, machine_probe_ms, write_result


def _burn(seconds: float) -> None:
    """Spin one core for ``seconds`` (bounded: it stops by itself)."""
    end = time.monotonic() + seconds
    x = 0
    while time.monotonic() < end:
        x += 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=300)
    ap.add_argument("--burn-s", type=float, default=300.0, help="burners stop by themselves after this")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--name", default="library_predict")
    args = ap.parse_args(argv)

    import lightgbm

    import tunemix
    from tunemix.core.scoring import runtime

    fold = SHARED_DATA / "MQ2008" / "Fold1"
    if not (fold / "train.txt").is_file():
        raise SystemExit(f"bench_library_predict: MQ2008 Fold1 not found under {fold} (shared/data beside the "
                         "repository, or set TUNEMIX_SHARED_DATA)")
    xt, yt, gt, *_ = tunemix.read_letor(fold / "train.txt")
    xv, yv, gv, *_ = tunemix.read_letor(fold / "vali.txt", n_features=xt.shape[1])
    xs, *_ = tunemix.read_letor(fold / "test.txt", n_features=xt.shape[1])
    t0 = time.perf_counter()
    ranker = tunemix.TuneMixRanker(random_state=args.seed, progress=False).fit(
        xt, yt, group=gt, eval_set=[(xv, yv)], eval_group=[gv])
    fit_s = time.perf_counter() - t0
    peer = lightgbm.LGBMRanker(objective="lambdarank", n_estimators=2000, learning_rate=0.05, num_leaves=31,
                               random_state=args.seed, verbose=-1)
    peer.fit(xt, yt, group=gt, eval_set=[(xv, yv)], eval_group=[gv], eval_at=[10],
             callbacks=[lightgbm.early_stopping(50, verbose=False)])
    x = np.ascontiguousarray(xs[:100])
    group = [100]
    model = ranker.model_

    def ours() -> Any:
        return model.predict(x, group=group)

    def ours_every_thread() -> Any:
        before = runtime._parallel_min_documents
        runtime.set_parallel_min_documents(0)
        try:
            return model.predict(x, group=group)
        finally:
            runtime._parallel_min_documents = before

    def theirs() -> Any:
        return peer.predict(x)

    def theirs_one_thread() -> Any:
        return peer.predict(x, num_threads=1)

    cases = {"tunemix": ours, "tunemix_every_thread": ours_every_thread, "lightgbm": theirs,
             "lightgbm_one_thread": theirs_one_thread}
    for fn in cases.values():  # compiled, loaded, first-call costs paid before the clock
        for _ in range(5):
            fn()
    probe_quiet = machine_probe_ms()
    ctx = mp.get_context("spawn")
    burners = [ctx.Process(target=_burn, args=(args.burn_s,), daemon=True) for _ in range(2)]
    for b in burners:
        b.start()
    times: dict[str, list[float]] = {k: [] for k in cases}
    try:
        time.sleep(0.5)
        load_during = os.getloadavg()
        for _ in range(args.rounds):
            for name, fn in cases.items():
                t = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - t)
        load_after = os.getloadavg()
    finally:
        for b in burners:
            b.terminate()
            b.join()
    med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    p90 = {k: float(np.percentile(v, 90)) * 1e3 for k, v in times.items()}
    ratio = med["tunemix"] / med["lightgbm"]
    result = {
        "data": "MQ2008 Fold1: train/vali to fit, the first 100 test documents as one list",
        "tunemix": {"config": "default TuneMixRanker (members chosen from the data)", "fit_s": round(fit_s, 1),
                    "members": len(model.members), "bases": model.ensemble.forest.n_base,
                    "parallel_min_documents": runtime.get_parallel_min_documents(),
                    "numba_threads": int(runtime.get_scoring_threads())},
        "lightgbm": {"objective": "lambdarank", "best_iteration": int(peer.best_iteration_ or 0),
                     "version": lightgbm.__version__},
        "burners": 2, "rounds": args.rounds, "cores": os.cpu_count(),
        "loadavg_during": [round(v, 2) for v in load_during], "loadavg_after": [round(v, 2) for v in load_after],
        "probe_ms_before_burners": probe_quiet,
        "median_ms": {k: round(v, 3) for k, v in med.items()},
        "p90_ms": {k: round(v, 3) for k, v in p90.items()},
        "ratio_tunemix_to_lightgbm": round(ratio, 3),
        "ratio_every_thread_to_lightgbm": round(med["tunemix_every_thread"] / med["lightgbm"], 3),
        "ratio_tunemix_to_lightgbm_one_thread": round(med["tunemix"] / med["lightgbm_one_thread"], 3),
        "goal": "tunemix median at most 1.5 x LightGBM's",
        "goal_met": ratio <= 1.5,
        "command": "python -m bench.bench_library_predict " + " ".join(argv or sys.argv[1:]),
    }
    path = write_result(args.name, result)
    print(f"median ms with two burners: tunemix {med['tunemix']:.3f}, every thread {med['tunemix_every_thread']:.3f}, "
          f"lightgbm {med['lightgbm']:.3f}, lightgbm one thread {med['lightgbm_one_thread']:.3f}; "
          f"ratio {ratio:.2f} (goal <= 1.5) -> {path}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
