"""POST /models/reload: disabled without a token, 401 with a wrong one; a good reload serves the
new version; a missing, corrupt or incompatible version is refused (4xx naming the problem)
while the old version keeps serving."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from tests.artifact.tampering import edit_manifest
from tests.service.conftest import N_FEATURES, Store, copy_version, offsets_of, rank_body, wait_ready
from tunemix.service.main import create_app
from tunemix.service.settings import Settings

TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
X = np.random.default_rng(11).normal(size=(6, N_FEATURES)).astype(np.float32)


@pytest.fixture
def models_dir(store: Store, tmp_path: Path) -> Path:
    """A models directory holding only default v1 (tests add versions)."""
    d = tmp_path / "models"
    copy_version(store.default_v1, d, "default", "v1")
    return d


@pytest.fixture
def reloadable(models_dir: Path) -> Iterator[TestClient]:
    app = create_app(Settings(models_dir=models_dir, default_model="default", reload_token=TOKEN))
    with TestClient(app) as c:
        assert wait_ready(c)["version"] == "v1"
        yield c


def served(c: TestClient) -> dict[str, Any]:
    r = c.post("/rank", json=rank_body(X, [6]))
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()
    return out


def scores(body: dict[str, Any]) -> np.ndarray:
    by_id = {d["id"]: d["score"] for d in body["results"][0]["ranking"]}
    return np.array([by_id[f"d{j}"] for j in range(6)])


def test_disabled_without_a_token(client: TestClient) -> None:
    r = client.post("/models/reload", headers={"Authorization": "Bearer anything"})
    assert r.status_code == 403
    assert "TUNEMIX_RELOAD_TOKEN" in r.json()["detail"]
    assert client.get("/ready").json()["version"] == "v2"


@pytest.mark.parametrize("header", [None, "Bearer wrong", f"Basic {TOKEN}", "Bearer", f"Bearer {TOKEN}x"])
def test_a_wrong_or_missing_token_is_401(reloadable: TestClient, header: str | None) -> None:
    headers = {"Authorization": header} if header is not None else {}
    r = reloadable.post("/models/reload", headers=headers)
    assert r.status_code == 401
    assert r.headers["www-authenticate"] == "Bearer"
    assert "token" in r.json()["detail"]


def test_a_good_reload_serves_the_new_version(reloadable: TestClient, models_dir: Path, store: Store) -> None:
    old = served(reloadable)
    assert old["version"] == "v1"
    np.testing.assert_allclose(scores(old), store.model(store.default_v1).score(X, offsets_of([6])), rtol=1e-12)
    copy_version(store.default_v2, models_dir, "default", "v2")
    assert served(reloadable)["version"] == "v1"  # nothing changes before the reload
    r = reloadable.post("/models/reload", headers=AUTH)
    assert r.status_code == 200, r.text
    assert r.json() == {"model": "default", "version": "v2", "previous_version": "v1", "workers_serving": 1,
                        "workers_total": 1, "workers_lagging": []}
    new = served(reloadable)
    assert new["version"] == "v2"
    np.testing.assert_allclose(scores(new), store.model(store.default_v2).score(X, offsets_of([6])), rtol=1e-12)
    assert reloadable.get("/ready").json()["version"] == "v2"
    assert {m["name"]: m["version"] for m in reloadable.get("/models").json()["models"]} == {"default": "v2"}
    metrics = reloadable.get("/metrics").text
    assert 'tunemix_model_info{name="default",version="v2"} 1.0' in metrics
    assert 'version="v1"' not in metrics
    # an explicit version goes back; the body is JSON
    back = reloadable.post("/models/reload", headers=AUTH, json={"model": "default", "version": "v1"})
    assert back.status_code == 200 and back.json()["version"] == "v1"
    assert served(reloadable)["version"] == "v1"


def refused(c: TestClient, status: int, words: list[str], body: dict[str, Any] | None = None) -> None:
    before = served(c)
    r = c.post("/models/reload", headers=AUTH, json=body) if body else c.post("/models/reload", headers=AUTH)
    assert r.status_code == status, r.text
    detail = r.json()["detail"]
    for w in words:
        assert w in detail, (w, detail)
    after = served(c)
    assert after["version"] == "v1"
    np.testing.assert_array_equal(scores(after), scores(before))
    assert c.get("/ready").json()["version"] == "v1"


def test_a_missing_version_or_model_is_refused(reloadable: TestClient) -> None:
    refused(reloadable, 404, ["v9", "v1"], {"version": "v9"})
    refused(reloadable, 404, ["nothing"], {"model": "nothing"})
    refused(reloadable, 422, ["../x"], {"model": "../x"})


@pytest.mark.parametrize(("body", "words"), [
    (b'{"model": 5}', ["model", "Expected `str | null`, got `int`"]),
    (b'{"modle": "default"}', ["unknown field `modle`"]),
    (b'{"version": "v1", "version": "v2"}', ["body: key 'version' appears twice"]),
    (b'{"model": "default", "version": "v2"', ["body:", "truncated"]),
    (b"null", ["Expected `object`, got `null`"]),
    (b'["default"]', ["Expected `object`, got `array`"]),
])
def test_a_bad_body_is_a_422_naming_the_field(reloadable: TestClient, models_dir: Path, store: Store, body: bytes,
                                              words: list[str]) -> None:
    """The body is decoded by msgspec like every other JSON body (strict types, unknown fields and
    repeated keys refused): nothing is reloaded, though a version v2 is on disk."""
    copy_version(store.default_v2, models_dir, "default", "v2")
    before = served(reloadable)
    r = reloadable.post("/models/reload", headers={**AUTH, "Content-Type": "application/json"}, content=body)
    assert r.status_code == 422, r.text
    for w in words:
        assert w in r.json()["detail"], (w, r.text)
    assert served(reloadable)["version"] == before["version"] == "v1"


def test_the_reload_body_is_in_the_openapi_schema(reloadable: TestClient) -> None:
    schema = reloadable.get("/openapi.json").json()
    body = schema["paths"]["/models/reload"]["post"]["requestBody"]
    assert body["required"] is False
    assert body["content"]["application/json"]["schema"]["$ref"] == "#/components/schemas/ReloadRequest"
    assert set(schema["components"]["schemas"]["ReloadRequest"]["properties"]) == {"model", "version"}


def test_a_corrupt_version_is_refused(reloadable: TestClient, models_dir: Path, store: Store) -> None:
    bad = copy_version(store.default_v2, models_dir, "default", "v2")
    arrays = bad / "arrays.npz"
    arrays.write_bytes(arrays.read_bytes()[: arrays.stat().st_size // 2])
    refused(reloadable, 422, ["v2", "cannot be loaded", "arrays.npz"])


def test_a_corrupt_manifest_is_refused(reloadable: TestClient, models_dir: Path, store: Store) -> None:
    bad = copy_version(store.default_v2, models_dir, "default", "v2")
    (bad / "manifest.json").write_text("{not json")
    refused(reloadable, 422, ["v2", "manifest"])


def test_a_manifest_missing_model_fields_is_refused(reloadable: TestClient, models_dir: Path, store: Store) -> None:
    """A model section edited with its checksum rewritten (as whoever can write the models directory
    can) is a 4xx too, not a crash."""
    bad = copy_version(store.default_v2, models_dir, "default", "v2")
    edit_manifest(bad, lambda manifest: manifest["model"].pop(next(iter(manifest["model"]))))
    refused(reloadable, 422, ["v2", "cannot be loaded"])


def test_another_feature_count_is_refused(reloadable: TestClient, models_dir: Path, store: Store) -> None:
    copy_version(store.wide_v1, models_dir, "default", "v2")
    refused(reloadable, 409, ["v2", "7 features", "v1 takes 5"])


def test_the_pins_poll_during_the_start_up_load_loads_nothing_twice(
        models_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker starting beside another: the other pins default v1 while this one still loads it,
    and this one's pins poll runs then. The first load is held until the poll has either loaded the
    version itself or waits for the load under way; one load of v1 in all, installed once."""
    import logging
    import threading

    from tunemix.service import registry as registry_module
    from tunemix.service import worker_state

    state_dir = tmp_path / "state"
    state_dir.mkdir()
    reg = registry_module.ModelRegistry(models_dir, "default", state_dir=state_dir)
    real = registry_module.load_served
    loads: list[tuple[str, str | None]] = []
    loading, poll_ran, release = threading.Event(), threading.Event(), threading.Event()

    def counted(models: Path, name: str, version: str | None = None, **kw: Any) -> Any:
        loads.append((name, version))
        if len(loads) == 1:
            loading.set()
            assert release.wait(30), "the first load was never released"
        else:
            poll_ran.set()  # a second load: the poll did not share the first
        return real(models, name, version, **kw)

    class Waiting(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "waiting for its load under way" in record.getMessage():
                poll_ran.set()

    handler = Waiting()
    registry_module.log.addHandler(handler)
    level = registry_module.log.level
    registry_module.log.setLevel(logging.INFO)
    monkeypatch.setattr(registry_module, "load_served", counted)
    installs: list[str] = []
    real_install = reg.install
    monkeypatch.setattr(reg, "install", lambda served: installs.append(served.version) or real_install(served))
    try:
        start = threading.Thread(target=reg.load_initial, args=([],))
        start.start()
        assert loading.wait(30), "the start-up load did not begin"
        worker_state.write_pins(state_dir, {"default": "v1"})  # the other worker pinned what it loaded
        assert reg.state_changed()
        poll = threading.Thread(target=reg.follow_state)
        poll.start()
        assert poll_ran.wait(30), "the poll neither loaded nor waited"
        release.set()
        start.join(30)
        poll.join(30)
    finally:
        release.set()
        registry_module.log.removeHandler(handler)
        registry_module.log.setLevel(level)
    assert loads == [("default", "v1")]
    assert installs == ["v1"]
    assert reg.current("default") is not None and reg.current("default").version == "v1"  # type: ignore[union-attr]


@pytest.mark.parametrize("first", ["start-up", "pins poll", "reload", "request"])
def test_a_reload_during_a_load_of_the_same_version_loads_nothing_twice(
        first: str, models_dir: Path, store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A reload asking for the version the start-up load, the pins poll (another worker reloaded),
    another reload or a request naming the version is loading: the first load is held until the
    reload has either loaded the version itself or waits for the load under way; one load of the
    version in all, installed once."""
    import logging
    import threading

    from tunemix.service import registry as registry_module
    from tunemix.service import worker_state

    state_dir = tmp_path / "state"
    state_dir.mkdir()
    reg = registry_module.ModelRegistry(models_dir, "default", state_dir=state_dir)
    wanted = "v1"
    if first != "start-up":
        reg.load_initial([])
        copy_version(store.default_v2, models_dir, "default", "v2")
        wanted = "v2"
    real = registry_module.load_served
    loads: list[tuple[str, str | None]] = []
    loading, second_ran, release = threading.Event(), threading.Event(), threading.Event()

    def counted(models: Path, name: str, version: str | None = None, **kw: Any) -> Any:
        loads.append((name, version))
        if len(loads) == 1:
            loading.set()
            assert release.wait(30), "the first load was never released"
        else:
            second_ran.set()  # a second load: the reload did not share the first
        return real(models, name, version, **kw)

    class Waiting(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "waiting for its load under way" in record.getMessage():
                second_ran.set()

    handler = Waiting()
    registry_module.log.addHandler(handler)
    level = registry_module.log.level
    registry_module.log.setLevel(logging.INFO)
    monkeypatch.setattr(registry_module, "load_served", counted)
    installs: list[str] = []
    real_install = reg.install
    monkeypatch.setattr(reg, "install", lambda served: installs.append(served.version) or real_install(served))
    answers: list[tuple[str, str | None]] = []

    def reload() -> None:
        new, old = reg.reload("default", None if first == "start-up" else wanted)
        answers.append((new.version, old.version if old else None))

    if first == "start-up":
        loader = threading.Thread(target=reg.load_initial, args=([],))
    elif first == "pins poll":
        worker_state.write_pins(state_dir, {"default": wanted})  # another worker reloaded v2
        assert reg.state_changed()
        loader = threading.Thread(target=reg.follow_state)
    elif first == "reload":
        loader = threading.Thread(target=reload)
    else:  # a request naming v2 while v1 is served: loaded in a thread, kept among the older versions
        loader = threading.Thread(target=reg.get, args=("default", wanted))
    try:
        loader.start()
        assert loading.wait(30), "the first load did not begin"
        second = threading.Thread(target=reload)
        second.start()
        assert second_ran.wait(30), "the reload neither loaded nor waited"
        release.set()
        loader.join(30)
        second.join(30)
    finally:
        release.set()
        registry_module.log.removeHandler(handler)
        registry_module.log.setLevel(level)
    assert loads == [("default", wanted)]
    assert installs == [wanted]
    assert reg.current("default") is not None and reg.current("default").version == wanted  # type: ignore[union-attr]
    assert answers and all(new == wanted for new, _ in answers)
