from __future__ import annotations

import itertools

import numpy as np
import pytest

from tunemix.core.data.normalization import (
    apply_view,
    standardise_by_query,
    view_width,
    whiten_by_query,
)


def naive_standardise(x: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    out = np.zeros_like(x, dtype=np.float64)
    for s, e in itertools.pairwise(offsets):
        block = x[s:e].astype(np.float64)
        std = block.std(axis=0)
        mean = block.mean(axis=0)
        safe = np.where(std > 1e-12 * np.maximum(1.0, np.abs(mean)), std, 1.0)
        out[s:e] = np.where(std > 1e-12 * np.maximum(1.0, np.abs(mean)), (block - mean) / safe, 0.0)
    return out


def test_standardise_matches_twin_and_zeroes_constants() -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((30, 4)).astype(np.float32)
    x[:10, 2] = 3.0  # constant within query 0
    offsets = np.array([0, 10, 11, 30])
    got = standardise_by_query(x, offsets)
    np.testing.assert_allclose(got, naive_standardise(x, offsets), atol=1e-5)
    assert np.all(got[:10, 2] == 0.0)
    assert np.all(got[10] == 0.0)  # single-document query


def test_whitening_gives_identity_covariance_when_well_conditioned() -> None:
    rng = np.random.default_rng(1)
    mix = rng.standard_normal((3, 3))
    x = (rng.standard_normal((200, 3)) @ mix).astype(np.float32)
    w = whiten_by_query(x, np.array([0, 200])).astype(np.float64)
    np.testing.assert_allclose(np.cov(w.T, bias=True), np.eye(3), atol=1e-4)
    # decreasing-variance order before scaling = PCA order; sign rule is deterministic
    w2 = whiten_by_query(x, np.array([0, 200]))
    np.testing.assert_array_equal(w.astype(np.float32), w2)


def test_whitening_ill_conditioned_is_finite() -> None:
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 6)).astype(np.float32)  # fewer documents than features
    w = whiten_by_query(x, np.array([0, 3]))
    assert np.all(np.isfinite(w))


def test_views() -> None:
    x = np.arange(12, dtype=np.float32).reshape(6, 2)
    off = np.array([0, 3, 6])
    assert apply_view(x, off, "raw").shape == (6, 2)
    assert apply_view(x, off, "raw+std").shape == (6, 4) == (6, view_width(2, "raw+std"))
    assert apply_view(x, off, "raw+white").shape == (6, 4)
    with pytest.raises(ValueError, match="unknown feature view"):
        apply_view(x, off, "pca")


def test_whitening_zeroes_the_null_space_of_short_queries() -> None:
    """A query of n documents and d > n features has rank n - 1: the other components are
    rounding noise; they must be exactly 0 (trees would split on noise), the rest unchanged."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 8)).astype(np.float32)  # rank of the centred block: 3
    w = whiten_by_query(x, np.array([0, 4])).astype(np.float64)
    assert np.all(w[:, 3:] == 0.0)
    assert np.all(np.abs(w[:, :3]).max(axis=0) > 1e-2)  # the real components survive
    # the real components against a slow twin: SVD of the centred block, scaled as the kernel does
    xc = x.astype(np.float64) - x.astype(np.float64).mean(axis=0)
    _, sv, vt = np.linalg.svd(xc, full_matrices=False)
    lam = sv**2 / 4
    for c in range(3):
        col = xc @ vt[c] / np.sqrt(lam[c] + 1e-3)
        big = np.argmax(np.abs(vt[c]))
        col *= np.sign(vt[c][big])
        np.testing.assert_allclose(w[:, c], col, rtol=1e-4, atol=1e-5)


def test_whitening_needs_no_scipy(tmp_path) -> None:
    """The service image has no scipy, and numba's own ``np.linalg`` needs it: the views must
    compile and run without it (a fresh numba cache, scipy made unimportable)."""
    import os
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['scipy'] = None\n"
        "import numpy as np\n"
        "from tunemix.core.data.normalization import whiten_by_query, standardise_by_query\n"
        "x = np.random.default_rng(0).normal(size=(30, 5)).astype(np.float32)\n"
        "off = np.array([0, 12, 12, 30])\n"
        "w = whiten_by_query(x, off)\n"
        "assert np.allclose(np.cov(w[12:].T, bias=True), np.eye(5), atol=1e-3)\n"
        "standardise_by_query(x, off)\n"
        "print('ok')\n"
    )
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba")}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]


def test_whitening_batches_agree_with_one_query_at_a_time(monkeypatch) -> None:
    """Queries are whitened in batches (one LAPACK call per batch): the batch size changes nothing."""
    import tunemix.core.data.normalization as norm

    rng = np.random.default_rng(5)
    sizes = rng.integers(0, 12, size=23)
    off = np.concatenate([[0], np.cumsum(sizes)])
    x = rng.normal(size=(int(off[-1]), 4)).astype(np.float32)
    whole = whiten_by_query(x, off)
    monkeypatch.setattr(norm, "_WHITEN_BATCH_VALUES", 16)  # one query per batch
    np.testing.assert_array_equal(whiten_by_query(x, off), whole)


@pytest.mark.parametrize("parts", [2, 3])
def test_long_queries_on_several_threads_give_the_same_bits(monkeypatch, parts: int) -> None:
    """``parts`` > 1: queries from ``PARALLEL_MIN_DOCUMENTS`` on go to the parallel kernels
    (covariance rows and documents cut into pieces), the others to the serial ones; every value
    equals the one-thread result to the last bit (constant features, a near-singular direction
    and ragged piece boundaries included), and the parallel kernels did run."""
    import tunemix.core.data.normalization as norm

    monkeypatch.setattr(norm, "PARALLEL_MIN_DOCUMENTS", 40)
    rng = np.random.default_rng(11)
    sizes = [5, 41, 0, 39, 97, 40, 3]
    off = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    x = rng.normal(size=(int(off[-1]), 7)).astype(np.float32)
    x[:, 2] = 1.5  # constant everywhere
    x[:, 5] = x[:, 0] + 1e-7 * x[:, 1]  # nearly collinear
    calls: list[str] = []
    for name in ("_standardise_parallel", "_centre_cov_parallel", "_project_parallel"):
        kernel = getattr(norm, name)
        monkeypatch.setattr(norm, name, lambda *a, _k=kernel, _n=name: (calls.append(_n), _k(*a))[1])
    np.testing.assert_array_equal(whiten_by_query(x, off, parts=parts), whiten_by_query(x, off))
    np.testing.assert_array_equal(standardise_by_query(x, off, parts=parts), standardise_by_query(x, off))
    assert calls.count("_centre_cov_parallel") == 3 and calls.count("_project_parallel") == 3
    assert calls.count("_standardise_parallel") == 3
