"""Training-only data steps: feature binning, binned matrices, the validation split and the
synthetic data generator."""
