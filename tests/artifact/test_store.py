from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from tests.artifact.tampering import reseal
from tunemix.core.artifact import (
    SCHEMA_VERSION,
    ArtifactError,
    join_arrays,
    latest_version,
    list_versions,
    load_artifact,
    resolve_artifact,
    save_artifact,
    split_arrays,
)


def _save(tmp_path: Path, **extra: object) -> Path:
    arrays = {"w": np.arange(6, dtype=np.float64).reshape(2, 3), "idx": np.array([3, 1], dtype=np.int32)}
    manifest = {"n_features": 3, "members": [{"name": "m0"}], **extra}
    return save_artifact(tmp_path, "demo", manifest, arrays)


def test_round_trip_and_versions(tmp_path: Path) -> None:
    v1 = _save(tmp_path)
    v2 = _save(tmp_path)
    assert (v1.name, v2.name) == ("v1", "v2")
    assert list_versions(tmp_path, "demo") == ["v1", "v2"]
    assert latest_version(tmp_path, "demo") == v2
    assert resolve_artifact(tmp_path, "demo") == v2
    manifest, arrays = load_artifact(v1)
    assert manifest["schema_version"] == SCHEMA_VERSION and manifest["version"] == "v1"
    np.testing.assert_array_equal(arrays["w"], np.arange(6.0).reshape(2, 3))
    assert arrays["idx"].dtype == np.int32


def test_a_saved_version_is_readable_by_other_users(tmp_path: Path) -> None:
    v1 = _save(tmp_path)
    assert v1.stat().st_mode & 0o777 == 0o755


def test_no_leftovers_after_failed_save(tmp_path: Path) -> None:
    with pytest.raises(TypeError):
        save_artifact(tmp_path, "demo", {"n_features": 1}, {"bad": np.array([object()], dtype=object)})
    with pytest.raises(TypeError):
        save_artifact(tmp_path, "demo", {"n_features": 1, "x": object()}, {})
    assert list_versions(tmp_path, "demo") == []
    assert not any(p.name.startswith(".incomplete") for p in (tmp_path / "demo").iterdir())


def test_truncated_and_corrupt_arrays_are_reported(tmp_path: Path) -> None:
    v = _save(tmp_path)
    data = (v / "arrays.npz").read_bytes()
    (v / "arrays.npz").write_bytes(data[: len(data) // 2])
    with pytest.raises(ArtifactError, match="truncated"):
        load_artifact(v)
    flipped = bytearray(data)
    flipped[len(flipped) // 2] ^= 0xFF
    (v / "arrays.npz").write_bytes(bytes(flipped))
    with pytest.raises(ArtifactError, match="SHA-256"):
        load_artifact(v)


def test_bad_manifests(tmp_path: Path) -> None:
    v = _save(tmp_path)
    # the manifests written below have no manifest.sha256: each is read as the version it declares
    (v / "manifest.sha256").unlink()
    (v / "manifest.json").write_text("{not json")
    with pytest.raises(ArtifactError, match="corrupt manifest"):
        load_artifact(v)
    (v / "manifest.json").write_text(json.dumps({"schema_version": 99, "name": "d", "version": "v1",
                                                 "n_features": 1, "arrays": {"file": "arrays.npz", "sha256": "",
                                                                             "bytes": 0, "keys": []}}))
    with pytest.raises(ArtifactError, match="schema version 99"):
        load_artifact(v)
    (v / "manifest.json").write_text(json.dumps({"schema_version": 1}))
    with pytest.raises(ArtifactError, match="missing field"):
        load_artifact(v)
    for field, value, words in (("arrays", "broken", "'arrays' must be dict, not str"),
                                ("n_features", None, "'n_features' must be int, not NoneType"),
                                ("n_features", 0, "'n_features' must be at least 1"),
                                ("name", 7, "'name' must be str")):
        good = {"schema_version": 2, "name": "d", "version": "v1", "n_features": 1,
                "arrays": {"file": "arrays.npz", "sha256": "", "bytes": 0, "keys": []}}
        (v / "manifest.json").write_text(json.dumps({**good, field: value}))
        with pytest.raises(ArtifactError, match=re.escape(words)):
            load_artifact(v)
    with pytest.raises(ArtifactError, match=r"no manifest\.json"):
        load_artifact(tmp_path)


def test_pickled_npz_is_refused(tmp_path: Path) -> None:
    """An npz holding an object array (which would need unpickling) cannot be loaded."""
    v = _save(tmp_path)
    np.savez(v / "arrays.npz", w=np.array([{"evil": 1}], dtype=object))
    manifest = json.loads((v / "manifest.json").read_text())
    import hashlib

    raw = (v / "arrays.npz").read_bytes()
    manifest["arrays"].update(sha256=hashlib.sha256(raw).hexdigest(), bytes=len(raw), keys=["w"])
    (v / "manifest.json").write_text(json.dumps(manifest))
    reseal(v)
    with pytest.raises(ArtifactError, match=r"dtype \|O is not allowed"):
        load_artifact(v)


def test_split_and_join_params() -> None:
    params = {"a": np.array([1.0, 2.0]), "b": 3, "nested": [{"c": np.eye(2)}, "text"], "inf": float("-inf")}
    arrays: dict[str, np.ndarray] = {}
    doc = split_arrays(params, "m0", arrays)
    json.dumps(doc, allow_nan=False)  # plain JSON
    assert set(arrays) == {"m0/a", "m0/nested/0/c"}
    back = join_arrays(doc, arrays)
    np.testing.assert_array_equal(back["a"], params["a"])
    np.testing.assert_array_equal(back["nested"][0]["c"], np.eye(2))
    assert back["b"] == 3 and back["nested"][1] == "text" and back["inf"] == float("-inf")


def test_bad_names() -> None:
    with pytest.raises(ValueError, match="model name"):
        save_artifact("/tmp", "../evil", {}, {})


def test_ctrl_c_during_save_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An interrupt while the arrays are being written leaves no version and no temporary dir."""
    _save(tmp_path)

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(np, "savez", interrupted)
    with pytest.raises(KeyboardInterrupt):
        _save(tmp_path)
    assert list_versions(tmp_path, "demo") == ["v1"]
    assert sorted(p.name for p in (tmp_path / "demo").iterdir()) == ["v1"]
