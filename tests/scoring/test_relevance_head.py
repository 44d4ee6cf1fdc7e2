"""The relevance head: it never contradicts the ranking (a property test on random lists and
parameters), its probabilities are probabilities, it survives storage bit for bit, and its fit
recovers calibrated probabilities across queries."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from training.calibration.relevance_fit import expected_calibration_error, fit_relevance_head, relevance_metrics
from training.scoring.relevance_head import RelevanceHead, head_inputs


def _random_head(rng: np.random.Generator, k: int) -> RelevanceHead:
    return RelevanceHead(n_grades=k, a=rng.normal(size=2) * 2, g=float(rng.normal() * 2), b=rng.normal(size=3) * 2,
                         theta=np.sort(rng.normal(size=k - 1) * 2) + np.arange(k - 1) * 1e-3,
                         means=rng.normal(size=4), scales=rng.uniform(0.1, 2.0, size=4))


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), k=st.integers(2, 5), ties=st.booleans())
def test_a_higher_ranked_document_never_gets_a_lower_estimate(seed: int, k: int, ties: bool) -> None:
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 12, size=int(rng.integers(1, 6)))
    off = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    n, m = int(off[-1]), int(rng.integers(1, 6))
    scores = rng.integers(0, 3, size=n).astype(float) if ties else rng.normal(size=n)
    members = rng.normal(size=(n, m))
    weights = rng.uniform(0, 1, size=m) if rng.random() < 0.7 else None
    head = _random_head(rng, k)
    x = head_inputs(scores, members, weights, off)
    cum, probs, expected = head.cumulative(x), head.probabilities(x), head.expected(x)
    assert probs.shape == (n, k) and np.all((probs >= 0) & (probs <= 1))
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, atol=1e-12)
    for q in range(len(sizes)):
        lo, hi = off[q], off[q + 1]
        order = lo + np.argsort(-scores[lo:hi], kind="stable")  # the ranking /rank gives
        assert np.all(np.diff(expected[order]) <= 1e-12)
        assert np.all(np.diff(cum[order], axis=0) <= 1e-12)


def test_the_head_survives_storage_bit_for_bit() -> None:
    rng = np.random.default_rng(3)
    head = _random_head(rng, 4)
    again = RelevanceHead.from_params(head.to_params())
    x = head_inputs(rng.normal(size=9), rng.normal(size=(9, 3)), None, np.array([0, 4, 9]))
    np.testing.assert_array_equal(head.probabilities(x), again.probabilities(x))
    bad = {**head.to_params(), "theta": [1.0, 0.5, 2.0]}
    try:
        RelevanceHead.from_params(bad)
    except ValueError as exc:
        assert "increase" in str(exc)
    else:
        raise AssertionError("decreasing thresholds were accepted")


def test_the_fit_is_calibrated_across_queries() -> None:
    """Queries differ in how relevant their best documents are; the members' calibrated outputs
    say so. The fitted head's P(y >= 1) matches the observed frequency on new queries."""
    rng = np.random.default_rng(0)

    def batch(n_queries: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        sizes = rng.integers(5, 30, size=n_queries)
        off = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        level = np.repeat(rng.normal(size=n_queries), sizes)  # how good the query's candidates are
        quality = rng.normal(size=int(off[-1])) + level
        labels = np.digitize(quality + rng.normal(scale=0.5, size=quality.shape), [0.8, 1.8])
        members = np.column_stack([quality + rng.normal(scale=0.3, size=quality.shape) for _ in range(3)]) / 4
        scores = np.concatenate([(quality[a:b] - quality[a:b].mean()) for a, b in itertools.pairwise(off)])
        return scores, members, labels, off

    s, mem, y, off = batch(300)
    head = fit_relevance_head(head_inputs(s, mem, None, off), y, 3)
    s2, mem2, y2, off2 = batch(300)
    probs = head.probabilities(head_inputs(s2, mem2, None, off2))
    metrics = relevance_metrics(probs, y2)
    assert metrics["ece_relevant"] < 0.04 and metrics["ece_top"] < 0.04, metrics
    prior = np.bincount(y, minlength=3) / y.shape[0]
    assert metrics["log_loss"] < -np.mean(np.log(prior[y2]))  # better than knowing the grade shares only
    assert abs(expected_calibration_error([0.2, 0.8], [0, 1]) - 0.2) < 1e-12  # two bins, each 0.2 off
