"""What a stored model declares is held against its limits and the arrays stored with it before
anything is allocated from it: the width (``MAX_FEATURES``, ``MAX_WHITENED_FEATURES``), each run's
classes, each calibrator's columns, the mixer's members, the views, the names. The models are
copies of the 0.1.0 fixtures (``tests/fixtures/artifacts-0.1.0``: six features, the ``raw+white``
view, every member type in ``uniform``), tampered as someone who can write the models directory
would (checksums rewritten)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.artifact.tampering import declare_width, edit_manifest
from tunemix.core.artifact import MAX_FEATURES, ArtifactError
from tunemix.core.scoring.ensemble_model import MAX_NAME_CHARS, MAX_WHITENED_FEATURES, load_model

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "artifacts-0.1.0" / "models"
ROOT = Path(__file__).resolve().parents[2]

#: what loading a version costs the process, measured in a fresh one: the peak resident size
#: (``ru_maxrss``) after the imports and after ``load_served``'s two steps (load, one-thread warm-up)
LOAD_AND_WARM = """
import json, resource, sys
from tunemix.core.artifact import ArtifactError
from tunemix.core.scoring.ensemble_model import load_model
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    model, _ = load_model(sys.argv[1])
    model.warm_up(parallel=False)
    error = None
except (ArtifactError, MemoryError) as exc:
    error = f"{type(exc).__name__}: {exc}"
grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
print(json.dumps({"error": error, "grown_kib": grown}))
"""


def _copy(tmp_path: Path, name: str = "every") -> Path:
    dst = tmp_path / "models" / name / "v1"
    shutil.copytree(FIXTURES / name / "v1", dst)
    return dst


def _load_in_a_fresh_process(version: Path) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-c", LOAD_AND_WARM, str(version)], cwd=ROOT, capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


def test_a_declared_width_of_millions_is_refused_at_load_without_allocating(tmp_path: Path) -> None:
    v = _copy(tmp_path)
    declare_width(v, 3_000_000)  # every width in the artifact agrees: only the bound refuses it
    assert (v / "arrays.npz").stat().st_size + (v / "manifest.json").stat().st_size < 2**20
    got = _load_in_a_fresh_process(v)
    assert got["error"] is not None and got["error"].startswith("ArtifactError"), got
    assert f"'n_features' declares 3000000 features; a model takes at most {MAX_FEATURES} (MAX_FEATURES)" \
        in got["error"], got
    assert got["grown_kib"] < 200 * 1024, got  # nothing allocated from the width


def test_a_whitened_model_is_bounded_more_tightly(tmp_path: Path) -> None:
    v = _copy(tmp_path)
    declare_width(v, MAX_WHITENED_FEATURES + 1)
    with pytest.raises(ArtifactError, match=rf"{MAX_WHITENED_FEATURES + 1} features with the raw\+white view; "
                                            rf"a whitened model takes at most {MAX_WHITENED_FEATURES}"):
        load_model(v)


def test_the_widest_whitened_model_loads_and_scores(tmp_path: Path) -> None:
    v = _copy(tmp_path)
    declare_width(v, MAX_WHITENED_FEATURES)
    model, _ = load_model(v)
    model.warm_up()
    x = np.random.default_rng(0).normal(size=(5, MAX_WHITENED_FEATURES)).astype(np.float32)
    assert np.isfinite(model.score(x, [0, 5])).all()


def _first(items: list[dict[str, Any]], test: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    return next(item for item in items if test(item))


def _runs_classes(m: dict[str, Any]) -> None:
    m["model"]["runs"][0]["n_classes"] = 10**6


def _linear_classes(m: dict[str, Any]) -> None:
    _first(m["model"]["runs"], lambda r: r["kind"] == "linear")["n_classes"] += 1


def _columns(m: dict[str, Any]) -> None:
    _first(m["model"]["members"], lambda x: x["calibrator"]["kind"] == "er")["calibrator"]["n_columns_"] = 10**6


def _inner_columns(m: dict[str, Any]) -> None:
    member = _first(m["model"]["members"], lambda x: x["calibrator"]["kind"] == "ordinal")
    member["calibrator"]["inner"]["n_columns_"] = 10**6


def _mixer(m: dict[str, Any]) -> None:
    m["model"]["mixer"]["n_members"] = 10**6


def _views(m: dict[str, Any]) -> None:
    m["model"]["extra_views"] = m["model"]["extra_views"] * 2


def _member_name(m: dict[str, Any]) -> None:
    m["model"]["members"][0]["name"] = "m" * (MAX_NAME_CHARS + 1)


def _feature_names(m: dict[str, Any]) -> None:
    m["feature_names"] = [f"f{j}" for j in range(10**5)]


def _model_width(m: dict[str, Any]) -> None:
    m["model"]["n_features"] = 10**6


@pytest.mark.parametrize(("change", "words"), [
    (_runs_classes, r"model\.runs\[0\]\.n_classes is 1000000; it must be 1 to the forest's stored outputs \(3\)"),
    (_linear_classes, r"model\.runs\[\d+\]\.n_classes is \d; it must be the columns of its stored linear/\d+/weights"),
    (_columns, r"model\.members\[\d+\]\.calibrator\.n_columns_ is 1000000; its run has \d columns, so at most \d"),
    (_inner_columns, r"model\.members\[\d+\]\.calibrator\.inner\.n_columns_ is 1000000"),
    (_mixer, r"model\.mixer\.n_members is 1000000; the model has 43 members"),
    (_views, r"model\.extra_views must be distinct names"),
    (_member_name, rf"model\.members\[0\]\.name must be a string of at most {MAX_NAME_CHARS} characters"),
    (_feature_names, rf"feature_names must be 6 distinct non-empty strings of at most {MAX_NAME_CHARS}"),
    (_model_width, r"n_features 6 disagrees with the model's 1000000"),
])
def test_declared_sizes_beyond_the_stored_arrays_are_refused(tmp_path: Path, change: Callable[[dict[str, Any]], None],
                                                             words: str) -> None:
    v = _copy(tmp_path, "uniform")
    edit_manifest(v, change)
    with pytest.raises(ArtifactError, match=words):
        load_model(v)
