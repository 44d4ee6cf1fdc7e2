"""Compilation paid once and visibly: ``tunemix warm`` and the warm-up before a first fit.

The trainer's and the scorer's kernels are numba functions compiled on their first call for each
type signature and cached on disk (``cache=True``; ``NUMBA_CACHE_DIR``, else ``__pycache__``
beside the sources). A fresh checkout pays the compilation in its first fit: the stages that
first call a kernel (``member_scoring_s``, ``calibration_s``) take tens of seconds there against
a fraction of a second afterwards, and nothing said so. ``warm()`` runs every kernel once, on
small generated data, in one step that says what it does and how long it took, then leaves a
stamp in the cache so that later runs know the cache is warm:

- ``tunemix warm`` (``make serve`` and ``make test`` run it after installing);
- ``tunemix train``/``demo`` and ``TuneMixRanker.fit(progress=True)`` run it first, with a
  message, when the stamp is absent (``TUNEMIX_AUTO_WARM=0`` turns that off).

How: one small fit (``backend = "sequential"``, ``WARM_TABLES``) with every member type of
``configs/mq2008.toml`` (AdaBoost.MH trees on the three views and products, every label grouping
of 5-grade data, McRank multi-class and ordinal, LambdaMART, the linear SVM, the best single
feature) and the default calibrator pool, the mixers compared, the relevance head, then the
model's one-thread and parallel scoring paths (``EnsembleModel.warm_up``), the LETOR reader and
``tunemix.warmup.warm_all``. numba compiles on one thread, so on a machine of two CPUs or more
the fit is cut in two parts that share few kernels (``PART_MEMBERS``), compiled side by side
in two child processes; between them they call every kernel the whole fit calls (the learners'
part also runs the views' big-query pieces and the reference whitening of an explanation,
which only a raw+white model needs). With one process (``warm_processes``,
``TUNEMIX_WARM_PROCESSES``), or when a part failed, the whole fit runs in this process instead,
loading what is cached. A fresh cache on a quiet 2-core machine: 100.5 s (the parts 89.4 and
98.4 s side by side, 185 CPU-s), where one process took 210.5 s before (202 CPU-s, with the
``parallel=True`` twins, ``training.threads``); the whole fit run after it compiled nothing.
A kernel first called by a fit in a worker process
(``backend = "loky"``) then loads from the disk cache there instead of compiling.

``CompileClock`` measures the seconds this process holds numba's compiler lock (compiling, or
loading a compiled kernel from the cache), so that the training record can separate compilation
from work (``record["numba_compile"]``).
"""

from __future__ import annotations

import json
import logging
import os
import platform
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any, TypeVar

from numba.core import event

log = logging.getLogger(__name__)

STAMP = "tunemix-warm.json"
_L = TypeVar("_L", bound=event.Listener)

