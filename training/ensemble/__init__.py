"""tunemix: training/ensemble -- mixing the calibrated members (method.md sec. 5).

``ExponentialForecaster`` (tune-and-mix eq. 22) is the method; ``OneBest``, ``Uniform``,
``ReciprocalRankFusion``, ``CombSUM``, ``CombMNZ`` and ``CondorcetFusion`` are measured
against it (``compare_mixers``). All share the mixer interface of docs/architecture.md.
"""

from training.ensemble.base import Mixer, NotFittedError
from training.ensemble.exponential_forecaster import ExponentialForecaster, mix_weights
from training.ensemble.member_rescaling import RESCALE_MODES, MemberRescaler
from training.ensemble.rank_fusion import CombMNZ, CombSUM, CondorcetFusion, ReciprocalRankFusion
from training.ensemble.registry import (
    MIXERS,
    compare_mixers,
    format_rows,
    make_mixer,
    mixer_from_params,
)
from training.ensemble.simple_mixers import OneBest, Uniform

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
