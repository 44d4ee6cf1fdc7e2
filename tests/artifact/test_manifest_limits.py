"""The manifest is bounded by what it decodes to, not only by its bytes (objects and arrays,
values, depth, strings, counted or checked before anything is built from them), and covered by
``manifest.sha256``: an edit after the save is reported; versions 1 and 2 (written before the
checksum existed) load without it, version 3 needs it."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.artifact.tampering import edit_manifest, reseal
from tunemix.core.artifact import (
    MANIFEST_SUM,
    MAX_FEATURES,
    MAX_MANIFEST_CONTAINERS,
    MAX_MANIFEST_DEPTH,
    MAX_MANIFEST_ITEMS,
    MAX_MANIFEST_STRING,
    SCHEMA_VERSION,
    ArtifactError,
    list_versions,
    load_artifact,
    save_artifact,
)

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "artifacts-0.1.0" / "models"

#: what reading a version costs, in a fresh process: the growth of the peak resident size
#: (``ru_maxrss``, KiB) from after the imports, and the error if any
LOAD = """
import json, resource, sys
from tunemix.core.artifact import ArtifactError, load_artifact
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    load_artifact(sys.argv[1])
    error = None
except ArtifactError as exc:
    error = str(exc)
print(json.dumps({"error": error, "grown_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before}))
"""


def _save(tmp_path: Path) -> Path:
    arrays = {"w": np.arange(6, dtype=np.float64).reshape(2, 3)}
    return save_artifact(tmp_path, "demo", {"n_features": 3, "training_record": {"evaluation": {}}}, arrays)


def _load_in_a_fresh_process(version: Path) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-c", LOAD, str(version)], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


def _bloat(version: Path, *parts: tuple[bytes, bytes, Callable[[int], bytes], int]) -> None:
    """Put, in the manifest's training record, a list of ``parts``, each ``(open, close, item,
    count)`` the container ``open`` ... ``close`` of ``item(0)``, ..., ``item(count - 1)``, written
    in chunks (the test process never holds the manifest), and reseal it."""
    manifest = json.loads((version / "manifest.json").read_text())
    manifest["training_record"]["junk"] = "@@JUNK@@"
    head, tail = json.dumps(manifest).split('"@@JUNK@@"')
    with (version / "manifest.json").open("wb") as fh:
        fh.write(head.encode() + b"[")
        for i, (open_, close, item, count) in enumerate(parts):
            fh.write(open_)
            for start in range(0, count, 100_000):
                n = min(100_000, count - start)
                fh.write(b",".join(item(start + j) for j in range(n)) + (b"," if start + n < count else b""))
            fh.write(close + (b"," if i + 1 < len(parts) else b""))
        fh.write(b"]" + tail.encode())
    reseal(version)


def test_a_manifest_of_empty_objects_is_refused_before_it_is_decoded(tmp_path: Path) -> None:
    v = _save(tmp_path)
    _bloat(v, (b"[", b"]", lambda j: b"{}", 5_000_000))  # 15 MiB: under MAX_MANIFEST_BYTES, ~450 MB decoded
    assert 14 * 2**20 < (v / "manifest.json").stat().st_size < 16 * 2**20
    got = _load_in_a_fresh_process(v)
    assert got["error"] is not None, got
    assert f"'{{' and '[' bytes (objects and arrays); a manifest has at most {MAX_MANIFEST_CONTAINERS} " \
           "(MAX_MANIFEST_CONTAINERS)" in got["error"], got
    assert got["grown_kib"] < 64 * 1024, got  # the bytes read and hashed, nothing decoded


def test_a_manifest_at_the_limits_decodes_to_a_bounded_size(tmp_path: Path) -> None:
    """The costliest shapes the limits let through (empty objects, distinct keys, strings of the
    longest length) decode to a bounded size: about 100 MiB measured, under 128 asserted."""
    v = _save(tmp_path)
    objects = MAX_MANIFEST_CONTAINERS - 100
    keys = MAX_MANIFEST_ITEMS - objects - 1_000
    longest = b'"' + b"s" * MAX_MANIFEST_STRING + b'"'
    _bloat(v, (b"[", b"]", lambda j: b"{}", objects), (b"{", b"}", lambda j: b'"%07d":0' % j, keys),
           (b"[", b"]", lambda j: longest, 10 * 2**20 // len(longest)))
    assert (v / "manifest.json").stat().st_size > 14 * 2**20
    got = _load_in_a_fresh_process(v)
    assert got["error"] is None, got
    assert got["grown_kib"] < 128 * 1024, got


def test_too_many_values_are_refused(tmp_path: Path) -> None:
    v = _save(tmp_path)
    _bloat(v, (b"[", b"]", lambda j: b"0", MAX_MANIFEST_ITEMS + 10))
    with pytest.raises(ArtifactError, match=rf"',' bytes \(values\); a manifest has at most {MAX_MANIFEST_ITEMS}"):
        load_artifact(v)


@pytest.mark.parametrize(("depth", "words"), [
    (MAX_MANIFEST_DEPTH + 1, rf"is nested {MAX_MANIFEST_DEPTH + 1} deep; at most {MAX_MANIFEST_DEPTH}"),
    (50_000, rf"nested too deep to decode; at most {MAX_MANIFEST_DEPTH}"),
])
def test_nesting_is_bounded(tmp_path: Path, depth: int, words: str) -> None:
    v = _save(tmp_path)
    # the record sits at depth 2; its `junk` nests depth - 2 arrays more
    edit_manifest(v, lambda m: m["training_record"].update(junk="@@"))
    text = (v / "manifest.json").read_text().replace('"@@"', "[" * (depth - 2) + "]" * (depth - 2))
    (v / "manifest.json").write_text(text)
    reseal(v)
    with pytest.raises(ArtifactError, match=words):
        load_artifact(v)


@pytest.mark.parametrize("where", ["value", "key"])
def test_a_string_longer_than_the_limit_is_refused(tmp_path: Path, where: str) -> None:
    v = _save(tmp_path)
    long = "x" * (MAX_MANIFEST_STRING + 1)
    edit_manifest(v, lambda m: m["training_record"].update({"note": long} if where == "value" else {long: 1}))
    with pytest.raises(ArtifactError, match=rf"{MAX_MANIFEST_STRING + 1} characters; at most {MAX_MANIFEST_STRING}"):
        load_artifact(v)


# ---------------------------------------------------------------------------- the checksum
def test_a_manifest_edited_after_save_fails_its_checksum(tmp_path: Path) -> None:
    v = _save(tmp_path)
    text = (v / "manifest.json").read_text()
    (v / "manifest.json").write_text(text.replace('"n_features": 3', '"n_features": 4'))
    with pytest.raises(ArtifactError, match=r"manifest\.json: SHA-256 does not match manifest\.sha256"):
        load_artifact(v)
    (v / "manifest.json").write_text(text)
    assert load_artifact(v)[0]["n_features"] == 3


def test_the_checksum_file_is_sha256sum_output(tmp_path: Path) -> None:
    v = _save(tmp_path)
    digest = hashlib.sha256((v / "manifest.json").read_bytes()).hexdigest()
    assert (v / MANIFEST_SUM).read_text() == f"{digest}  manifest.json\n"
    if shutil.which("sha256sum"):
        assert subprocess.run(["sha256sum", "--check", "--status", MANIFEST_SUM], cwd=v).returncode == 0


def test_a_sealed_manifest_needs_its_checksum(tmp_path: Path) -> None:
    v = _save(tmp_path)
    assert json.loads((v / "manifest.json").read_text())["schema_version"] == SCHEMA_VERSION == 4
    (v / MANIFEST_SUM).write_text("0" * 63 + "  manifest.json\n")
    with pytest.raises(ArtifactError, match=r"manifest\.sha256: not a SHA-256 line for manifest\.json"):
        load_artifact(v)
    (v / MANIFEST_SUM).unlink()
    with pytest.raises(ArtifactError, match=r"manifest\.sha256 is missing"):
        load_artifact(v)


def test_versions_written_before_the_checksum_load_without_it(tmp_path: Path) -> None:
    for name in ("every", "uniform"):  # written by tunemix 0.1.0 (schema version 2)
        assert not (FIXTURES / name / "v1" / MANIFEST_SUM).exists()
        assert load_artifact(FIXTURES / name / "v1")[0]["schema_version"] == 2
    v = _save(tmp_path)
    text = (v / "manifest.json").read_text().replace(f'"schema_version": {SCHEMA_VERSION}', '"schema_version": 2')
    (v / "manifest.json").write_text(text)
    (v / MANIFEST_SUM).unlink()
    assert load_artifact(v)[0]["schema_version"] == 2


@pytest.mark.parametrize(("manifest", "words"), [
    ({"n_features": MAX_FEATURES + 1}, rf"declares {MAX_FEATURES + 1} features; a model takes at most {MAX_FEATURES}"),
    ({"n_features": 3, "record": [[]] * MAX_MANIFEST_CONTAINERS}, "MAX_MANIFEST_CONTAINERS"),
])
def test_what_a_load_would_refuse_is_not_saved(tmp_path: Path, manifest: dict[str, Any], words: str) -> None:
    with pytest.raises(ArtifactError, match=words):
        save_artifact(tmp_path, "demo", manifest, {"w": np.zeros(3)})
    assert list_versions(tmp_path, "demo") == []
    assert not any((tmp_path / "demo").iterdir())  # no temporary directory left
