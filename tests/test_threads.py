"""``tunemix.core.threads.on_threads``: every part runs once, errors come back after every part has
ended, and a forked child gets a pool of its own."""

from __future__ import annotations

import multiprocessing
import threading

import numpy as np
import pytest

from tunemix.core.threads import on_threads


@pytest.mark.parametrize("parts", [1, 2, 5])
def test_every_part_runs_once(parts: int) -> None:
    seen: list[int] = []
    lock = threading.Lock()

    def part(p: int) -> None:
        with lock:
            seen.append(p)

    on_threads(part, parts)
    assert sorted(seen) == list(range(parts))


def test_part_zero_runs_on_the_calling_thread() -> None:
    where: dict[int, int] = {}
    on_threads(lambda p: where.__setitem__(p, threading.get_ident()), 3)
    assert where[0] == threading.get_ident()


def test_an_error_comes_back_after_every_part_ended() -> None:
    """Part 1 fails at once; part 0 waits for part 2, which is still running when the error is
    raised: on_threads must not return (raise) before part 2 has written its result."""
    done = np.zeros(3)
    started = threading.Event()

    def part(p: int) -> None:
        if p == 1:
            raise ValueError("part 1 failed")
        if p == 2:
            started.set()
            threading.Event().wait(0.05)  # a slow part: the caller must wait for it, not for a clock
            done[2] = 1.0
        else:
            started.wait()
            done[0] = 1.0

    with pytest.raises(ValueError, match="part 1 failed"):
        on_threads(part, 3)
    assert done[0] == 1.0 and done[2] == 1.0


def _child(conn: object) -> None:
    out: list[int] = []
    on_threads(lambda p: out.append(p), 2)
    conn.send(sorted(out))  # type: ignore[attr-defined]


def test_a_forked_child_gets_a_pool_of_its_own() -> None:
    """The parent's pool threads do not exist in a forked child: submitting to the inherited pool
    would wait forever; on_threads makes a new one there."""
    on_threads(lambda p: None, 2)  # the parent's pool exists
    ctx = multiprocessing.get_context("fork")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_child, args=(child,))
    proc.start()
    assert parent.poll(60), "the child did not answer"
    assert parent.recv() == [0, 1]
    proc.join()
    assert proc.exitcode == 0



def test_a_fit_holds_blas_to_one_thread_and_gives_the_threads_back() -> None:
    """``one_blas_thread``: inside, every BLAS library loaded (numpy's, and scipy's, which it loads
    first) runs one thread; after, each library loaded before has the threads it had."""
    threadpoolctl = pytest.importorskip("threadpoolctl")
    from tunemix.core.threads import one_blas_thread

    def blas() -> dict[str, int]:
        return {i["filepath"]: i["num_threads"] for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"}

    with threadpoolctl.threadpool_limits(limits=2, user_api="blas"):
        before = blas()
        with one_blas_thread():
            inside = blas()
            assert inside and set(inside.values()) == {1}  # scipy's own OpenBLAS too, when it has one
        after = blas()
        assert before and all(after[path] == before[path] for path in before)
