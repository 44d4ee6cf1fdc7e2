"""numba's on-disk cache of tunemix's kernels: one location for every entry point, and one process
at a time writing an entry.

**Where.** ``NUMBA_CACHE_DIR`` when it is set; else, in a virtual environment that can be
written, ``<environment>/numba-cache``; else the user's cache directory
(``$XDG_CACHE_HOME`` or ``~/.cache``, then ``tunemix/numba-cache``). ``use_cache_dir`` (run
when this module is first imported, before any kernel is defined: every module with cached
kernels imports it) sets numba's cache to that place and exports it to ``NUMBA_CACHE_DIR``, so
the ``tunemix`` command, ``import tunemix``, ``python -m tunemix.service``, their child processes
and ``make`` all compile into, and load from, the same cache. Without it numba caches beside each
source file, in ``__pycache__``, where an installed package may not write.

**One writer at a time.**
numba saves a compiled signature in two steps (``numba.core.caching.IndexDataCacheFile.save``):
it reads the function's index, picks the first data file name the index does not use, writes the
index, then the data file. Two processes saving two signatures of one function at the same time
can both read the index before either writes it, pick the same name, and leave an index that
maps one signature to the other's machine code (numba/numba#10128 is the same race for
gufuncs; its maintainers suggest a file lock). ``tunemix warm`` compiles in two processes, and a
fit on a cold cache compiles in its worker processes, so both can meet it. ``install`` (run when
this module is first imported: every module with cached kernels imports it) wraps the
save in an exclusive ``flock`` on a lock file beside the function's index, and the load in a
shared one (a reader then never sees an index entry whose data file is not written yet). Where
the lock file cannot be opened (a read-only cache, which numba does not write either) or there is
no ``fcntl`` (Windows), numba runs as it is.

**Shipped code.** The first kernel a process loads first places the compiled code shipped with
the package (``tunemix/_compiled``, when the wheel's build step made it) in this cache, under the
same lock (``seed_shipped``, ``tunemix.core.shipped_cache``).

**Stale code.** numba keys a cached function by the text of its own source file only, but a
kernel's machine code holds the kernels it calls, compiled in: after a change to one module (an
upgrade, an edit), a kernel of another module that calls into it would load its old code from
the cache and compute what the old version computed. ``stamp_sources`` (run with ``install``
for the package) adds to the stamp of every function of the package a digest of the text of all
its modules that import numba (``sources_digest``, sha256, the 26 modules that define kernels,
read once per process that loads a kernel): any change to any of them recompiles every kernel of
the package once. A module that only names numba (a docstring, a setting) defines no kernel and
is not in the digest: an edit of it recompiles nothing.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import os
import re
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

_installed = False
#: package folders whose functions' cache stamps carry their digest (``stamp_sources``)
_ROOTS: list[Path] = []
#: the package's folder
PACKAGE = Path(__file__).resolve().parents[1]
#: a module that defines kernels imports numba
_IMPORTS_NUMBA = re.compile(rb"^[ \t]*(?:import numba\b|from numba[ .])", re.MULTILINE)


def default_cache_dir() -> Path:
    """The cache of this installation when ``NUMBA_CACHE_DIR`` is not set (module docstring)."""
    prefix = Path(sys.prefix)
    if sys.prefix != sys.base_prefix and os.access(prefix, os.W_OK):
        return prefix / "numba-cache"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tunemix" / "numba-cache"


def use_cache_dir() -> Path:
    """Point numba's cache at ``NUMBA_CACHE_DIR``, or at ``default_cache_dir()`` (then exported to
    ``NUMBA_CACHE_DIR`` for child processes); returns it. numba reads the setting when a kernel
    is defined, so this runs before tunemix defines any."""
    from numba.core import config

    configured = os.environ.get("NUMBA_CACHE_DIR", "").strip()
    where = Path(configured) if configured else default_cache_dir()
    if not configured:
        os.environ["NUMBA_CACHE_DIR"] = str(where)
    config.CACHE_DIR = str(where)  # type: ignore[attr-defined]
    return where


def cache_dir() -> Path:
    """Where numba caches tunemix's kernels in this process."""
    from numba.core import config

    configured = str(getattr(config, "CACHE_DIR", "") or "")
    return Path(configured) if configured else use_cache_dir()


