"""Multi-armed bandits over features for bandit-accelerated AdaBoost.MH (AdaBoost.MH.BA).

Busa-Fekete and Kégl, "Fast boosting using adversarial bandits", ICML 2010; "Tune and mix"
(2013), appendix A. Each arm is a feature; each boosting iteration the bandit picks
``n_pulls`` distinct arms, the base learner searches only those features, and every pulled arm
j receives the reward of the best stump on feature j under the current weights::

    r_j = -log sqrt(1 - gamma_j^2)

(the drop in the log of AdaBoost's exponential-loss bound the stump would bring), divided by the
largest reward seen so far so that rewards lie in [0, 1] (the bandits' guarantees assume that)
and the scale adapts to the shrinking edges of late iterations. An edge of 1 (a perfect stump)
is clipped to 1 - 1e-12 so that its reward stays finite.

- ``FullSearch``: every arm, every iteration (plain AdaBoost.MH).
- ``UCB1Bandit`` (Auer, Cesa-Bianchi, Fischer 2002): pull the ``n_pulls`` arms with the largest
  ``mean_j + sqrt(2 ln t / n_j)``; arms never pulled come first (seeded random order).
- ``Exp3PBandit`` (Auer, Cesa-Bianchi, Freund, Schapire 2002, "Exp3.P"): probabilities
  ``p_j = (1 - g) w_j / sum w + g / M``; draw ``n_pulls`` distinct arms (successively, without
  replacement, proportional to p); importance-weighted reward ``x_j / min(1, n_pulls p_j)`` for
  pulled arms, 0 otherwise; ``w_j *= exp(g / (3M) (xhat_j + a / (p_j sqrt(M T))))`` with the
  paper's ``a = 2 sqrt(ln(M T / delta))`` and ``g = min(3/5, 2 sqrt(3/5 M ln M / T))`` for M arms
  and horizon T. The multi-pull inclusion probability ``min(1, n_pulls p_j)`` is the usual
  approximation (exact for one pull). Weights are kept as logarithms.

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


def edge_reward(edges: npt.ArrayLike) -> FloatArray:
    """The paper's reward ``r = -log sqrt(1 - gamma^2) = -0.5 log(1 - gamma^2)`` (>= 0)."""
    g = np.clip(np.nan_to_num(np.asarray(edges, dtype=np.float64), nan=0.0, neginf=0.0), 0.0, MAX_EDGE)
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
        self._reward_scale = 0.0

    def normalised_rewards(self, edges: npt.ArrayLike) -> FloatArray:
        """Edges -> rewards in [0, 1] (see module docstring)."""
        r = edge_reward(edges)
        if r.size:
            self._reward_scale = max(self._reward_scale, float(r.max()))
        return r / self._reward_scale if self._reward_scale > 0.0 else r

    def select(self) -> IntArray:
        raise NotImplementedError

    def update(self, arms: IntArray, edges: npt.ArrayLike) -> None:
        """Feed back the best stump edge of each pulled arm."""
        self.t += 1
        self._learn(np.asarray(arms, dtype=np.int64), self.normalised_rewards(edges))

    def _learn(self, arms: IntArray, rewards: FloatArray) -> None:
        raise NotImplementedError


class FullSearch(FeatureBandit):
    """Every feature, every iteration."""

    def __init__(self, n_arms: int, seed: int | None = 0) -> None:
        super().__init__(n_arms, n_arms, seed)
        self._all = np.arange(self.n_arms, dtype=np.int64)

    def select(self) -> IntArray:
        return self._all

    def _learn(self, arms: IntArray, rewards: FloatArray) -> None:
        return None


class UCB1Bandit(FeatureBandit):
    """UCB1 with ``n_pulls`` arms per round (top indices)."""

    def __init__(self, n_arms: int, n_pulls: int, seed: int | None = 0) -> None:
        super().__init__(n_arms, n_pulls, seed)
        self.counts = np.zeros(self.n_arms, dtype=np.int64)
        self.sums = np.zeros(self.n_arms, dtype=np.float64)
        self._tiebreak = self.rng.permutation(self.n_arms)

    def select(self) -> IntArray:
        unseen = np.flatnonzero(self.counts == 0)
        if unseen.size >= self.n_pulls:
            pick = unseen[np.argsort(self._tiebreak[unseen], kind="stable")][: self.n_pulls]
            return np.sort(pick)
        total = max(int(self.counts.sum()), 1)
        with np.errstate(divide="ignore", invalid="ignore"):
            index = self.sums / self.counts + np.sqrt(2.0 * math.log(total) / self.counts)
        index[self.counts == 0] = np.inf
        # largest index first; ties by the seeded permutation
        order = np.lexsort((self._tiebreak, -index))
        return np.sort(order[: self.n_pulls]).astype(np.int64)

    def _learn(self, arms: IntArray, rewards: FloatArray) -> None:
        np.add.at(self.counts, arms, 1)
        np.add.at(self.sums, arms, rewards)


class Exp3PBandit(FeatureBandit):
    """Exp3.P with ``n_pulls`` distinct arms per round (see module docstring)."""

    def __init__(self, n_arms: int, n_pulls: int, horizon: int, seed: int | None = 0,
                 delta: float = 0.05) -> None:
        super().__init__(n_arms, n_pulls, seed)
        if horizon < 1:
            raise ValueError(f"horizon (n_iterations) must be >= 1, got {horizon}")
        M = float(self.n_arms)
        T = float(horizon)
        self.alpha = 2.0 * math.sqrt(math.log(M * T / delta))
        self.gamma = min(0.6, 2.0 * math.sqrt(0.6 * M * math.log(max(M, 2.0)) / T))
        self._scale = math.sqrt(M * T)
        self.log_w = np.full(self.n_arms, self.alpha * self.gamma / 3.0 * math.sqrt(T / M))
        self._p = self.probabilities()

    def probabilities(self) -> FloatArray:
        w = np.exp(self.log_w - self.log_w.max())
        return (1.0 - self.gamma) * w / w.sum() + self.gamma / self.n_arms

    def select(self) -> IntArray:
        self._p = self.probabilities()
        pick = self.rng.choice(self.n_arms, size=self.n_pulls, replace=False, p=self._p)
        return np.sort(pick).astype(np.int64)

    def _learn(self, arms: IntArray, rewards: FloatArray) -> None:
        p = self._p
        xhat = np.zeros(self.n_arms)
        xhat[arms] = rewards / np.minimum(1.0, self.n_pulls * p[arms])
        self.log_w += self.gamma / (3.0 * self.n_arms) * (xhat + self.alpha / (p * self._scale))


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
