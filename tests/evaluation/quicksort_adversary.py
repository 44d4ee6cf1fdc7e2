"""McIlroy's adversary against numba's quicksort ("A killer adversary for quicksort", Software:
Practice and Experience 29(4), 341-344, 1999).

The adversary sorts item ids with numba's own quicksort algorithm and answers each comparison
lazily: every item starts as "gas" (above every value given so far); when two gas items meet,
one of them is frozen to the next value (the one that is not the current pivot candidate), and a
gas item compared with a frozen one is larger. The values it ends with are an input on which the
sort makes exactly the comparisons it made here: quadratically many for numba's median-of-three
quicksort. Gas items never compared with each other are given distinct values at the end, so
the input has no ties (a sort of it has one right answer).

``adversary_numba(n)`` drives numba's pure-Python build of its quicksort
(``numba.misc.quicksort.make_py_quicksort(is_argsort=True)``, the same code ``np.argsort``
compiles inside numba): exact, but about a million comparisons a second. ``adversary(n)`` is a
compiled copy of it for the larger sizes; the tests check that both give the same input.
The result is the array of keys that numba's ``np.argsort`` sorts ascending; ranx sorts the
negated scores, so ``scores = -keys`` is the adversarial run.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from numba import njit
from numba.misc import quicksort

SMALL_QUICKSORT = quicksort.SMALL_QUICKSORT


def adversary_numba(n: int) -> npt.NDArray[np.float64]:
    """The adversarial keys for numba's quicksort argsort, built by numba's own algorithm."""
    gas = float(n)
    val = np.full(n, gas)
    state = {"solid": 0, "candidate": -1}

    def lt(x: int, y: int) -> bool:
        if val[x] == gas and val[y] == gas:
            frozen = x if x == state["candidate"] else y
            val[frozen] = state["solid"]
            state["solid"] += 1
        if val[x] == gas:
            state["candidate"] = x
        elif val[y] == gas:
            state["candidate"] = y
        return bool(val[x] < val[y])

    impl = quicksort.make_py_quicksort(lt=lt, is_argsort=True)
    impl.run_quicksort(np.arange(n))
    return _finish(val, gas, state["solid"])


def _finish(val: npt.NDArray[np.float64], gas: float, solid: int) -> npt.NDArray[np.float64]:
    rest = np.flatnonzero(val == gas)
    val[rest] = solid + np.arange(rest.size)
    return val


@njit(cache=True)
def _adversary_kernel(n):  # pragma: no cover - compiled
    gas = float(n)
    val = np.full(n, gas)
    idx = np.arange(n)
    solid = 0
    candidate = -1
    stack_lo = np.empty(100, dtype=np.int64)
    stack_hi = np.empty(100, dtype=np.int64)
    stack_lo[0] = 0
    stack_hi[0] = n - 1
    depth = 1 if n >= 2 else 0
    # every comparison below is McIlroy's cmp(x, y) < 0 inlined: (x, y) are item ids
    while depth > 0:
        depth -= 1
        low = stack_lo[depth]
        high = stack_hi[depth]
        while high - low >= SMALL_QUICKSORT:
            mid = (low + high) >> 1
            for step in range(3):
                # numba's median of three: LT(R[mid], R[low]), LT(R[high], R[mid]), LT(R[mid], R[low])
                sw = 1 if step == 1 else 0
                x = idx[high] if sw == 1 else idx[mid]
                y = idx[mid] if sw == 1 else idx[low]
                if val[x] == gas and val[y] == gas:
                    if x == candidate:
                        val[x] = solid
                    else:
                        val[y] = solid
                    solid += 1
                if val[x] == gas:
                    candidate = x
                elif val[y] == gas:
                    candidate = y
                if val[x] < val[y]:
                    if sw == 0:
                        idx[low], idx[mid] = idx[mid], idx[low]
                    else:
                        idx[high], idx[mid] = idx[mid], idx[high]
            p = idx[mid]
            idx[high], idx[mid] = idx[mid], idx[high]
            i = low
            j = high - 1
            while True:
                while i < high:
                    x = idx[i]
                    if val[x] == gas and val[p] == gas:
                        if x == candidate:
                            val[x] = solid
                        else:
                            val[p] = solid
                        solid += 1
                    if val[x] == gas:
                        candidate = x
                    elif val[p] == gas:
                        candidate = p
                    if not val[x] < val[p]:
                        break
                    i += 1
                while j >= low:
                    y = idx[j]
                    if val[p] == gas and val[y] == gas:
                        if p == candidate:
                            val[p] = solid
                        else:
                            val[y] = solid
                        solid += 1
                    if val[p] == gas:
                        candidate = p
                    elif val[y] == gas:
                        candidate = y
                    if not val[p] < val[y]:
                        break
                    j -= 1
                if i >= j:
                    break
                idx[i], idx[j] = idx[j], idx[i]
                i += 1
                j -= 1
            idx[i], idx[high] = idx[high], idx[i]
            if high - i > i - low:
                if high > i:
                    stack_lo[depth] = i + 1
                    stack_hi[depth] = high
                    depth += 1
                high = i - 1
            else:
                if i > low:
                    stack_lo[depth] = low
                    stack_hi[depth] = i - 1
                    depth += 1
                low = i + 1
        for i in range(low + 1, high + 1):
            k = idx[i]
            j = i
            while j > low:
                y = idx[j - 1]
                if val[k] == gas and val[y] == gas:
                    if k == candidate:
                        val[k] = solid
                    else:
                        val[y] = solid
                    solid += 1
                if val[k] == gas:
                    candidate = k
                elif val[y] == gas:
                    candidate = y
                if not val[k] < val[y]:
                    break
                idx[j] = idx[j - 1]
                j -= 1
            idx[j] = k
    return val, solid


def adversary(n: int) -> npt.NDArray[np.float64]:
    """:func:`adversary_numba` compiled (same keys; about a hundred times faster)."""
    val, solid = _adversary_kernel(n)
    return _finish(np.asarray(val), float(n), int(solid))


def count_numba_comparisons(keys: npt.NDArray[np.float64]) -> int:
    """How many comparisons numba's quicksort argsort (its pure-Python build) makes on ``keys``."""
    count = [0]

    def lt(a: float, b: float) -> bool:
        count[0] += 1
        return bool(a < b)

    impl = quicksort.make_py_quicksort(lt=lt, is_argsort=True)
    impl.run_quicksort(np.asarray(keys, dtype=np.float64))
    return count[0]
