"""Ranking evaluation under the ten public tools' conventions (docs/conventions.md, README).

Public API::

    Measure, parse_measures                       measures.py
    Convention, CONVENTIONS, CONVENTION_NAMES,    conventions.py
    get_convention
    evaluate, mean_metric, EvaluationResult,      evaluate.py
    EvaluationInputError
"""

from tunemix.core.evaluation.conventions import (
    CONVENTION_NAMES,
    CONVENTIONS,
    Convention,
    get_convention,
)
from tunemix.core.evaluation.evaluate import (
    EvaluationInputError,
    EvaluationResult,
    evaluate,
    mean_metric,
)
from tunemix.core.evaluation.measures import MEASURE_NAMES, Measure, parse_measures

__all__ = [
    "CONVENTIONS",
    "CONVENTION_NAMES",
    "MEASURE_NAMES",
    "Convention",
    "EvaluationInputError",
    "EvaluationResult",
    "Measure",
    "evaluate",
    "get_convention",
    "mean_metric",
    "parse_measures",
]
