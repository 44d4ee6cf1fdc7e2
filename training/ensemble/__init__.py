"""tunemix: training/ensemble."""
