"""Compilation paid once and visibly: ``tunemix warm`` and the warm-up before a first fit.

The trainer's and the scorer's kernels are numba functions compiled on their first call for each
type signature and cached on disk (``cache=True``, in the one cache every entry point shares:
``tunemix.core.numba_cache``). A fresh checkout pays the compilation in its first fit: the stages that
first call a kernel (``member_scoring_s``, ``calibration_s``) take tens of seconds there against
a fraction of a second afterwards, with no word of why. ``warm()`` runs every kernel once, on
small generated data, in one step that says what it does and how long it took, then leaves a
stamp in the cache so that later runs know the cache is warm:

- ``tunemix warm`` (``make test`` runs it after installing);
- ``tunemix train``/``demo`` and ``TuneMixRanker.fit(progress=True)`` run it first, with a
  message, when the stamp is absent (``TUNEMIX_AUTO_WARM=0`` turns that off); ``tunemix demo``
  (``make serve``'s step) fits inside it (``then``), once the kernels its fit calls are compiled,
  and leaves the last part to the background.

How: one small fit (``backend = "sequential"``, ``tunemix.compile.warm_tables``) with every
member type of ``configs/mq2008.toml`` (AdaBoost.MH trees on the three views and products, each
class count of 5-grade data, McRank multi-class and ordinal, LambdaMART, the linear SVM, the
best single feature) and the default calibrator pool (optimisers cut short), the mixers
compared, the relevance head, then the model's one-thread and parallel scoring paths
(``EnsembleModel.warm_up``), the LETOR reader and ``tunemix.compile.serving.warm_all``. numba compiles on
one thread, so on a machine of two CPUs or more the fit is cut in parts that share few kernels
(``PART_MEMBERS``): ``serving`` in this process, ``learners`` then ``rest`` in a child process
beside it (``tunemix.compile.warm_child``); between them they call every kernel the whole fit
calls. The serving part's fit reaches the kernels ``tunemix demo``'s fit calls first (its
LightGBM runs compile nothing of ours), the learners' part those of the default model's
AdaBoost.MH run (after the service's evaluation and fusion paths, which need no model), so that
fit runs here right after the serving part's, beside the child, instead of after the whole
warm-up; the service's remaining paths (``warm_all``) come last and load what was compiled.
``tunemix demo`` (``background``) waits for ``serving`` and ``learners`` only: ``rest``, the
other member types' kernels that only ``tunemix train`` needs, goes on in the child, niced,
after the demo exits, and leaves the stamp; ``tunemix train`` waits for it.
With one process (``warm_processes``, ``TUNEMIX_WARM_PROCESSES``), or when a part failed, the
whole fit runs in this process instead, loading what is cached. A kernel first called by a fit
in a worker process (``backend = "loky"``) then loads from the disk cache there instead of
compiling. Figures: docs/performance.md, "The first hour".

``tunemix.core.compile_clock`` measures the seconds this process holds numba's compiler lock
(compiling, or loading a compiled kernel from the cache), so that the training record can
separate compilation from work (``record["numba_compile"]``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tunemix.compile import warm_child
from tunemix.compile.warm_child import finish_parts as _finish_parts
from tunemix.compile.warm_child import said as _said
from tunemix.compile.warm_child import start_part as _start_part
from tunemix.compile.warm_tables import BEFORE_READY, PART_MEMBERS, WARM_TABLES, warm_calibrators
from tunemix.core.compile_clock import (  # noqa: F401 - CompileClock: train.py's type, tests' name
    CompileClock,
    compile_clock,
    dispatcher_counts,
    kernel_compile_log,
    kernel_specialisations,
)

log = logging.getLogger(__name__)

STAMP = "tunemix-warm.json"


def _stamp_key() -> dict[str, str]:
    import numba

    from tunemix.core.version import __version__

    return {"tunemix": __version__, "numba": numba.__version__, "python": platform.python_version(),
            "machine": platform.machine()}


def cache_dir() -> Path:
    """Where numba caches this project's kernels (``tunemix.core.numba_cache.cache_dir``)."""
    from tunemix.core.numba_cache import cache_dir as where

    return where()


def is_warm() -> bool:
    """The cache holds this version's kernels (``warm()`` left its stamp there)."""
    try:
        return bool(json.loads((cache_dir() / STAMP).read_text()) == _stamp_key())
    except (OSError, ValueError):
        return False


