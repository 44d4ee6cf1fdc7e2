"""The model artifact on disk: ``models/<name>/<version>/`` with ``manifest.json`` and ``arrays.npz``.

The artifact is data, never code: the manifest is JSON and the arrays are read with
``np.load(..., allow_pickle=False)``; object arrays are refused. The manifest records the SHA-256
and size of ``arrays.npz``, so a truncated or altered file is reported as such instead of being
half-read. Saving writes into a temporary sibling directory and renames it into place at the
end, so an interrupted save (Ctrl-C, a crash, a full disk) never leaves a half-written version.

Limits, checked before any array is read (an artifact is untrusted bytes: a version directory
may be copied in from anywhere): the manifest at most ``MAX_MANIFEST_BYTES``; ``arrays.npz`` at
most ``MAX_ARRAY_MEMBERS`` members whose uncompressed sizes (the zip's central directory) add up
to at most ``max_bytes`` (``MAX_ARRAYS_BYTES`` by default; the service passes
``TUNEMIX_MAX_ARTIFACT_BYTES``); every member a ``.npy`` whose header (read by numpy's
``read_magic`` / ``read_array_header_*`` from the member's stream) declares a boolean, integer or
floating dtype and a shape whose bytes, after the header, are exactly the member's uncompressed
size. A zip bomb (12.7 MB inflating to 3 GiB) or a header declaring shape (4e9,) is refused with
an :class:`ArtifactError` naming the member, before memory is asked for; the zip reader never
inflates a member past its declared size.

Nested parameters that mix numbers and arrays (a calibrator's ``to_params()``, say) are stored
with :func:`split_arrays`: every array is replaced in the JSON by ``{"$array": "<key>"}`` and
saved under that key in the ``.npz``; :func:`join_arrays` puts them back.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

#: Version 2: runs have a ``kind`` ("forest" or "linear"; linear runs store
#: ``linear/<run>/{weights,intercept,mean,scale}``) and calibrators may be of the kinds ``er``,
#: ``ordinal`` and ``identity``. Version 1 artifacts (forest runs only) still load.
SCHEMA_VERSION = 2
READABLE_SCHEMA_VERSIONS = (1, 2)
MANIFEST = "manifest.json"
ARRAYS = "arrays.npz"
_VERSION_RE = re.compile(r"v([0-9]{1,9})")  # fullmatch: v1, v2, ... (ASCII digits)
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
REQUIRED_KEYS = ("schema_version", "name", "version", "n_features", "arrays")
#: bytes of ``manifest.json`` at most
MAX_MANIFEST_BYTES = 16 * 2**20
#: uncompressed bytes of all arrays of a version together, by default (a model trained here on
#: 136 features with 640 members takes under 2 MiB)
MAX_ARRAYS_BYTES = 256 * 2**20
#: members of ``arrays.npz`` at most
MAX_ARRAY_MEMBERS = 10_000
#: dtype kinds an array may have: boolean, signed and unsigned integers, floating point
ARRAY_KINDS = "biuf"


class ArtifactError(ValueError):
    """A model artifact is missing, corrupt, truncated or of an unknown schema."""


# ---------------------------------------------------------------------------- params <-> arrays
def split_arrays(obj: Any, prefix: str, arrays: dict[str, np.ndarray]) -> Any:
    """JSON-able copy of ``obj`` with every ndarray moved into ``arrays`` under ``prefix/...``."""
    if isinstance(obj, np.ndarray):
        if obj.dtype.kind == "O":
            raise TypeError(f"{prefix}: object arrays cannot be stored (the artifact is data, not code)")
        key = prefix
        if key in arrays:
            raise ValueError(f"duplicate array key {key!r}")
        arrays[key] = np.ascontiguousarray(obj)
        return {"$array": key}
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            if not isinstance(k, str):
                raise TypeError(f"{prefix}: parameter names must be strings, got {k!r}")
            out[k] = split_arrays(v, f"{prefix}/{k}", arrays)
        return out
    if isinstance(obj, list | tuple):
        return [split_arrays(v, f"{prefix}/{i}", arrays) for i, v in enumerate(obj)]
    if isinstance(obj, np.generic):
        return obj.item()
    if obj is None or isinstance(obj, bool | int | float | str):
        if isinstance(obj, float) and not np.isfinite(obj):
            return {"$float": repr(obj)}
        return obj
    raise TypeError(f"{prefix}: cannot store a value of type {type(obj).__name__} in an artifact")


def join_arrays(obj: Any, arrays: dict[str, np.ndarray]) -> Any:
    """Inverse of :func:`split_arrays`."""
    if isinstance(obj, dict):
        if set(obj) == {"$array"}:
            key = obj["$array"]
            if key not in arrays:
                raise ArtifactError(f"the manifest refers to array {key!r}, which {ARRAYS} does not contain")
            return arrays[key]
        if set(obj) == {"$float"}:
            return float(obj["$float"])
        return {k: join_arrays(v, arrays) for k, v in obj.items()}
    if isinstance(obj, list):
        return [join_arrays(v, arrays) for v in obj]
    return obj


def json_safe(obj: Any) -> Any:
    """``obj`` with non-finite floats replaced by ``{"$float": "inf"}`` (strict JSON has no inf/NaN)
    and numpy scalars by Python numbers; :func:`join_arrays` reads such values back."""
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [json_safe(v) for v in obj]
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float) and not np.isfinite(obj):
        return {"$float": repr(obj)}
    return obj


# ---------------------------------------------------------------------------- versions
def check_name(name: str) -> str:
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
        raise ValueError(
            f"model name {name!r} must start with a letter or digit and contain only letters, digits, '.', '_', '-'"
        )
    return name


def check_version(version: str) -> str:
    """``version`` if it is a version name (``v1``, ``v2`` ...), else ValueError."""
    if not isinstance(version, str) or not _VERSION_RE.fullmatch(version):
        raise ValueError(f"{str(version)[:40]!r} is not a version name (v1, v2, ...)")
    return version


def versions_on_disk(models_dir: str | os.PathLike[str]) -> dict[str, list[str]]:
    """Every model under ``models_dir`` with at least one complete version, by name (sorted),
    its versions oldest first; an unreadable directory or an entry that is no model name is left
    out."""
    root = Path(models_dir)
    try:
        children = sorted(p.name for p in root.iterdir() if p.is_dir())
    except OSError:
        return {}
    out: dict[str, list[str]] = {}
    for child in children:
        try:
            versions = list_versions(root, child)
        except (ValueError, OSError):
            continue
        if versions:
            out[child] = versions
    return out


def list_versions(models_dir: str | os.PathLike[str], name: str) -> list[str]:
    """Complete versions of model ``name``, oldest first (``v1``, ``v2`` ...)."""
    root = Path(models_dir) / check_name(name)
    if not root.is_dir():
        return []
    found = []
    for child in root.iterdir():
        m = _VERSION_RE.fullmatch(child.name)
        if m and (child / MANIFEST).is_file():
            found.append((int(m.group(1)), child.name))
    return [v for _, v in sorted(found)]


def latest_version(models_dir: str | os.PathLike[str], name: str) -> Path | None:
    versions = list_versions(models_dir, name)
    return Path(models_dir) / name / versions[-1] if versions else None


def sha256_file(path: str | os.PathLike[str]) -> str:
    """Hex SHA-256 of a file, read in 1 MiB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# ---------------------------------------------------------------------------- save / load
