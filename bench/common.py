"""Helpers shared by the benchmarks: machine description, JSON output, shared data location."""

from __future__ import annotations

import json
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
SHARED_DATA = Path(os.environ.get("TUNEMIX_SHARED_DATA", ROOT.parent / "shared" / "data"))


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
