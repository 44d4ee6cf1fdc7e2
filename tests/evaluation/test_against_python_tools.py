"""The ``lightgbm``, ``xgboost``, ``sklearn`` and ``ranx`` conventions against the real packages.

How each tool is made to show its numbers:

- LightGBM reports only the mean of its ``ndcg@k`` eval metric. A ``Booster`` built on a
  ``Dataset`` whose ``init_score`` is our score vector evaluates that score before any tree is
  grown (``eval_train``: the C API's doubles, not a printed string). The mean is compared on the
  whole batch; per-query values come from each query as its own data set.
- XGBoost likewise: ``base_margin`` = our scores, zero boosting rounds, ``Booster.eval`` prints
  ``ndcg@k`` / ``ndcg@k-`` with 17 significant digits (``ndcg_exp_gain`` false for the linear
  gain). The prediction is the float32 of the margin, checked here.
- scikit-learn takes one row per query (equal lengths only): each query is its own 1 x n call of
  ``ndcg_score`` / ``dcg_score``; a batch of equal-length queries is also compared in one call.
  Both refuse a single document; there we compare with its per-sample kernels
  (``_ndcg_sample_scores``, ``_dcg_sample_scores``), which is what we report (with a warning).
- ranx: one ``Qrels`` (every document, label 0 included) and one ``Run`` per batch;
  ``evaluate(..., return_mean=False)`` gives per-query values, ``return_mean=True`` the mean.

Inputs: random batches with heavy ties, scores that are equal only as float32, queries without a
relevant document, single-document queries, and cutoffs larger than the list (k = 30 > 25).
Every per-query value and every mean must agree to 1e-9.
"""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest

from tunemix.core.evaluation import evaluate

TOL = 1e-9
KS = (1, 3, 5, 10, 30)
SIZES = (1, 2, 3, 5, 8, 17, 25)  # > 15 documents: numba's quicksort (ranx) is not stable there


def _scores(rng: np.random.Generator, n: int) -> np.ndarray:
    kind = int(rng.integers(0, 5))
    if kind == 0:  # heavy ties: few distinct values
        return rng.integers(0, 3, size=n).astype(np.float64) / 2.0
    if kind == 1:  # distinct as float64, equal as float32
        base = rng.choice([0.1, 1.0, 3.7, -2.5], size=n)
        return base + rng.integers(0, 4, size=n) * base * 1e-12
    if kind == 2:  # near-collisions some of which float32 still separates
        return 1.0 + rng.integers(0, 5, size=n) * rng.choice([1e-9, 1e-7, 1e-5], size=n)
    if kind == 3:  # all tied, with signed zeros
        return rng.choice([0.0, -0.0], size=n)
    return rng.normal(size=n)


def random_batch(seed: int, n_queries: int = 8, max_label: int = 4, sizes: tuple[int, ...] = SIZES):
    """labels, scores, per-query sizes: some queries all 0, some of one document."""
    rng = np.random.default_rng(seed)
    sz = [int(s) for s in rng.choice(sizes, size=n_queries)]
    labels, scores = [], []
    for n in sz:
        lab = rng.integers(0, max_label + 1, size=n)
        lab[rng.random(n) < 0.4] = 0
        if rng.random() < 0.15:
            lab[:] = 0
        labels.append(lab)
        scores.append(_scores(rng, n))
    return np.concatenate(labels).astype(np.int32), np.concatenate(scores), sz


def _offsets(sizes: list[int]) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)


def _split(x: np.ndarray, sizes: list[int]) -> list[np.ndarray]:
    return np.split(x, np.cumsum(sizes)[:-1])


def _assert_close(ours: np.ndarray, theirs: np.ndarray, context: str) -> float:
    diff = np.abs(np.asarray(ours, dtype=np.float64) - np.asarray(theirs, dtype=np.float64))
    bad = np.flatnonzero(~(diff <= TOL))
    assert bad.size == 0, f"{context}: query {bad[0]} ours {ours[bad[0]]!r} tool {theirs[bad[0]]!r}"
    return float(diff.max()) if diff.size else 0.0


