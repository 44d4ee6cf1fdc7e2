"""The package's one version string, pyproject.toml's, as installed."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("tunemix")
except PackageNotFoundError:  # a source tree that was not installed
    __version__ = "0+unknown"
