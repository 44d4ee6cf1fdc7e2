"""Scoring engine speed: our forest kernel against LightGBM and lleaves, and the whole
``EnsembleModel.score`` on the MQ2008 ensemble.

    .venv/bin/python -m bench.bench_scoring [--quick]

Writes ``bench/results/scoring.json`` (machine, versions, the command, every figure, the
targets with pass/fail). Every peer is measured in the same run, interleaved, on 1 and 2 threads.

1. Forest kernels. LightGBM trains forests of 300 trees with 8 and with 64 leaves (lambdarank,
   ``num_leaves`` equal) on MQ2008 Fold1 train (46 features) and on the synthetic MSLR-shaped
   set (``tunemix.train.data.synthetic``, 136 features, 5 levels). Each LightGBM model is converted
   into a ``FlatForest`` of exactly the same trees by ``tunemix.train.learners.lightgbm_forest``
   (LightGBM's ``x <= t`` goes left; ours goes right when ``x >= t'`` with ``t'`` the smallest
   float32 above ``t``, exact for float32 inputs); our scores must equal LightGBM's raw
   predictions before anything is timed, and lleaves' (LLVM-compiled from the same model file)
   are checked too. Timed on batches of 100,
   1,000 and 10,000 documents, 1 and 2 threads: ours ``score_forest`` (threads through
   ``set_scoring_threads``), LightGBM ``Booster.predict(X, raw_score=True, num_threads=t)``
   and lleaves ``Model.predict(X, n_jobs=t)``. Inputs: float32 for ours and LightGBM (the
   service's dtype; LightGBM reads float32 without a copy), float64 for lleaves (its compiled
   dtype, so that it does not copy). Each setting: one untimed call per peer, then rounds
   A B C A B C ...; a sample is the mean of enough back-to-back calls to last a few ms; the
   figure is the median sample, in ns per document per tree.
2. ``EnsembleModel.score`` of the latest ``models/mq2008-fold1/vN`` (trained first when absent),
   in a fresh process with OpenBLAS held to one thread, as the service runs it,
   for one query of 1, 10, 100, 1,000 and 10,000 documents (rows drawn without repetition from
   all 15,211 MQ2008 documents), on 1 and 2 threads interleaved, with the medians of the
   ``timings`` breakdown (views, forest, calibrators, mixer) and of the wall time of the call.
3. The targets with booleans.

lleaves 1.3 still calls llvmlite's legacy pass manager, removed in llvmlite 0.45 (numba 0.68
needs llvmlite 0.50): ``_patch_lleaves`` ports its optimisation step to the new pass manager
(``PipelineTuningOptions(speed_level=3)`` + ``PassBuilder``, as upstream's unreleased fix
siboehm/lleaves#97 does) and drops the removed ``llvm.initialize()`` call. The patch only
touches lleaves inside this process and is recorded in the JSON. Compiling a 300-tree 64-leaf
forest takes about a minute, so the object code is cached by model hash (``--lleaves-cache``,
default ``~/.cache/tunemix/bench-lleaves``; LightGBM trains deterministically, so later runs,
quick or full, reuse it). Run time: about 3-4 minutes (``--quick``: about 1 minute), plus about
2.5 minutes the first time for lleaves.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import math
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import ROOT, SHARED_DATA, ensure_model, git, machine_probe_ms, write_result
from tunemix.core.scoring import forest as forest_module
from tunemix.core.scoring import runtime
from tunemix.core.scoring.forest import FlatForest, score_forest
from tunemix.train.learners.lightgbm_forest import lightgbm_to_forest

N_TREES = 300
LEAVES = (8, 64)
BATCHES = (100, 1_000, 10_000)
THREADS = (1, 2)
ENSEMBLE_SIZES = (1, 10, 100, 1_000, 10_000)
SCORE_TOL = 1e-5  # relative to max(1, max |score|)
DEFAULT_LLEAVES_CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "tunemix" / "bench-lleaves"


# ----------------------------------------------------------------------------- environment
def environment() -> dict[str, Any]:
    import lightgbm
    import lleaves
    import llvmlite

    cpu = None
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    forest_py = ROOT / "tunemix" / "core" / "scoring" / "forest.py"
    status = git("status", "--porcelain", "--", "tunemix/core/scoring/forest.py")
    return {
        "cpu_model": cpu,
        "load_average_at_start": list(os.getloadavg()),
        "lightgbm": lightgbm.__version__,
        "lleaves": getattr(lleaves, "__version__", None) or _dist_version("lleaves"),
        "llvmlite": llvmlite.__version__,
        "git_head": git("rev-parse", "HEAD"),
        "forest_py_sha256": hashlib.sha256(forest_py.read_bytes()).hexdigest(),
        "forest_py_modified_vs_head": bool(status) if status is not None else None,
        "has_set_scoring_threads": hasattr(forest_module, "set_scoring_threads"),
    }


def _dist_version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


def set_threads(t: int) -> bool:
    """Our threads per process; False when the kernel has no such setting yet."""
    fn = getattr(forest_module, "set_scoring_threads", None)
    if fn is None:
        return False
    fn(t)
    return True


# ----------------------------------------------------------------------------- lleaves shim
def _patch_lleaves() -> str | None:
    """Make lleaves 1.3 compile under llvmlite >= 0.45 (see the module docstring)."""
    import llvmlite.binding as llvm

    if hasattr(llvm, "PassManagerBuilder"):
        return None
    import lleaves.compiler
    import lleaves.llvm_binding
    import llvmlite.ir
    from lleaves.compiler.ast import parse_to_ast
    from lleaves.compiler.codegen import gen_forest

    def init_llvm() -> None:  # llvm.initialize() now raises; the rest is still needed
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()

    def compile_to_module(file_path: Any, fblocksize: int = 34, finline: bool = True,
                          raw_score: bool = False, froot_func_name: str = "forest_root",
                          use_fp64: bool = True) -> Any:
        forest = parse_to_ast(file_path)
        forest.raw_score = raw_score
        ir = llvmlite.ir.Module(name="forest")
        gen_forest(forest, ir, fblocksize, froot_func_name, use_fp64)
        ir.triple = llvm.get_process_triple()
        module = llvm.parse_assembly(str(ir))
        module.name = str(file_path)
        module.verify()
        init_llvm()
        pto = llvm.create_pipeline_tuning_options(speed_level=3)
        if finline:
            pto.inlining_threshold = 1  # as lleaves' PassManagerBuilder.inlining_threshold = 1
        pb = llvm.create_pass_builder(lleaves.llvm_binding._get_target_machine(), pto)
        pb.getModulePassManager().run(module, pb)
        return module

    lleaves.compiler.compile_to_module = compile_to_module
    lleaves.llvm_binding._initialize_llvm = init_llvm
    return ("lleaves 1.3 uses llvmlite's legacy PassManagerBuilder (removed in llvmlite 0.45) and "
            "llvm.initialize() (raises since 0.45): patched in-process to the new pass manager "
            "(PipelineTuningOptions(speed_level=3), inlining_threshold=1, PassBuilder on lleaves' "
            "own target machine), as siboehm/lleaves#97")


# ----------------------------------------------------------------------------- timing
def interleaved(fns: dict[str, Callable[[], Any]], *, sample_s: float, min_rounds: int,
                max_rounds: int, budget_s: float) -> dict[str, dict[str, Any]]:
    """Seconds per call of each function: rounds A B C A B C ...; median over rounds.

    One untimed call each, then a timed call sets how many back-to-back calls make one sample
    (about ``sample_s``). Each sample starts with one untimed call: on this 2-vCPU VM the peer
    that ran just before leaves its worker threads spinning (OpenMP) or its idle vCPU asleep,
    and the first call after a switch pays for that (measured: lleaves ``n_jobs=2`` on 100
    documents right after our 2-thread kernel took 3.0 ms instead of 0.47 ms). Rounds continue
    until ``max_rounds`` or, after ``min_rounds``, until ``budget_s`` has passed.
    """
    inner: dict[str, int] = {}
    for name, fn in fns.items():
        fn()
        t0 = time.perf_counter()
        fn()
        inner[name] = max(1, math.ceil(sample_s / max(time.perf_counter() - t0, 1e-7)))
    samples: dict[str, list[float]] = {name: [] for name in fns}
    start = time.perf_counter()
    for r in range(max_rounds):
        for name, fn in fns.items():
            k = inner[name]
            fn()  # untimed: absorbs the switch from the previous peer (its threads winding down)
            t0 = time.perf_counter()
            for _ in range(k):
                fn()
            samples[name].append((time.perf_counter() - t0) / k)
        if r + 1 >= min_rounds and time.perf_counter() - start > budget_s:
            break
    return {name: {"median_s": statistics.median(s), "min_s": min(s), "rounds": len(s),
                   "calls_per_sample": inner[name]} for name, s in samples.items()}


# ----------------------------------------------------------------------------- data
def load_mq2008() -> dict[str, Any] | None:
    fold = SHARED_DATA / "MQ2008" / "Fold1"
    if not (fold / "train.txt").exists():
        return None
    from tunemix.core.data.svmlight import read_svmlight

    train = read_svmlight(fold / "train.txt")
    d = train.n_features
    vali = read_svmlight(fold / "vali.txt", n_features=d)
    test = read_svmlight(fold / "test.txt", n_features=d)
    # Fold1's three parts are all 15,211 documents; the score batches are drawn from them
    every = np.vstack([train.features, vali.features, test.features]).astype(np.float32)
    return {"train": train, "all_rows": every, "source": str(fold)}


def synthetic_mslr(quick: bool) -> dict[str, Any]:
    from tunemix.train.data.synthetic import make_synthetic_splits

    nq = 400  # the same in --quick, so that both modes train identical models (lleaves cache)
    sets = make_synthetic_splits(n_queries={"train": nq, "test": 130}, docs_per_query=(40, 160),
                                 n_features=136, n_levels=5, seed=0)
    return {"train": sets["train"], "all_rows": sets["test"].features.astype(np.float32),
            "source": f"tunemix.train.data.synthetic.make_synthetic_splits(n_features=136, n_levels=5, "
                      f"docs_per_query=(40, 160), train queries {nq}, seed=0)"}


def rows(pool: np.ndarray, n: int, seed: int) -> np.ndarray:
    """``n`` rows of ``pool`` in a random order, without repetition while the pool lasts."""
    rng = np.random.default_rng(seed)
    idx = np.concatenate([rng.permutation(pool.shape[0]) for _ in range(-(-n // pool.shape[0]))])[:n]
    return np.ascontiguousarray(pool[idx], dtype=np.float32)


# ----------------------------------------------------------------------------- part 1
def train_lightgbm(train: Any, leaves: int) -> Any:
    import lightgbm as lgb

    params = {"objective": "lambdarank", "num_leaves": leaves, "learning_rate": 0.1,
              "min_data_in_leaf": 5, "num_threads": 2, "verbose": -1, "seed": 0, "deterministic": True}
    ds = lgb.Dataset(train.features, train.labels, group=np.diff(train.query_offsets))
    return lgb.train(params, ds, num_boost_round=N_TREES)


def lleaves_cache_path(cache_dir: Path, model_file: Path) -> Path:
    """Where lleaves keeps the object code of ``model_file`` (lleaves never checks staleness, so
    the name is a hash of the model text, the versions and the host CPU)."""
    import llvmlite
    import llvmlite.binding as llvm

    h = hashlib.sha256(model_file.read_bytes())
    try:
        features = llvm.get_host_cpu_features().flatten()
    except RuntimeError:
        features = ""
    for part in (_dist_version("lleaves"), llvmlite.__version__, llvm.get_host_cpu_name(), features,
                 "new-pass-manager-patch" if not hasattr(llvm, "PassManagerBuilder") else "upstream"):
        h.update(str(part).encode())
    cache_dir.mkdir(parents=True, exist_ok=True)
    return cache_dir / f"{h.hexdigest()[:32]}.o"


def _ours(forest: FlatForest, X: np.ndarray, threads: int) -> np.ndarray:
    set_threads(threads)
    return score_forest(forest, X)


def kernels_on(name: str, data: dict[str, Any], tmp: Path, quick: bool, cache_dir: Path | None
               ) -> dict[str, Any]:
    import lleaves

    train = data["train"]
    X = rows(data["all_rows"], max(BATCHES), seed=1)
    X64 = X.astype(np.float64)
    out: dict[str, Any] = {"data": data["source"], "train_rows": int(train.features.shape[0]),
                           "n_features": int(train.features.shape[1]), "forests": {}}
    timing: dict[str, Any] = (
        {"sample_s": 0.002, "min_rounds": 3, "max_rounds": 15, "budget_s": 0.4} if quick
        else {"sample_s": 0.005, "min_rounds": 11, "max_rounds": 61, "budget_s": 5.0})
    for leaves in LEAVES:
        t0 = time.perf_counter()
        bst = train_lightgbm(train, leaves)
        train_s = time.perf_counter() - t0
        model_file = tmp / f"{name}-{leaves}.txt"
        bst.save_model(str(model_file))
        forest = lightgbm_to_forest(bst)
        n_trees = bst.num_trees()
        leaf_counts = np.diff(forest.base_leaf_start)
        # exactly the same trees: ours (both thread counts) against LightGBM's raw scores
        ref = np.asarray(bst.predict(X, raw_score=True, num_threads=2), dtype=np.float64)
        scale = max(1.0, float(np.abs(ref).max()))
        check: dict[str, Any] = {"rows": int(X.shape[0]), "tolerance": SCORE_TOL * scale}
        for t in THREADS:
            if set_threads(t) or t == 1:
                ours = score_forest(forest, X)[:, 0, 0]
                diff = float(np.abs(ours - ref).max())
                check[f"ours_t{t}_max_abs_diff_vs_lightgbm"] = diff
                if not diff <= SCORE_TOL * scale:
                    raise SystemExit(f"{name}, {leaves} leaves, {t} thread(s): our scores differ from "
                                     f"LightGBM's raw predictions by up to {diff:g}; not timing")
        cache = (lleaves_cache_path(cache_dir, model_file) if cache_dir is not None
                 else tmp / f"{name}-{leaves}.o")
        cache_hit = cache.exists()
        t0 = time.perf_counter()
        ll = lleaves.Model(model_file=str(model_file))
        ll.compile(cache=str(cache))
        compile_s = time.perf_counter() - t0
        ll_diff = max(float(np.abs(np.asarray(ll.predict(X64, n_jobs=t)) - ref).max()) for t in THREADS)
        check["lleaves_max_abs_diff_vs_lightgbm"] = ll_diff
        check["lleaves_equals_lightgbm"] = ll_diff <= SCORE_TOL * scale
        if not check["lleaves_equals_lightgbm"]:
            print(f"WARNING {name} {leaves} leaves: lleaves differs from LightGBM by {ll_diff:g}")
        res: dict[str, Any] = {
            "n_trees": n_trees, "leaves_per_tree_mean": float(leaf_counts.mean()),
            "trees_with_full_leaves": int((leaf_counts == leaves).sum()),
            "lightgbm_params": {"objective": "lambdarank", "num_leaves": leaves, "learning_rate": 0.1,
                                "min_data_in_leaf": 5, "num_boost_round": N_TREES},
            "lightgbm_train_s": round(train_s, 2), "lleaves_compile_s": round(compile_s, 2),
            "lleaves_compile_from_cache": cache_hit, "lleaves_cache": str(cache),
            "equality_check": check, "settings": [],
        }
        print(f"{name} {leaves} leaves: {n_trees} trees, {leaf_counts.mean():.1f} leaves/tree, "
              f"trained {train_s:.1f}s, lleaves compiled {compile_s:.1f}s"
              f"{' (cached)' if cache_hit else ''}, max diffs ours "
              f"{check.get('ours_t1_max_abs_diff_vs_lightgbm'):.2g} lleaves {ll_diff:.2g}", flush=True)
        for batch in BATCHES:
            Xb, Xb64 = X[:batch], X64[:batch]
            for t in THREADS:
                fns: dict[str, Callable[[], Any]] = {}
                if set_threads(t) or t == 1:
                    fns["ours"] = functools.partial(_ours, forest, Xb, t)
                fns["lightgbm"] = functools.partial(bst.predict, Xb, raw_score=True, num_threads=t)
                fns["lleaves"] = functools.partial(ll.predict, Xb64, n_jobs=t)
                timed = interleaved(fns, **timing)
                per = {k: v["median_s"] * 1e9 / (batch * n_trees) for k, v in timed.items()}
                row: dict[str, Any] = {"docs": batch, "threads": t}
                for k in ("ours", "lightgbm", "lleaves"):
                    row[f"{k}_ns_per_doc_per_tree"] = per.get(k)
                if "ours" in per:
                    row["ratio_ours_over_lightgbm"] = per["ours"] / per["lightgbm"]
                    row["ratio_ours_over_lleaves"] = per["ours"] / per["lleaves"]
                else:
                    row["ours"] = "skipped: tunemix.core.scoring.forest has no set_scoring_threads yet"
                row["ratio_lleaves_over_lightgbm"] = per["lleaves"] / per["lightgbm"]
                if t > 1 and "ours" in per:
                    # each peer at its best thread count up to t (lleaves' thread pool per call
                    # makes n_jobs=2 slower than 1 on short lists)
                    same_batch = [r for r in res["settings"] if r["docs"] == batch]
                    for k in ("lightgbm", "lleaves"):
                        best = min([per[k]] + [r[f"{k}_ns_per_doc_per_tree"] for r in same_batch])
                        row[f"{k}_best_threads_le_t_ns_per_doc_per_tree"] = best
                        row[f"ratio_ours_over_{k}_best_threads"] = per["ours"] / best
                row["timing"] = timed
                res["settings"].append(row)
                print(f"  {batch:>6} docs t={t}: " + "  ".join(f"{k} {v:6.2f}" for k, v in per.items())
                      + (f"  ours/lgb {row['ratio_ours_over_lightgbm']:.2f} ours/lleaves "
                         f"{row['ratio_ours_over_lleaves']:.2f}" if "ours" in per else ""), flush=True)
        out["forests"][f"leaves_{leaves}"] = res
    set_threads(max(THREADS))
    return out


# ----------------------------------------------------------------------------- part 2
def ensemble(mq: dict[str, Any] | None, quick: bool) -> dict[str, Any]:
    if mq is None:
        return {"skipped": "MQ2008 data absent (../shared/data/MQ2008)"}
    from tunemix.core.scoring.ensemble_model import load_model

    model_dir = ensure_model()  # the latest models/mq2008-fold1/vN, trained first when absent

    model, _ = load_model(model_dir)
    f = model.forest
    out: dict[str, Any] = {
        "model": str(model_dir.relative_to(ROOT)), "members": model.n_members, "runs": len(model.runs),
        "bases": f.n_base, "extra_views": list(model.extra_views), "forest_features": f.n_features,
        "checkpoints": int(model._checkpoints.shape[0]),
        "node_count": int(f.node_feature.shape[0]), "sizes": [],
    }
    pool = mq["all_rows"]
    if pool.shape[1] != model.n_features:
        pool = np.ascontiguousarray(pool[:, : model.n_features])
    budget = 1.0 if quick else 6.0
    min_rounds = 3 if quick else 7
    max_rounds = 30 if quick else 200
    print(f"ensemble {out['model']}: {out['members']} members, {out['bases']} bases", flush=True)
    for n in ENSEMBLE_SIZES:
        x = rows(pool, n, seed=2)
        off = np.array([0, n], dtype=np.int64)
        walls: dict[int, list[float]] = {t: [] for t in THREADS}
        stages: dict[int, dict[str, list[float]]] = {t: {} for t in THREADS}
        scores: dict[int, np.ndarray] = {}
        have_threads = True
        for t in THREADS:  # untimed first calls
            have_threads = set_threads(t) and have_threads
            scores[t] = model.score(x, off)
        per_switch = 1 if n >= 1_000 else 5  # timed calls after each untimed one
        start = time.perf_counter()
        for r in range(max_rounds):
            for t in THREADS:
                set_threads(t)
                model.score(x, off)  # untimed: absorbs the thread-count switch (see interleaved)
                for _ in range(per_switch):
                    tim: dict[str, float] = {}
                    t0 = time.perf_counter()
                    model.score(x, off, timings=tim)
                    walls[t].append(time.perf_counter() - t0)
                    for stage, secs in tim.items():
                        stages[t].setdefault(stage, []).append(secs)
            if r + 1 >= min_rounds and time.perf_counter() - start > budget:
                break
        for t in THREADS:
            row: dict[str, Any] = {"docs": n, "threads": t, "calls_timed": len(walls[t]),
                                   "total_ms": statistics.median(walls[t]) * 1e3,
                                   "total_min_ms": min(walls[t]) * 1e3}
            for stage, values in stages[t].items():
                row[f"{stage}_ms"] = statistics.median(values) * 1e3
            row["forest_ns_per_doc_per_base"] = row.get("forest_ms", float("nan")) * 1e6 / (n * f.n_base)
            row["max_abs_diff_t1_vs_t2"] = float(np.abs(scores[1] - scores[2]).max())
            if not have_threads:
                row["note"] = "set_scoring_threads missing: both rows use the kernel's default"
            out["sizes"].append(row)
            print(f"  {n:>6} docs t={t}: total {row['total_ms']:8.3f} ms  " + "  ".join(
                f"{k} {row.get(k + '_ms', float('nan')):.3f}" for k in ("views", "forest", "calibrators", "mixer")),
                flush=True)
    set_threads(max(THREADS))
    return out


def ensemble_in_fresh_process(mq: dict[str, Any] | None, quick: bool) -> dict[str, Any]:
    """``ensemble`` with the service's settings (OpenBLAS held to one thread), for a process of
    its own (no peer library loaded; ``mq``, already read by the parent, comes pickled)."""
    env = runtime.limit_blas_threads(1)
    set_threads(max(THREADS))
    out = ensemble(mq, quick)
    out["process"] = {"fresh": True, "blas_threads_limited_to_1": [Path(p).name for p in env]}
    return out


# ----------------------------------------------------------------------------- part 3
def targets(kernels: dict[str, Any], ens: dict[str, Any]) -> dict[str, Any]:
    """The scoring targets. Kernel targets hold per setting (data, batch, threads) with each peer at
    the same thread count (``pass``); ``pass_vs_best_peer_threads`` is stricter: each peer at its
    best thread count up to ours (lleaves is faster on one thread than on two for short lists)."""
    def rows_of(leaves: int) -> list[tuple[str, dict[str, Any]]]:
        return [(ds, r) for ds, k in kernels.items()
                for r in k["forests"][f"leaves_{leaves}"]["settings"] if "ratio_ours_over_lightgbm" in r]

    def best(r: dict[str, Any], peer: str) -> float:
        return r.get(f"ratio_ours_over_{peer}_best_threads", r[f"ratio_ours_over_{peer}"])

    out: dict[str, Any] = {}
    checks = []
    for ds, r in rows_of(8):
        checks.append({"data": ds, "docs": r["docs"], "threads": r["threads"],
                       "ours_over_lightgbm": r["ratio_ours_over_lightgbm"],
                       "ours_over_lleaves": r["ratio_ours_over_lleaves"],
                       "ours_over_lightgbm_best_threads": best(r, "lightgbm"),
                       "ours_over_lleaves_best_threads": best(r, "lleaves"),
                       "pass": r["ratio_ours_over_lightgbm"] <= 0.5 and r["ratio_ours_over_lleaves"] <= 1.0,
                       "pass_vs_best_peer_threads": best(r, "lightgbm") <= 0.5 and best(r, "lleaves") <= 1.0})
    out["leaves_8"] = {"target": "ours <= 0.5x LightGBM ns/doc/tree and <= lleaves, in every setting",
                       "pass": bool(checks) and all(c["pass"] for c in checks),
                       "pass_vs_best_peer_threads": bool(checks) and all(c["pass_vs_best_peer_threads"]
                                                                         for c in checks),
                       "settings": checks}
    checks = []
    for ds, r in rows_of(64):
        checks.append({"data": ds, "docs": r["docs"], "threads": r["threads"],
                       "ours_over_lightgbm": r["ratio_ours_over_lightgbm"],
                       "ours_over_lightgbm_best_threads": best(r, "lightgbm"),
                       "pass": r["ratio_ours_over_lightgbm"] <= 0.7,
                       "pass_vs_best_peer_threads": best(r, "lightgbm") <= 0.7})
    out["leaves_64"] = {"target": "ours <= 0.7x LightGBM ns/doc/tree, in every setting",
                        "pass": bool(checks) and all(c["pass"] for c in checks),
                        "pass_vs_best_peer_threads": bool(checks) and all(c["pass_vs_best_peer_threads"]
                                                                          for c in checks),
                        "settings": checks}
    for n, limit in ((100, 2.0), (1_000, 12.0)):
        row = next((r for r in ens.get("sizes", []) if r["docs"] == n and r["threads"] == 2), None)
        out[f"ensemble_{n}_docs_2_threads"] = {
            "target": f"EnsembleModel.score, one query of {n} documents, 2 threads, < {limit} ms (median wall)",
            "target_ms": limit, "measured_ms": None if row is None else row["total_ms"],
            "pass": row is not None and row["total_ms"] < limit}
    out["all_pass"] = all(v["pass"] for v in out.values() if isinstance(v, dict))
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--quick", action="store_true", help="smoke run (~1 min once lleaves is cached): fewer rounds")
    ap.add_argument("--lleaves-cache", type=Path, default=DEFAULT_LLEAVES_CACHE,
                    help=f"lleaves object code, by model hash (default {DEFAULT_LLEAVES_CACHE}); "
                         "compiling the two 64-leaf forests takes about a minute each")
    ap.add_argument("--no-lleaves-cache", action="store_true", help="compile lleaves afresh (temporary cache)")
    args = ap.parse_args(argv)
    argv_used = sys.argv[1:] if argv is None else argv
    t_start = time.perf_counter()
    patch = _patch_lleaves()
    env = environment()
    # as the service does at start-up (TUNEMIX_BLAS_THREADS): OpenBLAS's spinning idle threads
    # would take the core our second scoring thread needs
    env["blas_threads_limited_to_1"] = [Path(p).name for p in runtime.limit_blas_threads(1)]
    set_threads(max(THREADS))
    result: dict[str, Any] = {
        "command": " ".join([".venv/bin/python", "-m", "bench.bench_scoring", *argv_used]),
        "quick": args.quick, "environment": env, "lleaves_patch": patch,
        "units": "ns per document per tree (median sample); ensemble in ms (median wall time of score())",
    }
    mq = load_mq2008()
    cache_dir = None if args.no_lleaves_cache else args.lleaves_cache
    # the machine's phase around each part (bench.common.machine_probe_ms)
    probes: dict[str, float] = {"start": machine_probe_ms()}
    kernels: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench_scoring_") as tmpdir:
        tmp = Path(tmpdir)
        if mq is None:
            kernels["mq2008"] = "skipped: ../shared/data/MQ2008 absent"
            print(kernels["mq2008"])
        else:
            kernels["mq2008"] = kernels_on("mq2008", mq, tmp, args.quick, cache_dir)
        kernels["synthetic_mslr"] = kernels_on("synthetic_mslr", synthetic_mslr(args.quick), tmp, args.quick,
                                               cache_dir)
    result["forest_kernels"] = kernels
    probes["after_forest_kernels"] = machine_probe_ms()
    # in a fresh process, as the service runs it: LightGBM, loaded above, shares numba's OpenMP
    # runtime (libgomp) and left our two-thread passes no faster than one (measured)
    import multiprocessing

    with multiprocessing.get_context("spawn").Pool(1) as pool:
        result["ensemble"] = pool.apply(ensemble_in_fresh_process, ({"all_rows": mq["all_rows"]} if mq else None,
                                                                     args.quick))
    probes["after_ensemble"] = machine_probe_ms()
    result["machine_probe_ms"] = probes
    print(f"machine probe (ms, a fixed Python loop; lower is a faster phase): {probes}")
    result["targets"] = targets({k: v for k, v in kernels.items() if isinstance(v, dict)}, result["ensemble"])
    try:
        import numba

        result["environment"]["numba_threading_layer"] = numba.threading_layer()
    except ValueError:  # no parallel region ran
        result["environment"]["numba_threading_layer"] = None
    result["environment"]["load_average_at_end"] = list(os.getloadavg())
    result["run_s"] = round(time.perf_counter() - t_start, 1)
    path = write_result("scoring", result)
    t = result["targets"]
    print("targets:", {k: v["pass"] for k, v in t.items() if isinstance(v, dict)}, "all:", t["all_pass"])
    print(f"wrote {path} after {result['run_s']:.0f}s")


if __name__ == "__main__":
    main()
