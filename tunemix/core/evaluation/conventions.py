"""The ten evaluation conventions: each reproduces one public tool, as flags of one kernel.

Names (the rules: ``docs/conventions.md``):

========  =========================================================================
letor3    LETOR 3.0 ``Eval-Score-3.0.pl``
letor4    LETOR 4.0 ``Eval-Score-4.0.pl``
mslr      the MSLR-WEB10K/30K script (LETOR 4.0 script with a five-level gain table)
yahoo     the Yahoo! Learning to Rank Challenge ``evaluate.py`` (Chapelle and Chang 2011)
ranklib   RankLib's ``NDCGScorer``, ``DCGScorer``, ``ERRScorer``, ``PrecisionScorer``, ``APScorer``
trec      trec_eval 9.x (``ndcg_cut``, ``P``, ``map``)
lightgbm  LightGBM's ``ndcg@k`` eval metric with the default ``label_gain`` (2^l - 1)
xgboost   XGBoost's ``ndcg@k`` and ``ndcg@k-`` eval metrics (``ndcg_exp_gain`` true or false)
sklearn   scikit-learn's ``ndcg_score`` and ``dcg_score`` (``ignore_ties=False``: ties averaged)
ranx      ranx's ``ndcg@k``, ``ndcg_burges@k``, ``dcg@k``, ``dcg_burges@k``, ``map``,
          ``precision@k``
========  =========================================================================

A :class:`Convention` is an ir_measures-style *provider*: it says which measures the tool
has natively (the others are *derived*: same formula with the convention's gain and tie order,
flagged in the result), which cutoffs it supports, and it turns itself into the plain lookup
tables and integer flags that :mod:`tunemix.core.evaluation.kernels` consumes.

Every rule, every tool's quirks, the versions checked and the source lines each rule comes from:
``docs/conventions.md`` (its summary table is ``conventions_table()``, kept equal by a test).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

import numpy as np
import numpy.typing as npt

from tunemix.core.evaluation.measures import Measure

# Integer codes shared with kernels.py (the kernels stay numeric).
METRIC_CODES: Final = {"dcg": 0, "ndcg": 1, "err": 2, "p": 3, "map": 4, "meanndcg": 5}
SHORT_TRUNCATE: Final = 0  # sums stop at n ("by definition")
SHORT_NAN: Final = 1  # the query has no value at k (letor3)
SHORT_ZERO: Final = 2  # the value is 0 (letor4, mslr NDCG@k)
P_DIV_K: Final = 0  # P@k = #rel(top min(k,n)) / k (missing ranks irrelevant)
P_DIV_MIN: Final = 1  # P@k = #rel(top min(k,n)) / min(k, n) (ranklib)
P_NAN: Final = 2  # P@k has no value when n < k (letor3)

GainKind = Literal["table", "exponential", "linear"]
DiscountKind = Literal["letor", "log2"]
TieRule = Literal["stable", "trec", "quicksort"]
ShortRule = Literal["truncate", "nan", "zero"]
PRule = Literal["k", "min", "nan"]

_LETOR_TABLE: Final = (0.0, 1.0, 3.0)
_MSLR_TABLE: Final = (0.0, 1.0, 3.0, 7.0, 15.0)


@dataclass(frozen=True)
class Convention:
    """One tool's rules (see the module docstring and docs/conventions.md)."""

    name: str
    tool: str
    gain_kind: GainKind
    gain_table: tuple[float, ...] | None
    discount: DiscountKind
    ideal_rule: str
    empty_ndcg: float
    short_list: ShortRule
    p_rule: PRule
    max_cutoff: int | None
    tie_rule: TieRule
    relevant_min: int
    relevant_max: int | None
    meaningful_max_label: int | None
    err_top: int
    err_yahoo_rule: bool
    err_native: Literal["none", "whole", "cutoff"]
    native: frozenset[str]
    nan_counts_zero: bool = True
    #: scores are rounded to float32 before ranking (trec_eval and XGBoost store C floats)
    float32_scores: bool = False
    #: every rank takes the mean gain (relevance, ERR probability) of its tie group (sklearn)
    average_ties: bool = False
    #: gains other than the convention's own that the tool offers natively ("exp", "linear")
    native_gains: frozenset[str] = frozenset()
    #: values of NDCG on a query without relevant documents the tool offers besides empty_ndcg
    native_empty: frozenset[int] = frozenset()
    #: labels above this make the tool refuse NDCG/DCG with the exponential gain (None: no limit)
    exp_label_limit: int | None = None
    #: the cut-off the tool applies to NDCG asked for without one (XGBoost: 32), None: the whole list
    uncut_ndcg_cutoff: int | None = None
    #: whether the tool has NDCG without a cut-off at all (LightGBM has not: ours is an extension)
    has_uncut_ndcg: bool = True
    #: why the tool cannot evaluate a run that leaves judged documents out; None: it counts them
    #: as unretrieved (in the ideal DCG and AP's divisor, at no rank): trec_eval and ranx
    truncated_refusal: str | None = None

    def ndcg_cutoff(self, measure: Measure) -> int | None:
        """The cut-off the kernels apply to ``measure`` (``uncut_ndcg_cutoff`` for an uncut NDCG)."""
        if measure.name == "ndcg" and measure.cutoff is None:
            return self.uncut_ndcg_cutoff
        return measure.cutoff

    def extension_note(self, measure: Measure) -> str | None:
        """A warning when ``measure`` is our extension of the tool rather than something it has."""
        if measure.name == "ndcg" and measure.cutoff is None and not self.has_uncut_ndcg:
            return (f"{self.name}: {self.tool} has no NDCG without a cut-off (ndcg_eval_at defaults to 1..5); "
                    f"'{measure}' is our extension: the whole list under its rules (flagged derived)")
        return None

    # ----------------------------------------------------------------- tables
    def gain_values(self, max_label: int) -> npt.NDArray[np.float64]:
        """g(l) for l = 0..max_label (float64)."""
        labels = np.arange(max_label + 1, dtype=np.float64)
        if self.gain_kind == "table":
            table = self.gain_table or ()
            out = np.zeros(max_label + 1, dtype=np.float64)
            m = min(len(table), max_label + 1)
            out[:m] = table[:m]
            return out
        if self.gain_kind == "exponential":
            return np.exp2(labels) - 1.0
        return labels

    def measure_gain_kind(self, measure: Measure) -> GainKind:
        """The gain a measure uses here: its own ``gain`` variant, else the convention's."""
        if measure.gain == "exp":
            return "exponential"
        if measure.gain == "linear":
            return "linear"
        return self.gain_kind

    def measure_gain_values(self, max_label: int, measure: Measure) -> npt.NDArray[np.float64]:
        """g(l) for l = 0..max_label under the measure's gain variant (see measure_gain_kind)."""
        kind = self.measure_gain_kind(measure)
        if kind == self.gain_kind:
            return self.gain_values(max_label)
        labels = np.arange(max_label + 1, dtype=np.float64)
        return np.exp2(labels) - 1.0 if kind == "exponential" else labels

    def measure_empty_value(self, measure: Measure) -> float:
        """NDCG of a query whose ideal DCG is 0: the measure's ``empty`` variant, else the rule."""
        return float(measure.empty) if measure.empty is not None else self.empty_ndcg

    def tie_code(self) -> int:
        """The kernels' ``tie_mode`` (kernels.TIE_STABLE / TIE_DOCID / TIE_QUICKSORT)."""
        return {"stable": 0, "trec": 1, "quicksort": 2}[self.tie_rule]

    def discount_values(self, n: int) -> npt.NDArray[np.float64]:
        """Weight of rank r = 1..n at index r - 1."""
        r = np.arange(1, n + 1, dtype=np.float64)
        if self.discount == "letor":
            # The LETOR scripts: log(2.0) / log(iPos + 1.0) for 0-based iPos >= 2.
            w = np.ones(n, dtype=np.float64)
            w[2:] = np.log(2.0) / np.log(r[2:])
            return w
        return 1.0 / np.log2(r + 1.0)

    def relevant_values(self, max_label: int) -> npt.NDArray[np.int8]:
        """1 where a label counts as relevant for P@k and MAP, else 0."""
        labels = np.arange(max_label + 1)
        rel = labels >= self.relevant_min
        if self.relevant_max is not None:
            rel &= labels <= self.relevant_max
        return rel.astype(np.int8)

    def err_values(self, max_label: int, top: int | None) -> npt.NDArray[np.float64]:
        """The ERR stopping probability R(l) for l = 0..max_label.

        Default (``top`` None): yahoo/ranklib R = (2^l - 1)/16; other conventions
        R = g(l)/g(top label of the convention). Explicit ``top`` = t:
        R = g_exp(l)/2^t with g_exp the LETOR/MSLR table (2^l - 1 on its range, 0 beyond) or
        2^l - 1 for the other conventions.
        """
        labels = np.arange(max_label + 1, dtype=np.float64)
        if top is not None:
            if self.gain_kind == "table":
                g = self.gain_values(max_label)
            else:
                g = np.exp2(labels) - 1.0
            return g / float(2**top)
        if self.err_yahoo_rule:
            return (np.exp2(labels) - 1.0) / 16.0
        g = self.gain_values(max_label)
        g_top = float(self.gain_values(self.err_top)[self.err_top])
        return g / g_top

    # --------------------------------------------------------------- provider
    def is_native(self, measure: Measure) -> bool:
        """Whether the tool itself reports this measure (else the value is *derived*)."""
        name = measure.name
        if name == "err":
            if measure.top is not None and not (self.err_yahoo_rule and measure.top == 4):
                return False
            if self.err_native == "whole":
                return measure.cutoff is None
            return self.err_native == "cutoff"
        if measure.gain is not None:
            own = {"exponential": "exp", "linear": "linear"}.get(self.gain_kind)
            if measure.gain != own and measure.gain not in self.native_gains:
                return False
        if measure.empty is not None and not (
            float(measure.empty) == self.empty_ndcg or measure.empty in self.native_empty
        ):
            return False
        if name == "ndcg" and measure.cutoff is None:
            return self.max_cutoff is None and self.has_uncut_ndcg and name in self.native
        return name in self.native

    def unsupported_reason(self, measure: Measure) -> str | None:
        """Why the tool cannot report this measure at this cutoff, or None when it can."""
        if (
            self.max_cutoff is not None
            and measure.name in ("ndcg", "p")
            and measure.cutoff is not None
            and measure.cutoff > self.max_cutoff
        ):
            return (
                f"{self.name} ({self.tool}) reports {measure.name} only at cutoffs "
                f"1..{self.max_cutoff}; got {measure}"
            )
        return None

    def short_code(self) -> int:
        return {"truncate": SHORT_TRUNCATE, "nan": SHORT_NAN, "zero": SHORT_ZERO}[self.short_list]

    def p_code(self) -> int:
        return {"k": P_DIV_K, "min": P_DIV_MIN, "nan": P_NAN}[self.p_rule]

    def label_warning(self, max_label: int, n_above: int) -> str | None:
        """A warning for labels the convention ignores (gain 0 / not relevant), or None."""
        top = self.meaningful_max_label
        if top is None or max_label <= top or n_above == 0:
            return None
        return (
            f"{self.name}: {n_above} document(s) have labels above {top} (max {max_label}); "
            f"{self.tool} counts them as gain 0 and not relevant"
        )


