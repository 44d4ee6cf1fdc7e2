"""The trained ranker at scoring time: views -> one forest pass -> calibrators -> mixer.

Imports numpy/numba code only (the service uses it). How a posted candidate list is scored:

1. **Wide features.** The raw features (n, d) are followed by one block of d columns for each
   query-wise view the members use (``raw+std`` appends the standardised copy, ``raw+white`` the
   whitened copy; ``tunemix.core.data.normalization``). Views use statistics of the whole list,
   so a document's score depends on the documents posted with it.
2. **One pass.** Every boosting run's trees are remapped to the wide columns and padded to the
   largest class count, then concatenated into one :class:`FlatForest`. One call of the scoring
   kernel returns the running sums at every checkpoint any member needs; member m (run r,
   snapshot after t iterations) has raw K-vector ``S[start_r + t] - S[start_r]``.
   Linear runs (``RunInfo.kind == "linear"``: the multi-class linear SVM, the best single
   feature) are one small matrix product instead: run r's raw K-vector is
   ``((x_view - mean_r) / scale_r) @ W_r + b_r``, computed for all linear runs at once with the
   standardisation folded into one (wide columns x outputs) matrix; the products are appended
   to the running sums as further slabs after a zero slab, so a linear member is again
   ``S[hi] - S[lo]`` to the calibration step.
   **The ordinal step.** A member calibrated ``ordinal+<spec>`` (McRank's ordinal variant: K-1
   cumulative models) needs its class probabilities first; each such snapshot's K-vector of
   probabilities (``tunemix.core.calibration.expected_relevance.ordinal_probabilities``: differences
   of the cumulative sigmoids, clipped and renormalised) is one more slab, and the member's inner
   calibrator reads it there, in the calibration step's kernels. McRank's own
   ``er:<link>:<T>`` members (sum_k P(k | x) T(k)) are calibration-step families of their own.
3. **Calibration.** Each member's calibrator turns its K-vector into one score; all calibrators
   are applied in one numba call that reads the running sums at the checkpoints in place
   (:class:`~tunemix.core.scoring.calibration_step.CalibrationStep`).
4. **Mixing.** The mixer (by default the exponentially weighted forecaster) combines the member
   scores per query.

An :class:`EnsembleModel` is stored as ``manifest["model"]`` (JSON) plus arrays (the forest
under ``forest/...``, a linear run's ``weights`` (d_view, K), ``intercept`` (K,), ``mean`` and
``scale`` (d_view,) under ``linear/<run>/...``, calibrator and mixer arrays under ``members/<i>/...``
and ``mixer/...``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from tunemix.core.artifact import (
    MAX_ARRAYS_BYTES,
    ArtifactError,
    check_width,
    join_arrays,
    load_artifact,
    resolve_artifact,
    split_arrays,
)
from tunemix.core.calibration.base import Calibrator
from tunemix.core.calibration.expected_relevance import OrdinalCalibrator, ordinal_probabilities
from tunemix.core.calibration.registry import calibrator_from_params
from tunemix.core.data.dataset import validate_offsets
from tunemix.core.data.normalization import PARALLEL_MIN_DOCUMENTS, VIEWS, standardised, whitened
from tunemix.core.deadline import charge_rows
from tunemix.core.ensemble.base import Mixer
from tunemix.core.ensemble.registry import mixer_from_params
from tunemix.core.scoring import calibration_step, forest, runtime
from tunemix.core.scoring.calibration_step import CalibrationStep
from tunemix.core.scoring.forest import FlatForest, any_nan, score_forest
from tunemix.core.scoring.relevance_head import HEAD_KIND, RelevanceHead
from tunemix.core.scoring.runtime import run_on_threads

log = logging.getLogger(__name__)

EXTRA_VIEWS = ("raw+std", "raw+white")


RUN_KINDS = ("forest", "linear")
LINEAR_KEYS = ("weights", "intercept", "mean", "scale")
#: a linear run's optional array: ``missing`` (d_view, K), the run's raw K-vector contribution of a
#: column whose value is missing (NaN), in place of ``W[c] (x_c - mean_c) / scale_c``; stored
#: without it, a missing value contributes 0 (as the column's mean would)
LINEAR_MISSING = "missing"

#: members of a stored model at most (the widest grid here, ``configs/mq2008-all-members.toml``,
#: makes 2,005)
MAX_MEMBERS = 10_000
#: the declared width of a stored model with the ``raw+white`` view at most: whitening a query
#: decomposes a (d, d) covariance matrix, O(d^3) (0.7 s at 1,024 features, 44 s at 4,096), and the
#: warm-up whitens four queries before a worker is ready
MAX_WHITENED_FEATURES = 1024
#: characters of a member's or a feature's name in a stored model at most (``GET /models/{name}``
#: lists them, explanations repeat the feature names in every answer)
MAX_NAME_CHARS = 256
#: feature values (rows x ``n_features``) of the list the parallel warm-up scores at most: 1,024
#: rows at ``MAX_FEATURES`` (the views' parallel paths take two queries of 512), about 175 MB of
#: peak memory. A model whose forest needs a longer list to take its parallel path (fewer than
#: ``PARALLEL_MIN_WORK / rows`` bases) leaves that path to the first list that long
WARM_UP_MAX_VALUES = 2**22


@dataclass(frozen=True)
class RunInfo:
    """One run: its feature view, label grouping, raw columns (``n_classes``) and place in the
    forest (``kind == "forest"``) or its linear map (``kind == "linear"``, no bases)."""

    view: str
    grouping: str
    n_classes: int
    base_start: int
    base_end: int
    learner: dict[str, Any]
    kind: str = "forest"

    def to_dict(self) -> dict[str, Any]:
        return {"view": self.view, "grouping": self.grouping, "n_classes": self.n_classes,
                "base_start": self.base_start, "base_end": self.base_end, "learner": self.learner,
                "kind": self.kind}


def view_width(view: str, n_raw: int) -> int:
    """Columns of a view's matrix: ``raw`` is the d raw features, ``raw+std`` / ``raw+white`` the raw
    features followed by their normalised copy (2d)."""
    return n_raw if view == "raw" else 2 * n_raw


def check_linear(params: dict[str, np.ndarray], n_rows: int, n_outputs: int, where: str) -> dict[str, np.ndarray]:
    """A linear run's arrays as float64, shapes checked: weights (d_view, K), intercept (K,), mean
    and scale (d_view,), d_view the columns of its view's matrix."""
    missing = [k for k in LINEAR_KEYS if k not in params]
    if missing:
        raise ValueError(f"{where}: linear run lacks {', '.join(missing)}")
    out = {k: np.ascontiguousarray(params[k], dtype=np.float64) for k in LINEAR_KEYS}
    out[LINEAR_MISSING] = np.ascontiguousarray(params.get(LINEAR_MISSING, np.zeros((n_rows, n_outputs))),
                                               dtype=np.float64)
    shapes = {"weights": (n_rows, n_outputs), "intercept": (n_outputs,), "mean": (n_rows,), "scale": (n_rows,),
              LINEAR_MISSING: (n_rows, n_outputs)}
    for k, shape in shapes.items():
        if out[k].shape != shape:
            raise ValueError(f"{where}: linear {k} has shape {out[k].shape}, expected {shape}")
        if not np.all(np.isfinite(out[k])):
            raise ValueError(f"{where}: linear {k} has NaN or infinity")
    if np.any(out["scale"] <= 0):
        raise ValueError(f"{where}: linear scale must be positive")
    return out


