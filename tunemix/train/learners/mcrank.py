"""McRank: ranking by multi-class gradient-boosted trees (Li, Burges and Wu, "McRank: learning to
rank using multiple classification and gradient boosting", NIPS 2007), trained with LightGBM.

Two variants (method section 3.3):

- ``multiclass``: Friedman's multi-class gradient boosting (Friedman 2001, Alg. 6): K additive
  scores F_k, each iteration adds one regression tree of ``n_leaves`` leaves per class with
  shrinkage nu; P(k | x) = exp(F_k(x)) / sum_j exp(F_j(x)) (LightGBM ``objective="multiclass"``).
  The raw K-vector is (F_0, ..., F_{K-1}).
- ``ordinal``: K-1 binary boosted models, model k for the event l <= k:
  P(l <= k | x) = 1 / (1 + exp(-G_k(x))) (LightGBM ``objective="binary"``), class probabilities
  by differences P(k) = P(l <= k) - P(l <= k-1) with P(l <= -1) = 0 and P(l <= K-1) = 1, clipped
  at 0 and renormalised where the cumulative models cross
  (:func:`tunemix.core.calibration.expected_relevance.ordinal_probabilities`). The raw vector has
  K-1 columns (G_0, ..., G_{K-2}).

McRank's score is the expected relevance sum_k P(k | x) T(k) with T(k) = k (the paper's choice)
or T(k) = 2^k - 1 (the ``er:*`` calibrators); the raw vectors also go through every other
calibrator like any multi-class member's.

LightGBM is a training-only dependency: :meth:`McRank.to_forest` converts the trees
(``tunemix.train.learners.lightgbm_forest``) so that serving scores them with our kernel. The forest
holds K (multiclass) or K-1 (ordinal) trees per iteration, iteration-major, so snapshot t is the
running sum after ``t * n_outputs_`` bases.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Self

import numpy as np
import numpy.typing as npt

from tunemix.core.scoring.forest import FlatForest
from tunemix.train.data.binned import BinnedView
from tunemix.train.learners import lightgbm_capi as capi
from tunemix.train.learners.label_groups import LabelGrouping, identity_grouping
from tunemix.train.learners.lightgbm_data import model_input, train_booster
from tunemix.train.learners.lightgbm_forest import lightgbm_to_forest

VARIANTS = ("multiclass", "ordinal")


def lightgbm_params(*, objective: str, n_leaves: int, learning_rate: float, min_data_in_leaf: int, n_bins: int,
                    seed: int, n_threads: int, **extra: Any) -> dict[str, Any]:
    """LightGBM parameters shared by the McRank and LambdaMART members: deterministic, quiet,
    no zero-as-missing (every split converts exactly into a ``FlatForest``)."""
    return {"objective": objective, "num_leaves": int(n_leaves), "learning_rate": float(learning_rate),
            "min_data_in_leaf": int(min_data_in_leaf), "max_bin": int(n_bins), "seed": int(seed),
            "num_threads": int(n_threads), "deterministic": True, "force_row_wise": True, "verbose": -1,
            "zero_as_missing": False, **extra}


def sampling_params(feature_fraction: float, bagging_fraction: float) -> dict[str, Any]:
    """LightGBM's column and row subsampling (each tree sees ``feature_fraction`` of the features,
    each iteration ``bagging_fraction`` of the documents, drawn with the model's seed); nothing when
    both are 1."""
    if not (0.0 < feature_fraction <= 1.0 and 0.0 < bagging_fraction <= 1.0):
        raise ValueError("feature_fraction and bagging_fraction must be in (0, 1]")
    out: dict[str, Any] = {}
    if feature_fraction < 1.0:
        out["feature_fraction"] = float(feature_fraction)
    if bagging_fraction < 1.0:
        out.update(bagging_fraction=float(bagging_fraction), bagging_freq=1)
    return out


class IterationBudget:
    """Called after each iteration of a LightGBM run (``lightgbm_capi.train``'s ``after_iteration``):
    reports the iteration (``on_iteration``, 1-based) and says whether the run stops there, at the
    iteration that exceeds the budget (the trees so far are kept). The budget counts from the
    object's creation (before the run's Dataset is built: its construction is part of the run's
    time); ``clock`` is read for the time (a test's fake clock). ``stopped``: whether it stopped
    the run."""

    def __init__(self, time_budget_s: float | None, on_iteration: Callable[[int], None] | None,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.time_budget_s = time_budget_s
        self.on_iteration = on_iteration
        self.clock = clock
        self.t0 = clock()
        self.stopped = False

    def __call__(self, iteration: int) -> bool:
        if self.on_iteration is not None:
            self.on_iteration(iteration)
        if self.time_budget_s is not None and self.clock() - self.t0 >= self.time_budget_s:
            self.stopped = True
        return self.stopped


def snapshot_list(requested: list[int] | None, n_iterations: int) -> list[int]:
    """Requested checkpoints within 1..n_iterations, plus n_iterations, sorted."""
    ck = {int(c) for c in (requested or []) if 1 <= int(c) <= n_iterations}
    if n_iterations > 0:
        ck.add(n_iterations)
    return sorted(ck)


class McRank:
    """McRank by LightGBM (see the module docstring).

    Parameters (keyword-only, stored unchanged): ``variant`` (``"multiclass"`` or ``"ordinal"``),
    ``n_leaves`` (J), ``learning_rate`` (nu), ``n_iterations``, ``checkpoints`` (snapshot
    iteration counts), ``min_data_in_leaf``, ``n_bins`` (LightGBM's ``max_bin``), ``seed``,
    ``n_threads``, ``time_budget_s`` (stop after the iteration that exceeds it),
    ``feature_fraction`` and ``bagging_fraction`` (LightGBM's: each tree sees that share of the
    features, each iteration that share of the documents, drawn with ``seed``; 1.0: all).
    """

    def __init__(self, *, variant: str = "multiclass", n_leaves: int = 16, learning_rate: float = 0.1,
                 n_iterations: int = 100, checkpoints: list[int] | None = None, min_data_in_leaf: int = 20,
                 n_bins: int = 255, seed: int = 0, n_threads: int = 1, time_budget_s: float | None = None,
                 feature_fraction: float = 1.0, bagging_fraction: float = 1.0) -> None:
        self.variant = variant
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

    def fit(self, features: npt.ArrayLike, labels: npt.ArrayLike, *, label_grouping: LabelGrouping | None = None,
            on_iteration: Callable[[int], None] | None = None,
            eval_set: tuple[npt.ArrayLike, npt.ArrayLike] | None = None, early_stopping_rounds: int = 50,
            group: npt.ArrayLike | None = None, eval_group: npt.ArrayLike | None = None) -> Self:
        """Train on ``features`` (floats (n, d), or the shared codes: a ``BinnedView``, whose bins
        an eval set's codes must share) and ``labels``. With ``eval_set`` (features, labels; multiclass
        only) training stops once the eval set's log loss has not improved for
        ``early_stopping_rounds`` iterations; ``best_iteration_`` is the iteration of the lowest
        loss (``best_loss_``), the last one kept (``n_iterations_``; ``iterations_trained_``
        counts every iteration trained). ``group`` and ``eval_group`` (query sizes) do not enter
        the model: given, the Datasets carry them, so that LambdaMART runs of the same codes share
        them (``tunemix.train.learners.lightgbm_data.sharing_datasets``)."""
        if self.variant not in VARIANTS:
            raise ValueError(f"variant must be one of {VARIANTS}, got {self.variant!r}")
        if int(self.n_iterations) < 1:
            raise ValueError(f"n_iterations must be at least 1, got {self.n_iterations}")
        x = features if isinstance(features, BinnedView) else np.ascontiguousarray(features, dtype=np.float32)
        lab = np.asarray(labels, dtype=np.int64)
        grouping = label_grouping or identity_grouping(max(int(lab.max()) + 1, 2))
        y = grouping.apply(lab)
        k = grouping.n_classes
        common: dict[str, Any] = dict(n_leaves=self.n_leaves, learning_rate=self.learning_rate,
                                      min_data_in_leaf=self.min_data_in_leaf, n_bins=self.n_bins, seed=self.seed,
                                      n_threads=self.n_threads)
        common.update(sampling_params(self.feature_fraction, self.bagging_fraction))
        t0 = time.perf_counter()
        if self.variant == "multiclass":
            targets = [y]
            params = [lightgbm_params(objective="multiclass", num_class=k, **common)]
        else:
            targets = [(y <= c).astype(np.float64) for c in range(k - 1)]
            params = [lightgbm_params(objective="binary", **common) for _ in range(k - 1)]
        if eval_set is not None and self.variant != "multiclass":
            raise ValueError("early stopping on an eval set needs the multiclass variant")
        budget = None if self.time_budget_s is None else self.time_budget_s / len(targets)
        self.best_iteration_: int | None = None
        self.best_loss_: float | None = None
        self.iterations_trained_: int | None = None
        evaluation = None
        if eval_set is not None:  # multiclass only: one run, stopped on the log loss
            params = [{**params[0], "metric": "multi_logloss"}]
            evaluation = (eval_set[0], grouping.apply(np.asarray(eval_set[1], dtype=np.int64)), eval_group)
        runs = [train_booster(x, target, p, int(self.n_iterations), group=group, eval_set=evaluation,
                              patience=early_stopping_rounds,
                              after_iteration=IterationBudget(budget, on_iteration if len(targets) == 1 else None))
                for target, p in zip(targets, params, strict=True)]
        self.models_: list[str] = [run.model for run in runs]
        reasons = [run.stop_reason(self.n_iterations) for run in runs]
        self.stop_reason_ = "time_budget" if "time_budget" in reasons else reasons[-1]
        if eval_set is not None:  # the trees up to the best iteration are kept
            self.best_iteration_, self.best_loss_ = runs[0].kept, runs[0].best_score
            self.iterations_trained_ = runs[0].trained
        if on_iteration is not None and len(targets) > 1:
            on_iteration(int(self.n_iterations))
        self.n_features_in_ = x.width if isinstance(x, BinnedView) else x.shape[1]
        self.bins_ = x.bins if isinstance(x, BinnedView) else None
        self.n_classes_ = k
        self.n_outputs_ = k if self.variant == "multiclass" else k - 1
        self.label_grouping_ = grouping
        self.class_gains_ = grouping.class_gains(lab)
        self.n_iterations_ = max(run.kept for run in runs)
        self.checkpoints_ = snapshot_list(self.checkpoints, self.n_iterations_)
        self.fit_time_s_ = time.perf_counter() - t0
        return self

    def _dump(self) -> dict[str, Any]:
        """One LightGBM dump of every booster's trees, iteration-major (a booster that stopped
        early is padded with constant-zero trees), ``num_tree_per_iteration = n_outputs_``."""
        if not hasattr(self, "models_"):
            raise ValueError("McRank is not fitted yet: call fit() first")
        dumps = [capi.Booster.from_string(m).dump() for m in self.models_]
        if len(dumps) == 1:
            return dumps[0]
        zero = {"tree_structure": {"leaf_value": 0.0}}
        trees = []
        for i in range(self.n_iterations_):
            for dump in dumps:
                trees.append(dump["tree_info"][i] if i < len(dump["tree_info"]) else zero)
        return {"num_tree_per_iteration": len(dumps), "tree_info": trees, "max_feature_idx": self.n_features_in_ - 1}

    def to_forest(self) -> FlatForest:
        """The model as a ``FlatForest`` with ``n_outputs_`` outputs and ``n_outputs_`` bases per
        iteration (after early stopping: up to ``best_iteration_``)."""
        forest = lightgbm_to_forest(self._dump(), n_features=self.n_features_in_, bins=self.bins_)
        if self.best_iteration_ is not None:
            forest = forest.truncate(self.best_iteration_ * self.n_outputs_)
        return forest

    def decision_function(self, features: npt.ArrayLike, num_iteration: int | None = None) -> np.ndarray:
        """LightGBM's own raw scores, (n, n_outputs_) (the reference the forest must reproduce); a
        model trained on codes scores the codes of ``features``."""
        x = model_input(features, self.bins_)
        cols = [capi.Booster.from_string(m).predict_raw(x, num_iteration or 0) for m in self.models_]
        return np.ascontiguousarray(cols[0] if len(cols) == 1 else np.column_stack([c[:, 0] for c in cols]))
