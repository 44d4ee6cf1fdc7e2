"""bench.fitproc's tuned LightGBM peer (Optuna TPE): its search stops starting trials at its
budget, keeps the best trial by validation NDCG@10, and that model is what predicts."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("optuna")
pytest.importorskip("lightgbm")


def _sets(seed: int = 0) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    from tunemix.train.data.synthetic import make_synthetic_splits

    data = make_synthetic_splits(n_queries={"train": 30, "vali": 10, "test": 10}, docs_per_query=(8, 16),
                                 n_features=5, n_levels=3, noise=0.3, seed=seed)
    return {k: (np.asarray(v.features, dtype=np.float32), v.labels, v.query_offsets) for k, v in data.items()}


def test_a_spent_budget_runs_one_trial_and_keeps_it() -> None:
    from bench.fitproc import tuned_lgbm

    model, info = tuned_lgbm(_sets(), budget_s=0.0, seed=0, n_jobs=1)
    # no time at all: the first trial still runs (a search needs one), none after it
    assert info["trials"] == 1 and info["best_trial"] == 0
    assert set(info["best_params"]) >= {"num_leaves", "min_child_samples", "learning_rate", "colsample_bytree",
                                        "subsample", "reg_lambda"}
    assert model.get_params()["num_leaves"] == info["best_params"]["num_leaves"]


def test_the_kept_trial_is_the_best_on_validation() -> None:
    from bench.fitproc import tuned_lgbm

    # a fake clock read once at the start and once after each trial: it passes the budget after
    # the fourth, so the search runs exactly four trials
    ticks = iter([0.0, 1.0, 2.0, 3.0, 100.0])
    _, info = tuned_lgbm(_sets(1), budget_s=10.0, seed=0, n_jobs=1, clock=lambda: next(ticks))
    values = info["values"]
    assert info["trials"] == len(values) == 4 and len(set(values)) > 1  # the trials differ
    assert info["best_trial"] == int(np.argmax(values)) and info["best_vali_ndcg@10"] == round(max(values), 4)


def test_two_trials_at_once() -> None:
    from bench.fitproc import tuned_lgbm

    # no time at all: the first two trials run together (the peer of tunemix's two threads)
    model, info = tuned_lgbm(_sets(2), budget_s=0.0, seed=0, n_jobs=1, at_once=2)
    assert info["trials"] == 2 and info["trials_at_once"] == 2
    assert info["best_trial"] == int(np.argmax(info["values"]))
    assert model.get_params()["num_leaves"] == info["best_params"]["num_leaves"]
