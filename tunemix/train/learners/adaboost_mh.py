"""Discrete multi-class AdaBoost.MH with stumps, Hamming trees or stump products.

Schapire and Singer, "Improved boosting algorithms using confidence-rated predictions" (1999);
Busa-Fekete, Kégl, Éltető, Szarvas, "Tune and mix", Machine Learning 2013 (section 3, appendix
A); method page section 3.1. With targets ``y[i,l] = +1`` iff l is row i's class, weights
``w[i,l]`` summing to 1 and a base classifier ``h(x) = alpha * v * phi(x)`` (v in {-1,+1}^K,
phi in {-1,+1}; a tree's vote depends on its leaf), each iteration

    gamma = sum_{i,l} w[i,l] v_l phi(x_i) y[i,l]          (the edge)
    alpha = 0.5 ln((1 + gamma) / (1 - gamma))
    w[i,l] <- w[i,l] exp(-alpha v_l phi(x_i) y[i,l]) / Z   (Z renormalises to sum 1)

and the strong classifier is ``f(x) = sum_t alpha_t v_t phi_t(x)`` (a K-vector of scores).

Initial weights: "exponential" (default, the paper's ranking choice) ``w[i,l] = 2^{l_i}`` if l
is i's class else ``2^{l_i} / (K-1)``, normalised; "standard" ``1/(2n)`` and ``1/(2n(K-1))``.
``l_i`` is the original relevance label (before any label grouping), so that a grouped class
still weighs its documents by relevance.

Degenerate cases (documented choices):

- an edge with ``1 - gamma < 1e-10`` (a perfect base classifier): alpha is capped at
  ``ALPHA_MAX`` (0.5 ln((2 - 1e-10) / 1e-10), about 11.86), the base is kept and boosting stops
  (``stop_reason_ == "perfect"``);
- an edge ``<= 0`` from the bandit's arms: that iteration falls back to a full search; if the
  full search's edge is also ``<= 0`` boosting stops (``"no_edge"``);
- constant features are never searched; if every feature is constant no base can be built and
  the model is empty (all scores 0, ``"no_split"``);
- a single class present: K is still the number of labels (or groups), at least 2; the
  absent classes' targets are all -1 and boosting proceeds (it usually stops as "perfect").

Features are binned once per run (``tunemix/train/data/binning.py``), or ``fit`` is given the shared
codes of the pipeline's binning stage (a ``tunemix.train.data.binned.BinnedView``: no binning of its
own); thresholds are exported as float32 feature values, so the fitted model scores raw features
through ``tunemix.core.scoring.forest``.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from tunemix.core.scoring.forest import KIND_PRODUCT, KIND_TREE, FlatForest, score_forest
from tunemix.train.data.binned import BinnedView
from tunemix.train.data.binning import FeatureBins, fit_bins
from tunemix.train.learners.bandits import FeatureBandit, FullSearch, make_bandit
from tunemix.train.learners.hamming_tree import HammingTreeSearch
from tunemix.train.learners.label_groups import LabelGrouping, get_grouping, identity_grouping
from tunemix.train.learners.stump_product import StumpProductSearch
from tunemix.train.learners.stump_search import (
    ALPHA_MAX,
    MISSING_LEFT,
    NO_MISSING,
    alpha_of_edge,
    base_edge,
    boost_update,
)

logger = logging.getLogger(__name__)

#: Hamming trees on a full search are boosted in chunks of iterations, one GIL-free numba call a
#: chunk (``AdaBoostMH._boost_in_chunks``); False: one Python iteration at a time (the reference
#: the tests compare the chunks with)
CHUNKED_FULL_SEARCH = True
#: a chunk's iterations are sized to take about this long (the time budget is checked between chunks)
CHUNK_SECONDS = 0.2
CHUNK_MAX = 256

DEFAULT_CHECKPOINTS = (10, 30, 100, 300, 1000, 3000, 10000, 30000, 100000, 300000, 1000000)


@dataclass(frozen=True)
class FitProgress:
    """Reported to ``fit``'s callback after every iteration."""

    iteration: int  # base classifiers so far (1-based)
    edge: float
    alpha: float
    training_error: float  # fraction of rows whose argmax score is not their class
    elapsed_s: float


