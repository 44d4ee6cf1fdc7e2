"""McRank (multi-class and ordinal) and LambdaMART as member types, trained with LightGBM
(``tunemix.train.learners.mcrank``, ``tunemix.train.learners.lambdamart``) and served from their converted
trees in the one wide :class:`~tunemix.core.scoring.forest.FlatForest`.

- ``[[members.mcrank]]``: keys ``variant`` (``multiclass``, ``ordinal``), ``n_leaves``,
  ``learning_rate``, ``n_iterations``, ``checkpoints``, ``min_data_in_leaf``, ``n_bins``,
  ``seed``, ``feature_fraction``, ``bagging_fraction``; list values expand into a grid.
  Runs read the shared codes of their view (``tunemix.train.data.binned``: 255 bins, one LightGBM bin
  per code); a run that sets ``n_bins`` trains LightGBM on the floats with its own ``max_bin``.
  ``early_stopping = R``: stop once the validation queries' loss (McRank multiclass: log loss;
  LambdaMART: NDCG@10) has not improved for R iterations and keep the best iteration.
  ``fit_on = "train"``: train on the whole training set (fit and calibration parts) instead of
  the fit part; the run's snapshots then get only the calibrators that fit nothing
  (``identity``, ``er:*``), since the calibration part is not held out from it.
  Snapshots after t iterations are members (the forest holds n_outputs trees per iteration,
  so snapshot t is ``t * n_outputs`` bases). Calibrators:
  McRank's expected relevance (``er:<link>:linear`` and ``er:<link>:gain``, T(k) = k and
  2^k - 1) and the configured pool; an ordinal member's pool calibrators see its class
  probabilities (``ordinal+<spec>``). ``shift`` uses R = max |f| on the calibration part.
- ``[[members.lambdamart]]``: the same keys without ``variant``, and ``lambda_l2`` (L2 on the leaf
  values; 0, LightGBM's default, when absent); one real score f. Its raw vector
  is (f, 0, ..., 0), padded with zero columns to the number of labels, so that it goes through
  the regression calibrators of the pool (``rbc:*``: gains regressed on f; the zero columns are
  constant and drop out) as well as used as it is (``identity``, column 0; the forecaster's
  member rescaling puts it on the others' scale). It is trained on the original labels, so it
  runs once per view (label groupings do not apply).
"""

from __future__ import annotations

import time
from typing import Any, ClassVar

import numpy as np

from tunemix.core.scoring.forest import FlatForest
from tunemix.train.members.types import MemberType, RunResult, RunSpec, register
from tunemix.train.parallel import IterationReporter

BOOSTING_KEYS = frozenset({"n_leaves", "learning_rate", "n_iterations", "checkpoints", "min_data_in_leaf",
                           "n_bins", "seed", "feature_fraction", "bagging_fraction", "early_stopping", "fit_on"})
#: keys that steer the run in the pipeline, not the learner
PIPELINE_KEYS = frozenset({"early_stopping", "fit_on"})


def _reporter(progress_queue: Any) -> tuple[IterationReporter | None, Any]:
    if progress_queue is None:
        return None, None
    reporter = IterationReporter(progress_queue)

    class _Progress:
        iteration = 0

    state = _Progress()

    def on_iteration(i: int) -> None:
        state.iteration = i
        reporter(state)

    return reporter, on_iteration


def _params(spec: RunSpec, seed: int) -> dict[str, Any]:
    params = {k: v for k, v in spec.params.items() if k not in PIPELINE_KEYS}
    params.setdefault("seed", seed + spec.index)
    return params


def _stopping(spec: RunSpec, eval_set: Any) -> dict[str, Any]:
    """The learner's early-stopping arguments: the validation queries and the patience, when the
    run asks for it (``early_stopping`` > 0) and the pipeline passed them."""
    rounds = int(spec.params.get("early_stopping", 0))
    if rounds <= 0 or eval_set is None:
        return {}
    return {"eval_set": eval_set, "early_stopping_rounds": rounds}


