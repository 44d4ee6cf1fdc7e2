"""tunemix: training/scoring."""
