"""Evaluation throughput: documents per second for NDCG@10 on 100,000 queries x 100 documents.

Ours: ``mean_metric`` (the training-loop fast path, with and without validation) and
``evaluate`` under the yahoo convention, plus the trec convention (float32 rounding, docid
ties). Peer in the same run: ranx ``evaluate(qrels, run, "ndcg@10")`` on the same arrays
(Qrels/Run built from the same labels and scores; only the evaluate call is timed, after a
warm-up that compiles numba on both sides). Numba runs single-threaded on both sides.
Building ranx's Qrels/Run from Python dicts takes ~15 s per million documents, so the peer
comparison uses the first ``--ranx-queries`` queries (default 10,000 = 1M documents) and times
ours on that same subset; the 100,000-query figures are ours alone.

    python -m bench.bench_evaluation [--queries 100000] [--docs 100] [--ranx-queries 10000]
    python -m bench.bench_evaluation --adversarial-only [--adversarial-docs 20000]

Writes bench/results/evaluation.json. The adversarial part (also run by the first command) is
issue 37's reproduction 2: one ranx query in McIlroy's anti-quicksort order
(bench/quicksort_adversary.py), ndcg@1..ndcg@32, timed with this code (each query ranked once,
numba's quicksort within a comparison budget, then a merge sort) and with the kernels of the
commit before the change (``BEFORE_COMMIT``: a numba quicksort per measure), loaded from git in
the same run; the same scores shuffled are the ordinary case. It writes
bench/results/evaluation_adversarial.json. On a shared machine wall time depends on the load, so
every timing is reported twice: best wall time and best CPU time of this process
(``time.process_time``; single-threaded work, so CPU time is the work done), with the load
average at the start and end.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from bench.common import ROOT, best_of, write_result
from bench.quicksort_adversary import adversary
from tunemix.core.evaluation import evaluate, mean_metric
from tunemix.core.evaluation.conventions import METRIC_CODES, get_convention
from tunemix.core.evaluation.measures import Measure

# The last commit whose evaluation kernels sorted once per measure with numba's quicksort.
BEFORE_COMMIT = "0fe30cb"


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


def _old_kernels(tmp: str) -> Any:
    """tunemix/core/evaluation/kernels.py as of BEFORE_COMMIT, imported from a temporary file."""
    src = subprocess.run(["git", "show", f"{BEFORE_COMMIT}:tunemix/core/evaluation/kernels.py"], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    src = src.replace("cache=True", "cache=False")  # numba cannot cache a module loaded from a path
    path = os.path.join(tmp, "kernels_before.py")
    with open(path, "w") as fh:
        fh.write(src)
    spec = importlib.util.spec_from_file_location("kernels_before", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _old_evaluate(old: Any, labels: Any, scores: Any, offsets: Any, measures: list[str]) -> dict[str, float]:
    """The ranx means of ``measures`` the way evaluate() computed them at BEFORE_COMMIT."""
    conv = get_convention("ranx")
    max_label, max_n = int(labels.max()), int(np.diff(offsets).max())
    out = {}
    for name in measures:
        m = Measure.parse(name)
        vals = old.query_values(
            labels, scores, np.zeros(0, np.int64), conv.tie_code(), conv.average_ties, offsets,
            METRIC_CODES[m.name], conv.ndcg_cutoff(m) or 0, conv.short_code(), conv.p_code(),
            conv.measure_empty_value(m), conv.measure_gain_values(max_label, m), conv.discount_values(max_n),
            conv.relevant_values(max_label), conv.err_values(max_label, m.top))
        out[name] = float(old.mean_of_values(vals))
    return out


def adversarial(n_docs: int, repeat: int) -> dict[str, Any]:
    """Reproduction 2 at ``n_docs``: before/after CPU seconds on the adversarial and shuffled order."""
    measures = [f"ndcg@{k}" for k in range(1, 33)]
    t0 = time.perf_counter()
    scores = -adversary(n_docs)
    build_s = time.perf_counter() - t0
    shuffled = np.random.default_rng(0).permutation(scores)
    labels = np.random.default_rng(1).integers(0, 3, size=n_docs).astype(np.int32)
    offsets = np.array([0, n_docs], dtype=np.int64)
    with tempfile.TemporaryDirectory() as tmp:
        old = _old_kernels(tmp)
        small = np.array([0, 3], dtype=np.int64)
        _old_evaluate(old, labels[:3], scores[:3], small, measures[:1])  # JIT both sides
        evaluate(labels[:3], scores[:3], small, measures, "ranx")
        res: dict[str, Any] = {"n_docs": n_docs, "measures": "ndcg@1..ndcg@32", "convention": "ranx",
                               "build_adversary_seconds": build_s, "seconds": {}}
        for order_name, sc in (("adversarial", scores), ("shuffled", shuffled)):
            after = evaluate(labels, sc, offsets, measures, "ranx").mean
            before = _old_evaluate(old, labels, sc, offsets, measures)
            assert all(abs(after[m] - before[m]) < 1e-12 for m in measures), "before and after disagree"
            def run_after(sc: Any = sc) -> Any:
                return evaluate(labels, sc, offsets, measures, "ranx")

            def run_before(sc: Any = sc) -> Any:
                return _old_evaluate(old, labels, sc, offsets, measures)

            res["seconds"][f"{order_name}_after"] = timed(run_after, repeat)
            res["seconds"][f"{order_name}_before"] = timed(run_before, 1)
    sec = res["seconds"]
    res["speedup_adversarial_cpu"] = sec["adversarial_before"]["cpu"] / sec["adversarial_after"]["cpu"]
    res["after_adversarial_over_shuffled_cpu"] = sec["adversarial_after"]["cpu"] / sec["shuffled_after"]["cpu"]
    res["same_means_before_and_after"] = True
    return res


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--queries", type=int, default=100_000)
    ap.add_argument("--docs", type=int, default=100)
    ap.add_argument("--ranx-queries", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--adversarial-docs", type=int, default=20_000)
    ap.add_argument("--adversarial-only", action="store_true")
    args = ap.parse_args(argv)

    import numba

    numba.set_num_threads(1)
    adv = adversarial(args.adversarial_docs, args.repeat)
    adv["load_average"] = os.getloadavg()
    adv["command"] = "python -m bench.bench_evaluation --adversarial-only"
    print(f"adversarial ranx query of {adv['n_docs']} documents, ndcg@1..32: CPU s "
          + ", ".join(f"{k} {v['cpu']:.3f}" for k, v in adv["seconds"].items()))
    print(f"wrote {write_result('evaluation_adversarial', adv)}")
    if args.adversarial_only:
        return adv
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
