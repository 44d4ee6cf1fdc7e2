"""Multi-armed bandits over features for bandit-accelerated AdaBoost.MH (AdaBoost.MH.BA).

Busa-Fekete and Kégl, "Fast boosting using adversarial bandits", ICML 2010; "Tune and mix"
(2013), appendix A. Each arm is a feature; each boosting iteration the bandit picks
``n_pulls`` distinct arms and the base learner searches only those features.

Rewards. A stump search (a stump; each term of a product; each inner node of a tree) yields,
for every pulled arm j, the score of its best split ``e_j``: the stump edge ``gamma_j``, or for
a tree node the rise of the tree's edge. The paper's reward is ``rho(e) = -log sqrt(1 - e^2)``
(the drop of the log of AdaBoost's loss bound; ``e`` clipped to [0, 1 - 1e-12]). Each search
is made *relative to its own iteration*::

    x_j = rho(e_j) / c,    c = max(max_{pulled i} rho(e_i), lambda * c_prev)

with one scale ``c`` per search position (the stump; term m of a product; the q-th split of a
tree) and ``lambda = RELATIVE_MEMORY`` (0.5): the best pulled arm of a search gets 1 unless the
last iterations saw much better ones (the memory keeps one-arm pulls informative, where the
iteration's own maximum would always give 1). An arm's reward over the m searches of an
iteration (a tree's inner nodes, a product's first-pass terms) is
``sum_q rho(e_qj) / sum_q c_q``: every node and term feeds back, not only the root, each in
proportion to its scale (the root's split counts more than a deep one). Rewards lie in [0, 1]
and do not shrink with the edges.

The bandits:

- ``FullSearch``: every arm, every iteration (plain AdaBoost.MH).
- ``UCB1Bandit``: UCB1-Tuned (Auer, Cesa-Bianchi, Fischer 2002, section 4) with multiple plays:
  pull the ``n_pulls`` arms with the largest ``mean_j + sqrt(ln t / n_j * min(1/4, V_j))``,
  ``V_j = var_j + sqrt(2 ln t / n_j)`` (the empirical variance of arm j's rewards), t the number
  of rounds so far; arms never pulled come first (seeded random order). The exploration term
  follows the rewards' spread. ``tuned=False`` gives plain UCB1, ``mean_j + sqrt(2 ln t / n_j)``.
- ``Exp3PBandit``: the exponential-weights bandit with k = ``n_pulls`` plays per round of Exp3.M
  (Uchiya, Nakamura, Kudo, ALT 2010; Exp3 / Exp3.P: Auer, Cesa-Bianchi, Freund, Schapire 2002):
  inclusion probabilities ``q_j = k ((1 - g) w_j / sum w + g / M)`` capped at 1 (the excess of
  capped arms spread over the others in proportion); k distinct arms drawn by systematic sampling
  over a seeded random order, so that arm j is pulled with probability exactly ``q_j``;
  importance-weighted reward ``xhat_j = x_j / q_j`` for pulled arms, 0 otherwise;
  ``ln w_j += (k g / M) xhat_j`` for the arms not capped; the horizon-tuned
  ``g = min(1, sqrt(M ln(M / k) / ((e - 1) k T)))`` for M arms and horizon T (0.12 for M = 40,
  k = 7, T = 400; Exp3.P's single-play ``min(3/5, 2 sqrt(3/5 M ln M / T))`` stays at 0.6 unless
  T is in the thousands). Exp3.P's confidence term ``a / (p_j sqrt(M T))`` is left out: it
  grows like 1/q_j and keeps lifting the arms that are rarely pulled (measured below). The class
  and ``search="exp3p"`` carry the family's name, Exp3.P. Weights are kept as logarithms.

Why these choices (measured, ``tests/learners/test_bandit_learning.py``'s problem: 10,000 rows,
40 uniform features of which 3 carry the label, 7 arms per iteration, 400 iterations; the share
of pulls that go to the 3 informative features in iterations 200..400; uniform share 7.5%,
ceiling 3/7 = 42.9%; stumps / 8-leaf trees):

- rewards over the running maximum, plain UCB1 with ``ln(total pulls)``, Exp3.P with g = 0.6,
  a tree rewarded by its root stump only: UCB1 8.4% / 8.2%, Exp3.P 7.5% / 7.5%, no better than
  uniform: rewards over the running maximum fall towards 1e-3 under UCB1's exploration term
  (about 0.5).
- rewards relative to the iteration, plain UCB1, Exp3.M with Exp3.P's confidence term:
  UCB1 3.8x / 2.7x the uniform share, Exp3 2.3x / 1.4x; without the confidence term Exp3
  4.5x / 3.8x (0.3 or 0.1 of the term: 3.5x-4.0x / 2.7x-3.1x).
- lambda from 0 to 0.95 moves the shares by at most 0.4x; weighting a tree's nodes by their
  scale rather than equally: UCB1 3.0x against 2.8x, Exp3 2.0x against 1.5x.
- the choices above together (seeds 0..3): UCB1-Tuned 42.9% for stumps and trees (the ceiling;
  plain UCB1 3.6x-3.9x / 2.8x-3.2x); Exp3 30.6%-37.1% / 34.9%-37.7% (4.1x-5.0x).

All draws come from ``numpy.random.default_rng(seed)``: a run is reproducible given the seed.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


#: edges are clipped below 1 so that a perfect stump's reward is finite
MAX_EDGE = 1.0 - 1e-12
#: lambda: a search's reward scale is max(this iteration's best, RELATIVE_MEMORY * last scale)
RELATIVE_MEMORY = 0.5


def edge_reward(edges: npt.ArrayLike) -> FloatArray:
    """The paper's reward ``r = -log sqrt(1 - gamma^2) = -0.5 log(1 - gamma^2)`` (>= 0)."""
    g = np.minimum(np.fmax(np.asarray(edges, dtype=np.float64), 0.0), MAX_EDGE)  # NaN -> 0
    return -0.5 * np.log1p(-g * g)


