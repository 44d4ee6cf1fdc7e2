"""AdaBoost.MH as a member type (method section 3.1): trees, stumps and products of stumps,
snapshots at checkpoints, ``shift`` calibrated with R = the snapshot's sum of alphas."""

from __future__ import annotations

import time
from typing import Any, ClassVar

import numpy as np

from tunemix.train.members.types import MemberType, RunResult, RunSpec, register
from tunemix.train.parallel import IterationReporter

ADABOOST_KEYS = frozenset({
    "base", "n_leaves", "n_terms", "n_iterations", "checkpoints", "search", "n_arms", "n_bins",
    "initial_weights", "seed",
})


@register
class AdaBoostMember(MemberType):
    """``[[members.adaboost]]``: one :class:`~tunemix.train.learners.adaboost_mh.AdaBoostMH` per run."""

    name: ClassVar[str] = "adaboost"
    keys: ClassVar[frozenset[str]] = ADABOOST_KEYS
    default_iterations: ClassVar[int] = 100
    reads_codes: ClassVar[bool] = True

    def learner_tag(self, params: dict[str, Any]) -> str:
        base = params.get("base", "tree")
        if base == "tree":
            tag = f"tree{params.get('n_leaves', 8)}"
        elif base == "product":
            tag = f"product{params.get('n_terms', 3)}"
        else:
            tag = "stump"
        search = params.get("search", "full")
        return tag if search == "full" else f"{tag}-{search}"

    def fit(self, spec: RunSpec, features: np.ndarray, labels: np.ndarray, query_offsets: np.ndarray,
            n_labels: int, seed: int,
            time_budget_s: float | None, progress_queue: Any = None,
            eval_set: Any = None) -> RunResult:
        """Fit one AdaBoost.MH run.

        ``progress_queue`` (a multiprocessing manager queue, or None) receives the number of newly
        finished iterations as the run goes; a run that stops early sends the iterations it skipped
        too, so the parent's total always adds up.
        """
        from tunemix.train.learners.adaboost_mh import AdaBoostMH
        from tunemix.train.learners.label_groups import get_grouping

        params = dict(spec.params)
        params.setdefault("seed", seed + spec.index)
        model = AdaBoostMH(**params, time_budget_s=time_budget_s)
        t0 = time.perf_counter()
        reporter = IterationReporter(progress_queue) if progress_queue is not None else None
        model.fit(features, labels, label_grouping=get_grouping(spec.grouping, n_labels), callback=reporter)
        if reporter is not None:
            reporter.flush(int(params.get("n_iterations", model.n_iterations_)))
        checkpoints = [int(c) for c in model.checkpoints_]
        alphas = np.asarray(model.alphas_, dtype=np.float64)
        return RunResult(
            spec=spec,
            n_outputs=int(model.n_classes_),
            n_classes=int(model.n_classes_),
            class_gains=np.asarray(model.class_gains_, dtype=np.float64),
            checkpoints=checkpoints,
            snapshot_iterations=checkpoints,
            shift_scales=[float(alphas[:it].sum()) for it in checkpoints],
            n_iterations=int(model.n_iterations_),
            n_bases=int(model.n_iterations_),
            stop_reason=str(model.stop_reason_),
            fit_seconds=time.perf_counter() - t0,
            train_error=float(model.train_error_[-1]) if len(model.train_error_) else float("nan"),
            forest=model.to_forest().to_arrays(),
        )
