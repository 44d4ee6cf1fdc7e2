"""The ``trec`` convention against the real trec_eval 9.x C code (pytrec-eval-terrier).

How the comparison stays faithful to ``trec_eval qrels run`` on files:

- pytrec_eval hands each score to trec_eval's ``TEXT_RESULTS.sim`` with ``PyFloat_AsDouble``;
  in trec_eval 9.x that field is a C ``float``, so the double is rounded to float32 exactly
  as ``atof(text)`` is when trec_eval reads a run file (``get_trec_results.c``). We still go
  through text: the run and qrels are written as trec files (scores with ``repr``, which
  round-trips the double) and parsed back with pytrec_eval's own file parsers.
  ``test_bundled_trec_eval_rounds_scores_to_float32`` pins this down: it fails if a future
  wheel bundles trec_eval 10 (``sim`` became ``double`` there, usnistgov/trec_eval PR #38).
- trec_eval then sorts by score descending and docno descending (strcmp, ``form_res_rels.c``);
  pytrec_eval's own pre-sort is overridden by that.
- trec_eval evaluates only queries present in both qrels and run (we post every query in
  both); a qrels entry with label 0 is a judged non-relevant document; relevance_level 1.
- The tool's mean is the arithmetic mean of its per-query values (``all`` line).
"""

from __future__ import annotations

import math
import string

import numpy as np
import pytest

from tunemix.core.evaluation import evaluate

pytrec_eval = pytest.importorskip(
    "pytrec_eval",
    reason="pytrec-eval-terrier is not installed (pip install pytrec-eval-terrier); "
    "cannot cross-check the trec convention against trec_eval",
)

CUTS = (1, 3, 5, 10, 20)
PRECS = (5, 10)
TREC_MEASURES = {"ndcg_cut." + ",".join(map(str, CUTS)), "P." + ",".join(map(str, PRECS)), "map"}
OURS_TO_TREC = {
    **{f"ndcg@{k}": f"ndcg_cut_{k}" for k in CUTS},
    **{f"p@{k}": f"P_{k}" for k in PRECS},
    "map": "map",
}


def trec_eval_values(
    labels: np.ndarray, scores: np.ndarray, sizes: list[int], docids: list[str], qids: list[str]
) -> dict[str, dict[str, float]]:
    """Per query, trec_eval's values for TREC_MEASURES, via trec-format text files."""
    qrel_lines, run_lines = [], []
    start = 0
    for qid, size in zip(qids, sizes, strict=True):
        for i in range(start, start + size):
            qrel_lines.append(f"{qid} 0 {docids[i]} {int(labels[i])}")
            run_lines.append(f"{qid} Q0 {docids[i]} 0 {float(scores[i])!r} tunemix")
        start += size
    qrels = pytrec_eval.parse_qrel(qrel_lines)
    run = pytrec_eval.parse_run(run_lines)
    out: dict[str, dict[str, float]] = pytrec_eval.RelevanceEvaluator(qrels, TREC_MEASURES).evaluate(run)
    return out


def assert_agrees(
    labels: np.ndarray,
    scores: np.ndarray,
    sizes: list[int],
    docids: list[str] | None,
    qids: list[str],
    context: str = "",
) -> None:
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    ours = evaluate(labels, scores, offsets, list(OURS_TO_TREC), "trec", docids=docids, qids=qids)
    tool_docids = docids
    if tool_docids is None:  # our rule: the 0-based position in the query, as a decimal string
        tool_docids = [str(i) for s in sizes for i in range(s)]
    tool = trec_eval_values(labels, scores, sizes, tool_docids, qids)
    assert sorted(tool) == sorted(qids), context  # every query evaluated, none dropped
    for ours_key, trec_key in OURS_TO_TREC.items():
        mine = ours.per_query[ours_key]
        theirs = np.array([tool[q][trec_key] for q in qids])
        bad = np.flatnonzero(np.abs(mine - theirs) > 1e-9)
        assert bad.size == 0, (
            f"{context} {ours_key}: query {qids[bad[0]]!r} ours {mine[bad[0]]!r} trec_eval "
            f"{theirs[bad[0]]!r}"
        )
        assert ours.mean[ours_key] == pytest.approx(float(np.mean(theirs)), abs=1e-9), (context, ours_key)


