"""What a few clients can hold of a worker, against ``python -m tunemix.service`` with two workers
and the default limits: bodies held one byte short (cut off once they stop arriving; small
requests keep their reserve of the in-flight bytes), and work a small body implies on the event
loop (chosen by its items, not its bytes alone, and under its deadline)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import select
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from fastapi.testclient import TestClient

from tests.service.conftest import N_FEATURES, HealthWatch, rank_body, worker_pids
from tunemix.service.body import body_items
from tunemix.service.settings import Settings

DEFAULTS = Settings()
JSON = {"Content-Type": "application/json"}
TEXT = {"Content-Type": "text/plain"}
X = np.random.default_rng(41).random((100, N_FEATURES)).round(4)


# ---------------------------------------------------------------------------- bodies held one byte short
def tcp_sockets() -> dict[tuple[int, int], tuple[int, int, int]]:
    """``/proc/net/tcp``'s sockets: (local port, remote port) -> (send queue, receive queue, inode)."""
    out = {}
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, remote, queues, inode = fields[1], fields[2], fields[4], int(fields[9])
        tx, rx = (int(v, 16) for v in queues.split(":"))
        out[(int(local.split(":")[1], 16), int(remote.split(":")[1], 16))] = (tx, rx, inode)
    return out


def socket_owner(inode: int, pids: list[int]) -> int | None:
    """The process among ``pids`` that holds the socket ``inode`` open."""
    target = f"socket:[{inode}]"
    for pid in pids:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            with contextlib.suppress(OSError):
                if fd.readlink().as_posix() == target:
                    return pid
    return None


