"""The scoring runtime of a process, set once at start-up: scoring threads, the list length below
which scoring stays on one thread, BLAS threads and the OpenMP wait policy.

``configure`` is the one place a service (``tunemix.service.main``) or a benchmark sets them; nothing writes
the environment or a library's thread pool at import.

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

import os

from tunemix.core.scoring import forest


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
    forest.set_scoring_threads(scoring_threads)
    forest.set_parallel_min_documents(parallel_min_documents)
    blas = limit_blas_threads(blas_threads)
    return {"scoring_threads": forest.get_scoring_threads(), "parallel_min_documents": parallel_min_documents,
            "blas_threads": blas_threads, "blas_libraries": len(blas), "omp_wait_policy": policy}
