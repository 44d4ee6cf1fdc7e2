"""Why a document scores what it scores: contributions of its features to the served score.

Imports numpy code only (the service uses it). For document i of a posted list and a reference
document r (by default the list's per-feature median; ``"mean"`` or any (d,) array may be given)::

    score_i = baseline + sum_f contributions[f]

Two methods (``method=``):

- ``"exact"`` (the default): deterministic, no sampling, no seed
  (``tunemix.core.explain.exact_explanation``): one-reference TreeSHAP per member propagated exactly
  through the views (their statistics as posted), calibrators and the mix (generalized
  DeepSHAP, Chen, Lundberg and Lee 2022). The baseline is the score the reference document
  would get in the explained document's place; with the default reference it depends on the
  list alone and is reported as **the rest of the list**. Two documents' baselines differ only
  through the mix's per-query rescaling; a pair reports that difference as the rest of the list.
- ``"shapley"``: the Shapley values of the whole model's game, the list's statistics recomputed
  for every hybrid list (``tunemix.core.explain.whole_model_shapley``): enumerated when it fits
  ``budget``, else estimated by permutation sampling (``seed``); kept for audits. There too the
  baselines of two documents differ through the query-wise parts of the model, and a pair
  explanation reports that difference as the rest of the list.

A model whose mixer is not linear in the member scores (rank fusion) is explained by
``"shapley"`` whatever is asked (``Explanation.method`` says which was used).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from tunemix.core.artifact import ArtifactError
from tunemix.core.data.dataset import validate_offsets
from tunemix.core.deadline import check_deadline
from tunemix.core.explain import exact_explanation, whole_model_shapley
from tunemix.core.explain.whole_model_shapley import DEFAULT_BUDGET, EXACT_MAX_FEATURES
from tunemix.core.scoring.ensemble_model import EnsembleModel, ScoringPass
from tunemix.core.threads import one_blas_thread

__all__ = ["DEFAULT_BUDGET", "EXACT_MAX_FEATURES", "METHODS", "REFERENCES", "REST_OF_LIST", "Explanation",
           "PairExplanation", "default_feature_names", "explain_pair", "explain_rows", "manifest_feature_names",
           "reference_row"]

REFERENCES = ("median", "mean")
METHODS = ("exact", "shapley")
#: what a report calls the part of a score the list sets (the baseline; a pair's baseline difference)
REST_OF_LIST = "the rest of the list"

def default_feature_names(d: int) -> list[str]:
    """``f1 .. fd``: the names of LETOR columns (feature 1 is the first column)."""
    return [f"f{j + 1}" for j in range(d)]


def manifest_feature_names(manifest: dict[str, Any], d: int) -> tuple[str, ...]:
    """The manifest's ``feature_names`` (d distinct strings), or f1 .. fd for a manifest without
    them; ArtifactError when they are malformed."""
    names = manifest.get("feature_names")
    if names is None:
        return tuple(default_feature_names(d))
    if (not isinstance(names, list) or len(names) != d or not all(isinstance(v, str) and v for v in names)
            or len(set(names)) != d):
        raise ArtifactError(f"the manifest's feature_names must be {d} distinct non-empty strings")
    return tuple(names)


@dataclass(frozen=True)
class Explanation:
    """Explanations of some rows of a feature matrix (all arrays have one entry per explained row).

    ``baseline[k] + contributions[k].sum() == scores[k]`` (to float rounding). ``baseline[k]`` is
    the score of the reference document in row k's place (the rest of the list). ``exact[k]`` says
    whether row k's values are exact (always with ``method == "exact"``); otherwise
    ``standard_error[k]`` holds the sampling standard error of each contribution."""

    rows: npt.NDArray[np.int64]
    scores: npt.NDArray[np.float64]
    baseline: npt.NDArray[np.float64]
    contributions: npt.NDArray[np.float64]
    standard_error: npt.NDArray[np.float64]
    exact: npt.NDArray[np.bool_]
    n_relevant: npt.NDArray[np.int64]
    n_permutations: npt.NDArray[np.int64]
    reference: npt.NDArray[np.float32]
    feature_names: tuple[str, ...] = field(default=())
    method: str = "exact"

    def top(self, k: int, n: int) -> list[tuple[str, float]]:
        """Explained row k's n largest non-zero contributions by absolute value, as (name, contribution)."""
        c = self.contributions[k]
        order = [j for j in np.argsort(-np.abs(c), kind="stable")[:n] if c[j] != 0.0]
        return [(self.feature_names[j], float(c[j])) for j in order]


