"""The dask path of `tunemix train`: a local distributed cluster runs the jobs."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("distributed")

from tests.conftest import tiny_config
from tunemix.train.config import load_config
from tunemix.train.train import train


def test_train_on_a_local_dask_cluster(tmp_path: Path) -> None:
    cfg_path = tiny_config(tmp_path, {"name": "dasky", "members.label_groupings": ["original", "binary"],
                                      "mixer.compare": [], "run.backend": "dask", "run.n_jobs": 2})
    cfg = load_config(cfg_path, {"run.models_dir": str(tmp_path / "models")})
    outcome = train(cfg, progress=False)
    assert (outcome.path / "manifest.json").is_file()
    assert len(outcome.record["runs"]) == 2


def test_the_default_members_on_a_local_dask_cluster_train_the_threads_model() -> None:
    """The default (a config naming only its data) on a LocalCluster of two worker processes: the
    same model, bit for bit, as in threads of one process; every run that reads the same data
    gets the same array objects (joblib's dask backend scatters an argument array once, by
    identity, so each worker receives the data once, not once per task)."""
    pytest.importorskip("lightgbm")
    from tests.pipeline.test_auto_members import DATA_ONLY
    from tunemix.train.config import SyntheticData
    from tunemix.train.members.types import run_specs
    from tunemix.train.train import _Clock, prepare, run_inputs

    scores = []
    sets = SyntheticData(**DATA_ONLY["data"]["synthetic"]).make()
    for backend in ("dask", "threads"):
        tables = {**DATA_ONLY, "run": {**DATA_ONLY["run"], "backend": backend, "n_jobs": 2}}
        out = train(load_config(None, tables=tables), progress=False, save=False)
        scores.append(out.model.score(sets["test"].features, sets["test"].query_offsets))
    assert scores[0].shape == (sets["test"].n_docs,)
    assert (scores[0] == scores[1]).all()
    cfg = load_config(None, tables={**DATA_ONLY, "members": out.record["config"]["members"]})
    specs = run_specs(cfg)
    prep = prepare(cfg, _Clock(), specs, sets)
    inputs = {s.tag: run_inputs(prep, s) for s in specs}
    lm = [v for k, v in inputs.items() if "lambdamart" in k]
    mc = next(v for k, v in inputs.items() if "mcrank" in k)
    assert lm[0][0] is mc[0] and lm[0][1] is lm[1][1] is mc[1] and lm[0][4] is mc[4]  # one object per array
    # the runs read the shared codes, which look as large as they are (joblib scatters large arguments)
    from dask.sizeof import sizeof

    from tunemix.train.data.binned import BinnedView

    assert isinstance(mc[0], BinnedView) and sizeof(mc[0]) > mc[0].codes.nbytes > 1e3
