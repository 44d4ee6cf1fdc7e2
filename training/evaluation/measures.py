"""Ranking measures as small immutable values with a canonical string form.

A :class:`Measure` names *what* is computed; *how* (gain, discount, ties, edge cases) is the
business of a convention (:mod:`training.evaluation.conventions`). Canonical strings::

    ndcg@10   dcg@5   ndcg   dcg          (no cutoff: the whole list)
    err       err@20  err@10:top=2        (ERR with an explicit top label)
    p@5       map     meanndcg

``Measure.parse(s)`` and ``str(measure)`` round-trip: ``str(Measure.parse(s)) == s`` for every
canonical ``s``; non-canonical spellings (``NDCG@10``, `` err@10 : top=2``) parse to the same value.

Definitions (rank r is 1-based, l_r the label at rank r, g the convention's gain):

- DCG@k = sum_{r<=k} g(l_r) * w(r), NDCG@k = DCG@k / idealDCG@k (Järvelin and Kekäläinen 2002).
- ERR@k = sum_{r<=k} R_r / r * prod_{s<r} (1 - R_s) (Chapelle et al., CIKM 2009).
- P@k = #relevant in the top k / divisor; AP = mean over relevant ranks r of P@r; MAP is the
  mean of AP over queries.
- MeanNDCG = mean of NDCG@1..NDCG@n of a query, n its number of documents (the LETOR 4.0 and
  MSLR scripts' summary measure: every position 1..n, not only the printed cutoffs 1..10).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

MEASURE_NAMES: Final = ("ndcg", "dcg", "err", "p", "map", "meanndcg")

_PATTERN: Final = re.compile(
    r"^(?P<name>[a-z]+)(?:@(?P<cutoff>[0-9]+))?(?::top=(?P<top>[0-9]+))?$"
)


@dataclass(frozen=True, order=True)
class Measure:
    """One ranking measure: ``name`` in ndcg|dcg|err|p|map|meanndcg, optional ``cutoff``, and
    for ERR an optional explicit ``top`` label (R = (2^l - 1) / 2^top, see conventions.md).

    >>> str(Measure("ndcg", 10))
    'ndcg@10'
    >>> Measure.parse("err@10:top=2")
    Measure(name='err', cutoff=10, top=2)
    """

    name: str
    cutoff: int | None = None
    top: int | None = None

    def __post_init__(self) -> None:
        if self.name not in MEASURE_NAMES:
            raise ValueError(
                f"unknown measure name {self.name!r}; expected one of {', '.join(MEASURE_NAMES)}"
            )
        if self.cutoff is not None:
            if isinstance(self.cutoff, bool) or not isinstance(self.cutoff, int):
                raise TypeError(f"cutoff must be an int or None, got {self.cutoff!r}")
            if self.cutoff < 1:
                raise ValueError(f"cutoff must be >= 1, got {self.cutoff} in {self.name}")
            if self.name in ("map", "meanndcg"):
                raise ValueError(f"{self.name} takes no cutoff (got @{self.cutoff})")
        elif self.name == "p":
            raise ValueError("precision needs a cutoff, e.g. 'p@10'")
        if self.top is not None:
            if self.name != "err":
                raise ValueError(f"only err takes a top label (got {self.name}:top={self.top})")
            if isinstance(self.top, bool) or not isinstance(self.top, int):
                raise TypeError(f"top must be an int or None, got {self.top!r}")
            if not 1 <= self.top <= 30:
                raise ValueError(f"ERR top label must be in 1..30, got {self.top}")

    @classmethod
    def parse(cls, text: str | Measure) -> Measure:
        """Parse ``ndcg@10``, ``err@10:top=2``, ``map``... (case and spaces are ignored)."""
        if isinstance(text, Measure):
            return text
        if not isinstance(text, str):
            raise TypeError(f"a measure must be a string like 'ndcg@10', got {type(text).__name__}")
        s = "".join(text.split()).lower()
        m = _PATTERN.match(s)
        if m is None:
            raise ValueError(
                f"cannot parse measure {text!r}; expected e.g. ndcg@10, dcg@5, err, err@20, "
                "err@10:top=2, p@5, map, meanndcg"
            )
        cutoff = int(m.group("cutoff")) if m.group("cutoff") is not None else None
        top = int(m.group("top")) if m.group("top") is not None else None
        return cls(m.group("name"), cutoff, top)

    def __str__(self) -> str:
        s = self.name
        if self.cutoff is not None:
            s += f"@{self.cutoff}"
        if self.top is not None:
            s += f":top={self.top}"
        return s


def parse_measures(
    spec: str | Measure | Sequence[str | Measure],
) -> list[Measure]:
    """A comma-separated string (``"ndcg@10,err"``), one measure, or a sequence of them."""
    if isinstance(spec, Measure):
        return [spec]
    if isinstance(spec, str):
        parts = [p for p in spec.split(",") if p.strip()]
        if not parts:
            raise ValueError("no measures given; expected e.g. 'ndcg@10,err'")
        return [Measure.parse(p) for p in parts]
    out = [Measure.parse(p) for p in spec]
    if not out:
        raise ValueError("no measures given; expected e.g. ['ndcg@10', 'err']")
    return out
