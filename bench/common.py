"""Helpers shared by the benchmarks: machine description, JSON output, shared data location."""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
SHARED_DATA = Path(os.environ.get("TUNEMIX_SHARED_DATA", ROOT.parent / "shared" / "data"))
#: The MQ2008 Fold1 ensemble the scoring and service benchmarks measure (trained when absent).
MODEL_NAME = "mq2008-fold1"
MODELS_DIR = ROOT / "models"
CONFIG = ROOT / "configs" / "mq2008.toml"
#: The MSLR-WEB10K sample (136 features, grades 0..4): 5,000 lines of Fold1 train and of test.
MSLR = SHARED_DATA / "MSLR-WEB10K-sample"
MSLR_TRAIN, MSLR_TEST = MSLR / "msn1.fold1.train.5k.txt", MSLR / "msn1.fold1.test.5k.txt"


def git(*args: str) -> str | None:
    """``git args`` in the repository, its output stripped (None when git cannot run)."""
    try:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None


def mslr_shaped_sets(n_queries: dict[str, int], seed: int = 0) -> Any:
    """Synthetic MSLR-shaped train / vali / test sets (McRank's cubic polynomials, 136 features,
    5 grades, 60 to 180 documents a query): the data of bench.scale, bench.defaults' synthetic
    split and the fit benchmarks' warm-up."""
    from tunemix.train.data.synthetic import make_synthetic_splits

    return make_synthetic_splits(n_queries=n_queries, docs_per_query=(60, 180), n_features=136, n_levels=5,
                                 noise=0.3, seed=seed)


def machine_info() -> dict[str, Any]:
    import numba
    import numpy

    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "numpy": numpy.__version__,
        "numba": numba.__version__,
        "numba_threads": numba.get_num_threads(),
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def machine_probe_ms() -> float:
    """Median of 5 timings of a fixed pure-Python loop (two million additions): the machine's
    phase, recorded around measured runs. These shared machines drift by up to about 2x within
    an hour (65 against 150 ms seen the same day); a figure is read against its probe."""
    def loop() -> int:
        s = 0
        for i in range(2_000_000):
            s += i
        return s

    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        loop()
        times.append((time.perf_counter() - t0) * 1e3)
    return round(sorted(times)[2], 1)


def best_of(fn: Callable[[], Any], repeat: int = 5) -> float:
    """Smallest wall time of ``repeat`` calls (the least noisy estimate on a shared machine)."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def median_ms(fn: Callable[[], Any], repeat: int, warm: int = 3) -> float:
    """Median wall milliseconds of ``repeat`` calls of ``fn`` after ``warm`` unmeasured ones."""
    for _ in range(warm):
        fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return round(statistics.median(times) * 1e3, 4)


def write_result(name: str, payload: dict[str, Any]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    payload = {"benchmark": name, "machine": machine_info(), **payload}
    path.write_text(json.dumps(payload, indent=2, default=float) + "\n")
    return path


def ensure_model() -> Path:
    """The latest version of models/mq2008-fold1; trains it (about 5 min) when there is none."""
    from tunemix.core.artifact import latest_version

    path = latest_version(MODELS_DIR, MODEL_NAME)
    if path is not None:
        return path
    tunemix = Path(sys.executable).parent / "tunemix"
    cmd = ([str(tunemix)] if tunemix.exists() else [sys.executable, "-m", "tunemix.cli"]) + [
        "train", "--config", str(CONFIG), "--models-dir", str(MODELS_DIR)]
    print(f"no trained {MODEL_NAME} under {MODELS_DIR}: training it now, about 4-6 min: {' '.join(cmd)}",
          flush=True)
    subprocess.run(cmd, cwd=ROOT, check=True, timeout=3600)
    path = latest_version(MODELS_DIR, MODEL_NAME)
    if path is None:
        raise SystemExit(f"training finished but {MODELS_DIR / MODEL_NAME} holds no version")
    return path


def mslr_default_model(models_dir: Path, name: str, *, reuse: bool = False) -> Path:
    """``TuneMixRanker()``'s defaults (one job, so as not to crowd the shared cores) trained on the
    MSLR sample's train file and saved as the next version of ``models_dir/name`` (about a minute);
    with ``reuse``, the latest version already there, if any."""
    from tunemix.core.artifact import latest_version

    if reuse and (path := latest_version(models_dir, name)) is not None:
        return path
    import numpy as np

    import tunemix
    from tunemix.core.data.svmlight import read_svmlight

    train = read_svmlight(MSLR_TRAIN, n_features=136)
    ranker = tunemix.TuneMixRanker(n_jobs=1, progress=False).fit(train.features, train.labels,
                                                                  np.diff(train.query_offsets))
    return ranker.save(models_dir, name)


def early_stopped_lightgbm(train: Any, vali: Any, threads: int = 1) -> tuple[Any, dict[str, Any]]:
    """LightGBM's lambdarank (learning rate 0.05, 31 leaves, 20 documents a leaf) on ``train``,
    stopped early on NDCG@10 of ``vali`` (50 rounds' patience, at most 2,000): the booster and
    what it is (parameters, trees, training seconds)."""
    import lightgbm as lgb
    import numpy as np

    t0 = time.perf_counter()
    ds = lgb.Dataset(train.features, train.labels, group=np.diff(train.query_offsets))
    dv = lgb.Dataset(vali.features, vali.labels, group=np.diff(vali.query_offsets), reference=ds)
    params = {"objective": "lambdarank", "learning_rate": 0.05, "num_leaves": 31, "min_data_in_leaf": 20,
              "num_threads": threads, "verbose": -1, "seed": 0, "metric": "ndcg", "eval_at": [10]}
    booster = lgb.train(params, ds, num_boost_round=2000, valid_sets=[dv],
                        callbacks=[lgb.early_stopping(50, verbose=False)])
    return booster, {"objective": "lambdarank", "num_leaves": 31, "learning_rate": 0.05, "early_stopping_rounds": 50,
                     "n_trees": booster.num_trees(), "train_s": round(time.perf_counter() - t0, 1),
                     "lightgbm": lgb.__version__}
