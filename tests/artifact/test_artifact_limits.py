"""Issue 37, reproduction 7 at the library level: an artifact's arrays are checked against the
limits (uncompressed sizes, .npy headers) before any of them is read."""

from __future__ import annotations

import resource
from pathlib import Path

import numpy as np
import pytest

from tests.artifact.tampering import first_member, npy_header, rewrite
from tunemix.core.artifact import MAX_ARRAYS_BYTES, ArtifactError, check_npz_members, load_artifact, save_artifact


def _save(tmp_path: Path) -> Path:
    arrays = {"w": np.arange(6, dtype=np.float64).reshape(2, 3), "idx": np.array([3, 1], dtype=np.int32),
              "flag": np.array([True, False])}
    return save_artifact(tmp_path, "demo", {"n_features": 3}, arrays)


def test_a_header_declaring_4e9_floats_is_refused_before_any_allocation(tmp_path: Path) -> None:
    v = _save(tmp_path)
    name = first_member(v)
    rewrite(v, {name: npy_header((4_000_000_000,)) + bytes(48)})
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(ArtifactError, match=rf"{name}.*shape \(4000000000,\).*32000000000 bytes.*48 bytes"):
        load_artifact(v)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak < 64 * 1024  # KiB: nothing allocated


def test_a_zip_bomb_is_refused_by_its_central_directory(tmp_path: Path) -> None:
    v = _save(tmp_path)
    rewrite(v, bomb=("w.npy", MAX_ARRAYS_BYTES + 1))  # about 260 KB on disk
    assert (v / "arrays.npz").stat().st_size < MAX_ARRAYS_BYTES // 500
    with pytest.raises(ArtifactError, match=r"inflate to \d+ bytes; the limit is 268435456"):
        load_artifact(v)
    # under a larger limit the same file is checked member by member and would load
    assert check_npz_members(v / "arrays.npz", 2 * MAX_ARRAYS_BYTES) > MAX_ARRAYS_BYTES


def test_a_smaller_limit_refuses_an_honest_artifact(tmp_path: Path) -> None:
    v = _save(tmp_path)
    with pytest.raises(ArtifactError, match="the limit is 100"):
        load_artifact(v, max_bytes=100)
    assert load_artifact(v, max_bytes=10_000)[1]["w"].shape == (2, 3)


@pytest.mark.parametrize(("payload", "message"), [
    (npy_header((2,), "|O") + bytes(16), "dtype |O is not allowed"),
    (npy_header((2,), "<U3") + bytes(24), "dtype <U3 is not allowed"),
    (npy_header((2, 3)) + bytes(40), r"shape \(2, 3\) of <f8 \(48 bytes\) but the member holds 40"),
    (b"\x93NUMPY\x09\x00" + bytes(20), "unreadable .npy header"),
    (b"not an array at all", "unreadable .npy header"),
])
def test_bad_headers_are_named(tmp_path: Path, payload: bytes, message: str) -> None:
    v = _save(tmp_path)
    rewrite(v, {"w.npy": payload})
    with pytest.raises(ArtifactError, match=r"member 'w.npy'.*" + message):
        load_artifact(v)


def test_a_huge_manifest_is_refused_unread(tmp_path: Path) -> None:
    v = _save(tmp_path)
    with (v / "manifest.json").open("a") as fh:
        fh.truncate(17 * 2**20)
    with pytest.raises(ArtifactError, match="a manifest has at most"):
        load_artifact(v)