class FeatureBandit:
    """Base class: ``select()`` the arms of this iteration, ``update(arms, edges)`` afterwards."""

    def __init__(self, n_arms: int, n_pulls: int, seed: int | None = 0) -> None:
        if n_arms < 1:
            raise ValueError(f"the bandit needs at least one arm (feature), got {n_arms}")
        if not 1 <= n_pulls:
            raise ValueError(f"n_arms (arms pulled per iteration) must be >= 1, got {n_pulls}")
        self.n_arms = int(n_arms)
        self.n_pulls = min(int(n_pulls), self.n_arms)
        self.rng = np.random.default_rng(seed)
        self.t = 0
        self._scales = np.zeros(0)

    def relative_rewards(self, edges: npt.ArrayLike) -> FloatArray:
        """Scores of the pulled arms, one row per search -> rewards in [0, 1] (module docstring).

        ``edges`` is (k,) for one search or (m, k) for m searches (tree nodes, product terms);
        -inf or NaN means "no split on this arm in this search" (reward 0).
        """
        r = edge_reward(np.atleast_2d(np.asarray(edges, dtype=np.float64)))
        m = r.shape[0]
        if m == 0 or r.shape[1] == 0:
            return np.zeros(r.shape[1])
        if self._scales.shape[0] < m:
            self._scales = np.concatenate([self._scales, np.zeros(m - self._scales.shape[0])])
        scale = np.maximum(r.max(axis=1), RELATIVE_MEMORY * self._scales[:m])
        self._scales[:m] = scale
        total = float(scale.sum())
        return r.sum(axis=0) / total if total > 0.0 else np.zeros(r.shape[1])

    def select(self) -> IntArray:
        raise NotImplementedError

    def update(self, arms: IntArray, edges: npt.ArrayLike) -> None:
        """Feed back the best split score(s) of each pulled arm (see ``relative_rewards``)."""
        self.t += 1
        self._learn(np.asarray(arms, dtype=np.int64), self.relative_rewards(edges))

    def _learn(self, arms: IntArray, rewards: FloatArray) -> None:
        raise NotImplementedError


class FullSearch(FeatureBandit):
    """Every feature, every iteration."""

    def __init__(self, n_arms: int, seed: int | None = 0) -> None:
        super().__init__(n_arms, n_arms, seed)
        self._all = np.arange(self.n_arms, dtype=np.int64)

    def select(self) -> IntArray:
        return self._all

    def update(self, arms: IntArray, edges: npt.ArrayLike) -> None:
        self.t += 1

    def _learn(self, arms: IntArray, rewards: FloatArray) -> None:
        return None


class UCB1Bandit(FeatureBandit):
    """UCB1 with ``n_pulls`` arms per round (top indices; see module docstring)."""

    def __init__(self, n_arms: int, n_pulls: int, seed: int | None = 0,
                 tuned: bool = True) -> None:
        super().__init__(n_arms, n_pulls, seed)
        self.tuned = bool(tuned)
        self.counts = np.zeros(self.n_arms, dtype=np.int64)
        self.sums = np.zeros(self.n_arms, dtype=np.float64)
        self.sq_sums = np.zeros(self.n_arms, dtype=np.float64)
        self._tiebreak = self.rng.permutation(self.n_arms)

    def select(self) -> IntArray:
        unseen = np.flatnonzero(self.counts == 0)
        if unseen.size >= self.n_pulls:
            pick = unseen[np.argsort(self._tiebreak[unseen], kind="stable")][: self.n_pulls]
            return np.sort(pick)
        log_t = math.log(max(self.t, 1))
        n = np.maximum(self.counts, 1)
        mean = self.sums / n
        if self.tuned:
            v = np.maximum(self.sq_sums / n - mean * mean, 0.0) + np.sqrt(2.0 * log_t / n)
            index = mean + np.sqrt(log_t / n * np.minimum(0.25, v))
        else:
            index = mean + np.sqrt(2.0 * log_t / n)
        if unseen.size:
            index[unseen] = np.inf
        # largest index first; ties by the seeded permutation
        order = np.lexsort((self._tiebreak, -index))
        return np.sort(order[: self.n_pulls]).astype(np.int64)

    def _learn(self, arms: IntArray, rewards: FloatArray) -> None:
        # arms are distinct within a round
        self.counts[arms] += 1
        self.sums[arms] += rewards
        self.sq_sums[arms] += rewards * rewards


