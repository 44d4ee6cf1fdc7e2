"""Issue 37, reproductions 7 and 8: a version that cannot be loaded (an absurd .npy shape, a zip
bomb) is reported with its reason by /ready and by the requests naming it, and versions named in
rotation load in a thread, one load per version at a time (``python -m tunemix.service`` with two workers,
and the registry in-process for what only it can show)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

import tunemix.service.registry as registry_module
from tests.artifact.tampering import first_member, npy_header, rewrite
from tests.service.conftest import N_FEATURES, Store, copy_version, rank_body, wait_ready
from tests.service.two_workers import TwoWorkers, start_two_workers
from tunemix.core.artifact import MAX_ARRAYS_BYTES
from tunemix.service.main import create_app
from tunemix.service.registry import ModelRegistry, on_event_loop
from tunemix.service.settings import Settings

ROTATION = [f"v{i}" for i in range(3, 9)]  # six versions, more than max_cached_versions (4)


def _body(**extra: Any) -> dict[str, Any]:
    feats = np.random.default_rng(0).normal(size=(6, N_FEATURES)).astype(np.float32)
    return rank_body(feats, [6], **extra)


def _ready_until_settled(server: TwoWorkers) -> httpx.Response:
    """/ready's answer once it says something other than "loading" or "warming" (the event), or
    the exit."""
    while True:
        if server.proc.poll() is not None:
            raise AssertionError(f"the server exited: {server.log_text()[-3000:]}")
        try:
            r = httpx.get(server.url + "/ready", timeout=None, headers={"Connection": "close"})
        except httpx.TransportError:
            continue
        if r.json().get("status") not in ("loading", "warming"):
            return r


def _rank_until_settled(server: TwoWorkers) -> httpx.Response:
    """POST /rank's answer once the worker answering is no longer loading the default model."""
    while True:
        if server.proc.poll() is not None:
            raise AssertionError(f"the server exited: {server.log_text()[-3000:]}")
        r = httpx.post(server.url + "/rank", json=_body(), timeout=None, headers={"Connection": "close"})
        if "still loading" not in r.text:
            return r


def test_reproduction_7_a_default_model_declaring_4e9_floats_fails_ready_with_the_reason(
        store: Store, tmp_path: Path) -> None:
    v = copy_version(store.default_v1, tmp_path / "models", "default", "v1")
    member = first_member(v)
    rewrite(v, {member: npy_header((4_000_000_000,)) + bytes(64)})
    server = start_two_workers(tmp_path / "models", tmp_path, wait=False)
    try:
        r = _ready_until_settled(server)
        assert r.status_code == 503 and r.json()["status"] == "failed", r.text
        assert member in r.json()["detail"] and "(4000000000,)" in r.json()["detail"]
        assert str(tmp_path) not in r.text  # no server path
        # /ready answered from one worker; the other may still be loading its copy: ask /rank until
        # the worker that answers has settled too (each answer is the event waited on)
        rank = _rank_until_settled(server)
        assert rank.status_code == 503 and "failed to load" in rank.json()["detail"] and member in rank.text
        assert "cannot be loaded" in server.log_text() and member in server.log_text()
    finally:
        server.stop()


@pytest.fixture(scope="module")
def rotating(store: Store, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TwoWorkers]:
    base = tmp_path_factory.mktemp("rotation")
    models = base / "models"
    copy_version(store.default_v1, models, "default", "v1")
    bomb = copy_version(store.default_v2, models, "default", "v2")
    rewrite(bomb, bomb=(first_member(bomb), MAX_ARRAYS_BYTES + 2**20))
    for i, version in enumerate(ROTATION):
        copy_version(store.default_v1 if i % 2 else store.default_v2, models, "default", version)
    server = start_two_workers(models, base, wait=False)
    try:
        yield server
    finally:
        server.stop()