def _warm_fit(tables: dict[str, Any], *, part: str, then: Callable[[], Any] | None = None) -> None:
    """One small fit of ``tables`` for ``part`` (``PART_MEMBERS``' names, or ``whole``: every
    step): with ``learners``, first the service's evaluation and fusion paths (they need no
    model; the serving part's fit meets some of them later and loads them), then the LETOR
    reader; with ``rest``, the views' big-query pieces after it; with ``serving``,
    the model's explanations, then ``then()``, last the model's one-thread and parallel scoring
    paths and every kernel the service warms before /ready (``tunemix.compile.serving.warm_all``: what
    ``then`` compiled, it loads)."""
    from tunemix.core.data.svmlight import read_svmlight, write_svmlight
    from tunemix.train.config import load_config
    from tunemix.train.train import train

    members = {"calibrators": warm_calibrators(), **tables["members"]}
    cfg = load_config(None, tables={**tables, "members": members})
    if part == "learners":  # first, the service's paths that need no model: the serving part's fit meets the
        from tunemix.compile.serving import (  # evaluation kernels later, warm_all all of them last
            warm_evaluation,
            warm_fusion,
        )

        with _quiet_logs():
            warm_evaluation()
            warm_fusion()
    if part in ("learners", "whole"):  # the LETOR reader: tunemix demo's fit, in serving, reads its files
        with tempfile.TemporaryDirectory(prefix="tunemix-warm-") as tmp:
            test = (cfg.data.synthetic.make() if cfg.data.synthetic is not None else {})["test"]
            write_svmlight(test, Path(tmp) / "test.txt")
            read_svmlight(Path(tmp) / "test.txt", n_features=test.features.shape[1])
    with _quiet_logs():  # a fit of four iterations: its log says nothing a user needs
        model = train(cfg, progress=False, save=False).model
    if part in ("rest", "whole"):
        _warm_views(model)
    if part in ("serving", "whole"):  # what tunemix demo's fit calls beyond a fit's: the report's explanations
        from tunemix.compile.serving import warm_explanations

        with _quiet_logs():
            warm_explanations(model)
    if then is not None:
        then()
    if part in ("serving", "whole"):
        _warm_service(model)


def _warm_service(model: Any) -> None:
    """The model's one-thread and parallel scoring paths (two threads) and every kernel the
    service compiles before /ready says 200 (explanations, evaluation under every convention,
    fusion): a service started after ``tunemix warm`` loads them all."""
    import numba

    from tunemix.compile.serving import warm_all
    from tunemix.core.scoring import runtime

    parallel = int(numba.config.NUMBA_NUM_THREADS) > 1  # type: ignore[attr-defined]
    before = runtime._scoring_threads
    try:
        if parallel:
            runtime.set_scoring_threads(2)
        with _quiet_logs():
            warm_all([model], parallel=parallel)
    finally:
        runtime._scoring_threads = before


def _warm_views(model: Any) -> None:
    """The views' kernels the learners' fit does not call: the big-query pieces run on several
    threads (``PARALLEL_MIN_DOCUMENTS`` documents and up), the whitening an explanation of a
    raw+white model computes for its reference document and the standardisation of a raw+std
    model's reference document (the default members of MQ2008 have one)."""
    import numpy as np

    from tunemix.core.data.normalization import PARALLEL_MIN_DOCUMENTS, standardise_by_query, whiten_by_query
    from tunemix.core.explain.exact_explanation import _standardised_reference, _unwhiten, reference_views

    rng = np.random.default_rng(0)
    x = rng.normal(size=(PARALLEL_MIN_DOCUMENTS, model.n_features)).astype(np.float32)
    off = np.array([0, x.shape[0]], dtype=np.int64)
    standardise_by_query(x, off, parts=2)
    whiten_by_query(x, off, parts=2)
    _, _, _, white = reference_views(model, x[:8], x[0])
    rows = np.ascontiguousarray(x[:8], dtype=np.float64)
    _standardised_reference(rows, rows[0].copy(), np.empty(rows.shape[1]))
    if white is not None:
        _unwhiten(np.zeros((1, white.shape[1])), x[:1].astype(np.float64), x[1].astype(np.float64), white)


@contextmanager
def _quiet_logs() -> Iterator[None]:
    """The ``tunemix`` loggers at WARNING inside the block."""
    loggers = [logging.getLogger("tunemix")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(max(lg.getEffectiveLevel(), logging.WARNING))
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)


