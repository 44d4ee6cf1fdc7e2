"""Compilation paid once and visibly (issue 40): ``tunemix warm``, its stamp, the warm-up before a
first fit on a cold cache, and the record's numba compile time."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tunemix.compile import warm as warm_module

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

    def fake_warm(out: Any = None, then: Any = None, background: bool = False) -> dict[str, Any]:  # the real one:
        # test_tunemix_warm
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
    proc = subprocess.run([sys.executable, "-m", "tunemix.cli", "warm"], cwd=ROOT, capture_output=True, text=True,
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
    proc = subprocess.run([sys.executable, "-m", "tunemix.cli", "warm", "--if-cold"], cwd=ROOT, capture_output=True,
                          text=True, env=env)
    assert proc.returncode == 0 and "compiled already" in proc.stdout


def test_the_record_separates_numba_compile_time() -> None:
    import tunemix
    from tunemix.train.data.synthetic import make_synthetic_splits
    from tunemix.train.report import render_markdown

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
    monkeypatch.setattr(warm_module, "warm",
                        lambda out=None, then=None, background=False: pytest.fail("warmed a cache numba cannot "
                                                                                  "write"))
    monkeypatch.setattr(warm_module.os, "access", lambda path, mode: False)
    assert warm_module.ensure_warm(io.StringIO()) is None


def test_the_parts_import_this_processes_code(monkeypatch: pytest.MonkeyPatch) -> None:
    """numba caches a kernel under its source file's path: the learners' part, a child process,
    must import the same training package as the process that starts it (a stray PYTHONPATH or
    another working directory would fill another part of the cache); the serving part runs in
    this process."""
    import io

    import tunemix

    started: list[dict[str, Any]] = []

    class FakeProc:
        returncode = 0

        def __init__(self, args: list[str], **kwargs: Any) -> None:
            started.append({"args": args, **kwargs})

        def communicate(self) -> tuple[str, str]:
            return "\n".join(json.dumps({"part": n, "seconds": 0.0, "compiled": 0, "loaded": 0})
                             for n in ("learners", "rest")), ""

    here: list[str] = []
    monkeypatch.setattr(subprocess, "Popen", FakeProc)
    monkeypatch.setattr(warm_module, "warm_part", lambda name, then=None: here.append(name) or
                        {"part": name, "seconds": 0.0, "compiled": 0, "loaded": 0})
    monkeypatch.setenv("PYTHONPATH", "/somewhere/else")
    parts, _ = warm_module._run_parts(io.StringIO())
    root = str(Path(tunemix.__file__).resolve().parents[1])
    assert [s["args"][-3:] for s in started] == [["--part", "learners", "rest"]] and here == ["serving"]
    assert sorted(p["part"] for p in parts) == sorted(warm_module.PART_MEMBERS)
    for s in started:
        assert s["cwd"] == root and s["env"]["PYTHONPATH"].split(":")[0] == root


class _Learners:
    """A learners' part that has finished (or failed) when asked; ``events`` says when."""

    def __init__(self, events: list[str], returncode: int = 0) -> None:
        self.events, self.returncode = events, returncode
        self.started_at = time.time()  # what _start_part records
        events.append("learners started")

    def communicate(self) -> tuple[str, str]:
        self.events.append("learners awaited")
        if self.returncode:
            return "", "boom"
        return "\n".join(json.dumps({"part": n, "seconds": 1.0, "compiled": 1, "loaded": 3})
                         for n in ("learners", "rest")), ""

    def poll(self) -> int:
        return self.returncode


def test_then_runs_after_the_serving_part_beside_the_learners_part(monkeypatch: pytest.MonkeyPatch,
                                                                  tmp_path: Path) -> None:
    """``warm(then=fit)`` (tunemix demo on a cold cache): the fit runs in this process after the
    serving part's fit, before the learners' part is awaited, once; the stamp is left after
    both parts."""
    events: list[str] = []
    monkeypatch.setattr(warm_module, "cache_dir", lambda: tmp_path)
    monkeypatch.setattr(warm_module, "_start_part", lambda names, background=None: _Learners(events))

    def fake_fit(tables: dict[str, Any], *, part: str, then: Any = None) -> None:
        assert part == "serving" and tables["members"] == warm_module.PART_MEMBERS["serving"]
        events.append("serving fit")
        then()
        events.append("serving paths")

    monkeypatch.setattr(warm_module, "_warm_fit", fake_fit)
    out = io.StringIO()
    result = warm_module.warm(out, processes=2, then=lambda: events.append(f"then, stamp {warm_module.is_warm()}"))
    assert events == ["learners started", "serving fit", "then, stamp False", "serving paths", "learners awaited"]
    assert warm_module.is_warm() and not result["final_pass"] and result["compiled"] == 2
    assert "part serving done" in out.getvalue() and "part learners done" in out.getvalue()
    assert "the fit that waited for it" in out.getvalue()