_LETOR_NATIVE: Final = frozenset({"ndcg", "p", "map"})

CONVENTIONS: Final[dict[str, Convention]] = {
    "letor3": Convention(
        name="letor3",
        tool="LETOR 3.0 Eval-Score-3.0.pl",
        gain_kind="table",
        gain_table=_LETOR_TABLE,
        discount="letor",
        ideal_rule="gains of all n labels sorted descending, top k",
        empty_ndcg=0.0,
        short_list="nan",
        p_rule="nan",
        max_cutoff=16,
        tie_rule="stable",
        relevant_min=1,
        relevant_max=2,
        meaningful_max_label=2,
        err_top=2,
        err_yahoo_rule=False,
        err_native="none",
        native=_LETOR_NATIVE,
        truncated_refusal=(
            "LETOR 3.0 Eval-Score-3.0.pl pairs one prediction with each line of the judged feature file: "
            "every judged document is ranked"
        ),
    ),
    "letor4": Convention(
        name="letor4",
        tool="LETOR 4.0 Eval-Score-4.0.pl",
        gain_kind="table",
        gain_table=_LETOR_TABLE,
        discount="letor",
        ideal_rule="gains of all n labels sorted descending, top k",
        empty_ndcg=0.0,
        short_list="zero",
        p_rule="k",
        max_cutoff=10,
        tie_rule="stable",
        relevant_min=1,
        relevant_max=2,
        meaningful_max_label=2,
        err_top=2,
        err_yahoo_rule=False,
        err_native="none",
        native=_LETOR_NATIVE | {"meanndcg"},
        truncated_refusal=(
            "LETOR 4.0 Eval-Score-4.0.pl pairs one prediction with each line of the judged feature file: "
            "every judged document is ranked"
        ),
    ),
    "mslr": Convention(
        name="mslr",
        tool="MSLR-WEB Eval-Score (LETOR 4.0 script, 5-level table)",
        gain_kind="table",
        gain_table=_MSLR_TABLE,
        discount="letor",
        ideal_rule="gains of all n labels sorted descending, top k",
        empty_ndcg=0.0,
        short_list="zero",
        p_rule="k",
        max_cutoff=10,
        tie_rule="stable",
        relevant_min=2,
        relevant_max=4,
        meaningful_max_label=4,
        err_top=4,
        err_yahoo_rule=False,
        err_native="none",
        native=_LETOR_NATIVE | {"meanndcg"},
        truncated_refusal=(
            "the MSLR script pairs one prediction with each line of the judged feature file: every judged "
            "document is ranked"
        ),
    ),
    "yahoo": Convention(
        name="yahoo",
        tool="Yahoo! LTR Challenge evaluate.py",
        gain_kind="exponential",
        gain_table=None,
        discount="log2",
        ideal_rule="all n labels, top k",
        empty_ndcg=1.0,
        short_list="truncate",
        p_rule="k",
        max_cutoff=None,
        tie_rule="stable",
        relevant_min=1,
        relevant_max=None,
        meaningful_max_label=None,
        err_top=4,
        err_yahoo_rule=True,
        err_native="whole",
        native=frozenset({"ndcg", "err"}),
        truncated_refusal=(
            "the Yahoo! LTR Challenge evaluate.py takes one rank for every document of the judged test file"
        ),
    ),
    "ranklib": Convention(
        name="ranklib",
        tool="RankLib",
        gain_kind="exponential",
        gain_table=None,
        discount="log2",
        ideal_rule="all n labels, top min(k, n)",
        empty_ndcg=0.0,
        short_list="truncate",
        p_rule="min",
        max_cutoff=None,
        tie_rule="stable",
        relevant_min=1,
        relevant_max=None,
        meaningful_max_label=None,
        err_top=4,
        err_yahoo_rule=True,
        err_native="cutoff",
        native=frozenset({"ndcg", "dcg", "err", "p", "map"}),
        truncated_refusal=(
            "RankLib scores the documents of its test file, each with its own label, and evaluates those "
            "(its optional -qrel file, an external ideal DCG, is a variant this convention does not "
            "reproduce)"
        ),
    ),
    "trec": Convention(
        name="trec",
        tool="trec_eval 9",
        gain_kind="linear",
        gain_table=None,
        discount="log2",
        ideal_rule="all judged labels of the query, top k",
        empty_ndcg=0.0,
        short_list="truncate",
        p_rule="k",
        max_cutoff=None,
        tie_rule="trec",
        relevant_min=1,
        relevant_max=None,
        meaningful_max_label=None,
        err_top=4,
        err_yahoo_rule=False,
        err_native="none",
        native=frozenset({"ndcg", "p", "map"}),
        float32_scores=True,
    ),
    "lightgbm": Convention(
        name="lightgbm",
        tool="LightGBM ndcg@k eval metric",
        gain_kind="exponential",
        gain_table=None,
        discount="log2",
        ideal_rule="all n labels, top min(k, n)",
        empty_ndcg=1.0,
        short_list="truncate",
        p_rule="k",
        max_cutoff=None,
        tie_rule="stable",
        relevant_min=1,
        relevant_max=None,
        meaningful_max_label=None,
        err_top=4,
        err_yahoo_rule=True,
        err_native="none",
        native=frozenset({"ndcg"}),
        exp_label_limit=30,
        has_uncut_ndcg=False,
        truncated_refusal=(
            "LightGBM's ndcg@k evaluates a data set in which every document has a label and a prediction"
        ),
    ),
    "xgboost": Convention(
        name="xgboost",
        tool="XGBoost ndcg@k eval metric",
        gain_kind="exponential",
        gain_table=None,
        discount="log2",
        ideal_rule="all n labels, top min(k, n)",
        empty_ndcg=1.0,
        short_list="truncate",
        p_rule="k",
        max_cutoff=None,
        tie_rule="stable",
        relevant_min=1,
        relevant_max=None,
        meaningful_max_label=None,
        err_top=4,
        err_yahoo_rule=True,
        err_native="none",
        native=frozenset({"ndcg"}),
        float32_scores=True,
        native_gains=frozenset({"linear"}),
        native_empty=frozenset({0}),
        exp_label_limit=31,
        uncut_ndcg_cutoff=32,
        truncated_refusal=(
            "XGBoost's ndcg@k evaluates a data set in which every document has a label and a prediction"
        ),
    ),
    "sklearn": Convention(
        name="sklearn",
        tool="scikit-learn ndcg_score / dcg_score",
        gain_kind="linear",
        gain_table=None,
        discount="log2",
        ideal_rule="all n labels, top min(k, n)",
        empty_ndcg=0.0,
        short_list="truncate",
        p_rule="k",
        max_cutoff=None,
        tie_rule="stable",
        relevant_min=1,
        relevant_max=None,
        meaningful_max_label=None,
        err_top=4,
        err_yahoo_rule=False,
        err_native="none",
        native=frozenset({"ndcg", "dcg"}),
        average_ties=True,
        truncated_refusal=(
            "scikit-learn's ndcg_score and dcg_score take y_true and y_score of the same shape: a score for "
            "every judged document"
        ),
    ),
    "ranx": Convention(
        name="ranx",
        tool="ranx",
        gain_kind="linear",
        gain_table=None,
        discount="log2",
        ideal_rule="relevant labels (>= 1), top min(k, #relevant)",
        empty_ndcg=0.0,
        short_list="truncate",
        p_rule="k",
        max_cutoff=None,
        tie_rule="quicksort",
        relevant_min=1,
        relevant_max=None,
        meaningful_max_label=None,
        err_top=4,
        err_yahoo_rule=False,
        err_native="none",
        native=frozenset({"ndcg", "dcg", "p", "map"}),
        native_gains=frozenset({"exp"}),
    ),
}

