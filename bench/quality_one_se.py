"""The one-standard-error rule for the forecaster's grid against the fixed 1e-4 tolerance and the
uniform mix, on the quality benchmark's cached members (run ``python -m bench.quality`` and
``python -m bench.quality --dataset mslr-sample --sizes full`` first)::

    .venv/bin/python -m bench.quality_one_se      # -> bench/results/quality_one_se.json

For AdaBoost.MH alone and every member type, every snapshot or one T: test NDCG@10 (yahoo) of
each tie rule, and the held-out check (tuned on 20 validation queries, three draws, NDCG@10 on
the other validation queries): the validation-only criterion that chose the rule. Here the SE
is computed from the 1e-4 fit's chosen mix, which the forecaster's ``"one_se"`` computes itself.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from joblib import Parallel, delayed

from bench import quality as q
from bench.common import RESULTS
from training.ensemble import ExponentialForecaster
from training.evaluation import evaluate

DECISION = {"members": "every type", "views": "all", "snapshots": "all", "tune_on": "validation"}


def _se(labels: np.ndarray, scores: np.ndarray, offsets: np.ndarray) -> float:
    per = evaluate(labels, scores, offsets, ["ndcg@10"], "yahoo").per_query["ndcg@10"]
    return float(np.std(per, ddof=1) / np.sqrt(per.size))

def run(key: str, cache: str) -> tuple[str, dict[str, Any]]:
    cell = q.load_cell(key, Path(cache))
    assert cell is not None
    out: dict[str, Any] = {}
    vs, vl, vo = q._split(cell, "vali")
    n_vali = vo.shape[0] - 1
    for members in ("adaboost", "every type"):
        sel = q._decision_members({**DECISION, "members": members})
        cols = np.flatnonzero([sel(m) for m in cell.meta])
        sub = np.ascontiguousarray(vs[:, cols])
        fc = ExponentialForecaster(rescale="zscore_query").fit(sub, vl, vo)
        se = _se(vl, fc.transform(sub, vo), vo)
        for snap in ("all", "tune"):
            rows = {"tol1e-4": q.mix(cell, sel, snapshots=snap),
                    "one_se": q.mix(cell, sel, snapshots=snap, tie_tolerance=se),
                    "uniform": q.mix(cell, sel, mixer="uniform")}
            for name, r in rows.items():
                out[f"{members}|{snap}|{name}"] = {
                    "test": q.test_metrics(cell, r["test_scores"], all_conventions=False)["test_ndcg@10"],
                    "c": r.get("c"), "se": se}
            if n_vali < 2 * q.SMALL_VALI:
                continue
            for name in ("tol1e-4", "one_se"):
                held = []
                for seed in range(q.SMALL_VALI_DRAWS):
                    qs = np.sort(np.random.default_rng(seed).choice(n_vali, size=q.SMALL_VALI, replace=False))
                    extra: dict[str, Any] = {}
                    if name == "one_se":
                        r_rows, off = q._query_rows(vo, qs)
                        part = np.ascontiguousarray(vs[r_rows][:, cols])
                        f0 = ExponentialForecaster(rescale="zscore_query").fit(part, vl[r_rows], off)
                        extra["tie_tolerance"] = _se(vl[r_rows], f0.transform(part, off), off)
                    held.append(q.mix(cell, sel, snapshots=snap, vali_queries=qs, **extra)["vali"])
                out[f"{members}|{snap}|{name}"]["heldout20"] = float(np.mean(held))
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