def warm_part(name: str, then: Callable[[], Any] | None = None) -> dict[str, Any]:
    """One part of ``PART_MEMBERS`` in this process (``python -m tunemix.compile.warm --part``);
    ``then()`` after its fit (``_warm_fit``), its time not counted."""
    t0 = time.perf_counter()
    t0_parent = os.environ.get("TUNEMIX_WARM_T0")
    started_s = round(time.time() - float(t0_parent), 2) if t0_parent else 0.0
    before, cpu = dispatcher_counts(), time.process_time()
    with compile_clock() as cc:
        _warm_fit({**WARM_TABLES, "members": PART_MEMBERS[name]}, part=name, then=then)
    after = dispatcher_counts()
    then_s, then_cpu = float(getattr(then, "seconds", 0.0)), float(getattr(then, "cpu_s", 0.0))  # a _Once
    ended_s = round(time.time() - float(t0_parent), 2) if t0_parent else 0.0
    return {"part": name, "seconds": round(time.perf_counter() - t0 - then_s, 2),
            "cpu_s": round(time.process_time() - cpu - then_cpu, 2), "compile_s": round(cc.seconds, 2),
            "compiled": after[0] - before[0], "loaded": after[1] - before[1], "started_s": started_s,
            "ended_s": ended_s}


def warm_processes() -> int:
    """Processes ``warm`` compiles in: ``TUNEMIX_WARM_PROCESSES``, else 2 where there are two
    CPUs (numba compiles on one thread), else 1."""
    raw = os.environ.get("TUNEMIX_WARM_PROCESSES", "").strip()
    if raw:
        try:
            value = int(raw)
        except ValueError:
            raise ValueError(f"TUNEMIX_WARM_PROCESSES={raw!r}: expected 1 or 2") from None
        if value not in (1, 2):
            raise ValueError(f"TUNEMIX_WARM_PROCESSES={raw!r}: expected 1 or 2")
        return value
    return 2 if (os.cpu_count() or 1) >= 2 else 1


def _run_parts(out: Any, then: Callable[[], Any] | None = None,
               background: Path | None = None) -> tuple[list[dict[str, Any]], Any]:
    """The ``learners`` and ``rest`` parts in a child process (one after the other) and the
    serving part here, side by side, with ``then()`` here once the serving part's fit is done,
    while the child still compiles (what ``then`` calls that neither part has saved yet it
    compiles itself). With ``background``, only ``learners`` is awaited, ``rest`` goes on in the
    child. What each awaited part reported (a failed one left out), and the child."""
    names = [n for n in PART_MEMBERS if n != "serving"]
    child = _start_part(names, background)
    done: list[dict[str, Any]] = []
    try:
        try:
            done.append(_said(out, warm_part("serving", then)))
        except Exception as exc:  # the final pass compiles what it did not
            out.write(f"tunemix warm: part serving failed ({type(exc).__name__}: {exc}); the final pass compiles "
                      "its kernels instead\n")
            log.debug("the serving part failed", exc_info=True)
    finally:
        children = _finish_parts(names, child, out, background)
    return [*children, *done], child


def write_stamp(where: Path) -> None:
    """The stamp that says the cache holds every kernel of this install (``is_warm``)."""
    try:
        where.mkdir(parents=True, exist_ok=True)
        (where / STAMP).write_text(json.dumps(_stamp_key()))
    except OSError as exc:
        log.warning("could not write the warm-up stamp in %s: %s", where, exc)


class _Once:
    """``then()`` run at most once, timed; its exception kept (the warm-up completes, then the
    caller sees it) instead of failing the part it ran in."""

    def __init__(self, then: Callable[[], Any] | None) -> None:
        self.then, self.seconds, self.cpu_s = then, 0.0, 0.0
        self.error: Exception | None = None
        self.ran = then is None

    def __call__(self) -> None:
        if self.ran:
            return
        self.ran = True
        started, cpu = time.perf_counter(), time.process_time()
        try:
            self.then()  # type: ignore[misc]
        except Exception as exc:
            self.error = exc
        self.seconds, self.cpu_s = time.perf_counter() - started, time.process_time() - cpu


#: the project's packages whose bytecode ``compile_bytecode`` writes
PACKAGES = ("tunemix",)


