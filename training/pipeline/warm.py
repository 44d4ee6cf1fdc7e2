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

How: one small fit in this process (``backend = "sequential"``, ``WARM_TABLES``) with every
member type of ``configs/mq2008.toml`` (AdaBoost.MH trees on the three views and products, every
label grouping of 5-grade data, McRank multi-class and ordinal, LambdaMART, the linear SVM, the
best single feature) and the default calibrator pool, the mixers compared, the relevance head,
then the model's one-thread and parallel scoring paths (``EnsembleModel.warm_up``) and the LETOR
reader. A kernel
first called by the fit in a worker process (``backend = "loky"``) then loads from the disk cache
there instead of compiling.

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
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from numba.core import event

log = logging.getLogger(__name__)

STAMP = "tunemix-warm.json"

#: Every member type of configs/mq2008.toml at a few iterations (the kernels, not the model,
#: matter) on 5-grade data with every label grouping: the boosting and scoring kernels take the
#: class count K as a tuple's length, so each K in 1..5 is a specialisation of its own (grow_tree,
#: fit_product, the forest pass: LambdaMART's K = 1, binary 2, three-level 3, four 4, five 5),
#: and data of up to five grades meets no kernel the warm-up did not compile. One snapshot per run
#: and a one-model relevance head: the calibrators' and the head's kernels, not their number.
WARM_TABLES: dict[str, Any] = {
    "name": "warm-up",
    "seed": 0,
    "data": {"synthetic": {"queries": [24, 10, 8], "docs_per_query": [6, 20], "features": 6, "levels": 5,
                           "noise": 0.3, "seed": 0}},
    "members": {
        "views": ["raw"], "label_groupings": ["all"], "best_feature": True,
        "adaboost": [{"base": "tree", "n_leaves": [8], "n_iterations": 4, "checkpoints": [4],
                      "views": ["raw", "raw+std", "raw+white"]},
                     {"base": "product", "n_terms": [3], "n_iterations": 4, "checkpoints": [4]}],
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
def compile_clock() -> Iterator[CompileClock]:
    """``with compile_clock() as cc: ...`` then ``cc.seconds``."""
    cc = CompileClock()
    event.register("numba:compiler_lock", cc)
    try:
        yield cc
    finally:
        event.unregister("numba:compiler_lock", cc)


@contextmanager
def kernel_compile_log() -> Iterator[KernelCompileLog]:
    """``with kernel_compile_log() as k: ...`` then ``k.seconds`` (per kernel and signature)."""
    k = KernelCompileLog()
    event.register("numba:compile", k)
    try:
        yield k
    finally:
        event.unregister("numba:compile", k)


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


def warm(out: Any = None) -> dict[str, Any]:
    """Compile (or load from the cache) every training and scoring kernel, and every kernel the
    service warms before ``/ready`` (``tunemix.warmup.warm_all``); say so on ``out``
    (default stderr) with the seconds it took; leave the stamp. Returns what was done."""
    import numba
    import numpy as np

    from training.data.svmlight import read_svmlight, write_svmlight
    from training.pipeline.config import load_config
    from training.pipeline.train import train
    from training.scoring import forest

    out = out or sys.stderr
    where = cache_dir()
    out.write(f"tunemix warm: compiling the numba kernels of training and scoring once, or loading them from "
              f"the cache in {where} (a fresh install takes a few minutes, a warm cache seconds) ...\n")
    out.flush()
    t0 = time.perf_counter()
    with compile_clock() as cc, kernel_compile_log() as kernels:
        cfg = load_config(None, tables=WARM_TABLES)
        outcome = train(cfg, progress=False, save=False)
        model = outcome.model
        before = forest._scoring_threads
        try:
            if int(numba.config.NUMBA_NUM_THREADS) > 1:  # type: ignore[attr-defined]
                forest.set_scoring_threads(2)
            model.warm_up(serial=True, parallel=True)
        finally:
            forest._scoring_threads = before
        with tempfile.TemporaryDirectory(prefix="tunemix-warm-") as tmp:
            sets = cfg.data.synthetic.make() if cfg.data.synthetic is not None else {}
            write_svmlight(sets["test"], Path(tmp) / "test.txt")
            data = read_svmlight(Path(tmp) / "test.txt", n_features=model.n_features)
            if model.relevance_head is not None:
                model.score_and_relevance(data.features, data.query_offsets)
            model.score(np.ascontiguousarray(data.features), data.query_offsets)
        # and every kernel the service compiles before /ready says 200 (explanations, evaluation
        # under every convention, fusion): a service started after `tunemix warm` loads them all
        from tunemix.warmup import warm_all

        warm_all([model], parallel=int(numba.config.NUMBA_NUM_THREADS) > 1)  # type: ignore[attr-defined]
    seconds = time.perf_counter() - t0
    compiled, loaded = _dispatcher_counts()
    try:
        where.mkdir(parents=True, exist_ok=True)
        (where / STAMP).write_text(json.dumps(_stamp_key()))
    except OSError as exc:
        log.warning("could not write the warm-up stamp in %s: %s", where, exc)
    out.write(f"tunemix warm: done in {seconds:.1f} s ({cc.seconds:.1f} s in numba's compiler: {compiled} kernel "
              f"specialisations compiled, {loaded} loaded from the cache)\n")
    out.flush()
    several = {k: v for k, v in kernel_specialisations().items() if v["signatures"] > 1}
    log.debug("kernels compiled for several signatures: %s", several)
    slowest = dict(sorted(kernels.seconds.items(), key=lambda kv: -kv[1])[:25])
    return {"seconds": seconds, "compile_s": cc.seconds, "compiled": compiled, "loaded": loaded,
            "cache_dir": str(where), "several_signatures": several, "slowest_compilations_s": slowest}


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
