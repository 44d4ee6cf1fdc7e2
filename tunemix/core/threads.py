"""Work spread over Python threads that run nogil numba kernels.

The scoring kernels (the forest pass, the calibration step) and the views' big-query kernels
have no ``parallel=True`` twin with a ``prange`` loop: each such twin is a compilation of its own,
and numba's parallel compilation is its slowest (on a quiet 2-core machine ``prange`` twins of
``_calibrate_parallel`` and ``_score_parallel`` take 35.9 s and 10.8 s of the 203 s a fresh cache
then spends compiling, ``tunemix warm``'s per-kernel log). The kernels are ``nogil``, so the
work runs on Python threads calling the one serial kernel: each thread takes the next work item
by an atomic counter (``tunemix.core.scoring.forest_kernel.claim``) or its fixed part, as a ``prange``
body would, so the results are the same to the last bit.

``on_threads(fn, parts)`` calls ``fn(0)`` on the calling thread and ``fn(1) .. fn(parts - 1)``
on a process-wide pool, waits for all of them and re-raises the first error. The pool holds
``NUMBA_NUM_THREADS - 1`` threads (numba's pool size stays the setting that caps scoring
threads); it is made on first use, and made anew in a forked child, whose parent's threads do
not exist there.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None
_pool_pid = -1


def pool_size() -> int:
    """Threads one call may use: ``NUMBA_NUM_THREADS`` (numba's default: the CPU count)."""
    import numba

    return max(1, int(numba.config.NUMBA_NUM_THREADS))  # type: ignore[attr-defined]


def _get_pool() -> ThreadPoolExecutor:
    global _pool, _pool_pid
    with _lock:
        if _pool is None or _pool_pid != os.getpid():
            _pool = ThreadPoolExecutor(max_workers=max(1, pool_size() - 1), thread_name_prefix="tunemix-kernel")
            _pool_pid = os.getpid()
        return _pool


def on_threads(fn: Callable[[int], object], parts: int) -> None:
    """``fn(p)`` for every ``p`` in ``range(parts)``: part 0 on this thread, the others on the
    pool (at most ``pool_size() - 1`` at once); returns when all are done. ``fn`` should call a
    ``nogil`` kernel, else the threads take turns. The first error raised is re-raised, after
    every part has ended (no part is left writing into an array its caller goes on to use)."""
    if parts <= 1:
        fn(0)
        return
    pool = _get_pool()
    futures: list[Future[object]] = [pool.submit(fn, p) for p in range(1, parts)]
    first: BaseException | None = None
    try:
        fn(0)
    except BaseException as exc:  # re-raised below, once the others are done
        first = exc
    for f in futures:
        failed = f.exception()
        if failed is not None and first is None:
            first = failed
    if first is not None:
        raise first


#: threadpoolctl's controllers of the loaded BLAS libraries, one made per state of scipy's linear
#: algebra (loaded or not: it brings its own OpenBLAS); making one scans every loaded library (about
#: 14 ms), reading or limiting its threads afterwards costs microseconds
_blas_controllers: dict[bool, Any] = {}


def one_blas_thread(*, load_scipy: bool = True) -> contextlib.AbstractContextManager[Any]:
    """A context holding BLAS (numpy's and scipy's OpenBLAS) at one thread while the block runs,
    then as they were; nothing to do where every library is at one thread already, as in the
    service (``tunemix.core.scoring.runtime``: a check of the libraries' thread counts, 20-40 us a
    call on the shared 2-core machine at load 4-6, not a limit of about 100 us).

    A fit calls BLAS only for small problems (L-BFGS-B's steps in the calibrators and the relevance
    head's recalibration, least squares on a few columns, the views' small eigendecompositions);
    its parallelism is the runs and the kernels' threads. An OpenBLAS pool of two threads makes
    each L-BFGS-B iteration of a 6-parameter problem take 5.1 ms instead of 0.18 ms on the shared
    2-core machine (load average 5: its threads wake and wait for each call), which is most of
    the calibration stage on MQ2008 (``python -m bench.defaults``; docs/method.md). With
    ``load_scipy`` (a fit) scipy's linear algebra is imported first when installed, so that its own
    OpenBLAS is loaded and capped too (only the libraries loaded when the controller is made are
    capped; numba's first kernel imports it too, for the BLAS of ``np.dot`` in kernels:
    ``numba.np.linalg.ensure_blas``); its optimiser (0.1-0.3 s more of Python) comes later, on a
    thread beside the runs (``tunemix.train.train.optimiser_beside_runs``) or at the
    calibration stage; an explanation, which needs no
    scipy, passes False."""
    if load_scipy:
        with contextlib.suppress(ImportError):
            import scipy.linalg  # noqa: F401 - loads scipy's OpenBLAS before the cap
    key = "scipy.linalg" in sys.modules
    controller = _blas_controllers.get(key)
    if controller is None:
        from threadpoolctl import ThreadpoolController

        controller = _blas_controllers[key] = ThreadpoolController().select(user_api="blas")
    if all(lib.num_threads == 1 for lib in controller.lib_controllers):
        return contextlib.nullcontext()
    return controller.limit(limits=1)
