"""The LightGBM members (LambdaMART, McRank multiclass) trained data-parallel on the Dask workers
that hold the training chunks, then converted into the forests the artifact serves.

Each worker concatenates the chunks it holds (never sent elsewhere), and the workers train one
model together through LightGBM's own network and data-parallel tree learner
(``tree_learner = "data"``: each worker builds the histograms of its rows, LightGBM sums them
across workers, every worker grows the same tree), set up as ``lightgbm.dask`` sets it up:
``machines`` lists one ``host:port`` per worker, ``num_machines`` their number, each worker
listens on its own port. Unlike ``lightgbm.dask``, every worker gets the whole validation set
(small: ``tunemix.dask.MAX_VALIDATION_ROWS``), so that each computes the same validation measure
of the same trees and all stop early at the same iteration; and the client never fetches a
training chunk (``lightgbm.dask`` fetches one per worker to check where the eval set went).
The first worker returns the model as LightGBM's text; the client converts it with
``lightgbm_to_forest`` into a :class:`RunResult` exactly as the one-process members are
(``tunemix.train.members.lightgbm_members``), except that LightGBM finds the bins on the floats
(its distributed bin finding) instead of reading the shared codes of one process.

A worker lost in the middle of a fit, or a LightGBM error on any worker, ends the fit with
:class:`DistributedFitError`, naming the member and the worker (and the chunks it held).
"""

from __future__ import annotations

import logging
import socket
import time
from collections import defaultdict
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

import numpy as np

from tunemix.train.members.types import RunResult, RunSpec

log = logging.getLogger(__name__)

#: minutes LightGBM waits for its peers' sockets (``time_out``) before it gives up
NETWORK_TIMEOUT_MINUTES = 10


class DistributedFitError(RuntimeError):
    """A distributed fit failed: a worker was lost, or LightGBM failed on a worker. The message
    names the member and the worker; nothing was written."""


@dataclass(frozen=True)
class Chunks:
    """The training chunks as futures on the workers: ``parts[i]`` holds ``{"X", "y", "group"}``
    of chunk i (float32 features, integer grades, query sizes); ``rows[i]`` its row count."""

    parts: list[Any]
    rows: list[int]


def lightgbm_params(spec: RunSpec, n_labels: int, seed: int) -> tuple[dict[str, Any], int, int]:
    """LightGBM's parameters of a default member's run (``spec``: its type and parameters from
    ``tunemix.train.members.auto``), the iteration cap and the patience, as the one-process member
    trains it (``tunemix.train.learners.mcrank.lightgbm_params``, ``sampling_params``)."""
    from tunemix.train.learners.mcrank import lightgbm_params as base
    from tunemix.train.learners.mcrank import sampling_params

    p = spec.params
    extra = sampling_params(float(p.get("feature_fraction", 1.0)), float(p.get("bagging_fraction", 1.0)))
    if spec.type == "lambdamart":
        if float(p.get("lambda_l2", 0.0)) > 0:
            extra["lambda_l2"] = float(p["lambda_l2"])
        params = base(objective="lambdarank", n_leaves=int(p.get("n_leaves", 16)),
                      learning_rate=float(p.get("learning_rate", 0.1)),
                      min_data_in_leaf=int(p.get("min_data_in_leaf", 20)), n_bins=int(p.get("n_bins", 255)),
                      seed=int(p.get("seed", seed + spec.index)), n_threads=1, **extra)
        params.update(metric="ndcg", eval_at=[10])
    elif spec.type == "mcrank" and p.get("variant", "multiclass") == "multiclass":
        params = base(objective="multiclass", num_class=n_labels, n_leaves=int(p.get("n_leaves", 16)),
                      learning_rate=float(p.get("learning_rate", 0.1)),
                      min_data_in_leaf=int(p.get("min_data_in_leaf", 20)), n_bins=int(p.get("n_bins", 255)),
                      seed=int(p.get("seed", seed + spec.index)), n_threads=1, **extra)
        params["metric"] = "multi_logloss"
    else:
        raise ValueError(f"run {spec.tag} is not a LightGBM member trained data-parallel (LambdaMART, or McRank "
                         "multiclass)")
    params["tree_learner"] = "data"
    return params, int(p.get("n_iterations", 100)), int(p.get("early_stopping", 0))


