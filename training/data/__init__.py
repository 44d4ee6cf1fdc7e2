"""tunemix: training/data."""
