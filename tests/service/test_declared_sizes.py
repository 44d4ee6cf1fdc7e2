"""A model version is checked for what it declares before a worker allocates for it, and what
``GET /models/{name}`` shows of its manifest is made once, bounded, when it is loaded.

- A tampered version declaring millions of features (a 1 MB artifact whose every stored width
  agrees) named by unauthenticated requests: ``python -m tunemix.service`` with two workers
  answers 422 naming the bound each time, both workers stay alive without growing, and ``/health``
  keeps answering meanwhile.
- A manifest with a large but allowed training record: the answer is the JSON made at load
  (the same bytes each time, nothing of the manifest walked or serialised per request), with the
  parts past ``MAX_TRAINING_SUMMARY_BYTES`` named instead of shown."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

import tunemix.service.registry as registry_module
from tests.artifact.tampering import declare_width, edit_manifest
from tests.service.conftest import (
    N_FEATURES,
    ROOT,
    HealthWatch,
    Store,
    copy_version,
    rank_body,
    ready_client,
    vm,
    wait_ready,
)
from tests.service.two_workers import start_two_workers
from tunemix.core.artifact import MAX_FEATURES
from tunemix.service.registry import MAX_TRAINING_SUMMARY_BYTES
from tunemix.service.settings import Settings

WIDTH = 3_500_000

#: the one-thread and parallel warm-up of a version in a fresh process: the growth of its peak
#: resident size (``ru_maxrss``, KiB) from after the load
WARM = """
import json, resource, sys
from tunemix.core.scoring.ensemble_model import load_model
model, _ = load_model(sys.argv[1])
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
model.warm_up(serial=True, parallel=True)
print(json.dumps({"grown_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before}))
"""


def test_a_version_declaring_millions_of_features_is_refused_by_both_workers_without_allocating(
        store: Store, tmp_path: Path) -> None:
    models = tmp_path / "models"
    copy_version(store.default_v1, models, "default", "v1")
    tampered = copy_version(store.default_v1, models, "tampered", "v1")
    declare_width(tampered, WIDTH)
    assert sum(f.stat().st_size for f in tampered.iterdir()) < 2**20
    server = start_two_workers(models, tmp_path)
    try:
        pids = server.worker_pids()
        assert len(pids) == 2
        peak = {pid: vm(pid, "VmHWM") for pid in pids}
        x = np.random.default_rng(0).normal(size=(4, N_FEATURES)).astype(np.float32)
        with HealthWatch(server.url) as watch:
            # fresh connections until each worker has tried the version (each logs its failure once,
            # then answers from memory): the log is the event
            rounds = 0
            while server.log_text().count("model tampered v1 cannot be loaded") < 2 or rounds < 4:
                rounds += 1
                assert rounds <= 500, "one worker took every connection"
                for r in (httpx.get(server.url + "/models/tampered", timeout=None, headers={"Connection": "close"}),
                          httpx.post(server.url + "/rank", json=rank_body(x, [4], model="tampered"), timeout=None,
                                     headers={"Connection": "close"})):
                    assert r.status_code == 422, r.text[:500]
                    assert f"declares {WIDTH} features; a model takes at most {MAX_FEATURES} (MAX_FEATURES)" \
                        in r.json()["detail"], r.text[:500]
        assert watch.failed is None, watch.failed
        assert watch.worst < 2.0  # refused from the manifest: well under a second, twice that for a busy machine
        assert server.worker_pids() == pids  # no worker died or was restarted
        grown = {pid: vm(pid, "VmHWM") - peak[pid] for pid in pids}
        assert all(g < 200 * 2**20 for g in grown.values()), grown
        assert httpx.get(server.url + "/ready", timeout=None).status_code == 200
    finally:
        server.stop()


def test_the_widest_model_warms_its_parallel_paths_within_the_bound(store: Store, tmp_path: Path) -> None:
    """A model of ``MAX_FEATURES`` features whose forest has few bases (6: its parallel path wants
    a list of 6,667 documents) warms on a list of ``WARM_UP_MAX_VALUES`` feature values (1,024
    rows), not on a list that long (about 790 MB)."""
    import numba

    if int(numba.config.NUMBA_NUM_THREADS) < 2:  # type: ignore[attr-defined]
        pytest.skip("numba has one thread here: no parallel path to warm")
    v = copy_version(store.default_v1, tmp_path / "models", "default", "v1")
    declare_width(v, MAX_FEATURES)
    proc = subprocess.run([sys.executable, "-c", WARM, str(v)], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    grown = json.loads(proc.stdout.strip().splitlines()[-1])["grown_kib"]
    assert grown < 300 * 1024, grown  # about 175 MiB


@pytest.fixture()
def large_record(store: Store, tmp_path: Path) -> Path:
    """A models directory whose default model's training record holds 1 MiB more evaluation (within
    the manifest's limits)."""
    models = tmp_path / "models"
    v = copy_version(store.default_v1, models, "default", "v1")
    bulk = np.round(np.random.default_rng(0).random(100_000), 6).tolist()  # about 0.85 MB of JSON
    edit_manifest(v, lambda m: m["training_record"]["evaluation"].update(bulk=bulk))
    return models


def test_a_model_summary_is_made_once_at_load_and_bounded(large_record: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    with ready_client(Settings(models_dir=large_record, default_model="default")) as c:
        wait_ready(c)
        served = c.app.state.registry.current("default")  # type: ignore[attr-defined]
        walked: list[Any] = []
        real = registry_module.without_server_paths
        monkeypatch.setattr(registry_module, "without_server_paths",
                            lambda value, models_dir: walked.append(value) or real(value, models_dir))
        answers = [c.get("/models/default") for _ in range(3)]
        assert not walked  # no request walks (or serialises) the manifest
        assert all(r.status_code == 200 and r.content == served.detail_json for r in answers)
        assert c.app.state.registry.current("default") is served  # type: ignore[attr-defined]
        body = answers[0].json()
        assert body["training_omitted"] == ["evaluation"]
        assert {"config", "served"} <= set(body["training"]) and "evaluation" not in body["training"]
        assert len(answers[0].content) < MAX_TRAINING_SUMMARY_BYTES + 64 * 1024
        assert body["feature_names"] == [f"f{j + 1}" for j in range(N_FEATURES)]
        assert len(body["members"]) == body["n_members"] >= 1
        listed = c.get("/models").json()["models"]
        assert [m["name"] for m in listed] == ["default"] and listed[0] == served.brief


def test_the_training_record_is_shown_whole_when_it_fits(store: Store, tmp_path: Path) -> None:
    copy_version(store.default_v1, tmp_path / "models", "default", "v1")
    manifest = json.loads((store.default_v1 / "manifest.json").read_text())
    with ready_client(Settings(models_dir=tmp_path / "models", default_model="default")) as c:
        wait_ready(c)
        body = c.get("/models/default").json()
    assert "training_omitted" not in body
    assert body["training"]["evaluation"] == manifest["training_record"]["evaluation"]
