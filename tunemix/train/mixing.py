"""The mixing stages of ``tunemix train`` (method section 5): every member's calibrated scores on
the validation (and test) queries, the configured mixer fitted on them (the exponential
forecaster under each member rescaling mode unless one is configured), the other mixers side by
side, and the mixer refitted on each member type alone.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tunemix.core.ensemble.base import member_qualities
from tunemix.core.ensemble.member_rescaling import RESCALE_MODES
from tunemix.core.ensemble.registry import compare_mixers, make_mixer
from tunemix.core.evaluation import mean_metric
from tunemix.core.scoring.ensemble_model import EnsembleModel, Member
from tunemix.train.budget import FitBudget
from tunemix.train.config import TrainConfig
from tunemix.train.members.types import RunResult
from tunemix.train.prepared import Prepared

log = logging.getLogger(__name__)


@dataclass
class Mixing:
    """The fitted mixer and what was measured on the way."""

    vali_members: np.ndarray
    test_members: np.ndarray | None
    chosen_rescale: str | None = None
    rescaling: list[dict[str, Any]] = field(default_factory=list)
    comparison: list[dict[str, Any]] = field(default_factory=list)
    omega: np.ndarray = field(default_factory=lambda: np.zeros(0))
    mixer: Any = None  # the fitted mixer over every member (before pruning)
    snapshot_T: int | None = None  # the iteration count chosen with [mixer] snapshots = "tune"
    tolerance: float | None = None  # the tie tolerance used across the candidates (one_se: the largest SE)
    eligible: np.ndarray | None = None  # the members the forecaster could weigh (T, no duplicates)


def score_members(prep: Prepared, model: EnsembleModel) -> Mixing:
    """Every member's calibrated scores on the validation (and test) queries."""
    vali, test = prep.vali, prep.test
    return Mixing(vali_members=model.member_scores(vali.features, vali.query_offsets),
                  test_members=model.member_scores(test.features, test.query_offsets) if test is not None else None)


def member_snapshot_iterations(runs: list[RunResult], members: list[Member]) -> np.ndarray:
    """Each member's snapshot iteration count (the ``t=`` of its name)."""
    out = np.empty(len(members), dtype=np.int64)
    for j, m in enumerate(members):
        r = runs[m.run]
        out[j] = r.snapshot_iterations[r.checkpoints.index(m.iterations)]
    return out


def snapshot_masks(run_of: np.ndarray, iterations: np.ndarray, snapshots: Mapping[int, Sequence[int]]
                   ) -> list[tuple[int, np.ndarray]]:
    """The paper's protocol (tune and mix sect. 7.3: T tuned with c on validation, from 10 to
    10,000): for each snapshot iteration count T of the boosted runs (``snapshots``: run ->
    its snapshot iteration counts, runs with several snapshots only), the members eligible at T:
    each boosted run's snapshot at T, or its largest snapshot below T (a run trained to fewer
    iterations, e.g. products to 300, uses its last), and every member of any other run.
    ``run_of`` and ``iterations`` give each member's run and snapshot iteration count."""
    counts = sorted({int(t) for snaps in snapshots.values() for t in snaps})
    out = []
    for T in counts:
        mask = np.ones(run_of.shape[0], dtype=bool)
        for run, snaps in snapshots.items():
            pick = max((t for t in snaps if t <= T), default=min(snaps))
            sel = run_of == run
            mask[sel] = iterations[sel] == pick
        out.append((T, mask))
    return out


def snapshot_sets(runs: list[RunResult], members: list[Member]) -> list[tuple[int, np.ndarray]]:
    """``snapshot_masks`` of a model's members."""
    boosted = {m.run: runs[m.run].snapshot_iterations for m in members if len(runs[m.run].snapshot_iterations) > 1}
    return snapshot_masks(np.array([m.run for m in members], dtype=np.int64),
                          member_snapshot_iterations(runs, members), boosted)


@dataclass
class ForecasterSearch:
    """Forecasters fitted on one tuning set, one per (rescale mode, T): ``candidates`` as
    (mode, T or None, fitted forecaster), the ``pick`` and the tie ``tolerance`` it used."""

    candidates: list[tuple[str, int | None, Any]]
    pick: int
    tolerance: float

    @property
    def chosen(self) -> Any:
        return self.candidates[self.pick][2]


