"""Helpers shared by the benchmarks: machine description, JSON output, shared data location."""

from __future__ import annotations

import json
import os
import platform
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
    from training.data.synthetic import make_synthetic_splits

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


def write_result(name: str, payload: dict[str, Any]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    payload = {"benchmark": name, "machine": machine_info(), **payload}
    path.write_text(json.dumps(payload, indent=2, default=float) + "\n")
    return path


def ensure_model() -> Path:
    """The latest version of models/mq2008-fold1; trains it (about 5 min) when there is none."""
    from training.artifact.store import latest_version

    path = latest_version(MODELS_DIR, MODEL_NAME)
    if path is not None:
        return path
    tunemix = Path(sys.executable).parent / "tunemix"
    cmd = ([str(tunemix)] if tunemix.exists() else [sys.executable, "-m", "training.cli"]) + [
        "train", "--config", str(CONFIG), "--models-dir", str(MODELS_DIR)]
    print(f"no trained {MODEL_NAME} under {MODELS_DIR}: training it now, about 4-6 min: {' '.join(cmd)}",
          flush=True)
    subprocess.run(cmd, cwd=ROOT, check=True, timeout=3600)
    path = latest_version(MODELS_DIR, MODEL_NAME)
    if path is None:
        raise SystemExit(f"training finished but {MODELS_DIR / MODEL_NAME} holds no version")
    return path
