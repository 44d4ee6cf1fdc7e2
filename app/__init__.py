"""tunemix: app."""