def train_on_worker(parts: list[dict[str, np.ndarray]], validation: tuple[np.ndarray, np.ndarray, np.ndarray],
                    params: dict[str, Any], n_iterations: int, patience: int, network: dict[str, Any],
                    return_model: bool) -> dict[str, Any] | None:
    """On one worker: its chunks, the whole validation set, one LightGBM machine of the network
    (``network``: machines, local_listen_port, num_machines, time_out). The first worker returns
    the model text, the best iteration and its validation measure; the others None."""
    import lightgbm as lgb

    x = np.concatenate([p["X"] for p in parts]).astype(np.float32, copy=False)
    y = np.concatenate([p["y"] for p in parts]).astype(np.float64)
    group = np.concatenate([p["group"] for p in parts]).astype(np.int64)
    ranking = params["objective"] == "lambdarank"
    full = {**params, **network}
    xv, yv, gv = validation
    train_set = lgb.Dataset(x, label=y, group=group if ranking else None, params=full, free_raw_data=True)
    valid = lgb.Dataset(xv, label=yv.astype(np.float64), group=gv if ranking else None, reference=train_set)
    callbacks: list[Any] = [lgb.early_stopping(patience, first_metric_only=True, verbose=False)] if patience > 0 else []
    try:
        booster = lgb.train(full, train_set, num_boost_round=n_iterations, valid_sets=[valid],
                            valid_names=["vali"], callbacks=callbacks)
    finally:
        lgb.basic._LIB.LGBM_NetworkFree()  # this worker's LightGBM network, whatever happened
    if not return_model:
        return None
    best = int(booster.best_iteration) if booster.best_iteration > 0 else int(booster.current_iteration())
    score = booster.best_score.get("vali", {})
    # lgb.train keeps the trees up to the best iteration (its model text's default)
    return {"model": booster.model_to_string(), "best_iteration": best,
            "best_score": float(next(iter(score.values()))) if score else None, "rows": int(x.shape[0])}


