"""``Prepared``: the data as every stage of training needs it (``training.pipeline.train`` makes
it, ``training.pipeline.mixing`` and the other stages read it). A module of its own, so that the
stages share the type without importing one another."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from training.data.dataset import RankingData
from training.learners.label_groups import LabelGrouping


@dataclass
class Prepared:
    """The data as every stage needs it: the sets, the fit / calibration parts of train and the
    features of both parts in every view."""

    sets: dict[str, RankingData]
    records: list[dict[str, Any]]
    n_labels: int
    groupings: dict[str, LabelGrouping]
    fit_part: RankingData
    cal_part: RankingData
    extra_views: list[str]
    view_x: dict[tuple[str, str], np.ndarray] = field(default_factory=dict)
    #: the training set once, the fit part's queries then the calibration part's: ``fit_part``,
    #: ``cal_part`` and every ``view_x`` entry of theirs are slices of it (rows of
    #: ``view_x[("train", view)]``)
    whole: RankingData | None = None

    @property
    def train(self) -> RankingData:
        return self.sets["train"]

    @property
    def vali(self) -> RankingData:
        return self.sets["vali"]

    @property
    def test(self) -> RankingData | None:
        return self.sets.get("test")
