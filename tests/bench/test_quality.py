"""The quality benchmark's own logic (bench/quality.py): the T sets match the pipeline's, the
query subsample, the choice reads validation only, a mix of cached members equals the
forecaster fitted directly."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from bench import quality as q
from tunemix.core.ensemble import ExponentialForecaster
from tunemix.core.evaluation import mean_metric
from tunemix.train.data.synthetic import make_synthetic_splits
from tunemix.train.mixing import snapshot_sets


def _meta_and_runs():
    """Two boosted runs (snapshots 10/30/100 and 10/30) and one single-snapshot run."""
    runs = [SimpleNamespace(snapshot_iterations=[10, 30, 100], checkpoints=[10, 30, 100]),
            SimpleNamespace(snapshot_iterations=[10, 30], checkpoints=[10, 30]),
            SimpleNamespace(snapshot_iterations=[1], checkpoints=[0])]
    members, meta = [], []
    for r, run in enumerate(runs):
        for t, c in zip(run.snapshot_iterations, run.checkpoints, strict=True):
            for cal in ("a", "b"):
                members.append(SimpleNamespace(run=r, iterations=c))
                meta.append({"run": r, "T": t, "n_snapshots": len(run.snapshot_iterations), "calibrator": cal})
    return runs, members, meta


def test_snapshot_masks_match_the_pipeline():
    runs, members, meta = _meta_and_runs()
    ours = q._snapshot_masks(meta)
    theirs = snapshot_sets(runs, members)  # type: ignore[arg-type]
    assert [t for t, _ in ours] == [t for t, _ in theirs] == [10, 30, 100]
    for (_, a), (_, b) in zip(ours, theirs, strict=True):
        np.testing.assert_array_equal(a, b)
    at100 = dict(ours)[100]
    # run 0 at 100, run 1 at its last (30), the single-snapshot run always
    assert [m["T"] for m, keep in zip(meta, at100, strict=True) if keep] == [100, 100, 30, 30, 1, 1]


def test_subsample_queries_is_seeded_and_whole_queries():
    data = make_synthetic_splits(n_queries={"train": 30, "vali": 5}, docs_per_query=(3, 8), n_features=4,
                                 n_levels=3, seed=1)["train"]
    a = q.subsample_queries(data, 12, seed=3)
    b = q.subsample_queries(data, 12, seed=3)
    assert a.n_queries == 12
    np.testing.assert_array_equal(a.features, b.features)
    assert q.subsample_queries(data, 100, seed=3) is data
    # every kept query is one of the original queries, whole
    sizes = set(np.diff(data.query_offsets).tolist())
    assert set(np.diff(a.query_offsets).tolist()) <= sizes


def test_choose_reads_validation_only():
    cells = [[{"views": "raw", "snapshots": "all", "tune_on": "validation", "vali": 0.70, "test_ndcg@10": 0.99},
              {"views": "all", "snapshots": "tune", "tune_on": "validation", "vali": 0.72, "test_ndcg@10": 0.10}],
             [{"views": "raw", "snapshots": "all", "tune_on": "validation", "vali": 0.71, "test_ndcg@10": 0.99},
              {"views": "all", "snapshots": "tune", "tune_on": "validation", "vali": 0.70, "test_ndcg@10": 0.10}]]
    chosen = q.choose(cells)
    assert (chosen["views"], chosen["snapshots"]) == ("all", "tune")
    assert chosen["vali_mean"] == pytest.approx(0.71)


def test_mix_of_a_cell_equals_the_forecaster_fitted_directly():
    rng = np.random.default_rng(0)
    splits = make_synthetic_splits(n_queries={"vali": 30, "test": 30, "cal": 10}, docs_per_query=(5, 12),
                                   n_features=3, n_levels=3, seed=2)
    arrays, meta = {}, []
    n_members = 6
    for split, data in splits.items():
        signal = data.labels[:, None] + rng.normal(0, 1.0, size=(data.n_docs, n_members)) * np.arange(1, n_members + 1)
        arrays[f"{split}_scores"] = np.ascontiguousarray(signal)
        arrays[f"{split}_labels"] = data.labels.astype(np.int64)
        arrays[f"{split}_offsets"] = data.query_offsets.astype(np.int64)
    for j in range(n_members):
        meta.append({"type": "adaboost", "view": "raw", "calibrator": "shift", "run": j, "T": 10, "n_snapshots": 1})
    cell = q.Cell(key="t", meta=meta, arrays=arrays, info={})
    got = q.mix(cell, lambda m: True)
    direct = ExponentialForecaster(rescale="zscore_query").fit(arrays["vali_scores"], arrays["vali_labels"],
                                                               arrays["vali_offsets"])
    np.testing.assert_allclose(got["test_scores"], direct.transform(arrays["test_scores"], arrays["test_offsets"]))
    assert got["vali"] == pytest.approx(mean_metric(arrays["vali_labels"],
                                                    direct.transform(arrays["vali_scores"], arrays["vali_offsets"]),
                                                    arrays["vali_offsets"], "ndcg@10", "yahoo"))
    # tuned on the calibration part: another fit, same members
    on_cal = q.mix(cell, lambda m: True, tune_on="calibration")
    direct_cal = ExponentialForecaster(rescale="zscore_query").fit(arrays["cal_scores"], arrays["cal_labels"],
                                                                   arrays["cal_offsets"])
    np.testing.assert_allclose(on_cal["test_scores"],
                               direct_cal.transform(arrays["test_scores"], arrays["test_offsets"]))
