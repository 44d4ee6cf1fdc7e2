"""The stages after the members of a distributed fit (``tunemix.dask``), on the client, on the
validation queries alone: calibrate, mix, evaluate, the relevance head, the record.

They are the stages of ``tunemix.train.train`` run on a :class:`Prepared` whose every set is the
validation set: the members trained on the workers use only calibrators that fit nothing
(``identity``, ``er:*``: their runs are ``fit_on = "train"``), so no calibration part is needed;
the exponentially weighted forecaster is tuned on the validation queries as in one process; the
relevance head is the McRank member alone (``[relevance] n_leaves = []``) recalibrated on
validation. The record's ``split`` says that the training rows stayed on the workers.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from tunemix.core.data.dataset import RankingData
from tunemix.model import Model
from tunemix.train.budget import FitBudget
from tunemix.train.config import TrainConfig, resolve_feature_names
from tunemix.train.data.binned import view_in_chunks
from tunemix.train.learners.label_groups import get_grouping
from tunemix.train.members.types import RunResult
from tunemix.train.parallel import parallel_backend
from tunemix.train.prepared import Prepared
from tunemix.train.record import build_record
from tunemix.train.relevance.stage import fit_head, reusable_head_models
from tunemix.train.train import (
    _Clock,
    calibrate_runs,
    evaluate_model,
    mix_members,
    peer_recipe_record,
    served_scores,
    vali_per_query,
)


def finish(cfg: TrainConfig, vali: RankingData, runs: list[RunResult], n_labels: int) -> tuple[Model, dict[str, Any]]:
    """The served model (calibrated, mixed, with its relevance head) of the distributed ``runs``
    and its training record, from the validation queries ``vali``."""
    clock = _Clock()
    deadline = FitBudget.begin(None)
    prep = Prepared(sets={"train": vali, "vali": vali},
                    records=[{"role": "vali", "in_memory": True, "rows": vali.n_docs, "queries": vali.n_queries,
                              "features": vali.n_features}],
                    n_labels=n_labels, groupings={"original": get_grouping("original", n_labels)}, fit_part=vali,
                    cal_part=vali, extra_views=[],
                    view_x={("cal", "raw"): view_in_chunks(vali.features, vali.query_offsets, "raw")})
    with parallel_backend("sequential", 1, None) as n_jobs, clock("calibration_s"):
        cals = calibrate_runs(cfg, prep, runs, n_jobs, False, deadline=deadline)
    mixed = mix_members(cfg, clock, prep, runs, cals, deadline)
    with clock("evaluation_s"):
        served = served_scores(prep, mixed.model)
        evaluation = evaluate_model(prep, mixed.model, mixed.mixing, served)
    with clock("relevance_head_s"):
        relevance = fit_head(cfg, prep, mixed.model, served, False, reusable_head_models(cfg, prep, runs), deadline)
    clock.timings["total_s"] = time.perf_counter() - clock.start
    names = resolve_feature_names(cfg.data, vali.n_features)
    record = build_record(cfg, prep, runs, mixed.members, mixed.failures, mixed.model, mixed.full_size,
                          mixed.mixing, evaluation, clock.timings)
    record["split"] = {"fit_queries": None, "calibration_queries": 0, "seed": cfg.seed,
                       "note": "trained on the Dask workers' chunks (record dask); no calibration part: the members' "
                               "calibrators fit nothing; the mix is tuned on the validation queries"}
    record.update({"relevance_head": relevance, "search": None, "time_budget": None, "small_validation": None,
                   "peer_recipe": peer_recipe_record(cfg, prep, runs, vali_per_query(cfg, prep, served["vali"])),
                   "mix_by_member_type": mixed.by_type,
                   "best_feature": None, "feature_names": names,
                   "explanations": {"skipped": "a distributed fit explains no documents in its report"},
                   "numba_compile": clock.compile_record()})
    model = Model(ensemble=mixed.model, manifest={"name": cfg.name, "version": "unsaved",
                                                  "n_features": mixed.model.n_features, "feature_names": names},
                  path=Path("."))
    return model, record
