"""tunemix: training/evaluation."""
