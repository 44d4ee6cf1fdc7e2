"""The forest kernel of two checkouts in one process: an A/B of ``score_forest`` that a loaded
machine's drift cannot tilt.

    python -m bench.ab_forest_kernel --before DIR [--rounds 61] [--trees 300]

``DIR`` is another checkout of the tree (``git worktree add /tmp/before main``). Its ``tunemix``
package is copied into a temporary directory as ``tunemix_before`` (imports renamed; numba's cache
lock, which the process's own ``tunemix`` installs once, left out) and imported beside this tree's
``tunemix``. LightGBM trains lambdarank forests of ``--trees`` trees with 8 and 64 leaves on
MQ2008 Fold1 train (``../shared/data``); each is converted once by this tree and built in both
packages from the same arrays (the ``before`` side without ``node_missing_right``). Cases: the
forest as converted (no node sends a missing value right), and the same forest with every third
node sending it right (this tree then scans the input for a NaN before it scores); documents
drawn from the file, 100 and 1,000, no NaN. One thread. Before any timing the two sides' scores
must be equal to the bit. Then ``--rounds`` rounds, each timing ``before``, ``this`` and
``before`` again (an A/A control: the same package twice), each sample the mean of back-to-back
calls lasting a few ms. Reported per case: the medians in microseconds, the median of the
per-round ratios this/before and that of the control before/before (the noise to read the first
against). Then the whole model: ``TuneMixRanker(n_jobs=1)`` of the ``before`` package fitted on
the same file, its ``EnsembleModel`` rebuilt in this tree from its artifact arrays, and
``score`` timed the same way on one query of 100 and of 1,000 documents (``--no-model``: skip).
Writes ``bench/results/ab_forest_kernel.json``.
"""

from __future__ import annotations

import argparse
import importlib
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import SHARED_DATA, write_result

_RENAME = re.compile(r"\btunemix(?=[.\s]|$)")


def before_package(tree: Path, into: Path) -> Any:
    """``tree``'s ``tunemix`` imported as ``tunemix_before`` from a renamed copy under ``into``."""
    dst = into / "tunemix_before"
    shutil.copytree(tree / "tunemix", dst, ignore=shutil.ignore_patterns("__pycache__"))
    for path in dst.rglob("*.py"):
        text = path.read_text()
        text = "\n".join(_RENAME.sub("tunemix_before", line) if ("import" in line or "tunemix." in line) else line
                         for line in text.split("\n"))
        if path.name == "numba_cache.py":  # numba is patched once per process, by this tree's package
            text = re.sub(r"^install\(\)$", "pass", text, flags=re.M)
        path.write_text(text)
    sys.path.insert(0, str(into))
    return importlib.import_module("tunemix_before.core.scoring.forest")


def timed(fn: Any, reps: int) -> float:
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t0) / reps * 1e6


