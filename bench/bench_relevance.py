"""What the score means: the relevance head's grade probabilities against the anchors a user would
reach for, on MQ2008 (five folds, the test queries of all folds pooled) and on the MSLR-WEB10K
sample (cut in five query folds, as ``bench.quality`` does).

    python -m bench.bench_relevance [--datasets mq2008,mslr-sample,mslr-sample:default] [--folds 1,2,3,4,5]

Per fold, in the same run: our model (``CONFIGS``: ``configs/mq2008.toml`` on MQ2008; on the
MSLR sample the packaged default with McRank and LambdaMART members, and the packaged default
alone; the relevance head trained as every training run trains it), and the anchors, trained on
the same train set and recalibrated on the same validation set:

- ``lgb_multiclass``: LightGBM multiclass probabilities (McRank), early-stopped on validation;
- ``lgb_multiclass_isotonic``: the same, each grade's probability recalibrated by isotonic
  regression fitted on validation, then renormalised;
- ``lgb_lambdarank_isotonic``: LightGBM lambdarank scores mapped to the expected grade (and to
  P(y >= 1)) by isotonic regression on validation: no grade distribution, so no Brier score.

Figures on the pooled test documents: multi-class Brier score and log loss, ECE of P(y >= 1) and
of P(y = top grade) with 15 equal-width bins, RMSE of the expected grade; and that the head
leaves the ranking alone (the scores with and without it are the same, so is test NDCG@10).
Beside them, as a diagnostic: the head's trees before rank matching, and their test NDCG@10
against the mix's (rank matching helps where the mix ranks better than the trees).
JSON: bench/results/relevance.json.
"""

from __future__ import annotations

import argparse
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import ROOT, SHARED_DATA, machine_probe_ms, write_result

ANCHORS = ("lgb_multiclass", "lgb_multiclass_isotonic", "lgb_lambdarank_isotonic")
#: diagnostics beside the head, not goals: its trees' averaged probabilities before rank matching
DIAGNOSTICS = ("tunemix_head_trees_unmatched",)


#: the configuration of each run: a data set, a configuration file and extra member blocks. MQ2008:
#: the shipped configuration. The MSLR sample (136 features, five grades): the packaged default
#: (AdaBoost only), and the same with the McRank and LambdaMART members added (``mslr-sample``:
#: 15 to 30 s a fold here; the MQ2008 configuration's whitened 136-feature views and 1,000
#: 64-leaf iterations take over ten minutes a fold on this sample's 50 training queries)
LIGHTGBM_MEMBERS = {
    "mcrank": [{"variant": ["multiclass", "ordinal"], "n_leaves": [8, 32], "learning_rate": 0.1, "n_iterations": 300,
                "checkpoints": [30, 100, 300], "views": ["raw"], "label_groupings": ["original"]}],
    "lambdamart": [{"n_leaves": [8, 32], "learning_rate": 0.1, "n_iterations": 300, "checkpoints": [30, 100, 300],
                    "views": ["raw"]}],
}
DEFAULT_CONFIG = ROOT / "training" / "pipeline" / "default.toml"
CONFIGS: dict[str, tuple[str, Path, dict[str, Any]]] = {
    "mq2008": ("mq2008", ROOT / "configs" / "mq2008.toml", {}),
    "mslr-sample": ("mslr-sample", DEFAULT_CONFIG, LIGHTGBM_MEMBERS),
    "mslr-sample:default": ("mslr-sample", DEFAULT_CONFIG, {}),
}


