"""tunemix: training/learners (multi-class members: AdaBoost.MH, ...)."""

from training.data.binning import FeatureBins, fit_bins
from training.learners.adaboost_mh import AdaBoostMH, FitProgress
from training.learners.label_groups import (
    STANDARD_GROUPINGS,
    LabelGrouping,
    get_grouping,
    identity_grouping,
)

__all__ = [
    "STANDARD_GROUPINGS",
    "AdaBoostMH",
    "FeatureBins",
    "FitProgress",
    "LabelGrouping",
    "fit_bins",
    "get_grouping",
    "identity_grouping",
]