# ------------------------------------------------------------------------ fixed cases
def test_bundled_trec_eval_rounds_scores_to_float32() -> None:
    """1 + 1e-12 and 1 collide as float32: trec_eval 9.x sees a tie and ranks docno "b" first."""
    qrels = {"q": {"a": 0, "b": 1}}
    ev = pytrec_eval.RelevanceEvaluator(qrels, {"P.1"})
    assert ev.evaluate({"q": {"a": 1.0 + 1e-12, "b": 1.0}})["q"]["P_1"] == 1.0
    # a gap float32 resolves is not a tie
    assert ev.evaluate({"q": {"a": 1.0 + 1e-6, "b": 1.0}})["q"]["P_1"] == 0.0
    assert_agrees(np.array([0, 1]), np.array([1.0 + 1e-12, 1.0]), [2], ["a", "b"], ["q"])


def test_float32_overflow_and_underflow(recwarn: pytest.WarningsRecorder) -> None:
    """1e39 and 1e40 both become +inf as C floats (a tie), 1e-46 and -0.0 become 0 (a tie),
    1e-40 a float32 subnormal: trec_eval ranks them so, and we warn about nothing."""
    labels = np.array([0, 1, 0, 1, 0, 1, 2, 0], dtype=np.int32)
    scores = np.array([1e39, 1e40, -1e39, -1e300, 1e-46, 1e-47, 1e-40, -0.0])
    ids = list("abcdefgh")
    assert_agrees(labels, scores, [8], ids, ["1"])
    assert_agrees(labels, scores, [8], ids[::-1], ["1"])
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]
    from tests.evaluation.naive import evaluate_naive

    values, _ = evaluate_naive("ndcg", 3, None, labels.tolist(), scores.tolist(), [8], "trec", ids)
    ours = evaluate(labels, scores, np.array([0, 8]), "ndcg@3", "trec", docids=ids)
    assert ours.per_query["ndcg@3"][0] == pytest.approx(values[0], abs=1e-12)


def test_docid_strcmp_order_on_ties() -> None:
    # "9" > "10" > "1" under strcmp; "a" > "Z" > "9"; a prefix sorts before its extensions.
    docids = ["10", "9", "1", "Z", "a", "ab", "a-", "A"]
    for rel in range(len(docids)):
        labels = np.zeros(len(docids), dtype=np.int32)
        labels[rel] = 1
        assert_agrees(labels, np.zeros(len(docids)), [len(docids)], docids, ["7"], f"rel={rel}")


def test_without_docids_positions_as_strings() -> None:
    # 12 tied documents: positions "0".."11" in strcmp-descending order are 9, 8, ..., 2, 11, 10, 1, 0.
    rng = np.random.default_rng(5)
    labels = rng.integers(0, 3, size=12).astype(np.int32)
    assert_agrees(labels, np.zeros(12), [12], None, ["1"])
    assert_agrees(np.array([0, 1, 2, 0, 3, 0, 1]), np.zeros(7), [3, 4], None, ["1", "2"])


def test_no_relevant_single_document_and_short_queries() -> None:
    labels = np.array([0, 0, 0, 2, 0, 1, 0, 3, 4], dtype=np.int32)
    scores = np.array([0.3, 0.3, 0.1, 5.0, 1.0, 2.0, 0.5, 0.5, 0.5])
    sizes = [3, 1, 2, 3]  # all-zero query, single relevant document, two short lists
    docids = ["d1", "d2", "d3", "x", "d10", "d9", "b", "bb", "b0"]
    assert_agrees(labels, scores, sizes, docids, ["1", "2", "3", "4"])
    # a single non-relevant document, and labels with gaps (0 and 3 only)
    assert_agrees(np.array([0, 3, 0, 0], dtype=np.int32), np.array([1.0, 0.5, 0.7, 0.9]), [1, 3],
                  ["z", "p", "q", "r"], ["10", "9"])