#: Every member type of configs/mq2008.toml at a few iterations (the kernels, not the model,
#: matter) on 5-grade data with every label grouping: the boosting and scoring kernels take the
#: class count K as a tuple's length, so each K in 1..5 is a specialisation of its own (grow_tree,
#: fit_product, the forest pass: LambdaMART's K = 1, binary 2, three-level 3, four 4, five 5),
#: and data of up to five grades meets no kernel the warm-up did not compile. Each K once, not each
#: grouping (``K_GROUPINGS``: three-b is a second K = 3) nor each view times each grouping (the
#: views change no kernel's types): every run's snapshot is calibrated with the whole default
#: pool, about 1.7 CPU-s of L-BFGS a run that compiles nothing new: the learners' part with the
#: cache warm took 46.9 CPU-s for 22 runs, 20.8 for these 12, and an empty cache filled by either
#: holds the same 103 kernel signatures. One snapshot per run and a one-model relevance head: the
#: calibrators' and the head's kernels, not their number.
K_GROUPINGS = ["original", "binary", "three-a", "four"]
WARM_TABLES: dict[str, Any] = {
    "name": "warm-up",
    "seed": 0,
    "data": {"synthetic": {"queries": [24, 10, 8], "docs_per_query": [6, 20], "features": 6, "levels": 5,
                           "noise": 0.3, "seed": 0}},
    "members": {
        "views": ["raw"], "label_groupings": ["all"], "best_feature": True,
        "adaboost": [{"base": "tree", "n_leaves": [8], "n_iterations": 4, "checkpoints": [4],
                      "label_groupings": K_GROUPINGS},
                     {"base": "tree", "n_leaves": [8], "n_iterations": 4, "checkpoints": [4],
                      "views": ["raw+std", "raw+white"], "label_groupings": ["original"]},
                     {"base": "product", "n_terms": [3], "n_iterations": 4, "checkpoints": [4],
                      "label_groupings": K_GROUPINGS}],
        "mcrank": [{"variant": ["multiclass", "ordinal"], "n_leaves": [8], "learning_rate": 0.1, "n_iterations": 4,
                    "checkpoints": [4], "label_groupings": ["original"]}],
        "lambdamart": [{"n_leaves": [8], "learning_rate": 0.1, "n_iterations": 4, "checkpoints": [4]}],
        "svm": [{"C": [1.0], "label_groupings": ["original"]}],
    },
    "mixer": {"name": "exp_forecaster", "measure": "ndcg@10", "convention": "yahoo", "snapshots": "tune",
              "tune_on": "validation", "rescale": "zscore_query", "tie_tolerance": "one_se"},
    "relevance": {"n_leaves": [4], "min_data_in_leaf": [20], "max_iterations": 20, "patience": 5},
    "run": {"backend": "sequential", "n_jobs": 1, "report_plots": False},
}


#: The warm-up in two parts that share few kernels, compiled side by side in two processes (numba
#: compiles on one thread): ``learners``, the AdaBoost.MH runs (trees on the three views, products;
#: every label grouping, so every class count), the linear SVM, the best feature and the LETOR
#: reader; ``serving``, the LightGBM runs (McRank, LambdaMART), whose fit compiles nothing of
#: ours and so reaches the shared kernels first (the forest pass, the calibration step, the
#: evaluation and mixing kernels, the relevance head), then every path the service warms before
#: /ready (``tunemix.warmup.warm_all``: explanations, evaluation under every convention, fusion).
#: A kernel one part saved is loaded by the other when it gets there; the final pass in the
#: parent (the whole ``WARM_TABLES`` fit) then loads everything and compiles what both missed.
PART_MEMBERS: dict[str, dict[str, Any]] = {
    "learners": {**{k: v for k, v in WARM_TABLES["members"].items() if k not in ("mcrank", "lambdamart")}},
    "serving": {"views": ["raw"], "label_groupings": ["all"], "best_feature": False,
                "mcrank": WARM_TABLES["members"]["mcrank"], "lambdamart": WARM_TABLES["members"]["lambdamart"]},
}


def _stamp_key() -> dict[str, str]:
    import numba

    from tunemix import __version__

    return {"tunemix": __version__, "numba": numba.__version__, "python": platform.python_version(),
            "machine": platform.machine()}


def cache_dir() -> Path:
    """Where numba caches this project's kernels: ``NUMBA_CACHE_DIR``, else the training
    package's ``__pycache__`` (numba's default for sources it can write beside)."""
    import numba

    configured = str(getattr(numba.config, "CACHE_DIR", "") or "")
    return Path(configured) if configured else Path(__file__).resolve().parents[1] / "__pycache__"


def is_warm() -> bool:
    """The cache holds this version's kernels (``warm()`` left its stamp there)."""
    try:
        return bool(json.loads((cache_dir() / STAMP).read_text()) == _stamp_key())
    except (OSError, ValueError):
        return False


