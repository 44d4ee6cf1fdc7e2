"""``DaskTuneMixRanker``: tunemix trained data-parallel on a Dask cluster, shaped like
``lightgbm.dask.DaskLGBMRanker``.

The training set stays on the workers that hold it: ``X`` (n, d) and ``y`` (n) are Dask arrays
(or a Dask DataFrame / Series) chunked by rows only, each chunk holding whole queries, and
``group`` gives the query sizes of each chunk, as ``DaskLGBMRanker`` reads it: a Dask array
whose i-th chunk is the sizes of ``X``'s i-th chunk, or a list with one sequence of sizes per
chunk. For 100 documents in two chunks of 60 and 40 rows, ``group=[[10, 50], [15, 25]]``.

What runs where (``tunemix.train.dask_members``):

- On the workers: the LambdaMART run of ``PEER_RECIPE`` on the raw features and the McRank
  multiclass run of the default members (``tunemix.train.members.auto``), each trained by
  LightGBM's data-parallel tree learner across the workers that hold chunks, stopped early on the
  validation set, which every worker gets whole.
- On the client: the validation set (at most ``MAX_VALIDATION_ROWS`` rows: a larger one raises
  ValueError before anything is fetched), the query sizes and the grades' maximum (one number);
  the members' trees (LightGBM's text, converted into the artifact's forests); then the
  calibration (the members' calibrators that fit nothing: ``identity``, ``er:*``), the
  exponentially weighted forecaster's mix and the relevance head (the McRank member) on the
  validation scores, through the stages of ``tunemix.train``.
- Left out on a cluster, with the reason in ``record_["dask"]["left_out"]``: AdaBoost.MH, the
  linear SVM and the query-standardised (``raw+std``) runs.

``fit`` writes nothing; ``to_local()`` gives a :class:`~tunemix.ranker.TuneMixRanker` whose
``save`` writes the artifact ``tunemix.load`` and the service read. A worker lost during a fit
raises :class:`DistributedFitError` naming it.

>>> ranker = DaskTuneMixRanker(client=client).fit(X, y, group=g, eval_set=[(Xv, yv)], eval_group=[gv])  # doctest: +SKIP
>>> ranker.predict(X_new)                                    # a Dask array, chunk by chunk  # doctest: +SKIP
>>> ranker.to_local().save("models", "default")                                        # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any

import numpy as np

from tunemix.train.dask_members import Chunks, DistributedFitError, fit_member

__all__ = ["MAX_VALIDATION_ROWS", "DaskTuneMixRanker", "DistributedFitError"]

log = logging.getLogger(__name__)

#: the most validation rows ``fit`` fetches to the client and sends whole to every worker
MAX_VALIDATION_ROWS = 200_000

#: the member types a cluster trains, and why the others are left out
LEFT_OUT = {
    "adaboost": "AdaBoost.MH trains in one process: its edge statistics are summed over one process's documents",
    "svm": "the linear SVM trains in one process: its solver is not distributed",
    "raw+std": "the query-standardised view needs per-query statistics of the training features, which the "
               "workers do not compute",
}


class DaskTuneMixRanker:
    """The default members of :class:`~tunemix.ranker.TuneMixRanker` that train data-parallel,
    calibrated and mixed on the validation queries (module docstring). ``config`` as
    ``TuneMixRanker``'s (its member choice is the default's); ``client``: a
    ``distributed.Client`` (None: the current one); ``listen_port``: the first of the ports
    LightGBM listens on, one per worker and member (listen_port + m x workers + k for member m on
    the k-th worker; None: a free port each worker picks). ``fit`` learns
    ``model_``, ``record_`` and ``n_features_in_``."""

    def __init__(self, config: Any = None, *, client: Any = None, random_state: int = 0,
                 listen_port: int | None = None) -> None:
        self.config = config
        self.client = client
        self.random_state = random_state
        self.listen_port = listen_port

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        return {"config": self.config, "client": self.client, "random_state": self.random_state,
                "listen_port": self.listen_port}

    def _client(self) -> Any:
        if self.client is not None:
            return self.client
        from distributed import default_client

        return default_client()

    # ------------------------------------------------------------------ training
    def fit(self, X: Any, y: Any, group: Any, eval_set: list[tuple[Any, Any]] | None = None,
            eval_group: list[Any] | None = None) -> DaskTuneMixRanker:
        """Train on the workers (module docstring). ``eval_set[0]`` with ``eval_group[0]``: the
        validation queries (Dask or NumPy; at most ``MAX_VALIDATION_ROWS`` rows), required."""
        from tunemix.ranker import TuneMixRanker, _ranking_data

        t0 = time.perf_counter()
        client = self._client()
        x, labels = _dask_array(X, "X"), _dask_array(y, "y")
        sizes = chunk_groups(x, labels, group)
        if not eval_set or not eval_group:
            raise ValueError("fit on a cluster needs eval_set=[(X_val, y_val)] and eval_group=[sizes]: the "
                             "validation queries the members stop on and the mix is tuned on")
        xv, yv = eval_set[0]
        vali = _ranking_data(_small(xv, "eval_set[0][0]"), _small(yv, "eval_set[0][1]"),
                             np.ravel(np.asarray(_compute(eval_group[0]))),
                             "eval_set[0][0]", "eval_set[0][1]", "eval_group[0]", n_features=int(x.shape[1]))
        top = int(client.compute(labels.max()).result())  # one number: the grades' maximum
        n_labels = max(top + 1, 2, int(vali.labels.max()) + 1)
        chunks = _chunk_futures(client, x, labels, sizes)
        cfg = TuneMixRanker(self.config, random_state=self.random_state, progress=False)._config()
        from tunemix.train.members.auto import DataShape
        from tunemix.train.members.types import run_specs

        shape = DataShape(n_docs=int(x.shape[0]), n_features=int(x.shape[1]), n_labels=n_labels,
                          n_queries=int(sum(len(s) for s in sizes)), vali_queries=vali.n_queries)
        cfg, reasons, left_out = cluster_members(cfg, shape)
        specs = run_specs(cfg)
        runs, fits = [], []
        n_workers = len({w for where in client.who_has(chunks.parts).values() for w in where})
        for m, spec in enumerate(specs):
            port = None if self.listen_port is None else self.listen_port + m * n_workers
            run, fit_record = fit_member(client, chunks, (vali.features, vali.labels, np.diff(vali.query_offsets)),
                                         spec, n_labels, cfg.seed, port)
            runs.append(run)
            fits.append(fit_record)
        from tunemix.train.dask_stages import finish

        model, record = finish(cfg, vali, runs, n_labels)
        record["auto_members"] = reasons
        record["dask"] = {"workers": fits[0]["workers"] if fits else {}, "fits": fits, "left_out": left_out,
                          "training": {"rows": int(x.shape[0]), "queries": shape.n_queries,
                                       "chunks": len(sizes), "features": int(x.shape[1])},
                          "gathered": {"validation_rows": vali.n_docs, "bound": MAX_VALIDATION_ROWS},
                          "seconds": round(time.perf_counter() - t0, 3)}
        self._cfg_, self.record_, self._vali_ = cfg, record, vali
        self.model_ = model
        self.n_features_in_ = int(x.shape[1])
        return self

    # ------------------------------------------------------------------ the fitted model
    def _check_fitted(self) -> Any:
        if getattr(self, "model_", None) is None:
            raise AttributeError("this DaskTuneMixRanker is not fitted yet: call fit(X, y, group, eval_set, "
                                 "eval_group) first")
        return self.model_

    def predict(self, X: Any, group: Any = None) -> Any:
        """One score per row. NumPy input: as ``TuneMixRanker.predict``. Dask input: a Dask array
        scored chunk by chunk on the workers (``group``: per chunk, as in ``fit``; None: each chunk
        one query)."""
        model = self._check_fitted()
        if not _is_dask(X):
            return model.predict(X, group)
        x = _dask_array(X, "X")
        sizes = [None] * x.numblocks[0] if group is None else chunk_groups(x, None, group)

        def score(block: np.ndarray, block_info: Any = None) -> np.ndarray:
            i = block_info[0]["chunk-location"][0]
            return np.asarray(model.predict(block, sizes[i]), dtype=np.float64)

        return x.map_blocks(score, drop_axis=1, dtype=np.float64, meta=np.empty((0,), np.float64))

    def to_local(self) -> Any:
        """The fitted model as a :class:`~tunemix.ranker.TuneMixRanker` (no Dask inside): its
        ``save(models_dir, name)`` writes the artifact ``tunemix.load`` and the service read. Its
        ``feature_importances_`` are measured on the validation rows (the training rows stay on
        the workers)."""
        from tunemix.ranker import TuneMixRanker
        from tunemix.train.importance import importance_sample

        self._check_fitted()
        local = TuneMixRanker(random_state=self.random_state, progress=False)
        local._cfg_ = self._cfg_
        local.record_ = self.record_
        local.model_ = self.model_
        local.n_features_in_ = self.n_features_in_
        local._importance_sample_ = importance_sample(self._vali_.features, self._vali_.query_offsets)
        local._importance_rows_ = "validation"  # type: ignore[attr-defined]
        local._feature_importances = None
        return local


# ---------------------------------------------------------------------------------- inputs
def _is_dask(obj: Any) -> bool:
    return hasattr(obj, "dask") and hasattr(obj, "__dask_graph__")


def _dask_array(obj: Any, name: str) -> Any:
    """A Dask array of ``obj`` (a Dask DataFrame or Series by its partitions' lengths), chunked by
    rows only."""
    if not _is_dask(obj):
        raise TypeError(f"{name} must be a Dask array, DataFrame or Series (NumPy data: TuneMixRanker)")
    if hasattr(obj, "to_dask_array"):
        obj = obj.to_dask_array(lengths=True)
    if any(np.isnan(c) for c in obj.chunks[0]):
        raise ValueError(f"{name} has chunks of unknown length: call {name}.compute_chunk_sizes() first")
    if obj.ndim == 2 and obj.numblocks[1] != 1:
        raise ValueError(f"{name} is chunked along its columns ({obj.numblocks[1]} blocks): chunk it by rows only, "
                         f"e.g. {name}.rechunk({{1: -1}})")
    return obj


def _group_chunks(group: Any) -> list[Any]:
    """The query sizes chunk by chunk: the chunks of a Dask array (fetched: one number a query),
    or the sequences of a list."""
    if _is_dask(group):
        return [np.asarray(c) for c in (group.to_dask_array(lengths=True) if hasattr(group, "to_dask_array")
                                        else group).blocks]
    if isinstance(group, np.ndarray) or not all(np.ndim(g) == 1 for g in group):
        raise TypeError("group must be a Dask array (one chunk of query sizes per chunk of X) or a list of one "
                        "sequence of query sizes per chunk of X")
    return list(group)


def chunk_groups(x: Any, y: Any, group: Any) -> list[np.ndarray]:
    """The query sizes of each chunk of ``x``, checked against its rows (ValueError naming the chunk)."""
    rows = [int(c) for c in x.chunks[0]]
    if y is not None and [int(c) for c in y.chunks[0]] != rows:
        raise ValueError(f"y's chunks {list(y.chunks[0])} do not match X's {rows}: chunk them alike")
    parts = [np.asarray(_compute(g), dtype=np.int64).ravel() for g in _group_chunks(group)]
    if len(parts) != len(rows):
        raise ValueError(f"group has {len(parts)} chunks but X has {len(rows)}: one chunk of query sizes per chunk "
                         "of X")
    for i, (sizes, n) in enumerate(zip(parts, rows, strict=True)):
        if (sizes < 1).any():
            raise ValueError(f"group chunk {i} has a query size below 1")
        if int(sizes.sum()) != n:
            raise ValueError(f"group chunk {i} sums to {int(sizes.sum())} rows but X's chunk {i} has {n} rows: each "
                             "chunk must hold whole queries")
    return parts


def _compute(obj: Any) -> Any:
    return obj.compute() if _is_dask(obj) else obj


def _small(obj: Any, name: str) -> np.ndarray:
    """The validation array on the client, refused past ``MAX_VALIDATION_ROWS`` rows before any fetch."""
    rows = obj.shape[0]
    if rows is None or (isinstance(rows, float) and np.isnan(rows)):
        raise ValueError(f"{name} has an unknown number of rows: call compute_chunk_sizes() first")
    if int(rows) > MAX_VALIDATION_ROWS:
        raise ValueError(f"{name} has {int(rows)} rows, more than the {MAX_VALIDATION_ROWS} a distributed fit "
                         "gathers to the client and sends to every worker: sample whole queries of it")
    if _is_dask(obj) and hasattr(obj, "to_dask_array"):
        obj = obj.to_dask_array(lengths=True)
    return np.asarray(_compute(obj))


def _chunk_futures(client: Any, x: Any, y: Any, sizes: list[np.ndarray]) -> Chunks:
    """One future per chunk on the worker that computes it: ``{"X", "y", "group"}`` (features as
    float32, as the one-process members train; the query sizes travel from the client)."""
    from dask import delayed

    def part(xc: np.ndarray, yc: np.ndarray, g: np.ndarray) -> dict[str, np.ndarray]:
        return {"X": np.ascontiguousarray(xc, dtype=np.float32), "y": np.asarray(yc, dtype=np.int64), "group": g}

    xs, ys = x.to_delayed().ravel().tolist(), y.to_delayed().ravel().tolist()
    parts = client.compute([delayed(part)(a, b, g) for a, b, g in zip(xs, ys, sizes, strict=True)])
    from distributed import wait

    wait(parts)
    return Chunks(parts=list(parts), rows=[int(s.sum()) for s in sizes])


def cluster_members(cfg: Any, shape: Any) -> tuple[Any, list[str], dict[str, str]]:
    """The default members (``apply_auto``) that train data-parallel: the runs on the raw view of
    LambdaMART and McRank multiclass; the relevance head reuses the McRank member and trains no
    model of its own (its own models would read the training set in one process). The config,
    the default's reasons, and what is left out with why."""
    from tunemix.train.members.auto import apply_auto

    cfg, reasons = apply_auto(cfg, shape)
    m = cfg.members
    left_out: dict[str, str] = {}
    if m.adaboost:
        left_out["adaboost"] = LEFT_OUT["adaboost"]
    if getattr(m, "svm", None):
        left_out["svm"] = LEFT_OUT["svm"]
    raw = [b for b in m.lambdamart if list(b.get("views", m.views)) == ["raw"]]
    if len(raw) < len(m.lambdamart):
        left_out["lambdamart raw+std"] = LEFT_OUT["raw+std"]
    mcrank = [b for b in m.mcrank if list(b.get("views", m.views)) == ["raw"]
              and b.get("variant", "multiclass") == "multiclass"]
    members = dataclasses.replace(m, views=["raw"], lambdamart=raw, mcrank=mcrank, adaboost=[],
                                  **({"svm": []} if hasattr(m, "svm") else {}))
    relevance = dataclasses.replace(cfg.relevance, n_leaves=[], min_data_in_leaf=[])
    reasons = [*reasons, *(f"left out on a cluster: {k}: {v}" for k, v in left_out.items())]
    return dataclasses.replace(cfg, members=members, relevance=relevance), reasons, left_out
