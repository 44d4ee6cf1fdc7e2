"""The model artifact on disk: ``models/<name>/<version>/`` with ``manifest.json``, ``manifest.sha256``
and ``arrays.npz``.

The artifact is data, never code: the manifest is JSON (decoded by msgspec) and the arrays are
read with ``np.load(..., allow_pickle=False)``; object arrays are refused. The manifest records the
SHA-256 and size of ``arrays.npz``, and ``manifest.sha256`` (``sha256sum`` format:
``<hex>  manifest.json``, so ``sha256sum -c manifest.sha256`` checks it) the SHA-256 of the
manifest's bytes, so a truncated, altered or hand-edited file is reported as such instead of
being half-read. The checksums guard against accidents, not against someone who can write the
models directory (they can rewrite a checksum too): the limits below do that. Saving writes into
a temporary sibling directory and renames it into place at the end, so an interrupted save
(Ctrl-C, a crash, a full disk) never leaves a half-written version.

Schema versions 1 and 2 (tunemix 0.1.0 and the versions written before ``manifest.sha256``
existed) have no manifest checksum and still load, checked against every limit below; a version
3 manifest (what :func:`save_artifact` writes) without its ``manifest.sha256`` is refused.

Limits, checked before anything is allocated from what they bound (an artifact is untrusted
bytes: a version directory may be copied in from anywhere):

- the manifest: at most ``MAX_MANIFEST_BYTES``; before it is decoded, at most
  ``MAX_MANIFEST_CONTAINERS`` ``{`` and ``[`` bytes (each object or array opens with one) and at
  most ``MAX_MANIFEST_ITEMS`` ``,`` bytes (each value after the first of its object or array
  follows one), counted in the raw bytes, so what it decodes to is bounded: about 70 bytes per
  object and 100 per value at most, a process grows by about 100 MiB reading a manifest at every
  limit (100,000 objects, 400,000 distinct keys, 10 MiB of the longest strings), and 15 MiB of
  empty objects (about 450 MB decoded) is refused unread; once decoded, nested at most
  ``MAX_MANIFEST_DEPTH`` deep and no key or string longer than ``MAX_MANIFEST_STRING`` characters;
- the declared width ``n_features``: at least 1 and at most ``MAX_FEATURES`` (the scoring kernels,
  the warm-up and every explanation allocate rows of that width; the model's loader holds it
  against its stored arrays: ``tunemix.core.scoring.ensemble_model.load_model``);
- ``arrays.keys`` at most ``MAX_ARRAY_MEMBERS`` names; ``arrays.npz`` at most ``MAX_ARRAY_MEMBERS``
  members whose uncompressed sizes (the zip's central directory) add up to at most ``max_bytes``
  (``MAX_ARRAYS_BYTES`` by default; the service passes ``TUNEMIX_MAX_ARTIFACT_BYTES``); every member
  a ``.npy`` whose header (read by numpy's ``read_magic`` / ``read_array_header_*`` from the
  member's stream) declares a boolean, integer or floating dtype and a shape whose bytes, after
  the header, are exactly the member's uncompressed size. A zip bomb (12.7 MB inflating to
  3 GiB) or a header declaring shape (4e9,) is refused with an :class:`ArtifactError` naming the
  member, before memory is asked for; the zip reader never inflates a member past its declared
  size.

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

import msgspec
import numpy as np

log = logging.getLogger(__name__)

#: Version 4: the forest stores each node's way for a missing value (``forest/node_missing_right``)
#: and a linear run the term of a missing value (``linear/<run>/missing``); an artifact of versions
#: 1 to 3 has neither, and loads with every missing value going left (as ``x >= t`` sends NaN) and
#: contributing 0 to a linear run. Version 3: the manifest's bytes are covered by ``manifest.sha256``.
#: Version 2: runs have a ``kind`` ("forest" or "linear"; linear runs store
#: ``linear/<run>/{weights,intercept,mean,scale}``) and calibrators may be of the kinds ``er``,
#: ``ordinal`` and ``identity``. Version 1 and 2 artifacts (no manifest checksum; version 1: forest
#: runs only) still load.
SCHEMA_VERSION = 4
READABLE_SCHEMA_VERSIONS = (1, 2, 3, 4)
#: the versions written before the manifest had a checksum: they load without ``manifest.sha256``
UNSEALED_SCHEMA_VERSIONS = (1, 2)
MANIFEST = "manifest.json"
#: the manifest's SHA-256, as ``sha256sum`` writes it
MANIFEST_SUM = "manifest.sha256"
ARRAYS = "arrays.npz"
_VERSION_RE = re.compile(r"v([0-9]{1,9})")  # fullmatch: v1, v2, ... (ASCII digits)
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
REQUIRED_KEYS = ("schema_version", "name", "version", "n_features", "arrays")
#: bytes of ``manifest.json`` at most
MAX_MANIFEST_BYTES = 16 * 2**20
#: objects and arrays in the manifest at most (its ``{`` and ``[`` bytes, counted before it is
#: decoded); a model of 2,005 members (``configs/mq2008-all-members.toml``) has about 20,000
MAX_MANIFEST_CONTAINERS = 100_000
#: values in the manifest's objects and arrays after the first of each at most (its ``,`` bytes,
#: counted before it is decoded); the model of 2,005 members has about 90,000
MAX_MANIFEST_ITEMS = 500_000
#: objects and arrays nested in the manifest at most (a trained model's nest 7 deep)
MAX_MANIFEST_DEPTH = 32
#: characters of a key or string in the manifest at most
MAX_MANIFEST_STRING = 65_536
#: the declared width, ``n_features``, at most: six times the widest public learning-to-rank
#: collection (Yahoo! LTR, 700 features). Scoring allocates rows of this width (the views a multiple
#: of it), so the width bounds what loading, the warm-up and a request may cost
MAX_FEATURES = 4096
#: bytes of ``manifest.sha256`` at most (one line: 64 hex digits, two spaces, the file's name)
_MAX_SUM_BYTES = 256
_SUM_RE = re.compile(rb"([0-9a-f]{64})  manifest\.json\n?")
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
    ``arrays`` checksum are filled in here, and ``manifest.sha256`` written beside it. A manifest
    the limits of the module docstring would refuse (a width beyond ``MAX_FEATURES``, too many
    objects or values) is an ArtifactError here, before anything is written: what is saved
    loads. ``extra_files`` (report, plots) go beside it.
    """
    root = Path(models_dir) / check_name(name)
    for key, arr in arrays.items():
        if not isinstance(arr, np.ndarray) or arr.dtype.kind == "O":
            raise TypeError(f"array {key!r} must be a numeric numpy array")
    if len(arrays) > MAX_ARRAY_MEMBERS:
        raise ArtifactError(f"{len(arrays)} arrays; an artifact holds at most {MAX_ARRAY_MEMBERS}")
    root.mkdir(parents=True, exist_ok=True)
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
        _write_manifest(tmp, body)
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
                _write_manifest(tmp, body)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    log.info("saved model %s/%s", name, final.name)
    return final