# --------------------------------------------------------------------------------- LightGBM
def _lgb_means(labels: np.ndarray, scores: np.ndarray, sizes: list[int], ks: tuple[int, ...]) -> dict[str, float]:
    lgb = pytest.importorskip("lightgbm")
    params = {"objective": "lambdarank", "metric": "ndcg", "eval_at": list(ks), "verbosity": -1,
              "num_threads": 1}
    ds = lgb.Dataset(np.zeros((labels.shape[0], 1)), label=labels, group=sizes, init_score=scores,
                     params={"verbosity": -1}, free_raw_data=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        booster = lgb.Booster(params, ds)
        return {name: float(value) for _, name, value, _ in booster.eval_train()}


@pytest.mark.parametrize("seed", range(12))
def test_lightgbm(seed: int) -> None:
    labels, scores, sizes = random_batch(100 + seed, n_queries=20)
    ms = [f"ndcg@{k}" for k in KS]
    ours = evaluate(labels, scores, _offsets(sizes), ms, "lightgbm")
    means = _lgb_means(labels, scores, sizes, KS)
    for m in ms:
        assert ours.mean[m] == pytest.approx(means[m], abs=TOL), m
        assert not ours.derived[m]
    per_query = {m: [] for m in ms}
    for lab, sc in zip(_split(labels, sizes), _split(scores, sizes), strict=True):
        one = _lgb_means(lab, sc, [lab.shape[0]], KS)
        for m in ms:
            per_query[m].append(one[m])
    for m in ms:
        _assert_close(ours.per_query[m], np.array(per_query[m]), f"lightgbm {m} seed {seed}")


def test_lightgbm_refuses_label_31_and_so_do_we() -> None:
    lgb = pytest.importorskip("lightgbm")
    labels, scores = np.array([31, 0], dtype=np.int32), np.array([0.5, 0.1])
    with pytest.raises(lgb.basic.LightGBMError, match="label mappings"):
        _lgb_means(labels, scores, [2], (1,))
    with pytest.raises(ValueError, match="above 30"):
        evaluate(labels, scores, np.array([0, 2]), "ndcg@1", "lightgbm")
    assert _lgb_means(np.array([30, 0]), scores, [2], (1,))["ndcg@1"] == 1.0
    evaluate(labels, scores, np.array([0, 2]), "ndcg@1:gain=linear", "lightgbm")  # derived: no limit


# ---------------------------------------------------------------------------------- XGBoost
_XGB_FIELD = re.compile(r"\teval-(\S+?):(\S+)")


def _xgb_means(labels: np.ndarray, scores: np.ndarray, sizes: list[int], metrics: list[str],
               exp_gain: bool = True) -> dict[str, float]:
    xgb = pytest.importorskip("xgboost")
    dm = xgb.DMatrix(np.zeros((labels.shape[0], 1)), label=labels, base_margin=scores)
    dm.set_group(sizes)
    params = {"objective": "rank:ndcg", "eval_metric": metrics, "ndcg_exp_gain": exp_gain, "nthread": 1}
    booster = xgb.train(params, dm, num_boost_round=0)
    pred = booster.predict(dm, output_margin=True)
    np.testing.assert_array_equal(pred, scores.astype(np.float32))  # what the metric ranks by
    return {name: float(value) for name, value in _XGB_FIELD.findall(booster.eval(dm))}


@pytest.mark.parametrize("seed", range(12))
def test_xgboost(seed: int) -> None:
    labels, scores, sizes = random_batch(200 + seed, n_queries=20)
    tool_names = [f"ndcg@{k}" for k in KS] + [f"ndcg@{k}-" for k in KS] + ["ndcg", "ndcg-"]
    ours_names = [f"ndcg@{k}" for k in KS] + [f"ndcg@{k}:empty=0" for k in KS] + ["ndcg", "ndcg:empty=0"]
    linear_names = [f"ndcg@{k}:gain=linear" for k in KS] + [f"ndcg@{k}:gain=linear:empty=0" for k in KS]
    ours = evaluate(labels, scores, _offsets(sizes), ours_names + linear_names, "xgboost")
    assert not any(ours.derived.values())
    runs = [(tool_names, ours_names, True), (tool_names[: 2 * len(KS)], linear_names, False)]
    for tool_ms, our_ms, exp_gain in runs:
        means = _xgb_means(labels, scores, sizes, tool_ms, exp_gain)
        per_query: dict[str, list[float]] = {m: [] for m in tool_ms}
        for lab, sc in zip(_split(labels, sizes), _split(scores, sizes), strict=True):
            one = _xgb_means(lab, sc, [lab.shape[0]], tool_ms, exp_gain)
            for m in tool_ms:
                per_query[m].append(one[m])
        for tm, om in zip(tool_ms, our_ms, strict=True):
            assert ours.mean[om] == pytest.approx(means[tm], abs=TOL), (om, tm)
            _assert_close(ours.per_query[om], np.array(per_query[tm]), f"xgboost {om} seed {seed}")


def test_xgboost_uncut_ndcg_is_ndcg_at_32() -> None:
    """XGBoost's ``ndcg`` without ``@k`` stops at 32 (LambdaRankParam::TopK, DefaultK() = 32): a
    query of 33 documents whose only relevant one is ranked last scores 0, not 1/log2(34)."""
    pytest.importorskip("xgboost")
    labels = np.zeros(33, dtype=np.int32)
    labels[-1] = 1
    scores = -np.arange(33, dtype=np.float64)
    ours = evaluate(labels, scores, np.array([0, 33]), ["ndcg", "ndcg@33"], "xgboost")
    tool = _xgb_means(labels, scores, [33], ["ndcg", "ndcg@33"])
    assert ours.mean["ndcg"] == tool["ndcg"] == 0.0
    assert ours.mean["ndcg@33"] == pytest.approx(tool["ndcg@33"], abs=TOL) and tool["ndcg@33"] > 0.19


@pytest.mark.parametrize("seed", range(6))
def test_xgboost_uncut_ndcg_on_lists_around_32(seed: int) -> None:
    """Lists shorter and longer than the truncation, with ties at the boundary (few distinct
    scores), both gains and both empty rules, per query and mean."""
    labels, scores, sizes = random_batch(300 + seed, n_queries=10, sizes=(20, 31, 32, 33, 34, 40, 64))
    rng = np.random.default_rng(seed)
    scores = np.round(scores * 2) / 2 if rng.random() < 0.5 else scores  # ties across position 32
    for exp_gain, suffix in ((True, ""), (False, ":gain=linear")):
        ours = evaluate(labels, scores, _offsets(sizes), [f"ndcg{suffix}", f"ndcg{suffix}:empty=0"], "xgboost")
        means = _xgb_means(labels, scores, sizes, ["ndcg", "ndcg-"], exp_gain)
        per_query: dict[str, list[float]] = {"ndcg": [], "ndcg-": []}
        for lab, sc in zip(_split(labels, sizes), _split(scores, sizes), strict=True):
            one = _xgb_means(lab, sc, [lab.shape[0]], ["ndcg", "ndcg-"], exp_gain)
            for m in per_query:
                per_query[m].append(one[m])
        for tm, om in (("ndcg", f"ndcg{suffix}"), ("ndcg-", f"ndcg{suffix}:empty=0")):
            assert ours.mean[om] == pytest.approx(means[tm], abs=TOL), (om, tm)
            _assert_close(ours.per_query[om], np.array(per_query[tm]), f"xgboost {om} seed {seed}")


def test_lightgbm_uncut_ndcg_is_our_extension() -> None:
    """LightGBM has no NDCG without a cut-off: ours is flagged derived and says why."""
    labels, scores, sizes = random_batch(7, n_queries=4)
    res = evaluate(labels, scores, _offsets(sizes), ["ndcg", "ndcg@5"], "lightgbm")
    assert res.derived["ndcg"] and not res.derived["ndcg@5"]
    assert any("no NDCG without a cut-off" in w for w in res.warnings)


def test_xgboost_label_limit() -> None:
    pytest.importorskip("xgboost")
    xgb_error = pytest.importorskip("xgboost.core").XGBoostError
    scores = np.array([0.5, 0.1])
    assert _xgb_means(np.array([31, 0]), scores, [2], ["ndcg@1"])["ndcg@1"] == 1.0
    assert evaluate(np.array([31, 0]), scores, np.array([0, 2]), "ndcg@1", "xgboost").mean["ndcg@1"] == 1.0
    with pytest.raises(xgb_error, match="31"):
        _xgb_means(np.array([32, 0]), scores, [2], ["ndcg@1"])
    with pytest.raises(ValueError, match="above 31"):
        evaluate(np.array([32, 0]), scores, np.array([0, 2]), "ndcg@1", "xgboost")
    # the linear gain has no limit in XGBoost
    assert _xgb_means(np.array([40, 0]), scores, [2], ["ndcg@1"], exp_gain=False)["ndcg@1"] == 1.0
    assert evaluate(np.array([40, 0]), scores, np.array([0, 2]), "ndcg@1:gain=linear", "xgboost").mean[
        "ndcg@1:gain=linear"] == 1.0


# ------------------------------------------------------------------------------ scikit-learn
@pytest.mark.parametrize("seed", range(12))
def test_sklearn(seed: int) -> None:
    pytest.importorskip("sklearn")
    from sklearn.metrics import dcg_score, ndcg_score
    from sklearn.metrics._ranking import _dcg_sample_scores, _ndcg_sample_scores

    labels, scores, sizes = random_batch(300 + seed, n_queries=25)
    ks: tuple[int | None, ...] = (*KS, None)
    names = {k: (f"ndcg@{k}" if k else "ndcg", f"dcg@{k}" if k else "dcg") for k in ks}
    ours = evaluate(labels, scores, _offsets(sizes), [n for pair in names.values() for n in pair], "sklearn")
    assert not any(ours.derived.values())
    if 1 in sizes:
        assert any("single-document" in w for w in ours.warnings)
    for k, (nd, dc) in names.items():
        tool_n, tool_d = [], []
        for lab, sc in zip(_split(labels, sizes), _split(scores, sizes), strict=True):
            y, s = lab[None, :].astype(np.float64), sc[None, :]
            if lab.shape[0] == 1:  # the public functions refuse one document
                with pytest.raises(ValueError):
                    ndcg_score(y, s, k=k)
                tool_n.append(float(_ndcg_sample_scores(y, s, k=k)[0]))
                tool_d.append(float(_dcg_sample_scores(y, s, k=k)[0]))
            else:
                tool_n.append(ndcg_score(y, s, k=k))
                tool_d.append(dcg_score(y, s, k=k))
        _assert_close(ours.per_query[nd], np.array(tool_n), f"sklearn {nd} seed {seed}")
        _assert_close(ours.per_query[dc], np.array(tool_d), f"sklearn {dc} seed {seed}")
        assert ours.mean[nd] == pytest.approx(float(np.mean(tool_n)), abs=TOL)


@pytest.mark.parametrize("seed", range(4))
def test_sklearn_batch_of_equal_lengths(seed: int) -> None:
    """One call on a (queries x n) matrix: sklearn's mean is the mean of the rows."""
    pytest.importorskip("sklearn")
    from sklearn.metrics import dcg_score, ndcg_score

    n = (2, 5, 17, 25)[seed]
    labels, scores, sizes = random_batch(400 + seed, n_queries=30, sizes=(n,))
    y, s = labels.reshape(30, n).astype(np.float64), scores.reshape(30, n)
    for k in (1, 3, 10, 30):
        ours = evaluate(labels, scores, _offsets(sizes), [f"ndcg@{k}", f"dcg@{k}"], "sklearn")
        assert ours.mean[f"ndcg@{k}"] == pytest.approx(ndcg_score(y, s, k=k), abs=TOL)
        assert ours.mean[f"dcg@{k}"] == pytest.approx(dcg_score(y, s, k=k), abs=TOL)


# ------------------------------------------------------------------------------------- ranx
RANX_MS = {**{f"ndcg@{k}": f"ndcg@{k}" for k in KS}, **{f"ndcg_burges@{k}": f"ndcg@{k}:gain=exp" for k in KS},
           **{f"dcg@{k}": f"dcg@{k}" for k in (3, 30)}, **{f"dcg_burges@{k}": f"dcg@{k}:gain=exp" for k in (3, 30)},
           **{f"precision@{k}": f"p@{k}" for k in KS}, "map": "map", "ndcg": "ndcg"}


@pytest.mark.parametrize("seed", range(12))
def test_ranx(seed: int) -> None:
    ranx = pytest.importorskip("ranx")
    labels, scores, sizes = random_batch(500 + seed, n_queries=25, sizes=(1, 2, 5, 16, 17, 25, 40))
    qids = [f"q{i:03d}" for i in range(len(sizes))]
    qrels, run = {}, {}
    for q, lab, sc in zip(qids, _split(labels, sizes), _split(scores, sizes), strict=True):
        qrels[q] = {f"d{i}": int(v) for i, v in enumerate(lab)}
        run[q] = {f"d{i}": float(v) for i, v in enumerate(sc)}
    ours = evaluate(labels, scores, _offsets(sizes), list(RANX_MS.values()), "ranx")
    assert not any(ours.derived.values())
    per_query = ranx.evaluate(ranx.Qrels(qrels), ranx.Run(run), list(RANX_MS), return_mean=False)
    means = ranx.evaluate(ranx.Qrels(qrels), ranx.Run(run), list(RANX_MS))
    for tool_m, our_m in RANX_MS.items():
        _assert_close(ours.per_query[our_m], per_query[tool_m], f"ranx {tool_m} seed {seed}")
        assert ours.mean[our_m] == pytest.approx(float(means[tool_m]), abs=TOL), tool_m


def test_ranx_tie_order_is_numba_quicksort_not_stable() -> None:
    """40 tied documents, the relevant one at input position 20: ranx ranks it 9th."""
    ranx = pytest.importorskip("ranx")
    labels = np.zeros(40, dtype=np.int32)
    labels[20] = 1
    qrels = ranx.Qrels({"q": {f"d{i}": int(v) for i, v in enumerate(labels)}})
    run = ranx.Run({"q": {f"d{i}": 0.0 for i in range(40)}})
    assert ranx.evaluate(qrels, run, "map") == pytest.approx(1 / 9)
    assert evaluate(labels, np.zeros(40), np.array([0, 40]), "map", "ranx").mean["map"] == pytest.approx(1 / 9)
    assert evaluate(labels, np.zeros(40), np.array([0, 40]), "map", "lightgbm").mean["map"] == pytest.approx(1 / 21)
