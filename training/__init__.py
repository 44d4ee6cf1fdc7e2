"""tunemix training package: read ranking data, fit calibrated multi-class members, mix them.

The serving path imports only ``training.data``, ``training.scoring``, ``training.evaluation``
and ``training.artifact``; see docs/architecture.md.
"""

__version__ = "0.1.0"