@pytest.mark.parametrize(("processes", "learners_exit", "serving_fails", "expected"), [
    (2, 0, True, ["learners started", "serving fit", "then", "learners awaited", "whole fit", "serving paths"]),
    (2, 1, False, ["learners started", "serving fit", "then", "serving paths", "learners awaited", "whole fit",
                   "serving paths"]),
    (1, 0, False, ["whole fit", "serving paths", "then"]),
])
def test_then_runs_once_and_a_failed_part_leaves_the_whole_fit(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, processes: int, learners_exit: int, serving_fails: bool,
        expected: list[str]) -> None:
    """A part failed: the whole fit runs here (the final pass) and ``then`` runs once, where it
    ran before or after the whole fit; with one process, after the whole fit."""
    events: list[str] = []
    monkeypatch.setattr(warm_module, "cache_dir", lambda: tmp_path)
    monkeypatch.setattr(warm_module, "_start_part",
                        lambda names, background=None: _Learners(events, learners_exit))

    def fake_fit(tables: dict[str, Any], *, part: str, then: Any = None) -> None:
        events.append(f"{part} fit")
        if then is not None:
            then()
        if serving_fails and part == "serving":
            raise RuntimeError("serving part broke")
        events.append("serving paths")

    monkeypatch.setattr(warm_module, "_warm_fit", fake_fit)
    out = io.StringIO()
    result = warm_module.warm(out, processes=processes, then=lambda: events.append("then"))
    assert events == expected
    assert result["final_pass"] and warm_module.is_warm()
    if processes == 2:
        assert "failed" in out.getvalue() and "the final pass compiles" in out.getvalue()


def test_an_error_of_then_reaches_the_caller_after_the_warm_up(monkeypatch: pytest.MonkeyPatch,
                                                              tmp_path: Path) -> None:
    def broken() -> None:
        raise ValueError("the demo's own error")

    monkeypatch.setattr(warm_module, "cache_dir", lambda: tmp_path)
    monkeypatch.setattr(warm_module, "_warm_fit", lambda tables, **kw: kw["then"] and kw["then"]())
    monkeypatch.setattr(warm_module, "_start_part", lambda names, background=None: _Learners([]))
    with pytest.raises(ValueError, match="the demo's own error"):
        warm_module.warm(io.StringIO(), processes=2, then=broken)
    assert warm_module.is_warm()  # the warm-up completed (its stamp) before the error was raised


def test_the_warm_tables_meet_each_class_count_once_and_cut_the_calibrators_short() -> None:
    from tunemix.compile import warm_tables
    from tunemix.core.calibration.registry import DEFAULT_CALIBRATORS, make_calibrator
    from tunemix.train.learners.label_groups import get_grouping

    counts = [len(get_grouping(g, 5).groups) for g in warm_tables.K_GROUPINGS]
    assert sorted(counts) == [2, 3, 4, 5]  # with LambdaMART's K = 1: every K of up to five grades, once
    specs = warm_tables.warm_calibrators()
    assert [make_calibrator(s).name for s in specs] == list(DEFAULT_CALIBRATORS)  # the same pool
    cut = {s: make_calibrator(s) for s in specs}
    for spec, cal in cut.items():
        if spec.startswith("cpc:"):
            assert (cal.n_starts, cal.max_iter) == (1, warm_tables.WARM_ITERATIONS), spec  # type: ignore[attr-defined]
        elif spec.startswith(("rbc:nn", "rbc:logistic")):
            assert cal.max_iter == warm_tables.WARM_ITERATIONS, spec  # type: ignore[attr-defined]
    assert warm_tables.few_iterations("cpc:ewls(C=2)") == "cpc:ewls(C=2,n_starts=1,max_iter=5)"
    assert warm_tables.few_iterations("rbc:nn:gain") == "rbc:nn(max_iter=5):gain"
    assert warm_tables.few_iterations("rbc:poly3:ndcg") == "rbc:poly3:ndcg"
    # the parts together fit every member block of the whole warm-up, each once
    whole = warm_tables.WARM_TABLES["members"]
    for kind in ("adaboost", "svm", "lambdamart"):
        blocks = [b for p in warm_tables.PART_MEMBERS.values() for b in p.get(kind, [])]
        assert sorted(map(repr, blocks)) == sorted(map(repr, whole[kind]))
    variants = [v for p in warm_tables.PART_MEMBERS.values() for b in p.get("mcrank", []) for v in b["variant"]]
    assert sorted(variants) == sorted(whole["mcrank"][0]["variant"])


