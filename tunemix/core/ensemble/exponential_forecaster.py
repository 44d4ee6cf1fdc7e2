"""The exponentially weighted forecaster that mixes calibrated members (method.md sec. 5).

Busa-Fekete, Kégl, Éltető, Szarvas, "Tune and mix" (Machine Learning 2013), eq. (22), and
"Ranking by calibrated AdaBoost" (Yahoo! LTR Challenge 2010), eq. (2); Cesa-Bianchi and
Lugosi (2006) for the forecaster::

    omega_m  = mean over validation queries of the quality (NDCG@10, "yahoo" convention by
               default) of the ranking by member m's score v_m
    w_m      = exp(c * (omega_m - max_m' omega_m'))  if omega_m > omega_min (the best member is
               always kept), else 0
    v_mix(x) = sum_m w_m r(v_m)(x) / sum_m w_m

r is the member rescaling (``member_rescaling.py``). Subtracting max omega and dividing by
sum w keep the weights finite for any c and do not change any ranking. c = 0 is the uniform
mean (``Uniform``); c -> infinity ranks by the best member alone (``OneBest``). c and omega_min
are chosen by grid search on the validation queries: every candidate is one weight vector, so
a candidate costs one matrix-vector product and one ``mean_metric`` call.

Grid (our choices): c over 0..200 (tune and mix sect. 7.3); omega_min over -inf, the 0.1..0.9
quantiles of omega, the finer top quantiles 0.95 and 0.975, and the thresholds that keep only the
top 1, 2, 3, 5, 10 or 20 members (on MQ2008 the best point can lie at the 0.9 quantile, so the
grid reaches past it). Grid points whose validation quality is within ``tie_tolerance`` (1e-4) of
the best are near-ties; of those the simplest wins: the smallest c, then the most members kept.
Without a tolerance, floating-point differences between machines can flip a fold (MQ2008 Fold1)
between c = 0 and c = 100.
Members whose rankings of the validation queries are identical to an earlier member's
(``dedupe``; e.g. two CPC fits that both end at the slope bound and become the same step
function) are dropped before the grid search: the mix would otherwise count one ranking twice.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from tunemix.core.data.dataset import query_rows
from tunemix.core.ensemble.base import (
    Float1D,
    Float2D,
    Int1D,
    MetricFn,
    Mixer,
    Offsets,
    member_qualities,
    resolve_metric,
)
from tunemix.core.ensemble.member_rescaling import DEFAULT_RESCALE, MemberRescaler, check_rescale

logger = logging.getLogger(__name__)

#: c from 0 (uniform) to 200, the range searched in tune-and-mix sec. 7.3.
DEFAULT_C_GRID: tuple[float, ...] = (0.0, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0)
#: omega_min candidates are these quantiles of the members' omegas, plus -inf (keep all) ...
DEFAULT_OMEGA_MIN_QUANTILES: tuple[float, ...] = (
    0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.975,
)
#: ... plus the thresholds that keep only the k best members, for each k here.
DEFAULT_OMEGA_MIN_TOP_K: tuple[int, ...] = (1, 2, 3, 5, 10, 20)
#: Grid points within this of the best validation quality are tied; the tie goes to the
#: smaller c, then the smaller omega_min (the flatter, less validation-tuned mix).
GRID_TIE_TOLERANCE = 1e-4
#: Candidate mixes computed per matrix product (bounds memory to n * 16 floats).
_CANDIDATE_BLOCK = 16


def mix_weights(
    omega: npt.ArrayLike, c: float, omega_min: float, eligible: npt.ArrayLike | None = None
) -> Float1D:
    """w_m = exp(c (omega_m - max omega)) for omega_m > omega_min, else 0; best always kept.
    Members outside ``eligible`` (a mask; default all) get 0 and are not the best.

    >>> mix_weights([0.5, 0.7, 0.6], 0.0, 0.55).tolist()
    [0.0, 1.0, 1.0]
    >>> mix_weights([0.5, 0.7, 0.6], 0.0, 0.55, [True, False, True]).tolist()
    [0.0, 0.0, 1.0]
    """
    om = np.asarray(omega, dtype=np.float64)
    if om.ndim != 1 or om.shape[0] == 0:
        raise ValueError("omega must be a non-empty 1-D array of member qualities")
    if not np.isfinite(c) or c < 0:
        raise ValueError(f"c must be a finite number >= 0, got {c}")
    ok = np.ones(om.shape[0], dtype=bool) if eligible is None else np.asarray(eligible, dtype=bool)
    if ok.shape != om.shape or not ok.any():
        raise ValueError("eligible must be a mask of the members with at least one True")
    masked = np.where(ok, om, -np.inf)
    best = int(np.argmax(masked))
    keep = ok & (om > omega_min)
    keep[best] = True
    w = np.exp(c * (np.where(ok, om, om[best]) - om[best]))
    return np.where(keep, w, 0.0)


def duplicate_rankings(member_scores: Float2D, query_offsets: Offsets) -> npt.NDArray[np.int64]:
    """For each member, the index of the first member that ranks every query identically (ties
    included), or -1 for the first of its kind. Two members rank identically when their
    per-query dense ranks agree: any increasing transform of a member's scores is its twin.
    Vectorised over the members: one sort per query of its (n_q, M) block, then the members
    grouped by a fingerprint of their rank vectors and compared within a group."""
    n, m = member_scores.shape
    scores_t = np.ascontiguousarray(member_scores.T)  # (M, n): each member's row is contiguous
    dense = np.empty((m, n), dtype=np.int32)
    rows = np.arange(m)[:, None]
    for q in range(query_offsets.shape[0] - 1):
        lo, hi = int(query_offsets[q]), int(query_offsets[q + 1])
        if hi <= lo:
            continue
        block = scores_t[:, lo:hi]
        order = np.argsort(block, axis=1, kind="stable")
        ranked = np.take_along_axis(block, order, axis=1)
        step = np.zeros((m, hi - lo), dtype=np.int32)
        step[:, 1:] = ranked[:, 1:] != ranked[:, :-1]
        dense[rows, lo + order] = np.cumsum(step, axis=1, dtype=np.int32)
    # group the members by a 64-bit fingerprint of their rank vectors, then confirm equality
    weights = np.random.default_rng(0).integers(1, 2**62, size=n, dtype=np.int64)
    with np.errstate(over="ignore"):
        key = dense.astype(np.int64) @ weights  # wraps modulo 2^64: a fingerprint
    out_twin = np.full(m, -1, dtype=np.int64)
    first_of: dict[int, list[int]] = {}
    for j in range(m):
        bucket = first_of.setdefault(int(key[j]), [])
        for f in bucket:
            if np.array_equal(dense[f], dense[j]):
                out_twin[j] = f
                break
        else:
            bucket.append(j)
    return out_twin


def _candidate_weights(omega: Float1D, c_grid: Float1D, thresholds: Float1D, eligible: npt.NDArray[np.bool_]
                       ) -> tuple[npt.NDArray[np.int64], Float2D]:
    """The grid's distinct normalised weight vectors as the columns of ``W`` and each grid point's
    column (``slot[i, j]`` for ``c_grid[i]``, ``thresholds[j]``): many points coincide (e.g. every
    omega_min at c = 0 that keeps the same members), so each distinct mix is scored once."""
    slot = np.empty((c_grid.size, thresholds.size), dtype=np.int64)
    distinct: dict[bytes, int] = {}
    columns: list[Float1D] = []
    for i, c in enumerate(c_grid):
        for j, t in enumerate(thresholds):
            w = mix_weights(omega, float(c), float(t), eligible)
            w = w / w.sum()
            slot[i, j] = distinct.setdefault(w.tobytes(), len(columns))
            if slot[i, j] == len(columns):
                columns.append(w)
    return slot, np.column_stack(columns)


def one_standard_error(per_query: npt.ArrayLike) -> float:
    """The one-standard-error rule's tolerance (Breiman et al. 1984, "Classification and Regression
    Trees", sect. 3.4.3): the standard error of a mean over queries, the per-query values' sample
    SD / sqrt(n) (NaN values left out; 0 for fewer than two). A choice made on these queries that
    is better than the simplest one by less than this is noise: ``tie_tolerance = "one_se"`` here,
    and the time budget's choice between the default's model and the search's mixes
    (``tunemix.train.budget_choice``)."""
    values = np.asarray(per_query, dtype=np.float64)
    values = values[np.isfinite(values)]
    return float(values.std(ddof=1) / np.sqrt(values.size)) if values.size > 1 else 0.0


def _simplest_best(surface: Float2D, tolerance: float, c_grid: Float1D, thresholds: Float1D) -> tuple[int, int]:
    """The grid point within ``tolerance`` of the best quality with the smallest c, then the
    smallest omega_min (the flatter, less tuned mix)."""
    candidates = np.argwhere(surface >= float(surface.max()) - tolerance)
    i, j = min((tuple(ij) for ij in candidates), key=lambda ij: (c_grid[ij[0]], thresholds[ij[1]]))
    return int(i), int(j)


class ExponentialForecaster(Mixer):
    """Exponentially weighted mix of members, c and omega_min tuned on validation queries.

    Parameters (keyword-only, stored unchanged):
        measure, convention: the quality omega and the grid-search objective
            (``tunemix.core.evaluation`` names, default "ndcg@10" under "yahoo").
        c_grid: candidate values of c >= 0 (default ``DEFAULT_C_GRID``, 0..200).
        omega_min_grid: candidate thresholds; None = -inf plus the ``omega_min_quantiles``
            quantiles of the fitted omegas plus the top-k thresholds of ``omega_min_top_k``.
        omega_min_quantiles, omega_min_top_k: used when ``omega_min_grid`` is None.
        tie_tolerance: grid points within this of the best validation quality are tied (the
            smallest c, then the smallest omega_min, wins); ``"one_se"``: the standard error of
            the best point's mean over the validation queries (the one-standard-error rule: on
            a small validation set the mix stays near uniform instead of fitting its noise).
        selection: how the grid point is chosen. ``"validation"``: the point best on the
            tuning queries themselves (the paper's protocol). ``"cv"``: the point best when
            cross-validated over the tuning queries (``cv_folds`` folds of queries; each fold's
            mix uses omegas and omega_min thresholds computed on the other folds; the
            thresholds are rules, a quantile or a top-k count, applied to those omegas). The
            chosen (c, rule) is then applied to the omegas of all tuning queries. With few
            validation queries the in-sample point fits their noise (the MSLR sample's 17
            validation queries a fold); the cross-validated one is an honest estimate of the
            mix's quality, and c = 0 (the uniform mix) is one of its candidates, so the
            shrinkage toward uniform is chosen by cross-validation.
        cv_folds: folds of ``selection = "cv"`` (at most one per query).
        dedupe: drop members whose validation rankings repeat an earlier member's.
        rescale: "none" | "zscore_query" | "minmax_query" | "std_global" (member_rescaling.py).
            Default "zscore_query", by measurement (test NDCG@10, yahoo):
            - MQ2008, 5 folds, 15 members on different scales (LightGBM regression, multi-class
              expected gain, lambdarank raw scores, DCG-normalised regression, raw features):
              none 0.7899, zscore_query 0.7902, minmax_query 0.7905, std_global 0.7900 (one
              best 0.7815): the modes tie within fold noise (about 0.005).
            - synthetic noisy copies of one true score (8 members, 5 seeds): equal scales, all
              modes 0.896; member scales 0.1..200: none 0.872, the other three 0.896; scales
              that also vary per query (as for DCG-normalised targets): none 0.864,
              std_global 0.876, zscore_query 0.896, minmax_query 0.896.
            Only the per-query modes are safe in every case; z-scores depend on all documents
            of the query rather than on its two extremes, so one outlier moves them less.
            Consequence for serving: with a per-query mode a document's mixed score depends on
            the other candidates posted with it (its ranking within the list does not).
        metric: a ``mean_metric``-like function for ``fit`` (default
            ``tunemix.core.evaluation.mean_metric``); not part of the params.

    ``fit(..., eligible=mask)`` restricts the mix to the masked members (the others get weight
    0), e.g. to the snapshots of one iteration count.

    Fitted attributes: ``duplicate_of_`` (M,, -1 or the earlier twin), ``eligible_`` (M,),
    ``omega_`` (M,), ``c_``, ``omega_min_``, ``weights_`` (M,, max 1, 0 for
    dropped members), ``kept_`` (M,) bool, ``c_grid_``, ``omega_min_grid_``, ``grid_quality_``
    (len(c_grid_), len(omega_min_grid_)) validation quality of every grid point (the surface
    for the report plot), ``validation_quality_`` (the chosen point's), ``rescaler_``.
    """

    name: ClassVar[str] = "exp_forecaster"

    def __init__(
        self,
        *,
        measure: str = "ndcg@10",
        convention: str = "yahoo",
        c_grid: Sequence[float] = DEFAULT_C_GRID,
        omega_min_grid: Sequence[float] | None = None,
        omega_min_quantiles: Sequence[float] = DEFAULT_OMEGA_MIN_QUANTILES,
        omega_min_top_k: Sequence[int] = DEFAULT_OMEGA_MIN_TOP_K,
        tie_tolerance: float | str = GRID_TIE_TOLERANCE,
        selection: str = "validation",
        cv_folds: int = 5,
        dedupe: bool = True,
        rescale: str = DEFAULT_RESCALE,
        metric: MetricFn | None = None,
    ) -> None:
        self.measure = measure
        self.convention = convention
        self.c_grid = c_grid
        self.omega_min_grid = omega_min_grid
        self.omega_min_quantiles = omega_min_quantiles
        self.omega_min_top_k = omega_min_top_k
        self.tie_tolerance = tie_tolerance
        self.selection = selection
        self.cv_folds = cv_folds
        self.dedupe = dedupe
        self.rescale = rescale
        # fit()'s keyword inputs, read by _fit (the base class's fit passes only the arrays)
        self._eligible: npt.NDArray[np.bool_] | None = None
        self._given: tuple[Float1D | None, npt.NDArray[np.int64] | None] = (None, None)
        self.metric = metric

    @classmethod
    def _init_param_names(cls) -> tuple[str, ...]:
        return (
            "measure",
            "convention",
            "c_grid",
            "omega_min_grid",
            "omega_min_quantiles",
            "omega_min_top_k",
            "tie_tolerance",
            "selection",
            "cv_folds",
            "dedupe",
            "rescale",
        )

    @classmethod
    def _optional_init_params(cls) -> tuple[str, ...]:
        # fitting only; artifacts written by earlier versions may lack them
        return ("omega_min_top_k", "tie_tolerance", "selection", "cv_folds", "dedupe")

    def _get_init_params(self) -> dict[str, Any]:
        return {
            "measure": self.measure,
            "convention": self.convention,
            "c_grid": [float(c) for c in self.c_grid],
            "omega_min_grid": None
            if self.omega_min_grid is None
            else [float(v) for v in self.omega_min_grid],
            "omega_min_quantiles": [float(v) for v in self.omega_min_quantiles],
            "omega_min_top_k": [int(k) for k in self.omega_min_top_k],
            "tie_tolerance": self.tie_tolerance if self.tie_tolerance == "one_se" else float(self.tie_tolerance),
            "selection": self.selection,
            "cv_folds": int(self.cv_folds),
            "dedupe": bool(self.dedupe),
            "rescale": self.rescale,
        }

    # ----------------------------------------------------------------- grids
    def _checked_c_grid(self) -> Float1D:
        c = np.asarray(self.c_grid, dtype=np.float64).ravel()
        if c.size == 0 or not np.all(np.isfinite(c)) or np.any(c < 0):
            raise ValueError(f"c_grid must be a non-empty list of finite c >= 0, got {self.c_grid}")
        return c

    def _checked_omega_min_grid(self, omega: Float1D) -> Float1D:
        if self.omega_min_grid is not None:
            g = np.asarray(self.omega_min_grid, dtype=np.float64).ravel()
            if g.size == 0 or np.any(np.isnan(g)):
                raise ValueError(
                    f"omega_min_grid must be a non-empty list of numbers (-inf allowed), "
                    f"got {self.omega_min_grid}"
                )
            return g
        qs = np.asarray(self.omega_min_quantiles, dtype=np.float64).ravel()
        if np.any(~np.isfinite(qs)) or np.any((qs < 0) | (qs > 1)):
            raise ValueError(
                f"omega_min_quantiles must lie in [0, 1], got {self.omega_min_quantiles}"
            )
        ks = np.asarray(self.omega_min_top_k, dtype=np.int64).ravel()
        if np.any(ks < 1):
            raise ValueError(f"omega_min_top_k must be counts >= 1, got {self.omega_min_top_k}")
        values = np.quantile(omega, qs) if qs.size else np.zeros(0)
        ranked = np.sort(omega)[::-1]
        # omega_min = the (k+1)-th best omega keeps the k best (fewer when omegas tie)
        top = ranked[ks[ks < ranked.size]]
        return np.concatenate([[-np.inf], np.unique(np.concatenate([values, top]))])

    # ------------------------------------------------------------------- fit
    def fit(
        self,
        member_scores: npt.ArrayLike,
        labels: npt.ArrayLike,
        query_offsets: npt.ArrayLike,
        *,
        eligible: npt.ArrayLike | None = None,
        omega: npt.ArrayLike | None = None,
        duplicate_of: npt.ArrayLike | None = None,
    ) -> ExponentialForecaster:
        """Learn c and omega_min on validation queries; ``eligible`` (mask) limits the members.

        ``omega`` and ``duplicate_of`` may be passed when already computed on these same
        scores, labels and offsets (``omega_`` and ``duplicate_of_`` of an earlier fit), e.g. by a
        caller that fits one matrix under several eligible masks."""
        self._eligible = None if eligible is None else np.asarray(eligible, dtype=bool).ravel()
        self._given = (None if omega is None else np.asarray(omega, dtype=np.float64).ravel(),
                       None if duplicate_of is None else np.asarray(duplicate_of, dtype=np.int64).ravel())
        try:
            return super().fit(member_scores, labels, query_offsets)
        finally:
            self._eligible = None
            self._given = (None, None)

    def _fit(self, member_scores: Float2D, labels: Int1D, query_offsets: Offsets) -> None:
        check_rescale(self.rescale)
        metric = resolve_metric(self.metric)
        c_grid = self._checked_c_grid()
        self.rescaler_ = MemberRescaler(self.rescale).fit(member_scores)
        scaled = self.rescaler_.transform(member_scores, query_offsets)
        # Per-query rescaling keeps every member's within-query order, so omega is the same
        # on raw and rescaled scores; use the raw ones (what the member ranks by).
        given_omega, given_dup = self._given
        m = member_scores.shape[1]
        if given_omega is not None and given_omega.shape == (m,):
            omega = given_omega
        else:
            omega = member_qualities(
                member_scores, labels, query_offsets, self.measure, self.convention, metric
            )
        eligible = np.ones(m, dtype=bool) if self._eligible is None else self._eligible
        if eligible.shape != (m,) or not eligible.any():
            raise ValueError(f"eligible must be a mask of the {m} members with at least one True")
        if not self.dedupe:
            duplicate_of = np.full(m, -1, dtype=np.int64)
        elif given_dup is not None and given_dup.shape == (m,):
            duplicate_of = given_dup
        else:
            duplicate_of = duplicate_rankings(member_scores, query_offsets)
        eligible = eligible & (duplicate_of < 0)
        if not eligible.any():  # every eligible member repeats a non-eligible one: keep them
            eligible = self._eligible if self._eligible is not None else np.ones(m, dtype=bool)
        if self.selection not in ("validation", "cv"):
            raise ValueError(f"selection must be 'validation' or 'cv', got {self.selection!r}")
        n_q = query_offsets.shape[0] - 1
        if self.selection == "cv" and n_q >= 2:
            self._fit_cv(member_scores, scaled, labels, query_offsets, omega, eligible, duplicate_of,
                         c_grid, metric)
            return
        om_grid = self._checked_omega_min_grid(omega[eligible])
        slot, W = _candidate_weights(omega, c_grid, om_grid, eligible)
        quality = self._qualities(scaled, W, labels, query_offsets, metric)
        surface = quality[slot]
        tolerance = self._tolerance(metric, labels, query_offsets, scaled, W[:, int(np.argmax(quality))])
        i_best, j_best = _simplest_best(surface, tolerance, c_grid, om_grid)
        self._keep(omega, tolerance, duplicate_of, eligible, c_grid, om_grid, surface, i_best, j_best)
        self.validation_quality_ = float(surface[i_best, j_best])
        self.selection_quality_ = self.validation_quality_
        logger.debug(
            "exp_forecaster: c=%g omega_min=%g keeps %d/%d members, validation %s=%.6f "
            "(%d distinct candidates)",
            self.c_, self.omega_min_, int(self.kept_.sum()), omega.size, self.measure,
            self.validation_quality_, W.shape[1],
        )

    def _qualities(self, scaled: Float2D, W: Float2D, labels: Int1D, query_offsets: Offsets,
                   metric: MetricFn) -> Float1D:
        """The tuning quality of each candidate mix (column of ``W``), a few matrix products of
        ``_CANDIDATE_BLOCK`` columns, then one metric call per candidate."""
        quality = np.empty(W.shape[1], dtype=np.float64)
        for start in range(0, W.shape[1], _CANDIDATE_BLOCK):
            block = scaled @ W[:, start : start + _CANDIDATE_BLOCK]
            for b in range(block.shape[1]):
                quality[start + b] = float(
                    metric(labels, np.ascontiguousarray(block[:, b]), query_offsets,
                           self.measure, self.convention)
                )
        return quality

    def _keep(self, omega: Float1D, tolerance: float, duplicate_of: npt.NDArray[np.int64],
              eligible: npt.NDArray[np.bool_], c_grid: Float1D, om_grid: Float1D, surface: Float2D,
              i_best: int, j_best: int) -> None:
        """Set the fitted attributes of the chosen grid point (``c_grid[i_best]``, ``om_grid[j_best]``)."""
        self.omega_ = omega
        self.tolerance_ = tolerance
        self.duplicate_of_ = duplicate_of
        self.eligible_ = eligible
        self.c_grid_ = c_grid
        self.omega_min_grid_ = om_grid
        self.grid_quality_ = surface
        self.c_ = float(c_grid[i_best])
        self.omega_min_ = float(om_grid[j_best])
        self.weights_ = mix_weights(omega, self.c_, self.omega_min_, eligible)
        self.kept_ = self.weights_ > 0

    # ------------------------------------------------------ cross-validation
    def _omega_min_rules(self) -> list[tuple[str, float]]:
        """The omega_min grid as rules that give a threshold for any omegas: keep all, a
        quantile, the k best (or the configured absolute values), from the most members kept."""
        if self.omega_min_grid is not None:
            g = np.asarray(self.omega_min_grid, dtype=np.float64).ravel()
            if g.size == 0 or np.any(np.isnan(g)):
                raise ValueError(f"omega_min_grid must be a non-empty list of numbers (-inf allowed), "
                                 f"got {self.omega_min_grid}")
            return [("value", float(v)) for v in np.unique(g)]
        self._checked_omega_min_grid(np.zeros(1))  # the same checks of the quantiles and counts
        qs = sorted(float(q) for q in np.asarray(self.omega_min_quantiles, dtype=np.float64).ravel())
        ks = sorted((int(k) for k in np.asarray(self.omega_min_top_k, dtype=np.int64).ravel()), reverse=True)
        return [("all", 0.0), *(("quantile", q) for q in qs), *(("top", float(k)) for k in ks)]

    @staticmethod
    def _rule_threshold(rule: tuple[str, float], omega: Float1D) -> float:
        kind, v = rule
        if kind == "all":
            return -np.inf
        if kind == "value":
            return v
        if kind == "quantile":
            return float(np.quantile(omega, v))
        ranked = np.sort(omega)[::-1]
        return float(ranked[int(v)]) if int(v) < ranked.size else -np.inf

    def _fit_cv(self, member_scores: Float2D, scaled: Float2D, labels: Int1D, query_offsets: Offsets,
                omega: Float1D, eligible: npt.NDArray[np.bool_], duplicate_of: npt.NDArray[np.int64],
                c_grid: Float1D, metric: MetricFn) -> None:
        """``selection = "cv"``: each grid point (c, omega_min rule) scored on every fold of the
        tuning queries with the omegas of the other folds; the best (ties: smaller c, then more
        members) applied to the omegas of all tuning queries."""
        rules = self._omega_min_rules()
        n_q = query_offsets.shape[0] - 1
        k = int(min(max(int(self.cv_folds), 2), n_q))
        fold_of = np.empty(n_q, dtype=np.int64)
        fold_of[np.random.default_rng(0).permutation(n_q)] = np.arange(n_q) % k
        surface = np.zeros((c_grid.size, len(rules)), dtype=np.float64)
        for f in range(k):
            held = np.flatnonzero(fold_of == f)
            rest = np.flatnonzero(fold_of != f)
            h_rows, h_off = query_rows(query_offsets, held)
            r_rows, r_off = query_rows(query_offsets, rest)
            om = member_qualities(np.ascontiguousarray(member_scores[r_rows]), labels[r_rows], r_off,
                                  self.measure, self.convention, metric)
            thresholds = np.array([self._rule_threshold(rule, om[eligible]) for rule in rules])
            slot, W = _candidate_weights(om, c_grid, thresholds, eligible)
            quality = self._qualities(scaled[h_rows], W, labels[h_rows], h_off, metric)
            surface += quality[slot] * (held.size / n_q)
        full = np.array([self._rule_threshold(rule, omega[eligible]) for rule in rules])
        tolerance = max(float(self.tie_tolerance), 0.0) if self.tie_tolerance != "one_se" else GRID_TIE_TOLERANCE
        i_best, j_best = _simplest_best(surface, tolerance, c_grid, full)
        self._keep(omega, tolerance, duplicate_of, eligible, c_grid, full, surface, i_best, j_best)
        mixed = self.rescaler_.weighted_sum(member_scores, query_offsets, self.weights_ / self.weights_.sum())
        self.validation_quality_ = float(metric(labels, mixed, query_offsets, self.measure, self.convention))
        self.selection_quality_ = float(surface[i_best, j_best])
        logger.debug("exp_forecaster (cv, %d folds): c=%g omega_min=%g keeps %d/%d members, cross-validated "
                     "%s=%.6f, in-sample %.6f", k, self.c_, self.omega_min_, int(self.kept_.sum()), omega.size,
                     self.measure, self.selection_quality_, self.validation_quality_)

    def _tolerance(self, metric: MetricFn, labels: Int1D, query_offsets: Offsets, scaled: Float2D,
                   best_w: Float1D) -> float:
        """The tie tolerance: a number, or with ``"one_se"`` the standard error of the best grid
        point's mean over the tuning queries (``one_standard_error`` of its per-query values): the
        one-standard-error rule (Breiman et al. 1984), which grows as the tuning set shrinks."""
        if self.tie_tolerance != "one_se":
            return max(float(self.tie_tolerance), 0.0)
        mixed = np.ascontiguousarray(scaled @ best_w)
        n_q = query_offsets.shape[0] - 1
        if n_q < 2:
            return 0.0
        values = np.array([
            float(metric(labels[query_offsets[q]:query_offsets[q + 1]],
                         np.ascontiguousarray(mixed[query_offsets[q]:query_offsets[q + 1]]),
                         np.array([0, query_offsets[q + 1] - query_offsets[q]], dtype=np.int64),
                         self.measure, self.convention))
            for q in range(n_q)
        ])
        return one_standard_error(values)

    # ------------------------------------------------------------- transform
    def _transform(self, member_scores: Float2D, query_offsets: Offsets) -> Float1D:
        return self.rescaler_.weighted_sum(member_scores, query_offsets, self.weights_ / self.weights_.sum())

    # ---------------------------------------------------- member selection
    def used_members(self) -> npt.NDArray[np.bool_]:
        """Members with a positive weight (the others are multiplied by 0)."""
        self._check_fitted()
        return np.asarray(self.weights_ > 0)

    @classmethod
    def _per_member_params(cls) -> tuple[str, ...]:
        return ("omega", "weights", "rescale_scale")

    # ---------------------------------------------------------------- params
    def _fitted_params(self) -> dict[str, Any]:
        return {
            "omega": self.omega_.copy(),
            "c": self.c_,
            "omega_min": self.omega_min_,
            "weights": self.weights_.copy(),
            "c_grid_searched": self.c_grid_.copy(),
            "omega_min_grid_searched": self.omega_min_grid_.copy(),
            "grid_quality": self.grid_quality_.copy(),
            "validation_quality": self.validation_quality_,
            "rescale_scale": self.rescaler_.to_params()["rescale_scale"],
        }

    def _set_fitted_params(self, params: Mapping[str, Any]) -> None:
        weights = np.asarray(params["weights"], dtype=np.float64)
        if weights.shape != (self.n_members_,) or not np.all(np.isfinite(weights)):
            raise ValueError(f"weights must be {self.n_members_} finite numbers")
        if np.any(weights < 0) or weights.sum() <= 0:
            raise ValueError("weights must be non-negative with a positive sum")
        self.weights_ = weights
        self.kept_ = weights > 0
        self.c_ = float(params.get("c", np.nan))
        self.omega_min_ = float(params.get("omega_min", np.nan))
        self.omega_ = np.asarray(params.get("omega", np.full(self.n_members_, np.nan)), float)
        self.c_grid_ = np.asarray(params.get("c_grid_searched", []), dtype=np.float64)
        self.omega_min_grid_ = np.asarray(
            params.get("omega_min_grid_searched", []), dtype=np.float64
        )
        self.grid_quality_ = np.asarray(
            params.get("grid_quality", np.zeros((0, 0))), dtype=np.float64
        )
        self.validation_quality_ = float(params.get("validation_quality", np.nan))
        self.rescaler_ = MemberRescaler.from_params(
            {"rescale": self.rescale, "rescale_scale": params.get("rescale_scale", [])}
        )
