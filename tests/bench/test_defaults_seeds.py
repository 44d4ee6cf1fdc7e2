"""bench.defaults' summary of tunemix over several seeds (pure functions; no fits)."""

import numpy as np

from bench.defaults import fit_ratios, per_query_difference, seed_summary


def test_seed_summary_averages_each_fold_over_seeds_then_the_folds() -> None:
    rows = {0: [{"test_ndcg": 0.70}, {"test_ndcg": 0.80}], 1: [{"test_ndcg": 0.74}, {"test_ndcg": 0.76}]}
    pq = {0: [np.array([1.0, 0.0]), np.array([0.5, np.nan])], 1: [np.array([0.0, 0.0]), np.array([0.7, np.nan])]}
    peer = [np.array([0.25, 0.25]), np.array([0.5, 0.1])]
    out = seed_summary(rows, pq, {"lgbm_es": peer, "lgbm_tuned": [p + 0.1 for p in peer]})
    # fold means over seeds: 0.72 and 0.78; their mean 0.75, SE = sd([0.72, 0.78]) / sqrt(2) = 0.03
    assert out["test_ndcg@10"] == 0.75 and out["test_ndcg@10_se"] == 0.03
    assert out["per_seed"] == [0.75, 0.75]
    # per query: seed means (0.5, 0.0) and (0.6, nan) against the peer: 0.25, -0.25, 0.1 (nan left out)
    d = out["minus_lgbm_es_per_query"]
    assert d["queries"] == 3 and d["mean"] == round((0.25 - 0.25 + 0.1) / 3, 4)
    # each peer its own difference: the tuned one 0.1 higher on every query
    assert out["minus_lgbm_tuned_per_query"]["mean"] == round((0.25 - 0.25 + 0.1) / 3 - 0.1, 4)


def test_seed_summary_reports_a_failed_fit_instead_of_a_mean() -> None:
    rows = {0: [{"test_ndcg": 0.7}], 1: [{"error": "timeout"}]}
    assert seed_summary(rows, {0: [], 1: []}, {})["error"] == "a fit failed"


def test_per_query_difference_pools_the_folds() -> None:
    d = per_query_difference([np.array([1.0, 0.5]), np.array([0.0])], [np.array([0.5, 0.5]), np.array([0.5])])
    assert d == {"mean": 0.0, "se": round(float(np.std([0.5, 0.0, -0.5], ddof=1) / np.sqrt(3)), 4), "queries": 3}


def test_the_table_says_the_seed_means_of_one_split_and_of_folds() -> None:
    from bench.defaults import markdown

    one = {"tunemix_seeds": {"test_ndcg@10": 0.36, "test_ndcg@10_se": None, "per_seed": [0.35, 0.37],
                             "minus_lgbm_es_per_query": {"mean": 0.05, "se": 0.01, "queries": 100}}}
    five = {"tunemix_seeds": {"test_ndcg@10": 0.79, "test_ndcg@10_se": 0.006, "per_seed": [0.78, 0.8]}}
    budget = {"tunemix_budget_seeds": {"test_ndcg@10": 0.4, "test_ndcg@10_se": None, "per_seed": [0.39, 0.41],
                                       "minus_lgbm_tuned_per_query": {"mean": 0.02, "se": 0.01, "queries": 43}}}
    report = {"measure": "ndcg@10", "convention": "yahoo", "tunemix_config": "default", "tunemix_seeds": [0, 1],
              "datasets": {"synthetic": {"summary": one}, "mq2008": {"summary": five},
                           "mslr-small": {"summary": budget}}}
    text = markdown(report)
    assert "- synthetic: 0.3600 (per seed 0.3500, 0.3700); - lgbm_es +0.0500 ± 0.0100 (100 q)" in text
    assert "- mq2008: 0.7900 ± 0.0060 (per seed 0.7800, 0.8000)" in text
    assert "tunemix_budget over seeds 0, 1" in text
    assert "- mslr-small: 0.4000 (per seed 0.3900, 0.4100); - lgbm_tuned +0.0200 ± 0.0100 (43 q)" in text


def test_fit_ratios_divide_each_system_by_its_peer_when_both_ran() -> None:
    summary = {"tunemix": {"fit_s": 30.0}, "tunemix1": {"fit_s": 40.0}, "lgbm_es1": {"fit_s": 20.0},
               "lgbm_es": {"folds": 5, "folds_done": 0}}
    assert fit_ratios(summary) == {"tunemix/lgbm_es1": 1.5, "tunemix1/lgbm_es1": 2.0}
    assert fit_ratios({"tunemix": {"fit_s": 3.0}}) == {}


def test_name_and_out_are_one_or_the_other(capsys) -> None:
    """``--name`` (into bench/results, as every other benchmark) or ``--out`` (a path), not both."""
    import pytest

    from bench.defaults import main

    with pytest.raises(SystemExit) as exc:
        main(["--name", "x", "--out", "/tmp/x.json"])
    assert exc.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err
