"""Peer learners of the five-fold quality benchmark (the "Tune and mix" MQ2008 table).

The peers are LightGBM ``lambdarank`` and XGBoost ``rank:ndcg``, each trained on a fold's
training set with validation-based early stopping over a small validation-chosen grid:

========================  ===============================================================
``lightgbm_lambdarank``   ``num_leaves`` {7, 31} x ``learning_rate`` {0.05, 0.1}
                          x ``min_data_in_leaf`` {10, 50}                       (8 points)
``xgboost_rank_ndcg``     ``max_depth`` {3, 5} x ``eta`` {0.05, 0.1}
                          x ``min_child_weight`` {1, 5}                         (8 points)
========================  ===============================================================

(``grid="single"`` is the first point of each grid alone, for quick runs and tests.)

Protocol, per grid point:

1. Train on ``train`` for up to :data:`MAX_ROUNDS` rounds, early stopping on ``vali`` with a
   patience of :data:`PATIENCE` rounds. The stopping metric is the library's own NDCG@10
   (LightGBM ``ndcg`` at ``eval_at=10`` with the default ``label_gain`` 2^l - 1; XGBoost
   ``ndcg@10`` with ``ndcg_exp_gain``); the model kept is the one at the library's best round.
2. Score ``vali`` with that early-stopped model and compute *our* NDCG@10 under the ``yahoo``
   convention (:func:`tunemix.core.evaluation.mean_metric`). This, and only this, selects the grid
   point (the first point wins a tie). The libraries' own values are kept in ``grid`` for
   comparison (``library_vali_ndcg@10``) and only drive early stopping. Their definitions are
   close to yahoo's (exponential gain, 1/log2(r + 1), a query without relevant documents
   counts 1 in all three); on MQ2008 Fold1 every grid point's value agreed with ours to 1e-15,
   but the selection does not rely on that.
3. The chosen point's early-stopped model scores ``test``. There is no separate refit: with the
   deterministic settings below, retraining the chosen point for its best number of rounds
   gives the same model, so the grid-search model is the final one. The test set is never
   looked at before the choice is made.

Determinism: LightGBM ``deterministic=True``, ``force_row_wise=True``, ``seed`` (all its
derived seeds follow); XGBoost ``tree_method="hist"``, ``seed``. Neither grid samples rows or
columns, so a seed only matters through the libraries' internal tie handling. Both use
``n_threads`` threads (default 1).

Command line (the five-fold MQ2008 measurement; prints per-fold and mean +- sample SD test
NDCG@10 under the yahoo convention and the seconds per fold)::

    OMP_NUM_THREADS=1 NUMBA_NUM_THREADS=1 python -m bench.quality_peers [--data ../shared/data/MQ2008]
"""

from __future__ import annotations

import argparse
import itertools
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from tunemix.core.data.dataset import RankingData
from tunemix.core.evaluation import mean_metric

PEERS = ("lightgbm_lambdarank", "xgboost_rank_ndcg")
GRIDS = ("small", "single")
#: Upper bound on boosting rounds per grid point (early stopping ends far sooner on MQ2008).
MAX_ROUNDS = 2000
#: Early-stopping patience: rounds without improvement of the library's validation NDCG@10.
PATIENCE = 50
#: The selection measure (ours) and its convention.
MEASURE = "ndcg@10"
CONVENTION = "yahoo"

#: The grids, as (parameter name, values) axes; the grid is their Cartesian product.
_AXES: dict[str, list[tuple[str, tuple[Any, ...]]]] = {
    "lightgbm_lambdarank": [
        ("num_leaves", (7, 31)),
        ("learning_rate", (0.05, 0.1)),
        ("min_data_in_leaf", (10, 50)),
    ],
    "xgboost_rank_ndcg": [
        ("max_depth", (3, 5)),
        ("eta", (0.05, 0.1)),
        ("min_child_weight", (1.0, 5.0)),
    ],
}


@dataclass
class PeerResult:
    name: str  # "lightgbm_lambdarank" | "xgboost_rank_ndcg"
    params: dict[str, Any]  # the chosen grid point, incl. the early-stopped number of trees ("n_trees")
    vali_scores: npt.NDArray[np.float64]  # one per validation document
    test_scores: npt.NDArray[np.float64]  # one per test document
    grid: list[dict[str, Any]] = field(default_factory=list)  # every point: params, vali NDCG@10, best iteration
    fit_seconds: float = 0.0  # wall-clock of the whole grid search (+ scoring of test)


