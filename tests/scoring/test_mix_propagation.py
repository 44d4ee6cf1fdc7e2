"""The mix layer of exact explanations (``tunemix.core.explain.mix_propagation``): its values are the
served mix with each document's own score in place, its z-scores bounded, and the numba passes of
``reveal_cancel`` equal to their NumPy twin (the member attributions built in full, the two-player
rule written out) on random inputs."""

from __future__ import annotations

import numpy as np
import pytest

from tunemix.core.ensemble.registry import mixer_from_params
from tunemix.core.explain.mix_propagation import MixLayer, mix_layer, reveal_cancel


def uniform(rescale: str, m: int) -> MixLayer:
    member = np.random.default_rng(0).normal(size=(7, m))
    layer = mix_layer(mixer_from_params({"mixer": "uniform", "n_members": m, "rescale": rescale,
                                         "rescale_scale": np.zeros(0)}), member)
    assert layer is not None
    return layer


def twin(layer: MixLayer, rows: np.ndarray, s_r: np.ndarray, ratio: np.ndarray, attr: np.ndarray,
         src: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    c = np.einsum("imk,impk->imp", ratio, attr[:, src])
    pos, neg = np.where(c > 0, c, 0.0).sum(axis=2), np.where(c < 0, c, 0.0).sum(axis=2)
    f = lambda v: layer.value(rows, v)  # noqa: E731
    d_pos = 0.5 * (f(s_r + pos) - f(s_r)) + 0.5 * (f(s_r + pos + neg) - f(s_r + neg))
    d_neg = 0.5 * (f(s_r + neg) - f(s_r)) + 0.5 * (f(s_r + pos + neg) - f(s_r + pos))
    share = np.where(c > 0, c * (d_pos / np.where(pos != 0, pos, 1.0))[..., None],
                     c * (d_neg / np.where(neg != 0, neg, 1.0))[..., None])
    return share.sum(axis=1), f(s_r).sum(axis=1)


@pytest.mark.parametrize("rescale", ["zscore_query", "minmax_query", "none"])
@pytest.mark.parametrize("seed", range(3))
def test_reveal_cancel_equals_its_twin_and_adds_up(rescale: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    m, u, players, k = 5, 3, 6, 3
    layer = uniform(rescale, m)
    rows = np.array([0, 3, 6])
    src = rng.integers(u, size=m)
    ratio = rng.normal(size=(rows.size, m, k))
    attr = rng.normal(size=(rows.size, u, players, k))
    attr[0, :, 2] = 0.0  # a player no member moves
    attr[rng.random(attr.shape[:3]) < 0.4] = 0.0  # players a source does not move (the kernels skip them)
    s_r = rng.normal(size=(rows.size, m))
    got, base = reveal_cancel(layer, rows, s_r, ratio, attr, src)
    want, want_base = twin(layer, rows, s_r, ratio, attr, src)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(base, want_base)
    assert np.all(got[0, 2] == 0.0)
    # the shares add up to the layer's change at s_r + sum of the member attributions
    c = np.einsum("imk,impk->imp", ratio, attr[:, src])
    top = layer.value(rows, s_r + c.sum(axis=2)).sum(axis=1)
    np.testing.assert_allclose(base + got.sum(axis=1), top, rtol=0, atol=1e-12)


def test_values_are_the_served_mix_and_bounded() -> None:
    layer = uniform("zscore_query", 4)
    rows = np.arange(7)
    far = np.full((7, 4), 1e6)
    z = layer.value(rows, far) * 4  # unweighted: one document far above the six others
    np.testing.assert_allclose(z, np.sqrt(6), rtol=1e-9)
    minmax = uniform("minmax_query", 4)
    assert np.all((minmax.value(rows, far) * 4 == 1.0) & (minmax.value(rows, -far) == 0.0))


@pytest.mark.parametrize("rescale", ["zscore_query", "minmax_query", "none"])
def test_list_statistics_and_shares_equal_numpy(rescale: str) -> None:
    """The numba pass's statistics equal NumPy's (the others' extremes against a loop over the
    other documents, ties included), and ``shares`` equals the two-player rule written with ``value``."""
    rng = np.random.default_rng(4)
    member = rng.integers(0, 4, size=(9, 6)).astype(np.float64)  # repeated scores: ties at the extremes
    member[:, 5] = 2.0  # a constant member
    member[3, 0] = -7.0  # one document alone at the smallest
    layer = mix_layer(mixer_from_params({"mixer": "uniform", "n_members": 6, "rescale": rescale,
                                         "rescale_scale": np.zeros(0)}), member)
    assert layer is not None
    rows = np.arange(9)
    if rescale != "none":
        np.testing.assert_allclose(layer.stats[0], member.mean(axis=0), rtol=0, atol=1e-15)
        omin, omax = layer.others(rows)
        for i in rows:
            others = np.delete(member, i, axis=0)
            np.testing.assert_array_equal(omin[i], others.min(axis=0))
            np.testing.assert_array_equal(omax[i], others.max(axis=0))
    s_r = rng.normal(size=(9, 6))
    pos, neg = np.abs(rng.normal(size=(9, 6))), -np.abs(rng.normal(size=(9, 6)))
    pos[0, 1] = neg[2, 2] = 0.0  # a member with no positive (negative) part
    f0, k_pos, k_neg = layer.shares(rows, s_r, pos, neg)
    f = lambda v: layer.value(rows, v)  # noqa: E731
    np.testing.assert_allclose(f0, f(s_r), rtol=0, atol=1e-14)
    d_pos = 0.5 * (f(s_r + pos) - f(s_r)) + 0.5 * (f(s_r + pos + neg) - f(s_r + neg))
    d_neg = 0.5 * (f(s_r + neg) - f(s_r)) + 0.5 * (f(s_r + pos + neg) - f(s_r + pos))
    np.testing.assert_allclose(k_pos * pos, np.where(pos != 0, d_pos, 0.0), rtol=0, atol=1e-12)
    np.testing.assert_allclose(k_neg * neg, np.where(neg != 0, d_neg, 0.0), rtol=0, atol=1e-12)
    assert k_pos[0, 1] == 0.0 and k_neg[2, 2] == 0.0


def test_vectorised_zscore_shares_equal_the_scalar_rule() -> None:
    """The members' loop of the z-score mode written with selects (``_zscore_shares``) gives what the
    one-member rule (``_member_shares``, as ``MixLayer.shares`` applies it) gives, value for value:
    parts that are 0, a constant member, a member whose other scores are all equal, a list of two."""
    from tunemix.core.explain.mix_propagation import MODES, _zscore_shares

    rng = np.random.default_rng(7)
    for n_docs in (2, 9):
        member = rng.integers(0, 3, size=(n_docs, 8)).astype(np.float64) + rng.normal(size=(n_docs, 8)) * [
            1, 1, 1, 1, 1, 0, 0, 1]
        member[:, 5] = 1.25  # constant
        member[1:, 6] = 0.5  # the others all equal: flat for document 0
        layer = mix_layer(mixer_from_params({"mixer": "uniform", "n_members": 8, "rescale": "zscore_query",
                                             "rescale_scale": np.zeros(0)}), member)
        assert layer is not None and MODES.index(layer.mode) == 1
        rows = np.arange(n_docs)
        s_r = rng.normal(size=(n_docs, 8))
        s_r[:, 6] = 0.5  # the reference at the flat value
        pos, neg = np.abs(rng.normal(size=(n_docs, 8))), -np.abs(rng.normal(size=(n_docs, 8)))
        pos[0, 1] = neg[1, 2] = 0.0
        pos[0, 3] = neg[0, 3] = 0.0
        want = layer.shares(rows, s_r, pos, neg)
        s_rows, omin, omax = layer.rows(rows)
        for i in rows:
            got = np.empty(8), np.empty(8), np.empty(8)
            _zscore_shares(layer.n, layer.weights, layer.stats, s_rows[i], omin[i], omax[i], s_r[i], pos[i], neg[i],
                           *got)
            for g, w in zip(got, want, strict=True):
                np.testing.assert_array_equal(g, w[i])


@pytest.mark.parametrize("rescale", ["zscore_query", "minmax_query", "none"])
def test_kernels_own_scores_and_others_extremes_equal_numpy(rescale: str) -> None:
    """``_others`` (the propagation's per-document scores and others' extremes, inside the kernel)
    gives ``MixLayer.rows`` value for value, and its extremes are the other documents' (a loop over
    them): ties at both extremes, a document alone at the smallest, a constant member, a list of two."""
    from tunemix.core.explain.mix_propagation import MODES, _others

    rng = np.random.default_rng(11)
    for n_docs in (2, 9):
        member = rng.integers(0, 4, size=(n_docs, 6)).astype(np.float64)
        member[:, 5] = 2.0
        member[n_docs - 1, 0] = -7.0
        layer = mix_layer(mixer_from_params({"mixer": "uniform", "n_members": 6, "rescale": rescale,
                                             "rescale_scale": np.zeros(0)}), member)
        assert layer is not None
        rows = np.arange(n_docs)
        s_rows, omin, omax = layer.rows(rows)
        for i in rows:
            got = np.empty(6), np.empty(6), np.empty(6)
            _others(layer.s[i], layer.stats, MODES.index(layer.mode), *got)
            for g, w in zip(got, (s_rows[i], omin[i], omax[i]), strict=True):
                np.testing.assert_array_equal(g, w)
            if rescale != "none":
                others = np.delete(member, i, axis=0)
                np.testing.assert_array_equal(got[1], others.min(axis=0))
                np.testing.assert_array_equal(got[2], others.max(axis=0))
