"""Whether a time budget holds: ``TuneMixRanker(time_budget_s=B)`` fitted in a process of its own
(``bench.fitproc``, as a user runs it: the imports inside ``fit`` count) on MQ2008 Fold1 and on
MSLR-shaped synthetic data of about 120k training documents (``bench.common.mslr_shaped_sets``),
for B = 10 and 60 s; reported: the fit's wall seconds against B (goal: at most 1.1 B), test
NDCG@10 (yahoo), the record's time-budget entry (stage ends, what was cut), with the
early-stopped LightGBM peer (``lgbm_es``) and the unbudgeted default measured in the same run.

``python -m bench.budget`` (JSON in ``bench/results/budget.json``); ``--budgets 10,60``,
``--datasets mq2008-fold1,synthetic-120k``, ``--no-default`` (skip the unbudgeted fits), ``--no-peer``
(skip the early-stopped LightGBM fit), ``--name NAME`` (bench/results/NAME.json).
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

from bench.common import SHARED_DATA, git, machine_probe_ms, mslr_shaped_sets, write_result
from bench.defaults import ndcg
from bench.fitproc import run_fit, warm_up
from tunemix.core.data.dataset import RankingData

DATASETS = ("mq2008-fold1", "synthetic-120k")
#: the goal: the fit's seconds at most this times the budget
TOLERANCE = 1.1


def dataset(name: str) -> dict[str, RankingData]:
    if name == "mq2008-fold1":
        from tunemix.core.data.svmlight import read_svmlight

        fold = SHARED_DATA / "MQ2008" / "Fold1"
        train = read_svmlight(fold / "train.txt")
        return {"train": train, "vali": read_svmlight(fold / "vali.txt", n_features=train.n_features),
                "test": read_svmlight(fold / "test.txt", n_features=train.n_features)}
    if name == "synthetic-120k":  # bench.scale's 120k row: 1,000 training queries of 60 to 180 documents
        return mslr_shaped_sets({"train": 1000, "vali": 200, "test": 200}, seed=0)
    raise ValueError(f"unknown data set {name!r}; expected one of {', '.join(DATASETS)}")


def _row(res: dict[str, Any], sets: dict[str, RankingData], budget: float | None) -> dict[str, Any]:
    row: dict[str, Any] = {"system": res["system"], "budget_s": budget, "fit_s": res.get("fit_s"),
                           "wall_s": res.get("wall_s"), "peak_mb": res.get("peak_mb"), "error": res.get("error")}
    if "scores" in res and "test" in res["scores"]:
        row["test_ndcg@10"] = round(ndcg(sets["test"], res["scores"]["test"])[0], 4)
    if budget is not None and row["fit_s"] is not None:
        row["ratio_to_budget"] = round(row["fit_s"] / budget, 3)
        row["held"] = bool(row["fit_s"] <= TOLERANCE * budget)
    for key in ("time_budget", "timings", "runs"):
        if key in res:
            row[key] = res[key]
    return row


def run(datasets: list[str], budgets: list[float], default: bool, peer: bool = True) -> dict[str, Any]:
    report: dict[str, Any] = {"commit": git("rev-parse", "--short", "HEAD"), "tolerance": TOLERANCE,
                              "probe_ms_start": machine_probe_ms(), "load_average_start": os.getloadavg(),
                              "warm_up": warm_up(), "datasets": {}}
    for name in datasets:
        sets = dataset(name)
        rows = [_row(run_fit("lgbm_es", sets), sets, None)] if peer else []
        for budget in budgets:
            rows.append(_row(run_fit("tunemix", sets, extra={"time_budget_s": budget}), sets, budget))
            rows[-1]["load_average"] = os.getloadavg()
            print(name, budget, {k: rows[-1].get(k) for k in ("fit_s", "test_ndcg@10", "held")}, flush=True)
        if default:
            rows.append(_row(run_fit("tunemix", sets), sets, None))
        report["datasets"][name] = {"train_docs": sets["train"].n_docs, "rows": rows}
    report["probe_ms_end"] = machine_probe_ms()
    report["load_average_end"] = os.getloadavg()  # other users' work on the same cores (2 here)
    report["time"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return report


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--datasets", default=",".join(DATASETS))
    p.add_argument("--budgets", default="10,60")
    p.add_argument("--no-default", action="store_true", help="skip the unbudgeted tunemix fits")
    p.add_argument("--no-peer", action="store_true",
                   help="skip the early-stopped LightGBM fit (355 s at 120k documents on a busy machine)")
    p.add_argument("--name", default="budget", help="bench/results/NAME.json")
    args = p.parse_args(argv)
    report = run(args.datasets.split(","), [float(b) for b in args.budgets.split(",")], not args.no_default,
                 not args.no_peer)
    print(write_result(args.name, {"command": "python -m bench.budget " + " ".join(argv or []), **report}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