class CompileClock(event.Listener):
    """Seconds this process spends holding numba's compiler lock (compiling a kernel, or loading
    it from the disk cache), counted once for nested acquisitions, over every thread."""

    def __init__(self) -> None:
        super().__init__()
        self.seconds = 0.0
        self._depth = 0
        self._t0 = 0.0
        self._lock = threading.Lock()

    def on_start(self, event: Any) -> None:
        with self._lock:
            if self._depth == 0:
                self._t0 = time.perf_counter()
            self._depth += 1

    def on_end(self, event: Any) -> None:
        with self._lock:
            self._depth -= 1
            if self._depth == 0:
                self.seconds += time.perf_counter() - self._t0


class KernelCompileLog(event.Listener):
    """Seconds of each compilation from scratch (numba's ``numba:compile`` events: not cache
    loads), per ``module.kernel(signature)``; a kernel that calls others includes their time."""

    def __init__(self) -> None:
        super().__init__()
        self.seconds: dict[str, float] = {}
        self._open: dict[int, tuple[str, float]] = {}
        self._lock = threading.Lock()

    def on_start(self, ev: Any) -> None:
        data = ev.data or {}
        disp = data.get("dispatcher")
        name = f"{getattr(disp, '__module__', '?')}.{getattr(disp, '__name__', '?')}"
        key = f"{name}({', '.join(str(a) for a in data.get('args', ()))})"
        with self._lock:
            self._open[id(ev.data)] = (key, time.perf_counter())

    def on_end(self, ev: Any) -> None:
        with self._lock:
            key, t0 = self._open.pop(id(ev.data), ("?", time.perf_counter()))
            self.seconds[key] = self.seconds.get(key, 0.0) + time.perf_counter() - t0


@contextmanager
def _listening(kind: str, listener: _L) -> Iterator[_L]:
    """``listener`` registered for numba's ``kind`` events inside the block."""
    event.register(kind, listener)
    try:
        yield listener
    finally:
        event.unregister(kind, listener)


def compile_clock() -> AbstractContextManager[CompileClock]:
    """``with compile_clock() as cc: ...`` then ``cc.seconds``."""
    return _listening("numba:compiler_lock", CompileClock())


def kernel_compile_log() -> AbstractContextManager[KernelCompileLog]:
    """``with kernel_compile_log() as k: ...`` then ``k.seconds`` (per kernel and signature)."""
    return _listening("numba:compile", KernelCompileLog())


def kernel_specialisations() -> dict[str, dict[str, int]]:
    """Per numba kernel of the loaded ``training`` modules (``module.function``): its type
    signatures compiled in this process, compiled from scratch (``compiled``) and loaded from the
    disk cache (``loaded``). Several signatures of one kernel are several compilations."""
    from numba.core.dispatcher import Dispatcher

    out: dict[str, dict[str, int]] = {}
    for name, module in list(sys.modules.items()):
        if not name.startswith("training.") or module is None:
            continue
        for attr, obj in list(vars(module).items()):
            if isinstance(obj, Dispatcher) and obj.__module__ == name and obj.signatures:
                stats = obj.stats
                out[f"{name}.{attr}"] = {"signatures": len(obj.signatures),
                                         "compiled": int(sum(stats.cache_misses.values())),
                                         "loaded": int(sum(stats.cache_hits.values()))}
    return out


def _dispatcher_counts() -> tuple[int, int]:
    """(specialisations compiled, specialisations loaded from the cache), every kernel."""
    kernels = kernel_specialisations().values()
    return sum(k["compiled"] for k in kernels), sum(k["loaded"] for k in kernels)


