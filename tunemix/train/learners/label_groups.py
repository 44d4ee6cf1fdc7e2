"""Label groupings: train a multi-class member on contiguous groups of relevance labels.

Method page section 2 ("Label groupings"); Busa-Fekete, Kégl, Éltető, Szarvas, "Ranking by
calibrated AdaBoost" (Yahoo! LTR Challenge 2010): grouping labels adds diversity to the
ensemble. A grouping partitions 0..K-1 into contiguous groups; class c is the c-th group.

Standard groupings::

    K = 5: original {0}{1}{2}{3}{4}   binary {0}{1,2,3,4}   three-a {0}{1,2}{3,4}
           three-b {0}{1,2,3}{4}      four {0}{1,2}{3}{4}
    K = 3: original {0}{1}{2}         binary {0}{1,2}

A grouped class's gain is the training-frequency-weighted mean of ``z(l) = 2^l - 1`` over its
labels: ``z(c) = sum_{l in c} n_l z(l) / sum_{l in c} n_l`` (the plain mean when none of its
labels occurs in training). Example: binary grouping of K = 3 with label counts (10, 6, 2):
class 1 has gain (6 * 1 + 2 * 3) / 8 = 1.5.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt


def label_gain(labels: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """``z(l) = 2^l - 1``."""
    return np.exp2(np.asarray(labels, dtype=np.float64)) - 1.0


@dataclass(frozen=True)
class LabelGrouping:
    """Contiguous groups of labels 0..n_labels-1, e.g. ``((0,), (1, 2))``."""

    name: str
    groups: tuple[tuple[int, ...], ...]

    def __post_init__(self) -> None:
        flat = [lab for g in self.groups for lab in g]
        if not self.groups or any(len(g) == 0 for g in self.groups):
            raise ValueError(f"grouping {self.name!r}: groups must be non-empty")
        if flat != list(range(len(flat))):
            raise ValueError(f"grouping {self.name!r}: groups must be contiguous and cover "
                             f"0..{len(flat) - 1} in order, got {self.groups}")

    @classmethod
    def from_groups(cls, groups: Sequence[Sequence[int]], name: str = "custom") -> LabelGrouping:
        return cls(name=name, groups=tuple(tuple(int(x) for x in g) for g in groups))

    @property
    def n_labels(self) -> int:
        return sum(len(g) for g in self.groups)

    @property
    def n_classes(self) -> int:
        return len(self.groups)

    @property
    def mapping(self) -> npt.NDArray[np.int32]:
        """``mapping[label] = class``."""
        return np.array([c for c, g in enumerate(self.groups) for _ in g], dtype=np.int32)

    def apply(self, labels: npt.ArrayLike) -> npt.NDArray[np.int32]:
        """Map labels to classes; raise ValueError for labels outside 0..n_labels-1."""
        lab = np.asarray(labels)
        if lab.size and (lab.min() < 0 or lab.max() >= self.n_labels):
            raise ValueError(f"grouping {self.name!r} covers labels 0..{self.n_labels - 1}, "
                             f"found labels {int(lab.min())}..{int(lab.max())}")
        return self.mapping[lab.astype(np.int64)]

    def class_gains(self, labels: npt.ArrayLike) -> npt.NDArray[np.float64]:
        """Training-frequency-weighted mean of ``2^l - 1`` over each group's labels."""
        lab = np.asarray(labels, dtype=np.int64)
        counts = np.bincount(lab, minlength=self.n_labels)[: self.n_labels].astype(np.float64)
        out = np.empty(self.n_classes)
        for c, g in enumerate(self.groups):
            z = label_gain(list(g))
            n = counts[list(g)]
            out[c] = float(np.dot(n, z) / n.sum()) if n.sum() > 0 else float(z.mean())
        return out


def _g(name: str, *groups: tuple[int, ...]) -> LabelGrouping:
    return LabelGrouping(name=name, groups=tuple(groups))


STANDARD_GROUPINGS: dict[int, dict[str, LabelGrouping]] = {
    5: {
        "original": _g("original", (0,), (1,), (2,), (3,), (4,)),
        "binary": _g("binary", (0,), (1, 2, 3, 4)),
        "three-a": _g("three-a", (0,), (1, 2), (3, 4)),
        "three-b": _g("three-b", (0,), (1, 2, 3), (4,)),
        "four": _g("four", (0,), (1, 2), (3,), (4,)),
    },
    3: {
        "original": _g("original", (0,), (1,), (2,)),
        "binary": _g("binary", (0,), (1, 2)),
    },
}


def groupings_for(names: list[str], n_labels: int) -> list[str]:
    """``names`` with ``"all"`` expanded to every standard grouping of ``n_labels`` labels (the
    method's five for five levels, original and binary for three; original alone otherwise),
    duplicates removed, order kept."""
    out: list[str] = []
    for name in names:
        out += list(STANDARD_GROUPINGS.get(n_labels, {"original": None})) if name == "all" else [name]
    return list(dict.fromkeys(out))


def identity_grouping(n_labels: int) -> LabelGrouping:
    """One class per label."""
    return LabelGrouping(name="original", groups=tuple((i,) for i in range(n_labels)))


def get_grouping(name: str, n_labels: int) -> LabelGrouping:
    """A standard grouping by name for ``n_labels`` (5 or 3); "original" works for any count."""
    if name == "original":
        return identity_grouping(n_labels)
    table = STANDARD_GROUPINGS.get(n_labels)
    if table is None or name not in table:
        known = sorted(table) if table else ["original"]
        raise ValueError(f"no label grouping {name!r} for {n_labels} labels; known: {known}")
    return table[name]