def grid_points(name: str, grid: str = "small") -> list[dict[str, Any]]:
    """The grid points of peer ``name`` (``grid`` is "small" or "single")."""
    if name not in _AXES:
        raise ValueError(f"unknown peer {name!r}; expected one of {PEERS}")
    if grid not in GRIDS:
        raise ValueError(f"unknown grid {grid!r}; expected one of {GRIDS}")
    axes = _AXES[name]
    points = [dict(zip([k for k, _ in axes], values, strict=True)) for values in
              itertools.product(*[v for _, v in axes])]
    return points[:1] if grid == "single" else points


def _sizes(data: RankingData) -> npt.NDArray[np.int64]:
    return np.diff(data.query_offsets)


def _our_ndcg(data: RankingData, scores: npt.NDArray[np.float64]) -> float:
    return mean_metric(data.labels, scores, data.query_offsets, MEASURE, CONVENTION)


# ----------------------------------------------------------------------------- LightGBM
def _lightgbm_point(point: dict[str, Any], train: RankingData, vali: RankingData, *, seed: int,
                    n_threads: int, max_rounds: int, patience: int) -> tuple[Any, int, float]:
    """Train one grid point with early stopping: (booster, best iteration (1-based), library NDCG@10)."""
    import lightgbm as lgb

    params: dict[str, Any] = {
        "objective": "lambdarank",
        "metric": "ndcg",
        "eval_at": [10],
        "boosting": "gbdt",
        "num_threads": n_threads,
        "deterministic": True,
        "force_row_wise": True,
        "seed": seed,
        "verbosity": -1,
        **point,
    }
    # A Dataset per point: min_data_in_leaf takes part in LightGBM's feature pre-filtering.
    dtrain = lgb.Dataset(train.features, label=train.labels, group=_sizes(train), params={"verbosity": -1},
                         free_raw_data=False)
    dvali = lgb.Dataset(vali.features, label=vali.labels, group=_sizes(vali), reference=dtrain,
                        free_raw_data=False)
    booster = lgb.train(params, dtrain, num_boost_round=max_rounds, valid_sets=[dvali], valid_names=["vali"],
                        callbacks=[lgb.early_stopping(patience, first_metric_only=True, verbose=False)])
    best = int(booster.best_iteration) or booster.current_iteration()
    lib = float(booster.best_score["vali"]["ndcg@10"])
    return booster, best, lib


def _lightgbm_predict(booster: Any, data: RankingData, best: int, n_threads: int) -> npt.NDArray[np.float64]:
    return np.asarray(booster.predict(data.features, num_iteration=best, num_threads=n_threads), dtype=np.float64)


# ------------------------------------------------------------------------------ XGBoost
def _xgboost_point(point: dict[str, Any], train: RankingData, vali: RankingData, *, seed: int,
                   n_threads: int, max_rounds: int, patience: int) -> tuple[Any, int, float]:
    """Train one grid point with early stopping: (booster, best iteration (1-based), library NDCG@10)."""
    import xgboost as xgb

    params: dict[str, Any] = {
        "objective": "rank:ndcg",
        "eval_metric": "ndcg@10",
        "ndcg_exp_gain": True,
        "tree_method": "hist",
        "nthread": n_threads,
        "seed": seed,
        "verbosity": 0,
        **point,
    }
    dtrain = xgb.DMatrix(train.features, label=train.labels, nthread=n_threads)
    dtrain.set_group(_sizes(train))
    dvali = xgb.DMatrix(vali.features, label=vali.labels, nthread=n_threads)
    dvali.set_group(_sizes(vali))
    booster = xgb.train(params, dtrain, num_boost_round=max_rounds, evals=[(dvali, "vali")],
                        early_stopping_rounds=patience, verbose_eval=False)
    best = int(booster.best_iteration) + 1  # XGBoost counts from 0
    lib = float(booster.best_score)
    return booster, best, lib


def _xgboost_predict(booster: Any, data: RankingData, best: int, n_threads: int) -> npt.NDArray[np.float64]:
    import xgboost as xgb

    dm = xgb.DMatrix(data.features, nthread=n_threads)
    return np.asarray(booster.predict(dm, iteration_range=(0, best)), dtype=np.float64)


_TRAIN = {"lightgbm_lambdarank": _lightgbm_point, "xgboost_rank_ndcg": _xgboost_point}
_PREDICT = {"lightgbm_lambdarank": _lightgbm_predict, "xgboost_rank_ndcg": _xgboost_predict}