def run(before: Path, rounds: int, trees: int, with_model: bool = True) -> dict[str, Any]:
    import lightgbm as lgb

    from tunemix.core.data.svmlight import read_svmlight
    from tunemix.core.scoring import forest as this
    from tunemix.core.scoring.runtime import set_scoring_threads
    from tunemix.train.learners.lightgbm_forest import lightgbm_to_forest

    tmp = Path(tempfile.mkdtemp(prefix="ab-forest-"))
    old = before_package(before, tmp)
    importlib.import_module("tunemix_before.core.scoring.runtime").set_scoring_threads(1)
    set_scoring_threads(1)
    data = read_svmlight(SHARED_DATA / "MQ2008" / "Fold1" / "train.txt")
    X = data.features
    rng = np.random.default_rng(0)
    out: dict[str, Any] = {}
    for leaves in (8, 64):
        booster = lgb.train({"objective": "lambdarank", "num_leaves": leaves, "min_data_in_leaf": 5, "verbose": -1,
                             "num_threads": 1, "seed": 0, "deterministic": True},
                            lgb.Dataset(X, data.labels, group=np.diff(data.query_offsets)), num_boost_round=trees)
        arrays = lightgbm_to_forest(booster, n_features=X.shape[1]).to_arrays()
        plain = {k: v for k, v in arrays.items() if k != "node_missing_right"}
        right = {k: v.copy() for k, v in arrays.items()}
        right["node_missing_right"][::3] = 1
        for kind, mine in (("no node sends NaN right", arrays), ("every third node sends NaN right", right)):
            f_old, f_old2 = old.FlatForest.from_arrays(plain), old.FlatForest.from_arrays(plain)
            f_new = this.FlatForest.from_arrays(mine)
            for n in (100, 1000):
                xb = np.ascontiguousarray(X[rng.choice(X.shape[0], n, replace=False)])
                if not np.array_equal(old.score_forest(f_old, xb), this.score_forest(f_new, xb)):
                    raise AssertionError(f"{leaves} leaves, {kind}: the two sides' scores differ")
                key = f"{leaves} leaves, {kind}, {n} documents"
                out[key] = interleaved(lambda f=f_old, x=xb: old.score_forest(f, x),
                                       lambda f=f_new, x=xb: this.score_forest(f, x),
                                       lambda f=f_old2, x=xb: old.score_forest(f, x), rounds, max(1, 30_000 // n))
                print(key, out[key], flush=True)
    if with_model:
        out.update(model_case(data, rng, rounds))
    shutil.rmtree(tmp, ignore_errors=True)
    return out


def interleaved(before: Any, this: Any, control: Any, rounds: int, reps: int) -> dict[str, float]:
    """``rounds`` rounds of the three calls timed in turn (``timed``, ``reps`` calls each): the
    medians and the median ratios of this side and of the control (the before side again) to
    the before side."""
    a, b, a2 = [], [], []
    for _ in range(rounds):
        a.append(timed(before, reps))
        b.append(timed(this, reps))
        a2.append(timed(control, reps))
    return {"before_us": round(float(np.median(a)), 1), "this_us": round(float(np.median(b)), 1),
            "this_over_before": round(float(np.median(np.array(b) / np.array(a))), 3),
            "control_before_over_before": round(float(np.median(np.array(a2) / np.array(a))), 3)}


def model_case(data: Any, rng: np.random.Generator, rounds: int) -> dict[str, Any]:
    """``EnsembleModel.score`` of the same model in both packages (module docstring)."""
    from tunemix.core.scoring.ensemble_model import EnsembleModel

    before = importlib.import_module("tunemix_before")
    ranker = before.TuneMixRanker(n_jobs=1, progress=False)
    ranker.fit(data.features, data.labels, group=np.diff(data.query_offsets))
    m_old = ranker.model_.ensemble
    doc, arrays = m_old.to_artifact()
    m_new = EnsembleModel.from_artifact(doc, arrays)
    right = m_new.forest.missing_columns is not None
    out: dict[str, Any] = {}
    for n in (100, 1000):
        xb = np.ascontiguousarray(data.features[rng.choice(data.features.shape[0], n, replace=False)])
        off = np.array([0, n], dtype=np.int64)
        if not np.array_equal(m_old.score(xb, off), m_new.score(xb, off)):
            raise AssertionError("the two sides' model scores differ")
        key = f"the default model ({m_new.forest.n_base} bases, nodes sending NaN right: {right}), {n} documents"
        out[key] = interleaved(lambda x=xb, o=off: m_old.score(x, o), lambda x=xb, o=off: m_new.score(x, o),
                               lambda x=xb, o=off: m_old.score(x, o), rounds, max(1, 10_000 // n))
        print(key, out[key], flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--before", type=Path, required=True, help="another checkout of the tree")
    ap.add_argument("--rounds", type=int, default=61)
    ap.add_argument("--trees", type=int, default=300)
    ap.add_argument("--no-model", action="store_true", help="the forests only, not the whole model")
    args = ap.parse_args(argv)
    results = run(args.before.resolve(), args.rounds, args.trees, not args.no_model)
    path = write_result("ab_forest_kernel", {"command": " ".join(["python -m bench.ab_forest_kernel",
                                                                   *(argv or sys.argv[1:])]),
                                             "before": str(args.before), "rounds": args.rounds, "results": results})
    print(f"written {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