@contextlib.contextmanager
def locked(path: str, exclusive: bool) -> Iterator[None]:
    """Hold ``flock`` on ``path`` (made if absent) inside the block; nothing if it cannot be opened."""
    fd = -1
    for flags in (os.O_RDWR | os.O_CREAT, os.O_RDONLY):
        try:
            fd = os.open(path, flags, 0o644)
            break
        except OSError:
            continue
    if fd < 0 or fcntl is None:
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


@functools.cache
def sources_digest(root: Path) -> bytes:
    """sha256 of the text of every module under ``root`` that imports numba (``import numba`` or
    ``from numba ...`` at the start of a line), with its path, in path order."""
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        text = path.read_bytes()
        if _IMPORTS_NUMBA.search(text):
            digest.update(str(path.relative_to(root)).encode() + b"\0" + text + b"\0")
    return digest.digest()


def stamp_sources(root: Path) -> None:
    """The cache stamp of every function defined under ``root`` also carries ``sources_digest(root)``
    (module docstring, "Stale code"): numba's own stamp is the hash of the function's file."""
    from numba.core.caching import _SourceFileBackedLocatorMixin

    root = root.resolve()
    if root in _ROOTS:
        return
    _ROOTS.append(root)
    if len(_ROOTS) > 1:
        return  # the stamp below is installed already, and reads _ROOTS
    own = _SourceFileBackedLocatorMixin.get_source_stamp

    def stamp(self: Any) -> Any:
        base = own(self)
        source = Path(getattr(self, "_py_file", "") or ".").resolve()
        for r in _ROOTS:
            if source.is_relative_to(r):
                return (base, sources_digest(r))
        return base

    _SourceFileBackedLocatorMixin.get_source_stamp = stamp  # type: ignore[method-assign]


_seed_lock = threading.Lock()
_seed_tried = False


def seed_shipped(key: Any) -> None:
    """On the first kernel this process loads: the shipped cache placed in this one for the host's
    key (``key[1]``, numba's magic tuple: ``tunemix.core.shipped_cache.seed``); never an error."""
    global _seed_tried
    if _seed_tried:
        return
    with _seed_lock:
        if _seed_tried:
            return
        _seed_tried = True
        magic = key[1] if isinstance(key, tuple) and len(key) == 3 else None
        if not (isinstance(magic, tuple) and len(magic) == 3):  # pragma: no cover - not numba's function key
            return
        try:
            from tunemix.core.shipped_cache import seed

            seed(magic)
        except Exception:  # the kernel then compiles, as without a shipped cache
            logging.getLogger(__name__).warning("seeding the numba cache from the shipped one failed",
                                                exc_info=True)


def install() -> bool:
    """Stamp the package's functions with its sources' digest (``stamp_sources``) and wrap numba's
    cache save and load in the lock (once per process); False where there is no ``fcntl`` (then
    without the lock)."""
    global _installed
    if _installed:
        return True
    stamp_sources(PACKAGE)
    if fcntl is None:  # pragma: no cover - Windows
        return False
    from numba.core.caching import IndexDataCacheFile

    save, load = IndexDataCacheFile.save, IndexDataCacheFile.load

    def locked_save(self: Any, key: Any, data: Any) -> Any:
        index = getattr(self, "_index_path", None)  # numba's own name: without it, numba as it is
        if index is None:  # pragma: no cover
            return save(self, key, data)
        with locked(index + ".lock", exclusive=True):
            return save(self, key, data)

    def locked_load(self: Any, key: Any) -> Any:
        seed_shipped(key)
        index = getattr(self, "_index_path", None)
        if index is None:  # pragma: no cover
            return load(self, key)
        with locked(index + ".lock", exclusive=False):
            return load(self, key)

    IndexDataCacheFile.save = locked_save  # type: ignore[method-assign]
    IndexDataCacheFile.load = locked_load  # type: ignore[method-assign]
    _installed = True
    return True


# imported by every module with cached kernels (``import tunemix.core.numba_cache``), before its first kernel
use_cache_dir()
install()
