"""The forest kernel's leaf masks and single-output lanes against the kernel without them, in one
process, the sides alternating call by call.

    python -m bench.forest_paths_ab                      # both model sets, 100 and 1,000 documents
    python -m bench.forest_paths_ab --calls 3000 --name forest_paths_ab

Sides (the same forest, its derived layout changed):

- ``now``: trees of up to 32 leaves scored by leaf masks (``PackedNodes.base_route``,
  ``MASK_LEAVES``), and a base whose leaves fill one output (a LambdaMART or McRank tree of a
  K-output forest) adding only that lane (``base_lane``, ``leaf_lane``);
- ``no_masks``: those trees walked (``base_route`` set back to ``base_kind``), lanes kept;
- ``before``: walked, and every base added on all K lanes (``base_lane`` -1): the kernel's paths
  before both changes.

Every side scores the model's own wide features of the first documents of the test file
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


def twin(forest: Any, *, masks: bool, lanes: bool) -> Any:
    """The same forest with the leaf masks and the single-output lanes each on or off."""
    from tunemix.core.scoring.forest import FlatForest

    out = FlatForest(**{f.name: getattr(forest, f.name) for f in dataclasses.fields(forest)})
    p = forest.packed
    change: dict[str, Any] = {"_ck_plans": {}}
    if not masks:
        change["base_route"] = forest.base_kind.astype(np.int8)
    if not lanes:
        change["base_lane"] = np.full_like(p.base_lane, -1)
    out.__dict__["packed"] = dataclasses.replace(p, **change)
    return out


def measure(model: Any, features: np.ndarray, n_docs: int, calls: int) -> dict[str, Any]:
    from tunemix.core.scoring import forest as F
    from tunemix.core.scoring import runtime

    x = features[:n_docs]
    wide = model.wide_features(x, np.array([0, x.shape[0]]))
    ck = model._checkpoints
    sides = {"now": model.forest, "no_masks": twin(model.forest, masks=False, lanes=True),
             "before": twin(model.forest, masks=False, lanes=False)}
    want = F.score_forest(sides["before"], wide, ck)
    for name, forest in sides.items():
        if not np.array_equal(F.score_forest(forest, wide, ck).view(np.int64), want.view(np.int64)):
            raise SystemExit(f"side {name!r} gives other sums than 'before': its path is not exact")
    times: dict[str, list[int]] = {name: [] for name in sides}
    order = list(sides.items())
    with runtime.single_threaded():
        for r in range(calls):
            for name, forest in order[r % 3:] + order[: r % 3]:
                t0 = time.thread_time_ns()
                F.score_forest(forest, wide, ck)
                times[name].append(time.thread_time_ns() - t0)
    out: dict[str, Any] = {"documents": int(x.shape[0])}
    for name, t in times.items():
        ms = np.asarray(t) / 1e6
        out[name] = {"cpu_ms_p50": float(np.median(ms)), "cpu_ms_p90": float(np.percentile(ms, 90))}
    for name in ("now", "no_masks"):
        out[f"ratio_p50_{name}_to_before"] = out[name]["cpu_ms_p50"] / out["before"]["cpu_ms_p50"]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=3000, help="calls a side at 100 documents (a tenth at 1,000)")
    ap.add_argument("--name", default="forest_paths_ab")
    args = ap.parse_args(argv)
    from tunemix.core.data.svmlight import read_svmlight
    from tunemix.core.scoring.ensemble_model import load_model
    from tunemix.core.scoring.packed import ROUTE_MASK

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
                                 "single_lane_bases": int((p.base_lane >= 0).sum()),
                                 "mask_trees": int((p.base_route == ROUTE_MASK).sum()),
                                 "table_trees": int((p.base_small >= 0).sum())}
        for n_docs, calls in ((100, args.calls), (1000, max(20, args.calls // 10))):
            entry[f"docs_{n_docs}"] = m = measure(model, features, n_docs, calls)
            print(f"{key} {n_docs} docs: " + ", ".join(f"{name} {m[name]['cpu_ms_p50']:.3f} ms"
                                                       for name in ("now", "no_masks", "before")), flush=True)
        results[key] = entry
    path = write_result(args.name, {"calls": args.calls, "results": results})
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
