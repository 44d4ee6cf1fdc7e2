"""Compiled code shipped with the package: numba's cache of every kernel, built once for a portable
CPU target and placed in the user's cache on the first kernel a process loads, so that a first fit
on an empty cache loads its kernels instead of compiling them.

**What is shipped.** ``python -m tunemix.compile.ship`` (the wheel's and the image's build step)
runs ``tunemix warm`` with ``NUMBA_CPU_NAME=generic`` (x86-64 code without the host's extensions,
which runs on any x86-64 CPU) on an empty cache and copies the result into ``tunemix/_compiled``
(``SHIPPED``): ``manifest.json`` (``MANIFEST``: the sources' digest, numba's and Python's versions,
the target) and, under ``cache/``, numba's index (``.nbi``) and data (``.nbc``) files of each
package folder, under the folder's path in the package (``.`` for its root) (numba's cache keeps them under
``<cache>/<folder name>_<sha1 of the folder's absolute path>``: the shipped copy is independent of
where the package is installed). The folder is not in git; a checkout without the build step has
none, and everything below is a no-op there.

**Seeding.** numba keys a cached specialisation by (signature, ``codegen.magic_tuple()``: target
triple, CPU name, CPU features, bytecode hashes); generic code does not match the host's key, so
``seed`` rewrites the key for the host while it copies: the user's cache then maps the host's key
to the generic object code, which numba loads and links as it loads its own. It runs once per
process, on the first kernel loaded (``tunemix.core.numba_cache.install`` wraps numba's load: the
host's magic tuple is in the key it loads), and from ``tunemix.compile.warm.ensure_warm`` before
the warm-up decides whether to compile. It copies nothing when:

- ``TUNEMIX_SHIPPED_CACHE=0`` (a path there names another shipped folder, as the tests do);
- the package has no shipped folder (an editable or source install without the build step);
- the manifest's digest is not ``sources_digest`` of this package's sources, or numba's or
  Python's version or the target triple differ (code built from other sources is never loaded);
- the marker of this digest and host key is in the user's cache (seeded already: one ``stat``).

Each index is merged under the exclusive ``flock`` numba's save takes in
``tunemix.core.numba_cache`` (a reader holds it shared): an entry the user's cache holds for the
host's key (host code, compiled here) is kept, a data file is written under a free name before the
index that names it, and the index and the marker are written to a temporary name and renamed. Two
processes seeding at once merge the same entries once each; a reader meanwhile sees the index
before or after, never half of it.

**Speed.** Generic code lacks the host's vector extensions: docs/deployment.md, "Cold start and the
numba cache", has the measured cost in fitting and scoring and when the host's own code replaces it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import pickle
import platform
import shutil
import sys
import uuid
from pathlib import Path
from typing import Any

from tunemix.core.numba_cache import PACKAGE, cache_dir, locked, sources_digest

log = logging.getLogger(__name__)

#: the shipped cache in an installed package (built by ``python -m tunemix.compile.ship``)
SHIPPED = PACKAGE / "_compiled"
#: what the shipped cache was built from and for, in its folder
MANIFEST = "manifest.json"
#: the files under the shipped folder, by package folder
FILES = "cache"
#: the marker a seeded cache holds, per digest and host key
MARKER = "tunemix-shipped-{digest}-{host}.json"
#: the manifest's format
FORMAT = 1

_seeded: set[tuple[str, Any]] = set()


def shipped_dir() -> Path | None:
    """The shipped cache this process seeds from (``TUNEMIX_SHIPPED_CACHE``: ``0`` none, a path
    that folder; unset, the package's), or None."""
    raw = os.environ.get("TUNEMIX_SHIPPED_CACHE", "").strip()
    if raw == "0":
        return None
    return Path(raw) if raw else SHIPPED


def subpath(folder: Path) -> str:
    """Where numba's ``NUMBA_CACHE_DIR`` locator caches the kernels of a module in ``folder``."""
    from numba.core.caching import UserProvidedCacheLocator

    return str(UserProvidedCacheLocator.get_suitable_cache_subpath(str(folder / "module.py")))


def package_folders(root: Path = PACKAGE) -> dict[str, str]:
    """numba's cache folder name of every folder of the package, to its path in the package."""
    folders = [root, *(p for p in root.rglob("*") if p.is_dir() and p.name != "__pycache__")]
    return {subpath(f): f.relative_to(root).as_posix() for f in folders}


def environment() -> dict[str, str]:
    """What a shipped cache must have been built with to be loaded here (besides the sources)."""
    import numba

    python = f"{sys.version_info[0]}.{sys.version_info[1]}{getattr(sys, 'abiflags', '')}"
    return {"numba": numba.__version__, "python": python, "machine": platform.machine()}


def read_manifest(shipped: Path) -> dict[str, Any] | None:
    """The shipped cache's manifest, or None when there is none."""
    try:
        manifest = json.loads((shipped / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    return manifest if isinstance(manifest, dict) else None


def refusal(manifest: dict[str, Any], host_magic: Any) -> str | None:
    """Why this package cannot load the shipped cache of ``manifest`` (None: it can)."""
    if manifest.get("format") != FORMAT:
        return f"format {manifest.get('format')!r}, not {FORMAT}"
    digest = sources_digest(PACKAGE).hex()
    if manifest.get("digest") != digest:
        return f"built from other sources (digest {str(manifest.get('digest'))[:16]}, these {digest[:16]})"
    here = environment()
    for key, value in here.items():
        if manifest.get(key) != value:
            return f"built for {key} {manifest.get(key)!r}, this is {value!r}"
    magic = manifest.get("magic") or [None]
    if magic[0] != host_magic[0]:
        return f"built for the target {magic[0]!r}, this host is {host_magic[0]!r}"
    return None


def marker(cache: Path, digest: str, host_magic: Any) -> Path:
    host = hashlib.sha256(repr(tuple(host_magic)).encode()).hexdigest()[:16]
    return cache / MARKER.format(digest=digest[:16], host=host)


def host_magic_tuple() -> Any:
    """numba's key of this host's code (``codegen.magic_tuple()``)."""
    from numba.core.registry import cpu_target

    return cpu_target.target_context.codegen().magic_tuple()


def seed(host_magic: Any = None, cache: Path | None = None) -> dict[str, Any]:
    """Place the shipped cache in ``cache`` (default: this process's) under ``host_magic`` (default:
    this host's key), once per process (module docstring). Returns what it did: ``status`` is
    ``off``, ``absent``, ``refused`` (with ``reason``), ``seeded already`` or ``seeded`` (with
    ``indexes``, ``entries``, ``kept``: entries the cache held already); ``complete`` is the
    manifest's word that the shipped cache holds every kernel ``tunemix warm`` compiles."""
    shipped = shipped_dir()
    if shipped is None:
        return {"status": "off"}
    manifest = read_manifest(shipped)
    if manifest is None:
        return {"status": "absent"}
    host_magic = tuple(host_magic) if host_magic is not None else host_magic_tuple()
    cache = cache if cache is not None else cache_dir()
    done = {"complete": bool(manifest.get("complete"))}
    if (str(cache), host_magic) in _seeded:
        return {"status": "seeded already", **done}
    reason = refusal(manifest, host_magic)
    if reason is not None:
        log.info("the shipped numba cache in %s is not used: %s", shipped, reason)
        _seeded.add((str(cache), host_magic))
        return {"status": "refused", "reason": reason}
    mark = marker(cache, manifest["digest"], host_magic)
    if mark.exists():
        _seeded.add((str(cache), host_magic))
        return {"status": "seeded already", **done}
    folders = package_folders()
    by_path = {rel: name for name, rel in folders.items()}
    indexes = entries = kept = 0
    source_magic = tuple(manifest["magic"])
    try:
        for index in sorted((shipped / FILES).rglob("*.nbi")):
            rel = index.parent.relative_to(shipped / FILES).as_posix()
            if rel not in by_path:  # a folder this package does not have
                continue
            added, held = _merge(index, cache / by_path[rel], source_magic, host_magic)
            indexes, entries, kept = indexes + 1, entries + added, kept + held
        _write_atomic(mark, json.dumps({"digest": manifest["digest"], "host": list(map(str, host_magic)),
                                        "from": str(shipped), "indexes": indexes, "entries": entries}).encode())
    except OSError as exc:  # a cache that cannot be written: numba compiles as it would without
        log.warning("could not seed the numba cache %s from %s: %s", cache, shipped, exc)
        _seeded.add((str(cache), host_magic))
        return {"status": "refused", "reason": f"cannot write the cache: {exc}"}
    _seeded.add((str(cache), host_magic))
    log.info("seeded the numba cache %s from %s: %d entries of %d kernels (%d held already)", cache, shipped,
             entries, indexes, kept)
    return {"status": "seeded", "indexes": indexes, "entries": entries, "kept": kept, **done}


def _merge(index: Path, target: Path, source_magic: tuple[Any, ...], host_magic: tuple[Any, ...],
           replace: bool = False) -> tuple[int, int]:
    """The entries of index ``index`` for ``source_magic``, keyed for ``host_magic``, added to
    ``target``'s index of the same name: (entries written, entries the target held already). An
    entry the target holds is kept, or with ``replace`` written over (its old data file removed
    after the index is written without it)."""
    import numba
    from numba.core.caching import IndexDataCacheFile

    with index.open("rb") as f:
        version = pickle.load(f)
        stamp, overloads = pickle.loads(f.read())
    if version != numba.__version__:
        return 0, 0
    base = index.name[: -len(".nbi")]
    target.mkdir(parents=True, exist_ok=True)
    cache_file = IndexDataCacheFile(cache_path=str(target), filename_base=base, source_stamp=stamp)
    added = held = 0
    with locked(str(target / index.name) + ".lock", exclusive=True):
        current = cache_file._load_index()  # {} when absent, of another numba, or of other sources
        used = set(current.values())
        replaced: list[str] = []
        for key, name in overloads.items():
            if tuple(key[1]) != source_magic:
                continue
            host_key = (key[0], host_magic, *key[2:])
            if host_key in current:
                held += 1
                if not replace:
                    continue
                replaced.append(current[host_key])
            number = 1
            while cache_file._data_name(number) in used:
                number += 1
            data_name = cache_file._data_name(number)
            used.add(data_name)
            _copy_atomic(index.parent / name, target / data_name)
            current[host_key] = data_name
            added += 1
        if added:
            cache_file._save_index(current)  # a temporary file renamed over the index
        for name in replaced:  # readers hold the lock shared: none is reading it
            (target / name).unlink(missing_ok=True)
    return added, held


def merge_cache(built: Path, cache: Path, magic: tuple[Any, ...]) -> dict[str, int]:
    """The entries for ``magic`` of this package's kernels in numba cache ``built`` written over
    those of ``cache`` (``tunemix.compile.host_code``: the host's own code over the shipped)."""
    folders = package_folders()
    indexes = entries = 0
    for index in sorted(built.glob("*/*.nbi")):
        if index.parent.name in folders:
            written, _ = _merge(index, cache / index.parent.name, magic, magic, replace=True)
            indexes, entries = indexes + 1, entries + written
    return {"indexes": indexes, "entries": entries}


def _copy_atomic(source: Path, destination: Path) -> None:
    tmp = destination.with_name(f"{destination.name}.tmp.{uuid.uuid4().hex[:16]}")
    try:
        shutil.copyfile(source, tmp)
        os.replace(tmp, destination)
    finally:
        tmp.unlink(missing_ok=True)


def _write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.tmp.{uuid.uuid4().hex[:16]}")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
