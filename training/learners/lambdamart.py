"""LambdaMART (Burges, "From RankNet to LambdaRank to LambdaMART: an overview", MSR-TR-2010-82;
Wu, Burges, Svore and Gao 2010) trained with LightGBM's ``lambdarank`` objective.

One real score per document, f(x) = sum_t nu h_t(x), each tree fitted to the lambda gradients
lambda_i = sum_j |Delta NDCG_ij| (-sigma / (1 + exp(sigma (f_i - f_j)))) over the pairs of a
query with different labels. A member with K = 1 raw column. LightGBM is a training-only
dependency: :meth:`LambdaMART.to_forest` converts the trees (``training.learners.lightgbm_forest``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Self

import numpy as np
import numpy.typing as npt

from training.learners.lightgbm_forest import lightgbm_to_forest
from training.learners.mcrank import budget_callback, lightgbm_params, snapshot_list
from training.scoring.forest import FlatForest


class LambdaMART:
    """LambdaMART by LightGBM. Keyword-only parameters as :class:`~training.learners.mcrank.McRank`
    (without ``variant``)."""

    def __init__(self, *, n_leaves: int = 16, learning_rate: float = 0.1, n_iterations: int = 100,
                 checkpoints: list[int] | None = None, min_data_in_leaf: int = 20, n_bins: int = 255,
                 seed: int = 0, n_threads: int = 1, time_budget_s: float | None = None) -> None:
        self.n_leaves = n_leaves
        self.learning_rate = learning_rate
        self.n_iterations = n_iterations
        self.checkpoints = checkpoints
        self.min_data_in_leaf = min_data_in_leaf
        self.n_bins = n_bins
        self.seed = seed
        self.n_threads = n_threads
        self.time_budget_s = time_budget_s

    def fit(self, features: npt.ArrayLike, labels: npt.ArrayLike, query_offsets: npt.ArrayLike, *,
            on_iteration: Callable[[int], None] | None = None) -> Self:
        import lightgbm as lgb

        x = np.ascontiguousarray(features, dtype=np.float32)
        lab = np.asarray(labels, dtype=np.int64)
        sizes = np.diff(np.asarray(query_offsets, dtype=np.int64))
        params = lightgbm_params(objective="lambdarank", n_leaves=self.n_leaves, learning_rate=self.learning_rate,
                                 min_data_in_leaf=self.min_data_in_leaf, n_bins=self.n_bins, seed=self.seed,
                                 n_threads=self.n_threads)
        t0 = time.perf_counter()
        callbacks = budget_callback(self.time_budget_s, on_iteration)
        ds = lgb.Dataset(x, lab, group=sizes, params={"max_bin": params["max_bin"], "verbose": -1})
        self.booster_ = lgb.train(params, ds, num_boost_round=int(self.n_iterations), callbacks=callbacks)
        self.stop_reason_ = "time_budget" if callbacks[0].stopped else "n_iterations"
        self.n_features_in_ = x.shape[1]
        self.n_iterations_ = int(self.booster_.current_iteration())
        self.checkpoints_ = snapshot_list(self.checkpoints, self.n_iterations_)
        self.fit_time_s_ = time.perf_counter() - t0
        return self

    def to_forest(self) -> FlatForest:
        """The model as a one-output ``FlatForest``, one base per iteration."""
        if not hasattr(self, "booster_"):
            raise ValueError("LambdaMART is not fitted yet: call fit() first")
        return lightgbm_to_forest(self.booster_, n_features=self.n_features_in_)

    def decision_function(self, features: npt.ArrayLike, num_iteration: int | None = None) -> np.ndarray:
        """LightGBM's own raw scores, (n, 1)."""
        x = np.ascontiguousarray(features, dtype=np.float32)
        return np.asarray(self.booster_.predict(x, raw_score=True, num_iteration=num_iteration),
                          dtype=np.float64).reshape(-1, 1)