def save_artifact(
    models_dir: str | os.PathLike[str],
    name: str,
    manifest: dict[str, Any],
    arrays: dict[str, np.ndarray],
    *,
    extra_files: dict[str, bytes] | None = None,
) -> Path:
    """Write a new version of model ``name``; return its directory (``models_dir/name/vN``).

    ``manifest`` must be JSON-serialisable; ``schema_version``, ``name``, ``version`` and the
    ``arrays`` checksum are filled in here. ``extra_files`` (report, plots) go beside it.
    """
    root = Path(models_dir) / check_name(name)
    root.mkdir(parents=True, exist_ok=True)
    for key, arr in arrays.items():
        if not isinstance(arr, np.ndarray) or arr.dtype.kind == "O":
            raise TypeError(f"array {key!r} must be a numeric numpy array")
    tmp = Path(tempfile.mkdtemp(prefix=".incomplete-", dir=root))
    try:
        np.savez(tmp / ARRAYS, **arrays)  # type: ignore[arg-type]
        versions = list_versions(models_dir, name)
        number = int(versions[-1][1:]) + 1 if versions else 1
        body = json_safe(dict(manifest))
        body.update(
            schema_version=SCHEMA_VERSION,
            name=name,
            version=f"v{number}",
            arrays={
                "file": ARRAYS,
                "sha256": sha256_file(tmp / ARRAYS),
                "bytes": (tmp / ARRAYS).stat().st_size,
                "keys": sorted(arrays),
            },
        )
        (tmp / MANIFEST).write_text(json.dumps(body, indent=2, sort_keys=False, allow_nan=False) + "\n")
        for fname, content in (extra_files or {}).items():
            target = tmp / fname
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content)
        # mkdtemp makes the directory owner-only (0700): a version is data for others to read (a
        # service running as another user must read it the moment it appears), so 0755
        os.chmod(tmp, 0o755)
        while True:
            final = root / f"v{number}"
            try:
                os.rename(tmp, final)  # atomic on one file system; fails if final exists
                break
            except OSError:
                if not final.exists():
                    raise
                number += 1
                body["version"] = f"v{number}"
                (tmp / MANIFEST).write_text(json.dumps(body, indent=2, allow_nan=False) + "\n")
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    log.info("saved model %s/%s", name, final.name)
    return final


