"""Attacker connections for ``bench.cost_attacks``: raw sockets that send a request's head and body
at a chosen rate, or stop one byte short, and read the answer at a chosen rate or never (a small
receive buffer), reopened whenever the server ends them; all driven by one thread (``Crowd``)."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

#: seconds between two rounds of the attackers' loop (sending, reading, watching for closes)
TICK_S = 0.02
_TCP_ESTABLISHED = 1


@dataclass
class Conn:
    """One attacker connection, kept open (reopened when the server ends it) until the attack
    stops: ``request`` (head and body) sent up to ``send_bytes`` bytes at ``send_rate`` bytes a second
    (None: as fast as the socket takes them), the answer read at ``read_rate`` bytes a second (None:
    never; 0 is the same), through a receive buffer of ``rcvbuf`` bytes (None: the system's)."""

    request: bytes
    send_bytes: int
    send_rate: float | None = None
    read_rate: float | None = None
    rcvbuf: int | None = None
    #: seconds a connection is held before the attacker ends it itself (None: until the server does)
    hold_s: float | None = None
    sock: socket.socket | None = None
    started: float = 0.0
    sent: int = 0
    read: int = 0
    head: bytes = b""
    ended: int = 0  # connections ended (by the server, or after hold_s)


@dataclass
class Crowd:
    """Drives ``conns`` on one thread (``TICK_S`` rounds of non-blocking sends, reads and TCP state
    checks); counts what happened to them in ``seen``: ``opened``, ``reset`` (the server aborted
    it), ``closed`` (the server closed it), ``held_to_end`` (the attacker's ``hold_s`` passed),
    ``status_<n>`` (the status lines read). ``done`` is set once every connection has ended at
    least once."""

    host: str
    port: int
    conns: list[Conn]
    seen: Counter[str] = field(default_factory=Counter)
    done: threading.Event = field(default_factory=threading.Event)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        for c in self.conns:
            self._drop(c)

    def _open(self, c: Conn) -> None:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if c.rcvbuf is not None:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, c.rcvbuf)
        try:
            s.connect((self.host, self.port))
        except OSError:
            s.close()
            self.seen["connect_failed"] += 1
            return
        s.setblocking(False)
        c.sock, c.started, c.sent, c.read, c.head = s, time.monotonic(), 0, 0, b""
        self.seen["opened"] += 1

    @staticmethod
    def _drop(c: Conn) -> None:
        if c.sock is not None:
            with contextlib.suppress(OSError):
                c.sock.close()
            c.sock = None

    def _end(self, c: Conn, how: str) -> None:
        self.seen[how] += 1
        self._drop(c)
        c.ended += 1
        if all(x.ended for x in self.conns):
            self.done.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            now = time.monotonic()
            for c in self.conns:
                if c.sock is None:
                    self._open(c)
                    continue
                how = self._step(c, now)
                if how:
                    self._end(c, how)
            self._stop.wait(TICK_S)

    def _step(self, c: Conn, now: float) -> str | None:
        """One round of ``c``: what ended it, if anything did."""
        s = c.sock
        assert s is not None
        elapsed = now - c.started
        state = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 8)[0]
        if state != _TCP_ESTABLISHED:
            with contextlib.suppress(OSError):  # the status line of an answer (a 408, a 503) when one came
                c.head += s.recv(256)
            self._status(c)
            return "closed" if state == 8 else "reset"  # CLOSE_WAIT: the server's FIN; else its RST
        want = c.send_bytes if c.send_rate is None else min(c.send_bytes, int(c.send_rate * elapsed) + 1)
        try:
            while c.sent < want:
                n = s.send(memoryview(c.request)[c.sent:min(want, c.sent + (1 << 20))])
                if not n:
                    break
                c.sent += n
        except BlockingIOError:
            pass
        except OSError:
            return "reset"
        if c.read_rate:
            budget = int(c.read_rate * elapsed) + 1 - c.read
            try:
                while budget > 0:
                    chunk = s.recv(min(budget, 65536))
                    if not chunk:
                        self._status(c)
                        return "closed"
                    c.read += len(chunk)
                    budget -= len(chunk)
                    if len(c.head) < 64:
                        c.head += chunk[:64]
                        self._status(c)
            except BlockingIOError:
                pass
            except OSError:
                return "reset"
        if c.hold_s is not None and elapsed > c.hold_s:
            return "held_to_end"
        return None

    def _status(self, c: Conn) -> None:
        if c.head.startswith(b"HTTP/1.1 ") and len(c.head) >= 12 and not c.head.endswith(b"\x00counted"):
            self.seen[f"status_{c.head[9:12].decode(errors='replace')}"] += 1
            c.head += b"\x00counted"


def http_request(path: str, body: bytes, content_type: str = "application/json", length: int | None = None) -> bytes:
    head = (f"POST {path} HTTP/1.1\r\nHost: attack\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(body) if length is None else length}\r\nConnection: close\r\n\r\n")
    return head.encode() + body
