"""numba's compiler, measured: the seconds a process spends compiling kernels or loading them
from the disk cache (``compile_clock``), each compilation's seconds (``kernel_compile_log``), and
the specialisations compiled or loaded per kernel (``kernel_specialisations``).

numba announces each acquisition of its compiler lock (``numba:compiler_lock``: compiling, or
loading a compiled kernel from the cache) and each compilation from scratch (``numba:compile``)
as events with a start and an end; the listeners below add up the time between them. The
training record separates compilation from work with ``compile_clock``
(``record["numba_compile"]``); ``tunemix warm`` reports the rest (``tunemix.compile.warm``).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any, TypeVar

from numba.core import event

_L = TypeVar("_L", bound=event.Listener)


class CompileClock(event.Listener):
    """Seconds this process spends holding numba's compiler lock (compiling a kernel, or loading
    it from the disk cache), counted once for nested acquisitions, over every thread."""

    def __init__(self) -> None:
        super().__init__()
        self.seconds = 0.0
        self._depth = 0
        self._t0 = 0.0
        self._lock = threading.Lock()

    def on_start(self, event: Any) -> None:
        with self._lock:
            if self._depth == 0:
                self._t0 = time.perf_counter()
            self._depth += 1

    def on_end(self, event: Any) -> None:
        with self._lock:
            self._depth -= 1
            if self._depth == 0:
                self.seconds += time.perf_counter() - self._t0


class KernelCompileLog(event.Listener):
    """Seconds of each compilation from scratch (numba's ``numba:compile`` events: not cache
    loads), per ``module.kernel(signature)``; a kernel that calls others includes their time."""

    def __init__(self) -> None:
        super().__init__()
        self.seconds: dict[str, float] = {}
        self._open: dict[int, tuple[str, float]] = {}
        self._lock = threading.Lock()

    def on_start(self, ev: Any) -> None:
        data = ev.data or {}
        disp = data.get("dispatcher")
        name = f"{getattr(disp, '__module__', '?')}.{getattr(disp, '__name__', '?')}"
        key = f"{name}({', '.join(str(a) for a in data.get('args', ()))})"
        with self._lock:
            self._open[id(ev.data)] = (key, time.perf_counter())

    def on_end(self, ev: Any) -> None:
        with self._lock:
            key, t0 = self._open.pop(id(ev.data), ("?", time.perf_counter()))
            self.seconds[key] = self.seconds.get(key, 0.0) + time.perf_counter() - t0


@contextmanager
def _listening(kind: str, listener: _L) -> Iterator[_L]:
    """``listener`` registered for numba's ``kind`` events inside the block."""
    event.register(kind, listener)
    try:
        yield listener
    finally:
        event.unregister(kind, listener)


def compile_clock() -> AbstractContextManager[CompileClock]:
    """``with compile_clock() as cc: ...`` then ``cc.seconds``."""
    return _listening("numba:compiler_lock", CompileClock())


def kernel_compile_log() -> AbstractContextManager[KernelCompileLog]:
    """``with kernel_compile_log() as k: ...`` then ``k.seconds`` (per kernel and signature)."""
    return _listening("numba:compile", KernelCompileLog())


def kernel_specialisations() -> dict[str, dict[str, int]]:
    """Per numba kernel of the loaded ``tunemix`` modules (``module.function``): its type
    signatures compiled in this process, compiled from scratch (``compiled``) and loaded from the
    disk cache (``loaded``). Several signatures of one kernel are several compilations."""
    from numba.core.dispatcher import Dispatcher

    out: dict[str, dict[str, int]] = {}
    for name, module in list(sys.modules.items()):
        if not name.startswith("tunemix.") or module is None:
            continue
        for attr, obj in list(vars(module).items()):
            if isinstance(obj, Dispatcher) and obj.__module__ == name and obj.signatures:
                stats = obj.stats
                out[f"{name}.{attr}"] = {"signatures": len(obj.signatures),
                                         "compiled": int(sum(stats.cache_misses.values())),
                                         "loaded": int(sum(stats.cache_hits.values()))}
    return out


def dispatcher_counts() -> tuple[int, int]:
    """(specialisations compiled, specialisations loaded from the cache), every kernel."""
    kernels = kernel_specialisations().values()
    return sum(k["compiled"] for k in kernels), sum(k["loaded"] for k in kernels)