def search_forecasters(scores: np.ndarray, labels: np.ndarray, offsets: np.ndarray, *, modes: Sequence[str],
                       sets: Sequence[tuple[int | None, np.ndarray | None]], measure: str, convention: str,
                       deadline: FitBudget | None = None, **params: Any) -> ForecasterSearch:
    """The exponential forecaster under each rescaling mode and eligible set (each T of
    ``snapshot_masks``, or ``(None, None)``: every member), omega and the duplicates computed
    once; the pick is the first candidate within the tolerance of the best tuning quality (the
    first mode listed, then the smaller T). ``params`` go to the forecaster (e.g. tie_tolerance).
    Anytime: once the ``deadline``'s mixing end has passed no further candidate is fitted (at
    least one is), and the pick is among those fitted."""
    candidates: list[tuple[str, int | None, Any]] = []
    shared: dict[str, Any] = {}  # omega and duplicates: the same for every mode and T
    for mode in modes:
        for T, mask in sets:
            if candidates and deadline is not None and deadline.passed("mixing"):
                break
            fc = make_mixer("exp_forecaster", measure=measure, convention=convention, rescale=mode, **params)
            fc.fit(scores, labels, offsets, eligible=mask, **shared)  # type: ignore[call-arg]
            shared = {"omega": fc.omega_, "duplicate_of": fc.duplicate_of_}  # type: ignore[attr-defined]
            candidates.append((mode, T, fc))
    keys = [float(fc.selection_quality_) for _, _, fc in candidates]
    tolerance = float(max(fc.tolerance_ for _, _, fc in candidates))
    best = max(keys)
    pick = next(i for i, k in enumerate(keys) if k >= best - tolerance)
    return ForecasterSearch(candidates=candidates, pick=pick, tolerance=tolerance)


def fit_mixer(cfg: TrainConfig, prep: Prepared, model: EnsembleModel, out: Mixing,
              runs: list[RunResult] | None = None, deadline: FitBudget | None = None) -> None:
    """Fit the mixer and set it on the model. The forecaster is fitted under every member
    rescaling mode unless one is configured (method section 5) and, with ``[mixer] snapshots =
    "tune"``, on the members of each snapshot iteration count T (``snapshot_sets``); the
    candidate best on the tuning queries (``[mixer] tune_on``: validation, or the calibration
    part) is kept, ties to the first mode listed and the smaller T; under a time budget, among the
    candidates fitted before the ``deadline``'s mixing end (``search_forecasters``)."""
    vali, test = prep.vali, prep.test
    vali_members, test_members = out.vali_members, out.test_members
    measure, convention = cfg.mixer.measure, cfg.mixer.convention
    mixer = model.mixer
    members = list(model.members)
    tune_scores, tune_data = vali_members, vali
    if cfg.mixer.tune_on == "calibration":
        tune_data = prep.cal_part
        tune_scores = model.member_scores(tune_data.features, tune_data.query_offsets)
    if cfg.mixer.name == "exp_forecaster":
        # The record shows every candidate, on validation and test too, so the choice can be checked.
        modes = list(RESCALE_MODES) if cfg.mixer.rescale in (None, "auto") else [str(cfg.mixer.rescale)]
        sets: list[tuple[int | None, np.ndarray | None]] = [(None, None)]
        if cfg.mixer.snapshots == "tune" and runs is not None:
            sets = list(snapshot_sets(runs, members)) or [(None, None)]
        search = search_forecasters(tune_scores, tune_data.labels, tune_data.query_offsets, modes=modes, sets=sets,
                                    measure=measure, convention=convention, tie_tolerance=cfg.mixer.tie_tolerance,
                                    selection=cfg.mixer.selection, deadline=deadline)
        for mode, T, fc in search.candidates:
            tuned = float(fc.validation_quality_)
            row: dict[str, Any] = {"rescale": mode}
            if T is not None:
                row["snapshot_T"] = T
            if cfg.mixer.tune_on == "calibration":
                row[f"cal_{measure}"] = tuned
                row[f"val_{measure}"] = mean_metric(vali.labels, fc.transform(vali_members, vali.query_offsets),
                                                    vali.query_offsets, measure, convention)
            else:
                row[f"val_{measure}"] = tuned
            if cfg.mixer.selection == "cv":
                row[f"cv_{measure}"] = float(fc.selection_quality_)
            if test is not None and test_members is not None:
                row[f"test_{measure}"] = mean_metric(test.labels, fc.transform(test_members, test.query_offsets),
                                                     test.query_offsets, measure, convention)
            out.rescaling.append(row)
        out.tolerance = search.tolerance
        pick = search.pick
        mixer, out.chosen_rescale = search.chosen, out.rescaling[pick]["rescale"]
        out.snapshot_T = out.rescaling[pick].get("snapshot_T")
        out.eligible = np.asarray(mixer.eligible_)
        log.info("exp_forecaster: rescale=%s%s (best on %s of %d candidates), c=%g, omega_min=%g, %d of %d "
                 "members kept", out.chosen_rescale, "" if out.snapshot_T is None else f", T={out.snapshot_T}",
                 cfg.mixer.tune_on, len(search.candidates), mixer.c_, mixer.omega_min_,
                 int(np.sum(mixer.kept_)), model.n_members)
    else:
        mixer.fit(tune_scores, tune_data.labels, tune_data.query_offsets)
    model.mixer = mixer
    out.mixer = mixer
    out.omega = member_qualities(vali_members, vali.labels, vali.query_offsets, measure, convention, mean_metric)