def compile_bytecode() -> int:
    """Write the bytecode (``__pycache__``) of this project's modules that lack it or whose source
    changed; returns how many modules it wrote. Where ``PYTHONDONTWRITEBYTECODE`` is set (as on this
    project's machines) or the install is editable, nothing else writes them, and every process
    compiles the about 80 modules a fit imports from source: 0.29 s of each fit's start on an MQ2008
    fold (cProfile), and of each ``tunemix`` command and service worker. Installed
    packages (pip's wheels, the image) have theirs already: nothing to do. A folder that cannot be
    written is left as it is."""
    import compileall
    import importlib.util

    root = Path(__file__).resolve().parents[2]
    written = 0
    for package in PACKAGES:
        folder = root / package
        if not folder.is_dir():
            continue
        stale = [p for p in folder.rglob("*.py") if _stale(p, importlib.util.cache_from_source(str(p)))]
        if not stale:
            continue
        with contextlib.suppress(OSError):
            compileall.compile_dir(str(folder), quiet=2, workers=1)
        written += sum(1 for p in stale if not _stale(p, importlib.util.cache_from_source(str(p))))
    return written


def _stale(source: Path, cached: str) -> bool:
    try:
        return Path(cached).stat().st_mtime < source.stat().st_mtime
    except OSError:
        return True


def warm(out: Any = None, *, processes: int | None = None, then: Callable[[], Any] | None = None,
         background: bool = False) -> dict[str, Any]:
    """Compile (or load from the cache) every training and scoring kernel, and every kernel the
    service warms before ``/ready`` (``tunemix.compile.serving.warm_all``); say so on ``out`` (default
    stderr) with the seconds it took; leave the stamp. With two processes (``warm_processes``)
    the serving part compiles here and the ``learners`` and ``rest`` parts in a child beside it,
    and between them they call every kernel the whole fit calls; with one, or when a part
    failed, the whole ``WARM_TABLES`` fit runs here (loading what the parts saved). ``then``
    (``tunemix demo``'s fit) runs here once the serving part's fit is done, beside the child,
    else after the whole fit. With ``background`` (``tunemix demo``, two processes), this returns
    once ``serving`` and ``learners`` are done and ``rest`` goes on in the child, which leaves the
    stamp (``tunemix.compile.warm_child``). Returns what was done."""
    out = out or sys.stderr
    compile_bytecode()
    where = cache_dir()
    processes = warm_processes() if processes is None else processes
    log_path = where / warm_child.BACKGROUND_LOG if background and processes > 1 \
        and warm_child.supported() else None
    out.write(f"tunemix warm: compiling the numba kernels of training and scoring once, or loading them from "
              f"the cache in {where}, in {processes} process{'es' if processes > 1 else ''} (a fresh install takes "
              f"a minute or two, a warm cache seconds) ...\n")
    out.flush()
    t0 = time.perf_counter()
    job = _Once(then)
    parts, child = _run_parts(out, job, log_path) if processes > 1 else ([], None)
    pid = getattr(child, "pid", None)
    expected = len(BEFORE_READY) if log_path is not None else len(PART_MEMBERS)
    final = len(parts) < expected if processes > 1 else True
    before = dispatcher_counts()
    with compile_clock() as cc, kernel_compile_log() as kernels:
        if final:  # one process, or a part failed: the whole fit here
            _warm_fit(WARM_TABLES, part="whole")
    after = dispatcher_counts()
    compiled, loaded = after[0] - before[0], after[1] - before[1]
    compiled_total = compiled + sum(p["compiled"] for p in parts)
    loaded_total = loaded + sum(p["loaded"] for p in parts)
    behind = log_path is not None and not final  # the rest compiles in the child, which leaves the stamp
    if not behind:
        write_stamp(where)
    if log_path is not None:
        warm_child.tell_child(child, ok=True)
    job()  # when it has not run beside the child: now
    seconds = time.perf_counter() - t0
    how = (f"{processes} processes" if not final else
           f"{processes} process{'es' if processes > 1 else ''}; the whole fit here compiled {compiled}")
    beside = (f"; of that, {job.seconds:.1f} s ({job.cpu_s:.1f} CPU-s) the fit that waited for it" if then is not None
              else "")
    what = "the service's and the default model's kernels" if behind else "every kernel"
    out.write(f"tunemix warm: done in {seconds:.1f} s ({what}): {compiled_total} kernel specialisations compiled, "
              f"{loaded_total} loaded from the cache ({how}{beside})\n")
    if behind:
        out.write(f"tunemix warm: part rest (the other learners' kernels, for tunemix train) goes on compiling in "
                  f"the background, niced (pid {pid}; log {log_path}); tunemix train waits for it\n")
    out.flush()
    several = {k: v for k, v in kernel_specialisations().items() if v["signatures"] > 1}
    log.debug("kernels compiled for several signatures: %s", several)
    slowest = dict(sorted(kernels.seconds.items(), key=lambda kv: -kv[1])[:25])
    if job.error is not None:  # the caller's fit failed: its error, once the warm-up is complete
        raise job.error
    return {"seconds": seconds, "then_s": job.seconds, "compile_s": cc.seconds, "compiled": compiled_total,
            "final_pass": final, "final_pass_compiled": compiled, "loaded": loaded_total, "processes": processes,
            "parts": parts, "cache_dir": str(where), "several_signatures": several, "slowest_compilations_s": slowest,
            "background": {"pid": pid, "log": str(log_path)} if behind else None}