# ------------------------------------------------------------------------ random cases
def _random_docids(rng: np.random.Generator, n: int) -> list[str]:
    alphabet = string.digits + string.ascii_letters + "-_.éü"  # non-ASCII: UTF-8 byte order
    seen: set[str] = set()
    out: list[str] = []
    while len(out) < n:
        if rng.random() < 0.5:  # numeric ids of different lengths: strcmp order != numeric order
            d = str(int(rng.integers(0, 10 ** int(rng.integers(1, 4)))))
        else:
            length = int(rng.integers(1, 6))
            d = "".join(alphabet[int(i)] for i in rng.integers(0, len(alphabet), size=length))
        if d not in seen:
            seen.add(d)
            out.append(d)
    return out


def _random_scores(rng: np.random.Generator, n: int) -> np.ndarray:
    kind = int(rng.integers(0, 4))
    if kind == 0:  # heavy ties: few distinct values
        return rng.integers(0, 3, size=n).astype(np.float64) / 2.0
    if kind == 1:  # float64 values that collide in float32
        base = rng.choice([0.1, 1.0, 3.7, -2.5], size=n)
        return base + rng.integers(0, 4, size=n) * base * 1e-12
    if kind == 2:  # near-collisions some of which float32 still separates
        return 1.0 + rng.integers(0, 5, size=n) * rng.choice([1e-9, 1e-7, 1e-5], size=n)
    return rng.normal(size=n)  # generic: no ties


@pytest.mark.parametrize("seed", range(40))
def test_random_inputs(seed: int) -> None:
    rng = np.random.default_rng(1000 + seed)
    for case in range(10):
        n_queries = int(rng.integers(1, 7))
        sizes = [int(s) for s in rng.choice([1, 2, 3, 5, 11, 25], size=n_queries)]
        n = sum(sizes)
        max_label = int(rng.integers(1, 5))
        labels = rng.integers(0, max_label + 1, size=n).astype(np.int32)
        labels[rng.random(n) < 0.4] = 0  # many non-relevant documents, some all-zero queries
        scores = _random_scores(rng, n)
        qids = [str(q) for q in rng.permutation(100)[:n_queries]]
        use_docids = rng.random() < 0.8
        docids = None
        if use_docids:
            docids = [d for s in sizes for d in _random_docids(rng, s)]
        assert_agrees(labels, scores, sizes, docids, qids, f"seed={seed} case={case}")


# ------------------------------------------------------------------------ MQ2008
@pytest.mark.shared_data
def test_mq2008_fold1_single_feature_scorers() -> None:
    from tests.conftest import SHARED_DATA
    from tunemix.core.data.svmlight import read_svmlight

    path = SHARED_DATA / "MQ2008" / "Fold1" / "test.txt"
    if not path.exists():
        pytest.skip(f"MQ2008 not found at {path} (../shared/data is absent)")
    data = read_svmlight(path, n_features=46)
    assert data.docids is not None
    sizes = [int(s) for s in data.query_sizes]
    qids = [str(q) for q in data.qids]
    docids = [str(d) for d in data.docids]
    # Feature 1 (column 0) has many exact ties (docid order decides); a float64 combination
    # whose small term float32 rounding erases; and one generic feature.
    f = data.features.astype(np.float64)
    scorers = {
        "feature 1": f[:, 0],
        "feature 40 + 1e-10 * feature 1": f[:, 39] + 1e-10 * f[:, 0],
        "feature 25": f[:, 24],
    }
    for name, scores in scorers.items():
        assert_agrees(data.labels, scores, sizes, docids, qids, name)
        assert not math.isnan(float(np.sum(scores)))
