"""Mixing the calibrated members (method.md sec. 5).

``ExponentialForecaster`` (tune-and-mix eq. 22) is the method; ``OneBest``, ``Uniform``,
``ReciprocalRankFusion``, ``CombSUM``, ``CombMNZ`` and ``CondorcetFusion`` are measured
against it (``compare_mixers``). All share the mixer interface of docs/architecture.md.
"""

from tunemix.core.ensemble.base import Mixer, NotFittedError
from tunemix.core.ensemble.exponential_forecaster import ExponentialForecaster, mix_weights
from tunemix.core.ensemble.member_rescaling import RESCALE_MODES, MemberRescaler
from tunemix.core.ensemble.rank_fusion import CombMNZ, CombSUM, CondorcetFusion, ReciprocalRankFusion
from tunemix.core.ensemble.registry import (
    MIXERS,
    compare_mixers,
    format_rows,
    make_mixer,
    mixer_from_params,
)
from tunemix.core.ensemble.simple_mixers import OneBest, Uniform

__all__ = [
    "MIXERS",
    "RESCALE_MODES",
    "CombMNZ",
    "CombSUM",
    "CondorcetFusion",
    "ExponentialForecaster",
    "MemberRescaler",
    "Mixer",
    "NotFittedError",
    "OneBest",
    "ReciprocalRankFusion",
    "Uniform",
    "compare_mixers",
    "format_rows",
    "make_mixer",
    "mix_weights",
    "mixer_from_params",
]