@dataclass(frozen=True)
class Member:
    """Snapshot ``iterations`` of run ``run`` with one calibrator (a linear run's members have
    ``iterations == 0``)."""

    name: str
    run: int
    iterations: int
    calibrator: Calibrator


def remap_forest(forest: FlatForest, view: str, n_raw: int, extra_views: Sequence[str], n_outputs: int) -> FlatForest:
    """The forest of a run trained on ``view`` rewritten for the wide matrix and ``n_outputs`` classes."""
    if view not in VIEWS:
        raise ValueError(f"unknown view {view!r}")
    feat = forest.node_feature.astype(np.int64)
    if view != "raw":
        block = 1 + list(extra_views).index(view)
        feat = np.where(feat >= n_raw, feat - n_raw + block * n_raw, feat)
    arrays = forest.to_arrays()
    arrays["node_feature"] = feat.astype(np.int32)
    arrays["n_features"] = np.array(n_raw * (1 + len(extra_views)), dtype=np.int64)
    leaves = forest.leaf_values
    if leaves.shape[1] < n_outputs:
        leaves = np.hstack([leaves, np.zeros((leaves.shape[0], n_outputs - leaves.shape[1]))])
    arrays["leaf_values"] = leaves
    return FlatForest.from_arrays(arrays)


@dataclass
class ScoringPass:
    """What one scoring pass of checked arrays computed: the features ``x`` (n, d) and query
    offsets, the wide features (views appended), the calibrated member scores (n, M), the served
    scores (n,), the relevance head's (P(y = k) (n, K), E[y] (n,)) when asked for, and each query's
    whitening (mean, eigenvalues, eigenvectors) of the ``raw+white`` view when asked for
    (``whiten_by_query``'s ``keep``)."""

    x: np.ndarray
    offsets: np.ndarray
    wide: np.ndarray
    member: np.ndarray
    scores: np.ndarray
    relevance: tuple[np.ndarray, ...] | None = None
    whitening: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] | None = None


