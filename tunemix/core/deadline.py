"""A deadline and a work budget for one request, checked between batches by the loops that can run long.

The service gives every request a ``Deadline`` (``tunemix.service.deadlines``: ``TUNEMIX_REQUEST_TIMEOUT_S``, or a
shorter or longer one the client asks for, capped by the server), as Vespa's and Elasticsearch's
per-query ``timeout`` and Envoy's request timeout do. Work cannot be stopped from outside a thread
in Python, so the work stops itself: every loop whose length the client controls calls
``check_deadline()`` between batches (evaluation per measure, fusion per query, every forest pass of
``EnsembleModel._sums``, which is how explanations are cut off between batches of coalitions).
A check costs a context-variable read and a clock read (about 0.1 µs); where no deadline is active (the
library used directly) it does nothing.

A deadline may also carry a budget of **forest rows** (one row: one document through every base
classifier): ``charge_rows(n)`` counts them and raises ``BudgetExceeded`` past the budget. The
service gives an explanation such a budget (``TUNEMIX_EXPLAIN_BUDGET`` rows per explained document),
so it is enforced as the work is done, not only estimated before it starts.

The deadline is held in a ``contextvars.ContextVar``: set on a thread by ``Deadline.active()``, it
reaches every function that thread calls without a parameter; anyio's ``to_thread.run_sync``
copies the caller's context into the worker thread as well.

    >>> d = Deadline.after(10.0)
    >>> with d.active():
    ...     check_deadline("step 1")  # passes: 10 s remain
    >>> Deadline.after(-1.0).check("step 2")
    Traceback (most recent call last):
    ...
    DeadlineExceeded: the request's deadline of -1 s passed (at step 2)
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")


class DeadlineExceeded(Exception):
    """The work passed its deadline; ``stage`` names the loop that noticed; ``busy``: the deadline
    passed while the work waited for a thread behind other requests (the worker was busy), not
    while the request's own work ran."""

    def __init__(self, seconds: float, stage: str, *, busy: bool = False) -> None:
        super().__init__(f"the request's deadline of {seconds:g} s passed" + (f" (at {stage})" if stage else ""))
        self.seconds = seconds
        self.stage = stage
        self.busy = busy


class BudgetExceeded(Exception):
    """The work needed more forest rows than its budget allows."""

    def __init__(self, budget: int, used: int, stage: str) -> None:
        super().__init__(f"the work needed more than its budget of {budget} forest rows ({used} counted"
                         + (f", at {stage})" if stage else ")"))
        self.budget = budget
        self.used = used
        self.stage = stage


@dataclass
class Deadline:
    """``at``: the ``time.monotonic()`` instant the work must be done by; ``seconds``: its length
    (for messages); ``row_budget``: forest rows the work may score (None: no limit);
    ``busy``: whether other requests are in flight (the service's probe; None: never), asked only
    when the work finds its deadline passed before it starts."""

    at: float
    seconds: float
    row_budget: int | None = None
    rows: int = field(default=0)
    busy: Callable[[], bool] | None = field(default=None, repr=False)
    #: the ``time.monotonic()`` instant the last piece of work of ``run`` ended (None: none ran yet,
    #: the deadline's start counts)
    idle_since: float | None = field(default=None, repr=False)

    @classmethod
    def after(cls, seconds: float, *, row_budget: int | None = None) -> Deadline:
        """A deadline ``seconds`` from now."""
        return cls(at=time.monotonic() + seconds, seconds=seconds, row_budget=row_budget)

    def remaining(self) -> float:
        """Seconds left (negative once passed)."""
        return self.at - time.monotonic()

    def expired(self) -> bool:
        return time.monotonic() >= self.at

    def check(self, stage: str = "") -> None:
        """Raise ``DeadlineExceeded`` once the deadline has passed."""
        if time.monotonic() >= self.at:
            raise DeadlineExceeded(self.seconds, stage)

    def charge(self, rows: int, stage: str = "") -> None:
        """Count ``rows`` forest rows; raise ``BudgetExceeded`` past the row budget (then the
        deadline is checked too)."""
        self.rows += rows
        if self.row_budget is not None and self.rows > self.row_budget:
            raise BudgetExceeded(self.row_budget, self.rows, stage)
        self.check(stage)

    def within(self, seconds: float, *, row_budget: int | None = None) -> Deadline:
        """A nested deadline: at most ``seconds`` from now and never past this one."""
        at = min(self.at, time.monotonic() + seconds)
        return Deadline(at=at, seconds=min(self.seconds, seconds) if at == self.at else seconds,
                        row_budget=row_budget)

    @contextlib.contextmanager
    def active(self) -> Iterator[Deadline]:
        """Make this the deadline ``check_deadline`` and ``charge_rows`` see, for the block."""
        token = _CURRENT.set(self)
        try:
            yield self
        finally:
            _CURRENT.reset(token)

    def run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` with this deadline active, checked first: work whose deadline passed does
        not start. ``DeadlineExceeded.busy`` says why it passed: while the work waited for a thread
        with other requests in flight (the deadline was still ahead when the request's previous
        work ended, or when the deadline started, and ``busy()`` says so), or not (the request's
        own work used the time, or nothing else held the threads)."""
        if time.monotonic() >= self.at:
            start = self.idle_since if self.idle_since is not None else self.at - self.seconds
            busy = start < self.at and self.busy is not None and self.busy()
            raise DeadlineExceeded(self.seconds, "the start of the work: it waited for a thread behind other "
                                                 "requests" if busy else "the start of the work", busy=busy)
        try:
            with self.active():
                return fn(*args)
        finally:
            self.idle_since = time.monotonic()


_CURRENT: ContextVar[Deadline | None] = ContextVar("tunemix_deadline", default=None)


def current_deadline() -> Deadline | None:
    """The deadline active in this context, if any."""
    return _CURRENT.get()


def check_deadline(stage: str = "") -> None:
    """``current_deadline().check(stage)``; nothing when no deadline is active."""
    d = _CURRENT.get()
    if d is not None and time.monotonic() >= d.at:
        raise DeadlineExceeded(d.seconds, stage)


def step_of_long_work(stage: str = "") -> None:
    """Between two steps of a long piece of work on a thread (a query of a large request read,
    scored or encoded): ``check_deadline(stage)``, then the GIL offered to a waiting thread
    (``time.sleep(0)`` releases it): a thread that wants the GIL otherwise waits for the
    interpreter's switch interval (5 ms) each time, and a small request needs it several times."""
    check_deadline(stage)
    time.sleep(0)


def charge_rows(rows: int, stage: str = "") -> None:
    """``current_deadline().charge(rows, stage)``; nothing when no deadline is active."""
    d = _CURRENT.get()
    if d is not None:
        d.charge(rows, stage)
