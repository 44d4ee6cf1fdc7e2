"""The forward scoring path's glue against the plain forms it replaced: the forest's input built in
place (one float64 copy, each view cast once) equal to the raw features stacked with each view's
public function; the ordinal probabilities' subtraction equal to ``np.diff``'s; the offsets check
refusing what it refused. Exact equality (the bits), on fixed and random inputs."""

from __future__ import annotations

import numpy as np
import pytest

from tests.scoring.test_explanation import MEMBERS, D, candidate_list, trained
from tunemix.core.calibration.expected_relevance import ordinal_probabilities
from tunemix.core.data.dataset import validate_offsets
from tunemix.core.data.normalization import standardise_by_query, whiten_by_query
from tunemix.core.scoring.ensemble_model import EnsembleModel

pytest.importorskip("lightgbm")


@pytest.fixture(scope="module")
def two_views(tmp_path_factory: pytest.TempPathFactory) -> EnsembleModel:
    return trained(tmp_path_factory.mktemp("views"), ["raw", "raw+std", "raw+white"], MEMBERS)


def stacked(model: EnsembleModel, x: np.ndarray, off: np.ndarray) -> np.ndarray:
    """The forest's input as it was built: the raw block, then each view's public function's block."""
    blocks = [x] + [standardise_by_query(x, off) if v == "raw+std" else whiten_by_query(x, off)
                    for v in model.extra_views]
    return np.hstack(blocks)


@pytest.mark.parametrize("sizes", [[9], [1, 2, 6], [3, 0, 5, 1], [40, 25]])
def test_the_forest_input_is_the_views_stacked(two_views: EnsembleModel, sizes: list[int]) -> None:
    assert set(two_views.extra_views) == {"raw+std", "raw+white"}
    rng = np.random.default_rng(sum(sizes))
    x = np.vstack([candidate_list(int(rng.integers(1000)), n) for n in sizes]) if sum(sizes) else np.zeros((0, D))
    x = x.astype(np.float32)
    off = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    got, want = two_views.wide_features(x, off), stacked(two_views, x, off)
    assert got.dtype == want.dtype == np.float32 and got.flags.c_contiguous
    assert got.shape == want.shape and got.tobytes() == want.tobytes()
    scores = two_views.score(x, off)
    assert np.all(np.isfinite(scores))


def naive_ordinal(g: np.ndarray) -> np.ndarray:
    """``ordinal_probabilities`` with ``np.diff``, as it was written."""
    n = g.shape[0]
    cdf = np.empty((n, g.shape[1] + 2))
    cdf[:, 0], cdf[:, -1] = 0.0, 1.0
    cdf[:, 1:-1] = np.exp(-np.logaddexp(0.0, -g))
    p = np.maximum(np.diff(cdf, axis=1), 0.0)
    return p / p.sum(axis=1, keepdims=True)


@pytest.mark.parametrize("k", [1, 2, 4])
def test_ordinal_probabilities_equal_the_diff_form(k: int) -> None:
    rng = np.random.default_rng(k)
    fixed = np.array([[0.0] * k, [800.0] * k, [-800.0] * k, np.linspace(3, -3, k)])
    for g in (fixed, rng.normal(scale=4, size=(200, k)), np.sort(rng.normal(size=(50, k)), axis=1)):
        assert ordinal_probabilities(g).tobytes() == naive_ordinal(g).tobytes()


@pytest.mark.parametrize(("offsets", "n", "message"), [
    ([1, 3], 3, r"\[0\] must be 0, got 1"), ([0, 2], 3, r"\[-1\] must equal the number of rows \(3\), got 2"),
    ([0, 2, 1, 3], 3, "query 1 has a negative size"), ([0, 3, 2, 2, 3], 3, "query 1 has a negative size"),
    ([], 0, "1-D array"), ([[0, 3]], 3, "1-D array"),
])
def test_offsets_refused_as_before(offsets: list[int], n: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        validate_offsets(np.array(offsets, dtype=np.int64), n)


def test_offsets_accepted_as_before() -> None:
    for offsets, n in (([0], 0), ([0, 0], 0), ([0, 3], 3), ([0, 0, 3, 3], 3), ([0, 1, 2, 3], 3)):
        got = validate_offsets(offsets, n)
        assert got.dtype == np.int64 and got.tolist() == offsets
