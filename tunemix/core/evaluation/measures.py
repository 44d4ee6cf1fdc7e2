"""Ranking measures as small immutable values with a canonical string form.

A :class:`Measure` names *what* is computed; *how* (gain, discount, ties, edge cases) is the
business of a convention (:mod:`tunemix.core.evaluation.conventions`). Canonical strings::

    ndcg@10   dcg@5   ndcg   dcg          (no cutoff: the whole list)
    err       err@20  err@10:top=2        (ERR with an explicit top label)
    p@5       map     meanndcg
    ndcg@10:gain=exp  dcg@5:gain=linear   (a gain other than the convention's own)
    ndcg@10:empty=0                       (the value of a query without relevant documents)

``Measure.parse(s)`` and ``str(measure)`` round-trip: ``str(Measure.parse(s)) == s`` for every
canonical ``s``; non-canonical spellings (``NDCG@10``, `` err@10 : top=2``) parse to the same value.
The tools' own names for two variants are accepted too: ``ndcg_burges@10`` / ``dcg_burges@10``
(ranx: gain 2^l - 1) parse to ``ndcg@10:gain=exp`` / ``dcg@10:gain=exp``, and ``ndcg@10-``
(XGBoost: a query without relevant documents scores 0) to ``ndcg@10:empty=0``.

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

GAIN_NAMES: Final = ("exp", "linear")

_PATTERN: Final = re.compile(
    r"^(?P<name>[a-z_]+)(?:@(?P<cutoff>[0-9]+))?(?P<minus>-)?(?::gain=(?P<gain>[a-z]+))?"
    r"(?::empty=(?P<empty>[0-9]+))?(?::top=(?P<top>[0-9]+))?$"
)
#: digits of a measure's integer (cutoff, top, empty) at most (its range is checked after): well
#: within Python's ``int``, which refuses a text of more than 4,300 digits with a message of its own
MAX_DIGITS: Final = 100
# The tools' own spellings of the exponential-gain variants (ranx's ndcg_burges, dcg_burges).
_ALIASES: Final = {"ndcg_burges": ("ndcg", "exp"), "dcg_burges": ("dcg", "exp")}


@dataclass(frozen=True, order=True)
class Measure:
    """One ranking measure: ``name`` in ndcg|dcg|err|p|map|meanndcg, optional ``cutoff``, and
    for ERR an optional explicit ``top`` label (R = (2^l - 1) / 2^top, see conventions.md).

    For ndcg, dcg and meanndcg, ``gain`` ("exp": 2^l - 1, "linear": l) replaces the
    convention's gain, and (ndcg, meanndcg) ``empty`` (0 or 1) the value of a query whose ideal
    DCG is 0; None keeps the convention's own rule. A tool that offers the variant reports it
    natively (ranx ``ndcg_burges``, XGBoost ``ndcg@k-`` and ``ndcg_exp_gain=false``); under
    the other conventions the value is *derived*.

    >>> str(Measure("ndcg", 10))
    'ndcg@10'
    >>> Measure.parse("err@10:top=2")
    Measure(name='err', cutoff=10, top=2)
    """

    name: str
    cutoff: int | None = None
    top: int | None = None
    gain: str | None = None
    empty: int | None = None

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
        if self.gain is not None:
            if self.name not in ("ndcg", "dcg", "meanndcg"):
                raise ValueError(f"only ndcg, dcg and meanndcg take a gain (got {self.name}:gain={self.gain})")
            if self.gain not in GAIN_NAMES:
                raise ValueError(f"gain must be one of {', '.join(GAIN_NAMES)}, got {self.gain!r}")
        if self.empty is not None:
            if self.name not in ("ndcg", "meanndcg"):
                raise ValueError(f"only ndcg and meanndcg take an empty-query value (got {self.name}:empty=...)")
            if isinstance(self.empty, bool) or self.empty not in (0, 1):
                raise ValueError(f"empty must be 0 or 1, got {self.empty!r}")

    @classmethod
    def parse(cls, text: str | Measure) -> Measure:
        """Parse ``ndcg@10``, ``err@10:top=2``, ``ndcg@10:gain=exp``, ``map``... (case and spaces
        are ignored; ``ndcg_burges@10`` and ``ndcg@10-`` are accepted, see the module docstring)."""
        if isinstance(text, Measure):
            return text
        if not isinstance(text, str):
            raise TypeError(f"a measure must be a string like 'ndcg@10', got {type(text).__name__}")
        s = "".join(text.split()).lower()
        m = _PATTERN.match(s)
        if m is None:
            raise ValueError(
                f"cannot parse measure {text!r}; expected e.g. ndcg@10, dcg@5, err, err@20, "
                "err@10:top=2, p@5, map, meanndcg, ndcg@10:gain=exp, ndcg@10:empty=0"
            )
        name = m.group("name")
        gain = m.group("gain")
        if name in _ALIASES:
            if gain is not None:
                raise ValueError(f"cannot parse measure {text!r}: {name} already sets the gain")
            name, gain = _ALIASES[name]
        for part in ("cutoff", "top", "empty"):
            digits = m.group(part)
            if digits is not None and len(digits) > MAX_DIGITS:
                raise ValueError(f"cannot parse measure {text[:40]!r}{'...' if len(text) > 40 else ''}: its {part} "
                                 f"has {len(digits)} digits; at most {MAX_DIGITS}")
        cutoff = int(m.group("cutoff")) if m.group("cutoff") is not None else None
        top = int(m.group("top")) if m.group("top") is not None else None
        empty = int(m.group("empty")) if m.group("empty") is not None else None
        if m.group("minus"):
            if empty is not None:
                raise ValueError(f"cannot parse measure {text!r}: give either '-' or ':empty='")
            empty = 0
        return cls(name, cutoff, top, gain, empty)

    def __str__(self) -> str:
        s = self.name
        if self.cutoff is not None:
            s += f"@{self.cutoff}"
        if self.gain is not None:
            s += f":gain={self.gain}"
        if self.empty is not None:
            s += f":empty={self.empty}"
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
