"""Mixers by canonical name, params round trip, and a side-by-side comparison.

>>> make_mixer("rrf", k=60).name
'rrf'
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from tunemix.core.ensemble.base import (
    MetricFn,
    Mixer,
    check_inputs,
    check_labels,
    resolve_metric,
)
from tunemix.core.ensemble.exponential_forecaster import ExponentialForecaster
from tunemix.core.ensemble.rank_fusion import CombMNZ, CombSUM, CondorcetFusion, ReciprocalRankFusion
from tunemix.core.ensemble.simple_mixers import OneBest, Uniform

MIXERS: dict[str, type[Mixer]] = {
    cls.name: cls
    for cls in (
        ExponentialForecaster,
        OneBest,
        Uniform,
        ReciprocalRankFusion,
        CombSUM,
        CombMNZ,
        CondorcetFusion,
    )
}

#: Mixers whose ``fit`` evaluates rankings (they take measure / convention / metric).
SUPERVISED: frozenset[str] = frozenset({"exp_forecaster", "one_best"})


def _lookup(name: str) -> type[Mixer]:
    try:
        return MIXERS[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown mixer {name!r}; choose one of {sorted(MIXERS)}") from None


def make_mixer(name: str, **params: Any) -> Mixer:
    """A new, unfitted mixer: ``make_mixer("exp_forecaster", c_grid=[0, 10, 100])``."""
    cls = _lookup(name)
    try:
        return cls(**params)
    except TypeError as exc:
        raise TypeError(f"bad parameters for mixer {name!r}: {exc}") from exc


def mixer_from_params(params: Mapping[str, Any]) -> Mixer:
    """Rebuild a fitted mixer from ``mixer.to_params()`` (dispatch on ``params['mixer']``)."""
    if "mixer" not in params:
        raise ValueError("params lack the 'mixer' key naming the mixer")
    return _lookup(str(params["mixer"])).from_params(params)


def _summary(mixer: Mixer) -> str:
    if isinstance(mixer, ExponentialForecaster):
        return (
            f"c={mixer.c_:g} omega_min={mixer.omega_min_:.4g} "
            f"kept={int(mixer.kept_.sum())}/{mixer.n_members_} rescale={mixer.rescale}"
        )
    if isinstance(mixer, OneBest):
        return f"member={mixer.best_} omega={mixer.omega_[mixer.best_]:.4f}"
    return repr(mixer)


def compare_mixers(
    val_scores: npt.ArrayLike,
    val_labels: npt.ArrayLike,
    val_offsets: npt.ArrayLike,
    test_scores: npt.ArrayLike,
    test_labels: npt.ArrayLike,
    test_offsets: npt.ArrayLike,
    *,
    mixers: Sequence[str | Mixer] | None = None,
    measures: Sequence[str] = ("ndcg@10",),
    convention: str = "yahoo",
    metric: MetricFn | None = None,
) -> list[dict[str, Any]]:
    """Fit every mixer on the validation queries and report it on validation and test.

    ``mixers``: names (built with defaults; supervised ones optimise ``measures[0]`` under
    ``convention``) or unfitted mixer objects; default: every registered mixer. Returns one row
    per mixer: ``{"mixer", "detail", "fit_seconds", "transform_seconds", "val_<measure>",
    "test_<measure>", ...}`` in the given order.
    """
    vs, vo = check_inputs(val_scores, val_offsets, scores_name="val_scores",
                          offsets_name="val_offsets")
    ts, to = check_inputs(test_scores, test_offsets, scores_name="test_scores",
                          offsets_name="test_offsets")
    vl = check_labels(val_labels, vs.shape[0], name="val_labels")
    tl = check_labels(test_labels, ts.shape[0], name="test_labels")
    if vs.shape[1] != ts.shape[1]:
        raise ValueError(
            f"val_scores has {vs.shape[1]} members but test_scores has {ts.shape[1]}"
        )
    if not measures:
        raise ValueError("measures must name at least one measure")
    fn = resolve_metric(metric)
    rows: list[dict[str, Any]] = []
    for spec in MIXERS if mixers is None else mixers:
        if isinstance(spec, Mixer):
            mixer = spec
        elif spec in SUPERVISED:
            mixer = make_mixer(spec, measure=measures[0], convention=convention, metric=fn)
        else:
            mixer = make_mixer(spec)
        t0 = time.perf_counter()
        mixer.fit(vs, vl, vo)
        t1 = time.perf_counter()
        val_mixed = mixer.transform(vs, vo)
        t2 = time.perf_counter()
        test_mixed = mixer.transform(ts, to)
        t3 = time.perf_counter()
        row: dict[str, Any] = {
            "mixer": mixer.name,
            "detail": _summary(mixer),
            "fit_seconds": t1 - t0,
            "transform_seconds": (t2 - t1) + (t3 - t2),
        }
        for measure in measures:
            row[f"val_{measure}"] = float(fn(vl, val_mixed, vo, measure, convention))
            row[f"test_{measure}"] = float(fn(tl, test_mixed, to, measure, convention))
        rows.append(row)
    return rows


def format_rows(rows: Sequence[Mapping[str, Any]]) -> str:
    """A plain-text table of ``compare_mixers`` rows (for logs and reports)."""
    if not rows:
        return ""
    keys = [k for k in rows[0] if k != "detail"] + ["detail"]
    cells = [
        [f"{r[k]:.4f}" if isinstance(r[k], float | np.floating) else str(r[k]) for k in keys]
        for r in rows
    ]
    widths = [max(len(k), *(len(c[i]) for c in cells)) for i, k in enumerate(keys)]
    lines = ["  ".join(k.ljust(w) for k, w in zip(keys, widths, strict=True))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(cs, widths, strict=True)) for cs in cells]
    return "\n".join(lines)
