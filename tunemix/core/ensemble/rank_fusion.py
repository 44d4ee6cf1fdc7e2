"""Unsupervised fusion of the members' rankings, measured against the forecaster.

Büttcher, Clarke, Cormack, "Information Retrieval" (2010), sec. 11.1. Each member is one
"system" whose result list for a query is its ranking of the query's candidate documents;
all members rank the same candidates. None of these mixers uses the labels: ``fit`` only
records the number of members. Tie conventions (average ranks, tie-inclusive top-k, no vote
for equal scores) are documented once in ``fusion_kernels.py``.

``ReciprocalRankFusion``  score(d) = sum_m 1 / (k + r_m(d)), k = 60 (eq. 11.4).
``CombSUM``               score(d) = sum_{m: d in top_k(m)} s'_m(d), s'_m min-max per query.
``CombMNZ``               score(d) = |{m: d in top_k(m)}| * CombSUM(d) (eq. 11.5).
``CondorcetFusion``       order by pairwise majority; cycles and ties by Borda count.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from tunemix.core.ensemble import fusion_kernels as fk
from tunemix.core.ensemble.base import Float1D, Float2D, Int1D, Mixer, Offsets


class _UnsupervisedMixer(Mixer):
    def _fit(self, member_scores: Float2D, labels: Int1D, query_offsets: Offsets) -> None:
        return None


class ReciprocalRankFusion(_UnsupervisedMixer):
    """RRF (Cormack, Clarke, Büttcher, SIGIR 2009): score(d) = sum_m 1 / (k + r_m(d)).

    r_m(d) is member m's 1-based rank of d within its query (tied documents share the average
    rank). ``k`` > 0 damps the top ranks of a rogue member; 60 "has been found to work well".
    """

    name: ClassVar[str] = "rrf"

    def __init__(self, *, k: float = 60.0) -> None:
        if not isinstance(k, int | float) or not np.isfinite(k) or k <= 0:
            raise ValueError(f"k must be a positive number, got {k!r}")
        self.k = float(k)

    @classmethod
    def _init_param_names(cls) -> tuple[str, ...]:
        return ("k",)

    def _transform(self, member_scores: Float2D, query_offsets: Offsets) -> Float1D:
        return fk.rrf_scores(member_scores, query_offsets, self.k)


def _check_top_k(top_k: object) -> int | None:
    if top_k is None:
        return None
    if isinstance(top_k, bool) or not isinstance(top_k, int | np.integer) or top_k < 1:
        raise ValueError(f"top_k must be a positive integer or None (all documents), got {top_k!r}")
    return int(top_k)


class CombSUM(_UnsupervisedMixer):
    """CombSUM (Fox and Shaw 1994; Lee 1997) over each member's top-k.

    Per query, member m's scores are min-max normalised over the query's candidates,
    s'_m(d) = (v_m(d) - min_q v_m) / (max_q v_m - min_q v_m) (0 for a constant member), and
    score(d) = sum over members having d in their top-k of s'_m(d); documents outside a
    member's top-k get 0 from it. ``top_k=None`` uses every document.
    """

    name: ClassVar[str] = "combsum"
    _mnz: ClassVar[bool] = False

    def __init__(self, *, top_k: int | None = 10) -> None:
        self.top_k = _check_top_k(top_k)

    @classmethod
    def _init_param_names(cls) -> tuple[str, ...]:
        return ("top_k",)

    def _transform(self, member_scores: Float2D, query_offsets: Offsets) -> Float1D:
        k = 0 if self.top_k is None else self.top_k
        return fk.comb_scores(member_scores, query_offsets, k, self._mnz)


class CombMNZ(CombSUM):
    """CombMNZ (Lee 1997; IR book eq. 11.5): |{m: d in top_k(m)}| * CombSUM(d).

    Documents outside a member's top-k neither add to the sum nor count as "non-zero".
    """

    name: ClassVar[str] = "combmnz"
    _mnz: ClassVar[bool] = True


class CondorcetFusion(_UnsupervisedMixer):
    """Condorcet fusion (Montague and Aslam, CIKM 2002), deterministic tie and cycle rule.

    Per query, d beats d' when more members score d strictly above d' than the reverse. The
    documents are ordered by that majority relation; where it cannot order them (majority
    cycles, pairwise ties: the strongly connected components of the "not beaten" graph, which
    form a chain) they are ordered by Borda count (tied scores share points), then by input
    position. The returned score is n_q - position, which reproduces the fused order.
    Cost: O(M n_q^2) time and O(n_q^2) memory per query.
    """

    name: ClassVar[str] = "condorcet"

    def __init__(self) -> None:
        pass

    def _transform(self, member_scores: Float2D, query_offsets: Offsets) -> Float1D:
        return fk.condorcet_scores(member_scores, query_offsets)
