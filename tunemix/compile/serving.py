"""Compile (or load from numba's cache) every kernel a request can reach, before a service says
it is ready, and at image build time into the image's ``NUMBA_CACHE_DIR``.

:func:`warm_all` runs, on tiny inputs, each path of each endpoint:

- scoring: every given model's one-thread paths and, when scoring may use several threads, its
  parallel paths (``EnsembleModel.warm_up``), the relevance head where the model has one;
- evaluation: every convention with every kind of measure (DCG, NDCG, ERR, P@k, MAP, MeanNDCG;
  cut-offs below and above the selection limit, so both the selection and the merge sort), trec
  with and without docids;
- fusion: RRF, CombSUM, CombMNZ (with and without top_k) and Condorcet;
- explanations: ``explain_rows`` and ``explain_pair`` of every given model.

With an empty cache this compiles everything once (about a minute on 2 cores); with the cache
built it loads everything from it (seconds). ``python -m tunemix.compile.serving [--models-dir DIR]
[--model NAME]`` runs it from the command line (the Dockerfile's build step and a compile-once
CLI step call it so), printing each step's seconds.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import time
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from tunemix.core.ensemble.list_fusion import fuse_lists
from tunemix.core.evaluation import CONVENTION_NAMES
from tunemix.core.evaluation import evaluate as run_evaluate
from tunemix.core.explain.explanation import explain_pair, explain_rows
from tunemix.core.scoring.ensemble_model import EnsembleModel, load_model

log = logging.getLogger(__name__)

#: the measures every convention is warmed with (unsupported ones are skipped per convention)
WARM_MEASURES = ("ndcg@3", "ndcg@40", "ndcg", "dcg@3", "dcg", "err", "err@3", "p@3", "map", "meanndcg")


def warm_evaluation() -> None:
    """Every convention, every kind of measure, short and long prefixes."""
    rng = np.random.default_rng(0)
    sizes = [3, 45]  # a query shorter and one longer than the selection limit (32)
    off = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    n = int(off[-1])
    labels = rng.integers(0, 3, size=n).astype(np.int64)
    scores = np.round(rng.normal(size=n), 1)  # ties too
    docids = np.array([f"d{i}" for i in range(n)])
    for name in CONVENTION_NAMES:
        for measure in WARM_MEASURES:
            for ids in (docids, None):
                with contextlib.suppress(ValueError):  # a measure the convention refuses
                    run_evaluate(labels, scores, off, [measure], name, docids=ids)


def warm_fusion() -> None:
    mat = np.array([[1.0, np.nan], [0.5, 2.0], [0.2, 1.0], [np.nan, 0.5]])
    off = np.array([0, 2, 4], dtype=np.int64)
    for method in ("rrf", "combsum", "combmnz", "condorcet"):
        for top_k in (None, 1):
            fuse_lists(mat, off, method, top_k=top_k)


def warm_explanations(model: EnsembleModel) -> None:
    n = 6
    x = np.zeros((n, model.n_features), dtype=np.float32)
    x[1::2] = 1.0
    x[:, 0] = np.arange(n, dtype=np.float32)
    off = np.array([0, n], dtype=np.int64)
    explain_rows(model, x, off, [0, 1], budget=64)
    explain_pair(model, x, off, 0, 1, budget=64)


def warm_all(models: Iterable[EnsembleModel] = (), *, parallel: bool = True) -> dict[str, float]:
    """Warm every kernel (module docstring); returns each step's seconds."""
    seconds: dict[str, float] = {}

    def step(name: str, fn: object, *args: object) -> None:
        started = time.perf_counter()
        fn(*args)  # type: ignore[operator]
        seconds[name] = round(time.perf_counter() - started, 3)
        log.info("warm-up: %s in %.1f s", name, seconds[name])

    for i, model in enumerate(models):
        step(f"scoring[{i}]", _warm_scoring, model, parallel)
        step(f"explanations[{i}]", warm_explanations, model)
    step("evaluation", warm_evaluation)
    step("fusion", warm_fusion)
    return seconds


def _warm_scoring(model: EnsembleModel, parallel: bool) -> None:
    model.warm_up(serial=True, parallel=parallel)
    if model.relevance_head is not None:
        x = np.zeros((4, model.n_features), dtype=np.float32)
        model.score_and_relevance(x, np.array([0, 4], dtype=np.int64))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Compile every serving kernel into numba's cache (NUMBA_CACHE_DIR).")
    ap.add_argument("--models-dir", type=Path, default=None, help="models directory (with --model)")
    ap.add_argument("--model", default=None, help="a model name under --models-dir (its latest version)")
    args = ap.parse_args(argv)
    models = []
    if args.models_dir is not None and args.model is not None:
        models.append(load_model(args.models_dir, args.model)[0])
    for name, s in warm_all(models).items():
        print(f"{name}: {s:.1f} s")  # noqa: T201 - the command's output
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
