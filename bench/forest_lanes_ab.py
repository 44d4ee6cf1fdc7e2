"""The forest kernel's single-output lanes against every base added on all K lanes, in one
process, the two alternating call by call.

    python -m bench.forest_lanes_ab                      # both model sets, 100 and 1,000 documents
    python -m bench.forest_lanes_ab --calls 3000 --name forest_lanes_ab

A base whose leaves fill one output (a LambdaMART or McRank tree of a K-output forest) adds only
that lane (``PackedNodes.base_lane``, ``leaf_lane``). "every lane" is the same forest with
``base_lane`` set to -1 for every base, which sends each one down the K-lane path the kernel took
before. Both sides score the model's own wide features of the first documents of the test file
(``model.wide_features``) at the model's checkpoints, on one thread; their sums are checked to be
the same bits first. Reported: thread CPU per call, medians and p90 over ``--calls`` calls a
side. The models are ``bench.bench_service``'s (``models/mslr-sample-default`` and
``models/mq2008-fold1``, trained when absent). Writes ``bench/results/<name>.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from typing import Any

import numpy as np

from bench.common import MODELS_DIR, MSLR_TEST, SHARED_DATA, ensure_model, mslr_default_model, write_result


def every_lane(forest: Any) -> Any:
    """The same forest with every base on the K-lane path."""
    from training.scoring.forest import FlatForest

    twin = FlatForest(**{f.name: getattr(forest, f.name) for f in dataclasses.fields(forest)})
    p = forest.packed
    twin.__dict__["packed"] = dataclasses.replace(p, base_lane=np.full_like(p.base_lane, -1), _ck_plans={})
    return twin


def measure(model: Any, features: np.ndarray, n_docs: int, calls: int) -> dict[str, Any]:
    from training.scoring import forest as F

    x = features[:n_docs]
    wide = model.wide_features(x, np.array([0, x.shape[0]]))
    ck = model._checkpoints
    lanes, every = model.forest, every_lane(model.forest)
    a, b = F.score_forest(lanes, wide, ck), F.score_forest(every, wide, ck)
    if not np.array_equal(a.view(np.int64), b.view(np.int64)):
        raise SystemExit("the two sides' sums differ: the lanes are not exact")
    times: dict[str, list[int]] = {"lanes": [], "every_lane": []}
    with F.single_threaded():
        for r in range(calls):
            order = (("lanes", lanes), ("every_lane", every))
            for name, forest in order if r % 2 else order[::-1]:
                t0 = time.thread_time_ns()
                F.score_forest(forest, wide, ck)
                times[name].append(time.thread_time_ns() - t0)
    out: dict[str, Any] = {"documents": int(x.shape[0])}
    for name, t in times.items():
        ms = np.asarray(t) / 1e6
        out[name] = {"cpu_ms_p50": float(np.median(ms)), "cpu_ms_p90": float(np.percentile(ms, 90))}
    out["ratio_p50"] = out["lanes"]["cpu_ms_p50"] / out["every_lane"]["cpu_ms_p50"]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=3000, help="calls a side at 100 documents (a tenth at 1,000)")
    ap.add_argument("--name", default="forest_lanes_ab")
    args = ap.parse_args(argv)
    from training.data.svmlight import read_svmlight
    from training.scoring.ensemble_model import load_model

    sets = {
        "mslr-default": (mslr_default_model(MODELS_DIR, "mslr-sample-default", reuse=True),
                         read_svmlight(MSLR_TEST, n_features=136).features),
        "mq2008": (ensure_model(), read_svmlight(SHARED_DATA / "MQ2008" / "Fold1" / "test.txt",
                                                 n_features=46).features),
    }
    results: dict[str, Any] = {}
    for key, (path, features) in sets.items():
        model, _ = load_model(path)
        p = model.forest.packed
        entry: dict[str, Any] = {"model": str(path.relative_to(MODELS_DIR.parent)),
                                 "bases": model.forest.n_base, "outputs": model.forest.n_outputs,
                                 "single_lane_bases": int((p.base_lane >= 0).sum())}
        for n_docs, calls in ((100, args.calls), (1000, max(20, args.calls // 10))):
            entry[f"docs_{n_docs}"] = m = measure(model, features, n_docs, calls)
            print(f"{key} {n_docs} docs: lanes {m['lanes']['cpu_ms_p50']:.3f} ms, every lane "
                  f"{m['every_lane']['cpu_ms_p50']:.3f} ms (ratio {m['ratio_p50']:.3f})", flush=True)
        results[key] = entry
    path = write_result(args.name, {"calls": args.calls, "results": results})
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