def test_reproduction_7_a_zip_bomb_version_is_a_422_with_the_reason(rotating: TwoWorkers) -> None:
    r = _ready_until_settled(rotating)
    assert r.status_code == 200, r.text
    for _ in range(3):  # remembered: the same answer each time, no read of 3 GiB
        bad = httpx.post(rotating.url + "/rank", json=_body(version="v2"), timeout=None)
        assert bad.status_code == 422, bad.text
        assert "v2 cannot be loaded" in bad.text and "inflate to" in bad.text
        assert "TUNEMIX_MAX_ARTIFACT_BYTES" in bad.text
    assert httpx.post(rotating.url + "/rank", json=_body(version="v1"), timeout=None).status_code == 200


def test_reproduction_8_versions_in_rotation_are_served(rotating: TwoWorkers) -> None:
    _ready_until_settled(rotating)
    pids = rotating.worker_pids()
    for round_ in range(2):
        for version in ROTATION:
            r = httpx.post(rotating.url + "/rank", json=_body(version=version), timeout=None)
            assert r.status_code == 200, (round_, version, r.text)
            assert r.json()["version"] == version
    assert rotating.worker_pids() == pids


def test_rotation_loads_in_threads_never_on_the_event_loop(store: Store, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    models = tmp_path / "models"
    for i, version in enumerate(["v1", *ROTATION]):
        copy_version(store.default_v1 if i % 2 else store.default_v2, models, "default", version)
    loads: list[tuple[str | None, bool]] = []
    real = registry_module.load_served

    def recording(models_dir: Path, name: str, version: str | None = None, **kw: Any) -> Any:
        loads.append((version, on_event_loop()))
        return real(models_dir, name, version, **kw)

    monkeypatch.setattr(registry_module, "load_served", recording)
    with create_app_client(Settings(models_dir=models, default_model="default", max_cached_versions=4)) as c:
        for version in ROTATION * 2:
            r = c.post("/rank", json=_body(version=version))  # small bodies: the inline path
            assert r.status_code == 200 and r.json()["version"] == version, r.text
    explicit = [x for x in loads if x[0] in ROTATION]
    assert len(explicit) >= 2 * len(ROTATION) - 4  # six versions in four cache slots: reloads happen
    assert not any(on_loop for _, on_loop in loads), loads


def create_app_client(settings: Settings) -> Any:
    from fastapi.testclient import TestClient

    class Ready(TestClient):
        def __enter__(self) -> Any:
            c = super().__enter__()
            wait_ready(c)
            return c

    return Ready(create_app(settings))


def test_concurrent_requests_for_a_version_share_one_load(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    release = threading.Event()
    waiting = threading.Semaphore(0)
    calls: list[str | None] = []
    sentinel = object()

    def slow_load(models_dir: Path, name: str, version: str | None = None, **kw: Any) -> Any:
        calls.append(version)
        release.wait()
        return sentinel

    class CountingFuture(Future):  # type: ignore[type-arg]
        def result(self, timeout: float | None = None) -> Any:
            waiting.release()  # a second request is now waiting on the first one's load
            return super().result(timeout)

    monkeypatch.setattr(registry_module, "load_served", slow_load)
    monkeypatch.setattr(registry_module, "Future", CountingFuture)
    reg = ModelRegistry(tmp_path, "default")
    got: list[Any] = []
    threads = [threading.Thread(target=lambda: got.append(reg.get("default", "v7"))) for _ in range(4)]
    for t in threads:
        t.start()
    for _ in range(3):
        waiting.acquire()  # the three others wait on the one load
    release.set()
    for t in threads:
        t.join()
    assert calls == ["v7"] and got == [sentinel] * 4


def test_a_memory_error_while_loading_is_a_422_with_the_reason(monkeypatch: pytest.MonkeyPatch,
                                                               store: Store) -> None:
    def exhausted(path: Path, **kw: Any) -> Any:
        raise MemoryError("Unable to allocate 29.8 GiB for an array with shape (4000000000,)")

    monkeypatch.setattr(registry_module, "load_model", exhausted)
    with pytest.raises(registry_module.ServiceError) as info:
        registry_module.load_served(store.default_v1.parent.parent, "default", "v1")
    assert info.value.status == 422 and "MemoryError: Unable to allocate 29.8 GiB" in info.value.message
