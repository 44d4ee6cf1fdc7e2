"""The parent process of ``python -m tunemix.service``'s workers: uvicorn's supervisor, told of every worker exit.

uvicorn's ``Multiprocess`` restarts a worker that dies (or stops answering its 5 s health check) but
has no hook for the exit. ``Supervisor`` notes the workers' pids before and after each of its rounds
and buries every pid that went (``tunemix.service.observability.bury_process``: metrics bookkeeping, and the
worker's file in the state directory removed), as gunicorn's ``child_exit`` hook would.
"""

from __future__ import annotations

import inspect
import logging
import socket
from collections.abc import Callable
from typing import Any

from uvicorn import Config, Server
from uvicorn.supervisors import Multiprocess

log = logging.getLogger("tunemix.service")


class Supervisor(Multiprocess):
    """``Multiprocess`` that calls ``on_exit(pid)`` once for each worker that exited."""

    def __init__(self, *args: Any, on_exit: Callable[[int], None], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.on_exit = on_exit

    def _pids(self) -> set[int]:
        return {p.pid for p in self.processes if p.pid is not None}

    def _watch(self, step: Callable[[], None]) -> None:
        before = self._pids()
        step()
        for pid in sorted(before - self._pids()):
            try:
                self.on_exit(pid)
            except Exception:  # never take the supervisor down with its bookkeeping
                log.exception("bookkeeping for the exit of worker %d failed", pid)

    def keep_subprocess_alive(self) -> None:
        self._watch(super().keep_subprocess_alive)

    def handle_signals(self) -> None:  # SIGHUP replaces every worker, SIGTTOU retires one
        self._watch(super().handle_signals)


def serve_workers(config: Config, on_exit: Callable[[int], None]) -> None:
    """Run ``config.workers`` workers under a ``Supervisor`` (what ``uvicorn.run`` does for workers > 1)."""
    sock: socket.socket = config.bind_socket()
    kwargs: dict[str, Any] = {"sockets": [sock], "on_exit": on_exit}
    if "target" in inspect.signature(Multiprocess.__init__).parameters:  # older uvicorn: it takes the target
        kwargs["target"] = Server(config=config).run
    Supervisor(config, **kwargs).run()
