"""The training record written beside a model (``report.json``): the configuration, data, member
runs, mix, evaluation under every convention, timings and the versions of the packages that trained
it. ``tunemix.train.train`` fills in the stages' parts."""

from __future__ import annotations

import contextlib
import logging
import platform
from typing import Any

import joblib
import numpy as np

from tunemix.core.evaluation import CONVENTION_NAMES, evaluate
from tunemix.core.scoring.ensemble_model import EnsembleModel, Member
from tunemix.core.version import __version__
from tunemix.train.config import TrainConfig
from tunemix.train.members.types import (
    RunResult,
)
from tunemix.train.mixing import (
    Mixing,
    mixer_summary,
)
from tunemix.train.prepared import Prepared

log = logging.getLogger(__name__)

#: measures recorded for validation and test under every convention
RECORD_MEASURES = [*(f"ndcg@{k}" for k in range(1, 11)), "err", "p@10", "map"]


def build_record(cfg: TrainConfig, prep: Prepared, runs: list[RunResult], members: list[Member],
                 failures: list[dict[str, Any]], model: EnsembleModel, full_size: tuple[int, int], mixing: Mixing,
                 evaluation: dict[str, Any], timings: dict[str, float]) -> dict[str, Any]:
    """The training record (copied into the manifest and the report)."""
    omega = mixing.omega
    best = int(np.argmax(omega))
    measure, convention = cfg.mixer.measure, cfg.mixer.convention
    summary = mixer_summary(mixing.mixer)
    return {
        "config": cfg.to_dict(),
        "data": prep.records,
        "split": {"fit_queries": prep.fit_part.n_queries, "calibration_queries": prep.cal_part.n_queries,
                  "fit_rows": prep.fit_part.n_docs, "calibration_rows": prep.cal_part.n_docs, "seed": cfg.seed},
        "n_labels": prep.n_labels,
        "runs": [{"tag": r.spec.tag, "type": r.spec.type, "view": r.spec.view, "grouping": r.spec.grouping,
                  "params": r.spec.params, "iterations": r.n_iterations, "stop_reason": r.stop_reason,
                  "fit_seconds": r.fit_seconds, "train_error": r.train_error, "checkpoints": r.snapshot_iterations}
                 for r in runs],
        "members": [{"name": m.name, "type": runs[m.run].spec.type, "omega": float(omega[j])}
                    for j, m in enumerate(members)],
        "calibration_failures": failures,
        "served": {"members": len(model.members), "bases": model.forest.n_base,
                   "members_before_pruning": full_size[0], "bases_before_pruning": full_size[1]},
        "mixer": {"name": cfg.mixer.name, "measure": measure, "convention": convention,
                  "rescale": mixing.chosen_rescale, "snapshots": cfg.mixer.snapshots, "snapshot_T": mixing.snapshot_T,
                  "tie_tolerance": cfg.mixer.tie_tolerance, "tie_tolerance_used": mixing.tolerance,
                  "tune_on": cfg.mixer.tune_on, **summary},
        "member_types": member_type_summary(runs, members, omega, summary.get("weights")),
        "best_member": {"index": best, "name": members[best].name, "omega": float(omega[best])},
        "mixer_comparison": mixing.comparison,
        "rescaling_comparison": mixing.rescaling,
        "evaluation": evaluation,
        "timings": timings,
        "versions": _versions(),
    }


def member_type_summary(runs: list[RunResult], members: list[Member], omega: np.ndarray,
                        weights: list[float] | None) -> list[dict[str, Any]]:
    """Per member type: runs, members, the best validation omega and its member, and the share of
    the mixer's weight its members hold (None for mixers without per-member weights)."""
    types = np.array([runs[m.run].spec.type for m in members])
    w = None if weights is None else np.asarray(weights, dtype=np.float64)
    total = None if w is None else float(w.sum())
    out = []
    for name in dict.fromkeys(r.spec.type for r in runs):
        idx = np.flatnonzero(types == name)
        row: dict[str, Any] = {"type": name, "runs": sum(r.spec.type == name for r in runs), "members": int(idx.size),
                               "best_omega": None, "best_member": None, "weight_share": None,
                               "members_kept": None}
        if idx.size:
            b = int(idx[np.argmax(omega[idx])])
            row.update(best_omega=float(omega[b]), best_member=members[b].name)
        if w is not None and total:
            row["weight_share"] = float(w[idx].sum() / total)
            row["members_kept"] = int(np.sum(w[idx] > 0))
        if name == "best_feature":
            row["detail"] = next(r.stop_reason for r in runs if r.spec.type == name)
        out.append(row)
    return out


# ---------------------------------------------------------------------------------- metrics
def metrics_all_conventions(labels: np.ndarray, scores: np.ndarray, offsets: np.ndarray,
                            docids: np.ndarray | None = None, top_label: int = 4,
                            conventions: list[str] | None = None) -> dict[str, dict[str, float | None]]:
    """Mean of RECORD_MEASURES under each of the ten conventions (or of ``conventions``; None
    where the tool refuses).

    With fewer than five levels, ERR with the data's own top label (``err:top=K-1``, the papers'
    ERR: R = (2^l - 1) / 2^top) is recorded too.
    """
    measures = list(RECORD_MEASURES)
    if top_label < 4:
        measures.insert(measures.index("err") + 1, f"err:top={top_label}")
    out: dict[str, dict[str, float | None]] = {}
    for conv in conventions or CONVENTION_NAMES:
        try:  # one call validates and ranks once for all measures
            means = evaluate(labels, scores, offsets, measures, conv, docids=docids).mean
        except ValueError:  # a measure this tool refuses: take them one at a time
            means = {}
            for measure in measures:
                try:
                    means.update(evaluate(labels, scores, offsets, [measure], conv, docids=docids).mean)
                except ValueError as exc:
                    log.debug("%s under %s: %s", measure, conv, exc)
        row: dict[str, float | None] = {}
        for measure in measures:
            value = means.get(measure)
            row[measure] = None if value is None or np.isnan(value) else float(value)
        out[conv] = row
    return out


def _versions() -> dict[str, str]:
    import numba

    out = {"tunemix": __version__, "python": platform.python_version(), "numpy": np.__version__,
           "numba": numba.__version__, "joblib": joblib.__version__}
    with contextlib.suppress(ImportError):
        import scipy

        out["scipy"] = scipy.__version__
    return out


