"""Evaluation throughput: documents per second for NDCG@10 on 100,000 queries x 100 documents.

    python -m bench.bench_evaluation [--queries 100000] [--docs 100] [--ranx-queries 10000]

Ours: ``mean_metric`` (the training-loop fast path, with and without validation) and
``evaluate`` under the yahoo convention, plus the trec convention (float32 rounding, docid
ties). Peer in the same run: ranx ``evaluate(qrels, run, "ndcg@10")`` on the same arrays
(Qrels/Run built from the same labels and scores; only the evaluate call is timed, after a
warm-up that compiles numba on both sides). Numba runs single-threaded on both sides.
Building ranx's Qrels/Run from Python dicts takes ~15 s per million documents, so the peer
comparison uses the first ``--ranx-queries`` queries (default 10,000 = 1M documents) and times
ours on that same subset; the 100,000-query figures are ours alone.

Writes bench/results/evaluation.json. On a shared machine wall time depends on the load, so
every timing is reported twice: best wall time and best CPU time of this process
(``time.process_time``; single-threaded work, so CPU time is the work done), with the load
average at the start and end. (The worst case of the ranking kernels, McIlroy's adversary, is
bounded by tests/evaluation/test_ranking_kernels.py.)
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from bench.common import best_of, write_result
from tunemix.core.evaluation import evaluate, mean_metric


def best_cpu_of(fn: Callable[[], Any], repeat: int) -> float:
    """Smallest CPU time of this process over ``repeat`` calls."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.process_time()
        fn()
        best = min(best, time.process_time() - t0)
    return best


def timed(fn: Callable[[], Any], repeat: int) -> dict[str, float]:
    return {"wall": best_of(fn, repeat), "cpu": best_cpu_of(fn, repeat)}


def make_data(n_queries: int, n_docs: int, seed: int = 0) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    n = n_queries * n_docs
    labels = rng.choice(5, size=n, p=[0.5, 0.25, 0.15, 0.07, 0.03]).astype(np.int32)
    scores = labels * 0.3 + rng.normal(size=n)
    offsets = np.arange(0, n + 1, n_docs, dtype=np.int64)
    return {"labels": labels, "scores": scores, "offsets": offsets}


