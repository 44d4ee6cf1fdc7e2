"""The relevance head: what a ranking score means. For every scored document, the probability of
each grade, P(y = k), and the expected grade E[y], in agreement with the ranking and comparable
across queries.

The mixed score orders a list; on its own it says nothing across queries (the shipped
configuration mixes per-query z-scores). The head answers with two steps:

1. **Absolute probabilities.** A few McRank models (multi-class gradient-boosted trees, method
   section 3.3: P(k | x) = softmax of K additive scores) trained for this purpose on the whole
   training set (fit and calibration parts), each stopped early on the validation queries' log
   loss, their class probabilities averaged. A multi-class likelihood model's probabilities
   mean the same in every query: among documents given P(y >= 1) = 0.8, about 80% are relevant.
   Trained by ``tunemix.train.relevance.fit``, stored as one :class:`FlatForest` (the
   models one after another; ``bounds`` are their base counts) and scored by our kernel.
2. **Rank matching.** Within each query, every cumulative probability P(y >= k) of the query's
   documents is sorted high to low and handed out in the ranking's order: the best-ranked
   document gets the query's largest P(y >= 1), the second the second largest, and so on;
   documents with equal scores (tied in the ranking) share the mean of their values. So within
   a query no document ranked higher ever gets a lower P(y >= k) or a lower E[y], the list's
   order is exactly the ranking's, and each query keeps its own set of probabilities (how many
   relevant documents it holds, what the trees say of its candidates). Sorting each column
   keeps P(y >= 1) >= P(y >= 2) >= ... for every document, so P(y = k) = P(y >= k) - P(y >= k + 1)
   are probabilities that sum to 1. Where the ensemble ranks better than the trees alone (the
   point of the mix), the probabilities follow the better order.
3. **Recalibration, when it pays.** Trees that separate the grades less well than the mix ranks
   them hand out probabilities too cautious for the order rank matching gives them. The trainer tries a
   per-grade logistic map P'(y >= k) = sigmoid(a_k logit P(y >= k) + b_k) (a_k > 0) on the
   validation queries and keeps it only when it lowers the held-out log loss in a five-fold
   cross-validation over those queries by more than two standard errors
   (``tunemix.train.relevance.fit``); a running minimum over k keeps
   P'(y >= 1) >= P'(y >= 2) >= ... Positive slopes keep the ranking's order and its ties.

``rank_match`` is the vectorised step 2; the tests hold it against a per-query loop. This module
is numpy and the scoring kernel only (the service's side).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from tunemix.core.calibration.expected_relevance import softmax_probabilities
from tunemix.core.scoring.forest import FlatForest, score_forest

FloatArray = npt.NDArray[np.float64]

#: the ``kind`` of the stored head; an artifact with another (an older head) loads without a head
HEAD_KIND = "rank_matched_mcrank"


def cumulative_from_probabilities(probs: FloatArray) -> FloatArray:
    """P(y >= k) for k = 1..K-1, (n, K-1), from P(y = k), (n, K)."""
    out: FloatArray = np.cumsum(probs[:, ::-1], axis=1)[:, ::-1][:, 1:]
    return np.clip(out, 0.0, 1.0)


def probabilities_from_cumulative(cum: FloatArray) -> FloatArray:
    """P(y = k) for k = 0..K-1, (n, K), from non-increasing rows of P(y >= k), k = 1..K-1."""
    n = cum.shape[0]
    upper = np.concatenate([np.ones((n, 1)), cum], axis=1)
    lower = np.concatenate([cum, np.zeros((n, 1))], axis=1)
    out: FloatArray = np.clip(upper - lower, 0.0, 1.0)
    return out


def logit(p: FloatArray) -> FloatArray:
    """log(p / (1 - p)), p clipped to [1e-12, 1 - 1e-12]."""
    q = np.clip(p, 1e-12, 1.0 - 1e-12)
    out: FloatArray = np.log(q) - np.log1p(-q)
    return out


def sigmoid(z: FloatArray) -> FloatArray:
    """1 / (1 + exp(-z)), overflow-free."""
    out: FloatArray = 0.5 * (1.0 + np.tanh(0.5 * z))
    return out


def recalibrated(cum: FloatArray, slopes: FloatArray, intercepts: FloatArray) -> FloatArray:
    """sigmoid(slopes_k logit P(y >= k) + intercepts_k), then a running minimum over k."""
    out: FloatArray = np.minimum.accumulate(sigmoid(logit(cum) * slopes[None, :] + intercepts[None, :]), axis=1)
    return out


def rank_match(values: npt.ArrayLike, scores: npt.ArrayLike, query_offsets: npt.ArrayLike) -> FloatArray:
    """Each column of ``values`` (n, m) sorted high to low within each query and handed out in the
    order of ``scores`` (higher first); documents of one query with equal scores get the mean of
    what they were handed. Each query keeps its multiset of values per column (up to the tie means)."""
    v = np.asarray(values, dtype=np.float64)
    s = np.asarray(scores, dtype=np.float64)
    off = np.asarray(query_offsets, dtype=np.int64)
    n = s.shape[0]
    out = np.empty_like(v)
    if n == 0:
        return out
    qid = np.repeat(np.arange(off.shape[0] - 1), np.diff(off))
    order = np.lexsort((-s, qid))  # by query, then score high to low
    for j in range(v.shape[1]):
        out[order, j] = v[np.lexsort((-v[:, j], qid)), j]
    s_sorted, q_sorted = s[order], qid[order]
    starts = np.concatenate([[True], (q_sorted[1:] != q_sorted[:-1]) | (s_sorted[1:] != s_sorted[:-1])])
    if not starts.all():  # ties: the mean over each run of equal scores
        group = np.cumsum(starts) - 1
        counts = np.bincount(group).astype(np.float64)
        for j in range(v.shape[1]):
            out[order, j] = (np.bincount(group, weights=out[order, j]) / counts)[group]
    return out


@dataclass(frozen=True)
class RelevanceHead:
    """The fitted head: ``forest`` holds the models one after another (``bounds[i]`` to
    ``bounds[i + 1]`` bases are model i, each with ``n_grades`` outputs) over the raw features;
    ``models`` records each model's settings and iterations (plain data, for the record)."""

    n_grades: int
    forest: FlatForest
    bounds: npt.NDArray[np.int64]
    models: list[dict[str, Any]] = field(default_factory=list)
    #: the per-grade logistic map of step 3 (slopes a_k > 0, intercepts b_k; K-1 each), or None
    slopes: FloatArray | None = None
    intercepts: FloatArray | None = None

    def __post_init__(self) -> None:
        b = self.bounds
        if self.n_grades < 2:
            raise ValueError(f"relevance head: {self.n_grades} grades, at least 2 are needed")
        if self.forest.n_outputs != self.n_grades:
            raise ValueError(f"relevance head: the forest has {self.forest.n_outputs} outputs, "
                             f"expected one per grade ({self.n_grades})")
        if b.ndim != 1 or b.shape[0] < 2 or b[0] != 0 or b[-1] != self.forest.n_base or np.any(np.diff(b) <= 0):
            raise ValueError(f"relevance head: model bounds {b.tolist()} must rise from 0 to the forest's "
                             f"{self.forest.n_base} bases")
        if (self.slopes is None) != (self.intercepts is None):
            raise ValueError("relevance head: recalibration needs both slopes and intercepts")
        if self.slopes is not None and self.intercepts is not None:
            shape = (self.n_grades - 1,)
            if self.slopes.shape != shape or self.intercepts.shape != shape:
                raise ValueError(f"relevance head: recalibration slopes and intercepts must have shape {shape}")
            finite = np.all(np.isfinite(self.slopes)) and np.all(np.isfinite(self.intercepts))
            if not (finite and np.all(self.slopes > 0)):
                raise ValueError("relevance head: recalibration slopes must be positive and every value finite")

    @property
    def n_models(self) -> int:
        return int(self.bounds.shape[0] - 1)

    def tree_probabilities(self, features: npt.ArrayLike) -> FloatArray:
        """The models' mean class probabilities per document, (n, K), before rank matching."""
        sums = score_forest(self.forest, features, self.bounds)  # (n, models + 1, K)
        probs = np.zeros((sums.shape[0], self.n_grades), dtype=np.float64)
        for i in range(self.n_models):
            probs += softmax_probabilities(sums[:, i + 1] - sums[:, i])
        out: FloatArray = probs / self.n_models
        return out

    def estimate(self, features: npt.ArrayLike, scores: npt.ArrayLike,
                 query_offsets: npt.ArrayLike) -> tuple[FloatArray, FloatArray]:
        """(P(y = k) (n, K): rows sum to 1, entries in [0, 1]; E[y] = sum_k P(y >= k) (n,)) for
        documents with raw ``features`` ranked by ``scores`` within ``query_offsets``."""
        cum = self.recalibrate(
            rank_match(cumulative_from_probabilities(self.tree_probabilities(features)), scores, query_offsets))
        expected: FloatArray = cum.sum(axis=1)
        return probabilities_from_cumulative(cum), expected

    def recalibrate(self, cum: FloatArray) -> FloatArray:
        """Step 3 on rank-matched P(y >= k), (n, K-1) (unchanged when the head has no map)."""
        if self.slopes is None or self.intercepts is None:
            return cum
        return recalibrated(cum, self.slopes, self.intercepts)

    # ------------------------------------------------------------------ storage (plain data)
    def to_artifact(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """(JSON-able description, arrays under ``relevance_head/``)."""
        arrays = {f"relevance_head/forest/{k}": v for k, v in self.forest.to_arrays().items()}
        doc: dict[str, Any] = {"kind": HEAD_KIND, "n_grades": int(self.n_grades),
                               "bounds": [int(x) for x in self.bounds], "models": self.models}
        if self.slopes is not None and self.intercepts is not None:
            doc["recalibration"] = {"slopes": self.slopes.tolist(), "intercepts": self.intercepts.tolist()}
        return doc, arrays

    @classmethod
    def from_artifact(cls, doc: Mapping[str, Any], arrays: Mapping[str, np.ndarray], n_features: int) -> RelevanceHead:
        """Rebuild from :meth:`to_artifact` output (ValueError naming what is wrong)."""
        prefix = "relevance_head/forest/"
        forest = FlatForest.from_arrays({k[len(prefix):]: v for k, v in arrays.items() if k.startswith(prefix)})
        if forest.n_features != n_features:
            raise ValueError(f"relevance head: its trees read {forest.n_features} features, the model {n_features}")
        models = doc.get("models", [])
        if not isinstance(models, list):
            raise ValueError("relevance head: models must be a list")
        recal = doc.get("recalibration")
        if recal is not None and not isinstance(recal, Mapping):
            raise ValueError("relevance head: recalibration must be a table")
        return cls(n_grades=int(doc["n_grades"]), forest=forest,
                   bounds=np.asarray(doc["bounds"], dtype=np.int64), models=models,
                   slopes=None if recal is None else np.asarray(recal["slopes"], dtype=np.float64),
                   intercepts=None if recal is None else np.asarray(recal["intercepts"], dtype=np.float64))
