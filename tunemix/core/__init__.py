"""The serving runtime: everything scoring needs, on numpy and numba only.

Data layout and readers (``data``), the versioned artifact (``artifact``), evaluation under the ten
tools' conventions (``evaluation``), calibrators (``calibration``), mixers and list fusion
(``ensemble``), the scoring kernels (``scoring``) and exact explanations (``explain``), with the
request deadline (``deadline``), thread policy (``threads``) and numba cache (``numba_cache``) they
share. Nothing here imports ``tunemix.train``, ``tunemix.compile``, ``tunemix.service`` or
``tunemix.cli`` (import-linter contracts in pyproject.toml).
"""