@dataclass
class _Base:
    kind: int
    feature: npt.NDArray[np.int32]
    threshold: npt.NDArray[np.float32]
    left: npt.NDArray[np.int32]
    right: npt.NDArray[np.int32]
    leaf_values: npt.NDArray[np.float64]
    missing_right: npt.NDArray[np.int8]


def split_thresholds(edges: npt.NDArray[np.float32], feature: npt.NDArray[np.int32], bins: npt.NDArray[np.integer]
                     ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.int8]]:
    """(thresholds, missing goes right) of splits found in bin space (``stump_search.best_split``'s
    encoded bins): the real lower edge of the bin, +inf for the split that sends every present
    value left and the missing ones right."""
    b = np.asarray(bins, dtype=np.int64)
    left = b >= MISSING_LEFT
    b = np.where(b >= NO_MISSING, b - NO_MISSING, np.where(left, b - MISSING_LEFT, b))
    padded = np.concatenate([edges, np.full((edges.shape[0], 1), np.inf, np.float32)], axis=1)
    return padded[feature, b - 1].astype(np.float32), (~left).astype(np.int8)


def alpha_from_edge(edge: float) -> float:
    """``0.5 ln((1 + gamma) / (1 - gamma))``, capped at ``ALPHA_MAX`` for a perfect edge
    (``stump_search.alpha_of_edge``, the kernel ``boost_trees`` calls too)."""
    return float(alpha_of_edge(edge))


def boosts_in_chunks(base: str, search: str) -> bool:
    """Whether ``fit`` boosts in GIL-free chunks (``AdaBoostMH._boost_in_chunks``): Hamming trees
    on a full search, while ``CHUNKED_FULL_SEARCH``."""
    return CHUNKED_FULL_SEARCH and base == "tree" and search == "full"


def _tree_base(edges: npt.NDArray[np.float32], feature: npt.NDArray[np.int32], bins: npt.NDArray[np.int32],
               left: npt.NDArray[np.int32], right: npt.NDArray[np.int32],
               leaf_values: npt.NDArray[np.float64]) -> _Base:
    """A Hamming tree found in bin space as a base: its thresholds the real bin edges (float32)."""
    threshold, missing_right = split_thresholds(edges, feature, bins)
    return _Base(kind=KIND_TREE, feature=feature, threshold=threshold,
                 left=left, right=right, leaf_values=leaf_values, missing_right=missing_right)


def initial_signed_weights(labels: npt.NDArray[np.int64], classes: npt.NDArray[np.int64],
                           n_classes: int, policy: str) -> npt.NDArray[np.float64]:
    """``s[i,l] = w[i,l] y[i,l]`` at iteration 1 for the "exponential" or "standard" policy."""
    n = labels.shape[0]
    K = n_classes
    if policy == "exponential":
        row = np.exp2((labels - labels.max()).astype(np.float64)) if n else np.zeros(0)
    elif policy == "standard":
        row = np.ones(n)
    else:
        raise ValueError(f"initial_weights must be 'exponential' or 'standard', got {policy!r}")
    s = np.repeat((-row / (K - 1))[:, None], K, axis=1)
    s[np.arange(n), classes] = row
    total = np.abs(s).sum()
    return np.ascontiguousarray(s / total)


