"""What an explanation costs, and how the exact explanations agree with the whole-model Shapley values.

For each data set (MQ2008 Fold1 with the MQ2008 ensemble; the MSLR-WEB10K sample with the default
``TuneMixRanker`` model trained on its train file), every document of a 100-document test list is
explained on one thread with the default, exact method (``tunemix.core.explain.exact_explanation``),
against LightGBM's ``pred_contrib`` (TreeSHAP) on an early-stopped LightGBM lambdarank model of the
same training data, in the same run; ``SHAPLEY_DOCS`` of the documents are also explained with
``method="shapley"`` (the whole model's game, budget 65536) for their cost and the agreement of
the two: the mean Spearman rank correlation of the documents' contributions over the features
either method gives a non-zero value, and the mean number of top-3 features (by absolute
contribution) in common. And /rank p50 with ``"explain": 10`` at 100 documents over real HTTP
(a ``python -m tunemix.service`` process, one worker; the MQ2008 model and the MSLR default model), beside the
same requests without it, the two kinds in turn on one connection (``--requests`` of each, 150 by
default: with 30, p50s move by 10-20% between back-to-back runs).

    python -m bench.bench_explain [--model MQ2008_VERSION_DIR] [--mslr-model VERSION_DIR] [--quick]
                                  [--part all|service|agreement] [--name NAME] [--requests N]

Writes ``bench/results/explain.json`` (``--name``: ``bench/results/NAME.json``, and the other part's
figures, with ``--part``, are taken from that file when it exists, else from explain.json).
Against another checkout of the tree: ``python -m bench.ab --before DIR -- bench_explain ...``.

Without ``--model`` the MQ2008 model is models/mq2008-fold1 (trained from configs/mq2008.toml when
absent); without ``--mslr-model`` the default model is trained on the MSLR sample's train file
into a temporary directory.
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

from bench.bench_service import Server, free_port, post_rank, sequential
from bench.common import (
    MSLR,
    RESULTS,
    ROOT,
    SHARED_DATA,
    best_of,
    early_stopped_lightgbm,
    ensure_model,
    machine_probe_ms,
    mslr_default_model,
    write_result,
)
from bench.service_requests import make_bodies

N_DOCS = 100
TOP = 10
EXPLAIN = 10
SHAPLEY_DOCS = 10
PARTS = ("all", "service", "agreement")
#: /rank requests of each kind per model in the service part: 30 gave p50s that moved by 10-20%
#: between back-to-back runs on the shared 2-core machine; 150 cost about 5 s more per model
REQUESTS = 150


def log(msg: str) -> None:
    print(f"[bench_explain] {msg}", flush=True)


def candidate_list(test: Any, seed: int = 0) -> np.ndarray:
    """100 real test documents as one candidate list."""
    rows = np.random.default_rng(seed).choice(test.features.shape[0], size=N_DOCS, replace=False)
    return np.ascontiguousarray(test.features[np.sort(rows)])


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman's rank correlation (average ranks for ties) of two vectors."""
    from scipy.stats import spearmanr

    return float(spearmanr(a, b).statistic)


def agreement(exact: np.ndarray, shapley: np.ndarray) -> dict[str, Any]:
    """Per document: Spearman over the features either method moves, top-3 features in common."""
    rho, common = [], []
    for e, s in zip(exact, shapley, strict=True):
        used = (e != 0) | (s != 0)
        if used.sum() >= 3:
            rho.append(spearman(e[used], s[used]))
        top_e = set(np.argsort(-np.abs(e), kind="stable")[:3].tolist())
        top_s = set(np.argsort(-np.abs(s), kind="stable")[:3].tolist())
        common.append(len(top_e & top_s))
    return {"documents": len(common), "spearman_mean": round(float(np.mean(rho)), 3) if rho else None,
            "spearman_min": round(float(np.min(rho)), 3) if rho else None,
            "top3_in_common_mean": round(float(np.mean(common)), 2), "top3_all_three": int(sum(c == 3 for c in common))}


