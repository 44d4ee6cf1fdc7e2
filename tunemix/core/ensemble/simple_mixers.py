"""The two ends of the exponentially weighted forecaster: the best single member and the mean.

Tune-and-mix (Busa-Fekete et al. 2013, sec. 6) motivates its forecaster as one knob c between
"classical winner-takes-all validation (choosing the best model)" (c -> infinity, ``OneBest``)
and "simple equal-weight voting" (c = 0, ``Uniform``, McRank's aggregation).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from tunemix.core.ensemble.base import (
    Float1D,
    Float2D,
    Int1D,
    MetricFn,
    Mixer,
    Offsets,
    member_qualities,
    resolve_metric,
)
from tunemix.core.ensemble.member_rescaling import DEFAULT_RESCALE, MemberRescaler, check_rescale


class OneBest(Mixer):
    """The member whose ranking has the highest validation quality omega_m; ties -> lowest m.

    omega_m = mean over validation queries of ``measure`` (default NDCG@10, "yahoo"
    convention) of the ranking by member m's scores. ``transform`` returns that member's column
    unchanged.
    """

    name: ClassVar[str] = "one_best"

    def __init__(
        self, *, measure: str = "ndcg@10", convention: str = "yahoo", metric: MetricFn | None = None
    ) -> None:
        self.measure = measure
        self.convention = convention
        self.metric = metric

    @classmethod
    def _init_param_names(cls) -> tuple[str, ...]:
        return ("measure", "convention")

    def _fit(self, member_scores: Float2D, labels: Int1D, query_offsets: Offsets) -> None:
        metric = resolve_metric(self.metric)
        self.omega_ = member_qualities(
            member_scores, labels, query_offsets, self.measure, self.convention, metric
        )
        self.best_ = int(np.argmax(self.omega_))

    def _transform(self, member_scores: Float2D, query_offsets: Offsets) -> Float1D:
        return np.ascontiguousarray(member_scores[:, self.best_])

    def _fitted_params(self) -> dict[str, Any]:
        return {"best": self.best_, "omega": self.omega_.copy()}

    def _set_fitted_params(self, params: Mapping[str, Any]) -> None:
        best = int(params["best"])
        if not 0 <= best < self.n_members_:
            raise ValueError(f"best member {best} is out of range for {self.n_members_} members")
        self.best_ = best
        self.omega_ = np.asarray(params.get("omega", np.full(self.n_members_, np.nan)), float)


class Uniform(Mixer):
    """Equal weights: v(x) = (1/M) sum_m r(v_m)(x), r the member rescaling (``rescale``).

    McRank's aggregation (Li et al. 2007) and the c = 0 end of the exponential forecaster; it
    uses the same rescaling so that ``ExponentialForecaster`` with c = 0 reproduces it exactly.
    """

    name: ClassVar[str] = "uniform"

    def __init__(self, *, rescale: str = DEFAULT_RESCALE) -> None:
        self.rescale = check_rescale(rescale)

    @classmethod
    def _init_param_names(cls) -> tuple[str, ...]:
        return ("rescale",)

    def _fit(self, member_scores: Float2D, labels: Int1D, query_offsets: Offsets) -> None:
        self.rescaler_ = MemberRescaler(self.rescale).fit(member_scores)

    def _transform(self, member_scores: Float2D, query_offsets: Offsets) -> Float1D:
        m = member_scores.shape[1]
        return self.rescaler_.weighted_sum(member_scores, query_offsets, np.full(m, 1.0 / max(m, 1)))

    def _fitted_params(self) -> dict[str, Any]:
        return {"rescale_scale": self.rescaler_.to_params()["rescale_scale"]}

    def _set_fitted_params(self, params: Mapping[str, Any]) -> None:
        self.rescaler_ = MemberRescaler.from_params(params)
