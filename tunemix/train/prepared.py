"""``Prepared``: the data as every stage of training needs it (``tunemix.train.train`` makes
it, ``tunemix.train.mixing`` and the other stages read it). A module of its own, so that the
stages share the type without importing one another."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tunemix.core.data.dataset import RankingData
from tunemix.train.data.binned import BinnedView
from tunemix.train.learners.label_groups import LabelGrouping


@dataclass
class Prepared:
    """The data as every stage needs it: the sets, the fit / calibration parts of train, the
    float features of the views that are read as floats (``view_x``: the calibration part of
    every view; the fit part and the whole training set only for runs that do not read codes)
    and the shared codes (``binned``)."""

    sets: dict[str, RankingData]
    records: list[dict[str, Any]]
    n_labels: int
    groupings: dict[str, LabelGrouping]
    fit_part: RankingData
    cal_part: RankingData
    extra_views: list[str]
    view_x: dict[tuple[str, str], np.ndarray] = field(default_factory=dict)
    #: the training set once, the fit part's queries first, then the calibration part's: ``fit_part``
    #: is a slice of it. Its features are a float copy only when some run reads floats (then
    #: ``cal_part`` and every ``view_x`` entry are slices of it); otherwise it has no feature columns
    #: (labels and offsets) and ``cal_part`` is a copy of the calibration queries alone
    whole: RankingData | None = None
    #: the training set's queries in the fit part, in its order
    fit_queries: np.ndarray | None = None
    #: the shared codes (``tunemix.train.data.binned``) of every view a code-reading run trains on:
    #: ``("train", view)`` (the whole training set, ``whole``'s order), ``("fit", view)`` (its first
    #: ``fit_part.n_docs`` documents) and ``("vali", view)`` (under the training codes' bins)
    binned: dict[tuple[str, str], BinnedView] = field(default_factory=dict)

    @property
    def train(self) -> RankingData:
        return self.sets["train"]

    @property
    def vali(self) -> RankingData:
        return self.sets["vali"]

    @property
    def test(self) -> RankingData | None:
        return self.sets.get("test")
