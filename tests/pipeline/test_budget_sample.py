"""Training on the queries a time budget can pay for (``tunemix.train.budget_sample``): the
fraction from the cost model, the sample itself (whole queries, seeded, at least
``MIN_SUBSAMPLE_QUERIES``), and a budgeted ``train`` that records it. The rule reads no clock:
its inputs are the data's size and the budget; the budget's stages are tests/pipeline/test_budget.py."""

from __future__ import annotations

import copy
import sys
from typing import Any

import numpy as np
import pytest

from tests.pipeline.test_budget import CONFIG, FakeClock
from tunemix.core.data.dataset import RankingData
from tunemix.train import budget as budget_module
from tunemix.train import train as train_module
from tunemix.train.budget import (
    LIGHTGBM_IMPORT_S,
    MIN_SUBSAMPLE_QUERIES,
    VIEW_S_PER_VALUE,
    VIEW_SHARE,
    FitBudget,
    affordable_fraction,
    affordable_views,
    fixed_seconds,
)
from tunemix.train.budget_sample import budget_subsample
from tunemix.train.config import load_config

pytest.importorskip("lightgbm")


def _data(n_queries: int, seed: int = 0) -> RankingData:
    rng = np.random.default_rng(seed)
    sizes = rng.integers(3, 12, n_queries)
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    n = int(offsets[-1])
    features = rng.normal(size=(n, 5)).astype(np.float32)
    # each document's first feature says its query, to check that queries stay whole
    features[:, 0] = np.repeat(np.arange(n_queries), sizes)
    return RankingData(features=features, labels=rng.integers(0, 3, n), query_offsets=offsets,
                       qids=np.arange(100, 100 + n_queries))


def test_fixed_seconds_are_the_import_when_it_is_still_to_come() -> None:
    assert fixed_seconds(True, False) == LIGHTGBM_IMPORT_S
    assert fixed_seconds(True, True) == 0.0 and fixed_seconds(False, False) == 0.0


def test_affordable_fraction() -> None:
    """1 while the first view fits VIEW_SHARE x B less the fixed seconds, else that share over
    the view's cost (a hand-computed case: 120k documents of 136 features, 10 s, import to come)."""
    raw = VIEW_S_PER_VALUE * 120_000 * 136
    assert affordable_fraction(None, 120_000, 136) == 1.0
    assert affordable_fraction(raw / VIEW_SHARE, 120_000, 136) == 1.0  # exactly fits
    assert affordable_fraction(raw / VIEW_SHARE * 0.5, 120_000, 136) == pytest.approx(0.5)
    assert affordable_fraction(10.0, 120_000, 136, 2.0) == pytest.approx((0.3 * 10 - 2.0) / raw)
    assert affordable_fraction(10.0, 120_000, 136, 2.0) == pytest.approx(0.2357, abs=1e-4)
    assert affordable_fraction(60.0, 120_000, 136, 2.0) == 1.0
    assert affordable_fraction(5.0, 120_000, 136, 2.0) == 0.0  # nothing left: the caller keeps the minimum
    assert affordable_fraction(10.0, 9_630, 46, 2.0) == 1.0  # MQ2008 Fold1
    # the views' share less the import: a second view that fitted 0.3 B alone may not any more
    widths = [("raw", 136), ("raw+std", 272)]
    budget = 3 * raw / VIEW_SHARE
    assert affordable_views(budget, 120_000, widths) == ["raw", "raw+std"]
    assert affordable_views(budget, 120_000, widths, fixed_s=1.0) == ["raw"]


def test_the_whole_set_when_it_fits_or_without_a_budget() -> None:
    data = _data(200)
    for budget in (None, 1e6):
        out, record = budget_subsample(data, budget, fixed_s=0.0, seed=0)
        assert out is data and record["applied"] is False and record["queries"] == 200


