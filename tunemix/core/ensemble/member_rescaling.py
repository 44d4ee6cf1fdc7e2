"""Put the members' scores on one scale before a linear mix.

Members' calibrated scores live on different scales (tune-and-mix 2013, sec. 5: expected gain
sum_l z_l p_l in [0, 2^{K-1} - 1] for CPC calibrators, DCG-normalised regression targets in
[0, 1] for half of the RBC calibrators, raw class scores for uncalibrated members), so an
unscaled weighted sum lets the widest member dominate whatever its weight. Modes:

``"none"``          v_m unchanged.
``"zscore_query"``  per query q and member m: (v_m - mean_q) / std_q (population std); a member
                    constant on the query gives 0 there. Stateless; depends on the whole
                    candidate list, like query-wise feature normalisation.
``"minmax_query"``  per query: (v_m - min_q) / (max_q - min_q); constant -> 0. Stateless.
``"std_global"``    v_m / sd_m with sd_m the member's standard deviation over all validation
                    documents (fitted; sd_m = 1 when the member is constant). A per-member
                    shift would not change any query's ranking, so only the scale is stored.

Per-query modes keep each member's within-query order and are the only ones that also make the
members' per-query *spreads* comparable; see ``ExponentialForecaster`` for the measured default.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self

import numpy as np
import numpy.typing as npt

from tunemix.core.ensemble import fusion_kernels as fk

RESCALE_MODES: tuple[str, ...] = ("none", "zscore_query", "minmax_query", "std_global")

#: Default for the linear mixers (ExponentialForecaster, Uniform); chosen by measurement, see
#: the ExponentialForecaster docstring.
DEFAULT_RESCALE = "zscore_query"


def check_rescale(rescale: object) -> str:
    if not isinstance(rescale, str) or rescale not in RESCALE_MODES:
        raise ValueError(f"rescale must be one of {list(RESCALE_MODES)}, got {rescale!r}")
    return rescale


class MemberRescaler:
    """Fit (for ``std_global``) and apply one of the rescaling modes to (n, M) member scores."""

    def __init__(self, mode: str = "zscore_query") -> None:
        self.mode = check_rescale(mode)
        self.scale_: npt.NDArray[np.float64] | None = None

    def fit(self, member_scores: npt.NDArray[np.float64]) -> Self:
        """Learn per-member scales (``std_global`` only); member_scores is validated (n, M)."""
        if self.mode == "std_global":
            sd = member_scores.std(axis=0) if member_scores.shape[0] else np.ones(
                member_scores.shape[1]
            )
            self.scale_ = np.where(sd > 0.0, sd, 1.0).astype(np.float64)
        else:
            self.scale_ = None
        return self

    def transform(
        self, member_scores: npt.NDArray[np.float64], query_offsets: npt.NDArray[np.int64]
    ) -> npt.NDArray[np.float64]:
        """Rescaled copy (or the array itself for ``none``) of validated inputs."""
        if self.mode == "none":
            return member_scores
        if self.mode == "zscore_query":
            return fk.rescale_per_query(member_scores, query_offsets, 0)
        if self.mode == "minmax_query":
            return fk.rescale_per_query(member_scores, query_offsets, 1)
        if self.scale_ is None:
            raise ValueError("std_global rescaling needs fit() (or params with 'rescale_scale')")
        if self.scale_.shape[0] != member_scores.shape[1]:
            raise ValueError(
                f"rescale_scale has {self.scale_.shape[0]} entries but member_scores has "
                f"{member_scores.shape[1]} members"
            )
        return np.ascontiguousarray(member_scores / self.scale_)

    def weighted_sum(
        self,
        member_scores: npt.NDArray[np.float64],
        query_offsets: npt.NDArray[np.int64],
        weights: npt.NDArray[np.float64],
    ) -> npt.NDArray[np.float64]:
        """``transform(member_scores, query_offsets) @ weights`` (n,), without building the rescaled
        copy: the per-query modes run one fused kernel (``fusion_kernels.weighted_rescaled_sum``),
        ``std_global`` folds its scales into the weights. Equal to the two-step form up to rounding."""
        w = np.ascontiguousarray(weights, dtype=np.float64)
        if w.shape != (member_scores.shape[1],):
            raise ValueError(f"weights must have shape ({member_scores.shape[1]},), got {w.shape}")
        if self.mode in ("zscore_query", "minmax_query"):
            return fk.weighted_rescaled_sum(member_scores, query_offsets, w,
                                            0 if self.mode == "zscore_query" else 1)
        if self.mode == "std_global":
            if self.scale_ is None or self.scale_.shape[0] != w.shape[0]:
                return self.transform(member_scores, query_offsets) @ w  # raises the usual errors
            w = w / self.scale_
        return np.ascontiguousarray(member_scores @ w)

    def to_params(self) -> dict[str, Any]:
        scale = np.zeros(0) if self.scale_ is None else self.scale_.copy()
        return {"rescale": self.mode, "rescale_scale": scale}

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> MemberRescaler:
        obj = cls(str(params["rescale"]))
        if obj.mode == "std_global":
            scale = np.asarray(params.get("rescale_scale", []), dtype=np.float64)
            if scale.ndim != 1 or not np.all(np.isfinite(scale)) or np.any(scale <= 0):
                raise ValueError("rescale_scale must be a 1-D array of positive finite numbers")
            obj.scale_ = scale
        return obj
