"""Service settings whose defaults depend on the machine: workers, cores, the parallel floor."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tunemix.service import settings as settings_module
from tunemix.service.settings import SHARED_PARALLEL_MIN_DOCUMENTS, Settings, usable_cores


def affinity() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


@pytest.mark.parametrize(("cpu_max", "expected"), [
    ("max 100000\n", None),             # no quota: the affinity
    ("100000 100000\n", 1),             # one core
    ("150000 100000\n", 2),             # 1.5 cores: rounded up
    ("5000 100000\n", 1),               # a twentieth of a core: still one
    ("6400000 100000\n", None),         # a quota above the affinity: the affinity
    ("garbage\n", None),                # unreadable: the affinity
])
def test_usable_cores_follows_a_cgroup_quota(tmp_path: Path, cpu_max: str, expected: int | None) -> None:
    path = tmp_path / "cpu.max"
    path.write_text(cpu_max)
    assert usable_cores(path) == (affinity() if expected is None else min(expected, affinity()))
    assert usable_cores(tmp_path / "missing") == affinity()


def test_worker_count_and_parallel_floor_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TUNEMIX_WORKERS", raising=False)
    monkeypatch.delenv("TUNEMIX_PARALLEL_MIN_DOCUMENTS", raising=False)
    monkeypatch.setattr(settings_module, "usable_cores", lambda: 4)
    unset = Settings()
    assert unset.workers is None
    assert unset.worker_processes() == 4           # `python -m tunemix.service` starts one per core
    assert unset.this_process_workers() == 1       # an app served some other way is one worker
    assert unset.parallel_floor() == 0
    assert unset.scoring_concurrency() == 4
    assert unset.scoring_thread_count() == 4      # the cores this process may use, not numba's pool
    assert Settings(scoring_threads=3).scoring_thread_count() == 3
    two = Settings(workers=2)
    assert two.worker_processes() == 2
    assert two.parallel_floor() == SHARED_PARALLEL_MIN_DOCUMENTS
    assert two.scoring_concurrency() == 2
    assert Settings(workers=2, parallel_min_documents=0).parallel_floor() == 0
    assert Settings(workers=1, parallel_min_documents=50).parallel_floor() == 50
    monkeypatch.setenv("TUNEMIX_WORKERS", "3")
    assert Settings().worker_processes() == 3
    monkeypatch.setenv("TUNEMIX_PARALLEL_MIN_DOCUMENTS", "-1")
    with pytest.raises(ValueError, match="parallel_min_documents"):
        Settings()


def test_the_service_applies_the_floor(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from tunemix.core.scoring import runtime
    from tunemix.service.main import create_app

    monkeypatch.setattr(runtime, "_parallel_min_documents", 0)
    monkeypatch.setattr(runtime, "_scoring_threads", 0)
    app = create_app(Settings(models_dir=tmp_path, default_model="none", workers=2))
    with TestClient(app):
        assert runtime.get_parallel_min_documents() == SHARED_PARALLEL_MIN_DOCUMENTS
        # unset TUNEMIX_SCORING_THREADS: the usable cores (a --cpus limit counts), not numba's pool
        assert runtime._scoring_threads == settings_module.usable_cores()
    monkeypatch.setattr(settings_module, "usable_cores", lambda: 1)
    with TestClient(create_app(Settings(models_dir=tmp_path, default_model="none"))):
        assert runtime.get_scoring_threads() == 1
