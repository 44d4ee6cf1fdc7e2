"""``forest.claim``: the atomic counter by which the threads running the forest and calibration
kernels (``tunemix.core.threads.on_threads``) take work items. Every item must go to exactly one
thread."""

from __future__ import annotations

import numba
import numpy as np
import pytest
from numba import njit

from tunemix.core.scoring.forest_kernel import claim
from tunemix.core.threads import on_threads


@njit(nogil=True)
def _take_all(counter: np.ndarray, hits: np.ndarray, taken_by: np.ndarray, t: int) -> None:  # pragma: no cover
    n = hits.shape[0]
    i = claim(counter, 1)
    while i < n:
        hits[i] += 1
        taken_by[i] = t
        i = claim(counter, 1)


def test_claim_returns_the_value_before_and_counts_its_slot() -> None:
    counter = np.array([5, 40], dtype=np.int64)

    @njit
    def twice(c: np.ndarray) -> tuple[int, int]:  # pragma: no cover
        return claim(c, 1), claim(c, 1)

    assert twice(counter) == (40, 41)
    assert counter.tolist() == [5, 42]


def test_threads_taking_items_take_each_exactly_once() -> None:
    """200,000 items taken one at a time by two threads: a plain read-then-write increment loses
    updates here (two threads get the same item, some item counts 2), an atomic one never does."""
    if int(numba.config.NUMBA_NUM_THREADS) < 2:  # type: ignore[attr-defined]
        pytest.skip("numba has one thread here")
    for _ in range(3):
        n = 200_000
        counter = np.zeros(2, dtype=np.int64)
        hits = np.zeros(n, dtype=np.int64)
        taken_by = np.full(n, -1, dtype=np.int64)
        on_threads(lambda t, c=counter, h=hits, b=taken_by: _take_all(c, h, b, t), 2)
        assert hits.min() == 1 and hits.max() == 1
        assert counter[0] == 0  # the other slot is untouched
        assert counter[1] == n + 2  # each thread's last claim finds nothing left
        assert set(np.unique(taken_by).tolist()) <= {0, 1}


def test_claim_rejects_what_is_not_a_contiguous_int64_vector() -> None:
    @njit
    def bad(c: np.ndarray) -> int:  # pragma: no cover
        return claim(c, 0)

    with pytest.raises(numba.core.errors.TypingError):
        bad(np.zeros(2, dtype=np.int32))