CONVENTION_NAMES: Final = tuple(CONVENTIONS)


def get_convention(name: str | Convention) -> Convention:
    """Look a convention up by name; ValueError listing the valid names otherwise."""
    if isinstance(name, Convention):
        return name
    if not isinstance(name, str):
        raise TypeError(f"convention must be a name such as 'yahoo', got {type(name).__name__}")
    conv = CONVENTIONS.get(name.strip().lower())
    if conv is None:
        raise ValueError(
            f"unknown convention {name!r}; expected one of {', '.join(CONVENTION_NAMES)}"
        )
    return conv


def conventions_table() -> str:
    """The rules of every convention as a Markdown table (docs/conventions.md holds a copy that a
    test compares with this, so the page cannot drift from the code)."""
    gains = {"table": "table", "exponential": "2^l - 1", "linear": "l"}
    head = ("| convention | tool | gain | weight of rank r | ideal DCG | NDCG, no relevant | n < k | "
            "uncut NDCG | P@k divides by | cut-offs | ties | float32 scores | native measures | truncated run |")
    rows = [head, "|" + "---|" * head.count(" | ") + "---|"]
    for c in CONVENTIONS.values():
        gain = gains[c.gain_kind] + (f" {c.gain_table}" if c.gain_table else "")
        weight = "1, 1, then 1/log2(r)" if c.discount == "letor" else "1/log2(r + 1)"
        uncut = ("the whole list" if c.uncut_ndcg_cutoff is None else f"@{c.uncut_ndcg_cutoff}") + (
            "" if c.has_uncut_ndcg and c.max_cutoff is None else " (derived: the tool has none)")
        p_div = {"k": "k", "min": "min(k, n)", "nan": "k (no value when n < k)"}[c.p_rule]
        ties = {"stable": "input order", "trec": "docid, descending strcmp", "quicksort": "numba quicksort"}[
            c.tie_rule] + (", averaged" if c.average_ties else "")
        short = {"nan": "no value (the mean adds 0)", "zero": "0", "truncate": "sums stop at n"}[c.short_list]
        rows.append(f"| {c.name} | {c.tool} | {gain} | {weight} | {c.ideal_rule} | {c.empty_ndcg:g} | "
                    f"{short} | {uncut} | {p_div} | {'1..' + str(c.max_cutoff) if c.max_cutoff else 'any'} | "
                    f"{ties} | {'yes' if c.float32_scores else 'no'} | {', '.join(sorted(c.native))} | "
                    f"{'refused' if c.truncated_refusal else 'the rest unretrieved'} |")
    return "\n".join(rows) + "\n"
