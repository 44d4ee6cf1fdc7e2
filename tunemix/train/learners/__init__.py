"""The learners: AdaBoost.MH (stumps, Hamming trees, stump products; bandit-accelerated), McRank
and LambdaMART through LightGBM, label groupings."""

from tunemix.train.data.binning import FeatureBins, fit_bins
from tunemix.train.learners.adaboost_mh import AdaBoostMH, FitProgress
from tunemix.train.learners.label_groups import (
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
