"""Backend and progress plumbing of ``tunemix train``: joblib backends, task lists, progress bars.

Parallelism: runs and calibration jobs go through joblib with the configured backend (``loky``
processes; ``threads``, threads of one process, which share the data instead of copying it: the
LightGBM members and the AdaBoost.MH kernels release the GIL; ``dask`` on a given scheduler or a
local cluster; ``ray``; ``sequential``).
Progress: one bar per task list (``tqdm``, when installed) and, for local backends, one bar over
the boosting iterations of every run, fed by the workers through a manager queue
(:class:`IterationReporter`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any

import joblib

Task = tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]


@contextlib.contextmanager
def parallel_backend(backend: str, n_jobs: int, scheduler: str | None) -> Iterator[int]:
    """Configure joblib for ``backend``; yields the n_jobs to use."""
    if backend == "sequential":
        yield 1
    elif backend == "loky":
        with joblib.parallel_config(backend="loky", n_jobs=n_jobs):
            yield n_jobs
    elif backend == "threads":  # one process: LightGBM and the AdaBoost.MH kernels release the GIL
        with joblib.parallel_config(backend="threading", n_jobs=n_jobs):
            yield n_jobs
    elif backend == "dask":
        try:
            from dask.distributed import Client, LocalCluster
        except ImportError:
            raise ValueError("backend 'dask' needs dask[distributed]: pip install 'tunemix[train]'") from None
        if scheduler:
            client = Client(scheduler)
            cluster = None
        else:
            cluster = LocalCluster(n_workers=n_jobs, threads_per_worker=1, processes=True,
                                   dashboard_address=None)
            client = Client(cluster)
        try:
            with joblib.parallel_config(backend="dask"):
                yield n_jobs
        finally:
            client.close()
            if cluster is not None:
                cluster.close()
    elif backend == "ray":
        try:
            import ray
            from ray.util.joblib import register_ray
        except ImportError:
            raise ValueError("backend 'ray' needs ray, which is not installed: pip install ray") from None
        register_ray()
        ray.init(address=scheduler or None, ignore_reinit_error=True, include_dashboard=False)
        try:
            with joblib.parallel_config(backend="ray"):
                yield n_jobs
        finally:
            ray.shutdown()
    else:
        raise ValueError(f"unknown backend {backend!r}")


def run_parallel(tasks: list[Task], n_jobs: int, desc: str, progress: bool) -> list[Any]:
    """Run ``joblib.delayed`` tasks in parallel with a progress bar; results in task order."""
    if not tasks:
        return []
    bar = progress_bar(len(tasks), desc, progress)
    results: list[Any] = []
    try:
        if n_jobs == 1:
            for func, args, kwargs in tasks:
                results.append(func(*args, **kwargs))
                bar.update(1)
        else:
            for res in joblib.Parallel(n_jobs=n_jobs, return_as="generator")(tasks):
                results.append(res)
                bar.update(1)
    finally:
        bar.close()
    return results


@contextlib.contextmanager
def iteration_bar(total: int, enabled: bool, processes: bool = True) -> Iterator[Any]:
    """A progress bar over boosting iterations of all runs, fed by workers through a manager
    queue (local process pools; ``processes`` False: threads of this process, a plain queue);
    remote backends get the per-job bar only."""
    if not enabled:
        yield None
        return
    import multiprocessing
    import queue as queue_module
    import threading

    manager = multiprocessing.Manager() if processes else None
    queue: Any = manager.Queue() if manager is not None else queue_module.Queue()
    bar = progress_bar(total, "boosting iterations", True, unit="it", upper_bound=True)
    stop = threading.Event()

    def drain() -> None:
        while not stop.is_set() or not queue.empty():
            try:
                bar.update(queue.get(timeout=0.1))
            except queue_module.Empty:
                continue
            except (EOFError, OSError):
                return

    thread = threading.Thread(target=drain, daemon=True)
    thread.start()
    try:
        yield queue
    finally:
        stop.set()
        thread.join(timeout=5)
        bar.close()
        if manager is not None:
            manager.shutdown()


class IterationReporter:
    """A fit callback that sends finished iterations to a queue (at most every ``interval``
    seconds, and once at the end), for the iteration bar in the parent process."""

    def __init__(self, queue: Any, interval: float = 0.25) -> None:
        self.queue = queue
        self.interval = interval
        self.sent = 0
        self.last = time.perf_counter()

    def __call__(self, progress: Any) -> None:
        """``progress.iteration``: iterations finished so far."""
        now = time.perf_counter()
        if now - self.last >= self.interval:
            self.flush(progress.iteration)
            self.last = now

    def flush(self, iteration: int) -> None:
        if iteration > self.sent:
            self.queue.put(iteration - self.sent)
            self.sent = iteration


class _NoBar:
    def update(self, n: int) -> None:
        pass

    def close(self) -> None:
        pass


def progress_bar(total: int, desc: str, progress: bool, unit: str = "job", upper_bound: bool = False) -> Any:
    """A tqdm bar, or a do-nothing one when ``progress`` is off or tqdm is not installed.
    ``upper_bound``: ``total`` is at most what will be done (boosting runs stop early), so the bar
    shows the count, the elapsed time and the rate, and predicts no end."""
    if not progress:
        return _NoBar()
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return _NoBar()
    if upper_bound:
        return tqdm(total=total, desc=desc, unit=unit, leave=True, dynamic_ncols=True,
                    bar_format="{desc}: {n_fmt} of at most {total_fmt} {unit} (runs stop early) "
                               "[{elapsed}, {rate_fmt}]")
    return tqdm(total=total, desc=desc, unit=unit, leave=True, dynamic_ncols=True)