def test_the_parts_before_ready_hold_the_default_models_members() -> None:
    """``make serve`` waits for ``BEFORE_READY`` only: between them they fit the member types
    the default model's fit trains on the demo's data (``tunemix.train.members.auto``), the
    AdaBoost.MH run with the same base, view and label grouping, so that the demo's fit finds
    its kernels compiled; ``rest`` holds the other member types."""
    from tunemix.cli.train import DEFAULT_CONFIG
    from tunemix.compile import warm_tables
    from tunemix.train.config import load_config
    from tunemix.train.members.auto import DataShape, auto_members

    syn = load_config(DEFAULT_CONFIG).data.synthetic
    assert syn is not None
    members, _ = auto_members(DataShape(n_docs=4800, n_features=syn.features, n_labels=syn.levels, n_queries=120,
                                        vali_queries=40), None)
    before = [warm_tables.PART_MEMBERS[p] for p in warm_tables.BEFORE_READY]
    assert members["lambdamart"] and any(p.get("lambdamart") for p in before)
    assert {m["variant"] for m in members["mcrank"]} <= {v for p in before for b in p.get("mcrank", [])
                                                         for v in b["variant"]}
    (ada,) = members["adaboost"]
    blocks = [b for p in before for b in p.get("adaboost", [])]
    assert any(b["base"] == ada["base"] and ada["n_leaves"] in b["n_leaves"] and b["views"] == ada["views"]
               and b["label_groupings"] == members["label_groupings"] for b in blocks), (ada, blocks)
    assert set(warm_tables.PART_MEMBERS) - set(warm_tables.BEFORE_READY) == {"rest"}
    assert "svm" in warm_tables.PART_MEMBERS["rest"] and not any("svm" in p for p in before)


def test_a_second_process_waits_for_the_background_part(tmp_path: Path) -> None:
    """The background part holds the lock in the cache until it exits; ``wait_for_background``
    says so and waits on the lock (no lock file, or a free one: returns None at once)."""
    import os
    import threading

    from tunemix.compile import warm_child

    assert warm_child.wait_for_background(tmp_path, io.StringIO()) is None  # never ran here
    holder = subprocess.Popen([sys.executable, "-c", "import sys; from pathlib import Path; "
                               "from tunemix.compile.warm_child import hold_lock; hold_lock(Path(sys.argv[1])); "
                               "print('locked', flush=True); sys.stdin.readline()", str(tmp_path)],
                              cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdin is not None
        assert holder.stdout.readline().strip() == "locked"
        said_waiting = threading.Event()

        class Out(io.StringIO):
            def write(self, text: str) -> int:
                if "waiting for them" in text:
                    said_waiting.set()
                return super().write(text)

        out, waited = Out(), []
        waiter = threading.Thread(target=lambda: waited.append(warm_child.wait_for_background(tmp_path, out)))
        waiter.start()
        assert said_waiting.wait(timeout=600)  # it found the lock taken, said so, and blocks
        assert waiter.is_alive() and not waited
        holder.stdin.close()  # the holder exits: the lock is released
        waiter.join(timeout=600)
        assert not waiter.is_alive() and waited and isinstance(waited[0], float)
        assert "still compiling in the background" in out.getvalue() and "background compilation is done" in \
            out.getvalue()
    finally:
        holder.kill()
        holder.wait()
    assert warm_child.wait_for_background(tmp_path, io.StringIO()) is None  # released: nothing to wait for


@pytest.mark.parametrize("parent_said", ["serving done\n", ""])
def test_the_background_child_leaves_the_stamp_only_when_its_parent_succeeded(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str], parent_said: str) -> None:
    """``python -m tunemix.compile.warm --part learners rest --background LOG``: the first part
    reported on stdout, then (niced, output to LOG: stand-ins here) the rest, and the stamp only
    when the parent wrote that its own parts succeeded (a parent that died wrote nothing)."""
    from tunemix.compile import warm_child

    ran: list[str] = []
    monkeypatch.setattr(warm_module, "cache_dir", lambda: tmp_path)
    monkeypatch.setattr(warm_module, "warm_part", lambda name: ran.append(name) or
                        {"part": name, "seconds": 0.0, "compiled": 1, "loaded": 0})
    monkeypatch.setattr(warm_child, "go_background", lambda log: ran.append(f"background {log.name}"))
    monkeypatch.setattr(sys, "stdin", io.StringIO(parent_said))
    code = warm_module.main(["--part", "learners", "rest", "--background", str(tmp_path / "log.txt")])
    assert ran == ["learners", "background log.txt", "rest"]
    first = capsys.readouterr().out.splitlines()[0]
    assert json.loads(first)["part"] == "learners"
    assert (code == 0) == bool(parent_said) and warm_module.is_warm() == bool(parent_said)


def test_compile_bytecode_writes_what_imports_would_compile() -> None:
    """``compile_bytecode`` leaves every module of the project's packages with bytecode no older
    than its source (what ``PYTHONDONTWRITEBYTECODE`` machines otherwise compile at every start),
    and a second call finds nothing to write."""
    import importlib.util

    warm_module.compile_bytecode()
    root = Path(warm_module.__file__).resolve().parents[2]
    for package in warm_module.PACKAGES:
        sources = list((root / package).rglob("*.py"))
        assert sources, package
        for source in sources:
            cached = Path(importlib.util.cache_from_source(str(source)))
            assert cached.exists() and cached.stat().st_mtime >= source.stat().st_mtime, source
    assert warm_module.compile_bytecode() == 0
