"""ExponentialForecaster, OneBest, Uniform: the limits of c, omega_min, the grid search."""

from __future__ import annotations

import ensemble_naive as naive
import numpy as np
import pytest

from tunemix.core.ensemble import (
    ExponentialForecaster,
    NotFittedError,
    OneBest,
    Uniform,
    mix_weights,
)

METRIC = naive.METRIC


def _order_by_query(scores, offsets):
    return [
        np.argsort(-scores[lo:hi], kind="stable").tolist() for lo, hi in naive.queries(offsets)
    ]


@pytest.fixture(scope="module")
def noisy():
    rng = np.random.default_rng(2024)
    sigmas = [0.6, 0.7, 0.8, 0.9, 1.0, 1.2, 1.5, 2.5]
    scales = [1.0, 10.0, 0.1, 3.0, 1.0, 50.0, 0.5, 200.0]
    val = naive.noisy_members(rng, 300, 20, sigmas, scales)
    test = naive.noisy_members(rng, 300, 20, sigmas, scales)
    return val, test


def test_mix_weights_formula():
    w = mix_weights([0.5, 0.7, 0.6], 10.0, -np.inf)
    np.testing.assert_allclose(w, [np.exp(-2.0), 1.0, np.exp(-1.0)])
    # omega_min drops members with omega <= omega_min; the best is kept even above it
    assert mix_weights([0.5, 0.7, 0.6], 1.0, 0.6).tolist() == [0.0, 1.0, 0.0]
    assert mix_weights([0.5, 0.7, 0.6], 1.0, 0.99).tolist() == [0.0, 1.0, 0.0]
    # huge c stays finite thanks to the max shift
    w = mix_weights([0.5, 0.7], 1e6, -np.inf)
    assert w.tolist() == [0.0, 1.0]
    with pytest.raises(ValueError, match="c must be"):
        mix_weights([0.5], -1.0, 0.0)


