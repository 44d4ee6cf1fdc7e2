"""The mixing stages of ``tunemix train`` (method section 5): every member's calibrated scores on
the validation (and test) queries, the configured mixer fitted on them (the exponential
forecaster under each member rescaling mode unless one is configured), the other mixers side by
side, and the mixer refitted on each member type alone.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from training.ensemble.base import member_qualities
from training.ensemble.member_rescaling import RESCALE_MODES
from training.ensemble.registry import compare_mixers, make_mixer
from training.evaluation import mean_metric
from training.pipeline.config import TrainConfig
from training.pipeline.member_types import RunResult
from training.scoring.ensemble_model import EnsembleModel, Member

if TYPE_CHECKING:
    from training.pipeline.train import Prepared

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


def score_members(prep: Prepared, model: EnsembleModel) -> Mixing:
    """Every member's calibrated scores on the validation (and test) queries."""
    vali, test = prep.vali, prep.test
    return Mixing(vali_members=model.member_scores(vali.features, vali.query_offsets),
                  test_members=model.member_scores(test.features, test.query_offsets) if test is not None else None)


def fit_mixer(cfg: TrainConfig, prep: Prepared, model: EnsembleModel, out: Mixing) -> None:
    """Fit the mixer on the validation members' scores (for the forecaster: under every member
    rescaling mode unless one is configured; method section 5) and set it on the model."""
    vali, test = prep.vali, prep.test
    vali_members, test_members = out.vali_members, out.test_members
    measure, convention = cfg.mixer.measure, cfg.mixer.convention
    mixer = model.mixer
    if cfg.mixer.name == "exp_forecaster":
        # Member rescaling (method section 5): with rescale "auto" (the default) the forecaster is
        # fitted under every mode and the best on the validation queries is kept; the record shows
        # all of them, on test too, so the choice can be checked.
        modes = list(RESCALE_MODES) if cfg.mixer.rescale in (None, "auto") else [str(cfg.mixer.rescale)]
        fitted = []
        for mode in modes:
            fc = make_mixer("exp_forecaster", measure=measure, convention=convention, rescale=mode)
            fc.fit(vali_members, vali.labels, vali.query_offsets)
            row: dict[str, Any] = {"rescale": mode, f"val_{measure}": float(fc.validation_quality_)}  # type: ignore[attr-defined]
            if test is not None and test_members is not None:
                row[f"test_{measure}"] = mean_metric(test.labels, fc.transform(test_members, test.query_offsets),
                                                     test.query_offsets, measure, convention)
            out.rescaling.append(row)
            fitted.append(fc)
        pick = int(np.argmax([r[f"val_{measure}"] for r in out.rescaling]))  # ties: the first mode listed
        mixer, out.chosen_rescale = fitted[pick], modes[pick]
        log.info("exp_forecaster: rescale=%s (best on validation of %s), c=%g, omega_min=%g, %d of %d members kept",
                 out.chosen_rescale, "/".join(modes), mixer.c_, mixer.omega_min_,  # type: ignore[attr-defined]
                 int(np.sum(mixer.kept_)), model.n_members)  # type: ignore[attr-defined]
    else:
        mixer.fit(vali_members, vali.labels, vali.query_offsets)
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
            mixer_specs.append(make_mixer(name, measure=measure, convention=convention, rescale=mixing.chosen_rescale))
        elif name == "uniform" and mixing.chosen_rescale is not None:
            mixer_specs.append(make_mixer(name, rescale=mixing.chosen_rescale))  # c = 0 of the same forecaster
        else:
            mixer_specs.append(name)
    mixing.comparison = compare_mixers(mixing.vali_members, vali.labels, vali.query_offsets, mixing.test_members,
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
            candidates = [make_mixer("exp_forecaster", measure=measure, convention=convention, rescale=mode)
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
    if hasattr(mixer, "grid_quality_"):
        out["grid"] = {"c": [float(c) for c in mixer.c_grid_],
                       "omega_min": [float(v) for v in mixer.omega_min_grid_],
                       "quality": np.asarray(mixer.grid_quality_).tolist()}
    if hasattr(mixer, "weights_"):
        out["weights"] = [float(w) for w in mixer.weights_]
    return out
