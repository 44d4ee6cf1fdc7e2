"""Hand-computed values for every quirk of docs/conventions.md, one test per quirk and tool."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tunemix.core.evaluation import CONVENTIONS, EvaluationInputError, evaluate, mean_metric
from tunemix.core.evaluation.measures import Measure

L3 = 1.0 / math.log2(3.0)  # 1/log2(3): weight of rank 2 (log2(r+1)) / rank 3 (LETOR)
CLASSIC = ["letor3", "letor4", "mslr", "yahoo", "ranklib", "trec"]
LEARNERS = ["lightgbm", "xgboost", "sklearn", "ranx"]
ALL = CLASSIC + LEARNERS


def ev(labels, scores, measure, conv, sizes=None, docids=None):
    sizes = [len(labels)] if sizes is None else sizes
    off = np.concatenate([[0], np.cumsum(sizes)])
    res = evaluate(np.array(labels), np.array(scores, dtype=np.float64), off, [measure], conv,
                   docids=docids)
    key = str(Measure.parse(measure))  # canonical: ndcg_burges@3 -> ndcg@3:gain=exp
    return res.per_query[key].tolist(), res.mean[key], res


# ------------------------------------------------------------------- gains and discounts
def test_letor_discount_and_gain_table() -> None:
    # ranked labels 0, 1, 2: gains 0, 1, 3; weights 1, 1, 1/log2(3); ideal 3, 1, 0.
    for conv in ("letor3", "letor4", "mslr"):
        pq, _, _ = ev([0, 1, 2], [3.0, 2.0, 1.0], "ndcg@3", conv)
        assert pq[0] == pytest.approx((0 + 1 + 3 * L3) / (3 + 1), abs=1e-12)
        pq, _, _ = ev([0, 1, 2], [3.0, 2.0, 1.0], "ndcg@2", conv)
        assert pq[0] == pytest.approx(1 / 4, abs=1e-12)


def test_mslr_five_level_table() -> None:
    # ranked 3, 4: gains 7, 15; ideal 15, 7; weights 1, 1 -> NDCG@2 = 1 (letor weights!).
    pq, _, _ = ev([3, 4], [2.0, 1.0], "ndcg@2", "mslr")
    assert pq[0] == pytest.approx(1.0, abs=1e-12)
    pq, _, _ = ev([3, 4], [2.0, 1.0], "ndcg@1", "mslr")
    assert pq[0] == pytest.approx(7 / 15, abs=1e-12)


def test_yahoo_and_ranklib_exponential_gain_log2_discount() -> None:
    # ranked 0, 1, 2 (negative scores): DCG = 0 + 1/log2(3) + 3/2; ideal = 3 + 1/log2(3) + 0.
    expect = (L3 + 1.5) / (3 + L3)
    for conv in ("yahoo", "ranklib"):
        pq, _, _ = ev([0, 1, 2], [-1.0, -2.0, -3.0], "ndcg@3", conv)
        assert pq[0] == pytest.approx(expect, abs=1e-12)
    pq, _, _ = ev([0, 1, 2], [-1.0, -2.0, -3.0], "dcg@3", "ranklib")
    assert pq[0] == pytest.approx(L3 + 1.5, abs=1e-12)


def test_trec_linear_gain() -> None:
    # ranked 0, 1, 2: DCG = 1/log2(3) + 2/2; ideal = 2 + 1/log2(3).
    pq, _, _ = ev([0, 1, 2], [-1.0, -2.0, -3.0], "ndcg@3", "trec")
    assert pq[0] == pytest.approx((L3 + 1.0) / (2 + L3), abs=1e-12)


# --------------------------------------------------------------- labels outside the range
@pytest.mark.parametrize("conv", ["letor3", "letor4"])
def test_letor_label_3_has_gain_0_and_warns(conv: str) -> None:
    # ranked 3, 1: gains 0, 1; ideal gains sorted 1, 0 -> NDCG@2 = 1, NDCG@1 = 0.
    pq, _, res = ev([3, 1], [2.0, 1.0], "ndcg@2", conv)
    assert pq == [1.0]
    assert any("labels above 2" in w for w in res.warnings)
    pq, _, _ = ev([3, 1], [2.0, 1.0], "ndcg@1", conv)
    assert pq == [0.0]
    # label 3 is not relevant for P/MAP: relevant only at rank 2.
    pq, _, _ = ev([3, 1], [2.0, 1.0], "map", conv)
    assert pq == [0.5]


@pytest.mark.parametrize("conv", ["letor3", "letor4"])
def test_letor_only_labels_3_4_means_no_relevant(conv: str) -> None:
    pq, _, _ = ev([3, 4, 0], [3.0, 2.0, 1.0], "ndcg@3", conv)
    assert pq == [0.0]


def test_mslr_label_5_gain_0_and_warns() -> None:
    pq, _, res = ev([5, 1], [2.0, 1.0], "ndcg@2", "mslr")
    assert pq == [1.0]
    assert any("labels above 4" in w for w in res.warnings)
    pq, _, _ = ev([5, 1], [2.0, 1.0], "ndcg@1", "mslr")
    assert pq == [0.0]


def test_no_warning_for_labels_in_range() -> None:
    for conv in ALL:
        _, _, res = ev([0, 1, 2], [1.0, 2.0, 3.0], "ndcg@3", conv, docids=["a", "b", "c"])
        assert res.warnings == []


def test_yahoo_accepts_high_labels_for_ndcg() -> None:
    pq, _, res = ev([5, 0], [2.0, 1.0], "ndcg@2", "yahoo")
    assert pq == [1.0]
    assert res.warnings == []


# ------------------------------------------------------------------ no relevant document
def test_no_relevant_document() -> None:
    one = ("yahoo", "lightgbm", "xgboost")
    for conv in ALL:
        pq, _, _ = ev([0, 0, 0], [1.0, 2.0, 3.0], "ndcg@2", conv)
        assert pq == [1.0 if conv in one else 0.0], conv
        pq, _, _ = ev([0, 0, 0], [1.0, 2.0, 3.0], "err", conv)
        assert pq == [0.0], conv
        pq, _, _ = ev([0, 0, 0], [1.0, 2.0, 3.0], "map", conv)
        assert pq == [0.0], conv
        pq, _, _ = ev([0, 0, 0], [1.0, 2.0, 3.0], "meanndcg", conv)
        assert pq == [1.0 if conv in one else 0.0], conv


# ------------------------------------------------------------------------------ n < k
def test_short_list_letor3_null_counted_zero() -> None:
    # q0 has 3 documents (no NDCG@5), q1 is perfect with 5 documents.
    labels = [1, 0, 0, 2, 1, 0, 0, 0]
    scores = [3.0, 2.0, 1.0, 5.0, 4.0, 3.0, 2.0, 1.0]
    pq, mean, _ = ev(labels, scores, "ndcg@5", "letor3", sizes=[3, 5])
    assert math.isnan(pq[0]) and pq[1] == pytest.approx(1.0)
    assert mean == pytest.approx(0.5)
    pq, mean, _ = ev(labels, scores, "p@5", "letor3", sizes=[3, 5])
    assert math.isnan(pq[0]) and pq[1] == pytest.approx(2 / 5)
    assert mean == pytest.approx(0.2)


@pytest.mark.parametrize("conv", ["letor4", "mslr"])
def test_short_list_letor4_mslr_zero(conv: str) -> None:
    labels = [2, 0, 0, 2, 1, 0, 0, 0]
    scores = [3.0, 2.0, 1.0, 5.0, 4.0, 3.0, 2.0, 1.0]
    pq, mean, _ = ev(labels, scores, "ndcg@5", conv, sizes=[3, 5])
    assert pq[0] == 0.0 and pq[1] == pytest.approx(1.0)
    assert mean == pytest.approx(0.5)


@pytest.mark.parametrize("conv", ["yahoo", "ranklib", "trec"])
def test_short_list_by_definition(conv: str) -> None:
    pq, mean, _ = ev([1, 0, 0], [3.0, 2.0, 1.0], "ndcg@10", conv)
    assert pq == [1.0] and mean == 1.0


def test_single_document_queries() -> None:
    expect = {
        "letor3": {"ndcg@1": 1.0, "ndcg@2": math.nan, "p@10": math.nan},
        "letor4": {"ndcg@1": 1.0, "ndcg@2": 0.0, "p@10": 0.1},
        "mslr": {"ndcg@1": 1.0, "ndcg@2": 0.0, "p@10": 0.1},
        "yahoo": {"ndcg@1": 1.0, "ndcg@2": 1.0, "p@10": 0.1},
        "ranklib": {"ndcg@1": 1.0, "ndcg@2": 1.0, "p@10": 1.0},
        "trec": {"ndcg@1": 1.0, "ndcg@2": 1.0, "p@10": 0.1},
    }
    for conv, table in expect.items():
        for m, v in table.items():
            pq, _, _ = ev([2], [-3.0], m, conv)
            if math.isnan(v):
                assert math.isnan(pq[0]), (conv, m)
            else:
                assert pq[0] == pytest.approx(v, abs=1e-12), (conv, m)
        pq, _, _ = ev([2], [-3.0], "map", conv)
        assert pq == [1.0]


# ------------------------------------------------------------------------------- ties
def test_stable_ties_keep_input_order() -> None:
    # labels 0, 2, 1 with scores 1, 1, 0.5: ranked 0, 2, 1.
    for conv in ("letor3", "letor4", "mslr", "yahoo", "ranklib"):
        pq, _, _ = ev([0, 2, 1], [1.0, 1.0, 0.5], "ndcg@1", conv)
        assert pq == [0.0], conv
    pq, _, _ = ev([0, 2, 1], [1.0, 1.0, 0.5], "ndcg@2", "letor4")
    assert pq[0] == pytest.approx(3 / 4)
    pq, _, _ = ev([0, 2, 1], [1.0, 1.0, 0.5], "ndcg@2", "yahoo")
    assert pq[0] == pytest.approx((3 * L3) / (3 + L3))
    # yahoo ERR: R = 0, 3/16, 1/16 -> 3/32 + (13/16)(1/16)/3
    pq, _, _ = ev([0, 2, 1], [1.0, 1.0, 0.5], "err", "yahoo")
    assert pq[0] == pytest.approx(3 / 32 + 13 / 16 / 48, abs=1e-15)


def test_trec_ties_docid_descending() -> None:
    # equal scores: docid "b" > "a" under strcmp, so "b" ranks first.
    pq, _, _ = ev([0, 1], [1.0, 1.0], "ndcg@1", "trec", docids=["a", "b"])
    assert pq == [1.0]
    pq, _, _ = ev([1, 0], [1.0, 1.0], "ndcg@1", "trec", docids=["a", "b"])
    assert pq == [0.0]
    # byte-wise, not numeric: "9" > "10"; and "a" (0x61) > "B" (0x42).
    pq, _, _ = ev([1, 0], [1.0, 1.0], "ndcg@1", "trec", docids=["10", "9"])
    assert pq == [0.0]
    pq, _, _ = ev([1, 0], [1.0, 1.0], "ndcg@1", "trec", docids=["B", "a"])
    assert pq == [0.0]
    pq, _, _ = ev([1, 0], [1.0, 1.0], "ndcg@1", "trec", docids=["b", "B"])
    assert pq == [1.0]


def test_trec_float32_rounding_creates_ties() -> None:
    s = [1.0 + 1e-12, 1.0]  # differ as float64, equal as float32
    assert np.float32(s[0]) == np.float32(s[1])
    pq, _, _ = ev([0, 1], s, "ndcg@1", "trec", docids=["a", "b"])
    assert pq == [1.0]  # tie -> "b" first
    pq, _, _ = ev([0, 1], s, "ndcg@1", "yahoo")
    assert pq == [0.0]  # float64 order
    # a gap float32 can resolve is not a tie
    pq, _, _ = ev([0, 1], [1.0 + 1e-6, 1.0], "ndcg@1", "trec", docids=["a", "b"])
    assert pq == [0.0]


def test_trec_without_docids_uses_position_in_query_and_warns() -> None:
    pq, _, res = ev([0, 1], [1.0, 1.0], "ndcg@1", "trec")
    assert pq == [1.0]  # "1" > "0"
    assert any("no docids" in w for w in res.warnings)
    # positions within a query of 11: "9" > "10" byte-wise, so position 9 (label 1) ranks first
    labels = [0] * 9 + [1, 0]
    pq, _, _ = ev(labels, [0.0] * 11, "ndcg@1", "trec")
    assert pq == [1.0]
    # the second query's positions restart at 0: its "1" (label 0) beats its "0" (label 1)
    pq, _, _ = ev([1, 0, 1, 0], [0.0] * 4, "ndcg@1", "trec", sizes=[2, 2])
    assert pq == [0.0, 0.0]
    # and a query's value does not depend on the queries posted before it
    alone, _, _ = ev([1, 0], [0.0, 0.0], "ndcg@1", "trec")
    assert alone == pq[1:]


def test_duplicate_docids_only_matter_under_trec() -> None:
    with pytest.raises(EvaluationInputError, match=r"query 'q2'.*'d1'"):
        evaluate(np.array([1, 0, 1, 0]), np.ones(4), np.array([0, 2, 4]), "ndcg@1", "trec",
                 docids=["d1", "d2", "d1", "d1"], qids=["q1", "q2"])
    # the same docid in two different queries is fine
    evaluate(np.array([1, 0, 1, 0]), np.ones(4), np.array([0, 2, 4]), "ndcg@1", "trec",
             docids=["d1", "d2", "d1", "d2"])
    evaluate(np.array([1, 0]), np.ones(2), np.array([0, 2]), "ndcg@1", "yahoo",
             docids=["d1", "d1"])


# ------------------------------------------------------------------------------ P and MAP
def test_precision_divisors() -> None:
    labels, scores = [1, 0, 1], [3.0, 2.0, 1.0]
    expect = {"letor3": math.nan, "letor4": 2 / 5, "mslr": 0.0, "yahoo": 2 / 5,
              "ranklib": 2 / 3, "trec": 2 / 5}
    for conv, v in expect.items():
        pq, _, _ = ev(labels, scores, "p@5", conv)
        assert (math.isnan(pq[0]) if math.isnan(v) else pq[0] == pytest.approx(v)), conv


def test_mslr_label_1_not_relevant() -> None:
    pq, _, _ = ev([1, 2], [2.0, 1.0], "p@1", "mslr")
    assert pq == [0.0]
    pq, _, _ = ev([1, 2], [2.0, 1.0], "map", "mslr")
    assert pq == [0.5]
    pq, _, _ = ev([1, 2], [2.0, 1.0], "map", "letor4")
    assert pq == [1.0]


def test_map_divides_by_relevant_documents() -> None:
    # relevant at ranks 2 and 4: AP = (1/2 + 2/4) / 2 (trec: all judged relevant docs).
    for conv in ALL:
        pq, _, _ = ev([0, 1, 0, 2], [4.0, 3.0, 2.0, 1.0], "map", conv)
        assert pq[0] == pytest.approx(0.5 if conv != "mslr" else 0.25), conv


# ------------------------------------------------------------------------------ MeanNDCG
@pytest.mark.parametrize("conv", ["letor4", "mslr"])
def test_meanndcg(conv: str) -> None:
    # ranked gains 0, 1, 3; ideal 3, 1, 0: NDCG@1 = 0, @2 = 1/4, @3 = (1 + 3/log2 3)/4.
    pq, _, res = ev([0, 1, 2], [3.0, 2.0, 1.0], "meanndcg", conv)
    assert pq[0] == pytest.approx((0 + 0.25 + (1 + 3 * L3) / 4) / 3, abs=1e-12)
    assert res.derived["meanndcg"] is False


# ---------------------------------------------------------------------------------- ERR
def test_err_top_label_variant() -> None:
    # R = (2^l - 1)/4 for l = 2, 1, 0: 3/4 + (1/4)(1/4)/2.
    pq, _, _ = ev([2, 1, 0], [3.0, 2.0, 1.0], "err:top=2", "yahoo")
    assert pq[0] == pytest.approx(0.78125, abs=1e-15)
    pq, _, _ = ev([2, 1, 0], [3.0, 2.0, 1.0], "err", "yahoo")
    assert pq[0] == pytest.approx(3 / 16 + 13 / 16 / 32, abs=1e-15)
    pq, _, _ = ev([2, 1, 0], [3.0, 2.0, 1.0], "err@1", "ranklib")
    assert pq[0] == pytest.approx(3 / 16, abs=1e-15)


def test_err_derived_letor_trec() -> None:
    # letor: R = g/3 -> 1, 1/3; trec: R = l/4 -> 1/2, 1/4; mslr: R = g/15.
    pq, _, res = ev([2, 1], [2.0, 1.0], "err", "letor4")
    assert pq[0] == pytest.approx(1.0) and res.derived["err"]
    pq, _, _ = ev([1, 2], [2.0, 1.0], "err", "letor3")
    assert pq[0] == pytest.approx(1 / 3 + (2 / 3) * 1 / 2)
    pq, _, _ = ev([2, 1], [2.0, 1.0], "err", "trec", docids=["a", "b"])
    assert pq[0] == pytest.approx(0.5 + 0.5 * 0.25 / 2)
    pq, _, _ = ev([4, 2], [2.0, 1.0], "err", "mslr")
    assert pq[0] == pytest.approx(1.0)


@pytest.mark.parametrize("conv", ["yahoo", "ranklib"])
def test_err_rejects_label_5(conv: str) -> None:
    with pytest.raises(EvaluationInputError, match=r"query 'b'.*label 5"):
        evaluate(np.array([1, 0, 5, 0]), np.arange(4.0), np.array([0, 2, 4]), "err", conv,
                 qids=["a", "b"])
    # with an explicit top grade the label is fine
    evaluate(np.array([1, 0, 5, 0]), np.arange(4.0), np.array([0, 2, 4]), "err:top=5", conv)


@pytest.mark.shared_data
def test_err_top2_check_value_mq2008() -> None:
    """Busa-Fekete et al. 2013: the best single feature on MQ2008 has ERR 0.297 (0.2975)."""
    from tests.conftest import SHARED_DATA

    base = SHARED_DATA / "MQ2008"
    if not (base / "Fold1" / "test.txt").exists():
        pytest.skip(f"MQ2008 not found at {base} (../shared/data is absent)")
    from tunemix.core.data.svmlight import read_svmlight

    folds = [read_svmlight(base / f"Fold{i}" / "test.txt", n_features=46) for i in range(1, 6)]
    best = max(
        np.mean([mean_metric(d.labels, d.features[:, j].astype(np.float64), d.query_offsets,
                             "err:top=2", "yahoo") for d in folds])
        for j in range(46)
    )
    assert round(best, 4) == 0.2975


# ------------------------------------------------------------------------ derived, cutoffs
def test_derived_flags() -> None:
    table = {
        "letor3": {"ndcg@5": False, "err": True, "p@5": False, "map": False, "meanndcg": True,
                   "dcg@5": True},
        "letor4": {"ndcg@5": False, "err": True, "meanndcg": False, "dcg@5": True},
        "mslr": {"err@10": True, "meanndcg": False, "map": False},
        "yahoo": {"ndcg@10": False, "err": False, "err@10": True, "p@5": True, "map": True,
                  "err:top=2": True, "err:top=4": False},
        "ranklib": {"dcg@10": False, "err@10": False, "p@5": False, "map": False,
                    "meanndcg": True},
        "trec": {"ndcg@10": False, "err": True, "p@5": False, "map": False},
    }
    for conv, expect in table.items():
        res = evaluate(np.array([2, 1, 0, 0, 1, 0]), np.arange(6.0), np.array([0, 6]),
                       list(expect), conv, docids=list("abcdef"))
        assert res.derived == expect, conv


def test_cutoff_limits() -> None:
    lab, sc, off = np.array([1, 0]), np.array([1.0, 0.0]), np.array([0, 2])
    evaluate(lab, sc, off, "ndcg@16,p@16", "letor3")
    with pytest.raises(EvaluationInputError, match=r"1\.\.16"):
        evaluate(lab, sc, off, "ndcg@17", "letor3")
    for conv in ("letor4", "mslr"):
        evaluate(lab, sc, off, "ndcg@10,p@10", conv)
        with pytest.raises(EvaluationInputError, match=r"1\.\.10"):
            evaluate(lab, sc, off, "ndcg@11", conv)
        with pytest.raises(EvaluationInputError, match=r"1\.\.10"):
            mean_metric(lab, sc, off, "p@11", conv)
    evaluate(lab, sc, off, "ndcg@100,err@50", "yahoo")


def test_conventions_registry() -> None:
    assert sorted(CONVENTIONS) == sorted(ALL)
    with pytest.raises(ValueError, match="letor3"):
        evaluate(np.array([1]), np.array([1.0]), np.array([0, 1]), "ndcg@1", "letor5")
    assert Measure("ndcg", 10) in [Measure.parse("ndcg@10")]


# ------------------------------------------------- more hand-computed rules, tool by tool
def test_letor3_cutoff_16_hand_values() -> None:
    # q0: 16 documents, the only relevant one (label 1) at rank 16: LETOR weight 1/log2(16).
    # q1: 15 documents: no NDCG@16 / P@16 of its own; the mean adds 0 and divides by 2.
    labels = [0] * 15 + [1] + [1] + [0] * 14
    scores = list(range(16, 0, -1)) + list(range(15, 0, -1))
    pq, mean, _ = ev(labels, [float(s) for s in scores], "ndcg@16", "letor3", sizes=[16, 15])
    assert pq[0] == pytest.approx(0.25, abs=1e-15) and math.isnan(pq[1])
    assert mean == pytest.approx(0.125, abs=1e-15)
    pq, mean, _ = ev(labels, [float(s) for s in scores], "p@16", "letor3", sizes=[16, 15])
    assert pq[0] == pytest.approx(1 / 16) and math.isnan(pq[1])
    assert mean == pytest.approx(1 / 32)
    # q1 has values up to its own length: NDCG@15 = 1 (its relevant document is first)
    pq, _, _ = ev(labels, [float(s) for s in scores], "ndcg@15", "letor3", sizes=[16, 15])
    assert pq == [0.0, 1.0]
    lab, sc, off = np.array([1, 0]), np.array([1.0, 0.0]), np.array([0, 2])
    with pytest.raises(EvaluationInputError, match=r"1\.\.16"):
        evaluate(lab, sc, off, "p@17", "letor3")


def test_letor4_precision_counts_missing_ranks_as_irrelevant() -> None:
    # 2 documents, relevant first: P@1 = 1, P@2 = 1/2, P@3 = 1/3 (the hole at rank 3 is
    # irrelevant), P@10 = 1/10; ranklib divides by min(k, n) instead: 1, 1/2, 1/2, 1/2.
    for k, expect4, expect_rl in [(1, 1.0, 1.0), (2, 0.5, 0.5), (3, 1 / 3, 0.5), (10, 0.1, 0.5)]:
        pq, _, _ = ev([1, 0], [2.0, 1.0], f"p@{k}", "letor4")
        assert pq[0] == pytest.approx(expect4, abs=1e-15), k
        pq, _, _ = ev([1, 0], [2.0, 1.0], f"p@{k}", "ranklib")
        assert pq[0] == pytest.approx(expect_rl, abs=1e-15), k


def test_ranklib_ideal_dcg_and_err_truncate_at_min_k_n() -> None:
    # ranked labels 0, 1: DCG@5 = (2^1 - 1)/log2(3); ideal over the top min(5, 2) = 2 ranks is 1.
    pq, _, _ = ev([0, 1], [2.0, 1.0], "dcg@5", "ranklib")
    assert pq[0] == pytest.approx(L3, abs=1e-15)
    pq, _, _ = ev([0, 1], [2.0, 1.0], "ndcg@5", "ranklib")
    assert pq[0] == pytest.approx(L3, abs=1e-15)
    # ERR@k: R = (2^l - 1)/16 for ranked 1, 2, 2; @2 stops after rank 2, @10 after rank 3 (= n).
    r1, r2 = 1 / 16, 3 / 16
    err2 = r1 + (1 - r1) * r2 / 2
    err3 = err2 + (1 - r1) * (1 - r2) * r2 / 3
    pq, _, _ = ev([1, 2, 2], [3.0, 2.0, 1.0], "err@2", "ranklib")
    assert pq[0] == pytest.approx(err2, abs=1e-15)
    for m in ("err@3", "err@10", "err"):
        pq, _, _ = ev([1, 2, 2], [3.0, 2.0, 1.0], m, "ranklib")
        assert pq[0] == pytest.approx(err3, abs=1e-15), m


def test_yahoo_err_covers_the_whole_list() -> None:
    # 12 documents, the only relevant one (label 4, R = 15/16) at rank 12: native ERR (no
    # cutoff) = (15/16)/12; the derived ERR@10 stops before it.
    labels = [0] * 11 + [4]
    scores = [float(12 - i) for i in range(12)]
    pq, _, res = ev(labels, scores, "err", "yahoo")
    assert pq[0] == pytest.approx(15 / 16 / 12, abs=1e-15) and not res.derived["err"]
    pq, _, res = ev(labels, scores, "err@10", "yahoo")
    assert pq == [0.0] and res.derived["err@10"]
    # a query without relevant documents: NDCG 1.0 but ERR 0 (the mean averages both kinds)
    pq, mean, _ = ev([0, 0, 1, 0], [2.0, 1.0, 2.0, 1.0], "ndcg@2", "yahoo", sizes=[2, 2])
    assert pq == [1.0, 1.0] and mean == 1.0
    pq, mean, _ = ev([0, 0, 1, 0], [2.0, 1.0, 2.0, 1.0], "err", "yahoo", sizes=[2, 2])
    assert pq == [0.0, 1 / 16] and mean == pytest.approx(1 / 32, abs=1e-15)


@pytest.mark.parametrize("conv", ["letor4", "mslr"])
def test_meanndcg_runs_over_all_n_positions(conv: str) -> None:
    """The LETOR 4.0 / MSLR scripts compute NDCG at every position 1..n for MeanNDCG (not only
    the 10 they print) and divide by n; no position after n enters."""
    # 12 documents, the only relevant one (label 2, gain 3) at rank 12: NDCG@j = 0 for j < 12,
    # NDCG@12 = 3/log2(12) / 3 (ideal: gain 3 at rank 1, weight 1) -> MeanNDCG = that / 12.
    labels = [0] * 11 + [2]
    scores = [float(12 - i) for i in range(12)]
    pq, _, _ = ev(labels, scores, "meanndcg", conv)
    assert pq[0] == pytest.approx(1 / math.log2(12) / 12, abs=1e-15)
    # every printed NDCG@1..10 is 0 for this query
    pq, _, _ = ev(labels, scores, "ndcg@10", conv)
    assert pq == [0.0]
    # a 2-document query: the mean of NDCG@1 and NDCG@2 only (n < 10 does not add zeros)
    pq, _, _ = ev([0, 1], [2.0, 1.0], "meanndcg", conv)
    assert pq[0] == pytest.approx((0.0 + 1.0) / 2, abs=1e-15)


@pytest.mark.parametrize("conv", ["letor3", "letor4"])
def test_letor_warns_on_repeated_docids(conv: str) -> None:
    # Eval-Score-3.0/4.0.pl store $hsQueryDocLabelScore{$qid}{$did}: a repeated id overwrites.
    res = evaluate(np.array([1, 0, 1, 0]), np.arange(4.0), np.array([0, 2, 4]), "ndcg@1", conv,
                   docids=["a", "b", "c", "c"], qids=["q1", "q2"])
    assert any("query 'q2'" in w and "'c'" in w and "last such line" in w for w in res.warnings)
    # the same id in two different queries is fine; mslr keys documents by line number
    for c, ids in ((conv, ["a", "b", "a", "b"]), ("mslr", ["a", "a", "c", "c"])):
        res = evaluate(np.array([1, 0, 1, 0]), np.arange(4.0), np.array([0, 2, 4]), "ndcg@1", c, docids=ids)
        assert res.warnings == [], c


# ------------------------------------------- the learners' and Python libraries' conventions
def test_sklearn_averages_the_gains_of_tied_documents() -> None:
    # labels 2, 0, 1 with scores 1, 1, 0: ranks 1-2 are a tie group of mean gain (2 + 0)/2 = 1.
    pq, _, res = ev([2, 0, 1], [1.0, 1.0, 0.0], "dcg@1", "sklearn")
    assert pq == [1.0] and res.derived["dcg@1"] is False
    pq, _, _ = ev([2, 0, 1], [1.0, 1.0, 0.0], "ndcg@1", "sklearn")
    assert pq == [0.5]  # ideal DCG@1 = 2 (linear gain)
    # the input order of the tie does not matter
    assert ev([0, 2, 1], [1.0, 1.0, 0.0], "ndcg@1", "sklearn")[0] == [0.5]
    # the cutoff falls inside a group of three (gains 2, 0, 0): ranks 1 and 2 take its mean 2/3
    pq, _, _ = ev([2, 0, 0, 1], [1.0, 1.0, 1.0, 0.0], "ndcg@2", "sklearn")
    assert pq[0] == pytest.approx((2 / 3) * (1 + L3) / (2 + L3), abs=1e-15)
    # -0.0 and 0.0 are one group (np.unique merges them)
    assert ev([2, 0], [-0.0, 0.0], "ndcg@1", "sklearn")[0] == [0.5]
    # derived P@k takes the mean relevance of the group: the expected precision
    pq, _, res = ev([2, 0, 1], [1.0, 1.0, 0.0], "p@1", "sklearn")
    assert pq == [0.5] and res.derived["p@1"] is True


def test_sklearn_empty_short_and_single_document() -> None:
    assert ev([0, 0, 0], [3.0, 2.0, 1.0], "ndcg@2", "sklearn")[0] == [0.0]
    pq, _, _ = ev([0, 1], [2.0, 1.0], "ndcg@10", "sklearn")  # k > n: sums stop at n
    assert pq[0] == pytest.approx(L3, abs=1e-15)
    # ndcg_score refuses one document; its per-sample formula gives 1 (label > 0) or 0
    pq, _, res = ev([2, 0], [1.0, 1.0], "ndcg@3", "sklearn", sizes=[1, 1])
    assert pq == [1.0, 0.0]
    assert any("2 single-document queries" in w for w in res.warnings)
    assert ev([3], [0.5], "dcg@5", "sklearn")[0] == [3.0]
    assert ev([0, 1], [1.0, 1.0], "ndcg@1", "sklearn")[2].warnings == []


def test_lightgbm_exponential_gain_empty_one_stable_ties() -> None:
    # ranked labels 0, 1, 2 (negative scores): DCG = 1/log2(3) + 3/2, ideal 3 + 1/log2(3).
    pq, _, res = ev([0, 1, 2], [-1.0, -2.0, -3.0], "ndcg@3", "lightgbm")
    assert pq[0] == pytest.approx((L3 + 1.5) / (3 + L3), abs=1e-12) and not res.derived["ndcg@3"]
    assert ev([0, 0], [1.0, 2.0], "ndcg@1", "lightgbm")[0] == [1.0]  # no relevant document: 1
    assert ev([0, 2], [1.0, 1.0], "ndcg@1", "lightgbm")[0] == [0.0]  # tie: input order
    assert ev([2, 0], [1.0, 1.0], "ndcg@1", "lightgbm")[0] == [1.0]
    # double scores: a gap float32 would erase still separates
    assert ev([0, 2], [1.0, 1.0 + 1e-12], "ndcg@1", "lightgbm")[0] == [1.0]
    pq, _, _ = ev([0, 1], [2.0, 1.0], "ndcg@10", "lightgbm")  # k > n: by definition
    assert pq[0] == pytest.approx(L3, abs=1e-15)
    assert ev([0], [1.0], "ndcg@5", "lightgbm")[0] == [1.0]
    with pytest.raises(EvaluationInputError, match=r"query 1 .*label 31.*above 30"):
        ev([1, 0, 31, 0], [1.0, 0.0, 1.0, 0.0], "ndcg@1", "lightgbm", sizes=[2, 2])
    ev([30, 0], [1.0, 0.0], "ndcg@1", "lightgbm")


def test_xgboost_float32_ties_and_minus_variant() -> None:
    # 1 + 1e-9 and 1 are one float32: a tie, kept in input order (label 0 first)
    assert ev([0, 2], [1.0 + 1e-9, 1.0], "ndcg@1", "xgboost")[0] == [0.0]
    assert ev([0, 2], [1.0, 1.0 + 1e-9], "ndcg@1", "xgboost")[0] == [0.0]
    assert ev([0, 2], [1.0, 1.0 + 1e-6], "ndcg@1", "xgboost")[0] == [1.0]
    # no relevant document: 1 for ndcg@k, 0 for ndcg@k- (ndcg@k:empty=0); both native
    pq, _, res = ev([0, 0], [1.0, 2.0], "ndcg@1", "xgboost")
    assert pq == [1.0] and not res.derived["ndcg@1"]
    pq, _, res = ev([0, 0], [1.0, 2.0], "ndcg@1-", "xgboost")
    assert pq == [0.0] and not res.derived["ndcg@1:empty=0"]
    # ndcg_exp_gain=false: linear gain, native; ranked 1, 0, 2 -> DCG@2 = 1, ideal 2 + 1/log2(3)
    pq, _, res = ev([2, 1, 0], [0.1, 0.3, 0.2], "ndcg@2:gain=linear", "xgboost")
    assert pq[0] == pytest.approx(1 / (2 + L3), abs=1e-15) and not res.derived["ndcg@2:gain=linear"]
    pq, _, _ = ev([2, 1, 0], [0.1, 0.3, 0.2], "ndcg@2", "xgboost")
    assert pq[0] == pytest.approx(1 / (3 + L3), abs=1e-15)
    assert ev([0, 1], [2.0, 1.0], "ndcg@10", "xgboost")[0][0] == pytest.approx(L3, abs=1e-15)
    with pytest.raises(EvaluationInputError, match="above 31"):
        ev([32, 0], [1.0, 0.0], "ndcg@1", "xgboost")
    assert ev([32, 0], [1.0, 0.0], "ndcg@1:gain=linear", "xgboost")[0] == [1.0]


def test_ranx_gains_precision_map_and_empty() -> None:
    # ndcg: linear gain; ndcg_burges: 2^l - 1. Ranked 0, 1, 2.
    pq, _, res = ev([0, 1, 2], [-1.0, -2.0, -3.0], "ndcg@3", "ranx")
    assert pq[0] == pytest.approx((L3 + 1.0) / (2 + L3), abs=1e-12) and not res.derived["ndcg@3"]
    pq, _, res = ev([0, 1, 2], [-1.0, -2.0, -3.0], "ndcg_burges@3", "ranx")
    assert pq[0] == pytest.approx((L3 + 1.5) / (3 + L3), abs=1e-12) and not res.derived["ndcg@3:gain=exp"]
    # P@k divides by k even when k > n; AP by the number of relevant documents
    assert ev([1, 0, 1], [3.0, 2.0, 1.0], "p@5", "ranx")[0] == [pytest.approx(2 / 5)]
    assert ev([0, 1, 0, 2], [4.0, 3.0, 2.0, 1.0], "map", "ranx")[0] == [pytest.approx(0.5)]
    for m in ("ndcg@3", "ndcg_burges@3", "map", "p@3"):
        assert ev([0, 0, 0], [1.0, 2.0, 3.0], m, "ranx")[0] == [0.0], m
    assert ev([1, 0], [2.0, 1.0], "ndcg@10", "ranx")[0] == [1.0]


def test_ranx_ties_follow_numba_quicksort() -> None:
    # up to 15 documents numba's quicksort is an insertion sort: ties keep input order
    assert ev([0, 2, 0], [1.0, 1.0, 1.0], "ndcg@1", "ranx")[0] == [0.0]
    # 40 tied documents: the one at input position 20 comes 9th (ranks 21..29, 20, 30..)
    labels = [0] * 40
    labels[20] = 1
    pq, _, _ = ev(labels, [0.0] * 40, "ndcg@10", "ranx")
    assert pq[0] == pytest.approx(1 / math.log2(10), abs=1e-15)
    assert ev(labels, [0.0] * 40, "ndcg@10", "lightgbm")[0] == [0.0]  # stable: 21st


def test_derived_flags_new_conventions() -> None:
    table = {
        "lightgbm": {"ndcg@5": False, "ndcg": True, "dcg@5": True, "err": True, "p@5": True, "map": True,
                     "ndcg@5:empty=0": True, "ndcg@5:gain=linear": True, "ndcg@5:gain=exp": False},
        "xgboost": {"ndcg@5": False, "ndcg@5:empty=0": False, "ndcg@5:gain=linear:empty=0": False,
                    "dcg@5": True, "map": True, "meanndcg": True},
        "sklearn": {"ndcg@5": False, "dcg@5": False, "dcg": False, "ndcg@5:gain=exp": True, "err": True,
                    "ndcg@5:empty=1": True, "ndcg@5:empty=0": False},
        "ranx": {"ndcg@5": False, "ndcg@5:gain=exp": False, "dcg@3:gain=exp": False, "p@5": False,
                 "map": False, "err": True, "ndcg@5:empty=1": True, "meanndcg": True},
        "yahoo": {"ndcg@5:gain=exp": False, "ndcg@5:gain=linear": True, "ndcg@5:empty=1": False,
                  "ndcg@5:empty=0": True},
    }
    for conv, expect in table.items():
        res = evaluate(np.array([2, 1, 0, 0, 1, 0]), np.arange(6.0), np.array([0, 6]), list(expect), conv)
        assert res.derived == expect, conv


def test_measure_variants_change_the_value_everywhere() -> None:
    # gain and empty-query overrides apply under any convention (derived where the tool lacks them)
    assert ev([0, 0], [1.0, 2.0], "ndcg@1:empty=1", "trec")[0] == [1.0]
    assert ev([0, 0], [1.0, 2.0], "meanndcg:empty=0", "yahoo")[0] == [0.0]
    pq, _, _ = ev([1, 2], [2.0, 1.0], "ndcg@2:gain=exp", "letor4")  # LETOR discount, gain 2^l - 1
    assert pq[0] == pytest.approx((1 + 3) / (3 + 1), abs=1e-15)
    pq, _, _ = ev([1, 2], [2.0, 1.0], "ndcg@1:gain=linear", "yahoo")
    assert pq[0] == pytest.approx(0.5, abs=1e-15)
