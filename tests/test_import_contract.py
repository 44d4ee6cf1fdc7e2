"""The serving path imports only what scoring and evaluation need (docs/architecture.md):
never the learners, and none of the training-only dependencies."""

from __future__ import annotations

import subprocess
import sys

import pytest

SERVING_MODULES = [
    "training.data.dataset",
    "training.data.normalization",
    "training.data.svmlight",
    "training.evaluation",
    "training.scoring",
    "training.calibration",
    "training.ensemble",
    "training.artifact",
]
FORBIDDEN = ["scipy", "tqdm", "matplotlib", "dask", "distributed", "ray", "lightgbm", "ranx", "xgboost",
             "sklearn", "training.learners"]


@pytest.mark.parametrize("module", SERVING_MODULES)
def test_serving_module_does_not_import_training_only_code(module: str) -> None:
    # numba itself imports scipy when scipy is installed; only what the module adds counts.
    code = (
        "import importlib, sys\n"
        "import numpy, numba\n"
        "before = set(sys.modules)\n"
        f"importlib.import_module({module!r})\n"
        "added = set(sys.modules) - before\n"
        f"bad = sorted(m for m in added if any(m == f or m.startswith(f + '.') for f in {FORBIDDEN!r}))\n"
        "print(','.join(bad))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    if proc.returncode != 0 and "No module named" in proc.stderr and module.split(".")[-1] in proc.stderr:
        pytest.fail(f"{module} is missing: {proc.stderr.strip().splitlines()[-1]}")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "", f"{module} pulls in training-only modules: {proc.stdout.strip()}"
