"""The model sets ``bench.bench_service`` serves, each beside the LightGBM peer it is measured against
(``--model-set mq2008|mslr-default|both``).

- ``mq2008``: the MQ2008 Fold1 ensemble of ``configs/mq2008.toml`` (the latest
  ``models/mq2008-fold1/vN``, trained when absent, about 5 min), 46 features. Its peer: a
  LightGBM lambdarank ``Booster`` trained on MQ2008 Fold1 train with as many trees as our forest
  has bases, 8 leaves (the same size of forest on both sides).
- ``mslr-default``: ``TuneMixRanker()``'s defaults trained on the MSLR-WEB10K sample's train file,
  136 features (the latest ``models/mslr-sample-default/vN``, trained when absent, one job; see
  ``bench.common.mslr_default_model``). Its peer: LightGBM lambdarank stopped early on NDCG@10
  (``bench.common.early_stopped_lightgbm``) of a fifth of the training queries held out
  (``split_by_query(0.8, seed 0)``: the kind of hold-out the ranker makes for its calibration and
  mix), trained on the other four fifths.

Requests are drawn from each set's own test file (``bench.service_requests.make_bodies``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import (
    MODEL_NAME,
    MODELS_DIR,
    MSLR_TEST,
    MSLR_TRAIN,
    SHARED_DATA,
    early_stopped_lightgbm,
    ensure_model,
    mslr_default_model,
)

MODEL_SETS = ("mq2008", "mslr-default")
MSLR_MODEL_NAME = "mslr-sample-default"


@dataclass(frozen=True)
class ModelSet:
    """What one model set's run needs: our model (its version directory and name under
    ``models_dir``), the rows its requests are drawn from, and the peer's model file."""

    key: str
    model_path: Path
    model_name: str
    models_dir: Path
    test: Any
    data: str
    peer_file: Path
    peer_model: dict[str, Any]


def train_bases_peer(train: Any, n_trees: int, threads: int, path: Path) -> dict[str, Any]:
    """The MQ2008 set's peer: lambdarank, ``n_trees`` trees of 8 leaves, saved to ``path``."""
    import lightgbm as lgb

    t0 = time.perf_counter()
    ds = lgb.Dataset(train.features, train.labels, group=np.diff(train.query_offsets))
    params = {"objective": "lambdarank", "num_leaves": 8, "learning_rate": 0.05, "num_threads": threads,
              "verbose": -1, "seed": 0}
    bst = lgb.train(params, ds, num_boost_round=n_trees)
    bst.save_model(str(path))
    leaves = [t["num_leaves"] for t in bst.dump_model()["tree_info"]]
    return {"objective": "lambdarank", "num_leaves": 8, "learning_rate": 0.05, "num_threads": threads,
            "n_trees": bst.num_trees(), "n_trees_requested": n_trees, "leaves_total": int(sum(leaves)),
            "trees_with_8_leaves": int(sum(1 for v in leaves if v == 8)), "lightgbm": lgb.__version__,
            "train_s": round(time.perf_counter() - t0, 2)}


def check_data(keys: list[str]) -> None:
    """SystemExit naming the data a set needs when it is not there."""
    need = {"mq2008": [SHARED_DATA / "MQ2008" / "Fold1" / "train.txt"], "mslr-default": [MSLR_TRAIN, MSLR_TEST]}
    for key in keys:
        missing = [str(p) for p in need[key] if not p.is_file()]
        if missing:
            raise SystemExit(f"bench_service --model-set {key}: {', '.join(missing)} not found (shared/data beside "
                             "the repository, or set TUNEMIX_SHARED_DATA)")


def prepare(key: str, threads: int, workdir: Path) -> ModelSet:
    """Set ``key``'s model (trained when absent) and its peer (trained here, into ``workdir``)."""
    from tunemix.core.data.svmlight import read_svmlight
    from tunemix.core.scoring.ensemble_model import load_model
    from tunemix.train.data.splits import split_by_query

    peer_file = workdir / f"lightgbm-peer-{key}.txt"
    if key == "mq2008":
        fold = SHARED_DATA / "MQ2008" / "Fold1"
        model_path = ensure_model()
        train = read_svmlight(fold / "train.txt")
        test = read_svmlight(fold / "test.txt", n_features=train.n_features)
        n_trees = load_model(model_path)[0].forest.n_base
        peer = train_bases_peer(train, n_trees, threads, peer_file)
        return ModelSet(key, model_path, MODEL_NAME, MODELS_DIR, test, "MQ2008 Fold1 test rows", peer_file, peer)
    model_path = mslr_default_model(MODELS_DIR, MSLR_MODEL_NAME, reuse=True)
    train = read_svmlight(MSLR_TRAIN, n_features=136)
    test = read_svmlight(MSLR_TEST, n_features=136)
    fit, held_out = split_by_query(train, fraction=0.8, seed=0)
    booster, peer = early_stopped_lightgbm(fit, held_out, threads=threads)
    booster.save_model(str(peer_file))
    peer["stopped_on"] = "NDCG@10 of 20% of the MSLR sample's training queries (split_by_query, seed 0)"
    return ModelSet(key, model_path, MSLR_MODEL_NAME, MODELS_DIR, test, "MSLR-WEB10K sample test rows (136 features)",
                    peer_file, peer)
