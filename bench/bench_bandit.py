"""Bandit-accelerated AdaBoost.MH (UCB1, EXP3.P) against full search: training time and NDCG@10.

    python -m bench.bench_bandit [--quick] [--rows N] [--n-arms K]

Writes ``bench/results/bandit.json``. AdaBoost.MH with Hamming trees of 8 leaves, single-threaded
(numba's kernels are serial), seed 0, searches measured one after the other in the same run.
Test NDCG@10 is ``tunemix.core.evaluation.mean_metric(..., "ndcg@10", "yahoo")`` of the SHIFT
expected-gain scores (``bench.bench_adaboost.shift_scores``) on the test split.

Fairness. Full search runs T iterations; each bandit runs ``BANDIT_FACTOR`` x T, with snapshots
every T/10 iterations and the wall-clock at each snapshot (fit callback, from the start of
``fit``: binning included). Per data set and bandit we report

- equal iterations: wall-clock of the bandit's first T iterations against full search's T,
  and its test NDCG@10 at T minus full search's (the target: ratio >= 3, |diff| <= 0.005);
- equal wall-clock: the bandit's NDCG@10 at its last snapshot reached within full search's time;
- time to quality: the first snapshot whose NDCG@10 is at least full search's minus 0.005, and
  full search's time over the bandit's time to it.

Data: MQ2008 (LETOR 4.0) five folds, train on ``train.txt``, test on ``test.txt``, T = 300
(the means over the folds are reported too); and the synthetic MSLR-WEB10K-shaped set
(``tunemix.train.data.synthetic``: 136 features, five levels, 20..60 documents per query; ``--rows``
training rows, default 720,000, test set a fifth of that), T = 100. ``--quick``: MQ2008 Fold1
only, T = 100, synthetic 100,000 rows, T = 30.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

from bench.bench_adaboost import ndcg10, shift_scores
from bench.common import SHARED_DATA, write_result
from tunemix.core.data.dataset import RankingData
from tunemix.train.learners import AdaBoostMH

SEARCHES = ("full", "ucb1", "exp3p")
BANDIT_FACTOR = 3
TOLERANCE = 0.005


def staged_ndcg(m: AdaBoostMH, test: RankingData, checkpoints: list[int]) -> list[float]:
    staged = m.staged_decision_function(test.features, checkpoints)
    out = []
    for c, it in enumerate(checkpoints):
        v = shift_scores(staged[:, c, :], float(m.alphas_[:it].sum()), m.class_gains_)
        out.append(ndcg10(test.labels, v, test.query_offsets))
    return out


def run_search(search: str, train: RankingData, test: RankingData, T: int,
               n_arms: int | None) -> dict[str, Any]:
    n_iter = T if search == "full" else BANDIT_FACTOR * T
    step = max(T // 10, 1)
    checkpoints = list(range(step, n_iter + 1, step))
    if T not in checkpoints:
        checkpoints = sorted({*checkpoints, T})
    stamps: list[float] = []
    m = AdaBoostMH(n_iterations=n_iter, base="tree", n_leaves=8, search=search, n_arms=n_arms,
                   checkpoints=checkpoints, seed=0)
    m.fit(train.features, train.labels, callback=lambda p: stamps.append(p.elapsed_s))
    ck = [c for c in checkpoints if c <= m.n_iterations_]
    return {"iterations": m.n_iterations_, "stop_reason": m.stop_reason_,
            "fit_s": m.fit_time_s_, "checkpoints": ck,
            "elapsed_s": [stamps[c - 1] for c in ck], "ndcg10_test": staged_ndcg(m, test, ck)}


def compare(runs: dict[str, dict[str, Any]], T: int) -> dict[str, Any]:
    full = runs["full"]
    t_full = full["elapsed_s"][full["checkpoints"].index(T)]
    q_full = full["ndcg10_test"][full["checkpoints"].index(T)]
    out: dict[str, Any] = {"full_s": t_full, "full_ndcg10": q_full}
    for search in SEARCHES[1:]:
        r = runs[search]
        ck, el, q = r["checkpoints"], r["elapsed_s"], r["ndcg10_test"]
        i = ck.index(T)
        within = [j for j in range(len(ck)) if el[j] <= t_full]
        reach = [j for j in range(len(ck)) if q[j] >= q_full - TOLERANCE]
        out[search] = {
            "equal_iterations": {"s": el[i], "speed_ratio": t_full / el[i], "ndcg10": q[i],
                                 "ndcg10_minus_full": q[i] - q_full},
            "equal_wallclock": ({"iterations": ck[within[-1]], "ndcg10": q[within[-1]],
                                 "ndcg10_minus_full": q[within[-1]] - q_full}
                                if within else None),
            "time_to_quality": ({"iterations": ck[reach[0]], "s": el[reach[0]],
                                 "speed_ratio": t_full / el[reach[0]]} if reach else None),
        }
    return out


def bench_dataset(name: str, train: RankingData, test: RankingData, T: int,
                  n_arms: int | None) -> dict[str, Any]:
    runs = {s: run_search(s, train, test, T, n_arms) for s in SEARCHES}
    cmp = compare(runs, T)
    line = {s: (round(cmp[s]["equal_iterations"]["speed_ratio"], 2),
                round(cmp[s]["equal_iterations"]["ndcg10_minus_full"], 4)) for s in SEARCHES[1:]}
    print(f"{name}: full {cmp['full_s']:.2f}s ndcg {cmp['full_ndcg10']:.4f}; "
          f"(speed ratio, ndcg diff) at equal iterations {line}", flush=True)
    return {"n_rows": int(train.features.shape[0]), "n_features": int(train.features.shape[1]),
            "n_test_rows": int(test.features.shape[0]), "T": T, "runs": runs, "comparison": cmp}


def summarise(folds: list[dict[str, Any]]) -> dict[str, Any]:
    """Means over folds of the equal-iterations figures (times summed: the five-fold job)."""
    full_s = sum(f["comparison"]["full_s"] for f in folds)
    full_q = float(np.mean([f["comparison"]["full_ndcg10"] for f in folds]))
    out: dict[str, Any] = {"full_s_total": full_s, "full_ndcg10_mean": full_q}
    for search in SEARCHES[1:]:
        s = sum(f["comparison"][search]["equal_iterations"]["s"] for f in folds)
        q = float(np.mean([f["comparison"][search]["equal_iterations"]["ndcg10"] for f in folds]))
        ttq = [f["comparison"][search]["time_to_quality"] for f in folds]
        out[search] = {"s_total": s, "speed_ratio": full_s / s, "ndcg10_mean": q,
                       "ndcg10_minus_full": q - full_q,
                       "meets_target": bool(full_s / s >= 3.0 and abs(q - full_q) <= TOLERANCE),
                       "time_to_quality_speed_ratio_per_fold": [
                           None if t is None else t["speed_ratio"] for t in ttq]}
    return out


def mq2008(quick: bool, n_arms: int | None) -> dict[str, Any] | str:
    from tunemix.core.data.svmlight import read_svmlight

    root = SHARED_DATA / "MQ2008"
    if not (root / "Fold1" / "train.txt").exists():
        print(f"skipping MQ2008: {root} not found")
        return f"skipped: {root} absent"
    T = 100 if quick else 300
    folds = []
    for k in (1,) if quick else (1, 2, 3, 4, 5):
        train = read_svmlight(root / f"Fold{k}" / "train.txt")
        test = read_svmlight(root / f"Fold{k}" / "test.txt", n_features=train.n_features)
        folds.append({"fold": k, **bench_dataset(f"mq2008 Fold{k}", train, test, T, n_arms)})
    return {"folds": folds, "summary": summarise(folds)}


def synthetic(rows: int, T: int, n_arms: int | None) -> dict[str, Any]:
    from tunemix.train.data.synthetic import make_synthetic_splits

    per_query = 40  # mean of 20..60
    t0 = time.perf_counter()
    splits = make_synthetic_splits(
        n_queries={"train": max(rows // per_query, 1), "test": max(rows // (5 * per_query), 1)},
        docs_per_query=(20, 60), n_features=136, n_levels=5, seed=0)
    print(f"synthetic: {splits['train'].features.shape} train rows made in "
          f"{time.perf_counter() - t0:.1f}s", flush=True)
    out = bench_dataset("synthetic", splits["train"], splits["test"], T, n_arms)
    cmp = out["comparison"]
    out["summary"] = {s: {**cmp[s]["equal_iterations"], "meets_target": bool(
        cmp[s]["equal_iterations"]["speed_ratio"] >= 3.0
        and abs(cmp[s]["equal_iterations"]["ndcg10_minus_full"]) <= TOLERANCE)}
        for s in SEARCHES[1:]}
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--quick", action="store_true", help="Fold1 only, fewer rows and iterations")
    ap.add_argument("--rows", type=int, default=None,
                    help="synthetic training rows (default 720,000; --quick 100,000)")
    ap.add_argument("--n-arms", type=int, default=None,
                    help="features searched per iteration by a bandit (default ceil(sqrt(d)))")
    args = ap.parse_args(argv)
    rows = args.rows if args.rows is not None else (100_000 if args.quick else 720_000)
    t0 = time.perf_counter()
    result: dict[str, Any] = {
        "threads": "1 (numba kernels serial)", "base": "tree, 8 leaves", "seed": 0,
        "n_arms": args.n_arms if args.n_arms is not None else "ceil(sqrt(d))",
        "bandit_iterations": f"{BANDIT_FACTOR} x T (snapshots every T/10)",
        "target": f"bandit >= 3x faster at equal iterations, |NDCG@10 diff| <= {TOLERANCE}",
        "quick": args.quick,
    }
    result["mq2008"] = mq2008(args.quick, args.n_arms)
    result["synthetic_mslr_shape"] = synthetic(rows, 30 if args.quick else 100, args.n_arms)
    result["total_s"] = time.perf_counter() - t0
    path = write_result("bandit", result)
    print(f"wrote {path} in {result['total_s']:.0f}s")


if __name__ == "__main__":
    main()
