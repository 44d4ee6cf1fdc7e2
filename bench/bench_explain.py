"""What an explanation costs: the top 10 documents of a 100-document MQ2008 list explained with the
MQ2008 ensemble on one thread, against LightGBM's ``pred_contrib`` (TreeSHAP) on a lambdarank forest
of the same tree count in the same run; and /rank p50 with ``"explain": 5`` at 100 documents over
real HTTP (a ``python -m app`` process, one worker), beside the same requests without it.

    python -m bench.bench_explain [--model models/mq2008-fold1/v1] [--quick]

Writes ``bench/results/explain.json``. The ensemble's explanations are Shapley values of the whole
model (views, members, calibrators, mix: ``training.scoring.explanation``), exact when the
document's relevant features fit the budget, else a sampled estimate that adds up exactly; the
JSON records for each budget how many were exact and the largest standard error. LightGBM's
figure explains one forest's raw score (TreeSHAP is exact there in polynomial time); the two
numbers are what each costs, not the same computation.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.bench_service import Server, free_port, make_bodies, sequential
from bench.common import ROOT, SHARED_DATA, best_of, ensure_model, machine_probe_ms, write_result

N_DOCS = 100
TOP = 10
#: the library's default budget and the service's (TUNEMIX_EXPLAIN_BUDGET)
BUDGETS = (1 << 16, 8192)


def log(msg: str) -> None:
    print(f"[bench_explain] {msg}", flush=True)


def candidate_list(test: Any, seed: int = 0) -> np.ndarray:
    """100 real MQ2008 test documents as one candidate list."""
    rows = np.random.default_rng(seed).choice(test.features.shape[0], size=N_DOCS, replace=False)
    return np.ascontiguousarray(test.features[np.sort(rows)])


def ensemble_side(model_path: Path, x: np.ndarray, repeat: int) -> dict[str, Any]:
    import tunemix
    from training.scoring.forest import set_scoring_threads

    set_scoring_threads(1)
    model = tunemix.load(model_path)
    scores = model.predict(x)
    top = np.argsort(-scores, kind="stable")[:TOP]
    model.explain(x, rows=top[:1], budget=256)  # compile the kernels outside the timing
    out: dict[str, Any] = {"model": str(model_path), "n_bases": model.ensemble.forest.n_base,
                           "n_members": len(model.members), "views": ["raw", *model.ensemble.extra_views],
                           "mixer": model.ensemble.mixer.name, "score_100_ms": round(
                               1e3 * best_of(lambda: model.predict(x), repeat=5), 3), "budgets": {}}
    for budget in BUDGETS:
        e = model.explain(x, rows=top, budget=budget)
        seconds = best_of(lambda b=budget: model.explain(x, rows=top, budget=b), repeat=repeat)
        additivity = float(np.max(np.abs(e.baseline + e.contributions.sum(axis=1) - scores[top])))
        sampled = ~e.exact
        out["budgets"][str(budget)] = {
            "top10_ms": round(seconds * 1e3, 1), "per_document_ms": round(seconds * 1e3 / TOP, 1),
            "exact": int(e.exact.sum()), "sampled": int(sampled.sum()),
            "relevant_features": {"min": int(e.n_relevant.min()), "median": float(np.median(e.n_relevant)),
                                  "max": int(e.n_relevant.max())},
            "permutations_when_sampled": int(e.n_permutations[sampled].min()) if sampled.any() else None,
            "largest_standard_error": float(e.standard_error.max()),
            "largest_abs_contribution": float(np.abs(e.contributions).max()),
            "additivity_max_error": additivity,
        }
        log(f"ensemble, budget {budget}: {out['budgets'][str(budget)]}")
    return out


def lightgbm_side(train: Any, x: np.ndarray, n_trees: int, repeat: int, workdir: Path) -> dict[str, Any]:
    import lightgbm as lgb

    from bench.bench_service import train_peer_model

    info = train_peer_model(train, n_trees, 1, workdir / "peer.txt")
    booster = lgb.Booster(model_file=str(workdir / "peer.txt"))
    raw = booster.predict(x, num_threads=1)
    top = np.argsort(-raw, kind="stable")[:TOP]
    xt = np.ascontiguousarray(x[top])
    contrib = booster.predict(xt, pred_contrib=True, num_threads=1)
    seconds = best_of(lambda: booster.predict(xt, pred_contrib=True, num_threads=1), repeat=max(repeat, 20))
    return {**info, "top10_ms": round(seconds * 1e3, 3), "per_document_ms": round(seconds * 1e3 / TOP, 4),
            "additivity_max_error": float(np.max(np.abs(contrib.sum(axis=1) - raw[top])))}


def http_side(model_path: Path, test: Any, n: int, workdir: Path) -> dict[str, Any]:
    port = free_port()
    env = {**os.environ, "TUNEMIX_MODELS_DIR": str(model_path.parent.parent),
           "TUNEMIX_DEFAULT_MODEL": model_path.parent.name, "TUNEMIX_PORT": str(port), "TUNEMIX_HOST": "127.0.0.1",
           "TUNEMIX_WORKERS": "1", "TUNEMIX_LOG_LEVEL": "warning"}
    env.setdefault("NUMBA_CACHE_DIR", str(ROOT / ".venv" / "numba-cache"))
    plain = make_bodies(test, N_DOCS, 8, seed=1)
    with_top = [json.dumps({**json.loads(b), "top_k": TOP}, separators=(",", ":")).encode() for b in plain]
    explained = [json.dumps({**json.loads(b), "top_k": TOP, "explain": 5}, separators=(",", ":")).encode()
                 for b in plain]
    server = Server("python -m app", [sys.executable, "-m", "app"], env, port, workdir / "server.log")
    try:
        ready_s = server.wait_ready(600)
        sequential(server.base, explained, 2, TOP)  # warm the explanation path
        out = {"ready_s": round(ready_s, 1), "documents": N_DOCS, "top_k": TOP,
               "explain_budget": 8192, "workers": 1,
               "without_explain": sequential(server.base, with_top, 3 * n, TOP),
               "with_explain_5": sequential(server.base, explained, n, TOP)}
    finally:
        server.stop()
    log(f"http: {out}")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", type=Path, help="a version directory (default: models/mq2008-fold1, trained if absent)")
    p.add_argument("--quick", action="store_true", help="fewer repeats")
    args = p.parse_args(argv)
    from training.data.svmlight import read_svmlight

    fold = SHARED_DATA / "MQ2008" / "Fold1"
    if not (fold / "test.txt").exists():
        raise SystemExit(f"MQ2008 not found at {fold}")
    model_path = args.model or ensure_model()
    manifest = json.loads((model_path / "manifest.json").read_text())
    train = read_svmlight(fold / "train.txt")
    test = read_svmlight(fold / "test.txt", n_features=train.n_features)
    x = candidate_list(test)
    repeat = 1 if args.quick else 3
    probe_before = machine_probe_ms()
    t0 = time.perf_counter()
    ensemble = ensemble_side(model_path, x, repeat)
    with tempfile.TemporaryDirectory() as tmp:
        peer = lightgbm_side(train, x, ensemble["n_bases"], repeat, Path(tmp))
        log(f"lightgbm pred_contrib: {peer}")
        http = http_side(model_path, test, 10 if args.quick else 30, Path(tmp))
    cfg = manifest.get("training_record", {}).get("config", {})
    result = {
        "command": "python -m bench.bench_explain" + (f" --model {args.model}" if args.model else "")
                   + (" --quick" if args.quick else ""),
        "model_config": {"name": cfg.get("name"), "time_budget_s": cfg.get("run", {}).get("time_budget_s"),
                         "n_jobs": cfg.get("run", {}).get("n_jobs")},
        "list": {"documents": N_DOCS, "explained": TOP, "source": "MQ2008 Fold1 test.txt, 100 rows drawn (seed 0)",
                 "threads": 1, "reference": "the list's per-feature median document"},
        "ensemble": ensemble, "lightgbm_pred_contrib": peer, "rank_http": http,
        "machine_probe_ms": {"before": probe_before, "after": machine_probe_ms()},
        "seconds": round(time.perf_counter() - t0, 1),
    }
    path = write_result("explain", result)
    log(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
