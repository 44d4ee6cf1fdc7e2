"""What a serving process needs of the library, for ``app`` (the service imports the library
through ``tunemix`` only; an import-linter contract in ``make lint`` keeps it so).

- artifacts: ``load_model``, ``EnsembleModel``, ``ArtifactError``, ``check_name``,
  ``check_version``, ``list_versions``, ``versions_on_disk`` (never unpickled);
- the scoring runtime: ``configure_runtime`` (once per process), ``single_threaded``,
  ``scoring_threads``;
- evaluation over the project's array layout: ``evaluate_offsets`` (labels, scores, query
  offsets), ``CONVENTION_NAMES``, ``Measure``, ``EvaluationInputError``, ``MAX_LABEL``;
- list fusion: ``fuse_lists``, ``competition_ranks``;
- explanations: ``explain_rows``, ``explain_pair``, ``manifest_feature_names``;
- a request's deadline and work budget: ``Deadline``, ``DeadlineExceeded``, ``BudgetExceeded``,
  ``check_deadline``, ``current_deadline`` (``training.deadline``).
"""

from __future__ import annotations

from training.artifact.store import ArtifactError, check_name, check_version, list_versions, versions_on_disk
from training.deadline import BudgetExceeded, Deadline, DeadlineExceeded, check_deadline, current_deadline
from training.ensemble.list_fusion import competition_ranks, fuse_lists
from training.evaluation import CONVENTION_NAMES, EvaluationInputError, Measure
from training.evaluation import evaluate as evaluate_offsets
from training.evaluation.evaluate import MAX_LABEL
from training.scoring.ensemble_model import EnsembleModel, load_model
from training.scoring.explanation import explain_pair, explain_rows, manifest_feature_names
from training.scoring.forest import get_scoring_threads as scoring_threads
from training.scoring.forest import single_threaded
from training.scoring.runtime import configure as configure_runtime

__all__ = ["CONVENTION_NAMES", "MAX_LABEL", "ArtifactError", "BudgetExceeded", "Deadline", "DeadlineExceeded",
           "EnsembleModel", "EvaluationInputError", "Measure", "check_deadline", "check_name", "check_version",
           "competition_ranks", "configure_runtime", "current_deadline", "evaluate_offsets", "explain_pair",
           "explain_rows", "fuse_lists", "list_versions", "load_model", "manifest_feature_names", "scoring_threads",
           "single_threaded", "versions_on_disk"]
