"""One fit in a process of its own, as a user runs it: fit seconds, the peak memory of the whole
process tree (the fit's process and every worker it starts, sampled from /proc), and the scores of
the validation and test queries. Shared by ``bench.defaults`` and ``bench.scale``.

The systems (what a careful user would run on the same train / validation / test split):

==================  ==============================================================================
``tunemix``         ``TuneMixRanker(n_jobs=2).fit(X, y, group, eval_set=[(Xv, yv)], eval_group=[gv])``
                    (no config: the default, chosen from the data)
``tunemix1``        the same on one core: ``TuneMixRanker(n_jobs=1)`` (one run at a time) with
                    ``NUMBA_NUM_THREADS=1`` (the cost peer of ``lgbm_es1``)
``lgbm``            ``LGBMRanker()`` (LightGBM's defaults: 100 trees, 31 leaves, lr 0.1)
``lgbm_es``         ``LGBMRanker(n_estimators=2000, learning_rate=0.05)`` stopped early on the
                    validation queries' NDCG@10 (patience 100): the peer to beat
``xgb``             ``XGBRanker(tree_method="hist")`` (XGBoost's defaults)
``lgbm_es1``        ``lgbm_es`` on one LightGBM thread (its fastest on small data: the cost peer)
``lgbm_tuned``      LightGBM tuned by Optuna's TPE sampler (``tuned_lgbm``): leaves, minimum leaf
                    size, learning rate, feature and bagging fractions, L2; every trial
                    ``lgbm_es``'s recipe (early-stopped on the validation queries' NDCG@10), the
                    best trial by it; trials start until ``budget_s`` (``extra``) wall seconds
                    have passed: tunemix's fit seconds on the same split (``trials_at_once``
                    in ``extra``: that many trials at once, each on ``n_jobs`` threads)
``tunemix_budget``  ``TuneMixRanker(n_jobs=2, time_budget_s=B)`` (``budget_s`` in ``extra``): the
                    default members, then the search of "tune, then mix" until the boosting end
                    (``tunemix.train.search``)
==================  ==============================================================================

Every peer uses every core (LightGBM and XGBoost threads, tunemix's two worker processes).
Run as a module, it is the child: ``python -m bench.fitproc SYSTEM DATA.npz OUT.npz [EXTRA]``.
``fit_s`` is the first fit of the child (imports inside the fit included; the process's start
and reading the data are not); with ``{"warm_fit": true}`` in ``EXTRA`` the child fits a second
time, the same way, and reports that fit's seconds as ``warm_fit_s`` (a fit inside a warm
process: a notebook's second fit, a retraining service).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from tunemix.core.data.dataset import RankingData

SYSTEMS = ("tunemix", "lgbm", "lgbm_es", "xgb", "lgbm_es1", "lgbm_tuned", "tunemix1", "tunemix_budget")
#: environment variables that cap native thread pools, removed from the child's environment
THREAD_CAPS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS")
#: the early-stopped LightGBM peer: at most this many trees at learning rate 0.05, patience 100
ES_TREES, ES_RATE, ES_PATIENCE = 2000, 0.05, 100


def _tree_rss_bytes(root: int) -> int:
    """Resident bytes of ``root`` and all its descendants (from /proc)."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/statm") as f:
                pages = int(f.read().split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
        rss[int(entry)] = pages * os.sysconf("SC_PAGE_SIZE")
    total, stack = 0, [root]
    while stack:
        pid = stack.pop()
        total += rss.get(pid, 0)
        stack.extend(children.get(pid, []))
    return total


def _save(path: Path, sets: dict[str, RankingData]) -> None:
    arrays = {}
    for name, d in sets.items():
        arrays[f"{name}_x"] = np.ascontiguousarray(d.features, dtype=np.float32)
        arrays[f"{name}_y"] = d.labels
        arrays[f"{name}_o"] = d.query_offsets
    np.savez(path, **arrays)


def warm_up() -> dict[str, Any]:
    """One tunemix fit, not measured, before the measured ones: numba compiles a fresh checkout's
    kernels on their first call and caches them on disk, so the first fit of a clean clone pays
    that once (at 30k documents it takes more than twice as long as every later fit).
    The data are synthetic and MSLR-shaped (about 20k documents of 136 features, 5 grades): the
    code paths of the measured fits, AdaBoost.MH's bandit search among them. Returns that fit's
    seconds and peak memory, for the record.

    Before it, ``tunemix warm`` (``python -m tunemix.cli warm``): what an install runs (``make
    serve``, ``.ci/run``). The synthetic fit alone leaves kernels uncompiled that a measured fit
    may need (AdaBoost.MH's for three grades, MQ2008's): without the warm-up they would compile
    inside MQ2008's first measured fold."""
    from bench.common import mslr_shaped_sets

    t0 = time.perf_counter()
    warm = subprocess.run([sys.executable, "-m", "tunemix.cli", "warm"], capture_output=True, text=True,
                          check=False)
    warm_s = time.perf_counter() - t0
    res = run_fit("tunemix", mslr_shaped_sets({"train": 166, "vali": 33, "test": 20}, seed=1))
    out = {k: res[k] for k in ("fit_s", "peak_mb", "error") if k in res}
    out["tunemix_warm_s"] = round(warm_s, 1)
    if warm.returncode != 0:
        out["tunemix_warm_error"] = warm.stderr[-2000:]
    return out


def run_fit(system: str, sets: dict[str, RankingData], *, timeout_s: float | None = None,
            extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Fit ``system`` on ``sets`` (train, vali, test) in a child process; fit seconds (inside the
    child: reading the arrays is not counted), peak tree memory in MB (sampled every 50 ms, the
    arrays' own bytes included, as a user's process holds them), the scores of vali and test, and
    whatever the child reports (``info``). ``timeout_s``: the child is stopped and the result
    says so."""
    with tempfile.TemporaryDirectory(prefix="tunemix-bench-") as tmp:
        data, out = Path(tmp) / "data.npz", Path(tmp) / "out.npz"
        _save(data, sets)
        # every system uses every core: a caller's thread caps (OMP_NUM_THREADS=1, as the test
        # suite sets) would leave the LightGBM and XGBoost peers on one thread
        env = {k: v for k, v in os.environ.items() if k not in THREAD_CAPS}
        env["PYTHONWARNINGS"] = "ignore"
        if system == "tunemix1":  # one core: numba's kernel threads too
            env["NUMBA_NUM_THREADS"] = "1"
        cmd = [sys.executable, "-m", "bench.fitproc", system, str(data), str(out), json.dumps(extra or {})]
        proc = subprocess.Popen(cmd, env=env, cwd=Path(__file__).resolve().parents[1])
        peak = 0
        stop = threading.Event()

        def sample() -> None:
            nonlocal peak
            while not stop.is_set():
                peak = max(peak, _tree_rss_bytes(proc.pid))
                stop.wait(0.05)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        t0 = time.perf_counter()
        try:
            rc = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            rc = None
        stop.set()
        sampler.join()
        wall = time.perf_counter() - t0
        result: dict[str, Any] = {"system": system, "peak_mb": round(peak / 2**20, 1), "wall_s": round(wall, 2)}
        if rc is None:
            return {**result, "error": f"stopped after {timeout_s:.0f} s"}
        if rc != 0 or not out.exists():
            return {**result, "error": f"exit code {rc}"}
        with np.load(out) as z:
            info = json.loads(str(z["info"]))
            result.update(info)
            result["scores"] = {k: np.array(z[k]) for k in ("vali", "test") if k in z}
        return result


def _load(path: str) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    with np.load(path) as z:
        return {name: (z[f"{name}_x"], z[f"{name}_y"], z[f"{name}_o"]) for name in ("train", "vali", "test")
                if f"{name}_x" in z}


def _fit_and_score(system: str, sets: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]],
                   extra: dict[str, Any]) -> tuple[float, dict[str, np.ndarray], dict[str, Any]]:
    x, y, o = sets["train"]
    xv, yv, ov = sets["vali"]
    g, gv = np.diff(o), np.diff(ov)
    info: dict[str, Any] = {}
    t0 = time.perf_counter()
    if system in ("tunemix", "tunemix1", "tunemix_budget"):
        import tunemix

        options = dict(extra)
        if system == "tunemix_budget":
            options["time_budget_s"] = float(options.pop("budget_s"))
        ranker = tunemix.TuneMixRanker(n_jobs=1 if system == "tunemix1" else 2, progress=False, **options)
        ranker.fit(x, y, group=g, eval_set=[(xv, yv)], eval_group=[gv])
        fit_s = time.perf_counter() - t0

        def predict(name: str) -> np.ndarray:
            xs, _, os_ = sets[name]
            return np.asarray(ranker.predict(xs, group=np.diff(os_)), dtype=np.float64)

        rec = ranker.record_
        info["members"] = [{"type": t["type"], "runs": t["runs"], "members": t["members"],
                            "weight_share": t["weight_share"]} for t in rec["member_types"]]
        info["served_members"] = rec["served"]["members"]
        info["timings"] = {k: round(v, 2) for k, v in rec["timings"].items()}
        info["runs"] = [{"tag": r["tag"], "view": r["view"], "iterations": r["iterations"],
                         "stop_reason": r["stop_reason"], "fit_s": round(r["fit_seconds"], 2)} for r in rec["runs"]]
        info["mixer"] = {k: rec["mixer"].get(k) for k in ("c", "omega_min", "rescale", "choice")}
        info["time_budget"] = {**rec.get("time_budget", {}),
                               "relevance_head": rec["relevance_head"].get("time_budget")}
        search = rec.get("search") or {}
        info["search"] = {k: search.get(k) for k in ("enabled", "summary", "weight_share", "seconds_per_iteration",
                                                     "left_at_start_s", "ended")}
        info["search"]["runs"] = [{k: r.get(k) for k in ("config", "iterations", "n_iterations_cap", "stop_reason",
                                                         "expected_s", "fit_seconds", "weight_share")}
                                  for r in search.get("runs", [])]
    elif system == "lgbm_tuned":
        model, info = tuned_lgbm(sets, float(extra["budget_s"]), int(extra.get("seed", 0)),
                                 int(extra.get("n_jobs", 1)), at_once=int(extra.get("trials_at_once", 1)))
        fit_s = time.perf_counter() - t0

        def predict(name: str) -> np.ndarray:
            return np.asarray(model.predict(sets[name][0], num_iteration=model.best_iteration_), dtype=np.float64)
    elif system in ("lgbm", "lgbm_es", "lgbm_es1"):
        import lightgbm as lgb

        if system == "lgbm":
            model = lgb.LGBMRanker(verbose=-1)
            model.fit(x, y, group=g)
        else:
            threads = {"n_jobs": 1} if system == "lgbm_es1" else {}
            model = lgb.LGBMRanker(n_estimators=ES_TREES, learning_rate=ES_RATE, verbose=-1, **threads)
            model.fit(x, y, group=g, eval_set=[(xv, yv)], eval_group=[gv], eval_at=[10],
                      callbacks=[lgb.early_stopping(ES_PATIENCE, verbose=False)])
            info["best_iteration"] = int(model.best_iteration_)
        fit_s = time.perf_counter() - t0

        def predict(name: str) -> np.ndarray:
            kw = {"num_iteration": model.best_iteration_} if system != "lgbm" else {}
            return np.asarray(model.predict(sets[name][0], **kw), dtype=np.float64)
    elif system == "xgb":
        import xgboost as xgb

        qid = np.repeat(np.arange(g.shape[0]), g)
        model = xgb.XGBRanker(tree_method="hist")
        model.fit(x, y, qid=qid)
        fit_s = time.perf_counter() - t0

        def predict(name: str) -> np.ndarray:
            return np.asarray(model.predict(sets[name][0]), dtype=np.float64)
    else:
        raise ValueError(f"unknown system {system!r}; expected one of {', '.join(SYSTEMS)}")
    return fit_s, {name: predict(name) for name in ("vali", "test") if name in sets}, info


def tuned_lgbm(sets: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]], budget_s: float, seed: int,
               n_jobs: int, clock: Callable[[], float] = time.perf_counter, at_once: int = 1
               ) -> tuple[Any, dict[str, Any]]:
    """LightGBM's ranker tuned by Optuna's TPE (seeded): trials of ``lgbm_es``'s recipe (at most
    ``ES_TREES`` trees, patience ``ES_PATIENCE`` on the validation queries' NDCG@10) with num_leaves
    7-255 (log), min_child_samples 5-200 (log), learning_rate 0.01-0.3 (log), colsample_bytree
    0.5-1, subsample 0.5-1 (every iteration), reg_lambda 1e-3-10 (log); a trial starts while less
    than ``budget_s`` seconds have passed (the last one may run past: the seconds reported are
    the whole search's; ``clock``: what is read for them). The model of the best trial by
    validation NDCG@10 and the search's record. ``at_once`` > 1: that many trials at once
    (Optuna's ``n_jobs``, threads; LightGBM releases the GIL), each LightGBM on ``n_jobs``
    threads: the peer of a tunemix fit that trains two runs at once on two threads."""
    import lightgbm as lgb
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    x, y, o = sets["train"]
    xv, yv, ov = sets["vali"]
    g, gv = np.diff(o), np.diff(ov)
    t0 = clock()
    best: dict[str, Any] = {}
    lock = threading.Lock()

    def objective(trial: Any) -> float:
        params = {"num_leaves": trial.suggest_int("num_leaves", 7, 255, log=True),
                  "min_child_samples": trial.suggest_int("min_child_samples", 5, 200, log=True),
                  "learning_rate": trial.suggest_float("learning_rate", 0.01, 0.3, log=True),
                  "colsample_bytree": trial.suggest_float("colsample_bytree", 0.5, 1.0),
                  "subsample": trial.suggest_float("subsample", 0.5, 1.0), "subsample_freq": 1,
                  "reg_lambda": trial.suggest_float("reg_lambda", 1e-3, 10.0, log=True)}
        model = lgb.LGBMRanker(n_estimators=ES_TREES, verbose=-1, n_jobs=n_jobs, random_state=seed, **params)
        model.fit(x, y, group=g, eval_set=[(xv, yv)], eval_group=[gv], eval_at=[10],
                  callbacks=[lgb.early_stopping(ES_PATIENCE, verbose=False)])
        score = float(model.best_score_["valid_0"]["ndcg@10"])
        with lock:
            if not best or score > best["score"]:
                best.update(score=score, model=model, params=params, trial=trial.number)
        return score

    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.TPESampler(seed=seed))
    while not best or clock() - t0 < budget_s:
        study.optimize(objective, n_trials=at_once, n_jobs=at_once)
    info = {"trials": len(study.trials), "values": [t.value for t in study.trials], "best_trial": best["trial"],
            "best_vali_ndcg@10": round(best["score"], 4),
            "best_params": best["params"], "budget_s": budget_s, "trials_at_once": at_once}
    return best["model"], info


def main(argv: list[str]) -> int:
    system, data, out = argv[0], argv[1], argv[2]
    extra = json.loads(argv[3]) if len(argv) > 3 else {}
    warm = bool(extra.pop("warm_fit", False))
    sets = _load(data)
    fit_s, scores, info = _fit_and_score(system, sets, extra)
    info["fit_s"] = round(fit_s, 3)
    if warm:  # the same fit again in this process: what a notebook or a retraining service waits for
        info["warm_fit_s"] = round(_fit_and_score(system, sets, extra)[0], 3)
    np.savez(out, info=np.array(json.dumps(info)), **scores)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
