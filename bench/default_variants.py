"""Variants of the default members on small data, over several seeds: how the default was chosen.

``python -m bench.default_variants --datasets mq2008,mslr-sample --variants before,rate,third,default
--seeds 0,1,2,3,4`` (JSON in ``bench/results/default_variants.json``): for every fold of
``bench.defaults``' splits and every seed, the default's member tables (``tunemix.train.members.auto``)
changed as a variant says, trained in this process (relevance head off: it does not rank),
test NDCG@10 (yahoo). Variants (``+`` joins them, applied left to right):

- ``default``: the members ``TuneMixRanker()`` trains, as they are;
- ``before``: the small-data default before it had a third run and its own learning rate (two
  LambdaMART runs and McRank at 0.1);
- ``rate``: ``before`` with every LightGBM run at 0.05; ``third``: ``before`` with the 7-leaf
  ``raw+std`` LambdaMART run;
- changes to what precedes them (``before+svm``: the old default with an SVM): ``svm``, a
  linear Crammer-Singer SVM run on ``raw+std`` (C 1e-3, 1e-2, 1e-1); ``noab``, no AdaBoost.MH
  run; ``bag1``, no bagging (all documents and features each iteration); ``pat100``,
  LambdaMART patience 100; ``rep2``, every LightGBM run twice, with two seeds.

The seed changes the LightGBM runs' bagging and AdaBoost.MH's calibration part: one seed is
one draw of a noisy result, so the report is the mean over seeds of each fold, then the folds.
"""

from __future__ import annotations

import argparse
import copy
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import RESULTS, machine_info
from bench.defaults import mean_se, ndcg, splits

VARIANTS = ("default", "before", "rate", "third", "svm", "noab", "bag1", "pat100", "rep2")


def apply_variant(members: dict[str, Any], name: str) -> dict[str, Any]:
    """``members`` (the default's table on small data) changed as the variant ``name`` says."""
    members = copy.deepcopy(members)
    for part in name.split("+"):
        runs = members["lambdamart"] + members["mcrank"]
        if part == "default":
            continue
        if part in ("before", "rate", "third"):
            members["lambdamart"] = [b for b in members["lambdamart"] if b["n_leaves"] != 7]
            for b in members["lambdamart"] + members["mcrank"]:
                b["learning_rate"] = 0.05 if part == "rate" else 0.1
            if part == "third":
                members["lambdamart"].append({**members["lambdamart"][1], "n_leaves": 7})
        elif part == "svm":
            members["svm"] = [{"C": [1e-3, 1e-2, 1e-1], "views": ["raw+std"]}]
        elif part == "noab":
            members["adaboost"] = []
        elif part == "bag1":
            for b in runs:
                b["bagging_fraction"] = b["feature_fraction"] = 1.0
        elif part == "pat100":
            for b in members["lambdamart"]:
                b["early_stopping"] = 100
        elif part == "rep2":
            for key in ("lambdamart", "mcrank"):
                members[key] = [{**b, "seed": 1000 * r + 17 * i} for i, b in enumerate(members[key]) for r in range(2)]
        else:
            raise ValueError(f"unknown variant {part!r}; known: {', '.join(VARIANTS)}")
    return members


def run(datasets: list[str], variants: list[str], seeds: list[int]) -> dict[str, Any]:
    from tunemix.train.config import load_config
    from tunemix.train.members.auto import auto_members
    from tunemix.train.train import data_shape, train

    report: dict[str, Any] = {"machine": machine_info(), "measure": "ndcg@10", "convention": "yahoo",
                              "seeds": seeds, "datasets": {}}
    for name in datasets:
        folds = splits(name)
        out: dict[str, Any] = {}
        for variant in variants:
            table = np.full((len(folds), len(seeds)), np.nan)
            t0 = time.perf_counter()
            for k, sets in enumerate(folds):
                members = apply_variant(auto_members(data_shape(sets), None)[0], variant)
                for j, seed in enumerate(seeds):
                    cfg = load_config(None, {"run.n_jobs": 2, "seed": seed}, require_data=False,
                                      tables={"members": copy.deepcopy(members), "mixer": {"compare": []},
                                              "relevance": {"enabled": False}})
                    model = train(cfg, progress=False, sets=sets, save=False).model
                    table[k, j] = ndcg(sets["test"], model.score(sets["test"].features, sets["test"].query_offsets))[0]
            mean, se = mean_se(table.mean(axis=1))
            out[variant] = {"test_ndcg@10": mean, "test_ndcg@10_se": se,
                            "per_seed": [round(float(v), 4) for v in table.mean(axis=0)],
                            "per_fold_and_seed": np.round(table, 4).tolist(),
                            "seconds": round(time.perf_counter() - t0, 1)}
            print(f"{name} {variant:16s} {out[variant]['test_ndcg@10']:.4f} per seed {out[variant]['per_seed']}",
                  flush=True)
        report["datasets"][name] = out
    return report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--datasets", default="mq2008,mslr-sample")
    ap.add_argument("--variants", default="before,rate,third,default")
    ap.add_argument("--seeds", default="0,1,2,3,4")
    ap.add_argument("--out", default=str(RESULTS / "default_variants.json"))
    args = ap.parse_args(argv)
    report = run(args.datasets.split(","), args.variants.split(","), [int(s) for s in args.seeds.split(",")])
    Path(args.out).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