def _write_manifest(directory: Path, body: dict[str, Any]) -> None:
    """``manifest.json`` and its ``manifest.sha256`` in ``directory``, after the checks a load makes
    of the manifest (what is written loads)."""
    raw = (json.dumps(body, indent=2, allow_nan=False) + "\n").encode()
    where = f"{body.get('name')}/{body.get('version')}/{MANIFEST}"
    _decode_manifest(raw, where)
    (directory / MANIFEST).write_bytes(raw)
    (directory / MANIFEST_SUM).write_text(f"{hashlib.sha256(raw).hexdigest()}  {MANIFEST}\n")


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


def _check_manifest_types(manifest: dict[str, Any], where: str) -> None:
    """ArtifactError naming the first field missing or of a wrong type (``"arrays": "broken"``,
    ``"n_features": null``) or beyond its limit, before anything reads it."""
    missing = [k for k in REQUIRED_KEYS if k not in manifest]
    if missing:
        raise ArtifactError(f"{where}: missing field(s) {', '.join(missing)}")
    for key, types in _FIELD_TYPES.items():
        value = manifest[key]
        if not isinstance(value, types) or isinstance(value, bool):
            raise ArtifactError(f"{where}: field {key!r} must be {types[0].__name__}, not {type(value).__name__}")
    check_width(manifest["n_features"], f"{where}: field 'n_features'")
    for key, types in _ARRAYS_TYPES.items():
        value = manifest["arrays"].get(key)
        if not isinstance(value, types) or isinstance(value, bool):
            raise ArtifactError(f"{where}: field 'arrays.{key}' must be {types[0].__name__}, "
                                f"not {type(value).__name__}")
    if len(manifest["arrays"]["keys"]) > MAX_ARRAY_MEMBERS:
        raise ArtifactError(f"{where}: field 'arrays.keys' names {len(manifest['arrays']['keys'])} arrays; "
                            f"at most {MAX_ARRAY_MEMBERS}")


