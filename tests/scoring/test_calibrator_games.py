"""The calibrator layer of exact explanations (``tunemix.core.explain.calibrator_games``) against its
slow twin: each member's calibrator through its own ``transform`` (McRank's ordinal members through
their class probabilities) on every hybrid of its K inputs, and the Shapley values as the average
marginal contribution over the K! orders of the inputs; on a trained model with every member type
(forest and linear runs, games of 1 to 3 inputs, ordinal members) and random reference vectors and
changes, inputs that do not move included. And the sources' attributions (``_sources``) against
the TreeSHAP kernel's checkpoint differences and the linear runs' closed form in NumPy, their moved
players (the compact layout the mix layer reads) against the full layout."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from tests.scoring.test_explanation import MEMBERS, OTHER_TYPES, candidate_list, trained
from tunemix.core.calibration.expected_relevance import ordinal_probabilities
from tunemix.core.explain.calibrator_games import _ordinal_slabs, calibrator_games
from tunemix.core.explain.exact_explanation import (
    _moved_attributions,
    _raw_attributions,
    _reference_sources,
    reference_views,
)
from tunemix.core.explain.tree_shap import forest_attributions
from tunemix.core.scoring.ensemble_model import EnsembleModel

pytest.importorskip("lightgbm")
pytest.importorskip("sklearn")


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> EnsembleModel:
    return trained(tmp_path_factory.mktemp("games"), ["raw", "raw+std"], MEMBERS + OTHER_TYPES)


def twin(model: EnsembleModel, m: int, lo: np.ndarray, hi: np.ndarray) -> tuple[float, np.ndarray]:
    """(g(lo), phi (K,)) of member m by evaluating its calibrator on every coalition's hybrid and
    averaging the marginal contributions over all K! orders."""
    k = model.runs[model.members[m].run].n_classes
    cal = model.members[m].calibrator

    def v(coalition: frozenset[int]) -> float:
        z = np.array([hi[j] if j in coalition else lo[j] for j in range(k)])
        return float(cal.transform(z[None])[0])

    phi = np.zeros(k)
    orders = list(itertools.permutations(range(k)))
    for order in orders:
        before: frozenset[int] = frozenset()
        for j in order:
            phi[j] += v(before | {j}) - v(before)
            before = before | {j}
    return v(frozenset()), phi / len(orders)


@pytest.mark.parametrize("seed", range(3))
def test_games_equal_their_twin(model: EnsembleModel, seed: int) -> None:
    games = calibrator_games(model)
    sizes = {g.k for g in games.groups}
    assert len(sizes) >= 2 and any(g.ordinal.size for g in games.groups)  # several game sizes, ordinal members
    assert {key[0] for key in games.keys} == {"forest", "linear"}
    rng = np.random.default_rng(seed)
    n, u_n = 3, len(games.keys)
    lo = rng.normal(size=(u_n, games.k_max))
    delta = rng.normal(size=(n, u_n, games.k_max))
    delta[0, :, 1:] = 0.0  # only the first input moves
    delta[1, 0] = 0.0  # a source that does not move
    full = np.empty((n, model.n_members))
    want = np.zeros((n, model.n_members, games.k_max))
    want_lo = np.empty(model.n_members)
    for m in range(model.n_members):
        k = model.runs[model.members[m].run].n_classes
        s = games.src[m]
        for i in range(n):
            hi = lo[s, :k] + delta[i, s, :k]
            full[i, m] = float(model.members[m].calibrator.transform(hi[None])[0])
            want_lo[m], want[i, m, :k] = twin(model, m, lo[s, :k], hi)
    g_lo, phi = games.shapley(lo, delta, full)
    np.testing.assert_allclose(g_lo, want_lo, rtol=0, atol=1e-12)
    np.testing.assert_allclose(phi, want, rtol=0, atol=1e-10)
    # efficiency: each member's values add up to its change
    np.testing.assert_allclose(phi.sum(axis=2), full - g_lo, rtol=0, atol=1e-10)
    # inputs that do not move get nothing (to the rounding of v(all), the calibrators' own transform)
    assert np.abs(phi[0, :, 1:]).max() <= 1e-12 and np.abs(phi[1, games.src == 0]).max() <= 1e-12


@pytest.mark.parametrize("seed", range(2))
def test_ratios_are_the_values_over_their_inputs_change(model: EnsembleModel, seed: int) -> None:
    """``ratios`` (the rescale rule's factors, divided inside the game kernel) equal ``shapley``'s
    values divided by their input's change in NumPy, bit for bit, 0 where it did not move and for
    the inputs a smaller game does not have."""
    games = calibrator_games(model)
    rng = np.random.default_rng(10 + seed)
    n, u_n = 4, len(games.keys)
    lo = rng.normal(size=(u_n, games.k_max))
    delta = rng.normal(size=(n, u_n, games.k_max))
    delta[0, :, 1:] = 0.0
    delta[1, 0] = 0.0
    full = rng.normal(size=(n, model.n_members))
    g_lo, phi = games.shapley(lo, delta, full)
    g_lo2, ratio = games.ratios(lo, delta, full)
    t = delta[:, games.src, :]
    sizes = np.array([model.runs[m.run].n_classes for m in model.members])
    inside = (np.arange(games.k_max)[None, None, :] < sizes[None, :, None]) & (t != 0.0)
    want = np.where(inside, phi / np.where(inside, t, 1.0), 0.0)
    np.testing.assert_array_equal(g_lo2, g_lo)
    np.testing.assert_array_equal(ratio, want)
    assert np.count_nonzero(ratio) > ratio.size // 3  # most inputs moved: the division was exercised


@pytest.mark.parametrize("k", [1, 2, 4])
def test_ordinal_slabs_equal_the_class_probabilities(k: int) -> None:
    """The games' in-place ordinal kernel (``_ordinal_slabs``) against ``ordinal_probabilities`` on
    random and extreme cumulative logits (crossing ones clipped; saturated ones without overflow)."""
    rng = np.random.default_rng(k)
    hybrid = rng.normal(scale=3.0, size=(7, 3 + 2, k + 1))
    hybrid[0, 0, :k] = [800.0, -800.0, 30.0, -30.0][:k]
    hybrid[1, 2, :k] = 0.0
    ordinal = np.array([2, 0], dtype=np.int64)
    want = np.stack([ordinal_probabilities(hybrid[:, u, :k]) for u in ordinal], axis=1)
    before = hybrid[:, :3].copy()
    _ordinal_slabs(hybrid, ordinal, 3, k)
    np.testing.assert_allclose(hybrid[:, 3:, : k + 1], want, rtol=1e-15, atol=1e-300)
    np.testing.assert_array_equal(hybrid[:, :3], before)  # the sources' slabs are read, not written


def test_sources_attributions_equal_checkpoint_differences(model: EnsembleModel) -> None:
    games = calibrator_games(model)
    x = candidate_list(5, n=8)
    off = np.array([0, 8])
    wide = model._wide(x, off)
    r_wide, group, players, _ = reference_views(model, x, np.median(x, axis=0).astype(np.float32))
    at, total = _raw_attributions(model, games, wide, r_wide, group, players)
    ck = forest_attributions(model.forest, wide, r_wide, group, players, model._checkpoints)
    n_forest = games.forest_hi.size
    kf = ck.shape[3]
    want = np.zeros((8, len(games.keys), players, games.k_max))
    want[:, :n_forest, :, :kf] = ck[:, games.forest_hi] - ck[:, games.forest_lo]
    diff = wide.astype(np.float64) - r_wide.astype(np.float64)
    for u, c0, c1 in games.linear.tolist():
        for c in range(wide.shape[1]):
            want[:, u, group[c], : c1 - c0] += diff[:, c, None] * model._linear_w[c, c0:c1]
    np.testing.assert_allclose(at, want.transpose(0, 1, 3, 2), rtol=0, atol=1e-12)
    # the sums over the players are each source's change of its raw vector (not cancelled here)
    raw, raw_r = model._raw_block(wide), model._raw_block(r_wide[None])[0]
    np.testing.assert_allclose(total[:, games.src], (raw - raw_r)[:, :, : games.k_max], rtol=0, atol=1e-9)


def test_moved_players_are_the_players_with_an_attribution(model: EnsembleModel) -> None:
    """The compact layout: document i's first n_active[i] columns are exactly the players with a non-zero
    attribution in some source and input, in increasing order, holding the full layout's columns."""
    games = calibrator_games(model)
    x = candidate_list(6, n=9)
    wide = model._wide(x, np.array([0, 9]))
    r_wide, group, players, _ = reference_views(model, x, x[2])  # document 2 is the reference: nothing moves
    full, total = _raw_attributions(model, games, wide, r_wide, group, players)
    at, total_c, active, n_active = _moved_attributions(model, games, wide, r_wide, group, players)
    np.testing.assert_array_equal(total_c, total)
    assert n_active[2] == 0 and n_active.max() > 0
    for i in range(x.shape[0]):
        moved = np.flatnonzero((full[i] != 0.0).any(axis=(0, 1)))
        np.testing.assert_array_equal(active[i, : n_active[i]], moved)
        np.testing.assert_array_equal(at[i, ..., : n_active[i]], full[i][..., moved])


def test_reference_sources_equal_the_scoring_pass(model: EnsembleModel) -> None:
    """The reference row's source vectors from its own walk down the forest (``_reference_sources``)
    equal the scoring pass's raw block of that row (``_raw_block``: the scoring kernel and the
    folded linear map), for forest (trees and products of stumps) and linear sources."""
    from tunemix.core.scoring.forest import KIND_PRODUCT

    games = calibrator_games(model)
    f = model.forest
    assert (f.base_kind == KIND_PRODUCT).any() and (f.base_kind != KIND_PRODUCT).any() and games.linear.size
    x = candidate_list(7, n=9)
    for r in (np.median(x, axis=0).astype(np.float32), x[4], x.min(axis=0)):
        r_wide, _, _, _ = reference_views(model, x, r)
        got = np.zeros((len(games.keys), games.k_max))
        _reference_sources(f.base_kind, f.base_node_start, f.base_leaf_start, f.node_feature, f.node_threshold,
                           f.node_left, f.node_right, f.leaf_values, r_wide, model._checkpoints, games.forest_lo,
                           games.forest_hi, model._linear_w, model._linear_b, games.linear, got)
        want = model._raw_block(r_wide[None])[0][games.first]
        kk = min(games.k_max, want.shape[1])
        np.testing.assert_allclose(got[:, :kk], want[:, :kk], rtol=0, atol=1e-12)
        assert np.all(got[:, kk:] == 0.0)