@register
class McRankMember(MemberType):
    """``[[members.mcrank]]`` (module docstring)."""

    name: ClassVar[str] = "mcrank"
    keys: ClassVar[frozenset[str]] = BOOSTING_KEYS | {"variant"}
    default_iterations: ClassVar[int] = 100
    reads_codes: ClassVar[bool] = True

    def learner_tag(self, params: dict[str, Any]) -> str:
        variant = "ord" if params.get("variant", "multiclass") == "ordinal" else "mc"
        return f"mcrank-{variant}{params.get('n_leaves', 16)}-lr{params.get('learning_rate', 0.1):g}"

    def fit(self, spec: RunSpec, features: np.ndarray, labels: np.ndarray, query_offsets: np.ndarray,
            n_labels: int, seed: int, time_budget_s: float | None, progress_queue: Any = None,
            eval_set: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None) -> RunResult:
        from tunemix.train.learners.label_groups import get_grouping
        from tunemix.train.learners.mcrank import McRank

        reporter, on_iteration = _reporter(progress_queue)
        t0 = time.perf_counter()
        model = McRank(**_params(spec, seed), time_budget_s=time_budget_s)
        stopping = _stopping(spec, eval_set)
        if stopping:  # McRank stops on the eval set's log loss: features and labels (the query sizes
            # only go into its Dataset, shared with the LambdaMART runs of the view)
            stopping["eval_group"] = np.diff(np.asarray(stopping["eval_set"][2], dtype=np.int64))
            stopping["eval_set"] = stopping["eval_set"][:2]
        model.fit(features, labels, label_grouping=get_grouping(spec.grouping, n_labels), on_iteration=on_iteration,
                  group=np.diff(np.asarray(query_offsets, dtype=np.int64)), **stopping)
        if reporter is not None:
            reporter.flush(int(spec.params.get("n_iterations", model.n_iterations_)))
        forest = model.to_forest()
        per = model.n_outputs_
        return RunResult(
            spec=spec, n_outputs=per, n_classes=int(model.n_classes_),
            class_gains=np.asarray(model.class_gains_, dtype=np.float64),
            checkpoints=[t * per for t in model.checkpoints_], snapshot_iterations=list(model.checkpoints_),
            shift_scales=[None] * len(model.checkpoints_), n_iterations=int(model.n_iterations_),
            n_bases=forest.n_base, stop_reason=model.stop_reason_, fit_seconds=time.perf_counter() - t0,
            train_error=float("nan"), forest=forest.to_arrays(), validation_loss=model.best_loss_,
        )

    def calibrators(self, configured: list[str], result: RunResult) -> list[str]:
        ordinal = result.spec.params.get("variant", "multiclass") == "ordinal"
        link = "ordinal" if ordinal else "softmax"
        own = [f"er:{link}:linear", f"er:{link}:gain"]
        if result.spec.params.get("fit_on") == "train":
            return own
        return own + [f"ordinal+{c}" if ordinal else c for c in configured]


@register
class LambdaMARTMember(MemberType):
    """``[[members.lambdamart]]`` (module docstring)."""

    name: ClassVar[str] = "lambdamart"
    keys: ClassVar[frozenset[str]] = BOOSTING_KEYS | {"lambda_l2"}
    default_iterations: ClassVar[int] = 100
    reads_codes: ClassVar[bool] = True

    def groupings(self, cfg: Any) -> list[str]:
        return ["original"]

    def learner_tag(self, params: dict[str, Any]) -> str:
        # a run that sets its seed (the search's, tunemix.train.search) says it: two sampled
        # runs may share leaves and rate, never the seed
        seed = f"-s{params['seed']}" if "seed" in params else ""
        return f"lambdamart{params.get('n_leaves', 16)}-lr{params.get('learning_rate', 0.1):g}{seed}"

    def fit(self, spec: RunSpec, features: np.ndarray, labels: np.ndarray, query_offsets: np.ndarray,
            n_labels: int, seed: int, time_budget_s: float | None, progress_queue: Any = None,
            eval_set: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None) -> RunResult:
        from tunemix.train.learners.lambdamart import LambdaMART

        reporter, on_iteration = _reporter(progress_queue)
        t0 = time.perf_counter()
        model = LambdaMART(**_params(spec, seed), time_budget_s=time_budget_s)
        model.fit(features, labels, query_offsets, on_iteration=on_iteration, **_stopping(spec, eval_set))
        if reporter is not None:
            reporter.flush(int(spec.params.get("n_iterations", model.n_iterations_)))
        arrays = model.to_forest().to_arrays()
        leaves = arrays["leaf_values"]
        arrays["leaf_values"] = np.hstack([leaves, np.zeros((leaves.shape[0], n_labels - 1))])  # (f, 0, ..., 0)
        forest = FlatForest.from_arrays(arrays)
        return RunResult(
            spec=spec, n_outputs=n_labels, n_classes=n_labels,
            class_gains=2.0 ** np.arange(n_labels, dtype=np.float64) - 1.0,
            checkpoints=list(model.checkpoints_), snapshot_iterations=list(model.checkpoints_),
            shift_scales=[None] * len(model.checkpoints_), n_iterations=int(model.n_iterations_),
            n_bases=forest.n_base, stop_reason=model.stop_reason_, fit_seconds=time.perf_counter() - t0,
            train_error=float("nan"), forest=forest.to_arrays(),
        )

    def calibrators(self, configured: list[str], result: RunResult) -> list[str]:
        if result.spec.params.get("fit_on") == "train":
            return ["identity"]
        return ["identity", *(c for c in configured if c.startswith("rbc:"))]
