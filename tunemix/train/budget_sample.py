"""Training on the queries a time budget can pay for: cost known before work.

Before the first iteration of any run a fit pays for its first feature view of the training
documents, their codes and LightGBM's Dataset of them (``tunemix.train.budget``:
``VIEW_S_PER_VALUE`` seconds a document and column) and, once per process, loading LightGBM's
library (``LIGHTGBM_IMPORT_S``). Under a time budget B these fixed costs must fit the views' share
of it, ``VIEW_SHARE`` x B; when the whole training set's do not (120k documents of 136 features
cost about 4.3 s against 3 s of a 10 s budget), the fit trains on a random sample
of the training queries (whole queries: a ranking's documents stay together) whose cost fits:
a fraction f = (VIEW_SHARE x B - loading) / (VIEW_S_PER_VALUE x documents x columns) of them
(``budget.affordable_fraction``), at least ``MIN_SUBSAMPLE_QUERIES`` queries. The validation
queries stay whole (early stopping and the mix read them; they are not binned from scratch, only
coded under the training bins). The default members are then chosen for the sample
(``tunemix.train.members.auto``): what trains is what the budget can cover. Without a budget, or when
the whole set fits, nothing changes. The record (``record["time_budget"]["subsample"]``) says what
was kept, of what, and why.

Like LightGBM's own ``bin_construct_sample_cnt`` (and ``subsample_for_bin`` of its scikit-learn
interface), which bins from a row sample, but for the whole fit: a budget too small for the data
would otherwise be spent before the first tree.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import numpy as np

from tunemix.core.data.dataset import RankingData
from tunemix.train.budget import (
    LIGHTGBM_IMPORT_S,
    MIN_SUBSAMPLE_QUERIES,
    VIEW_S_PER_VALUE,
    VIEW_SHARE,
    FitBudget,
    affordable_fraction,
    fixed_seconds,
)

if TYPE_CHECKING:
    from tunemix.train.config import TrainConfig

log = logging.getLogger(__name__)


def budget_subsample(train: RankingData, budget_s: float | None, *, fixed_s: float, seed: int
                     ) -> tuple[RankingData, dict[str, Any]]:
    """``train`` itself, or a seeded random sample of its queries (kept in their order) whose
    first view fits the budget (module docstring); and the record of the choice."""
    columns = train.n_features
    fraction = affordable_fraction(budget_s, train.n_docs, columns, fixed_s)
    full_s = VIEW_S_PER_VALUE * train.n_docs * columns
    record: dict[str, Any] = {"applied": False, "queries": train.n_queries, "documents": train.n_docs,
                              "of_queries": train.n_queries, "of_documents": train.n_docs,
                              "view_cost_s": round(full_s, 3), "fixed_s": round(fixed_s, 3)}
    if budget_s is None or fraction >= 1.0:
        record["summary"] = ("no time budget" if budget_s is None else
                             f"the whole training set fits the time budget of {budget_s:g} s")
        return train, record
    allowed = VIEW_SHARE * budget_s - fixed_s
    keep = min(train.n_queries, max(MIN_SUBSAMPLE_QUERIES, round(fraction * train.n_queries)))
    if keep >= train.n_queries:
        record["summary"] = (f"the time budget of {budget_s:g} s cannot pay for the whole training set, but it "
                             f"has no more than {MIN_SUBSAMPLE_QUERIES} queries: all kept")
        return train, record
    rng = np.random.default_rng(seed)
    chosen = np.sort(rng.choice(train.n_queries, size=keep, replace=False))
    sample = train.subset_queries(chosen)
    record.update(applied=True, queries=sample.n_queries, documents=sample.n_docs, fraction=round(fraction, 4),
                  seed=seed)
    import_note = f" after loading LightGBM ({LIGHTGBM_IMPORT_S:g} s)" if fixed_s > 0 else ""
    record["summary"] = (
        f"time budget of {budget_s:g} s: trained on {sample.n_queries} of {train.n_queries} training queries "
        f"({sample.n_docs} of {train.n_docs} documents, drawn at random with seed {seed}): the first view of all "
        f"of them would cost about {full_s:.2f} s before the first iteration ({VIEW_S_PER_VALUE:g} s a document "
        f"and column: the view, its codes and LightGBM's Dataset), more than the {max(allowed, 0.0):.2f} s left of "
        f"the views' share ({VIEW_SHARE:g} of the budget){import_note}")
    return sample, record


def lightgbm_import_s(cfg: TrainConfig, auto: bool) -> float:
    """Seconds loading LightGBM will take before the first run (0 when loaded, or when no
    configured run uses it; the default members always do)."""
    from tunemix.train.learners.lightgbm_capi import loaded

    needed = auto or bool(cfg.members.lambdamart or cfg.members.mcrank)
    return fixed_seconds(needed, loaded())


def budget_sample(sets: dict[str, RankingData], deadline: FitBudget, import_s: float, seed: int
                  ) -> tuple[dict[str, RankingData], dict[str, Any]]:
    """``sets`` with the training queries the time budget can pay for
    (``tunemix.train.budget_sample``; ``import_s``: ``lightgbm_import_s``), and the record of it."""
    train_set, record = budget_subsample(sets["train"], deadline.budget_s, fixed_s=import_s, seed=seed)
    if record["applied"]:
        log.info("%s", record["summary"])
        sets = {**sets, "train": train_set}
    return sets, record