def _warm_fit(tables: dict[str, Any], *, serving: bool) -> None:
    """One small fit of ``tables``; with ``serving``, then the model's one-thread and parallel
    scoring paths, the LETOR reader and every kernel the service warms before /ready."""
    import numba

    from training.data.svmlight import read_svmlight, write_svmlight
    from training.pipeline.config import load_config
    from training.pipeline.train import train
    from training.scoring import forest

    cfg = load_config(None, tables=tables)
    with _quiet_logs():  # a fit of four iterations: its log says nothing a user needs
        model = train(cfg, progress=False, save=False).model
    if not serving:
        _warm_views(model)
        return
    with tempfile.TemporaryDirectory(prefix="tunemix-warm-") as tmp:  # the LETOR reader
        sets = cfg.data.synthetic.make() if cfg.data.synthetic is not None else {}
        write_svmlight(sets["test"], Path(tmp) / "test.txt")
        read_svmlight(Path(tmp) / "test.txt", n_features=model.n_features)
    # the model's one-thread and parallel scoring paths (two threads) and every kernel the
    # service compiles before /ready says 200 (explanations, evaluation under every convention,
    # fusion): a service started after `tunemix warm` loads them all
    from tunemix.warmup import warm_all

    parallel = int(numba.config.NUMBA_NUM_THREADS) > 1  # type: ignore[attr-defined]
    before = forest._scoring_threads
    try:
        if parallel:
            forest.set_scoring_threads(2)
        with _quiet_logs():
            warm_all([model], parallel=parallel)
    finally:
        forest._scoring_threads = before


def _warm_views(model: Any) -> None:
    """The views' kernels the learners' fit does not call: the big-query pieces run on several
    threads (``PARALLEL_MIN_DOCUMENTS`` documents and up) and the whitening an explanation of a
    raw+white model computes for its reference document."""
    import numpy as np

    from training.data.normalization import PARALLEL_MIN_DOCUMENTS, standardise_by_query, whiten_by_query
    from training.scoring.exact_explanation import _unwhiten, reference_views

    rng = np.random.default_rng(0)
    x = rng.normal(size=(PARALLEL_MIN_DOCUMENTS, model.n_features)).astype(np.float32)
    off = np.array([0, x.shape[0]], dtype=np.int64)
    standardise_by_query(x, off, parts=2)
    whiten_by_query(x, off, parts=2)
    _, _, _, white = reference_views(model, x[:8], x[0])
    if white is not None:
        _unwhiten(np.zeros((1, white.shape[1])), x[:1].astype(np.float64), x[1].astype(np.float64), white)


@contextmanager
def _quiet_logs() -> Iterator[None]:
    """The ``training`` and ``tunemix`` loggers at WARNING inside the block."""
    loggers = [logging.getLogger(name) for name in ("training", "tunemix")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(max(lg.getEffectiveLevel(), logging.WARNING))
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)


def warm_part(name: str) -> dict[str, Any]:
    """One part of ``PART_MEMBERS`` in this process (``python -m training.pipeline.warm --part``)."""
    t0 = time.perf_counter()
    with compile_clock() as cc:
        _warm_fit({**WARM_TABLES, "members": PART_MEMBERS[name]}, serving=name == "serving")
    compiled, loaded = _dispatcher_counts()
    return {"part": name, "seconds": round(time.perf_counter() - t0, 2), "compile_s": round(cc.seconds, 2),
            "compiled": compiled, "loaded": loaded}


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


