"""One process at a time writes an entry of numba's on-disk cache.

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
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

_installed = False


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


def install() -> bool:
    """Wrap numba's cache save and load in the lock (once per process); False where there is no
    ``fcntl``."""
    global _installed
    if _installed:
        return True
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
        index = getattr(self, "_index_path", None)
        if index is None:  # pragma: no cover
            return load(self, key)
        with locked(index + ".lock", exclusive=False):
            return load(self, key)

    IndexDataCacheFile.save = locked_save  # type: ignore[method-assign]
    IndexDataCacheFile.load = locked_load  # type: ignore[method-assign]
    _installed = True
    return True


# imported by every module with cached kernels (``import tunemix.core.numba_cache``), before its first compile
install()
