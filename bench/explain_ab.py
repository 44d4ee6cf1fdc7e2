"""The /rank explain lane's ``explain_rows`` of another tree (a before) and of this tree, alternated
call by call in one process.

    python -m bench.explain_ab --before DIR --model MQ2008_VERSION_DIR --mslr-model VERSION_DIR
                               [--rounds 400] [--name explain_ab]

Writes ``bench/results/NAME.json``. ``DIR`` holds the other tree (``git archive main | tar -x -C
DIR``); its ``training`` package is copied into /tmp/tunemix-explain-ab as ``training_before``, its
imports of ``training`` rewritten, and its numba cache lock module replaced by an import of this
tree's (``tunemix.core.numba_cache``: a second lock installed on the same files would wait on the
first), so that both trees' code is importable side by side. Each tree loads the model itself,
scores ``bench.bench_explain``'s 8 lists of 100 real test documents and explains each list's top 10
(what the explain lane does after its scoring pass, on one thread); the two trees' calls alternate,
their order swapped every round, so that both meet the same machine. Reported: thread CPU ms per
call (min, p25, median) and the median of the per-round ratios this / before, and the two trees'
largest difference of contributions and baselines (0 when bit-identical).

Why in one process: on the shared 2-core machine a whole request's CPU time moved by 1.3-1.6x
between runs a minute apart (``bench.explain_breakdown`` of the same tree), more than the changes
measured; side by side, call by call, both trees see the same speed.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import MSLR, SHARED_DATA, machine_probe_ms, write_result

ROUNDS = 400
PACKAGE = "training_before"


def before_package(tree: Path, into: Path) -> None:
    """``tree``'s ``training`` package as ``into/training_before`` (module docstring). The copies keep
    their sources' modification times: numba's cache, keyed by a source's path and stamp, then
    holds the other tree's kernels from one run to the next."""
    target = into / PACKAGE
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(tree / "training", target, ignore=shutil.ignore_patterns("__pycache__"))
    pattern = re.compile(r"(?<![\w.])training(?=[.\s])")
    for path in target.rglob("*.py"):
        stat = path.stat()
        path.write_text(pattern.sub(PACKAGE, path.read_text()))
        os.utime(path, (stat.st_atime, stat.st_mtime))
    (target / "numba_cache.py").write_text(
        "import tunemix.core.numba_cache  # noqa: F401 - this tree's lock, installed once\n")


def lists_of(test: Any) -> list[tuple[np.ndarray, np.ndarray]]:
    """``bench.bench_explain``'s 8 request bodies as (features, offsets) arrays."""
    from bench.bench_explain import N_DOCS
    from bench.bench_service import make_bodies

    out = []
    for body in make_bodies(test, N_DOCS, 8, seed=1):
        docs = json.loads(body)["queries"][0]["documents"]
        x = np.array([d["features"] for d in docs], dtype=np.float32)
        out.append((x, np.array([0, x.shape[0]], dtype=np.int64)))
    return out


def compare(model_path: Path, test: Any, rounds: int) -> dict[str, Any]:
    from bench.bench_explain import TOP

    sides = {}
    for side, package in (("before", PACKAGE), ("this", "training")):
        ensemble = importlib.import_module(f"{package}.scoring.ensemble_model")
        explanation = importlib.import_module(f"{package}.scoring.explanation")
        importlib.import_module(f"{package}.scoring.forest").set_scoring_threads(1)
        model = ensemble.load_model(model_path)[0]
        names = [f"f{j + 1}" for j in range(model.n_features)]
        lists = lists_of(test)
        passes = [model.scoring_pass(x, off, whitening=True) for x, off in lists]
        rows = [np.argsort(-p.scores, kind="stable")[:TOP] for p in passes]
        sides[side] = (explanation.explain_rows, model, names, lists, passes, rows)
    worst = {"contributions": 0.0, "baseline": 0.0}
    for j in range(8):
        got = [fn(model, *lists[j], rows[j], scoring=passes[j], feature_names=names)
               for fn, model, names, lists, passes, rows in sides.values()]
        for key in worst:
            worst[key] = max(worst[key], float(np.max(np.abs(getattr(got[0], key) - getattr(got[1], key)))))
    times: dict[str, list[float]] = {side: [] for side in sides}
    for k in range(rounds):
        j = k % 8
        for side in (("before", "this") if k % 2 else ("this", "before")):
            fn, model, names, lists, passes, rows = sides[side]
            c0 = time.thread_time()
            fn(model, *lists[j], rows[j], scoring=passes[j], feature_names=names)
            times[side].append((time.thread_time() - c0) * 1e3)
    out: dict[str, Any] = {"model": str(model_path), "rounds": rounds, "largest_difference": worst}
    for side, v in times.items():
        s = sorted(v)
        out[f"{side}_ms"] = {"min": round(s[0], 3), "p25": round(s[len(s) // 4], 3),
                             "median": round(statistics.median(s), 3)}
    out["this_over_before_median_of_rounds"] = round(statistics.median(
        b / a for a, b in zip(times["before"], times["this"], strict=True)), 3)
    return out


def main(argv: list[str] | None = None) -> int:
    from tunemix.core.data.svmlight import read_svmlight

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    p.add_argument("--before", type=Path, required=True, help="the other tree (holding training/)")
    p.add_argument("--model", type=Path, required=True, help="the MQ2008 version directory")
    p.add_argument("--mslr-model", type=Path, required=True, help="the default model trained on the MSLR sample")
    p.add_argument("--rounds", type=int, default=ROUNDS, help=f"calls of each tree per model (default {ROUNDS})")
    p.add_argument("--name", default="explain_ab", help="bench/results/NAME.json")
    args = p.parse_args(argv)
    result: dict[str, Any] = {
        "command": "python -m bench.explain_ab " + " ".join(argv if argv is not None else sys.argv[1:]),
        "load_average_before": [round(v, 2) for v in os.getloadavg()], "machine_probe_ms": machine_probe_ms()}
    mq = read_svmlight(SHARED_DATA / "MQ2008" / "Fold1" / "test.txt")
    mslr = read_svmlight(MSLR / "msn1.fold1.test.5k.txt", n_features=136)
    work = Path(tempfile.gettempdir()) / "tunemix-explain-ab"
    before_package(args.before, work)
    sys.path.insert(0, str(work))
    for key, path, test in (("mq2008", args.model, mq), ("mslr_sample_default", args.mslr_model, mslr)):
        result[key] = compare(path, test, args.rounds)
        print(f"[explain_ab] {key}: {json.dumps(result[key])}", flush=True)
    result["load_average_after"] = [round(v, 2) for v in os.getloadavg()]
    print(f"[explain_ab] wrote {write_result(args.name, result)}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