def check_width(n_features: int, what: str) -> int:
    """``n_features`` if it is a width the artifact may declare (1 to ``MAX_FEATURES``), else an
    ArtifactError naming ``what`` and the bound."""
    if n_features < 1:
        raise ArtifactError(f"{what} must be at least 1, not {n_features}")
    if n_features > MAX_FEATURES:
        raise ArtifactError(f"{what} declares {n_features} features; a model takes at most {MAX_FEATURES} "
                            "(MAX_FEATURES)")
    return n_features


def _check_manifest_bytes(raw: bytes, where: str) -> None:
    """The manifest's size, objects and arrays and values, bounded from above by its bytes before it
    is decoded (module docstring): ArtifactError naming the limit passed."""
    if len(raw) > MAX_MANIFEST_BYTES:
        raise ArtifactError(f"{where}: {len(raw)} bytes; a manifest has at most {MAX_MANIFEST_BYTES}")
    containers = raw.count(b"{") + raw.count(b"[")
    if containers > MAX_MANIFEST_CONTAINERS:
        raise ArtifactError(f"{where}: {containers} '{{' and '[' bytes (objects and arrays); a manifest has at "
                            f"most {MAX_MANIFEST_CONTAINERS} (MAX_MANIFEST_CONTAINERS)")
    items = raw.count(b",")
    if items > MAX_MANIFEST_ITEMS:
        raise ArtifactError(f"{where}: {items} ',' bytes (values); a manifest has at most {MAX_MANIFEST_ITEMS} "
                            "(MAX_MANIFEST_ITEMS)")


def _check_manifest_shape(manifest: Any, where: str) -> None:
    """Nesting at most ``MAX_MANIFEST_DEPTH`` deep, keys and strings at most ``MAX_MANIFEST_STRING``
    characters (one walk, without recursion; the counts bound its length)."""
    # each entry: a value, its depth, its parent's path and its key or index there (a path is
    # spelled out only for objects and arrays, and for what an error names)
    stack: list[tuple[Any, int, str, str]] = [(manifest, 1, "", "$")]
    while stack:
        value, depth, parent, key = stack.pop()
        if isinstance(value, str):
            if len(value) > MAX_MANIFEST_STRING:
                raise ArtifactError(f"{where}: the string at {parent}{key} has {len(value)} characters; at most "
                                    f"{MAX_MANIFEST_STRING} (MAX_MANIFEST_STRING)")
            continue
        if not isinstance(value, dict | list):
            continue
        path = parent + key
        if depth > MAX_MANIFEST_DEPTH:
            raise ArtifactError(f"{where}: {path} is nested {depth} deep; at most {MAX_MANIFEST_DEPTH} "
                                "(MAX_MANIFEST_DEPTH)")
        if isinstance(value, dict):
            for name, item in value.items():
                if len(name) > MAX_MANIFEST_STRING:
                    raise ArtifactError(f"{where}: a key in {path} has {len(name)} characters; at most "
                                        f"{MAX_MANIFEST_STRING} (MAX_MANIFEST_STRING)")
                stack.append((item, depth + 1, path, "." + name[:40]))
        else:
            stack.extend((item, depth + 1, path, f"[{i}]") for i, item in enumerate(value))