@pytest.mark.parametrize("rescale", ["none", "zscore_query", "minmax_query", "std_global"])
def test_c_zero_equals_uniform(noisy, rescale):
    (S, y, off), _ = noisy
    f = ExponentialForecaster(c_grid=[0], omega_min_grid=[-np.inf], rescale=rescale,
                              metric=METRIC).fit(S, y, off)
    u = Uniform(rescale=rescale).fit(S, y, off)
    assert f.c_ == 0.0 and f.kept_.all()
    np.testing.assert_allclose(f.transform(S, off), u.transform(S, off), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("rescale", ["none", "zscore_query", "std_global"])
def test_huge_c_equals_best_member(noisy, rescale):
    (S, y, off), (St, _, offt) = noisy
    f = ExponentialForecaster(c_grid=[1e6], omega_min_grid=[-np.inf], rescale=rescale,
                              metric=METRIC).fit(S, y, off)
    best = OneBest(metric=METRIC).fit(S, y, off)
    assert best.best_ == int(np.argmax(f.omega_)) == 0  # sigma 0.6 is the least noisy
    assert f.weights_.tolist() == [1.0] + [0.0] * 7
    assert _order_by_query(f.transform(St, offt), offt) == _order_by_query(
        best.transform(St, offt), offt
    )


def test_omega_is_the_member_quality(noisy):
    (S, y, off), _ = noisy
    f = ExponentialForecaster(c_grid=[0], metric=METRIC).fit(S, y, off)
    expected = [METRIC(y, np.ascontiguousarray(S[:, m]), off, "ndcg@10", "yahoo")
                for m in range(S.shape[1])]
    np.testing.assert_allclose(f.omega_, expected, rtol=1e-12)
    # noisier members rank worse (sigma grows with m except the scales)
    assert f.omega_[0] > f.omega_[4] > f.omega_[7]


def test_omega_min_drops_members(noisy):
    (S, y, off), _ = noisy
    f0 = ExponentialForecaster(c_grid=[0], metric=METRIC).fit(S, y, off)
    threshold = float(np.median(f0.omega_))
    f = ExponentialForecaster(c_grid=[0], omega_min_grid=[threshold], metric=METRIC).fit(S, y, off)
    assert f.omega_min_ == threshold
    np.testing.assert_array_equal(f.kept_, f.omega_ > threshold)
    assert 0 < f.kept_.sum() < S.shape[1]
    # dropped members have no influence on the mix
    S2 = S.copy()
    S2[:, ~f.kept_] = np.random.default_rng(0).normal(size=(S.shape[0], int((~f.kept_).sum())))
    np.testing.assert_allclose(f.transform(S2, off), f.transform(S, off))
    # default grid: -inf plus quantiles of the omegas plus the thresholds keeping the top 1, 2, 3,
    # 5, 10, 20 members (those below the member count)
    assert f0.omega_min_grid_[0] == -np.inf
    qs = [*(np.arange(1, 10) / 10), 0.95, 0.975]
    ranked = np.sort(f0.omega_)[::-1]
    top = [ranked[k] for k in (1, 2, 3, 5, 10, 20) if k < ranked.size]
    np.testing.assert_allclose(f0.omega_min_grid_[1:], np.unique(np.concatenate([np.quantile(f0.omega_, qs), top])))
    for k in (1, 2, 3, 5):
        keep = ExponentialForecaster(c_grid=[0], omega_min_grid=[ranked[k]], metric=METRIC).fit(S, y, off).kept_
        assert keep.sum() == k  # distinct omegas here


def _two_halves_problem():
    """10 two-document queries, the relevant document second. Member 0 is wrong on queries
    0-1, member 1 on queries 2-4 (margin 1, right with margin 2 elsewhere); member 2 is wrong
    everywhere with margin 5. Only the equal mix of members 0 and 1 ranks every query right."""
    nq = 10
    off = np.arange(nq + 1, dtype=np.int64) * 2
    y = np.tile([0, 1], nq).astype(np.int32)

    def member(wrong, margin_wrong):
        s = np.zeros(2 * nq)
        for q in range(nq):
            s[2 * q + 1] = -margin_wrong if q in wrong else 2.0
        return s

    S = np.column_stack([member({0, 1}, 1.0), member({2, 3, 4}, 1.0), member(set(range(nq)), 5.0)])
    return S, y, off


def test_grid_search_finds_the_known_optimum():
    S, y, off = _two_halves_problem()
    f = ExponentialForecaster(
        c_grid=[200, 0], omega_min_grid=[0.9, -np.inf, 0.7], rescale="none", metric=METRIC
    ).fit(S, y, off)
    d = 1 / np.log2(3)  # NDCG of a 2-doc query with the relevant document second
    np.testing.assert_allclose(f.omega_, [(8 + 2 * d) / 10, (7 + 3 * d) / 10, d])
    assert (f.c_, f.omega_min_) == (0.0, 0.7)
    assert f.kept_.tolist() == [True, True, False]
    assert f.validation_quality_ == pytest.approx(1.0)
    # the surface is laid out (c_grid, omega_min_grid) as given
    surface = f.grid_quality_
    assert surface.shape == (2, 3)
    np.testing.assert_allclose(surface[1], [f.omega_[0], d, 1.0])  # c = 0: only m0, all, m0+m1
    np.testing.assert_allclose(surface[0], f.omega_[0])  # c = 200 is member 0 alone
    # with the default grids the chosen mix is perfect too
    g = ExponentialForecaster(rescale="none", metric=METRIC).fit(S, y, off)
    assert g.validation_quality_ == pytest.approx(1.0)
    assert g.weights_[2] < 1e-3


def test_grid_ties_go_to_smaller_c_then_smaller_omega_min():
    S, y, off = _two_halves_problem()
    S = np.column_stack([S[:, 0], S[:, 0]])  # identical members: every grid point ties
    f = ExponentialForecaster(c_grid=[5, 0, 50], omega_min_grid=[0.5, -np.inf], rescale="none",
                              metric=METRIC).fit(S, y, off)
    assert (f.c_, f.omega_min_) == (0.0, -np.inf)


def test_forecaster_beats_best_single_member(noisy):
    (S, y, off), (St, yt, offt) = noisy
    f = ExponentialForecaster(metric=METRIC).fit(S, y, off)
    best = OneBest(metric=METRIC).fit(S, y, off)
    mixed = METRIC(yt, f.transform(St, offt), offt, "ndcg@10", "yahoo")
    single = METRIC(yt, best.transform(St, offt), offt, "ndcg@10", "yahoo")
    assert mixed > single + 0.01
    assert f.validation_quality_ >= METRIC(y, best.transform(S, off), off, "ndcg@10", "yahoo")


def test_rescaling_matters_when_scales_differ(noisy):
    # member 7 is the noisiest and has the widest scale: without rescaling it dominates the
    # uniform mean; per-query z-scores give every member the same spread.
    (S, y, off), _ = noisy
    raw = METRIC(y, Uniform(rescale="none").fit(S, y, off).transform(S, off), off,
                 "ndcg@10", "yahoo")
    z = METRIC(y, Uniform(rescale="zscore_query").fit(S, y, off).transform(S, off), off,
               "ndcg@10", "yahoo")
    assert z > raw + 0.02


def test_errors_are_actionable(noisy):
    (S, y, off), _ = noisy
    with pytest.raises(NotFittedError, match="not fitted"):
        ExponentialForecaster().transform(S, off)
    f = ExponentialForecaster(c_grid=[0], metric=METRIC).fit(S, y, off)
    with pytest.raises(ValueError, match="fitted with 8"):
        f.transform(S[:, :3], off)
    bad = S.copy()
    bad[5, 2] = np.nan
    with pytest.raises(ValueError, match="row 5, member 2"):
        f.transform(bad, off)
    with pytest.raises(ValueError, match="query_offsets"):
        f.transform(S, off[:-1])
    with pytest.raises(ValueError, match="labels must have shape"):
        ExponentialForecaster(metric=METRIC).fit(S, y[:-1], off)
    with pytest.raises(ValueError, match="c_grid"):
        ExponentialForecaster(c_grid=[-1], metric=METRIC).fit(S, y, off)
    with pytest.raises(ValueError, match="rescale must be one of"):
        ExponentialForecaster(rescale="zscore", metric=METRIC).fit(S, y, off)
    with pytest.raises(ValueError, match="2-D"):
        f.transform(S[:, 0], off)


def test_duplicate_rankings_twin():
    """Slow twin: two members are duplicates iff every query's dense ranks agree."""
    rng = np.random.default_rng(5)
    off = np.array([0, 4, 4, 9, 12], dtype=np.int64)
    base = rng.integers(0, 3, size=12).astype(np.float64)  # ties on purpose
    broken = base + 1e-3 * rng.random(12)  # breaks the ties: another ranking
    shifted = base.copy()
    shifted[4:9] += 100.0  # a per-query shift keeps every query's ranking
    S = np.column_stack([base, np.exp(base), broken, shifted, -base, broken * 2])
    from tunemix.core.ensemble.exponential_forecaster import duplicate_rankings

    def dense(col):
        out = []
        for lo, hi in naive.queries(off):
            values = sorted(set(col[lo:hi].tolist()))
            out.append([values.index(v) for v in col[lo:hi]])
        return out

    expected = []
    for j in range(S.shape[1]):
        twin = next((i for i in range(j) if dense(S[:, i]) == dense(S[:, j])), -1)
        expected.append(twin)
    assert expected == [-1, 0, -1, 0, -1, 2]
    assert duplicate_rankings(S, off).tolist() == expected


def test_dedupe_drops_twins_from_the_mix(noisy):
    (S, y, off), _ = noisy
    twin = np.exp(S[:, [2]] / np.abs(S[:, 2]).max())  # member 2's ranking, other scale
    S2 = np.column_stack([S, twin])
    f = ExponentialForecaster(metric=METRIC).fit(S2, y, off)
    assert f.duplicate_of_.tolist() == [-1] * S.shape[1] + [2]
    assert f.weights_[-1] == 0.0
    ref = ExponentialForecaster(metric=METRIC).fit(S, y, off)
    np.testing.assert_allclose(f.weights_[:-1], ref.weights_)
    kept = ExponentialForecaster(dedupe=False, c_grid=[0], omega_min_grid=[-np.inf], metric=METRIC).fit(S2, y, off)
    assert kept.weights_[-1] > 0.0  # without dedupe the twin counts


def test_eligible_mask_equals_fitting_the_subset(noisy):
    (S, y, off), (St, _yt, offt) = noisy
    mask = np.array([False, True, True, False, True, True, False, True])
    f = ExponentialForecaster(metric=METRIC).fit(S, y, off, eligible=mask)
    sub = ExponentialForecaster(metric=METRIC).fit(S[:, mask], y, off)
    assert np.all(f.weights_[~mask] == 0.0)
    np.testing.assert_allclose(f.weights_[mask], sub.weights_)
    assert (f.c_, f.omega_min_) == (sub.c_, sub.omega_min_)
    np.testing.assert_allclose(f.transform(St, offt), sub.transform(St[:, mask], offt))


def test_tie_tolerance_prefers_the_simplest_point(noisy):
    (S, y, off), _ = noisy
    strict = ExponentialForecaster(tie_tolerance=0.0, metric=METRIC).fit(S, y, off)
    assert strict.validation_quality_ == pytest.approx(strict.grid_quality_.max())
    loose = ExponentialForecaster(tie_tolerance=1.0, metric=METRIC).fit(S, y, off)
    assert (loose.c_, loose.omega_min_) == (0.0, -np.inf)  # everything ties: uniform over all
    assert (strict.c_, strict.omega_min_) != (0.0, -np.inf)


def test_one_se_rule_tolerance_is_the_best_points_standard_error(noisy):
    """tie_tolerance="one_se": the tolerance is the SE of the best grid point's per-query values
    (slow twin below); the chosen point is the simplest within it; fewer tuning queries, larger SE."""
    (S, y, off), _ = noisy
    strict = ExponentialForecaster(tie_tolerance=0.0, metric=METRIC).fit(S, y, off)
    f = ExponentialForecaster(tie_tolerance="one_se", metric=METRIC).fit(S, y, off)
    mixed = strict.transform(S, off)  # the best grid point's mix
    per = [METRIC(y[lo:hi], np.ascontiguousarray(mixed[lo:hi]), np.array([0, hi - lo]), "ndcg@10", "yahoo")
           for lo, hi in naive.queries(off)]
    se = float(np.std(per, ddof=1) / np.sqrt(len(per)))
    assert f.tolerance_ == pytest.approx(se, rel=1e-9)
    assert f.validation_quality_ >= strict.validation_quality_ - se
    ties = f.grid_quality_ >= strict.validation_quality_ - se
    simplest = min(zip(*np.nonzero(ties), strict=True), key=lambda ij: (f.c_grid_[ij[0]], f.omega_min_grid_[ij[1]]))
    assert (f.c_, f.omega_min_) == (f.c_grid_[simplest[0]], f.omega_min_grid_[simplest[1]])
    small = ExponentialForecaster(tie_tolerance="one_se", metric=METRIC).fit(S[: off[20]], y[: off[20]], off[:21])
    assert small.tolerance_ > f.tolerance_
    back = ExponentialForecaster.from_params(f.to_params())
    assert back.tie_tolerance == "one_se"


def _naive_cv_surface(S, y, off, c_grid, rules, k):
    """selection="cv", written out: queries dealt to k folds by a seeded permutation; each fold's
    mix uses the other folds' omegas (one metric call per member) and thresholds; the surface is
    the query-weighted mean of the folds' qualities (rescale "none": the mix is sum w s / sum w)."""
    n_q = off.shape[0] - 1
    fold_of = np.empty(n_q, dtype=np.int64)
    fold_of[np.random.default_rng(0).permutation(n_q)] = np.arange(n_q) % k

    def part(qs):
        rows = np.concatenate([np.arange(off[q], off[q + 1]) for q in qs])
        return S[rows], y[rows], np.concatenate([[0], np.cumsum(np.diff(off)[qs])])

    surface = np.zeros((len(c_grid), len(rules)))
    for f in range(k):
        rs, ry, ro = part(np.flatnonzero(fold_of != f))
        hs, hy, ho = part(np.flatnonzero(fold_of == f))
        om = np.array([METRIC(ry, np.ascontiguousarray(rs[:, m]), ro, "ndcg@10", "yahoo") for m in range(S.shape[1])])
        ranked = np.sort(om)[::-1]
        for j, (kind, v) in enumerate(rules):
            t = {"all": -np.inf, "quantile": np.quantile(om, v) if kind == "quantile" else 0.0,
                 "top": ranked[int(v)] if kind == "top" else 0.0}[kind]
            for i, c in enumerate(c_grid):
                keep = (om > t) | (np.arange(om.size) == np.argmax(om))
                w = np.where(keep, np.exp(c * (om - om.max())), 0.0)
                mixed = np.ascontiguousarray(hs @ (w / w.sum()))
                surface[i, j] += METRIC(hy, mixed, ho, "ndcg@10", "yahoo") * (ho.size - 1) / n_q
    return surface


def test_cross_validated_selection_against_its_slow_twin(noisy):
    """selection="cv": the surface is the k-fold estimate of each (c, omega_min rule) point (slow
    twin above); the chosen point is its best (ties: smaller c, then more members), applied to the
    omegas of every tuning query; the params round-trip."""
    (S, y, off), _ = noisy
    S, y, off = S[: off[60]], y[: off[60]], off[:61]
    c_grid = (0.0, 5.0, 50.0)
    f = ExponentialForecaster(c_grid=c_grid, omega_min_quantiles=(0.5,), omega_min_top_k=(1, 2), rescale="none",
                              selection="cv", cv_folds=4, dedupe=False, tie_tolerance=0.0, metric=METRIC)
    f.fit(S, y, off)
    rules = [("all", 0.0), ("quantile", 0.5), ("top", 2.0), ("top", 1.0)]
    want = _naive_cv_surface(S, y, off, c_grid, rules, 4)
    np.testing.assert_allclose(f.grid_quality_, want, rtol=0, atol=1e-12)
    i, j = np.unravel_index(int(np.argmax(want)), want.shape)
    assert f.selection_quality_ == pytest.approx(want.max())
    assert f.c_ == c_grid[i]
    omega = f.omega_
    full = [-np.inf, np.quantile(omega, 0.5), np.sort(omega)[::-1][2], np.sort(omega)[::-1][1]]
    assert f.omega_min_ == pytest.approx(full[j])
    np.testing.assert_allclose(f.weights_, mix_weights(omega, f.c_, f.omega_min_))
    assert f.validation_quality_ == pytest.approx(METRIC(y, f.transform(S, off), off, "ndcg@10", "yahoo"))
    back = ExponentialForecaster.from_params(f.to_params())
    assert (back.selection, back.cv_folds) == ("cv", 4)
    np.testing.assert_allclose(back.transform(S, off), f.transform(S, off))
    with pytest.raises(ValueError, match="selection"):
        ExponentialForecaster(selection="loo", metric=METRIC).fit(S, y, off)


def test_cross_validated_selection_generalises_better_on_few_queries():
    """Equally good members (independent noise around one score) tuned on 15 queries: the
    in-sample point leans on the members those queries favour, which does not carry over; the
    cross-validated choice stays nearer uniform. Over 10 draws its quality on 400 fresh queries
    is higher (measured: +0.0036, SE 0.0012)."""
    rng = np.random.default_rng(7)
    S_new, y_new, off_new = naive.noisy_members(rng, 400, 20, [1.0] * 8, [1.0] * 8)
    gains = []
    for _ in range(10):
        S, y, off = naive.noisy_members(rng, 15, 20, [1.0] * 8, [1.0] * 8)
        cv = ExponentialForecaster(selection="cv", metric=METRIC, rescale="none").fit(S, y, off)
        val = ExponentialForecaster(metric=METRIC, rescale="none").fit(S, y, off)
        gains.append(METRIC(y_new, cv.transform(S_new, off_new), off_new, "ndcg@10", "yahoo")
                     - METRIC(y_new, val.transform(S_new, off_new), off_new, "ndcg@10", "yahoo"))
    assert np.mean(gains) > 0 and sum(g >= 0 for g in gains) >= 6
