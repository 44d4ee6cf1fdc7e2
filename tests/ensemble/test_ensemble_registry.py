"""Registry, params round trip through a JSON + .npz artifact, compare_mixers."""

from __future__ import annotations

import io
import json
from typing import Any

import ensemble_naive as naive
import numpy as np
import pytest

from tunemix.core.ensemble import (
    MIXERS,
    ExponentialForecaster,
    compare_mixers,
    format_rows,
    make_mixer,
    mixer_from_params,
)

METRIC = naive.METRIC
CANONICAL = ["exp_forecaster", "one_best", "uniform", "rrf", "combsum", "combmnz", "condorcet"]


@pytest.fixture(scope="module")
def problem():
    rng = np.random.default_rng(7)
    sigmas = [0.5, 0.8, 1.0, 1.5, 3.0]
    scales = [1.0, 20.0, 0.2, 5.0, 100.0]
    return (naive.noisy_members(rng, 80, 15, sigmas, scales),
            naive.noisy_members(rng, 80, 15, sigmas, scales))


def _through_artifact(params):
    """Arrays into an .npz (allow_pickle=False), the rest into JSON, and back."""
    arrays: dict[str, Any] = {}
    plain: dict[str, Any] = {}
    for k, v in params.items():
        if isinstance(v, np.ndarray):
            arrays[k] = v
        else:
            plain[k] = v
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    buf.seek(0)
    with np.load(buf, allow_pickle=False) as npz:
        loaded = {k: npz[k] for k in npz.files}
    loaded.update(json.loads(json.dumps(plain)))
    return loaded


def test_registry_has_the_canonical_names():
    assert sorted(MIXERS) == sorted(CANONICAL)
    for name in CANONICAL:
        assert make_mixer(name).name == name
    with pytest.raises(ValueError, match="unknown mixer 'borda'"):
        make_mixer("borda")
    with pytest.raises(TypeError, match="bad parameters for mixer 'rrf'"):
        make_mixer("rrf", top_k=3)
    with pytest.raises(ValueError, match="k must be a positive"):
        make_mixer("rrf", k=0)
    with pytest.raises(ValueError, match="top_k"):
        make_mixer("combmnz", top_k=0)


ROUND_TRIP = [(name, "zscore_query") for name in CANONICAL] + [
    ("exp_forecaster", "std_global"),
    ("uniform", "std_global"),
    ("exp_forecaster", "none"),
]


@pytest.mark.parametrize(("name", "rescale"), ROUND_TRIP)
def test_params_round_trip(problem, name, rescale):
    (S, y, off), (St, _, offt) = problem
    kwargs = {}
    if name in ("exp_forecaster", "one_best"):
        kwargs["metric"] = METRIC
    if name in ("exp_forecaster", "uniform"):
        kwargs["rescale"] = rescale
    mixer = make_mixer(name, **kwargs).fit(S, y, off)
    params = mixer.to_params()
    for v in params.values():
        assert v is None or isinstance(v, str | int | float | list | np.ndarray)
    again = mixer_from_params(_through_artifact(params))
    assert type(again) is type(mixer)
    np.testing.assert_array_equal(again.transform(St, offt), mixer.transform(St, offt))
    assert again.to_params().keys() == params.keys()


def test_forecaster_params_keep_the_record(problem):
    (S, y, off), _ = problem
    f = ExponentialForecaster(metric=METRIC).fit(S, y, off)
    g = mixer_from_params(_through_artifact(f.to_params()))
    assert isinstance(g, ExponentialForecaster)
    assert (g.c_, g.omega_min_) == (f.c_, f.omega_min_)
    np.testing.assert_array_equal(g.omega_, f.omega_)
    np.testing.assert_array_equal(g.grid_quality_, f.grid_quality_)
    np.testing.assert_array_equal(g.omega_min_grid_, f.omega_min_grid_)
    assert g.validation_quality_ == f.validation_quality_


def test_from_params_rejects_bad_params(problem):
    (S, y, off), _ = problem
    params = make_mixer("uniform").fit(S, y, off).to_params()
    with pytest.raises(ValueError, match="lack the 'mixer' key"):
        mixer_from_params({k: v for k, v in params.items() if k != "mixer"})
    with pytest.raises(ValueError, match="not 'rrf'"):
        MIXERS["rrf"].from_params(params)
    f = ExponentialForecaster(c_grid=[0], metric=METRIC).fit(S, y, off).to_params()
    f["weights"] = np.zeros(S.shape[1])
    with pytest.raises(ValueError, match="positive sum"):
        mixer_from_params(f)


def test_compare_mixers_rows(problem):
    (S, y, off), (St, yt, offt) = problem
    rows = compare_mixers(S, y, off, St, yt, offt, metric=METRIC)
    assert [r["mixer"] for r in rows] == list(MIXERS)
    by = {r["mixer"]: r for r in rows}
    for r in rows:
        assert 0.0 <= r["test_ndcg@10"] <= 1.0 and r["fit_seconds"] >= 0
    # the tuned forecaster is at least as good on validation as its own two extremes
    assert by["exp_forecaster"]["val_ndcg@10"] >= by["one_best"]["val_ndcg@10"] - 1e-12
    assert by["exp_forecaster"]["val_ndcg@10"] >= by["uniform"]["val_ndcg@10"] - 1e-12
    one_best_test = METRIC(yt, np.ascontiguousarray(St[:, 0]), offt, "ndcg@10", "yahoo")
    assert by["one_best"]["test_ndcg@10"] == pytest.approx(one_best_test)
    text = format_rows(rows)
    assert "exp_forecaster" in text and "condorcet" in text
    with pytest.raises(ValueError, match="test_scores has 2"):
        compare_mixers(S, y, off, St[:, :2], yt, offt, metric=METRIC)


def test_reference_metric_matches_training_evaluation():
    evaluation = pytest.importorskip("tunemix.core.evaluation")
    if not hasattr(evaluation, "mean_metric"):
        pytest.skip("tunemix.core.evaluation.mean_metric has not landed")
    rng = np.random.default_rng(5)
    S, off = naive.random_problem(rng, 40, 1, max_size=15, tie_levels=1.0, empty=False)
    y = rng.integers(0, 5, size=S.shape[0]).astype(np.int32)
    y[off[0]:off[1]] = 0  # a query without relevant documents
    s = np.ascontiguousarray(S[:, 0])
    assert evaluation.mean_metric(y, s, off, "ndcg@10", "yahoo") == pytest.approx(
        naive.ndcg10_yahoo(y, s, off), abs=1e-12
    )
