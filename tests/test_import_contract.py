"""The serving path imports only what scoring and evaluation need (docs/architecture.md):
never the learners, and none of the training-only dependencies."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SERVING_MODULES = [
    "training.data.dataset",
    "training.data.normalization",
    "training.data.svmlight",
    "training.evaluation",
    "training.scoring",
    "training.calibration",
    "training.calibration.expected_relevance",
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
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if proc.returncode != 0 and "No module named" in proc.stderr and module.split(".")[-1] in proc.stderr:
        pytest.fail(f"{module} is missing: {proc.stderr.strip().splitlines()[-1]}")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "", f"{module} pulls in training-only modules: {proc.stdout.strip()}"

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
    from training.pipeline.config import load_config
    from training.pipeline.train import train

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
        "from training.scoring.ensemble_model import load_model\n"
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