def ranx_inputs(data: dict[str, Any], n_queries: int, n_docs: int) -> tuple[Any, Any, float]:
    from ranx import Qrels, Run

    t0 = time.perf_counter()
    labels = data["labels"][: n_queries * n_docs].reshape(n_queries, n_docs)
    scores = data["scores"][: n_queries * n_docs].reshape(n_queries, n_docs)
    doc_names = [f"d{j}" for j in range(n_docs)]
    qrels_dict: dict[str, dict[str, int]] = {}
    run_dict: dict[str, dict[str, float]] = {}
    for q in range(n_queries):
        lab = labels[q].tolist()
        qrels_dict[f"q{q}"] = {doc_names[j]: lab[j] for j in range(n_docs) if lab[j] > 0}
        run_dict[f"q{q}"] = dict(zip(doc_names, scores[q].tolist(), strict=True))
    qrels = Qrels(qrels_dict)
    run = Run(run_dict)
    return qrels, run, time.perf_counter() - t0


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--queries", type=int, default=100_000)
    ap.add_argument("--docs", type=int, default=100)
    ap.add_argument("--ranx-queries", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)

    import numba

    numba.set_num_threads(1)
    data = make_data(args.queries, args.docs)
    lab, sc, off = data["labels"], data["scores"], data["offsets"]
    n = lab.shape[0]
    small = make_data(10, 20, seed=1)
    mean_metric(small["labels"], small["scores"], small["offsets"], "ndcg@10", "yahoo")  # JIT
    evaluate(small["labels"], small["scores"], small["offsets"], "ndcg@10", "trec")

    load_start = os.getloadavg()
    timings: dict[str, dict[str, float]] = {}
    timings["mean_metric_yahoo"] = timed(
        lambda: mean_metric(lab, sc, off, "ndcg@10", "yahoo"), args.repeat)
    timings["mean_metric_yahoo_novalidate"] = timed(
        lambda: mean_metric(lab, sc, off, "ndcg@10", "yahoo", validate=False), args.repeat)
    timings["evaluate_yahoo"] = timed(
        lambda: evaluate(lab, sc, off, "ndcg@10", "yahoo"), args.repeat)
    timings["evaluate_trec_no_docids"] = timed(
        lambda: evaluate(lab, sc, off, "ndcg@10", "trec"), args.repeat)
    value_yahoo = mean_metric(lab, sc, off, "ndcg@10", "yahoo")
    value_trec = mean_metric(lab, sc, off, "ndcg@10", "trec")

    results: dict[str, Any] = {
        "n_queries": args.queries,
        "docs_per_query": args.docs,
        "n_docs": n,
        "numba_threads": 1,
        "seconds": timings,
        "docs_per_second_wall": {k: n / v["wall"] for k, v in timings.items()},
        "docs_per_second_cpu": {k: n / v["cpu"] for k, v in timings.items()},
        "ndcg@10": {"yahoo": value_yahoo, "trec": value_trec},
    }

    try:
        from ranx import evaluate as ranx_evaluate
    except ImportError:
        results["ranx"] = "not installed"
    else:
        rq = min(args.ranx_queries, args.queries)
        rn = rq * args.docs
        qrels, run, build_s = ranx_inputs(data, rq, args.docs)
        small_q, small_r, _ = ranx_inputs(small, 10, 20)
        ranx_evaluate(small_q, small_r, "ndcg@10")  # JIT warm-up
        ranx_t = timed(lambda: ranx_evaluate(qrels, run, "ndcg@10"), args.repeat)
        ranx_value = float(ranx_evaluate(qrels, run, "ndcg@10"))
        sub = off[: rq + 1]
        ours_t = timed(
            lambda: mean_metric(lab[:rn], sc[:rn], sub, "ndcg@10", "trec"), args.repeat)
        ours_yahoo_t = timed(
            lambda: mean_metric(lab[:rn], sc[:rn], sub, "ndcg@10", "yahoo"), args.repeat)
        results["ranx"] = {
            "n_queries": rq,
            "n_docs": rn,
            "build_qrels_run_seconds": build_s,
            "evaluate_seconds": ranx_t,
            "docs_per_second_cpu": rn / ranx_t["cpu"],
            "ndcg@10_linear_gain": ranx_value,
            "ours_trec_same_data_seconds": ours_t,
            "ours_trec_ndcg@10": mean_metric(lab[:rn], sc[:rn], sub, "ndcg@10", "trec"),
            "ours_yahoo_same_data_seconds": ours_yahoo_t,
            "speedup_ours_trec_vs_ranx_cpu": ranx_t["cpu"] / ours_t["cpu"],
            "speedup_ours_yahoo_vs_ranx_cpu": ranx_t["cpu"] / ours_yahoo_t["cpu"],
            "speedup_ours_trec_vs_ranx_wall": ranx_t["wall"] / ours_t["wall"],
            "note": "ranx ndcg@10 uses linear gain like trec_eval; qrels hold labels > 0",
        }
    results["load_average"] = {"start": load_start, "end": os.getloadavg()}
    path = write_result("evaluation", results)
    for k in timings:
        print(f"{k:32s} {results['docs_per_second_cpu'][k] / 1e6:8.1f} M docs/s CPU "
              f"{results['docs_per_second_wall'][k] / 1e6:8.1f} M docs/s wall")
    if isinstance(results["ranx"], dict):
        r = results["ranx"]
        print(f"{'ranx evaluate ndcg@10':32s} {r['docs_per_second_cpu'] / 1e6:8.1f} M docs/s CPU "
              f"(ours trec {r['speedup_ours_trec_vs_ranx_cpu']:.1f}x, yahoo "
              f"{r['speedup_ours_yahoo_vs_ranx_cpu']:.1f}x faster; ranx "
              f"{r['ndcg@10_linear_gain']:.6f} vs ours trec {r['ours_trec_ndcg@10']:.6f})")
    print(f"load average {results['load_average']}")
    print(f"wrote {path}")
    return results


if __name__ == "__main__":
    main()
