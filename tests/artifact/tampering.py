"""Rewrite a saved version's ``arrays.npz`` (members replaced or added, raw bytes) or its manifest
and fix the checksums (the manifest's record of the arrays, ``manifest.sha256``), as an attacker who
can write the models directory would: the checksums then pass and only the limits of
``tunemix.core.artifact`` and the model's loader stand in the way."""

from __future__ import annotations

import hashlib
import json
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from tunemix.core.artifact import ARRAYS, MANIFEST, MANIFEST_SUM, sha256_file


def reseal(version_dir: Path) -> None:
    """Write ``manifest.sha256`` for the manifest as it is now."""
    digest = hashlib.sha256((version_dir / MANIFEST).read_bytes()).hexdigest()
    (version_dir / MANIFEST_SUM).write_text(f"{digest}  {MANIFEST}\n")


def edit_manifest(version_dir: Path, change: Callable[[dict[str, Any]], object]) -> None:
    """Apply ``change`` to the decoded manifest, write it back and reseal it."""
    manifest = json.loads((version_dir / MANIFEST).read_text())
    change(manifest)
    (version_dir / MANIFEST).write_text(json.dumps(manifest))
    reseal(version_dir)


def npy_header(shape: tuple[int, ...], dtype: str = "<f8") -> bytes:
    """The magic string and a version 1.0 header declaring ``shape`` and ``dtype``."""
    import io

    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": dtype, "fortran_order": False, "shape": shape})
    return buf.getvalue()  # write_array_header_1_0 writes the magic string too


def rewrite(version_dir: Path, replace: dict[str, bytes] | None = None, *,
            bomb: tuple[str, int] | None = None) -> None:
    """Replace members by raw bytes; ``bomb=(name, n)``: replace that member by a deflated .npy of
    n zero bytes (uint8), streamed, so n may be far larger than memory."""
    replace = replace or {}
    src = version_dir / ARRAYS
    tmp = version_dir / "arrays.tmp"
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(tmp, "w") as zout:
        for info in zin.infolist():
            name = info.filename
            if bomb is not None and name == bomb[0]:
                member = zipfile.ZipInfo(name)
                member.compress_type = zipfile.ZIP_DEFLATED
                with zout.open(member, "w", force_zip64=True) as fh:
                    fh.write(npy_header((bomb[1],), "|u1"))
                    chunk = bytes(1 << 24)
                    left = bomb[1]
                    while left:
                        fh.write(chunk[: min(left, len(chunk))])
                        left -= min(left, len(chunk))
            elif name in replace:
                zout.writestr(name, replace[name])
            else:
                zout.writestr(info, zin.read(name))
    tmp.replace(src)
    edit_manifest(version_dir, lambda m: m["arrays"].update(sha256=sha256_file(src), bytes=src.stat().st_size))


def first_member(version_dir: Path, dtype: str = "<f8") -> str:
    """The name of the first member holding ``dtype``."""
    with zipfile.ZipFile(version_dir / ARRAYS) as zf:
        for info in zf.infolist():
            with zf.open(info) as fp:
                np.lib.format.read_magic(fp)
                if np.lib.format.read_array_header_1_0(fp)[2].str == dtype:
                    return info.filename
    raise AssertionError(f"no {dtype} member")


def npy_bytes(array: np.ndarray) -> bytes:
    """``array`` as a ``.npy`` member's bytes."""
    import io

    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=False)
    return buf.getvalue()


def declare_width(version_dir: Path, n_features: int) -> None:
    """Make a trained version declare ``n_features`` features, consistently everywhere the width is
    stored (the manifest, its model section, the forest's and the relevance head's ``n_features``
    members; the feature names dropped), as a 1 MB tampered artifact would: only a bound on the
    width itself stands in the way."""
    manifest = json.loads((version_dir / MANIFEST).read_text())
    blocks = 1 + len(manifest["model"]["extra_views"])
    replace = {"forest/n_features.npy": npy_bytes(np.array(n_features * blocks, dtype=np.int64))}
    if "relevance_head" in manifest["model"]:
        replace["relevance_head/forest/n_features.npy"] = npy_bytes(np.array(n_features, dtype=np.int64))
    rewrite(version_dir, replace)

    def widen(m: dict[str, Any]) -> None:
        m["n_features"] = m["model"]["n_features"] = n_features
        m.pop("feature_names", None)

    edit_manifest(version_dir, widen)
