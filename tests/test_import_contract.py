"""The serving layers (``tunemix.core``, ``tunemix.service``) import only what scoring and evaluation
need: never the trainer, and none of the training-only dependencies."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

FORBIDDEN = ["scipy", "tqdm", "matplotlib", "dask", "distributed", "ray", "lightgbm", "ranx", "xgboost",
             "sklearn", "tunemix.train", "tunemix.cli", "tunemix.compile.warm"]


@pytest.mark.parametrize("folder", ["tunemix.core", "tunemix.service"])
def test_serving_folders_do_not_import_training_only_code(folder: str) -> None:
    """Every module of the folder, imported in a fresh process, adds none of the training-only
    modules (import-linter holds the same statically, in make lint)."""
    # numba itself imports scipy when scipy is installed; only what the modules add counts.
    code = (
        "import importlib, pkgutil, sys\n"
        "import numpy, numba\n"
        "before = set(sys.modules)\n"
        f"package = importlib.import_module({folder!r})\n"
        f"names = [m.name for m in pkgutil.walk_packages(package.__path__, {folder!r} + '.')\n"
        "         if not m.name.endswith('__main__')]\n"
        "for name in names:\n"
        "    importlib.import_module(name)\n"
        "added = set(sys.modules) - before\n"
        f"bad = sorted(m for m in added if any(m == f or m.startswith(f + '.') for f in {FORBIDDEN!r}))\n"
        "print(len(names), ','.join(bad))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    count, bad = proc.stdout.strip().split(" ", 1) if " " in proc.stdout.strip() else (proc.stdout.strip(), "")
    assert int(count) >= 10, f"{folder} has only {count} modules: the walk found too little"
    assert bad == "", f"{folder} pulls in training-only modules: {bad}"


MODEL_WITH_EVERY_MEMBER_TYPE = """
name = "every"
[data.synthetic]
queries = [30, 12, 12]
docs_per_query = [4, 10]
features = 5
levels = 3
[members]
views = ["raw", "raw+std"]
label_groupings = ["original"]
calibrators = ["shift", "rbc:linear:gain"]
best_feature = true
[[members.adaboost]]
n_leaves = 3
n_iterations = 4
checkpoints = [4]
[[members.mcrank]]
variant = ["multiclass", "ordinal"]
n_leaves = 3
n_iterations = 4
min_data_in_leaf = 5
[[members.lambdamart]]
n_leaves = 3
n_iterations = 4
min_data_in_leaf = 5
[[members.svm]]
C = 1.0
[mixer]
name = "uniform"
compare = []
[run]
backend = "sequential"
report_plots = false
"""


def test_loading_and_scoring_every_member_type_imports_no_training_engine(tmp_path: Path) -> None:
    """A model with LightGBM (McRank, LambdaMART) and scikit-learn (SVM) members is loaded and
    scored in a fresh process without importing either, nor any learner."""
    pytest.importorskip("lightgbm")
    pytest.importorskip("sklearn")
    from tunemix.train.config import load_config
    from tunemix.train.train import train

    (tmp_path / "every.toml").write_text(MODEL_WITH_EVERY_MEMBER_TYPE)
    outcome = train(load_config(tmp_path / "every.toml", {"run.models_dir": str(tmp_path / "models")}),
                    progress=False)
    types = {r["type"] for r in outcome.record["runs"]}
    assert types == {"adaboost", "mcrank", "lambdamart", "svm", "best_feature"}
    served = {outcome.model.runs[m.run].learner.get("type", "adaboost") for m in outcome.model.members}
    assert served == types  # the uniform mixer keeps every member
    # numba loads scipy's BLAS/LAPACK bindings when it compiles the views' kernels, when scipy is
    # installed (the service image has none): only scipy is exempt here
    forbidden = [f for f in FORBIDDEN if f != "scipy"]
    code = (
        "import sys\n"
        "import numpy, numba\n"
        "before = set(sys.modules)\n"
        "from tunemix.core.scoring.ensemble_model import load_model\n"
        f"model, _ = load_model({str(outcome.path)!r})\n"
        "x = numpy.random.default_rng(0).normal(size=(7, 5)).astype('float32')\n"
        "s = model.score(x, [0, 3, 7])\n"
        "assert s.shape == (7,) and numpy.all(numpy.isfinite(s))\n"
        "added = set(sys.modules) - before\n"
        f"bad = sorted(m for m in added if any(m == f or m.startswith(f + '.') for f in {forbidden!r}))\n"
        "print(','.join(bad))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "", f"scoring pulls in training-only modules: {proc.stdout.strip()}"