def resolve_artifact(path_or_dir: str | os.PathLike[str], name: str | None = None) -> Path:
    """A version directory from either itself, or a models directory plus a model name (latest)."""
    p = Path(path_or_dir)
    if (p / MANIFEST).is_file():
        return p
    if name is not None:
        latest = latest_version(p, name)
        if latest is None:
            there = versions_on_disk(p)
            raise ArtifactError(f"no trained version of model {name!r} in {p} ("
                                + (f"models there: {', '.join(there)})" if there else "no model there)"))
        return latest
    raise ArtifactError(f"{p} is not a model version directory (no {MANIFEST})")


#: the type of each field every manifest has (``arrays`` holds file, sha256, bytes and keys)
_FIELD_TYPES: dict[str, tuple[type, ...]] = {"schema_version": (int,), "name": (str,), "version": (str,),
                                             "n_features": (int,), "arrays": (dict,)}
_ARRAYS_TYPES: dict[str, tuple[type, ...]] = {"file": (str,), "sha256": (str,), "bytes": (int,), "keys": (list,)}


def _check_manifest_types(manifest: dict[str, Any], mpath: Path) -> None:
    """ArtifactError naming the first field of a wrong type (``"arrays": "broken"``,
    ``"n_features": null``), before anything reads it."""
    where = f"{mpath.parent.parent.name}/{mpath.parent.name}/{MANIFEST}"
    for key, types in _FIELD_TYPES.items():
        value = manifest[key]
        if not isinstance(value, types) or isinstance(value, bool):
            raise ArtifactError(f"{where}: field {key!r} must be {types[0].__name__}, not {type(value).__name__}")
    if manifest["n_features"] < 1:
        raise ArtifactError(f"{where}: field 'n_features' must be at least 1, not {manifest['n_features']}")
    for key, types in _ARRAYS_TYPES.items():
        value = manifest["arrays"].get(key)
        if not isinstance(value, types) or isinstance(value, bool):
            raise ArtifactError(f"{where}: field 'arrays.{key}' must be {types[0].__name__}, "
                                f"not {type(value).__name__}")


def check_npz_members(apath: Path, max_bytes: int = MAX_ARRAYS_BYTES) -> int:
    """Check ``arrays.npz`` against the limits (module docstring) without reading any array;
    return the uncompressed bytes of its members. ArtifactError naming the member otherwise."""
    try:
        with zipfile.ZipFile(apath) as zf:
            infos = zf.infolist()
            if len(infos) > MAX_ARRAY_MEMBERS:
                raise ArtifactError(f"{apath}: {len(infos)} members; at most {MAX_ARRAY_MEMBERS}")
            total = sum(i.file_size for i in infos)
            if total > max_bytes:
                raise ArtifactError(f"{apath}: the arrays inflate to {total} bytes; the limit is {max_bytes} "
                                    "(TUNEMIX_MAX_ARTIFACT_BYTES)")
            for info in infos:
                _check_npy_header(zf, info, apath)
    except (OSError, zipfile.BadZipFile, EOFError) as exc:
        raise ArtifactError(f"{apath}: cannot read the zip directory ({exc})") from None
    return total


