"""The dask path of `tunemix train`: a local distributed cluster runs the jobs."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("distributed")

from training.pipeline.config import load_config
from training.pipeline.train import train


def test_train_on_a_local_dask_cluster(tmp_path: Path) -> None:
    cfg_path = tmp_path / "c.toml"
    cfg_path.write_text("""
name = "dasky"
[data.synthetic]
queries = [20, 10, 10]
docs_per_query = [4, 8]
features = 4
levels = 3
[members]
views = ["raw"]
label_groupings = ["original", "binary"]
calibrators = ["shift", "rbc:linear:gain"]
[[members.adaboost]]
base = "tree"
n_leaves = 3
n_iterations = 5
checkpoints = [5]
[mixer]
compare = []
[run]
backend = "dask"
n_jobs = 2
report_plots = false
""")
    cfg = load_config(cfg_path, {"run.models_dir": str(tmp_path / "models")})
    outcome = train(cfg, progress=False)
    assert (outcome.path / "manifest.json").is_file()
    assert len(outcome.record["runs"]) == 2