def compare(cfg: TrainConfig, prep: Prepared, mixing: Mixing) -> None:
    """The other mixers on the same members, validation and test (``mixing.comparison``)."""
    vali, test = prep.vali, prep.test
    if test is None or mixing.test_members is None or not cfg.mixer.compare:
        return
    measure, convention = cfg.mixer.measure, cfg.mixer.convention
    names = list(dict.fromkeys([cfg.mixer.name, *cfg.mixer.compare]))
    mixer_specs: list[Any] = []
    for name in names:
        if name == "exp_forecaster" and mixing.chosen_rescale is not None:
            mixer_specs.append(make_mixer(name, measure=measure, convention=convention, rescale=mixing.chosen_rescale,
                                          tie_tolerance=cfg.mixer.tie_tolerance, selection=cfg.mixer.selection))
        elif name == "uniform" and mixing.chosen_rescale is not None:
            mixer_specs.append(make_mixer(name, rescale=mixing.chosen_rescale))  # c = 0 of the same forecaster
        else:
            mixer_specs.append(name)
    cols = np.arange(mixing.vali_members.shape[1])
    if mixing.snapshot_T is not None and mixing.eligible is not None:
        cols = np.flatnonzero(mixing.eligible)  # the same members as the served mix (snapshots at T)
    mixing.comparison = compare_mixers(np.ascontiguousarray(mixing.vali_members[:, cols]), vali.labels,
                                       vali.query_offsets, np.ascontiguousarray(mixing.test_members[:, cols]),
                                       test.labels, test.query_offsets, mixers=mixer_specs, measures=[measure],
                                       convention=convention)


def compare_type_subsets(cfg: TrainConfig, prep: Prepared, runs: list[RunResult], members: list[Member],
                         mixing: Mixing) -> list[dict[str, Any]]:
    """The configured mixer refitted on each member type's members alone (and on all of them), on
    the same validation queries, reported on validation and test: what each type brings to the mix
    (e.g. the full mix against the AdaBoost.MH-only mix). Each subset is mixed as the full set is:
    the forecaster with ``rescale = "auto"`` picks its own rescaling mode on validation. Only with
    more than one type."""
    test = prep.test
    types = np.array([runs[m.run].spec.type for m in members])
    names = list(dict.fromkeys(types.tolist()))
    if len(names) < 2 or test is None or mixing.test_members is None:
        return []
    measure, convention = cfg.mixer.measure, cfg.mixer.convention
    vali = prep.vali
    rows = []
    for name in ["all", *names]:
        cols = np.arange(len(members)) if name == "all" else np.flatnonzero(types == name)
        vali_scores = np.ascontiguousarray(mixing.vali_members[:, cols])
        if cfg.mixer.name == "exp_forecaster":
            modes = list(RESCALE_MODES) if cfg.mixer.rescale in (None, "auto") else [str(cfg.mixer.rescale)]
            candidates = [make_mixer("exp_forecaster", measure=measure, convention=convention, rescale=mode,
                                     tie_tolerance=cfg.mixer.tie_tolerance, selection=cfg.mixer.selection)
                          for mode in modes]
        else:
            modes = [""]
            candidates = [make_mixer(cfg.mixer.name, **mixer_params(cfg))]
        best: tuple[float, int, Any] | None = None
        for i, mixer in enumerate(candidates):
            mixer.fit(vali_scores, vali.labels, vali.query_offsets)
            quality = mean_metric(vali.labels, mixer.transform(vali_scores, vali.query_offsets), vali.query_offsets,
                                  measure, convention)
            if best is None or quality > best[0]:  # ties: the first mode listed, as the full mix
                best = (quality, i, mixer)
        assert best is not None
        test_scores = best[2].transform(np.ascontiguousarray(mixing.test_members[:, cols]), test.query_offsets)
        rows.append({
            "members": name, "n_members": int(cols.size), "rescale": modes[best[1]] or None,
            f"val_{measure}": best[0],
            f"test_{measure}": mean_metric(test.labels, test_scores, test.query_offsets, measure, convention),
        })
    return rows


def mixer_params(cfg: TrainConfig) -> dict[str, Any]:
    if cfg.mixer.name in ("exp_forecaster", "one_best"):
        return {"measure": cfg.mixer.measure, "convention": cfg.mixer.convention}
    return {}


def mixer_summary(mixer: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for attr in ("c_", "omega_min_", "validation_quality_"):
        if hasattr(mixer, attr):
            out[attr.rstrip("_")] = float(getattr(mixer, attr))
    if hasattr(mixer, "kept_"):
        out["members_kept"] = int(np.sum(mixer.kept_))
    if hasattr(mixer, "duplicate_of_"):
        out["duplicates_dropped"] = int(np.sum(np.asarray(mixer.duplicate_of_) >= 0))
    if hasattr(mixer, "grid_quality_"):
        out["grid"] = {"c": [float(c) for c in mixer.c_grid_],
                       "omega_min": [float(v) for v in mixer.omega_min_grid_],
                       "quality": np.asarray(mixer.grid_quality_).tolist()}
    if hasattr(mixer, "weights_"):
        out["weights"] = [float(w) for w in mixer.weights_]
    return out