def fit_peer(name: str, train: RankingData, vali: RankingData, test: RankingData, *, seed: int = 0,
             n_threads: int = 1, grid: str = "small", max_rounds: int = MAX_ROUNDS,
             patience: int = PATIENCE) -> PeerResult:
    """Grid-search peer ``name`` on ``vali`` (our yahoo NDCG@10) and score ``vali`` and ``test``.

    Every grid point is trained with early stopping on ``vali`` (see the module docstring); the
    point with the highest validation NDCG@10 of its early-stopped model is chosen (first on a tie).
    """
    points = grid_points(name, grid)
    if train.n_features != vali.n_features or train.n_features != test.n_features:
        raise ValueError(f"feature counts differ: train {train.n_features}, vali {vali.n_features}, "
                         f"test {test.n_features}")
    if max_rounds < 1 or patience < 1:
        raise ValueError("max_rounds and patience must be at least 1")
    t0 = time.perf_counter()
    records: list[dict[str, Any]] = []
    best_idx = -1
    best_value = -np.inf
    best_model: tuple[Any, int] | None = None
    best_vali: npt.NDArray[np.float64] | None = None
    for i, point in enumerate(points):
        booster, best_iter, lib = _TRAIN[name](point, train, vali, seed=seed, n_threads=n_threads,
                                               max_rounds=max_rounds, patience=patience)
        vali_scores = _PREDICT[name](booster, vali, best_iter, n_threads)
        value = _our_ndcg(vali, vali_scores)
        records.append({**point, "best_iteration": best_iter, "vali_ndcg@10": value, "library_vali_ndcg@10": lib})
        if value > best_value:
            best_idx, best_value, best_model, best_vali = i, value, (booster, best_iter), vali_scores
    assert best_model is not None and best_vali is not None, "no grid point produced a finite validation NDCG"
    booster, best_iter = best_model
    test_scores = _PREDICT[name](booster, test, best_iter, n_threads)
    fit_seconds = time.perf_counter() - t0
    params = {**points[best_idx], "n_trees": best_iter}
    return PeerResult(name=name, params=params, vali_scores=best_vali, test_scores=test_scores, grid=records,
                      fit_seconds=fit_seconds)


# --------------------------------------------------------------------------- command line
def run_folds(root: Path, peers: tuple[str, ...] = PEERS, folds: tuple[int, ...] = (1, 2, 3, 4, 5), *,
              seed: int = 0, n_threads: int = 1, grid: str = "small") -> dict[str, list[dict[str, Any]]]:
    """Fit every peer on every fold of ``root`` (MQ2008 layout); per peer, one row per fold."""
    from tunemix.core.data.svmlight import read_svmlight

    # compile the evaluation kernels first, so that fold 1's seconds do not include numba's JIT
    _our_ndcg(RankingData.from_arrays(np.zeros((2, 1)), [1, 0], group_sizes=[2]), np.array([0.0, 1.0]))
    out: dict[str, list[dict[str, Any]]] = {p: [] for p in peers}
    for fold in folds:
        d = root / f"Fold{fold}"
        train = read_svmlight(d / "train.txt")
        vali = read_svmlight(d / "vali.txt", n_features=train.n_features)
        test = read_svmlight(d / "test.txt", n_features=train.n_features)
        for peer in peers:
            res = fit_peer(peer, train, vali, test, seed=seed, n_threads=n_threads, grid=grid)
            row = {"fold": fold, "vali": _our_ndcg(vali, res.vali_scores), "test": _our_ndcg(test, res.test_scores),
                   "seconds": res.fit_seconds, "params": res.params}
            out[peer].append(row)
            print(f"Fold{fold} {peer:20s} vali {row['vali']:.4f} test {row['test']:.4f} "
                  f"{row['seconds']:6.1f} s  {res.params}", flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    from bench.common import SHARED_DATA

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--data", type=Path, default=SHARED_DATA / "MQ2008")
    ap.add_argument("--peers", nargs="+", choices=PEERS, default=list(PEERS))
    ap.add_argument("--folds", nargs="+", type=int, default=[1, 2, 3, 4, 5])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--grid", choices=GRIDS, default="small")
    args = ap.parse_args(argv)
    results = run_folds(args.data, tuple(args.peers), tuple(args.folds), seed=args.seed, n_threads=args.threads,
                        grid=args.grid)
    print(f"\ntest {MEASURE} ({CONVENTION}), mean +- sample SD over folds {args.folds}")
    for peer, rows in results.items():
        test = np.array([r["test"] for r in rows])
        secs = np.array([r["seconds"] for r in rows])
        sd = float(np.std(test, ddof=1)) if test.size > 1 else float("nan")
        per_fold = " ".join(f"{v:.4f}" for v in test)
        print(f"{peer:20s} {test.mean():.4f} +- {sd:.4f}  [{per_fold}]  {secs.mean():.1f} s/fold "
              f"[{' '.join(f'{s:.1f}' for s in secs)}]")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