def _run_parts(out: Any) -> list[dict[str, Any]]:
    """Both parts side by side, each in a child process on this cache; what each reported."""
    import subprocess

    # the children import this process's training package (numba caches a kernel under its
    # source file's path: another copy of the code would fill another part of the cache)
    root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, *filter(None, [os.environ.get("PYTHONPATH")])]))
    procs = {name: subprocess.Popen([sys.executable, "-m", "training.pipeline.warm", "--part", name], cwd=root, env=env,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for name in PART_MEMBERS}
    done: list[dict[str, Any]] = []
    for name, proc in procs.items():
        stdout, stderr = proc.communicate()
        if proc.returncode != 0:  # the final pass compiles what this part did not: say so, go on
            out.write(f"tunemix warm: part {name} failed (exit {proc.returncode}); the final pass compiles its "
                      f"kernels instead:\n{stderr[-2000:]}\n")
            continue
        result = json.loads(stdout.strip().splitlines()[-1])
        out.write(f"tunemix warm: part {name} done in {result['seconds']:.1f} s ({result['compiled']} kernel "
                  f"specialisations compiled, {result['loaded']} loaded)\n")
        out.flush()
        done.append(result)
    return done


def warm(out: Any = None, *, processes: int | None = None) -> dict[str, Any]:
    """Compile (or load from the cache) every training and scoring kernel, and every kernel the
    service warms before ``/ready`` (``tunemix.warmup.warm_all``); say so on ``out`` (default
    stderr) with the seconds it took; leave the stamp. With two processes (``warm_processes``)
    the two ``PART_MEMBERS`` compile side by side, and between them they call every kernel the
    whole fit calls; with one, or when a part failed, the whole ``WARM_TABLES`` fit runs here
    (loading what the parts saved). Returns what was done."""
    out = out or sys.stderr
    where = cache_dir()
    processes = warm_processes() if processes is None else processes
    out.write(f"tunemix warm: compiling the numba kernels of training and scoring once, or loading them from "
              f"the cache in {where}, in {processes} process{'es' if processes > 1 else ''} (a fresh install takes "
              f"a minute or two, a warm cache seconds) ...\n")
    out.flush()
    t0 = time.perf_counter()
    parts = _run_parts(out) if processes > 1 else []
    final = len(parts) < len(PART_MEMBERS) if processes > 1 else True
    with compile_clock() as cc, kernel_compile_log() as kernels:
        if final:  # one process, or a part failed: the whole fit here
            _warm_fit(WARM_TABLES, serving=True)
    seconds = time.perf_counter() - t0
    compiled, loaded = _dispatcher_counts()
    compiled_total = compiled + sum(p["compiled"] for p in parts)
    loaded_total = loaded + sum(p["loaded"] for p in parts)
    try:
        where.mkdir(parents=True, exist_ok=True)
        (where / STAMP).write_text(json.dumps(_stamp_key()))
    except OSError as exc:
        log.warning("could not write the warm-up stamp in %s: %s", where, exc)
    how = (f"{processes} processes" if not final else
           f"{processes} process{'es' if processes > 1 else ''}; the whole fit here compiled {compiled}")
    out.write(f"tunemix warm: done in {seconds:.1f} s: {compiled_total} kernel specialisations compiled, "
              f"{loaded_total} loaded from the cache ({how})\n")
    out.flush()
    several = {k: v for k, v in kernel_specialisations().items() if v["signatures"] > 1}
    log.debug("kernels compiled for several signatures: %s", several)
    slowest = dict(sorted(kernels.seconds.items(), key=lambda kv: -kv[1])[:25])
    return {"seconds": seconds, "compile_s": cc.seconds, "compiled": compiled_total, "final_pass": final,
            "final_pass_compiled": compiled, "loaded": loaded_total, "processes": processes, "parts": parts,
            "cache_dir": str(where),
            "several_signatures": several, "slowest_compilations_s": slowest}


def ensure_warm(out: Any = None) -> dict[str, Any] | None:
    """``warm()`` when the cache is cold (no stamp) unless ``TUNEMIX_AUTO_WARM=0``; None when
    nothing was done. The message says why the first run waits."""
    if os.environ.get("TUNEMIX_AUTO_WARM", "1").strip() == "0" or is_warm():
        return None
    where = cache_dir()
    existing = next((p for p in (where, *where.parents) if p.exists()), None)
    if existing is None or not os.access(existing, os.W_OK):  # numba cannot cache here: warming buys nothing
        log.info("numba cache %s is not writable: no warm-up (each process compiles what it calls)", where)
        return None
    out = out or sys.stderr
    out.write("tunemix: the numba cache is cold (first run of this install): compiling the kernels before the fit; "
              "`tunemix warm` does this ahead of time (TUNEMIX_AUTO_WARM=0 skips it)\n")
    return warm(out)


def main(argv: list[str] | None = None) -> int:
    """``python -m training.pipeline.warm --part NAME``: one part, its result as a JSON line."""
    import argparse

    ap = argparse.ArgumentParser(description="One part of tunemix warm (run by tunemix warm itself).")
    ap.add_argument("--part", choices=sorted(PART_MEMBERS), required=True)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    print(json.dumps(warm_part(args.part)))  # noqa: T201 - the parent reads it
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
