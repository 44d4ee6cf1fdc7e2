"""The scoring kernels over flat arrays (numpy and numba only): forests, calibration steps, the ensemble model."""

from tunemix.core.scoring.forest import FlatForest, concatenate, score_forest

__all__ = ["FlatForest", "concatenate", "score_forest"]