def free_port() -> int:
    """A port free on this worker's host now (the operating system's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


def workers_of(client: Any, chunks: Chunks) -> dict[str, list[int]]:
    """The chunks each worker holds, by index, in chunk order."""
    index = {f.key: i for i, f in enumerate(chunks.parts)}
    held: dict[str, list[int]] = defaultdict(list)
    for key, where in client.who_has(chunks.parts).items():
        if not where:
            raise DistributedFitError(f"training chunk {index[key]} is held by no worker")
        held[sorted(where)[0]].append(index[key])
    return {w: sorted(ix) for w, ix in sorted(held.items())}


def fit_member(client: Any, chunks: Chunks, validation: tuple[np.ndarray, np.ndarray, np.ndarray], spec: RunSpec,
               n_labels: int, seed: int, listen_port: int | None = None) -> tuple[RunResult, dict[str, Any]]:
    """Train one member data-parallel on the workers that hold ``chunks``, stopped early on the
    ``validation`` set (features, grades, query sizes; every worker gets it whole); the member as
    the one-process fit returns it, and what the record says of the distributed fit.
    ``listen_port``: LightGBM listens on listen_port + k on the k-th worker (None: a free port
    each worker's system picks; a port closed by a fit stays taken for a while after it, so each
    member gets ports of its own: ``DaskTuneMixRanker`` passes listen_port + workers x member)."""
    t0 = time.perf_counter()
    params, n_iterations, patience = lightgbm_params(spec, n_labels, seed)
    held = workers_of(client, chunks)
    workers = list(held)
    if listen_port is None:
        ports = {w: int(client.submit(free_port, workers=[w], allow_other_workers=False, pure=False).result())
                 for w in workers}
    else:
        ports = {w: listen_port + k for k, w in enumerate(workers)}
    machines = ",".join(f"{urlparse(w).hostname}:{ports[w]}" for w in workers)
    shared = client.scatter([validation], broadcast=True, workers=workers)[0]
    futures = {w: client.submit(train_on_worker, [chunks.parts[i] for i in held[w]], shared, params, n_iterations,
                                patience, {"machines": machines, "local_listen_port": ports[w],
                                           "num_machines": len(workers), "time_out": NETWORK_TIMEOUT_MINUTES},
                                k == 0, workers=[w], allow_other_workers=False, pure=False)
               for k, w in enumerate(workers)}
    by_future = {f.key: w for w, f in futures.items()}

    def lost() -> list[str]:
        alive = set(client.scheduler_info(n_workers=-1)["workers"])
        return [w for w in workers if w not in alive]

    def held_text(w: str) -> str:
        return f"{w} (training chunks {held[w]}, {sum(chunks.rows[i] for i in held[w])} rows)"

    pending = list(futures.values())
    while pending:
        time.sleep(0.2)  # the futures and the workers, five times a second
        done = [f for f in pending if f.done()]
        gone = lost()
        failed = [f for f in done if f.status != "finished"]
        if gone or failed:
            errors = [(f, f.exception() if f.status == "error" else f.status) for f in failed]  # before the cancel
            client.cancel(list(futures.values()))
            if gone:
                raise DistributedFitError(f"member {spec.tag}: worker {', '.join(held_text(w) for w in gone)} was "
                                          "lost during its distributed fit; nothing was written. Its training "
                                          "chunks went with it: load them again and fit again")
            f, exc = errors[0]
            cause = exc if isinstance(exc, BaseException) else None
            raise DistributedFitError(f"member {spec.tag}: the fit failed on worker {held_text(by_future[f.key])}: "
                                      f"{type(exc).__name__}: {exc}; nothing was written") from cause
        pending = [f for f in pending if f not in done]
    out = futures[workers[0]].result()
    run = to_run_result(spec, out, n_labels, time.perf_counter() - t0, int(validation[0].shape[1]))
    record = {"run": spec.tag, "workers": {w: held[w] for w in workers}, "machines": machines,
              "best_iteration": out["best_iteration"],
              "validation_measure": out["best_score"], "rows_on_first_worker": out["rows"],
              "seconds": round(time.perf_counter() - t0, 3)}
    return run, record


def to_run_result(spec: RunSpec, out: dict[str, Any], n_labels: int, seconds: float, n_features: int) -> RunResult:
    """The member from the first worker's model text: its trees up to the best iteration as a
    forest (``lightgbm_to_forest``), with the checkpoints, gains and shape the one-process member
    has (``LambdaMARTMember.fit``, ``McRankMember.fit``)."""
    from tunemix.core.scoring.forest import FlatForest
    from tunemix.train.learners import lightgbm_capi as capi
    from tunemix.train.learners.label_groups import identity_grouping
    from tunemix.train.learners.lightgbm_forest import lightgbm_to_forest
    from tunemix.train.learners.mcrank import snapshot_list

    best = int(out["best_iteration"])
    stop = "early_stopping" if best < int(spec.params.get("n_iterations", 100)) else "n_iterations"
    forest = lightgbm_to_forest(capi.Booster.from_string(out["model"]).dump(), n_features=n_features)
    checkpoints = snapshot_list(list(spec.params.get("checkpoints") or []), best)
    common = dict(spec=spec, snapshot_iterations=checkpoints, shift_scales=[None] * len(checkpoints),
                  n_iterations=best, stop_reason=stop, fit_seconds=seconds, train_error=float("nan"))
    if spec.type == "lambdamart":
        arrays = forest.truncate(best).to_arrays()
        leaves = arrays["leaf_values"]
        arrays["leaf_values"] = np.hstack([leaves, np.zeros((leaves.shape[0], n_labels - 1))])  # (f, 0, ..., 0)
        served = FlatForest.from_arrays(arrays)
        return RunResult(n_outputs=n_labels, n_classes=n_labels,
                         class_gains=2.0 ** np.arange(n_labels, dtype=np.float64) - 1.0, checkpoints=checkpoints,
                         n_bases=served.n_base, forest=served.to_arrays(), **common)  # type: ignore[arg-type]
    served = forest.truncate(best * n_labels)
    grouping = identity_grouping(n_labels)
    return RunResult(n_outputs=n_labels, n_classes=n_labels, class_gains=grouping.class_gains(np.arange(n_labels)),
                     checkpoints=[t * n_labels for t in checkpoints], n_bases=served.n_base,
                     forest=served.to_arrays(), validation_loss=out["best_score"], **common)  # type: ignore[arg-type]
