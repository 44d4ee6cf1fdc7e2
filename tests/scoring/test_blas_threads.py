"""The service holds numpy's OpenBLAS to its own thread count (``limit_blas_threads``)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tunemix.core.scoring.runtime import limit_blas_threads


def test_limit_blas_threads_caps_numpys_openblas() -> None:
    code = (
        "import ctypes, numpy\n"
        "from tunemix.core.scoring.runtime import limit_blas_threads\n"
        "libs = limit_blas_threads(1)\n"
        "assert libs, 'no OpenBLAS found'\n"
        "lib = ctypes.CDLL(libs[0])\n"
        "get = next(getattr(lib, n) for n in ('openblas_get_num_threads', 'scipy_openblas_get_num_threads64_',\n"
        "           'scipy_openblas_get_num_threads', 'openblas_get_num_threads64_') if hasattr(lib, n))\n"
        "get.restype = ctypes.c_int\n"
        "print(get())\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={"OPENBLAS_NUM_THREADS": "2", "PATH": ""})
    if "no OpenBLAS found" in proc.stderr:
        pytest.skip("numpy is not linked against OpenBLAS here")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "1"


def test_limit_blas_threads_refuses_zero() -> None:
    with pytest.raises(ValueError, match=">= 1"):
        limit_blas_threads(0)