def ensemble_side(model_path: Path, x: np.ndarray, repeat: int) -> dict[str, Any]:
    import tunemix
    from tunemix.core.scoring.runtime import set_scoring_threads

    set_scoring_threads(1)
    model = tunemix.load(model_path)
    scores = model.predict(x)
    model.explain(x, rows=[0])  # compile the kernels outside the timing
    e = model.explain(x)
    seconds = best_of(lambda: model.explain(x), repeat=repeat)
    again = model.explain(x)
    out: dict[str, Any] = {
        "model": str(model_path), "n_bases": model.ensemble.forest.n_base, "n_members": len(model.members),
        "views": ["raw", *model.ensemble.extra_views], "mixer": model.ensemble.mixer.name,
        "score_100_ms": round(1e3 * best_of(lambda: model.predict(x), repeat=5), 3),
        "exact": {"all_100_ms": round(seconds * 1e3, 1), "per_document_ms": round(seconds * 1e3 / N_DOCS, 3),
                  "method": e.method,
                  "additivity_max_error": float(np.max(np.abs(e.baseline + e.contributions.sum(axis=1) - scores))),
                  "identical_on_a_second_call": bool(np.array_equal(e.contributions, again.contributions)),
                  "nonzero_features": {"min": int(e.n_relevant.min()), "median": float(np.median(e.n_relevant)),
                                       "max": int(e.n_relevant.max())}}}
    top = np.argsort(-scores, kind="stable")[:SHAPLEY_DOCS]
    t0 = time.perf_counter()
    s = model.explain(x, rows=top, method="shapley")
    shapley_s = time.perf_counter() - t0
    out["shapley"] = {"documents": SHAPLEY_DOCS, "which": "the top documents by score", "budget": 1 << 16,
                      "per_document_ms": round(shapley_s * 1e3 / SHAPLEY_DOCS, 1), "exact": int(s.exact.sum()),
                      "largest_standard_error": float(s.standard_error.max())}
    out["agreement"] = agreement(e.contributions[top], s.contributions)
    out["agreement"]["largest_abs_contribution"] = float(np.abs(e.contributions[top]).max())
    log(f"ensemble {model_path}: {out}")
    return out


def lightgbm_side(train: Any, vali: Any, x: np.ndarray, repeat: int, workdir: Path) -> dict[str, Any]:
    """An early-stopped LightGBM lambdarank model (NDCG@10 on ``vali``, 50 rounds' patience) and
    ``pred_contrib`` on every document of the list, one thread."""
    booster, info = early_stopped_lightgbm(train, vali, threads=1)
    raw = booster.predict(x, num_threads=1)
    contrib = booster.predict(x, pred_contrib=True, num_threads=1)
    seconds = best_of(lambda: booster.predict(x, pred_contrib=True, num_threads=1), repeat=max(repeat, 10))
    return {**info, "all_100_ms": round(seconds * 1e3, 3), "per_document_ms": round(seconds * 1e3 / N_DOCS, 4),
            "additivity_max_error": float(np.max(np.abs(contrib.sum(axis=1) - raw)))}


def interleaved(base: str, bodies: dict[str, list[bytes]], n: int) -> dict[str, dict[str, Any]]:
    """``n`` rounds of one request of each kind in turn on one keep-alive connection (the standard
    library's ``http.client``), so that every kind sees the same machine load, the kinds in a
    seeded random order each round (no kind always follows the same one): client p50/p90/p99/min
    and the server's own ``server_time_ms`` p50 and p99 per kind. A kind named ``full`` asks for every
    document back (no ``top_k``); the others for ``TOP``."""
    import http.client
    from urllib.parse import urlsplit

    parts = urlsplit(base)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port or 80, timeout=60.0)
    lat: dict[str, list[float]] = {k: [] for k in bodies}
    st: dict[str, list[float]] = {k: [] for k in bodies}
    try:
        kinds = list(bodies)
        rng = np.random.default_rng(0)
        for i in range(n):
            for kind in (kinds[j] for j in rng.permutation(len(kinds))):
                dt, doc = post_rank(conn, base, bodies[kind][i % len(bodies[kind])])
                want = N_DOCS if kind == "full" else TOP
                if len(doc["results"][0]["ranking"]) != want:
                    raise SystemExit(f"{base}/rank returned {len(doc['results'][0]['ranking'])} documents, not {want}")
                if kind == "with_explain" and "explanation" not in doc["results"][0]["ranking"][0]:
                    raise SystemExit(f"{base}/rank returned no explanation")
                lat[kind].append(dt * 1e3)
                st[kind].append(float(doc["server_time_ms"]))
    finally:
        conn.close()
    return {k: {"n": n, "p50_ms": round(float(np.percentile(lat[k], 50)), 3),
                "p90_ms": round(float(np.percentile(lat[k], 90)), 3),
                "p99_ms": round(float(np.percentile(lat[k], 99)), 3), "min_ms": round(min(lat[k]), 3),
                "server_time_p50_ms": round(float(np.percentile(st[k], 50)), 3),
                "server_time_p99_ms": round(float(np.percentile(st[k], 99)), 3)} for k in bodies}


