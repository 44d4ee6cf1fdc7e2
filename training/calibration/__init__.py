"""tunemix: training/calibration."""
