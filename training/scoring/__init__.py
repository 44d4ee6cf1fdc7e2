"""tunemix: training/scoring (flat-array scoring kernels; numpy + numba only)."""

from training.scoring.forest import FlatForest, concatenate, score_forest

__all__ = ["FlatForest", "concatenate", "score_forest"]
