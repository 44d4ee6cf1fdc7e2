"""tunemix: training/learners."""