def http_side(model_path: Path, test: Any, n: int, workdir: Path) -> dict[str, Any]:
    """/rank at 100 documents: top_k 10 with ``"explain": 10`` and without, and the same plain
    requests asking for all 100 documents back (``full``), requests of the three kinds in turn
    (``interleaved``), one worker serving ``model_path``; the ratios of explained to plain p50 and
    of top_k to full p50 and p99."""
    port = free_port()
    env = {**os.environ, "TUNEMIX_MODELS_DIR": str(model_path.parent.parent.resolve()),
           "TUNEMIX_DEFAULT_MODEL": model_path.parent.name, "TUNEMIX_PORT": str(port), "TUNEMIX_HOST": "127.0.0.1",
           "TUNEMIX_WORKERS": "1", "TUNEMIX_LOG_LEVEL": "warning"}
    env.setdefault("NUMBA_CACHE_DIR", str(ROOT / ".venv" / "numba-cache"))
    plain = make_bodies(test, N_DOCS, 8, seed=1)
    with_top = [json.dumps({**json.loads(b), "top_k": TOP}, separators=(",", ":")).encode() for b in plain]
    explained = [json.dumps({**json.loads(b), "top_k": TOP, "explain": EXPLAIN}, separators=(",", ":")).encode()
                 for b in plain]
    server = Server("python -m tunemix.service", [sys.executable, "-m", "tunemix.service"], env, port,
                    workdir / f"server-{port}.log")
    try:
        ready_s = server.wait_ready(600)
        sequential(server.base, explained, 3, TOP)  # warm the explanation path
        sequential(server.base, with_top, 3, TOP)
        sequential(server.base, plain, 3, N_DOCS)
        out: dict[str, Any] = {"model": str(model_path), "app": str(ROOT), "ready_s": round(ready_s, 1),
                           "documents": N_DOCS,
                               "top_k": TOP, "workers": 1, "explain": EXPLAIN, "order": "interleaved",
                               **interleaved(server.base, {"without_explain": with_top, "with_explain": explained,
                                                            "full": plain}, n)}
    finally:
        server.stop()
    out["p50_ratio"] = round(out["with_explain"]["p50_ms"] / out["without_explain"]["p50_ms"], 2)
    out["server_time_p50_ratio"] = round(out["with_explain"]["server_time_p50_ms"]
                                         / out["without_explain"]["server_time_p50_ms"], 2)
    out["top_k_to_full"] = {q: round(out["without_explain"][f"{q}_ms"] / out["full"][f"{q}_ms"], 3)
                            for q in ("p50", "p99", "server_time_p50", "server_time_p99")}
    log(f"http: {out}")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", type=Path, help="the MQ2008 version directory (default: models/mq2008-fold1)")
    p.add_argument("--mslr-model", type=Path, help="a default model trained on the MSLR sample (default: train one)")
    p.add_argument("--quick", action="store_true", help="fewer repeats, fewer HTTP requests")
    p.add_argument("--part", choices=PARTS, default="all",
                   help="all; or only the /rank service part (both models) or only the cost and agreement part, "
                        "the other part's figures kept from bench/results/explain.json")
    p.add_argument("--name", default="explain", help="the result file, bench/results/NAME.json (default explain)")
    p.add_argument("--requests", type=int, default=REQUESTS,
                   help=f"requests of each kind in the service part, interleaved (default {REQUESTS}; --quick: 10)")
    args = p.parse_args(argv)
    from tunemix.core.data.svmlight import read_svmlight
    from tunemix.train.data.splits import split_by_query

    fold = SHARED_DATA / "MQ2008" / "Fold1"
    if not (fold / "test.txt").exists() or not (MSLR / "msn1.fold1.test.5k.txt").exists():
        raise SystemExit(f"MQ2008 ({fold}) or the MSLR sample ({MSLR}) not found")
    repeat = 1 if args.quick else 3
    probe_before = machine_probe_ms()
    t0 = time.perf_counter()
    previous = RESULTS / f"{args.name}.json"
    previous = previous if previous.exists() else RESULTS / "explain.json"
    results: dict[str, Any] = (json.loads(previous.read_text()) if args.part != "all" and previous.exists() else {})
    for key in ("benchmark", "machine"):
        results.pop(key, None)
    command = ("python -m bench.bench_explain" + (f" --model {args.model}" if args.model else "")
               + (f" --mslr-model {args.mslr_model}" if args.mslr_model else "")
               + (" --quick" if args.quick else "") + (f" --part {args.part}" if args.part != "all" else "")
               + (f" --name {args.name}" if args.name != "explain" else "")
               + (f" --requests {args.requests}" if args.requests != REQUESTS else ""))
    with tempfile.TemporaryDirectory() as tmp:
        mq_path = args.model or ensure_model()
        test = read_svmlight(fold / "test.txt")
        mslr_path = args.mslr_model or mslr_default_model(Path(tmp) / "models", "mslr-default")
        mtest = read_svmlight(MSLR / "msn1.fold1.test.5k.txt", n_features=136)
        if args.part in ("all", "agreement"):
            train = read_svmlight(fold / "train.txt")
            vali = read_svmlight(fold / "vali.txt", n_features=train.n_features)
            x = candidate_list(test)
            results["mq2008"] = {"list": "MQ2008 Fold1 test.txt, 100 rows drawn (seed 0)",
                                 "ensemble": ensemble_side(mq_path, x, repeat),
                                 "lightgbm_pred_contrib": lightgbm_side(train, vali, x, repeat, Path(tmp))}
            mtrain = read_svmlight(MSLR / "msn1.fold1.train.5k.txt", n_features=136)
            # the ranker held out 20% of the training queries for calibration and the mix; LightGBM
            # stops early on the same kind of hold-out
            ltrain, lvali = split_by_query(mtrain, fraction=0.8, seed=0)
            xm = candidate_list(mtest)
            results["mslr_sample"] = {"list": "MSLR-WEB10K sample msn1.fold1.test.5k.txt, 100 rows drawn (seed 0)",
                                      "ensemble": ensemble_side(mslr_path, xm, repeat),
                                      "lightgbm_pred_contrib": lightgbm_side(ltrain, lvali, xm, repeat, Path(tmp))}
            for name in ("mq2008", "mslr_sample"):
                r = results[name]
                r["ratio_to_lightgbm_per_document"] = round(r["ensemble"]["exact"]["per_document_ms"]
                                                            / r["lightgbm_pred_contrib"]["per_document_ms"], 2)
                log(f"{name}: exact / pred_contrib per document = {r['ratio_to_lightgbm_per_document']}")
            results["agreement_command"] = command
        if args.part in ("all", "service"):
            n = 10 if args.quick else args.requests
            results.pop("rank_http_p50_ratio", None)
            results["rank_http"] = {"mq2008": http_side(mq_path, test, n, Path(tmp)),
                                    "mslr_sample_default": http_side(mslr_path, mtest, n, Path(tmp))}
            results["service_command"] = command
    result = {
        **results, "command": command, "threads": 1, "reference": "the list's per-feature median document",
        "machine_probe_ms": {"before": probe_before, "after": machine_probe_ms()},
        "seconds": round(time.perf_counter() - t0, 1),
    }
    path = write_result(args.name, result)
    log(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