class EnsembleModel:
    """A calibrated, mixed ensemble of boosting snapshots (see the module docstring)."""

    def __init__(
        self,
        *,
        n_features: int,
        extra_views: Sequence[str],
        forest: FlatForest,
        runs: Sequence[RunInfo],
        members: Sequence[Member],
        mixer: Mixer,
        linear: dict[int, dict[str, np.ndarray]] | None = None,
    ) -> None:
        bad = [v for v in extra_views if v not in EXTRA_VIEWS]
        if bad:
            raise ValueError(f"unknown extra view(s) {bad}")
        if forest.n_features != n_features * (1 + len(extra_views)):
            raise ValueError(f"forest has {forest.n_features} feature columns, expected "
                             f"{n_features * (1 + len(extra_views))}")
        for i, m in enumerate(members):
            if not 0 <= m.run < len(runs):
                raise ValueError(f"member {i} refers to run {m.run}, but there are {len(runs)} runs")
            run = runs[m.run]
            if not 0 <= m.iterations <= run.base_end - run.base_start:
                raise ValueError(f"member {i}: snapshot {m.iterations} is beyond its run's "
                                 f"{run.base_end - run.base_start} iterations")
        linear = dict(linear or {})
        for i, r in enumerate(runs):
            if r.kind not in RUN_KINDS:
                raise ValueError(f"run {i} is of unknown kind {r.kind!r}")
            if not 0 <= r.base_start <= r.base_end <= forest.n_base:
                raise ValueError(f"run {r} lies outside the forest's {forest.n_base} bases")
            if r.kind == "linear":
                if r.base_end != r.base_start:
                    raise ValueError(f"linear run {i} must own no bases")
                if r.view not in VIEWS:
                    raise ValueError(f"linear run {i}: unknown view {r.view!r}")
                if r.view != "raw" and r.view not in extra_views:
                    raise ValueError(f"linear run {i} reads view {r.view!r}, which the model does not compute")
                if i not in linear:
                    raise ValueError(f"linear run {i} has no weights")
                linear[i] = check_linear(linear[i], view_width(r.view, int(n_features)), r.n_classes, f"run {i}")
        self.n_features = int(n_features)
        self.extra_views = tuple(extra_views)
        self.forest = forest
        self.runs = list(runs)
        self.members = list(members)
        self.mixer = mixer
        #: the relevance head (``tunemix.core.scoring.relevance_head``), set after training; None in
        #: an artifact without one
        self.relevance_head: RelevanceHead | None = None
        self.linear = {i: linear[i] for i, r in enumerate(runs) if r.kind == "linear"}
        forest_members = [m for m in members if runs[m.run].kind == "forest"]
        ck = sorted({runs[m.run].base_start for m in forest_members}
                    | {runs[m.run].base_start + m.iterations for m in forest_members})
        self._checkpoints = np.asarray(ck, dtype=np.int64)
        index = {c: i for i, c in enumerate(ck)}
        # linear runs some member reads: slabs after the checkpoints' running sums and a zero slab
        linear_runs = sorted({m.run for m in members if runs[m.run].kind == "linear"})
        zero_slab = len(ck)
        slab = {r: zero_slab + 1 + j for j, r in enumerate(linear_runs)}
        self._lo = np.array([index[runs[m.run].base_start] if runs[m.run].kind == "forest" else zero_slab
                             for m in members], dtype=np.int64)
        self._hi = np.array([index[runs[m.run].base_start + m.iterations] if runs[m.run].kind == "forest"
                             else slab[m.run] for m in members], dtype=np.int64)
        self._linear_runs = linear_runs
        # the ordinal step: each (snapshot, K-1) an ``ordinal+<spec>`` member reads gets a slab of
        # class probabilities after the linear slabs; the member's inner calibrator reads that
        # K-vector, so it is packed into the calibration kernels like any other
        self._ordinal: list[tuple[int, int, int]] = []
        self._cal_lo, self._cal_hi = self._lo.copy(), self._hi.copy()
        calibrators, n_classes = [], []
        for i, m in enumerate(members):
            k = runs[m.run].n_classes
            if isinstance(m.calibrator, OrdinalCalibrator):
                key = (int(self._lo[i]), int(self._hi[i]), k)
                if key not in self._ordinal:
                    self._ordinal.append(key)
                self._cal_lo[i] = zero_slab
                self._cal_hi[i] = zero_slab + 1 + len(linear_runs) + self._ordinal.index(key)
                calibrators.append(m.calibrator.inner)
                n_classes.append(k + 1)
            else:
                calibrators.append(m.calibrator)
                n_classes.append(k)
        # the ordinal slabs by class count: (k, slab indices, lo checkpoints, hi checkpoints)
        by_k: dict[int, list[int]] = {}
        for j, (_, _, k) in enumerate(self._ordinal):
            by_k.setdefault(k, []).append(j)
        self._ordinal_groups = []
        for k, js in sorted(by_k.items()):
            lo_hi = np.array([self._ordinal[j][:2] for j in js], dtype=np.int64)
            self._ordinal_groups.append((k, np.array(js, dtype=np.int64), lo_hi[:, 0], lo_hi[:, 1]))
        self._k_max = max([forest.n_outputs] + [runs[r].n_classes for r in linear_runs]
                          + [k + 1 for _, _, k in self._ordinal])
        self._fold_linear()
        self._calibration = CalibrationStep(calibrators, n_classes)
        # the slabs of ``_sums``: checkpoints, then (with linear or ordinal members) a zero slab,
        # the linear runs' and the ordinal snapshots' slabs
        self._n_slabs = len(ck) + (1 + len(linear_runs) + len(self._ordinal) if linear_runs or self._ordinal else 0)
        self._plan = self._calibration.plan(self._cal_lo, self._cal_hi, n_rows=self._n_slabs)

    def _fold_linear(self) -> None:
        """One (wide columns, sum of K_r) matrix and intercept for every linear run a member reads:
        ((x - mean) / scale) @ W + b = x @ (W / scale) + (b - (mean / scale) @ W); the rows of a
        normalised view's second half go to that view's block of wide columns."""
        d = self.n_features
        blocks = ["raw", *self.extra_views]
        widths = [self.runs[r].n_classes for r in self._linear_runs]
        self._linear_cols = np.concatenate([[0], np.cumsum(widths)]).astype(np.int64)
        w = np.zeros((d * len(blocks), int(self._linear_cols[-1])), dtype=np.float64)
        b = np.zeros(int(self._linear_cols[-1]), dtype=np.float64)
        # a missing column: its folded term (0 with NaN read as 0) and its share of b replaced by
        # the run's ``missing`` row: nan_w[c] = missing[c] + (mean[c] / scale[c]) W[c]
        nan_w = np.zeros_like(w)
        for j, r in enumerate(self._linear_runs):
            p = self.linear[r]
            c0, c1 = int(self._linear_cols[j]), int(self._linear_cols[j + 1])
            folded = p["weights"] / p["scale"][:, None]
            when_nan = p[LINEAR_MISSING] + (p["mean"] / p["scale"])[:, None] * p["weights"]
            w[0:d, c0:c1] = folded[:d]
            nan_w[0:d, c0:c1] = when_nan[:d]
            if self.runs[r].view != "raw":
                row0 = blocks.index(self.runs[r].view) * d
                w[row0 : row0 + d, c0:c1] = folded[d:]
                nan_w[row0 : row0 + d, c0:c1] = when_nan[d:]
            b[c0:c1] = p["intercept"] - (p["mean"] / p["scale"]) @ p["weights"]
        self._linear_w = w
        self._linear_b = b
        self._linear_nan_w = nan_w

    def _sums(self, wide: np.ndarray) -> np.ndarray:
        """The forest's running sums at the checkpoints, then (with linear or ordinal members) a zero
        slab, one slab per linear run and one slab of class probabilities per ordinal snapshot:
        (n, C [+ 1 + R + O], K_max). Every pass counts its rows against the active request's budget
        and checks its deadline (``tunemix.core.deadline``): the hook that cuts off long work, such as
        an explanation's coalitions, between batches."""
        charge_rows(wide.shape[0], "a forest pass")
        sums = score_forest(self.forest, wide, self._checkpoints)
        if not self._linear_runs and not self._ordinal:
            return sums
        n, c, r = wide.shape[0], self._checkpoints.shape[0], len(self._linear_runs)
        out = np.zeros((n, self._n_slabs, self._k_max), dtype=np.float64)
        out[:, :c, : sums.shape[2]] = sums
        if r:
            lin = self.linear_terms(wide)
            for j in range(r):
                c0, c1 = int(self._linear_cols[j]), int(self._linear_cols[j + 1])
                out[:, c + 1 + j, : c1 - c0] = lin[:, c0:c1]
        for k, slabs, los, his in self._ordinal_groups:  # one transform per class count
            g = (out[:, his, :k] - out[:, los, :k]).reshape(-1, k)
            out[:, c + 1 + r + slabs, : k + 1] = ordinal_probabilities(g).reshape(n, slabs.size, k + 1)
        return out

    def linear_terms(self, wide: np.ndarray) -> np.ndarray:
        """Every linear run's raw K-vectors side by side, (n, sum of K_r): ``wide @ W + b``, a
        missing value's term being its run's ``missing`` row (``LINEAR_MISSING``)."""
        w64 = wide.astype(np.float64)
        if not any_nan(wide):
            return w64 @ self._linear_w + self._linear_b
        nan = np.isnan(w64)
        w64[nan] = 0.0
        return w64 @ self._linear_w + self._linear_b + nan.astype(np.float64) @ self._linear_nan_w

    @property
    def n_members(self) -> int:
        return len(self.members)

    # ------------------------------------------------------------------ scoring
    def _check(self, features: npt.ArrayLike, query_offsets: npt.ArrayLike) -> tuple[np.ndarray, np.ndarray]:
        x = np.ascontiguousarray(features, dtype=np.float32)
        if x.ndim != 2 or x.shape[1] != self.n_features:
            raise ValueError(f"features must have shape (n, {self.n_features}), got {x.shape}")
        if np.isinf(x).any():  # NaN is a missing value (docs/missing-values.md)
            row = int(np.argmax(np.isinf(x).any(axis=1)))
            raise ValueError(f"features contain an infinity (row {row})")
        return x, validate_offsets(query_offsets, x.shape[0])

    def _wide(self, x: np.ndarray, off: np.ndarray,
              whitening: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] | None = None) -> np.ndarray:
        if not self.extra_views:
            return x
        # the views' blocks written into the forest's input as they are made: one float64 copy of
        # the features for every view, each block cast to float32 once (the cast ``astype`` makes)
        d = x.shape[1]
        wide = np.empty((x.shape[0], d * (1 + len(self.extra_views))), dtype=np.float32)
        wide[:, :d] = x
        x64 = x.astype(np.float64)

        def views(parts: int) -> None:
            for j, view in enumerate(self.extra_views, start=1):
                wide[:, j * d:(j + 1) * d] = (standardised(x64, off, parts=parts) if view == "raw+std"
                                              else whitened(x64, off, parts=parts, keep=whitening))

        # a long query's views on the scoring threads (the same bits as on one); lists of short
        # queries only stay off them
        longest = int((off[1:] - off[:-1]).max(initial=0))
        run_on_threads(x.shape[0], longest >= PARALLEL_MIN_DOCUMENTS, lambda: views(1), views)
        return wide

    def wide_features(self, features: npt.ArrayLike, query_offsets: npt.ArrayLike) -> np.ndarray:
        """The raw features followed by each extra view's block (the forest's input)."""
        return self._wide(*self._check(features, query_offsets))

    def raw_scores(self, features: npt.ArrayLike, query_offsets: npt.ArrayLike) -> list[np.ndarray]:
        """Each member's raw K-vector scores, (n, K_m)."""
        wide = self.wide_features(features, query_offsets)
        sums = self._sums(wide)
        out = []
        for m, lo, hi in zip(self.members, self._lo, self._hi, strict=True):
            k = self.runs[m.run].n_classes
            out.append(sums[:, hi, :k] - sums[:, lo, :k])
        return out

    def _raw_block(self, wide: np.ndarray) -> np.ndarray:
        """All members' raw scores at once, (n, M, K_max): one forest pass, one gather."""
        sums = self._sums(wide)
        return sums[:, self._hi, :] - sums[:, self._lo, :]

    def _calibrate(self, sums: np.ndarray) -> np.ndarray:
        """Member scores (n, M) from the running sums at the checkpoints (no raw block is built)."""
        return self._calibration.apply_plan(sums, self._plan)

    def member_scores(self, features: npt.ArrayLike, query_offsets: npt.ArrayLike) -> np.ndarray:
        """Calibrated member scores, (n, n_members), every calibrator family applied at once."""
        x, off = self._check(features, query_offsets)
        return self._calibrate(self._sums(self._wide(x, off)))

    def score(self, features: npt.ArrayLike, query_offsets: npt.ArrayLike,
              timings: dict[str, float] | None = None) -> np.ndarray:
        """The ensemble's score per document (higher ranks first), (n,).

        ``timings``, when given, receives the seconds spent in each stage: ``views``,
        ``forest``, ``calibrators``, ``mixer``.
        """
        x, off = self._check(features, query_offsets)
        if x.shape[0] == 0:
            return np.zeros(0, dtype=np.float64)
        return self._mixed(x, off, timings)[1]

    def _mixed(self, x: np.ndarray, off: np.ndarray, timings: dict[str, float] | None = None
               ) -> tuple[np.ndarray, np.ndarray]:
        """(calibrated member scores (n, M), mixed scores (n,)) of checked arrays."""
        p = self._pass(x, off, timings)
        return p.member, p.scores

    def _pass(self, x: np.ndarray, off: np.ndarray, timings: dict[str, float] | None = None,
              whitening: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] | None = None) -> ScoringPass:
        t0 = time.perf_counter()
        wide = self._wide(x, off, whitening)
        t1 = time.perf_counter()
        sums = self._sums(wide)
        t2 = time.perf_counter()
        member = self._calibrate(sums)
        t3 = time.perf_counter()
        out = np.asarray(self.mixer.transform(member, off), dtype=np.float64)
        if timings is not None:
            timings.update(views=t1 - t0, forest=t2 - t1, calibrators=t3 - t2, mixer=time.perf_counter() - t3)
        return ScoringPass(x, off, wide, member, out, whitening=whitening)

    def scoring_pass(self, features: npt.ArrayLike, query_offsets: npt.ArrayLike,
                     relevance: bool = False, whitening: bool = False) -> ScoringPass:
        """One scoring pass with what it computed on the way (``ScoringPass``): the scores as
        ``score`` gives them, and, with ``relevance``, the relevance head's estimates as
        ``score_and_relevance`` gives them; with ``whitening``, each query's whitening of the
        ``raw+white`` view. An explanation of the same arrays reuses it
        (``explain_rows(..., scoring=)``) instead of scoring the list again."""
        if relevance and self.relevance_head is None:
            raise ValueError("this model has no relevance head (trained without one, or before the current "
                             "head existed): retrain it")
        x, off = self._check(features, query_offsets)
        if x.shape[0] == 0:
            p = ScoringPass(x, off, np.zeros((0, 0), dtype=np.float32), np.zeros((0, self.n_members)),
                            np.zeros(0, dtype=np.float64))
        else:
            p = self._pass(x, off, whitening={} if whitening and "raw+white" in self.extra_views else None)
        if relevance:
            assert self.relevance_head is not None
            p.relevance = tuple(self.relevance_head.estimate(x, p.scores, off))
        return p

    def mix_weights(self) -> np.ndarray | None:
        """The mixer's member weights where it has them (the exponential forecaster), else None."""
        w = getattr(self.mixer, "weights_", None)
        return None if w is None else np.asarray(w, dtype=np.float64)

    def score_and_relevance(self, features: npt.ArrayLike, query_offsets: npt.ArrayLike
                            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(scores (n,), P(y = k) (n, K), E[y] (n,)) in one call: the mixed score as ``score``
        gives it and the relevance head's estimates, rank-matched to that score (ValueError when
        the model has no head)."""
        if self.relevance_head is None:
            raise ValueError("this model has no relevance head (trained without one, or before the current "
                             "head existed): retrain it")
        x, off = self._check(features, query_offsets)
        scores = self._mixed(x, off)[1] if x.shape[0] else np.zeros(0, dtype=np.float64)
        return (scores, *self.relevance_head.estimate(x, scores, off))

    def warm_up(self, *, serial: bool = True, parallel: bool = True) -> None:
        """Compile (or load from numba's cache) the kernels this model's scoring reaches: the
        one-thread paths with a short list (``serial``), and, when scoring may use several
        threads, the parallel paths of the views, the forest and the calibration step with a list
        long enough to take them (``parallel``). A service warms the one-thread paths before it
        says it is ready and the parallel ones after, scoring on one thread until they are warm.
        The parallel paths' list holds at most ``WARM_UP_MAX_VALUES`` feature values."""
        sizes = [4] if serial else []
        if parallel and runtime.get_scoring_threads() > 1:
            n_base = self.forest.n_base
            rows = max(-(-forest.PARALLEL_MIN_WORK // n_base) if n_base else 0,
                       -(-calibration_step.PARALLEL_MIN_WORK // max(self.n_members, 1)), 8,
                       runtime.get_parallel_min_documents(),
                       # two queries of PARALLEL_MIN_DOCUMENTS: the views' parallel kernels
                       2 * PARALLEL_MIN_DOCUMENTS if self.extra_views else 0)
            sizes.append(max(8, min(rows, WARM_UP_MAX_VALUES // self.n_features)))
        for n in sizes:
            x = np.zeros((n, self.n_features), dtype=np.float32)
            x[1::2] = 1.0
            self.score(x, np.array([0, n // 2, n], dtype=np.int64))

    # ------------------------------------------------------------------ storage
    def to_artifact(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """(JSON-able description, arrays) for :func:`tunemix.core.artifact.save_artifact`."""
        arrays: dict[str, np.ndarray] = {f"forest/{k}": v for k, v in self.forest.to_arrays().items()}
        for r, params in self.linear.items():
            for k in (*LINEAR_KEYS, LINEAR_MISSING):
                arrays[f"linear/{r}/{k}"] = params[k]
        members = []
        for i, m in enumerate(self.members):
            members.append({
                "name": m.name, "run": m.run, "iterations": m.iterations,
                "calibrator": split_arrays(m.calibrator.to_params(), f"members/{i}/calibrator", arrays),
            })
        doc = {
            "n_features": self.n_features,
            "extra_views": list(self.extra_views),
            "runs": [r.to_dict() for r in self.runs],
            "members": members,
            "mixer": split_arrays(self.mixer.to_params(), "mixer", arrays),
        }
        if self.relevance_head is not None:
            doc["relevance_head"], head_arrays = self.relevance_head.to_artifact()
            arrays.update(head_arrays)
        return doc, arrays

    @classmethod
    def from_artifact(cls, doc: dict[str, Any], arrays: dict[str, np.ndarray]) -> EnsembleModel:
        """Rebuild from :meth:`to_artifact` output; any inconsistency is an ArtifactError. Every size
        the description declares is held against its limit and the stored arrays first
        (:func:`check_declared_sizes`), before anything is allocated from it."""
        try:
            check_declared_sizes(doc, arrays)
            forest = FlatForest.from_arrays(
                {k.split("/", 1)[1]: v for k, v in arrays.items() if k.startswith("forest/")}
            )
            runs = [RunInfo(**r) for r in doc["runs"]]
            members = [
                Member(name=m["name"], run=int(m["run"]), iterations=int(m["iterations"]),
                       calibrator=calibrator_from_params(join_arrays(m["calibrator"], arrays)))
                for m in doc["members"]
            ]
            mixer = mixer_from_params(join_arrays(doc["mixer"], arrays))
            linear = {i: {k: arrays[f"linear/{i}/{k}"] for k in (*LINEAR_KEYS, LINEAR_MISSING)
                          if k in LINEAR_KEYS or f"linear/{i}/{k}" in arrays}
                      for i, r in enumerate(runs) if r.kind == "linear"}
            model = cls(n_features=int(doc["n_features"]), extra_views=doc["extra_views"], forest=forest,
                        runs=runs, members=members, mixer=mixer, linear=linear)
            head = doc.get("relevance_head")
            if isinstance(head, dict) and head.get("kind") == HEAD_KIND:
                model.relevance_head = RelevanceHead.from_artifact(head, arrays, model.n_features)
            elif head is not None:  # a head of another kind: the model ranks, without relevance
                log.warning("the model's relevance head (kind %r) is of an older kind and is not used: retrain "
                            "the model for relevance estimates", head.get("kind") if isinstance(head, dict) else head)
            return model
        except ArtifactError:
            raise
        except (KeyError, TypeError, ValueError) as exc:
            raise ArtifactError(f"the model description is invalid: {exc!r}") from None


def _declared_int(value: Any, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ArtifactError(f"{what} must be int, not {type(value).__name__}")
    return value


def _declared_columns(params: Any, path: str) -> list[tuple[str, Any]]:
    """Every ``n_columns_`` a calibrator's parameters declare (an ordinal calibrator's inner one
    too), with where."""
    found: list[tuple[str, Any]] = []
    stack = [(params, path)]
    while stack:
        value, where = stack.pop()
        if isinstance(value, dict):
            for key, item in value.items():
                if key == "n_columns_":
                    found.append((f"{where}.n_columns_", item))
                elif isinstance(item, dict):
                    stack.append((item, f"{where}.{key}"))
    return found


def check_declared_sizes(doc: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
    """The sizes a model description declares, each held against its limit and the arrays stored
    with it before anything is allocated from it (ArtifactError naming the field and the bound):

    - ``n_features``: 1 to ``MAX_FEATURES`` (at most ``MAX_WHITENED_FEATURES`` with the ``raw+white``
      view), and the forest's stored width (``forest/n_features``) that times the blocks of its
      distinct ``extra_views``; the forest's arrays then hold every feature index below it;
    - each run's ``n_classes``: at least 1, at most the forest's stored outputs (``leaf_values``
      columns) for a forest run, the columns of its stored ``weights`` for a linear one;
    - the members: at most ``MAX_MEMBERS``, each name at most ``MAX_NAME_CHARS`` characters, each
      ``n_columns_`` its calibrator declares at most its run's ``n_classes`` + 1 (an ordinal
      calibrator's inner one reads one column more);
    - the mixer's ``n_members``: the number of members.
    """
    n = check_width(_declared_int(doc.get("n_features"), "model.n_features"), "model.n_features")
    views = doc.get("extra_views")
    if (not isinstance(views, list) or not all(isinstance(v, str) and v in EXTRA_VIEWS for v in views)
            or len(set(views)) != len(views)):
        raise ArtifactError(f"model.extra_views must be distinct names among {', '.join(EXTRA_VIEWS)}")
    if "raw+white" in views and n > MAX_WHITENED_FEATURES:
        raise ArtifactError(f"model.n_features declares {n} features with the raw+white view; a whitened model "
                            f"takes at most {MAX_WHITENED_FEATURES} (MAX_WHITENED_FEATURES)")
    width = arrays.get("forest/n_features")
    if width is None or width.shape != () or int(width) != n * (1 + len(views)):
        raise ArtifactError(f"forest/n_features is {None if width is None else width.tolist()}; "
                            f"{n} features in {1 + len(views)} blocks make {n * (1 + len(views))}")
    leaves = arrays.get("forest/leaf_values")
    if leaves is None or leaves.ndim != 2:
        raise ArtifactError("forest/leaf_values is missing or not 2-D")
    runs, members = doc.get("runs"), doc.get("members")
    if not isinstance(runs, list) or not isinstance(members, list):
        raise ArtifactError("model.runs and model.members must be lists")
    if len(members) > MAX_MEMBERS:
        raise ArtifactError(f"model.members has {len(members)} members; at most {MAX_MEMBERS} (MAX_MEMBERS)")
    classes = []
    for i, run in enumerate(runs):
        if not isinstance(run, dict):
            raise ArtifactError(f"model.runs[{i}] must be an object")
        k = _declared_int(run.get("n_classes"), f"model.runs[{i}].n_classes")
        if run.get("kind", "forest") == "linear":
            weights = arrays.get(f"linear/{i}/weights")
            stored = weights.shape[1] if weights is not None and weights.ndim == 2 else None
            if k != stored:
                raise ArtifactError(f"model.runs[{i}].n_classes is {k}; it must be the columns of its stored "
                                    f"linear/{i}/weights ({stored})")
        elif not 1 <= k <= leaves.shape[1]:
            raise ArtifactError(f"model.runs[{i}].n_classes is {k}; it must be 1 to the forest's stored outputs "
                                f"({leaves.shape[1]})")
        classes.append(k)
    for i, m in enumerate(members):
        if not isinstance(m, dict):
            raise ArtifactError(f"model.members[{i}] must be an object")
        name = m.get("name")
        if not isinstance(name, str) or len(name) > MAX_NAME_CHARS:
            raise ArtifactError(f"model.members[{i}].name must be a string of at most {MAX_NAME_CHARS} characters "
                                "(MAX_NAME_CHARS)")
        run = _declared_int(m.get("run"), f"model.members[{i}].run")
        if not 0 <= run < len(classes):
            raise ArtifactError(f"model.members[{i}] refers to run {run}, but there are {len(classes)} runs")
        for where, value in _declared_columns(m.get("calibrator"), f"model.members[{i}].calibrator"):
            cols = _declared_int(value, where)
            if not 1 <= cols <= classes[run] + 1:
                raise ArtifactError(f"{where} is {cols}; its run has {classes[run]} columns, so at most "
                                    f"{classes[run] + 1}")
    mixer = doc.get("mixer")
    declared = _declared_int(mixer.get("n_members") if isinstance(mixer, dict) else None, "model.mixer.n_members")
    if declared != len(members):
        raise ArtifactError(f"model.mixer.n_members is {declared}; the model has {len(members)} members")


def slice_forest(forest: FlatForest, start: int, end: int) -> FlatForest:
    """The bases ``start:end`` of ``forest`` as a forest of their own (children are relative,
    so only the start offsets move)."""
    if not 0 <= start <= end <= forest.n_base:
        raise ValueError(f"slice {start}:{end} outside the forest's {forest.n_base} bases")
    ns0, ns1 = int(forest.base_node_start[start]), int(forest.base_node_start[end])
    ls0, ls1 = int(forest.base_leaf_start[start]), int(forest.base_leaf_start[end])
    return FlatForest.from_arrays({
        "base_kind": forest.base_kind[start:end],
        "base_node_start": forest.base_node_start[start : end + 1] - ns0,
        "base_leaf_start": forest.base_leaf_start[start : end + 1] - ls0,
        "node_feature": forest.node_feature[ns0:ns1],
        "node_threshold": forest.node_threshold[ns0:ns1],
        "node_left": forest.node_left[ns0:ns1],
        "node_right": forest.node_right[ns0:ns1],
        "node_missing_right": forest.node_missing_right[ns0:ns1],
        "leaf_values": forest.leaf_values[ls0:ls1],
        "n_features": np.array(forest.n_features),
    })


def prune(model: EnsembleModel) -> EnsembleModel:
    """The same ranker without what it never uses: members the mixer does not read
    (``Mixer.used_members``; the exponential forecaster's weight-0 members), runs no kept member
    uses, and each run's bases after its last kept snapshot.

    Scores are unchanged (up to float rounding of the running sums); scoring gets faster.
    """
    keep = np.flatnonzero(model.mixer.used_members())
    if keep.size == len(model.members) and all(
        r.base_end - r.base_start == max((m.iterations for m in model.members if m.run == i), default=0)
        for i, r in enumerate(model.runs)
    ):
        return model
    mixer = model.mixer.select_members(keep)
    members = [model.members[i] for i in keep]
    used_runs = sorted({m.run for m in members})
    new_index = {r: i for i, r in enumerate(used_runs)}
    pieces: list[FlatForest] = []
    runs: list[RunInfo] = []
    linear: dict[int, dict[str, np.ndarray]] = {}
    start = 0
    for r in used_runs:
        old = model.runs[r]
        length = max(m.iterations for m in members if m.run == r)
        if old.kind == "linear":
            linear[len(runs)] = model.linear[r]
        else:
            pieces.append(slice_forest(model.forest, old.base_start, old.base_start + length))
        runs.append(RunInfo(view=old.view, grouping=old.grouping, n_classes=old.n_classes, base_start=start,
                            base_end=start + length, learner=old.learner, kind=old.kind))
        start += length
    from tunemix.core.scoring.forest import concatenate

    forest = concatenate(pieces) if pieces else FlatForest.empty(model.forest.n_features, model.forest.n_outputs)
    new_members = [Member(name=m.name, run=new_index[m.run], iterations=m.iterations, calibrator=m.calibrator)
                   for m in members]
    views_used = [v for v in model.extra_views if any(r.view == v for r in runs)]
    if views_used != list(model.extra_views):
        # drop the columns of views no kept run reads
        d = model.n_features
        blocks = ["raw", *model.extra_views]
        keep_blocks = ["raw", *views_used]
        col_map = np.full(forest.n_features, -1, dtype=np.int64)
        for new_b, view in enumerate(keep_blocks):
            old_b = blocks.index(view)
            col_map[old_b * d : (old_b + 1) * d] = np.arange(new_b * d, (new_b + 1) * d)
        arrays = forest.to_arrays()
        arrays["node_feature"] = col_map[forest.node_feature].astype(np.int32)
        arrays["n_features"] = np.array(d * len(keep_blocks), dtype=np.int64)
        forest = FlatForest.from_arrays(arrays)
    return EnsembleModel(n_features=model.n_features, extra_views=views_used, forest=forest, runs=runs,
                         members=new_members, mixer=mixer, linear=linear)


def load_model(
    path: str | Path, name: str | None = None, *, max_bytes: int = MAX_ARRAYS_BYTES
) -> tuple[EnsembleModel, dict[str, Any]]:
    """Load a model version directory (or the latest version of ``name`` under a models directory).

    Returns (model, manifest). ``max_bytes``: the arrays' uncompressed total at most
    (:func:`~tunemix.core.artifact.load_artifact` checks it before reading any array). Never
    executes code from the files; any inconsistency raises
    :class:`~tunemix.core.artifact.ArtifactError`.
    """
    version_dir = resolve_artifact(path, name)
    manifest, arrays = load_artifact(version_dir, max_bytes=max_bytes)
    where = f"{version_dir.parent.name}/{version_dir.name}"
    doc = manifest.get("model")
    if not isinstance(doc, dict):
        raise ArtifactError(f"{where}: the manifest has no 'model' section (an object)")
    if doc.get("n_features") != manifest["n_features"]:
        raise ArtifactError(f"{where}: n_features {manifest['n_features']} disagrees with the model's "
                            f"{str(doc.get('n_features'))[:40]}")
    _check_feature_names(manifest.get("feature_names"), manifest["n_features"], where)
    try:
        model = EnsembleModel.from_artifact(doc, arrays)
    except ArtifactError as exc:
        raise ArtifactError(f"{where}: {exc}") from None
    except (KeyError, TypeError, AttributeError, IndexError, ValueError) as exc:
        # a manifest that parses but does not describe a model (a field missing or of a wrong type)
        raise ArtifactError(f"{where}: the model section cannot be read ({type(exc).__name__}: {exc})") from None
    return model, manifest


def _check_feature_names(names: Any, n_features: int, where: str) -> None:
    """The manifest's ``feature_names``, when it has them: ``n_features`` distinct non-empty strings of
    at most ``MAX_NAME_CHARS`` characters."""
    if names is None:
        return
    if (not isinstance(names, list) or len(names) != n_features
            or not all(isinstance(v, str) and 0 < len(v) <= MAX_NAME_CHARS for v in names)
            or len(set(names)) != n_features):
        raise ArtifactError(f"{where}: the manifest's feature_names must be {n_features} distinct non-empty strings "
                            f"of at most {MAX_NAME_CHARS} characters (MAX_NAME_CHARS)")
