"""The relevance head: what a ranking score means. For every scored document, the probability of
each grade, P(y = k), and the expected grade E[y], in agreement with the ranking and comparable
across queries.

The mixed score orders a list; on its own it says nothing across queries (the shipped
configuration mixes per-query z-scores). The calibrated members do: each was turned into an
absolute relevance estimate before the mix. The head is a cumulative-logit (ordinal) model over
a document's place in its list and what the members say of the list:

    eta = softplus(a0 + a1 * sigma_q) * z  +  softplus(g) * r_tilde  +  b0 + b1 * mu_q + b2 * max_q
    P(y >= k) = sigmoid(eta - theta_k),   theta_1 < ... < theta_{K-1}
    P(y = k)  = P(y >= k) - P(y >= k + 1),   E[y] = sum_k P(y >= k)

- z: the mixed score standardised within its query (the order /rank gives);
- r: the mixer-weighted mean of the members' calibrated (un-rescaled) outputs; mu_q, sigma_q,
  max_q its query's mean, spread and maximum; r_tilde: the query's r values sorted high to low and
  handed out in the ranking's order (the best-ranked document gets the largest), so r_tilde never
  rises down the list.

Both slopes are positive (softplus) and every threshold is shared, so within a query eta never
rises down the ranking, and with it every P(y >= k) and E[y]: the head never reorders a list.
The query-level terms move a whole list up or down, which is what makes a P(y >= 1) of 0.8 mean
the same in every query. Inputs are standardised with the fitting set's means and spreads, stored
with the parameters. Fitted by maximum likelihood on the validation queries after the mix
(``training.calibration.relevance_fit``); this module is numpy only (the service's side).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]

#: per-query inputs and the per-document one, in the order of the stored means and scales
QUERY_INPUTS = ("mu", "sigma", "max")


def softplus(x: FloatArray | float) -> Any:
    return np.logaddexp(0.0, x)


def sigmoid(x: FloatArray) -> FloatArray:
    out: FloatArray = 0.5 * (1.0 + np.tanh(0.5 * x))  # overflow-free logistic
    return out


@dataclass(frozen=True)
class HeadInputs:
    """What the head reads of one scored batch: per document z and r_tilde, per document its
    query's (mu, sigma, max) (raw, before standardisation)."""

    z: FloatArray
    r_tilde: FloatArray
    query: FloatArray  # (n, 3): mu_q, sigma_q, max_q repeated for each document of q


def head_inputs(scores: npt.ArrayLike, member_scores: npt.ArrayLike, weights: npt.ArrayLike | None,
                query_offsets: npt.ArrayLike) -> HeadInputs:
    """The head's inputs from the mixed ``scores`` (n,), the calibrated ``member_scores`` (n, M)
    and the mixer's member ``weights`` (M,; None: equal weights)."""
    s = np.asarray(scores, dtype=np.float64)
    m = np.asarray(member_scores, dtype=np.float64)
    off = np.asarray(query_offsets, dtype=np.int64)
    w = np.ones(m.shape[1]) if weights is None else np.asarray(weights, dtype=np.float64)
    w = w / w.sum() if w.sum() > 0 else np.full(m.shape[1], 1.0 / max(m.shape[1], 1))
    r = m @ w
    z = np.zeros_like(s)
    r_tilde = np.empty_like(s)
    query = np.empty((s.shape[0], 3), dtype=np.float64)
    for q in range(off.shape[0] - 1):
        lo, hi = int(off[q]), int(off[q + 1])
        if hi <= lo:
            continue
        sq, rq = s[lo:hi], r[lo:hi]
        sd = sq.std()
        z[lo:hi] = (sq - sq.mean()) / sd if sd > 1e-12 else 0.0
        order = np.argsort(-sq, kind="stable")  # the ranking /rank gives (ties: posted order)
        r_tilde[lo + order] = np.sort(rq)[::-1]
        query[lo:hi] = (rq.mean(), rq.std(), rq.max())
    return HeadInputs(z=z, r_tilde=r_tilde, query=query)