class HeldBody:
    """A connection that declares a body of ``size`` bytes and sends all but its last byte at once."""

    def __init__(self, port: int, size: int) -> None:
        self.port = port
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.client_port = self.sock.getsockname()[1]
        self.head = (b"POST /rank HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     + f"Content-Length: {size}\r\n\r\n".encode())
        self.size = size
        self.stalled_at: float | None = None  # when the last byte sent was sent
        self.refused = False  # the server stopped reading it (an answer before the body ended)

    def send(self) -> None:
        try:
            self.sock.sendall(self.head + b" " * (self.size - 1))
            self.stalled_at = time.monotonic()
        except OSError:
            self.refused = True

    def worker(self, pids: list[int]) -> int | None:
        """The worker that accepted the connection (None until one has)."""
        entry = tcp_sockets().get((self.port, self.client_port))
        return socket_owner(entry[2], pids) if entry is not None and entry[2] else None

    def read_by_server(self) -> bool:
        """Every byte sent has left the kernel's queues into the worker (or the server closed it)."""
        sockets = tcp_sockets()
        server_side = sockets.get((self.port, self.client_port))
        client_side = sockets.get((self.client_port, self.port))
        if server_side is None or client_side is None:
            self.refused = True
            return True
        return client_side[0] == 0 and server_side[1] == 0

    def answered_early(self) -> bool:
        """The server answered before the body ended (its 503 or 413 waits to be read, while the
        closing connection reads and drops the rest of the body)."""
        readable, _, _ = select.select([self.sock], [], [], 0)
        if not readable:
            return False
        try:
            head = self.sock.recv(16, socket.MSG_PEEK)
        except OSError:
            return True
        return not head or head.startswith((b"HTTP/1.1 503 ", b"HTTP/1.1 413 "))

    def answer(self, timeout: float) -> bytes:
        """What the server sends until it closes the connection (waited for, at most ``timeout`` s)."""
        self.sock.settimeout(timeout)
        out = b""
        with contextlib.suppress(ConnectionResetError):
            while chunk := self.sock.recv(65536):
                out += chunk
        return out


def test_bodies_held_one_byte_short_neither_starve_small_requests_nor_stay(
        app_two: tuple[str, subprocess.Popen[bytes]]) -> None:
    """Connections that send 4 MiB - 1 of a 4 MiB body at once and stop, five per worker (about
    40 MB, the attack's whole cost): with admission counting received bytes, four of them held a
    worker's 16 MiB and every small /rank it got was answered 503 for the 30 s of the body
    timeout. Now bodies over TUNEMIX_SMALL_BODY_BYTES hold at most the in-flight bytes less the
    reserve (three of them; the rest are refused, 503), small /rank requests are answered, and a
    body that stops arriving is cut off (408) once TUNEMIX_BODY_STALL_S passes without
    TUNEMIX_BODY_MIN_RATE's bytes."""
    url, proc = app_two
    port = int(url.rsplit(":", 1)[1])
    pids = worker_pids(proc.pid)
    assert len(pids) == 2
    held: list[HeldBody] = []
    owner: dict[HeldBody, int] = {}
    try:
        while min(list(owner.values()).count(p) for p in pids) < 5:  # five accepted by each worker (the event)
            assert len(held) < 100, "one worker accepted every connection"
            h = HeldBody(port, DEFAULTS.max_body_bytes)
            held.append(h)
            while (pid := h.worker(pids)) is None:
                time.sleep(0.005)
            owner[h] = pid
        senders = [threading.Thread(target=h.send) for h in held]
        for t in senders:
            t.start()
        for t in senders:
            t.join(timeout=120)
        assert not any(t.is_alive() for t in senders)
        for h in held:  # the event: every byte sent is in a worker (or the worker refused it)
            waited = time.monotonic()
            while not h.read_by_server():
                assert time.monotonic() - waited < 30, "the server stopped reading a body"
                time.sleep(0.01)
            h.refused = h.refused or h.answered_early()
        holding = [h for h in held if not h.refused]
        for pid in pids:  # each worker holds at least 12 MiB of bodies one byte short
            assert [owner[h] for h in holding].count(pid) >= 3, [owner[h] for h in holding]
        body = json.dumps(rank_body(X, [100])).encode()
        assert len(body) <= DEFAULTS.small_body_bytes
        statuses = [httpx.post(url + "/rank", content=body, headers={**JSON, "Connection": "close"},
                               timeout=None).status_code for _ in range(20)]
        answered, _, _ = select.select([h.sock for h in holding], [], [], 0)
        assert statuses.count(200) >= 18, statuses
        assert not answered  # the held bodies held throughout
        for h in holding:
            answer = h.answer(timeout=DEFAULTS.body_timeout_s + 10)
            assert h.stalled_at is not None
            cut_after = time.monotonic() - h.stalled_at
            assert cut_after < DEFAULTS.body_timeout_s / 2, cut_after
            assert answer.startswith(b"HTTP/1.1 408 "), answer[:300]
            assert b"TUNEMIX_BODY_MIN_RATE" in answer, answer[:400]
    finally:
        for h in held:
            h.sock.close()


def test_large_bodies_leave_the_reserve_to_small_ones() -> None:
    """The accounting: large bodies (past ``small``) together stay within ``limit - reserve``;
    small ones may use the whole limit; a body alone is always let in; releases restore both."""
    from tunemix.service.body import Admission, BodyHold
    from tunemix.service.errors import ServiceError

    adm = Admission(limit=100, reserve=30, small=10)
    a, b, c = BodyHold(adm), BodyHold(adm), BodyHold(adm)
    a.take(8)
    a.take(40)  # past ``small``: its 48 bytes count as large
    assert (adm.held, adm.large) == (48, 48)
    b.take(10)
    with pytest.raises(ServiceError) as refused:
        b.take(15)  # 48 + 25 > 70 for the large bodies
    assert refused.value.status == 503 and "TUNEMIX_INFLIGHT_RESERVE_BYTES" in refused.value.message
    for _ in range(4):
        BodyHold(adm).take(10)  # small bodies take the reserve, and the rest
    assert adm.held == 98
    with pytest.raises(ServiceError, match="TUNEMIX_MAX_INFLIGHT_BYTES"):
        c.take(5)
    a.release()
    assert (adm.held, adm.large) == (50, 0)
    b.take(20)
    assert (adm.held, adm.large) == (70, 30)
    alone = Admission(limit=100, reserve=30, small=10)
    BodyHold(alone).take(100)  # a body alone: let in whatever its size
    assert (alone.held, alone.large) == (100, 100)


# ---------------------------------------------------------------------------- work on the event loop
#: 8,000 one-line LETOR queries: 87 KB, under TUNEMIX_INLINE_MAX_BYTES; about 120 ms of work
MANY_QUERIES = "".join(f"0 qid:{i}\n" for i in range(8000)).encode()


def test_many_queries_in_a_small_body_keep_their_deadline_and_leave_the_loop(
        app_two: tuple[str, subprocess.Popen[bytes]]) -> None:
    """Chosen by bytes alone, this body was worked on the event loop: ``?timeout_s=0.02`` was
    answered 200 after 60-100 ms, and while two clients sent it, half of the time /health waited
    0.18 s or more. Its items (``body_items``) send it to a thread, under its deadline."""
    url, _ = app_two
    assert len(MANY_QUERIES) <= DEFAULTS.inline_max_bytes
    with httpx.Client(base_url=url, timeout=None) as c:
        r = c.post("/rank?timeout_s=0.02", content=MANY_QUERIES, headers=TEXT)
        assert r.status_code == 504, r.text[:300]
        assert "deadline of 0.02 s passed" in r.json()["detail"]
    done = [0, 0]

    def send(i: int) -> None:
        with httpx.Client(base_url=url, timeout=None, headers={"Connection": "close"}) as c:
            while done[i] < 15:
                assert c.post("/rank", content=MANY_QUERIES, headers=TEXT).status_code == 200
                done[i] += 1

    with HealthWatch(url) as watch:
        senders = [threading.Thread(target=send, args=(i,)) for i in range(2)]
        for t in senders:
            t.start()
        for t in senders:
            t.join()
    assert done == [15, 15] and watch.failed is None
    assert time_median(watch.times) < 0.05, time_median(watch.times)  # before: 0.18 s (now 0.005)


def time_median(times: list[float]) -> float:
    """The polls' latencies' median weighted by their duration: half the watched time went to
    polls answered at least this fast. (A plain median counts the many quick polls while the
    worker is idle, and hides that /health waited behind the loop's work most of the time.)"""
    total, acc = sum(times), 0.0
    for t in sorted(times):
        acc += t
        if acc >= total / 2:
            return t
    return 0.0


def on_loop_spy(monkeypatch: pytest.MonkeyPatch, *, until_deadline: bool = False) -> list[bool]:
    """Whether each LETOR body of the test was parsed on the event loop (True) or a thread; with
    ``until_deadline``, the first body's parse starts once its request's deadline has passed (waited
    for on it)."""
    from tunemix.core.deadline import current_deadline
    from tunemix.service import letor
    from tunemix.service.routers import rank

    seen: list[bool] = []
    real = letor.letor_lists

    def spy(*args: Any, **kwargs: Any) -> Any:
        try:
            asyncio.get_running_loop()
            seen.append(True)
        except RuntimeError:
            seen.append(False)
        deadline = current_deadline()
        while until_deadline and len(seen) == 1 and deadline is not None and not deadline.expired():
            threading.Event().wait(max(deadline.remaining(), 0.001))
        return real(*args, **kwargs)

    monkeypatch.setattr(rank, "letor_lists", spy)
    return seen


def test_the_loop_takes_bodies_of_few_items_only(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    seen = on_loop_spy(monkeypatch)
    few = "".join(f"0 qid:q 1:0.5 2:0.25 # docid = d{i}\n" for i in range(100)).encode()
    for body in (few, MANY_QUERIES):
        r = client.post("/rank", content=body, headers=TEXT)
        assert r.status_code == 200, r.text[:300]
    assert seen == [True, False]
    assert body_items(few, "text") <= DEFAULTS.inline_max_items < body_items(MANY_QUERIES, "text")


@pytest.mark.parametrize("shape", ["columnar", "documents", "sparse", "text"])
def test_body_items_count_at_least_the_queries_and_documents(shape: str) -> None:
    n_queries, per_query = 7, 5
    if shape == "text":
        body = "".join(f"0 qid:{q} 1:0.5\n" for q in range(n_queries) for _ in range(per_query)).encode()
    else:
        queries: list[dict[str, Any]] = []
        for q in range(n_queries):
            if shape == "columnar":
                queries.append({"qid": q, "ids": list(range(per_query)), "features": [[0.5] * 3] * per_query})
            else:
                row: Any = [0.5] * 3 if shape == "documents" else {"1": 0.5}
                queries.append({"qid": q, "documents": [{"id": i, "features": row} for i in range(per_query)]})
        body = json.dumps({"queries": queries}).encode()
    assert body_items(body, "text" if shape == "text" else "json") >= n_queries * (per_query + 1) - (
        n_queries if shape == "text" else 0)


def test_the_loop_keeps_the_deadline(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """A body answered on the event loop is checked against its deadline as on a thread: 504 (the
    deadline passes while the loop decodes the body)."""
    seen = on_loop_spy(monkeypatch, until_deadline=True)
    body = b"0 qid:q 1:0.5 # docid = a\n0 qid:q 1:0.25 # docid = b\n"
    r = client.post("/rank?timeout_s=0.5", content=body, headers=TEXT)
    assert r.status_code == 504, r.text[:300]
    assert "deadline of 0.5 s passed" in r.json()["detail"]
    assert seen == [True]
    assert client.post("/rank", content=body, headers=TEXT).status_code == 200


# ---------------------------------------------------------------------------- answers nobody reads
def big_answer_request() -> bytes:
    """A 1.8 MB /rank of 100,000 documents with relevance: a 16 MB answer."""
    n = DEFAULTS.max_documents
    body = json.dumps({"relevance": True, "queries": [{"qid": "q", "ids": list(range(n)),
                                                       "features": [[0] * N_FEATURES] * n}]},
                      separators=(",", ":")).encode()
    return (b"POST /rank HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)


def test_answers_nobody_reads_count_until_written_and_are_cut_off(
        app_two: tuple[str, subprocess.Popen[bytes]]) -> None:
    """Clients that ask for 16 MB answers and read nothing (closing such a connection waits for its
    buffer to be written: forever): the unsent bytes of an answer count as a large body's until
    written (a large body is refused while they fill the large bodies' share; small requests keep
    their reserve; an answer that would take the worker past its in-flight bytes while another is
    unwritten is dropped at once, its connection reset), and a client that takes less than
    TUNEMIX_BODY_MIN_RATE x TUNEMIX_BODY_STALL_S bytes of its answer in TUNEMIX_BODY_STALL_S
    seconds has its connection reset."""
    url, proc = app_two
    port = int(url.rsplit(":", 1)[1])
    pids = worker_pids(proc.pid)
    request = big_answer_request()
    readers: list[socket.socket] = []
    owner: dict[socket.socket, int] = {}
    try:
        while min(list(owner.values()).count(p) for p in pids) < 2:  # two per worker (the event)
            assert len(readers) < 40, "one worker accepted every connection"
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a client that reads nothing
            sock.connect(("127.0.0.1", port))
            readers.append(sock)
            client_port = sock.getsockname()[1]
            while (entry := tcp_sockets().get((port, client_port))) is None or not entry[2] or (
                    pid := socket_owner(entry[2], pids)) is None:
                time.sleep(0.005)
            owner[sock] = pid
        for sock in readers:
            sock.sendall(request)
        started = time.monotonic()
        for sock in readers:  # the event: each answer fills the kernel's buffers (4 MiB at most)
            client_port = sock.getsockname()[1]
            while (entry := tcp_sockets().get((port, client_port))) is not None and entry[0] < 1024 * 1024:
                assert time.monotonic() - started < 120, "no answer"
                time.sleep(0.01)
        # 2 MB: with one worker's unsent answer (16 MB less what the kernel holds, 4 MiB at most), past
        # the large bodies' share (12 MiB)
        large = json.dumps(rank_body(np.zeros((90_000, N_FEATURES)), [90_000]), separators=(",", ":")).encode()
        small = json.dumps(rank_body(X, [100])).encode()
        assert len(small) <= DEFAULTS.small_body_bytes < len(large)
        # the readers whose answers are held (a second answer a worker cannot hold is dropped at once)
        kept = [sock for sock in readers if tcp_sockets().get((port, sock.getsockname()[1])) is not None]
        assert kept

        def held() -> bool:  # every kept reader's connection still open: its unwritten answer counts
            return all(tcp_sockets().get((port, sock.getsockname()[1])) is not None for sock in kept)

        refused: list[int] = []
        for _ in range(6):  # while the unwritten answers hold the large bodies' share (the event: none reset)
            status = httpx.post(url + "/rank", content=large, headers={**JSON, "Connection": "close"},
                                timeout=None).status_code
            if not held():
                break  # a slow machine: the stall deadline came first; what was answered before counts
            refused.append(status)
        assert refused and set(refused) == {503}, refused
        assert {httpx.post(url + "/rank", content=small, headers={**JSON, "Connection": "close"},
                           timeout=None).status_code for _ in range(6)} == {200}
        for sock in readers:  # the event: the server resets the connection
            client_port = sock.getsockname()[1]
            while tcp_sockets().get((port, client_port)) is not None:
                assert time.monotonic() - started < DEFAULTS.body_timeout_s, "a client that reads nothing kept"
                time.sleep(0.05)
        assert httpx.post(url + "/rank", content=large, headers=JSON, timeout=None).status_code == 200
    finally:
        for sock in readers:
            sock.close()


def test_the_reserve_leaves_room_for_one_body_of_the_largest_size() -> None:
    assert DEFAULTS.inflight_reserve() == 4 * 1024 * 1024  # a quarter of 16 MiB
    assert Settings(max_body_bytes=64 * 1024, max_inflight_bytes=100 * 1024).inflight_reserve() == 25 * 1024
    assert Settings(max_body_bytes=64 * 1024, max_inflight_bytes=64 * 1024).inflight_reserve() == 0
    with pytest.raises(ValueError, match="inflight_reserve_bytes"):
        Settings(max_inflight_bytes=8 * 1024 * 1024, inflight_reserve_bytes=5 * 1024 * 1024)
