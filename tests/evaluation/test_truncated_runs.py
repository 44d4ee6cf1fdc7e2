"""Truncated runs: a ranking of some of a query's judged documents (``retrieved``).

trec_eval and ranx count a judged document missing from the run as unretrieved: it enters the
ideal DCG and AP's count of relevant documents and takes no rank. Hand-computed values, then
random truncated runs (ties included, queries that retrieve nothing) against pytrec_eval and
ranx themselves; the eight other conventions refuse such a run naming the query.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from tunemix import evaluate as public_evaluate
from tunemix.core.evaluation import CONVENTION_NAMES, EvaluationInputError, evaluate
from tunemix.core.evaluation.conventions import CONVENTIONS

# one query, five judged documents a..e; the run ranks c then b (the top 2 of a truncated run)
LABELS = [2, 0, 1, 1, 0]
SCORES = [0.0, 2.0, 3.0, 0.0, 0.0]
RETRIEVED = [False, True, True, False, False]
DOCIDS = ["a", "b", "c", "d", "e"]
LOG2_3 = math.log2(3)
ACCEPTING = ("trec", "ranx")


def one(convention: str, measures: list[str], **kw: object) -> dict[str, float]:
    res = evaluate(LABELS, SCORES, [0, 5], measures, convention, docids=DOCIDS, qids=["q"], retrieved=RETRIEVED, **kw)
    return {m: float(res.per_query[m][0]) for m in res.per_query}


@pytest.mark.parametrize("convention", ACCEPTING)
def test_unretrieved_judged_documents_by_hand(convention: str) -> None:
    v = one(convention, ["ndcg@1", "ndcg@3", "ndcg@10", "p@3", "p@10", "map", "dcg@10"])
    # linear gain, ranked labels 1 (c), 0 (b): DCG = 1/log2(2) + 0 = 1 at every cut-off >= 1
    assert v["dcg@10"] == pytest.approx(1.0, abs=1e-12)
    # the ideal comes from all five judged labels 2, 1, 1, 0, 0, not from the two ranked ones
    assert v["ndcg@1"] == pytest.approx(1 / 2, abs=1e-12)
    assert v["ndcg@3"] == pytest.approx(1 / (2 + 1 / LOG2_3 + 1 / 2), abs=1e-12)
    assert v["ndcg@10"] == pytest.approx(v["ndcg@3"], abs=1e-12)  # labels past the third add 0 gain
    # P@k divides by k: 1 relevant of the top 3 and of the top 10
    assert v["p@3"] == pytest.approx(1 / 3, abs=1e-12)
    assert v["p@10"] == pytest.approx(1 / 10, abs=1e-12)
    # AP divides by the 3 relevant judged documents, two of which were never retrieved: (1/1) / 3
    assert v["map"] == pytest.approx(1 / 3, abs=1e-12)
    # the same list ranked in full (a, d, e after b) scores higher: the truncation is not ignored
    full = evaluate(LABELS, [0.5, 2.0, 3.0, 0.4, 0.3], [0, 5], ["map"], convention, docids=DOCIDS)
    assert full.per_query["map"][0] > v["map"] + 0.1


@pytest.mark.parametrize("convention", ACCEPTING)
def test_a_query_that_retrieves_nothing_scores_zero(convention: str) -> None:
    res = evaluate([1, 0, 2, 1], [0.0, 0.0, 5.0, 1.0], [0, 2, 4], ["ndcg@5", "p@5", "map"], convention,
                   docids=["x", "y", "x", "y"], retrieved=[False, False, True, True])
    for m in ("ndcg@5", "p@5", "map"):
        assert res.per_query[m][0] == 0.0
    # the second query ranks both documents, best first: perfect NDCG and AP
    assert res.per_query["ndcg@5"][1] == pytest.approx(1.0, abs=1e-12)
    assert res.per_query["map"][1] == pytest.approx(1.0, abs=1e-12)
    assert res.mean["map"] == pytest.approx(0.5, abs=1e-12)


def test_all_retrieved_is_the_untruncated_evaluation() -> None:
    rng = np.random.default_rng(5)
    labels, scores = rng.integers(0, 3, 30), np.round(rng.normal(size=30), 1)
    off = [0, 7, 19, 30]
    for conv in CONVENTION_NAMES:
        ms = ["ndcg@5", "p@5", "map"] if conv not in ("lightgbm", "xgboost", "sklearn") else ["ndcg@5"]
        a = evaluate(labels, scores, off, ms, conv)
        b = evaluate(labels, scores, off, ms, conv, retrieved=np.ones(30, dtype=bool))
        for m in ms:
            np.testing.assert_array_equal(a.per_query[m], b.per_query[m])


@pytest.mark.parametrize("convention", [c for c in CONVENTION_NAMES if c not in ACCEPTING])
def test_tools_that_rank_every_judged_document_refuse_naming_the_query(convention: str) -> None:
    with pytest.raises(EvaluationInputError) as err:
        evaluate([1, 0, 2, 1], [1.0, 0.0, 5.0, 1.0], [0, 2, 4], ["ndcg@5"], convention,
                 qids=["full", "cut"], retrieved=[True, True, True, False])
    text = str(err.value)
    assert "query 'cut' (index 1)" in text
    assert "holds 1 of the query's 2 judged documents" in text
    assert CONVENTIONS[convention].truncated_refusal in text  # the tool's own reason


def test_retrieved_is_checked() -> None:
    with pytest.raises(EvaluationInputError, match="one entry per document"):
        evaluate([1, 0], [1.0, 0.0], [0, 2], ["ndcg@5"], "trec", retrieved=[True])
    with pytest.raises(EvaluationInputError, match="booleans"):
        evaluate([1, 0], [1.0, 0.0], [0, 2], ["ndcg@5"], "trec", retrieved=[0.5, 1.0])


def test_public_evaluate_takes_retrieved() -> None:
    out = public_evaluate(LABELS, SCORES, group=[5], metrics=["ndcg@3", "map"], convention="trec",
                          retrieved=RETRIEVED)
    assert out["per_query"]["map"] == [pytest.approx(1 / 3, abs=1e-12)]
    with pytest.raises(ValueError, match="query 0"):
        public_evaluate(LABELS, SCORES, group=[5], metrics=["ndcg@3"], convention="yahoo", retrieved=RETRIEVED)


def random_runs(seed: int) -> tuple[list[int], list[float], list[bool], list[int], list[str], list[str]]:
    """Queries of 1-14 judged documents, integer scores (ties; exact as float32), each document
    retrieved with a per-query probability (0 included)."""
    rng = np.random.default_rng(seed)
    labels: list[int] = []
    scores: list[float] = []
    retrieved: list[bool] = []
    off, docids, qids = [0], [], []
    for q in range(int(rng.integers(2, 7))):
        n = int(rng.integers(1, 15))
        labels += rng.integers(0, 4, n).tolist()
        scores += rng.integers(0, 5, n).astype(float).tolist()
        retrieved += (rng.random(n) < rng.choice([0.0, 0.3, 0.7, 1.0])).tolist()
        docids += [f"d{j:02d}" for j in rng.permutation(n)]
        qids.append(f"q{q}")
        off.append(off[-1] + n)
    return labels, scores, retrieved, off, docids, qids


def qrels_and_run(labels: list[int], scores: list[float], retrieved: list[bool], off: list[int],
                  docids: list[str], qids: list[str]) -> tuple[dict[str, dict[str, int]], dict[str, dict[str, float]]]:
    qrels = {q: {docids[i]: labels[i] for i in range(off[k], off[k + 1])} for k, q in enumerate(qids)}
    run = {q: {docids[i]: scores[i] for i in range(off[k], off[k + 1]) if retrieved[i]} for k, q in enumerate(qids)}
    return qrels, run


@pytest.mark.parametrize("seed", range(12))
def test_trec_equals_trec_eval_on_truncated_runs(seed: int) -> None:
    pytrec_eval = pytest.importorskip("pytrec_eval")
    labels, scores, retrieved, off, docids, qids = random_runs(seed)
    qrels, run = qrels_and_run(labels, scores, retrieved, off, docids, qids)
    theirs = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.1,3,10", "P.5", "map", "ndcg"}).evaluate(run)
    names = {"ndcg@1": "ndcg_cut_1", "ndcg@3": "ndcg_cut_3", "ndcg@10": "ndcg_cut_10", "p@5": "P_5", "map": "map",
             "ndcg": "ndcg"}
    ours = evaluate(labels, scores, off, list(names), "trec", docids=docids, qids=qids, retrieved=retrieved)
    for k, q in enumerate(qids):
        for m, t in names.items():
            assert ours.per_query[m][k] == pytest.approx(theirs[q][t], abs=1e-9), (q, m)


@pytest.mark.parametrize("seed", range(12))
def test_ranx_equals_ranx_on_truncated_runs(seed: int) -> None:
    ranx = pytest.importorskip("ranx")
    labels, scores, retrieved, off, docids, qids = random_runs(seed)
    if not any(retrieved):
        retrieved[0] = True  # ranx refuses a run without a single document
    qrels, run = qrels_and_run(labels, scores, retrieved, off, docids, qids)
    names = {"ndcg@3": "ndcg@3", "ndcg@10": "ndcg@10", "p@5": "precision@5", "map": "map", "dcg@5": "dcg@5"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # numba's type-safety notes inside ranx
        theirs = ranx.evaluate(ranx.Qrels(qrels), ranx.Run(run), list(names.values()), return_mean=False)
    ours = evaluate(labels, scores, off, list(names), "ranx", docids=docids, qids=qids, retrieved=retrieved)
    for m, t in names.items():
        np.testing.assert_allclose(ours.per_query[m], theirs[t], rtol=0, atol=1e-9, err_msg=m)