@dataclass(frozen=True)
class RelevanceHead:
    """Fitted parameters (see the module docstring); ``n_grades`` = K."""

    n_grades: int
    a: FloatArray  # (2,): a0, a1
    g: float
    b: FloatArray  # (3,): b0, b1 (mu), b2 (max)
    theta: FloatArray  # (K - 1,), increasing
    means: FloatArray  # (4,): mu, sigma, max, r_tilde of the fitting set
    scales: FloatArray  # (4,)

    def eta(self, x: HeadInputs) -> FloatArray:
        """The latent relevance of each document (higher: more relevant)."""
        qs = (x.query - self.means[:3]) / self.scales[:3]
        rt = (x.r_tilde - self.means[3]) / self.scales[3]
        slope = softplus(self.a[0] + self.a[1] * qs[:, 1])
        out: FloatArray = slope * x.z + softplus(self.g) * rt + self.b[0] + self.b[1] * qs[:, 0] + self.b[2] * qs[:, 2]
        return out

    def cumulative(self, x: HeadInputs) -> FloatArray:
        """P(y >= k) for k = 1..K-1, (n, K-1), each column non-increasing down a ranking."""
        return sigmoid(self.eta(x)[:, None] - self.theta[None, :])

    def estimate(self, x: HeadInputs) -> tuple[FloatArray, FloatArray]:
        """(P(y = k) for k = 0..K-1 (n, K): rows sum to 1, entries in [0, 1]; E[y] = sum_k
        P(y >= k) (n,)) from one pass over the cumulative probabilities."""
        cum = self.cumulative(x)
        n = cum.shape[0]
        upper = np.concatenate([np.ones((n, 1)), cum], axis=1)
        lower = np.concatenate([cum, np.zeros((n, 1))], axis=1)
        probs: FloatArray = np.clip(upper - lower, 0.0, 1.0)
        expected: FloatArray = cum.sum(axis=1)
        return probs, expected

    def probabilities(self, x: HeadInputs) -> FloatArray:
        """P(y = k) for k = 0..K-1, (n, K) (``estimate``)."""
        return self.estimate(x)[0]

    def expected(self, x: HeadInputs) -> FloatArray:
        """E[y] = sum_k P(y >= k) (``estimate``)."""
        return self.estimate(x)[1]

    # ------------------------------------------------------------------ storage (plain numbers)
    def to_params(self) -> dict[str, Any]:
        return {"kind": "ordinal_logit", "n_grades": int(self.n_grades), "a": self.a.tolist(), "g": float(self.g),
                "b": self.b.tolist(), "theta": self.theta.tolist(), "means": self.means.tolist(),
                "scales": self.scales.tolist()}

    @classmethod
    def from_params(cls, d: Mapping[str, Any]) -> RelevanceHead:
        if d.get("kind") != "ordinal_logit":
            raise ValueError(f"unknown relevance head kind {d.get('kind')!r}")
        k = int(d["n_grades"])
        head = cls(n_grades=k, a=np.asarray(d["a"], dtype=np.float64), g=float(d["g"]),
                   b=np.asarray(d["b"], dtype=np.float64), theta=np.asarray(d["theta"], dtype=np.float64),
                   means=np.asarray(d["means"], dtype=np.float64), scales=np.asarray(d["scales"], dtype=np.float64))
        shapes = {"a": (2,), "b": (3,), "theta": (k - 1,), "means": (4,), "scales": (4,)}
        for name, shape in shapes.items():
            if getattr(head, name).shape != shape:
                raise ValueError(f"relevance head: {name} has shape {getattr(head, name).shape}, expected {shape}")
        if k < 2 or not np.all(np.diff(head.theta) > 0) or not np.all(head.scales > 0):
            raise ValueError("relevance head: thresholds must increase and scales be positive")
        return head
