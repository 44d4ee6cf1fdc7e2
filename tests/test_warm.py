"""Compilation paid once and visibly (issue 40): ``tunemix warm``, its stamp, the warm-up before a
first fit on a cold cache, and the record's numba compile time."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from training.pipeline import warm as warm_module

ROOT = Path(__file__).resolve().parents[1]


def test_the_compile_clock_counts_a_compilation_once() -> None:
    from numba import njit

    @njit(cache=False)
    def twice(x: Any) -> Any:
        return 2 * x

    with warm_module.compile_clock() as cc:
        assert twice(3) == 6
    first = cc.seconds
    assert first > 0.0
    with warm_module.compile_clock() as again:
        assert twice(4) == 8  # compiled already: the lock is not taken
    assert again.seconds == 0.0
    with warm_module.compile_clock() as other:
        assert twice(2.5) == 5.0  # a new signature is a new compilation
    assert other.seconds > 0.0


def test_ensure_warm_runs_once_on_a_cold_cache_and_says_so(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(warm_module, "cache_dir", lambda: tmp_path)
    calls: list[int] = []

    def fake_warm(out: Any = None) -> dict[str, Any]:  # the real one is run by test_tunemix_warm
        calls.append(1)
        (tmp_path / warm_module.STAMP).write_text(json.dumps(warm_module._stamp_key()))
        return {"seconds": 0.0}

    monkeypatch.setattr(warm_module, "warm", fake_warm)
    monkeypatch.setenv("TUNEMIX_AUTO_WARM", "0")
    assert warm_module.ensure_warm(io.StringIO()) is None and calls == []
    monkeypatch.setenv("TUNEMIX_AUTO_WARM", "1")
    assert not warm_module.is_warm()
    out = io.StringIO()
    assert warm_module.ensure_warm(out) == {"seconds": 0.0} and calls == [1]
    assert "the numba cache is cold" in out.getvalue() and "tunemix warm" in out.getvalue()
    assert warm_module.is_warm()
    assert warm_module.ensure_warm(io.StringIO()) is None and calls == [1]
    (tmp_path / warm_module.STAMP).write_text(json.dumps({**warm_module._stamp_key(), "tunemix": "0.0.0-other"}))
    assert not warm_module.is_warm()  # another version's stamp: cold


def test_tunemix_warm(tmp_path: Path) -> None:
    """The real step in a child process on this suite's cache: it says what it does, reports the
    seconds and the kernels compiled or loaded, leaves the stamp; --if-cold then does nothing."""
    import os

    env = {**os.environ, "TUNEMIX_AUTO_WARM": "1"}
    proc = subprocess.run([sys.executable, "-m", "training.cli", "warm"], cwd=ROOT, capture_output=True, text=True,
                          env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "tunemix warm: compiling the numba kernels of training and scoring once" in proc.stderr
    done = [line for line in proc.stderr.splitlines() if line.startswith("tunemix warm: done in ")]
    assert len(done) == 1
    if warm_module.warm_processes() == 2:  # the two parts side by side, each reporting
        for part in warm_module.PART_MEMBERS:
            assert re.search(rf"tunemix warm: part {part} done in [\d.]+ s \(\d+ kernel", proc.stderr), proc.stderr
    said = re.search(r"(\d+) kernel specialisations compiled, (\d+) loaded from the cache", done[0])
    assert said is not None, done[0]
    compiled, loaded = int(said.group(1)), int(said.group(2))
    assert compiled + loaded >= 30  # the kernels called from Python (each inlines or calls more), not a few
    proc = subprocess.run([sys.executable, "-m", "training.cli", "warm", "--if-cold"], cwd=ROOT, capture_output=True,
                          text=True, env=env)
    assert proc.returncode == 0 and "compiled already" in proc.stdout


def test_the_record_separates_numba_compile_time() -> None:
    import tunemix
    from training.data.synthetic import make_synthetic_splits
    from training.pipeline.report import render_markdown

    sets = make_synthetic_splits(n_queries={"train": 16, "vali": 8, "test": 6}, docs_per_query=(4, 8),
                                 n_features=5, n_levels=3, seed=9)
    tables = {"members": {"views": ["raw"], "label_groupings": ["original"], "calibrators": ["shift"],
                          "adaboost": [{"base": "tree", "n_leaves": 3, "n_iterations": 4, "checkpoints": [2, 4]}]},
              "mixer": {"compare": ["one_best"]}, "run": {"backend": "sequential", "report_plots": False}}
    t = sets["train"]
    ranker = tunemix.TuneMixRanker(tables, n_jobs=1, progress=False).fit(t.features, t.labels,
                                                                          np.diff(t.query_offsets))
    comp = ranker.record_["numba_compile"]
    assert comp["total_s"] >= 0.0 and set(comp["by_stage"]) <= set(ranker.record_["timings"])
    assert all(v <= ranker.record_["timings"][k] + 1e-6 for k, v in comp["by_stage"].items())
    assert "numba compiling kernels" in render_markdown(ranker.record_)


def test_no_warm_up_where_numba_cannot_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A read-only cache (an installed package in a container, its __pycache__ not writable):
    numba compiles in each process anyway, so a warm-up would only add its own time."""
    monkeypatch.setattr(warm_module, "cache_dir", lambda: tmp_path / "cache")
    monkeypatch.setenv("TUNEMIX_AUTO_WARM", "1")
    monkeypatch.setattr(warm_module, "warm", lambda out=None: pytest.fail("warmed a cache numba cannot write"))
    monkeypatch.setattr(warm_module.os, "access", lambda path, mode: False)
    assert warm_module.ensure_warm(io.StringIO()) is None


def test_the_parts_import_this_processes_code(monkeypatch: pytest.MonkeyPatch) -> None:
    """numba caches a kernel under its source file's path: the two parts must import the same
    training package as the process that starts them (a stray PYTHONPATH or another working
    directory would fill another part of the cache, and the final pass would compile it all)."""
    import io

    import training

    started: list[dict[str, Any]] = []

    class FakeProc:
        returncode = 0

        def __init__(self, args: list[str], **kwargs: Any) -> None:
            started.append({"args": args, **kwargs})

        def communicate(self) -> tuple[str, str]:
            return json.dumps({"part": "x", "seconds": 0.0, "compiled": 0, "loaded": 0}), ""

    monkeypatch.setattr(subprocess, "Popen", FakeProc)
    monkeypatch.setenv("PYTHONPATH", "/somewhere/else")
    warm_module._run_parts(io.StringIO())
    root = str(Path(training.__file__).resolve().parents[1])
    assert [s["args"][-1] for s in started] == list(warm_module.PART_MEMBERS)
    for s in started:
        assert s["cwd"] == root and s["env"]["PYTHONPATH"].split(":")[0] == root