def test_a_seeded_sample_of_whole_queries_that_fits() -> None:
    data = _data(400)
    cost = VIEW_S_PER_VALUE * data.n_docs * data.n_features
    budget = 0.25 * cost / VIEW_SHARE  # a quarter of the view fits
    out, record = budget_subsample(data, budget, fixed_s=0.0, seed=3)
    assert record["applied"] is True and record["fraction"] == pytest.approx(0.25, abs=1e-4)
    assert out.n_queries == record["queries"] == 100 and record["of_queries"] == 400
    assert out.n_docs == record["documents"] < data.n_docs and record["of_documents"] == data.n_docs
    # whole queries, in their order, each with its own documents, labels and qid
    kept = out.features[out.query_offsets[:-1], 0].astype(np.int64)
    assert np.all(np.diff(kept) > 0)
    for i, q in enumerate(kept):
        a, b = out.query_offsets[i], out.query_offsets[i + 1]
        qa, qb = data.query_offsets[q], data.query_offsets[q + 1]
        assert b - a == qb - qa and np.array_equal(out.labels[a:b], data.labels[qa:qb])
        assert np.array_equal(out.features[a:b], data.features[qa:qb]) and out.qids[i] == data.qids[q]
    again, _ = budget_subsample(data, budget, fixed_s=0.0, seed=3)
    other, _ = budget_subsample(data, budget, fixed_s=0.0, seed=4)
    assert np.array_equal(again.features, out.features) and not np.array_equal(other.features, out.features)
    assert "100 of 400 training queries" in record["summary"] and "seed 3" in record["summary"]
    # loading LightGBM, still to come, takes its seconds from the views' share first
    smaller, rec2 = budget_subsample(data, budget + 0.5 * cost / VIEW_SHARE, fixed_s=0.5 * cost, seed=3)
    assert rec2["fraction"] == pytest.approx(0.25, abs=1e-4) and smaller.n_queries == 100
    assert "after loading LightGBM" in rec2["summary"]


def test_at_least_the_minimum_of_queries() -> None:
    data = _data(400)
    out, record = budget_subsample(data, 1e-9, fixed_s=LIGHTGBM_IMPORT_S, seed=0)
    assert record["applied"] and out.n_queries == MIN_SUBSAMPLE_QUERIES
    few = _data(MIN_SUBSAMPLE_QUERIES - 10)
    same, rec = budget_subsample(few, 1e-9, fixed_s=0.0, seed=0)
    assert same is few and rec["applied"] is False and "all kept" in rec["summary"]


def _budgeted_record(monkeypatch: pytest.MonkeyPatch, per_value: float) -> dict[str, Any]:
    """A budgeted ``train`` (fake clock, 1e6 s: no stage is cut) whose cost model says each
    document and column costs ``per_value`` seconds."""
    monkeypatch.setattr(budget_module, "VIEW_S_PER_VALUE", per_value)
    tables = copy.deepcopy(CONFIG)
    tables["data"]["synthetic"]["queries"] = [120, 15, 15]
    cfg = load_config(None, {}, tables=tables)
    deadline = FitBudget.begin(1e6, FakeClock(0.0))
    return train_module.train(cfg, progress=False, save=False, deadline=deadline).record


def test_a_budgeted_fit_trains_on_the_sample_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    whole = _budgeted_record(monkeypatch, VIEW_S_PER_VALUE)
    assert whole["time_budget"]["subsample"]["applied"] is False
    n_docs = whole["time_budget"]["subsample"]["of_documents"]
    fixed = fixed_seconds(True, "lightgbm" in sys.modules)
    # a cost model under which half the training queries fit the views' share (after the import)
    per_value = (VIEW_SHARE * 1e6 - fixed) / (0.5 * n_docs * 6)
    half = _budgeted_record(monkeypatch, per_value)
    sub = half["time_budget"]["subsample"]
    assert sub["applied"] is True and sub["of_queries"] == 120 and sub["queries"] == 60
    assert sub["documents"] < sub["of_documents"] == n_docs
    # the runs trained on the sample: the fit and calibration parts split its 60 queries
    assert half["split"]["fit_queries"] + half["split"]["calibration_queries"] == 60
    assert whole["split"]["fit_queries"] + whole["split"]["calibration_queries"] == 120
    assert half["evaluation"]["test"]["ensemble"]["yahoo"]["ndcg@10"] is not None
    # the report says it under "Data"; a fit on every query says nothing of it
    from tunemix.train.report import render_markdown

    assert "trained on 60 of 120 training queries" in render_markdown(half)
    assert "training queries (" not in render_markdown(whole)
