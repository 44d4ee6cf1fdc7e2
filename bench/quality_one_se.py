"""The one-standard-error rule for the forecaster's grid against the fixed 1e-4 tolerance and the
uniform mix, on the quality benchmark's cached members (run ``python -m bench.quality`` and
``python -m bench.quality --dataset mslr-sample --sizes full`` first)::

    .venv/bin/python -m bench.quality_one_se      # -> bench/results/quality_one_se.json

For AdaBoost.MH alone and every member type, every snapshot or one T: test NDCG@10 (yahoo) of
each tie rule, and the held-out check (tuned on 20 validation queries, three draws, NDCG@10 on
the other validation queries): the validation-only criterion that chose the rule. Both rules
run through the pipeline's own forecaster search (``tie_tolerance = 1e-4`` or ``"one_se"``).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from joblib import Parallel, delayed

from bench import quality as q
from bench.common import RESULTS

DECISION = {"members": "every type", "views": "all", "snapshots": "all", "tune_on": "validation"}
RULES: dict[str, dict[str, Any]] = {"tol1e-4": {}, "one_se": {"tie_tolerance": "one_se"}}


def run(key: str, cache: str) -> tuple[str, dict[str, Any]]:
    cell = q.load_cell(key, Path(cache))
    assert cell is not None
    out: dict[str, Any] = {}
    for members in ("adaboost", "every type"):
        sel = q._decision_members({**DECISION, "members": members})
        r = q.mix(cell, sel, mixer="uniform")
        uniform = {"test": q.test_metrics(cell, r["test_scores"], all_conventions=False)["test_ndcg@10"], "c": None}
        for snap in ("all", "tune"):
            for name, rule in RULES.items():
                r = q.mix(cell, sel, snapshots=snap, **rule)
                row = {"test": q.test_metrics(cell, r["test_scores"], all_conventions=False)["test_ndcg@10"],
                       "c": r.get("c")}
                small = q.held_out(cell, sel, snapshots=snap, **rule)
                if small is not None:
                    row["heldout20"] = small[0]
                out[f"{members}|{snap}|{name}"] = row
            out[f"{members}|{snap}|uniform"] = uniform
    return key, out


def main() -> None:
    caches = (("bench/results/quality/cache", [f"mq2008-fold{f}-{s}" for s in ("full", "60") for f in range(1, 6)]),
              ("bench/results/quality-mslr-sample/cache", [f"mslr-sample-fold{f}-full" for f in range(1, 6)]))
    jobs = [(k, c) for c, ks in caches for k in ks if (Path(c) / f"{k}.npz").exists()]
    res = dict(Parallel(n_jobs=2)(delayed(run)(k, c) for k, c in jobs))
    (RESULTS / "quality_one_se.json").write_text(json.dumps(res, indent=1) + "\n")
    groups = {"mq2008 full": [k for k in res if "mq2008" in k and k.endswith("full")],
              "mq2008 60": [k for k in res if k.endswith("-60")], "mslr sample": [k for k in res if "mslr" in k]}
    for g, ks in groups.items():
        if not ks:
            continue
        for var in res[ks[0]]:
            t = [res[k][var]["test"] for k in ks]
            h = [res[k][var].get("heldout20") for k in ks]
            held = "" if h[0] is None else f" held-out {np.mean(h):.4f}"
            print(f"{g:12s} {var:30s} test {np.mean(t):.4f} ± {np.std(t, ddof=1):.4f}{held}")


if __name__ == "__main__":
    main()
