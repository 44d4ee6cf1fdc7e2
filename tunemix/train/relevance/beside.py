"""The relevance head's own models trained beside the member runs, in the boosting stage's pool.

The head's own models (``tunemix.train.relevance.fit.fit_head_model``: McRank multiclass
on the whole training set, stopped early on the validation documents' log loss) read the data
and the head's settings only, not the mix: nothing they need comes later than the runs'. Trained
in a stage of their own, after the mix, they would be serial time with a core idle (on MQ2008 the
default's one 4-leaf model takes 0.38-0.67 s of a 0.47-0.74 s stage, a fold); as tasks after the
runs in the boosting pool (``tunemix.train.train.fit_runs``) they start when a run's slot frees,
while the last runs finish on the other core. The models are the same to the last bit as those
the relevance stage trains itself: the same function with the same arguments (seed included) on
one LightGBM thread.

Only without a time budget: under one, the relevance stage decides how many of them it can
afford from the time left to its end (``tunemix.train.relevance.stage``), which is not known
before the runs; the stage then trains them itself. Only when a LightGBM run is among the runs
(LightGBM is then loaded before the pool starts; a fit without it gets no head either way). A
model that fails with a ValueError hands the error to the relevance stage, which records it as it
records the failure of a model it trains itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tunemix.train.budget import FitBudget
from tunemix.train.members.types import LIGHTGBM_TYPES

if TYPE_CHECKING:
    from tunemix.train.config import TrainConfig
    from tunemix.train.members.types import RunSpec
    from tunemix.train.prepared import Prepared


@dataclass
class HeadBeside:
    """The head's own models to train in the boosting pool: ``jobs`` (``head_jobs``' arguments,
    in grid order) in, ``models`` out (``fit_head_model``'s results in the same order, or the
    ValueError a model raised), filled by ``fit_runs``; None until then."""

    jobs: list[tuple[Any, ...]]
    models: list[Any] | None = field(default=None)


def head_beside(cfg: TrainConfig, prep: Prepared, specs: list[RunSpec], deadline: FitBudget) -> HeadBeside | None:
    """The head's own models to train beside the runs (module docstring), or None: the relevance
    stage trains them itself (no head, a time budget, no LightGBM run, no model of its own, or
    data the head refuses: the stage records why)."""
    from tunemix.train.relevance.fit import head_jobs

    h = cfg.relevance
    if not h.enabled or deadline.limited or not any(s.type in LIGHTGBM_TYPES for s in specs):
        return None
    try:
        jobs = head_jobs(prep.train, prep.vali, prep.n_labels, h, cfg.seed)
    except ValueError:
        return None
    return HeadBeside(jobs=jobs) if jobs else None


def head_model_task(*job: Any) -> Any:
    """``tunemix.train.relevance.stage.head_model_within`` without a budget, on one of
    ``head_jobs``' argument tuples, as a task of the boosting pool: its result, or the ValueError
    it raised (returned, for the relevance stage to record)."""
    from tunemix.train.relevance.stage import head_model_within

    try:
        return head_model_within(FitBudget.begin(None), *job)
    except ValueError as exc:
        return exc
