"""tunemix: training/artifact."""
