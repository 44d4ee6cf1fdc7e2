"""Shared fixtures. ../shared/data is only for benchmark-style tests; they skip when it is absent."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# `tunemix train`/`demo` warm a cold numba cache first (tunemix.compile.warm); the suite's own
# runs do not (make test runs `tunemix warm` before pytest; tests/test_warm.py tests the step)
os.environ.setdefault("TUNEMIX_AUTO_WARM", "0")
SHARED_DATA = Path(os.environ.get("TUNEMIX_SHARED_DATA", ROOT.parent / "shared" / "data"))


@pytest.fixture
def mq2008_fold1() -> Path:
    path = SHARED_DATA / "MQ2008" / "Fold1"
    if not (path / "train.txt").exists():
        pytest.skip(f"MQ2008 not found at {path} (../shared/data is absent)")
    return path