def _decode_manifest(raw: bytes, where: str) -> dict[str, Any]:
    """The manifest's bytes decoded once the limits allow (module docstring), with its required
    fields' types checked; ArtifactError naming what is wrong."""
    _check_manifest_bytes(raw, where)
    try:
        manifest = msgspec.json.decode(raw)
    except msgspec.DecodeError as exc:
        raise ArtifactError(f"{where}: corrupt manifest ({exc})") from None
    except RecursionError:
        raise ArtifactError(f"{where}: nested too deep to decode; at most {MAX_MANIFEST_DEPTH} "
                            "(MAX_MANIFEST_DEPTH)") from None
    if not isinstance(manifest, dict):
        raise ArtifactError(f"{where}: the manifest must be a JSON object")
    _check_manifest_shape(manifest, where)
    _check_manifest_types(manifest, where)
    return manifest


def _manifest_sum(d: Path) -> str | None:
    """The SHA-256 ``manifest.sha256`` records (None: there is no such file); ArtifactError when it is
    not one line of ``sha256sum`` output for ``manifest.json``."""
    spath = d / MANIFEST_SUM
    try:
        with spath.open("rb") as fh:
            raw = fh.read(_MAX_SUM_BYTES + 1)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ArtifactError(f"{spath}: unreadable ({exc.strerror})") from None
    m = _SUM_RE.fullmatch(raw)
    if m is None:
        raise ArtifactError(f"{spath}: not a SHA-256 line for {MANIFEST} ('<64 hex digits>  {MANIFEST}')")
    return m.group(1).decode()


def read_manifest(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The manifest of a version directory, checked against its checksum and the limits of the module
    docstring before it is decoded, and its required fields' types after (ArtifactError naming what
    is wrong)."""
    d = Path(path)
    mpath = d / MANIFEST
    where = f"{d.parent.name}/{d.name}/{MANIFEST}"
    try:
        with mpath.open("rb") as fh:
            raw = fh.read(MAX_MANIFEST_BYTES + 1)
    except FileNotFoundError:
        raise ArtifactError(f"{d}: no {MANIFEST}; not a model artifact") from None
    except OSError as exc:
        raise ArtifactError(f"{mpath}: unreadable ({exc.strerror})") from None
    if len(raw) > MAX_MANIFEST_BYTES:
        raise ArtifactError(f"{mpath}: more than {MAX_MANIFEST_BYTES} bytes; a manifest has at most "
                            f"{MAX_MANIFEST_BYTES}")
    sealed = _manifest_sum(d)
    if sealed is not None and hashlib.sha256(raw).hexdigest() != sealed:
        raise ArtifactError(f"{mpath}: SHA-256 does not match {MANIFEST_SUM} (edited or damaged after it was saved)")
    manifest = _decode_manifest(raw, where)
    if manifest["schema_version"] not in READABLE_SCHEMA_VERSIONS:
        raise ArtifactError(
            f"{where}: schema version {manifest['schema_version']!r} is not supported "
            f"(this tunemix reads versions {', '.join(map(str, READABLE_SCHEMA_VERSIONS))})"
        )
    if sealed is None and manifest["schema_version"] not in UNSEALED_SCHEMA_VERSIONS:
        raise ArtifactError(f"{d}: {MANIFEST_SUM} is missing (schema version {manifest['schema_version']} "
                            "manifests are covered by it)")
    return manifest


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
    manifest = read_manifest(d)
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