def seed_shipped(where: Path) -> bool:
    """The compiled code shipped with the package placed in the cache ``where``
    (``tunemix.core.shipped_cache.seed``) and, when it holds every kernel ``warm()`` compiles, the
    stamp written: True when the cache is then warm. When this process seeded it, the host's own
    code compiles in the background, niced, and replaces the shipped code
    (``tunemix.compile.host_code``)."""
    from tunemix.compile.host_code import start_background
    from tunemix.core.shipped_cache import seed

    try:
        done = seed(cache=where)
    except Exception:  # the warm-up then compiles, as without a shipped cache
        log.warning("seeding the numba cache from the shipped one failed", exc_info=True)
        return False
    if done["status"] in ("seeded", "seeded already") and done.get("complete"):
        write_stamp(where)
        if done["status"] == "seeded":
            child = start_background(where)
            if child is not None:
                log.info("compiling the host's code in the background (pid %s, log %s)", child.pid,
                         where / "tunemix-host-code.log")
        return True
    return False


def ensure_warm(out: Any = None, *, then: Callable[[], Any] | None = None,
                background: bool = False) -> dict[str, Any] | None:
    """``warm()`` when the cache is cold (no stamp) unless ``TUNEMIX_AUTO_WARM=0``; None when
    nothing was done (and ``then`` not run: the caller runs its fit itself). A cache the shipped
    compiled code seeds with every kernel (``seed_shipped``) is warm. A background part still
    compiling is waited for first. The message says why the first run waits."""
    if os.environ.get("TUNEMIX_AUTO_WARM", "1").strip() == "0" or is_warm():
        return None
    where = cache_dir()
    if seed_shipped(where):
        return None
    out = out or sys.stderr
    if warm_child.wait_for_background(where, out) is not None and is_warm():
        return None
    existing = next((p for p in (where, *where.parents) if p.exists()), None)
    if existing is None or not os.access(existing, os.W_OK):  # numba cannot cache here: warming buys nothing
        log.info("numba cache %s is not writable: no warm-up (each process compiles what it calls)", where)
        return None
    out.write("tunemix: the numba cache is cold (first run of this install): compiling the kernels before the fit; "
              "`tunemix warm` does this ahead of time (TUNEMIX_AUTO_WARM=0 skips it)\n")
    return warm(out, then=then, background=background)


def main(argv: list[str] | None = None) -> int:
    """``python -m tunemix.compile.warm --part NAME [NAME ...] [--background LOG]``: the parts
    one after the other, each result as a JSON line; with ``--background``, the parts after the
    first niced with their output in LOG, and the stamp written at the end when the parent
    said that its own parts succeeded (``tunemix.compile.warm_child``)."""
    import argparse

    ap = argparse.ArgumentParser(description="Parts of tunemix warm (run by tunemix warm itself).")
    ap.add_argument("--part", nargs="+", choices=sorted(PART_MEMBERS), required=True)
    ap.add_argument("--background", type=Path, default=None, help="the log of the parts after the first")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    if args.background is not None:
        warm_child.hold_lock(cache_dir())  # until this process exits: tunemix train waits on it
    for k, name in enumerate(args.part):
        if k and args.background is not None:
            warm_child.go_background(args.background)
        result = warm_part(name)
        print(json.dumps(result), flush=True)  # noqa: T201 - the parent reads it
        if k and args.background is not None:
            _said(sys.stdout, result)
    if args.background is not None:
        if not warm_child.parent_succeeded():
            print("tunemix warm: the parent's parts did not complete: no stamp (the next warm-up compiles "  # noqa: T201
                  "what is missing)", flush=True)
            return 1
        write_stamp(cache_dir())
        print(f"tunemix warm: every kernel compiled; stamp written in {cache_dir()}", flush=True)  # noqa: T201
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