@dataclass(frozen=True)
class PairExplanation:
    """Why row a scores above (or below) row b of the same query:
    ``score_a - score_b == rest_of_list + contributions.sum()``. ``rest_of_list`` (also
    ``baseline``) is baseline_a - baseline_b: what the other documents do to a's score against
    b's, through the query-wise parts of the model (0 without them)."""

    a: int
    b: int
    score_a: float
    score_b: float
    baseline: float
    contributions: npt.NDArray[np.float64]
    standard_error: npt.NDArray[np.float64]
    exact: bool
    feature_names: tuple[str, ...] = field(default=())
    method: str = "exact"

    @property
    def rest_of_list(self) -> float:
        return self.baseline

    def top(self, n: int) -> list[tuple[str, float]]:
        """The n largest non-zero contributions by absolute value, as (name, contribution)."""
        c = self.contributions
        order = [j for j in np.argsort(-np.abs(c), kind="stable")[:n] if c[j] != 0.0]
        return [(self.feature_names[j], float(c[j])) for j in order]


def reference_row(xq: np.ndarray, reference: str | npt.ArrayLike) -> npt.NDArray[np.float32]:
    """The reference document of one query's list: its per-feature median or mean, or a given row."""
    if isinstance(reference, str):
        if reference not in REFERENCES:
            raise ValueError(f"reference must be one of {list(REFERENCES)} or an array, got {reference!r}")
        n = xq.shape[0]
        if np.isnan(xq).any():  # the present values' statistic; NaN for a column missing throughout
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                stat = np.nanmedian if reference == "median" else np.nanmean
                return np.ascontiguousarray(stat(xq.astype(np.float64), axis=0), dtype=np.float32)
        if reference == "median" and n:
            # ``np.median`` of the float64 values, bit for bit: the middle one, or the mean of the two
            # middle ones, selected in float32 (the same order) by one sort of the columns (a
            # partition by two ranks costs 1.5-2.2x as much on 100 rows of 46 or 136 columns)
            part = np.sort(xq, axis=0)
            middle = (part[(n - 1) // 2].astype(np.float64) + part[n // 2].astype(np.float64)) / 2
            return np.ascontiguousarray(middle, dtype=np.float32)
        stat = np.median if reference == "median" else np.mean
        return np.ascontiguousarray(stat(xq.astype(np.float64), axis=0), dtype=np.float32)
    r = np.ascontiguousarray(reference, dtype=np.float32)
    if r.shape != (xq.shape[1],) or np.any(np.isinf(r)):
        raise ValueError(f"reference must be an array of shape ({xq.shape[1]},) without infinities (NaN: "
                         f"missing), got {r.shape}")
    return r


def explain_rows(model: EnsembleModel, features: npt.ArrayLike, query_offsets: npt.ArrayLike,
                 rows: Sequence[int] | npt.ArrayLike | None = None, *, method: str = "exact",
                 reference: Any = "median", budget: int = DEFAULT_BUDGET, seed: int = 0,
                 exact_max_features: int = EXACT_MAX_FEATURES,
                 feature_names: Sequence[str] | None = None, scoring: ScoringPass | None = None) -> Explanation:
    """Explanations (module docstring) of ``rows`` (default: every row) of ``features`` (n, d)
    split into queries by ``query_offsets``. ``method``: ``"exact"`` (deterministic) or
    ``"shapley"`` (the whole-model game: ``budget``, documents scored per explained row at most,
    exact enumeration when it fits and there are at most ``exact_max_features`` relevant
    features, else as many permutations as fit, at least 2 pairs; ``seed`` fixes them).
    ``scoring``: the request's own ``model.scoring_pass(features, query_offsets)``, reused by the
    exact method instead of scoring the lists again (ValueError when it is of other arrays)."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {list(METHODS)}, got {method!r}")
    if scoring is not None and features is scoring.x:  # the pass's own checked array: not checked again
        x, off = scoring.x, validate_offsets(query_offsets, scoring.x.shape[0])
    else:
        x, off = model._check(features, query_offsets)
    d = model.n_features
    names = tuple(feature_names) if feature_names is not None else tuple(default_feature_names(d))
    if len(names) != d:
        raise ValueError(f"feature_names has {len(names)} names; the model takes {d} features")
    picked = np.arange(x.shape[0], dtype=np.int64) if rows is None else np.asarray(rows, dtype=np.int64).ravel()
    if picked.size and (picked.min() < 0 or picked.max() >= x.shape[0]):
        bad = int(picked[(picked < 0) | (picked >= x.shape[0])][0])
        raise ValueError(f"row {bad} is outside the {x.shape[0]} rows")
    if budget < 1:
        raise ValueError(f"budget must be at least 1, got {budget}")
    if scoring is not None and ((scoring.offsets is not off and not np.array_equal(scoring.offsets, off))
                                or (scoring.x is not x and not np.array_equal(scoring.x, x))):
        raise ValueError("scoring is a scoring pass of other features or query offsets")
    k = picked.size
    res = {"scores": np.zeros(k), "baseline": np.zeros(k), "contributions": np.zeros((k, d)),
           "standard_error": np.zeros((k, d)), "exact": np.ones(k, dtype=bool),
           "n_relevant": np.zeros(k, dtype=np.int64), "n_permutations": np.zeros(k, dtype=np.int64),
           "reference": np.zeros((k, d), dtype=np.float32)}
    # one query (a /rank request's usual list): every row is its slot, no search
    query = np.zeros(k, dtype=np.int64) if off.size == 2 else np.searchsorted(off, picked, side="right") - 1
    rng: np.random.Generator | None = None  # made when a query needs the sampled method
    used = method
    # the small linear algebra (a whitened view's d x d eigendecompositions, the linear members'
    # products): one BLAS thread, as scoring uses (several cost 50 times more on a busy machine)
    with one_blas_thread(load_scipy=False):
        for q in sorted(set(query.tolist())):
            check_deadline(f"explanations, before query {q}")  # the service's deadline, if any
            lo, hi = int(off[q]), int(off[q + 1])
            xq = x[lo:hi]
            r = reference_row(xq, reference)
            slots = slice(None) if off.size == 2 else np.flatnonzero(query == q)
            part = None if scoring is None else (scoring.wide[lo:hi], scoring.member[lo:hi], scoring.scores[lo:hi])
            kept = None if scoring is None or scoring.whitening is None else scoring.whitening.get(q)
            exact = (exact_explanation.explain_query(model, xq, picked[slots] - lo, r, part, kept) if method == "exact"
                     else None)
            if exact is None:
                used = "shapley"
                rng = np.random.default_rng(seed) if rng is None else rng
                whole_model_shapley.explain_query(model, xq, r, picked[slots] - lo, np.flatnonzero(query == q),
                                                  budget, exact_max_features, rng, res)
                continue
            res["scores"][slots] = exact["scores"]
            res["baseline"][slots] = exact["baseline"]
            res["contributions"][slots] = exact["contributions"]
            res["reference"][slots] = r
            res["n_relevant"][slots] = np.count_nonzero(exact["contributions"], axis=1)
    return Explanation(rows=picked, feature_names=names, method=used, **res)


def explain_pair(model: EnsembleModel, features: npt.ArrayLike, query_offsets: npt.ArrayLike, a: int, b: int,
                 **options: Any) -> PairExplanation:
    """Why row ``a`` scores above (or below) row ``b`` of the same query: the difference of their
    explanations (``explain_rows``'s options apply); the baselines' difference is the rest of the list."""
    x, off = model._check(features, query_offsets)
    n = x.shape[0]
    for name, row in (("a", a), ("b", b)):
        if not 0 <= row < n:
            raise ValueError(f"{name} = {row} is outside the {n} rows")
    qa, qb = (int(np.searchsorted(off, row, side="right") - 1) for row in (a, b))
    if qa != qb:
        raise ValueError(f"rows {a} and {b} belong to different queries ({qa} and {qb}): a pair is "
                         "explained within one query")
    e = explain_rows(model, x, off, [a, b], **options)
    return PairExplanation(
        a=int(a), b=int(b), score_a=float(e.scores[0]), score_b=float(e.scores[1]),
        baseline=float(e.baseline[0] - e.baseline[1]), contributions=e.contributions[0] - e.contributions[1],
        standard_error=np.sqrt(e.standard_error[0] ** 2 + e.standard_error[1] ** 2),
        exact=bool(e.exact.all()), feature_names=e.feature_names, method=e.method)
