"""tunemix training package: read ranking data, fit calibrated multi-class members, mix them.

The serving path imports only ``training.data``, ``training.scoring``, ``training.evaluation``
and ``training.artifact``; see docs/architecture.md.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("tunemix")  # the one version string: pyproject.toml's
except PackageNotFoundError:  # a source tree that was not installed
    __version__ = "0+unknown"