def _ours(sets: dict[str, Any], seed: int, config: Path, members: dict[str, Any]
          ) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    from tunemix.core.evaluation import evaluate
    from tunemix.train.config import load_config
    from tunemix.train.train import train

    tables = tomllib.loads(config.read_text())
    tables.pop("data", None)
    tables["members"] = {**tables.get("members", {}), **members}
    tables["run"] = {**tables.get("run", {}), "report_plots": False}
    cfg = load_config(None, {"seed": seed}, tables=tables, require_data=False)
    outcome = train(cfg, progress=False, sets=sets, save=False)
    test = sets["test"]
    model = outcome.model
    plain = model.score(test.features, test.query_offsets)
    scores, probs, _ = model.score_and_relevance(test.features, test.query_offsets)
    ndcg = evaluate(test.labels, plain, test.query_offsets, ["ndcg@10"], "yahoo").mean["ndcg@10"]
    ndcg_head = evaluate(test.labels, scores, test.query_offsets, ["ndcg@10"], "yahoo").mean["ndcg@10"]
    head = model.relevance_head
    assert head is not None
    unmatched = head.tree_probabilities(test.features)  # the head's trees alone, before rank matching
    trees_ndcg = evaluate(test.labels, unmatched @ np.arange(unmatched.shape[1], dtype=float), test.query_offsets,
                          ["ndcg@10"], "yahoo").mean["ndcg@10"]
    return probs, unmatched, {"scores_identical": bool(np.array_equal(plain, scores)), "test_ndcg@10": ndcg,
                              "test_ndcg@10_with_head": ndcg_head, "head_trees_test_ndcg@10": trees_ndcg,
                              "head_models": head.models,
                              "head_recalibration": outcome.record["relevance_head"].get("recalibration"),
                              "head_seconds": outcome.record["relevance_head"].get("seconds")}


def _anchors(sets: dict[str, Any], k: int, seed: int) -> dict[str, dict[str, np.ndarray]]:
    import lightgbm as lgb
    from sklearn.isotonic import IsotonicRegression

    tr, va, te = sets["train"], sets["vali"], sets["test"]
    ytr, yva = np.minimum(tr.labels, k - 1), np.minimum(va.labels, k - 1)
    params = {"objective": "multiclass", "num_class": k, "learning_rate": 0.05, "num_leaves": 15,
              "min_data_in_leaf": 20, "verbosity": -1, "seed": seed, "num_threads": 2}
    dtr = lgb.Dataset(tr.features, ytr)
    dva = lgb.Dataset(va.features, yva, reference=dtr)
    clf = lgb.train(params, dtr, 1000, valid_sets=[dva], callbacks=[lgb.early_stopping(50, verbose=False)])
    p_te = clf.predict(te.features, num_iteration=clf.best_iteration)
    p_va = clf.predict(va.features, num_iteration=clf.best_iteration)
    iso = np.column_stack([IsotonicRegression(out_of_bounds="clip", y_min=0.0, y_max=1.0)
                           .fit(p_va[:, j], yva == j).predict(p_te[:, j]) for j in range(k)])
    iso = np.where(iso.sum(axis=1, keepdims=True) > 0, iso, 1.0 / k)
    iso = iso / iso.sum(axis=1, keepdims=True)
    rank_params = {"objective": "lambdarank", "learning_rate": 0.05, "num_leaves": 15, "min_data_in_leaf": 20,
                   "verbosity": -1, "seed": seed, "num_threads": 2, "metric": "ndcg", "eval_at": [10]}
    rtr = lgb.Dataset(tr.features, tr.labels, group=np.diff(tr.query_offsets))
    rva = lgb.Dataset(va.features, va.labels, group=np.diff(va.query_offsets), reference=rtr)
    ranker = lgb.train(rank_params, rtr, 1000, valid_sets=[rva], callbacks=[lgb.early_stopping(50, verbose=False)])
    s_va = ranker.predict(va.features, num_iteration=ranker.best_iteration)
    s_te = ranker.predict(te.features, num_iteration=ranker.best_iteration)
    grade = IsotonicRegression(out_of_bounds="clip").fit(s_va, yva).predict(s_te)
    p_rel = IsotonicRegression(out_of_bounds="clip", y_min=0.0, y_max=1.0).fit(s_va, yva >= 1).predict(s_te)
    return {"lgb_multiclass": {"proba": p_te}, "lgb_multiclass_isotonic": {"proba": iso},
            "lgb_lambdarank_isotonic": {"expected": grade, "p_relevant": p_rel}}


