"""The scoring runtime of a process: how many threads scoring may use, the list length below which
it stays on one thread, BLAS threads and the OpenMP wait policy.

``configure`` is the one place a service (``tunemix.service.main``) or a benchmark sets them at
start-up; nothing writes the environment or a library's thread pool at import. ``run_on_threads``
is the policy the forest pass and the calibration step share: several threads for a list that is
long enough, when no other parallel run is in progress; ``single_threaded`` caps the calling
thread at one (a service does so when other requests are scoring or waiting).

- **OpenMP wait policy.** Scoring launches no OpenMP threads (its kernels run on Python threads,
  ``tunemix.core.threads``); ``configure`` sets ``OMP_WAIT_POLICY=PASSIVE`` unless the user set a
  policy, for any OpenMP runtime loaded beside it: idle OpenMP threads that spin take the cores
  the scoring threads need (the MQ2008 ensemble scored on two OpenMP threads, 100 documents, the
  other core loaded: median 16.0 ms spinning against 1.57 ms passive; 1 thread: 2.08 ms).
- **BLAS threads** (threadpoolctl): scoring calls BLAS only for small products (the linear
  members, the views' eigendecomposition) that gain nothing from threads, but OpenBLAS's idle
  threads then spin on the cores numba's scoring threads need (the calibration step takes 7.8 ms
  after the views against 4.5 ms with OpenBLAS held to one thread, 1,000 documents).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator

import numba


def set_openmp_wait_policy(policy: str = "PASSIVE") -> str:
    """Set ``OMP_WAIT_POLICY`` for the OpenMP runtime numba loads at its first parallel launch
    (a user's own setting wins); returns the policy in force."""
    return os.environ.setdefault("OMP_WAIT_POLICY", policy)


def limit_blas_threads(n: int = 1) -> list[str]:
    """Cap the BLAS libraries loaded in this process at ``n`` threads (threadpoolctl); returns the
    libraries capped."""
    if n < 1:
        raise ValueError(f"BLAS threads must be >= 1, got {n}")
    from threadpoolctl import threadpool_info, threadpool_limits

    threadpool_limits(limits=n, user_api="blas")  # called, not entered: the limit stays
    return [str(info.get("filepath", "")) for info in threadpool_info() if info.get("user_api") == "blas"]


def configure(*, scoring_threads: int, parallel_min_documents: int = 0, blas_threads: int = 1,
              openmp_wait_policy: str = "PASSIVE") -> dict[str, object]:
    """Set the whole scoring runtime of this process; returns what is in force (for the log)."""
    policy = set_openmp_wait_policy(openmp_wait_policy)
    set_scoring_threads(scoring_threads)
    set_parallel_min_documents(parallel_min_documents)
    blas = limit_blas_threads(blas_threads)
    return {"scoring_threads": get_scoring_threads(), "parallel_min_documents": parallel_min_documents,
            "blas_threads": blas_threads, "blas_libraries": len(blas), "omp_wait_policy": policy}


_PARALLEL = threading.Lock()


def run_on_threads(n_items: int, big_enough: bool, serial: Callable[[], object],
                   parallel: Callable[[int], object]) -> None:
    """Run ``parallel(threads)`` on ``get_scoring_threads()`` threads (at most ``n_items``; Python
    threads calling a nogil kernel, ``tunemix.core.threads.on_threads``) when there are several and
    the work is ``big_enough``, else ``serial()``. A parallel run already in progress in another
    Python thread makes this one run serially instead of queueing behind it. Lists shorter than
    ``set_parallel_min_documents``'s floor run serially too. The forest pass and the calibration
    step share it."""
    threads = min(get_scoring_threads(), n_items)
    if threads > 1 and big_enough and n_items >= get_parallel_min_documents() and _PARALLEL.acquire(blocking=False):
        try:
            parallel(threads)
        finally:
            _PARALLEL.release()
    else:
        serial()


_scoring_threads = 0  # 0: every numba thread (NUMBA_NUM_THREADS); set by the service per worker
_parallel_min_documents: int | None = None  # None: the library's floor (``library_parallel_min_documents``)

#: The library's floor when nothing set one: a call scoring fewer documents stays on one thread,
#: the service's rule for shared cores (``tunemix.service.settings.SHARED_PARALLEL_MIN_DOCUMENTS``),
#: the same number. On a busy machine a parallel launch waits for a core another process holds:
#: a 100-document list beside two CPU burners on 2 cores takes about a millisecond on one thread
#: and about a hundred on both (``python -m bench.bench_library_predict``).
LIBRARY_PARALLEL_MIN_DOCUMENTS = 256


def library_parallel_min_documents() -> int:
    """``TUNEMIX_PARALLEL_MIN_DOCUMENTS`` when set (the service's variable, same meaning), else
    ``LIBRARY_PARALLEL_MIN_DOCUMENTS``: the floor of a process nothing configured (the library,
    the CLI, a notebook)."""
    import os

    raw = os.environ.get("TUNEMIX_PARALLEL_MIN_DOCUMENTS", "").strip()
    if not raw:
        return LIBRARY_PARALLEL_MIN_DOCUMENTS
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"TUNEMIX_PARALLEL_MIN_DOCUMENTS={raw!r}: expected a whole number of documents "
                         "(0: only the work decides)") from None
    if value < 0:
        raise ValueError(f"TUNEMIX_PARALLEL_MIN_DOCUMENTS={raw!r}: must be >= 0")
    return value


def set_parallel_min_documents(n: int) -> None:
    """Lists of fewer than ``n`` documents score on one thread (0: only the work decides).

    Several uvicorn workers sharing the cores set it: a short list then costs its worker a
    single core instead of waking a second thread that another worker's request needs, while
    a long list still takes every core (see ``tunemix.service.settings.Settings.parallel_min_documents``).
    Unset, the floor is ``library_parallel_min_documents()``.
    """
    global _parallel_min_documents
    if n < 0:
        raise ValueError(f"parallel_min_documents must be >= 0, got {n}")
    _parallel_min_documents = n


def get_parallel_min_documents() -> int:
    """The floor set by ``set_parallel_min_documents``, else the library's
    (``library_parallel_min_documents``: ``TUNEMIX_PARALLEL_MIN_DOCUMENTS`` or 256), read once."""
    global _parallel_min_documents
    if _parallel_min_documents is None:
        _parallel_min_documents = library_parallel_min_documents()
    return _parallel_min_documents


def set_scoring_threads(n: int) -> None:
    """Threads ``score_forest`` may use in this process (at most numba's pool size).

    A service sets it per worker process; results do not depend on this number.
    """
    global _scoring_threads
    if n < 1:
        raise ValueError(f"scoring threads must be >= 1, got {n}")
    _scoring_threads = n


_local = threading.local()  # this Python thread's cap (``single_threaded``)


@contextlib.contextmanager
def single_threaded() -> Iterator[None]:
    """Score on this thread alone inside the block (a service does so when other requests are
    scoring or waiting: side by side, one thread each spends the cores better than one request
    on all of them). Results do not depend on it."""
    before = getattr(_local, "cap", None)
    _local.cap = 1
    try:
        yield
    finally:
        _local.cap = before


def get_scoring_threads() -> int:
    """The threads scoring uses: the setting, capped by numba's thread pool and by
    ``single_threaded`` on the calling thread."""
    if getattr(_local, "cap", None) == 1:
        return 1
    pool = int(numba.config.NUMBA_NUM_THREADS)  # type: ignore[attr-defined]
    return pool if _scoring_threads == 0 else min(_scoring_threads, pool)
