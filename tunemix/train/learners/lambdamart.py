"""LambdaMART (Burges, "From RankNet to LambdaRank to LambdaMART: an overview", MSR-TR-2010-82;
Wu, Burges, Svore and Gao 2010) trained with LightGBM's ``lambdarank`` objective.

One real score per document, f(x) = sum_t nu h_t(x), each tree fitted to the lambda gradients
lambda_i = sum_j |Delta NDCG_ij| (-sigma / (1 + exp(sigma (f_i - f_j)))) over the pairs of a
query with different labels. A member with K = 1 raw column. LightGBM is a training-only
dependency: :meth:`LambdaMART.to_forest` converts the trees (``tunemix.train.learners.lightgbm_forest``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Self

import numpy as np
import numpy.typing as npt

from tunemix.core.scoring.forest import FlatForest
from tunemix.train.data.binned import BinnedView
from tunemix.train.learners import lightgbm_capi as capi
from tunemix.train.learners.lightgbm_data import model_input, train_booster
from tunemix.train.learners.lightgbm_forest import lightgbm_to_forest
from tunemix.train.learners.mcrank import IterationBudget, lightgbm_params, sampling_params, snapshot_list


class LambdaMART:
    """LambdaMART by LightGBM. Keyword-only parameters as :class:`~tunemix.train.learners.mcrank.McRank`
    (without ``variant``), early stopping on an eval set's NDCG@10 (:meth:`fit`)."""

    def __init__(self, *, n_leaves: int = 16, learning_rate: float = 0.1, n_iterations: int = 100,
                 checkpoints: list[int] | None = None, min_data_in_leaf: int = 20, n_bins: int = 255,
                 seed: int = 0, n_threads: int = 1, time_budget_s: float | None = None,
                 feature_fraction: float = 1.0, bagging_fraction: float = 1.0, lambda_l2: float = 0.0) -> None:
        self.n_leaves = n_leaves
        self.learning_rate = learning_rate
        self.n_iterations = n_iterations
        self.checkpoints = checkpoints
        self.min_data_in_leaf = min_data_in_leaf
        self.n_bins = n_bins
        self.seed = seed
        self.n_threads = n_threads
        self.time_budget_s = time_budget_s
        self.feature_fraction = feature_fraction
        self.bagging_fraction = bagging_fraction
        self.lambda_l2 = lambda_l2

    def fit(self, features: npt.ArrayLike, labels: npt.ArrayLike, query_offsets: npt.ArrayLike, *,
            on_iteration: Callable[[int], None] | None = None,
            eval_set: tuple[npt.ArrayLike, npt.ArrayLike, npt.ArrayLike] | None = None,
            early_stopping_rounds: int = 50) -> Self:
        """Train on one query's documents after another (``query_offsets``: n_queries + 1 row
        offsets); ``features`` are floats (n, d) or the shared codes (a ``BinnedView``, whose
        bins the eval set's codes must share). With ``eval_set`` (features, labels, query offsets)
        training stops once the eval queries' NDCG@10 (LightGBM's, gains 2^l - 1; a query
        without relevant documents counts 1, as the yahoo convention) has not improved for
        ``early_stopping_rounds`` iterations; the trees up to the best iteration
        (``best_iteration_``, its NDCG ``best_score_``) are kept."""
        x = features if isinstance(features, BinnedView) else np.ascontiguousarray(features, dtype=np.float32)
        lab = np.asarray(labels, dtype=np.int64)
        sizes = np.diff(np.asarray(query_offsets, dtype=np.int64))
        extra = sampling_params(self.feature_fraction, self.bagging_fraction)
        if self.lambda_l2 < 0:
            raise ValueError(f"lambda_l2 must be >= 0, got {self.lambda_l2}")
        if self.lambda_l2 > 0:  # L2 on the leaf values (LightGBM's lambda_l2); 0: LightGBM's default
            extra["lambda_l2"] = float(self.lambda_l2)
        params = lightgbm_params(objective="lambdarank", n_leaves=self.n_leaves, learning_rate=self.learning_rate,
                                 min_data_in_leaf=self.min_data_in_leaf, n_bins=self.n_bins, seed=self.seed,
                                 n_threads=self.n_threads, **extra)
        t0 = time.perf_counter()
        stop = IterationBudget(self.time_budget_s, on_iteration)
        evaluation = None
        if eval_set is not None:
            params = {**params, "metric": "ndcg", "eval_at": [10]}
            evaluation = (eval_set[0], np.asarray(eval_set[1], dtype=np.int64),
                          np.diff(np.asarray(eval_set[2], dtype=np.int64)))
        run = train_booster(x, lab, params, int(self.n_iterations), group=sizes, eval_set=evaluation,
                            patience=early_stopping_rounds, after_iteration=stop)
        self.model_ = run.model
        self.stop_reason_ = run.stop_reason(self.n_iterations)
        self.iterations_trained_ = run.trained
        self.best_iteration_: int | None = run.kept if eval_set is not None else None
        self.best_score_: float | None = run.best_score if eval_set is not None else None
        self.n_features_in_ = x.width if isinstance(x, BinnedView) else x.shape[1]
        self.bins_ = x.bins if isinstance(x, BinnedView) else None
        self.n_iterations_ = self.best_iteration_ or run.kept
        self.checkpoints_ = snapshot_list(self.checkpoints, self.n_iterations_)
        self.fit_time_s_ = time.perf_counter() - t0
        return self

    def to_forest(self) -> FlatForest:
        """The model as a one-output ``FlatForest``, one base per iteration."""
        if not hasattr(self, "model_"):
            raise ValueError("LambdaMART is not fitted yet: call fit() first")
        dump = capi.Booster.from_string(self.model_).dump()
        forest = lightgbm_to_forest(dump, n_features=self.n_features_in_, bins=self.bins_)
        return forest if self.best_iteration_ is None else forest.truncate(self.best_iteration_)

    def decision_function(self, features: npt.ArrayLike, num_iteration: int | None = None) -> np.ndarray:
        """LightGBM's own raw scores, (n, 1) (of the codes of ``features`` when trained on codes)."""
        x = model_input(features, self.bins_)
        return capi.Booster.from_string(self.model_).predict_raw(x, num_iteration or 0).reshape(-1, 1)
