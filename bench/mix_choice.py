"""How the mix is chosen, on the five folds of MQ2008 and of the MSLR sample (issue 30, "a mix
that generalises").

``python -m bench.mix_choice`` (JSON in ``bench/results/mix_choice.json``): for every fold of
``bench.defaults``' splits, the default members (``TuneMixRanker()``'s, chosen from the data) are
trained once through the pipeline's own stages and their calibrated scores on the validation and
test queries cached (``--cache``, default ``bench/results/mix_choice_cache``, not in git); then
every way of choosing the mix is fitted on the validation queries and scored on test:

- ``validation``: the forecaster's grid point (c, omega_min, rescaling mode) best on the
  validation queries, near-ties (1e-4) to the simpler (the behaviour before this benchmark);
- ``one_se``: the same, ties within one standard error of the best point's mean;
- ``cv``: the point best when cross-validated over the validation queries (five folds of queries;
  a fold's mix uses the omegas of the other folds), applied to the omegas of all of them;
- ``uniform``: c = 0 over every member (z-scored per query); ``best``: the best member alone.

Reported per data set: mean test NDCG@10 (yahoo) over the folds with its standard error, and
each rule's per-query difference from the uniform mix (mean and standard error over the pooled
test queries).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import RESULTS, machine_info
from bench.defaults import mean_se, per_query_difference, splits
from tunemix.core.data.dataset import RankingData
from tunemix.core.evaluation import evaluate

MEASURE, CONVENTION = "ndcg@10", "yahoo"
RULES: dict[str, dict[str, Any]] = {
    "validation": {"tie_tolerance": 1e-4, "selection": "validation"},
    "one_se": {"tie_tolerance": "one_se", "selection": "validation"},
    "cv": {"tie_tolerance": 1e-4, "selection": "cv"},
}


def member_scores(sets: dict[str, RankingData], seed: int = 0) -> dict[str, np.ndarray]:
    """The default members' calibrated scores on validation and test (the pipeline's stages)."""
    from tunemix.train.config import load_config
    from tunemix.train.members.auto import apply_auto
    from tunemix.train.members.types import run_specs
    from tunemix.train.mixing import score_members
    from tunemix.train.parallel import parallel_backend
    from tunemix.train.train import _Clock, assemble, calibrate_runs, data_shape, fit_runs, prepare

    cfg = load_config(None, {"seed": seed}, tables={"name": "mix-choice"}, require_data=False)
    cfg, _ = apply_auto(cfg, data_shape(sets))
    specs = run_specs(cfg)
    prep = prepare(cfg, _Clock(), specs, sets)
    with parallel_backend(cfg.run.backend, cfg.run.n_jobs, cfg.run.scheduler) as n_jobs:
        runs = fit_runs(cfg, prep, specs, n_jobs, False)
        cals = calibrate_runs(cfg, prep, runs, n_jobs, False)
    model, _ = assemble(cfg, prep, runs, cals)
    mixing = score_members(prep, model)
    assert mixing.test_members is not None
    return {"vali": mixing.vali_members, "test": mixing.test_members,
            "names": np.array([m.name for m in model.members])}


def per_query(data: RankingData, scores: np.ndarray) -> np.ndarray:
    res = evaluate(data.labels, scores, data.query_offsets, [MEASURE], CONVENTION)
    return np.asarray(res.per_query[MEASURE], dtype=np.float64)


def mixes(cached: dict[str, np.ndarray], sets: dict[str, RankingData]) -> dict[str, dict[str, Any]]:
    """Each rule's mix, fitted on validation, its test NDCG@10 per query and what it chose."""
    from tunemix.core.ensemble.member_rescaling import RESCALE_MODES
    from tunemix.core.ensemble.registry import make_mixer
    from tunemix.train.mixing import search_forecasters

    vali, test = sets["vali"], sets["test"]
    vs, ts = np.ascontiguousarray(cached["vali"]), np.ascontiguousarray(cached["test"])
    out: dict[str, dict[str, Any]] = {}
    for rule, params in RULES.items():
        search = search_forecasters(vs, vali.labels, vali.query_offsets, modes=list(RESCALE_MODES),
                                    sets=[(None, None)], measure=MEASURE, convention=CONVENTION, **params)
        fc = search.chosen
        out[rule] = {"per_query": per_query(test, fc.transform(ts, test.query_offsets)), "c": fc.c_,
                     "members_kept": int(np.sum(fc.kept_)), "rescale": search.candidates[search.pick][0],
                     "selection_quality": float(fc.selection_quality_)}
    uniform = make_mixer("uniform", rescale="zscore_query").fit(vs, vali.labels, vali.query_offsets)
    out["uniform"] = {"per_query": per_query(test, uniform.transform(ts, test.query_offsets))}
    best = make_mixer("one_best", measure=MEASURE, convention=CONVENTION).fit(vs, vali.labels, vali.query_offsets)
    out["best"] = {"per_query": per_query(test, best.transform(ts, test.query_offsets))}
    return out


def run(datasets: list[str], cache: Path) -> dict[str, Any]:
    cache.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"machine": machine_info(), "measure": MEASURE, "convention": CONVENTION,
                              "rules": {k: {kk: str(vv) for kk, vv in v.items()} for k, v in RULES.items()},
                              "datasets": {}}
    for name in datasets:
        folds: list[dict[str, Any]] = []
        pooled: dict[str, list[np.ndarray]] = {}
        for k, sets in enumerate(splits(name)):
            path = cache / f"{name}-fold{k + 1}.npz"
            if path.exists():
                with np.load(path, allow_pickle=False) as z:
                    cached = {key: z[key] for key in z.files}
            else:
                cached = member_scores(sets)
                np.savez(path, **cached)
            res = mixes(cached, sets)
            row: dict[str, Any] = {"fold": k + 1, "members": int(cached["vali"].shape[1]),
                                   "vali_queries": sets["vali"].n_queries}
            for rule, r in res.items():
                pq = r.pop("per_query")
                pooled.setdefault(rule, []).append(pq)
                row[rule] = {"test_ndcg@10": round(float(np.nanmean(pq)), 4), **r}
            folds.append(row)
            print(f"{name} fold {k + 1}: " + "  ".join(f"{rule} {row[rule]['test_ndcg@10']:.4f}" for rule in res),
                  flush=True)
        summary: dict[str, Any] = {}
        for rule, parts in pooled.items():
            mean, se = mean_se([f[rule]["test_ndcg@10"] for f in folds])
            diff = per_query_difference(parts, pooled["uniform"])
            summary[rule] = {"test_ndcg@10": mean, "se": se, "minus_uniform_per_query": diff["mean"],
                             "minus_uniform_se": diff["se"]}
        report["datasets"][name] = {"folds": folds, "summary": summary}
        for rule, s in summary.items():
            print(f"{name:12s} {rule:10s} {s['test_ndcg@10']:.4f} ± {s['se']:.4f}   vs uniform "
                  f"{s['minus_uniform_per_query']:+.4f} ± {s['minus_uniform_se']:.4f}", flush=True)
    return report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--datasets", default="mq2008,mslr-sample")
    ap.add_argument("--cache", type=Path, default=RESULTS / "mix_choice_cache")
    ap.add_argument("--out", type=Path, default=RESULTS / "mix_choice.json")
    args = ap.parse_args(argv)
    report = run(args.datasets.split(","), args.cache)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
