"""Missing values: tunemix on data with 20% of its values missing, against LightGBM on the same data
and against tunemix on the data imputed.

    python -m bench.bench_missing [--fold 1] [--seeds 0,1,2] [--rate 0.2]

Writes ``bench/results/missing.json`` (machine, command, every figure, the goals with pass/fail)
and prints a table. Data: MQ2008 Fold k (``../shared/data/MQ2008``; train, vali, test), with a
share ``--rate`` of the feature values of every split removed (NaN) by one of two mechanisms
(each split its own draw, seed fixed):

- ``mcar``: missing completely at random, every value with probability ``rate``;
- ``mnar``: missing not at random, larger values more often: a value of column j is missing with
  probability ``2 rate u``, u its rank in the column among the split's values (average ranks,
  scaled to 0..1), so the column's mean rate is ``rate`` and its largest values are missing
  twice as often as the mean.

Systems, each fitted on the same train and validation queries and scored on the same test queries
(NDCG@10, yahoo convention, mean over queries):

- ``tunemix``: ``TuneMixRanker(n_jobs=2, random_state=seed).fit(X, y, group, eval_set=vali)`` on the
  data with NaN (every member type's own handling, docs/missing-values.md), each of ``--seeds``;
- ``lgbm_es1``: LightGBM's lambdarank early-stopped on the validation NDCG@10, one thread
  (``bench.common.early_stopped_lightgbm``), on the same data with NaN (LightGBM's own handling);
- ``tunemix_zero`` and ``tunemix_mean``: tunemix on the data imputed by 0, and by the training
  part's column mean (of the present values), each of ``--seeds``;
- ``complete``: tunemix and LightGBM on the data without missing values, for reference.

Goals (the issue's): tunemix's mean over the seeds at least LightGBM's, and at least each
imputed variant's mean, under both mechanisms.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import numpy as np

from bench.common import SHARED_DATA, early_stopped_lightgbm, write_result
from tunemix.core.data.dataset import RankingData
from tunemix.core.evaluation import evaluate

MEASURE, CONVENTION = "ndcg@10", "yahoo"
MECHANISMS = ("mcar", "mnar")


def fold(k: int) -> dict[str, RankingData]:
    from tunemix.core.data.svmlight import read_svmlight

    root = SHARED_DATA / "MQ2008" / f"Fold{k}"
    train = read_svmlight(root / "train.txt")
    return {"train": train, "vali": read_svmlight(root / "vali.txt", n_features=train.n_features),
            "test": read_svmlight(root / "test.txt", n_features=train.n_features)}


def with_features(data: RankingData, features: np.ndarray) -> RankingData:
    return RankingData(features=np.ascontiguousarray(features, dtype=np.float32), labels=data.labels,
                       query_offsets=data.query_offsets, qids=data.qids, docids=data.docids)


def missing_mask(x: np.ndarray, mechanism: str, rate: float, rng: np.random.Generator) -> np.ndarray:
    """Where values go missing (module docstring)."""
    if mechanism == "mcar":
        return rng.random(x.shape) < rate
    n = x.shape[0]
    ranks = np.empty(x.shape)
    for j in range(x.shape[1]):  # average ranks 0..n-1, scaled to 0..1
        order = np.argsort(x[:, j], kind="stable")
        r = np.empty(n)
        r[order] = np.arange(n)
        _, inverse, counts = np.unique(x[:, j], return_inverse=True, return_counts=True)
        sums = np.bincount(inverse, weights=r)
        ranks[:, j] = (sums / counts)[inverse] / max(n - 1, 1)
    return rng.random(x.shape) < 2.0 * rate * ranks


def with_missing(sets: dict[str, RankingData], mechanism: str, rate: float, seed: int = 0
                 ) -> dict[str, RankingData]:
    rng = np.random.default_rng(seed)
    out = {}
    for name, data in sets.items():
        x = data.features.copy()
        x[missing_mask(x, mechanism, rate, rng)] = np.nan
        out[name] = with_features(data, x)
    return out


def imputed(sets: dict[str, RankingData], how: str) -> dict[str, RankingData]:
    """Every split's NaN replaced by 0 (``zero``) or by the training split's column mean of the
    present values (``mean``; 0 for a column missing throughout)."""
    train = sets["train"].features
    fill = np.zeros(train.shape[1])
    if how == "mean":
        present = ~np.isnan(train)
        fill = np.where(present.any(axis=0), np.nansum(train, axis=0) / np.maximum(present.sum(axis=0), 1), 0.0)
    return {k: with_features(v, np.where(np.isnan(v.features), fill, v.features)) for k, v in sets.items()}


def ndcg(data: RankingData, scores: np.ndarray) -> float:
    res = evaluate(data.labels, scores, data.query_offsets, [MEASURE], CONVENTION)
    return float(np.nanmean(np.asarray(res.per_query[MEASURE], dtype=np.float64)))


def fit_tunemix(sets: dict[str, RankingData], seed: int) -> dict[str, Any]:
    import tunemix

    tr, va, te = sets["train"], sets["vali"], sets["test"]
    t0 = time.perf_counter()
    ranker = tunemix.TuneMixRanker(n_jobs=2, random_state=seed, progress=False)
    ranker.fit(tr.features, tr.labels, group=np.diff(tr.query_offsets), eval_set=[(va.features, va.labels)],
               eval_group=[np.diff(va.query_offsets)])
    fit_s = time.perf_counter() - t0
    scores = ranker.predict(te.features, group=np.diff(te.query_offsets))
    return {"seed": seed, "ndcg@10": round(ndcg(te, scores), 5), "fit_s": round(fit_s, 1)}


def fit_lightgbm(sets: dict[str, RankingData]) -> dict[str, Any]:
    booster, info = early_stopped_lightgbm(sets["train"], sets["vali"], threads=1)
    te = sets["test"]
    scores = booster.predict(te.features, num_iteration=booster.best_iteration, num_threads=1)
    return {"ndcg@10": round(ndcg(te, np.asarray(scores, dtype=np.float64)), 5), **info}


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    values = np.array([r["ndcg@10"] for r in runs])
    se = float(values.std(ddof=1) / np.sqrt(values.size)) if values.size > 1 else None
    return {"mean": round(float(values.mean()), 5), "se": None if se is None else round(se, 5), "runs": runs}


def run(k: int, seeds: list[int], rate: float) -> dict[str, Any]:
    base = fold(k)
    results: dict[str, Any] = {"complete": {"tunemix": summary([fit_tunemix(base, s) for s in seeds]),
                                            "lgbm_es1": fit_lightgbm(base)}}
    for mechanism in MECHANISMS:
        sets = with_missing(base, mechanism, rate)
        share = {k: round(float(np.isnan(v.features).mean()), 4) for k, v in sets.items()}
        row: dict[str, Any] = {"missing_share": share,
                               "tunemix": summary([fit_tunemix(sets, s) for s in seeds]),
                               "lgbm_es1": fit_lightgbm(sets)}
        for how in ("zero", "mean"):
            row[f"tunemix_{how}"] = summary([fit_tunemix(imputed(sets, how), s) for s in seeds])
        ours = row["tunemix"]["mean"]
        row["goals"] = {"tunemix >= lgbm_es1": ours >= row["lgbm_es1"]["ndcg@10"],
                        "tunemix >= tunemix_zero": ours >= row["tunemix_zero"]["mean"],
                        "tunemix >= tunemix_mean": ours >= row["tunemix_mean"]["mean"]}
        results[mechanism] = row
        print(table_row(mechanism, row), flush=True)
    return results


def table_row(name: str, row: dict[str, Any]) -> str:
    return (f"| {name} | {row['tunemix']['mean']:.4f} | {row['lgbm_es1']['ndcg@10']:.4f} | "
            f"{row['tunemix_zero']['mean']:.4f} | {row['tunemix_mean']['mean']:.4f} |")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--fold", type=int, default=1, help="MQ2008 fold (default 1)")
    ap.add_argument("--seeds", default="0,1,2", help="tunemix's random_state values (default 0,1,2)")
    ap.add_argument("--rate", type=float, default=0.2, help="share of the values removed (default 0.2)")
    args = ap.parse_args(argv)
    if not (SHARED_DATA / "MQ2008" / f"Fold{args.fold}").is_dir():
        print(f"MQ2008 Fold{args.fold} is not under {SHARED_DATA}", file=sys.stderr)
        return 2
    seeds = [int(s) for s in args.seeds.split(",")]
    print("| data | tunemix | LightGBM (early-stopped, 1 thread) | tunemix, imputed 0 | tunemix, imputed mean |")
    print("|---|---|---|---|---|")
    results = run(args.fold, seeds, args.rate)
    path = write_result("missing", {"command": " ".join(["python -m bench.bench_missing", *(argv or sys.argv[1:])]),
                                    "data": f"MQ2008 Fold{args.fold}", "rate": args.rate, "seeds": seeds,
                                    "measure": MEASURE, "convention": CONVENTION, "results": results})
    complete = results["complete"]
    print(f"| complete | {complete['tunemix']['mean']:.4f} | {complete['lgbm_es1']['ndcg@10']:.4f} | | |")
    print(f"written {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