class AdaBoostMH:
    """AdaBoost.MH (see module docstring); scikit-learn style, keyword-only parameters.

    Parameters: ``n_iterations`` (T), ``base`` ("stump" | "tree" | "product"), ``n_leaves``
    (trees), ``n_terms`` (products), ``search`` ("full" | "ucb1" | "exp3p"), ``n_arms``
    (features searched per iteration by a bandit; default ceil(sqrt(d))), ``n_bins`` (at most
    256), ``initial_weights`` ("exponential" | "standard"), ``checkpoints`` (iteration counts whose
    snapshots are kept; default 10, 30, 100, 300, 1000, ... below T, plus the last),
    ``time_budget_s`` (stop after the iteration that exceeds it), ``seed``.
    """

    def __init__(
        self,
        *,
        n_iterations: int = 100,
        base: str = "tree",
        n_leaves: int = 8,
        n_terms: int = 3,
        search: str = "full",
        n_arms: int | None = None,
        n_bins: int = 256,
        initial_weights: str = "exponential",
        checkpoints: Sequence[int] | None = None,
        time_budget_s: float | None = None,
        seed: int | None = 0,
    ) -> None:
        self.n_iterations = n_iterations
        self.base = base
        self.n_leaves = n_leaves
        self.n_terms = n_terms
        self.search = search
        self.n_arms = n_arms
        self.n_bins = n_bins
        self.initial_weights = initial_weights
        self.checkpoints = checkpoints
        self.time_budget_s = time_budget_s
        self.seed = seed

    # ------------------------------------------------------------------ checks
    def _check_params(self) -> None:
        for name in ("n_iterations", "n_leaves", "n_terms", "n_bins"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int | np.integer):
                raise TypeError(f"{name} must be an integer, got {type(v).__name__}")
        if self.n_iterations < 1:
            raise ValueError(f"n_iterations must be >= 1, got {self.n_iterations}")
        if self.base not in ("stump", "tree", "product"):
            raise ValueError(f"base must be 'stump', 'tree' or 'product', got {self.base!r}")
        if self.n_leaves < 2:
            raise ValueError(f"n_leaves must be >= 2, got {self.n_leaves}")
        if self.n_terms < 1:
            raise ValueError(f"n_terms must be >= 1, got {self.n_terms}")
        if self.search not in ("full", "ucb1", "exp3p"):
            raise ValueError(f"search must be 'full', 'ucb1' or 'exp3p', got {self.search!r}")
        if self.n_arms is not None and (isinstance(self.n_arms, bool) or int(self.n_arms) < 1):
            raise ValueError(f"n_arms must be a positive integer or None, got {self.n_arms!r}")
        if self.initial_weights not in ("exponential", "standard"):
            raise ValueError("initial_weights must be 'exponential' or 'standard', got "
                             f"{self.initial_weights!r}")
        if self.time_budget_s is not None and not self.time_budget_s > 0:
            raise ValueError(f"time_budget_s must be positive or None, got {self.time_budget_s}")

    def _check_fitted(self) -> None:
        if not hasattr(self, "forest_"):
            raise ValueError("this AdaBoostMH is not fitted yet; call fit(X, y) first")

    # --------------------------------------------------------------------- fit
    def fit(
        self,
        X: npt.ArrayLike | BinnedView,
        y: npt.ArrayLike,
        *,
        label_grouping: LabelGrouping | str | None = None,
        callback: Callable[[FitProgress], None] | None = None,
    ) -> AdaBoostMH:
        """Boost on features ``X`` (n, d; or a ``BinnedView`` of their codes) and relevance labels
        ``y`` (n,) 0..; returns self.

        ``label_grouping`` (a ``LabelGrouping`` or a standard name such as "binary") trains on
        grouped classes; ``callback`` receives a ``FitProgress`` after every iteration.
        """
        t0 = time.perf_counter()
        self._check_params()
        binned = X if isinstance(X, BinnedView) else None
        if binned is not None:  # the shared codes (tunemix.train.data.binned): no binning of its own
            n, d = binned.n_docs, binned.width
            if n == 0 or d == 0:
                raise ValueError(f"X must have at least one row and one column, got {n} x {d} codes")
        else:
            Xa = np.ascontiguousarray(X, dtype=np.float32)
            if Xa.ndim != 2:
                raise ValueError(f"X must be 2-D (n, d), got shape {Xa.shape}")
            n, d = Xa.shape
            if n == 0 or d == 0:
                raise ValueError(f"X must have at least one row and one column, got shape {Xa.shape}")
            if np.isinf(Xa).any():  # NaN is a missing value: its own bin, a learned direction per split
                row = int(np.argmax(np.isinf(Xa).any(axis=1)))
                raise ValueError(f"X contains an infinity (row {row})")
        ya = np.asarray(y)
        if ya.shape != (n,):
            raise ValueError(f"y must have shape ({n},), got {ya.shape}")
        if ya.dtype.kind == "f" and np.any(ya != np.round(ya)):
            raise ValueError("y must hold integer relevance labels")
        if ya.dtype.kind not in "iuf":
            raise TypeError(f"y must hold integer relevance labels, got dtype {ya.dtype}")
        labels = ya.astype(np.int64)
        if labels.min() < 0:
            raise ValueError(f"y must be non-negative, found {int(labels.min())}")
        n_labels = int(labels.max()) + 1
        if label_grouping is None:
            grouping = identity_grouping(max(n_labels, 2))
        elif isinstance(label_grouping, str):
            grouping = get_grouping(label_grouping, max(n_labels, 2))
        elif isinstance(label_grouping, LabelGrouping):
            grouping = label_grouping
        else:
            raise TypeError("label_grouping must be a LabelGrouping, a grouping name or None")
        classes = grouping.apply(labels).astype(np.int64)
        K = grouping.n_classes
        if K < 2:
            raise ValueError(f"label grouping {grouping.name!r} has one class; need at least 2")

        self.n_features_in_ = d
        self.n_classes_ = K
        self.label_grouping_ = grouping
        self.class_gains_ = grouping.class_gains(labels)
        if binned is not None:
            self.bins_: FeatureBins = binned.bins
            codes = binned.contiguous_codes()
        else:
            self.bins_ = fit_bins(Xa, int(self.n_bins), seed=int(self.seed or 0))
            codes = self.bins_.transform_columns(Xa)
        usable = np.flatnonzero(self.bins_.n_bins >= 2).astype(np.int64)
        nbins_all = self.bins_.n_bins.astype(np.int64)
        s = initial_signed_weights(labels, classes, K, self.initial_weights)
        F = np.zeros((n, K))
        bases: list[_Base] = []
        alphas: list[float] = []
        edges: list[float] = []
        errors: list[float] = []
        self.stop_reason_ = "n_iterations"
        T = int(self.n_iterations)
        if usable.size == 0:
            self.stop_reason_ = "no_split"
            T = 0
        n_pulls = int(self.n_arms) if self.n_arms is not None else math.ceil(math.sqrt(usable.size))
        bandit: FeatureBandit = make_bandit(self.search, max(usable.size, 1), n_pulls, max(T, 1),
                                            self.seed)
        full = FullSearch(max(usable.size, 1))
        max_bins = int(self.bins_.max_bins)
        tree_search = (HammingTreeSearch(codes, K, self.n_leaves, max_bins)
                       if self.base == "tree" else None)
        prod_search = (StumpProductSearch(codes, K, 1 if self.base == "stump" else self.n_terms,
                                          max_bins) if self.base != "tree" else None)
        if tree_search is not None and boosts_in_chunks(self.base, self.search):
            self._boost_in_chunks(tree_search, s, F, classes, usable, nbins_all[usable], T,
                                  bases, alphas, edges, errors, callback, t0)
            T = 0  # the chunks, without the GIL, did the loop's iterations
        for t in range(T):
            arms = bandit.select()
            fitted = self._fit_base(codes, s, usable[arms], nbins_all[usable[arms]],
                                    tree_search, prod_search)
            if fitted is not None:
                bandit.update(arms, fitted[3])
            if (fitted is None or fitted[4] <= 0.0) and not isinstance(bandit, FullSearch):
                arms = full.select()
                fitted = self._fit_base(codes, s, usable, nbins_all[usable], tree_search,
                                        prod_search)
            if fitted is None or fitted[4] <= 0.0:
                self.stop_reason_ = "no_edge" if fitted is not None else "no_split"
                break
            base, row_leaf, votes, _, edge = fitted
            alpha = alpha_from_edge(edge)
            err = boost_update(s, F, classes, row_leaf, votes, alpha)
            base.leaf_values = base.leaf_values * alpha
            bases.append(base)
            alphas.append(alpha)
            edges.append(edge)
            errors.append(float(err))
            elapsed = time.perf_counter() - t0
            if callback is not None:
                callback(FitProgress(iteration=t + 1, edge=edge, alpha=alpha,
                                     training_error=float(err), elapsed_s=elapsed))
            if alpha >= ALPHA_MAX:
                self.stop_reason_ = "perfect"
                break
            if self.time_budget_s is not None and elapsed >= self.time_budget_s:
                self.stop_reason_ = "time_budget"
                break
        self.alphas_ = np.array(alphas)
        self.edges_ = np.array(edges)
        self.train_error_ = np.array(errors)
        self.n_iterations_ = len(bases)
        self.train_scores_ = F
        self.forest_ = self._build_forest(bases, d, K)
        requested = DEFAULT_CHECKPOINTS if self.checkpoints is None else self.checkpoints
        ck = {int(c) for c in requested if 1 <= int(c) <= self.n_iterations_}
        ck.add(self.n_iterations_)
        self.checkpoints_ = sorted(ck)
        self.fit_time_s_ = time.perf_counter() - t0
        logger.info("AdaBoostMH: %d iterations (%s) in %.2fs, final training error %.4f",
                    self.n_iterations_, self.stop_reason_, self.fit_time_s_,
                    errors[-1] if errors else float("nan"))
        return self

    def _boost_in_chunks(self, search: HammingTreeSearch, s: npt.NDArray[np.float64], F: npt.NDArray[np.float64],
                         classes: npt.NDArray[np.int64], feats: npt.NDArray[np.int64],
                         feat_nbins: npt.NDArray[np.int64], T: int, bases: list[_Base], alphas: list[float],
                         edges: list[float], errors: list[float],
                         callback: Callable[[FitProgress], None] | None, t0: float) -> None:
        """The loop of ``fit`` for Hamming trees on a full search, a chunk of iterations a call to
        ``boost_trees`` (one numba call that holds no GIL: the run trains beside threads that run
        Python, SciPy's import among them, without waiting for the GIL every iteration). The
        trees, weights and records are the loop's to the last bit; the callback is called for each
        iteration after its chunk, and the time budget is checked after each chunk (a chunk is
        sized to take about ``CHUNK_SECONDS``)."""
        edges_of = self.bins_.edges
        size, t = 1, 0
        while t < T:
            started = time.perf_counter()
            c = search.boost(s, F, classes, feats, feat_nbins, min(size, T - t))
            took = time.perf_counter() - started
            elapsed = time.perf_counter() - t0
            for j in range(c.done):
                nn = int(c.n_nodes[j])
                bases.append(_tree_base(edges_of, c.feature[j, :nn].copy(), c.bin[j, :nn], c.left[j, :nn].copy(),
                                        c.right[j, :nn].copy(), c.votes[j, :int(c.n_leaves[j])] * c.alpha[j]))
                alphas.append(float(c.alpha[j]))
                edges.append(float(c.edge[j]))
                errors.append(float(c.error[j]))
                if callback is not None:
                    callback(FitProgress(iteration=t + j + 1, edge=edges[-1], alpha=alphas[-1],
                                         training_error=errors[-1], elapsed_s=elapsed))
            t += c.done
            if c.stop:
                self.stop_reason_ = {1: "no_split", 2: "no_edge", 3: "perfect"}[int(c.stop)]
                return
            if self.time_budget_s is not None and elapsed >= self.time_budget_s:
                self.stop_reason_ = "time_budget"
                return
            size = max(1, min(CHUNK_MAX, int(CHUNK_SECONDS * c.done / max(took, 1e-9))))

    def _fit_base(self, codes: npt.NDArray[np.uint8], s: npt.NDArray[np.float64],
                  feats: npt.NDArray[np.int64], feat_nbins: npt.NDArray[np.int64],
                  tree_search: HammingTreeSearch | None,
                  prod_search: StumpProductSearch | None,
                  ) -> tuple[_Base, npt.NDArray[np.int32], npt.NDArray[np.float64],
                             npt.NDArray[np.float64], float] | None:
        """One base classifier: (base with unit-alpha leaves, row_leaf, votes, arm scores, edge).

        The arm scores are (searches, len(feats)): a row per tree node or product term, each
        the best split score of every searched feature there (the bandit's rewards).
        """
        edges = self.bins_.edges
        if self.base == "tree":
            assert tree_search is not None
            tf = tree_search.fit(s, feats, feat_nbins)
            if tf.node_feature.shape[0] == 0:
                return None
            base = _tree_base(edges, tf.node_feature.copy(), tf.node_bin, tf.node_left, tf.node_right,
                              tf.votes.copy())
            # bandit rewards: every inner node's search, not only the root's
            row_leaf, votes, arm_edges = tf.row_leaf, tf.votes, tf.node_gains
        else:
            assert prod_search is not None
            pf = prod_search.fit(s, feats, feat_nbins)
            if pf is None:
                return None
            votes = np.stack([-pf.vote, pf.vote])
            row_leaf, arm_edges = pf.row_leaf, pf.term_edges  # every term's first-pass search
            thr, nan_right = split_thresholds(edges, pf.term_feature, pf.term_bin)
            if self.base == "stump":
                base = _Base(kind=KIND_TREE, feature=pf.term_feature, threshold=thr,
                             left=np.array([-1], np.int32), right=np.array([-2], np.int32),
                             leaf_values=votes.copy(), missing_right=nan_right)
            else:
                m = pf.term_feature.shape[0]
                base = _Base(kind=KIND_PRODUCT, feature=pf.term_feature, threshold=thr,
                             left=np.full(m, -1, np.int32), right=np.full(m, -1, np.int32),
                             leaf_values=pf.vote[None, :].copy(), missing_right=nan_right)
        edge = float(base_edge(s, row_leaf, votes))
        return base, row_leaf, votes, arm_edges, edge

    @staticmethod
    def _build_forest(bases: list[_Base], d: int, K: int) -> FlatForest:
        if not bases:
            return FlatForest.empty(d, K)
        node_counts = [b.feature.shape[0] for b in bases]
        leaf_counts = [b.leaf_values.shape[0] for b in bases]
        return FlatForest.from_arrays({
            "base_kind": np.array([b.kind for b in bases], dtype=np.int8),
            "base_node_start": np.concatenate(([0], np.cumsum(node_counts))),
            "base_leaf_start": np.concatenate(([0], np.cumsum(leaf_counts))),
            "node_feature": np.concatenate([b.feature for b in bases]),
            "node_threshold": np.concatenate([b.threshold for b in bases]),
            "node_left": np.concatenate([b.left for b in bases]),
            "node_right": np.concatenate([b.right for b in bases]),
            "node_missing_right": np.concatenate([b.missing_right for b in bases]),
            "leaf_values": np.concatenate([b.leaf_values for b in bases], axis=0),
            "n_features": np.array(d),
        })

    # ----------------------------------------------------------------- predict
    def to_forest(self) -> FlatForest:
        """The fitted model as a ``FlatForest`` (leaf values include alpha)."""
        self._check_fitted()
        return self.forest_

    def decision_function(self, X: npt.ArrayLike, iterations: int | None = None
                          ) -> npt.NDArray[np.float64]:
        """``f(x)`` (n, K) after ``iterations`` base classifiers (default: all)."""
        self._check_fitted()
        it = self.n_iterations_ if iterations is None else int(iterations)
        if not 0 <= it <= self.n_iterations_:
            raise ValueError(f"iterations must be in 0..{self.n_iterations_}, got {iterations}")
        return score_forest(self.forest_, self._check_X(X), [it])[:, 0, :]

    def staged_decision_function(self, X: npt.ArrayLike,
                                 checkpoints: Sequence[int] | None = None
                                 ) -> npt.NDArray[np.float64]:
        """Snapshot scores (n, len(checkpoints), K), default at ``checkpoints_``, in one pass."""
        self._check_fitted()
        ck = self.checkpoints_ if checkpoints is None else list(checkpoints)
        return score_forest(self.forest_, self._check_X(X), ck)

    def _check_X(self, X: npt.ArrayLike) -> npt.NDArray[np.float32]:
        Xa = np.ascontiguousarray(X, dtype=np.float32)
        if Xa.ndim != 2 or Xa.shape[1] != self.n_features_in_:
            raise ValueError(f"X must have shape (n, {self.n_features_in_}), got {Xa.shape}")
        return Xa