def _check_npy_header(zf: zipfile.ZipFile, info: zipfile.ZipInfo, apath: Path) -> None:
    where = f"{apath}: member {info.filename!r}"
    if not info.filename.endswith(".npy") or info.is_dir():
        raise ArtifactError(f"{where} is not a .npy array")
    with zf.open(info) as fp:
        try:
            major, minor = np.lib.format.read_magic(fp)
            if (major, minor) == (1, 0):
                shape, _fortran, dtype = np.lib.format.read_array_header_1_0(fp)
            elif (major, minor) in ((2, 0), (3, 0)):
                shape, _fortran, dtype = np.lib.format.read_array_header_2_0(fp)
            else:
                raise ValueError(f"unknown .npy format version {major}.{minor}")
        except (ValueError, TypeError, SyntaxError, EOFError, OSError, zipfile.BadZipFile) as exc:
            raise ArtifactError(f"{where}: unreadable .npy header ({exc})") from None
        header_end = fp.tell()
    if dtype.hasobject or dtype.kind not in ARRAY_KINDS or dtype.fields is not None:
        raise ArtifactError(f"{where}: dtype {dtype.str} is not allowed (boolean, integer or float arrays only)")
    count = 1
    for dim in shape:
        if not isinstance(dim, int) or dim < 0:
            raise ArtifactError(f"{where}: bad shape {shape!r}")
        count *= dim
    declared = count * dtype.itemsize
    if header_end + declared != info.file_size:
        raise ArtifactError(f"{where}: the header declares shape {shape} of {dtype.str} ({declared} bytes) but the "
                            f"member holds {info.file_size - header_end} bytes of data")


def load_artifact(
    path: str | os.PathLike[str], *, max_bytes: int = MAX_ARRAYS_BYTES
) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Read and check a version directory; return (manifest, arrays). Never unpickles; checks the
    limits of the module docstring (``max_bytes``: the arrays' uncompressed total) first."""
    d = Path(path)
    mpath = d / MANIFEST
    try:
        if mpath.stat().st_size > MAX_MANIFEST_BYTES:
            raise ArtifactError(f"{mpath}: {mpath.stat().st_size} bytes; a manifest has at most {MAX_MANIFEST_BYTES}")
        manifest = json.loads(mpath.read_text())
    except FileNotFoundError:
        raise ArtifactError(f"{d}: no {MANIFEST}; not a model artifact") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ArtifactError(f"{mpath}: corrupt manifest ({exc})") from None
    if not isinstance(manifest, dict):
        raise ArtifactError(f"{mpath}: the manifest must be a JSON object")
    missing = [k for k in REQUIRED_KEYS if k not in manifest]
    if missing:
        raise ArtifactError(f"{mpath}: missing field(s) {', '.join(missing)}")
    _check_manifest_types(manifest, mpath)
    if manifest["schema_version"] not in READABLE_SCHEMA_VERSIONS:
        raise ArtifactError(
            f"{mpath}: schema version {manifest['schema_version']!r} is not supported "
            f"(this tunemix reads versions {', '.join(map(str, READABLE_SCHEMA_VERSIONS))})"
        )
    info = manifest["arrays"]
    apath = d / ARRAYS
    if not apath.is_file():
        raise ArtifactError(f"{d}: {ARRAYS} is missing")
    size = apath.stat().st_size
    if size != info.get("bytes"):
        raise ArtifactError(f"{apath}: size {size} bytes, the manifest says {info.get('bytes')} (truncated?)")
    if sha256_file(apath) != info.get("sha256"):
        raise ArtifactError(f"{apath}: SHA-256 does not match the manifest (corrupt or modified)")
    check_npz_members(apath, max_bytes)
    try:
        with np.load(apath, allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in npz.files}
    except (ValueError, OSError, zipfile.BadZipFile) as exc:
        raise ArtifactError(f"{apath}: cannot read arrays ({exc})") from None
    if sorted(arrays) != sorted(info.get("keys", [])):
        raise ArtifactError(f"{apath}: array keys differ from the manifest's list")
    return manifest, arrays