def capped_inclusion(p: FloatArray, k: int) -> tuple[FloatArray, npt.NDArray[np.bool_]]:
    """``q = k p`` (``p`` sums to 1) capped at 1, the excess spread over the uncapped arms.

    Returns ``(q, capped)``; ``q`` sums to k (k <= number of arms with p > 0).
    """
    q = k * p
    capped = np.zeros(p.shape[0], dtype=bool)
    for _ in range(k + 1):
        over = (q > 1.0) & ~capped
        if not over.any():
            break
        capped |= over
        rest = ~capped
        mass = p[rest].sum()
        q = np.where(capped, 1.0, (k - capped.sum()) * p / mass if mass > 0 else 0.0)
    return np.minimum(q, 1.0), capped


class Exp3PBandit(FeatureBandit):
    """Exp3.P with ``n_pulls`` distinct arms per round, Exp3.M style (see module docstring)."""

    def __init__(self, n_arms: int, n_pulls: int, horizon: int, seed: int | None = 0,
                 delta: float = 0.05) -> None:
        super().__init__(n_arms, n_pulls, seed)
        if horizon < 1:
            raise ValueError(f"horizon (n_iterations) must be >= 1, got {horizon}")
        M = float(self.n_arms)
        k = float(self.n_pulls)
        T = float(horizon)
        self.gamma = min(1.0, math.sqrt(M * math.log(M / k) / ((math.e - 1.0) * k * T)))
        self.eta = k * self.gamma / M
        self.log_w = np.zeros(self.n_arms)
        self._q, self._capped = self.inclusion_probabilities()

    def inclusion_probabilities(self) -> tuple[FloatArray, npt.NDArray[np.bool_]]:
        """``(q, capped)``: each arm's probability of being pulled this round (sum n_pulls)."""
        w = np.exp(self.log_w - self.log_w.max())
        p = (1.0 - self.gamma) * w / w.sum() + self.gamma / self.n_arms
        return capped_inclusion(p, self.n_pulls)

    def select(self) -> IntArray:
        if self.n_pulls == self.n_arms:
            self._q = np.ones(self.n_arms)
            self._capped = np.ones(self.n_arms, dtype=bool)
            return np.arange(self.n_arms, dtype=np.int64)
        self._q, self._capped = self.inclusion_probabilities()
        # systematic sampling over a random arm order: P(j pulled) = q_j exactly, no repeats
        order = self.rng.permutation(self.n_arms)
        cum = np.cumsum(self._q[order])
        marks = self.rng.random() + np.arange(self.n_pulls)
        idx = np.minimum(np.searchsorted(cum, marks, side="right"), self.n_arms - 1)
        pick = np.unique(order[idx])
        if pick.shape[0] < self.n_pulls:  # rounding at the ends of cum: top up, never repeat
            rest = np.setdiff1d(order, pick)
            pick = np.concatenate([pick, rest[: self.n_pulls - pick.shape[0]]])
        return np.sort(pick).astype(np.int64)

    def _learn(self, arms: IntArray, rewards: FloatArray) -> None:
        q = np.maximum(self._q, 1e-300)
        xhat = np.zeros(self.n_arms)
        xhat[arms] = rewards / q[arms]
        step = self.eta * xhat
        step[self._capped] = 0.0
        self.log_w += step
        self.log_w -= self.log_w.max()


def make_bandit(search: str, n_features: int, n_pulls: int, horizon: int,
                seed: int | None) -> FeatureBandit:
    """``"full"`` | ``"ucb1"`` | ``"exp3p"`` over ``n_features`` arms."""
    if search == "full":
        return FullSearch(n_features, seed)
    if search == "ucb1":
        return UCB1Bandit(n_features, n_pulls, seed)
    if search == "exp3p":
        return Exp3PBandit(n_features, n_pulls, horizon, seed)
    raise ValueError(f"search must be 'full', 'ucb1' or 'exp3p', got {search!r}")