def _metrics(entry: dict[str, np.ndarray], labels: np.ndarray, k: int) -> dict[str, Any]:
    from tunemix.train.relevance.fit import expected_calibration_error, relevance_metrics

    if "proba" in entry:
        m = relevance_metrics(entry["proba"], labels)
        return {key: m[key] for key in ("documents", "brier", "log_loss", "ece_relevant", "ece_top",
                                        "rmse_expected_grade", "share_relevant_above")}
    y = np.minimum(labels, k - 1)
    return {"documents": int(y.shape[0]), "brier": None, "log_loss": None,
            "ece_relevant": expected_calibration_error(entry["p_relevant"], y >= 1), "ece_top": None,
            "rmse_expected_grade": float(np.sqrt(np.mean((entry["expected"] - y) ** 2)))}


def run_dataset(name: str, folds: list[int], seed: int) -> dict[str, Any]:
    from bench.quality import MQ2008, MSLR_SAMPLE, load_fold, load_sample_fold

    pooled: dict[str, list[dict[str, np.ndarray]]] = {"tunemix_head": [], **{a: [] for a in (*ANCHORS, *DIAGNOSTICS)}}
    labels: list[np.ndarray] = []
    per_fold = []
    k = 0
    for fold in folds:
        data, config, members = CONFIGS[name]
        sets = load_sample_fold(MSLR_SAMPLE, fold) if data == "mslr-sample" else load_fold(MQ2008, fold)
        k = max(k, int(max(int(s.labels.max()) for s in sets.values())) + 1)
        t0 = time.perf_counter()
        probs, unmatched, check = _ours(sets, seed, config, members)
        t1 = time.perf_counter()
        anchors = _anchors(sets, probs.shape[1], seed)
        pooled["tunemix_head"].append({"proba": probs})
        pooled["tunemix_head_trees_unmatched"].append({"proba": unmatched})
        for a in ANCHORS:
            pooled[a].append(anchors[a])
        labels.append(sets["test"].labels)
        fold_brier = {who: _metrics(parts[-1], sets["test"].labels, probs.shape[1])["brier"]
                      for who, parts in pooled.items()}
        per_fold.append({"fold": fold, "ours_train_s": round(t1 - t0, 1), **check,
                         "test_documents": int(sets["test"].n_docs), "brier": fold_brier})
        print(f"{name} fold {fold}: ours {t1 - t0:.0f} s, scores identical with the head: "
              f"{check['scores_identical']}, test NDCG@10 {check['test_ndcg@10']:.4f} (the head's trees alone "
              f"{check['head_trees_test_ndcg@10']:.4f})", flush=True)
    y = np.concatenate(labels)
    results = {}
    for who, parts in pooled.items():
        merged = {key: np.concatenate([p[key] for p in parts]) for key in parts[0]}
        results[who] = _metrics(merged, y, k)
    head = results["tunemix_head"]
    goal = {a: {m: (results[a][m] is None or head[m] < results[a][m]) for m in ("brier", "ece_relevant", "ece_top")}
            for a in ANCHORS}
    return {"folds": per_fold, "pooled_test": results, "head_better_than_anchor": goal}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--datasets", default=",".join(CONFIGS), help=f"runs, of {', '.join(CONFIGS)}")
    ap.add_argument("--folds", default="1,2,3,4,5")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--name", default="relevance")
    args = ap.parse_args()
    if not (SHARED_DATA / "MQ2008" / "Fold1" / "train.txt").is_file():
        print(f"{SHARED_DATA}/MQ2008 not found (set TUNEMIX_SHARED_DATA)", file=sys.stderr)
        return 1
    out: dict[str, Any] = {"command": "python -m bench.bench_relevance " + " ".join(sys.argv[1:]),
                           "probe_ms_start": machine_probe_ms(), "datasets": {}}
    for name in args.datasets.split(","):
        out["datasets"][name] = run_dataset(name, [int(f) for f in args.folds.split(",")], args.seed)
        for who, m in out["datasets"][name]["pooled_test"].items():
            print(f"{name} {who}: " + ", ".join(f"{k} {v:.4f}" for k, v in m.items() if isinstance(v, float)),
                  flush=True)
    out["probe_ms_end"] = machine_probe_ms()
    path = write_result(args.name, out)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
