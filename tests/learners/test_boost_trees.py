"""The chunked, GIL-free boosting of Hamming trees on a full search
(``tunemix.train.learners.hamming_tree.boost_trees``, ``AdaBoostMH._boost_in_chunks``) against the
one-iteration-at-a-time loop of ``AdaBoostMH.fit`` it replaces there: the same trees, weights,
scores and records to the last bit, in every class count, tree size, chunk size and stop."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest

from tunemix.train.learners import AdaBoostMH, FitProgress, adaboost_mh, hamming_tree
from tunemix.train.learners.stump_search import ALPHA_MAX


def _data(n: int, d: int, n_labels: int, seed: int, noise: float = 0.3) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)).astype(np.float32)
    X[:, d - 1] = 1.0  # a constant feature: never searched
    X[:, 0] = np.round(X[:, 0], 1)  # few distinct values
    score = X[:, 0] + 0.5 * X[:, 1] - 0.3 * X[:, 2] + noise * rng.normal(size=n)
    y = np.digitize(score, np.quantile(score, np.linspace(0, 1, n_labels + 1)[1:-1]))
    return X, y.astype(np.int64)


def _fit(chunked: bool, monkeypatch: pytest.MonkeyPatch, X: np.ndarray, y: np.ndarray,
         chunk_seconds: float | None = None, **params: Any) -> tuple[AdaBoostMH, list[FitProgress]]:
    monkeypatch.setattr(adaboost_mh, "CHUNKED_FULL_SEARCH", chunked)
    if chunk_seconds is not None:
        monkeypatch.setattr(adaboost_mh, "CHUNK_SECONDS", chunk_seconds)
    seen: list[FitProgress] = []
    m = AdaBoostMH(base="tree", search="full", **params).fit(X, y, callback=seen.append)
    return m, seen


def _same(a: AdaBoostMH, b: AdaBoostMH) -> None:
    assert a.stop_reason_ == b.stop_reason_
    assert a.n_iterations_ == b.n_iterations_
    for name in ("alphas_", "edges_", "train_error_", "train_scores_"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    fa, fb = a.forest_, b.forest_
    for name in ("base_kind", "base_node_start", "base_leaf_start", "node_feature", "node_threshold", "node_left",
                 "node_right", "leaf_values"):
        x, z = getattr(fa, name), getattr(fb, name)
        assert x.dtype == z.dtype, name
        np.testing.assert_array_equal(x, z, err_msg=name)
    assert a.checkpoints_ == b.checkpoints_


@pytest.mark.parametrize(("n_labels", "n_leaves", "chunk_seconds"),
                         [(2, 2, None), (3, 8, None), (3, 8, 1e-9), (5, 8, 10.0), (4, 16, None), (2, 3, 1e-9)])
def test_chunks_are_the_loop_to_the_last_bit(monkeypatch: pytest.MonkeyPatch, n_labels: int, n_leaves: int,
                                             chunk_seconds: float | None) -> None:
    X, y = _data(600, 7, n_labels, seed=n_labels * 10 + n_leaves)
    ref, ref_seen = _fit(False, monkeypatch, X, y, n_iterations=40, n_leaves=n_leaves, n_bins=32)
    got, seen = _fit(True, monkeypatch, X, y, chunk_seconds=chunk_seconds, n_iterations=40, n_leaves=n_leaves,
                     n_bins=32)
    assert ref.n_iterations_ == 40 and ref.stop_reason_ == "n_iterations"
    _same(ref, got)
    assert [(p.iteration, p.edge, p.alpha, p.training_error) for p in seen] == \
        [(p.iteration, p.edge, p.alpha, p.training_error) for p in ref_seen]
    np.testing.assert_array_equal(ref.decision_function(X), got.decision_function(X))


def test_the_chunk_path_is_taken_and_holds_no_gil(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the chunks on, ``grow_tree`` is never called from Python (one ``boost_trees`` call a
    chunk), and a thread that runs Python all along does not stop the run from finishing."""
    calls: list[int] = []
    real = hamming_tree.boost_trees

    def counting(*args: Any) -> Any:
        calls.append(int(args[12]))
        return real(*args)

    monkeypatch.setattr(hamming_tree, "boost_trees", counting)
    X, y = _data(400, 6, 3, seed=3)
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            sum(range(1000))

    spinner = threading.Thread(target=spin)
    spinner.start()
    try:
        m = AdaBoostMH(base="tree", search="full", n_iterations=60, n_leaves=8).fit(X, y)
    finally:
        stop.set()
        spinner.join()
    assert m.n_iterations_ == 60
    assert sum(calls) == 60 and calls[0] == 1  # the first chunk one iteration, then sized by its time


def test_bandit_search_keeps_the_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hamming_tree, "boost_trees", None)  # would fail if called
    X, y = _data(300, 6, 3, seed=4)
    m = AdaBoostMH(base="tree", search="ucb1", n_iterations=10).fit(X, y)
    assert m.n_iterations_ == 10


def test_stops_perfect_and_no_split_as_the_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    X = np.array([[0.0, 5.0], [1.0, 5.0], [2.0, 5.0], [3.0, 5.0]], dtype=np.float32)
    y = np.array([0, 0, 1, 1])
    for chunked in (False, True):
        m, _ = _fit(chunked, monkeypatch, X, y, n_iterations=50, n_leaves=2, initial_weights="standard")
        assert m.n_iterations_ == 1 and m.stop_reason_ == "perfect" and m.alphas_[0] == ALPHA_MAX
    ref, _ = _fit(False, monkeypatch, X, y, n_iterations=50, n_leaves=2, initial_weights="standard")
    got, _ = _fit(True, monkeypatch, X, y, n_iterations=50, n_leaves=2, initial_weights="standard")
    _same(ref, got)
    const = np.ones((20, 3), np.float32)
    for chunked in (False, True):
        m, _ = _fit(chunked, monkeypatch, const, np.arange(20) % 2, n_iterations=5)
        assert m.n_iterations_ == 0 and m.stop_reason_ == "no_split"


def test_no_edge_stop_as_the_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """Labels the features cannot separate at all (each feature value holds both classes equally):
    the edge reaches zero and the run stops the same way in both."""
    X = np.repeat(np.arange(4, dtype=np.float32), 2)[:, None]
    y = np.tile([0, 1], 4)
    ref, _ = _fit(False, monkeypatch, X, y, n_iterations=20, n_leaves=2, initial_weights="standard")
    got, _ = _fit(True, monkeypatch, X, y, n_iterations=20, n_leaves=2, initial_weights="standard")
    assert ref.stop_reason_ == "no_edge"
    _same(ref, got)


def test_time_budget_stops_after_a_chunk(monkeypatch: pytest.MonkeyPatch) -> None:
    X, y = _data(300, 5, 3, seed=5)
    m, seen = _fit(True, monkeypatch, X, y, n_iterations=1000, n_leaves=4, time_budget_s=1e-9)
    assert m.n_iterations_ == 1 and m.stop_reason_ == "time_budget" and len(seen) == 1
