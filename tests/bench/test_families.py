"""bench.families' generators (deterministic for a seed, the stated shapes, each family's property)
and their data set names and summary in bench.defaults."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from bench import defaults, families
from bench.families import CHOOSING, FAMILIES, HELD_OUT, make_family_splits, truth
from tunemix.core.data.dataset import RankingData


def _shrunk(name: str) -> families.Family:
    """The family with few queries (the same truth: it comes from the name and the seed)."""
    f = FAMILIES[name]
    few = 4 if f.docs_per_query[0] >= 300 else 20
    return dataclasses.replace(f, train_queries={"small": few, "large": 2 * few}, test_queries=few)


def _centred(d: RankingData, v: np.ndarray) -> np.ndarray:
    """``v`` less its query's mean."""
    mean = np.bincount(d.query_index, weights=v) / d.query_sizes
    return v - mean[d.query_index]


def _within_query_r2(d: RankingData) -> float:
    """R² of the least-squares fit of the labels by the features, both centred in each query."""
    x = np.column_stack([_centred(d, d.features[:, j].astype(np.float64)) for j in range(d.n_features)])
    y = _centred(d, d.labels.astype(np.float64))
    beta, *_ = np.linalg.lstsq(x, y, rcond=None)
    return float(1.0 - np.var(y - x @ beta) / np.var(y))


@pytest.mark.parametrize("name", list(FAMILIES))
def test_each_family_is_deterministic_for_a_seed_and_has_its_shape(name: str) -> None:
    f = _shrunk(name)
    a, b = make_family_splits(f, "large", seed=3), make_family_splits(f, "large", seed=3)
    other = make_family_splits(f, "large", seed=4)
    assert list(a) == ["train", "vali", "test"]
    for split in a:
        assert np.array_equal(a[split].features, b[split].features)
        assert np.array_equal(a[split].labels, b[split].labels)
        assert np.array_equal(a[split].query_offsets, b[split].query_offsets)
        assert a[split].n_features == f.n_features
        lo, hi = f.docs_per_query
        assert lo <= a[split].query_sizes.min() and a[split].query_sizes.max() <= hi
        assert 0 <= a[split].labels.min() and a[split].labels.max() <= 4
    assert not np.array_equal(a["train"].features[:5], other["train"].features[:5])
    assert a["train"].n_queries == f.train_queries["large"]
    assert a["vali"].n_queries == max(8, round(0.25 * f.train_queries["large"]))
    assert a["test"].n_queries == f.test_queries
    # the splits are different queries with their own ids
    ids = np.concatenate([a[s].qids for s in a])
    assert np.unique(ids).size == ids.size


@pytest.mark.parametrize("name", list(FAMILIES))
def test_every_family_is_mostly_zeros_and_uses_every_grade(name: str) -> None:
    labels = np.concatenate([d.labels for d in make_family_splits(_shrunk(name), "large").values()])
    shares = np.bincount(labels, minlength=5) / labels.size
    assert shares[0] > 0.4 and shares[0] == shares.max()
    assert (shares > 0).all()


def test_the_sizes_are_about_10k_and_40k_training_documents() -> None:
    for f in FAMILIES.values():
        mean_docs = sum(f.docs_per_query) / 2
        assert 8_000 <= f.train_queries["small"] * mean_docs <= 16_000, f.name
        assert 30_000 <= f.train_queries["large"] * mean_docs <= 50_000, f.name


def test_choosing_and_held_out_split_the_families() -> None:
    assert set(CHOOSING) | set(HELD_OUT) == set(FAMILIES) and not set(CHOOSING) & set(HELD_OUT)
    assert CHOOSING == ("query_types", "label_noise", "interactions")
    assert families.role("sparse") == "held-out" and families.role("label_noise") == "choosing"
    with pytest.raises(ValueError, match="unknown family"):
        families.role("nope")


def test_query_types_weigh_different_features_and_signal_the_type_per_query() -> None:
    params, _, _ = truth(FAMILIES["query_types"])
    strongest = [set(np.argsort(-np.abs(w))[:4]) for w in params["weights"]]
    assert all(strongest[i] != strongest[j] for i in range(4) for j in range(i))
    d = make_family_splits(_shrunk("query_types"), "small")["train"]
    query_level = d.features[:, -6:]
    for lo, hi in zip(d.query_offsets[:-1], d.query_offsets[1:], strict=True):
        assert (query_level[lo:hi] == query_level[lo]).all()  # constant within each query


def test_sparse_only_its_three_informative_features_correlate_with_the_labels() -> None:
    d = make_family_splits("sparse", "small")["train"]
    params, _, _ = truth(FAMILIES["sparse"])
    y = _centred(d, d.labels.astype(np.float64))
    corr = np.array([np.corrcoef(_centred(d, d.features[:, j].astype(np.float64)), y)[0, 1]
                     for j in range(d.n_features)])
    informative = params["informative"]
    assert d.n_features == 136 and len(informative) == 3
    assert (corr[informative] > 0.1).all()
    assert np.abs(np.delete(corr, informative)).max() < 0.05


def test_label_noise_changes_about_half_the_labels_a_low_noise_family_a_fifth() -> None:
    def agreement(name: str) -> float:
        f = FAMILIES[name]
        noisy = make_family_splits(f, "small")["train"].labels
        clean = make_family_splits(dataclasses.replace(f, noise=0.0, flip=0.0), "small")["train"].labels
        return float(np.mean(noisy == clean))

    assert agreement("label_noise") < 0.65
    assert agreement("linear") > 0.75


def test_heavy_tailed_features_are_skewed_and_scaled_per_query() -> None:
    d = make_family_splits(_shrunk("heavy_tailed"), "large")["train"]
    x = d.features.astype(np.float64)
    skew = ((x - x.mean(axis=0)) ** 3).mean(axis=0) / x.std(axis=0) ** 3
    assert (x >= 0).all()
    assert float(np.median(skew)) > 3.0
    medians = np.array([np.median(d.features[lo:hi], axis=0)
                        for lo, hi in zip(d.query_offsets[:-1], d.query_offsets[1:], strict=True)])
    spread = np.percentile(medians, 90, axis=0) / np.maximum(np.percentile(medians, 10, axis=0), 1e-9)
    dependent = truth(FAMILIES["heavy_tailed"])[0]["dependent"]
    assert float(np.median(spread[dependent])) > 3.0  # a feature's typical value differs by query
    assert float(np.median(spread[~dependent])) < 2.0


@pytest.mark.parametrize("name", ["linear", "interactions"])
def test_half_the_features_are_query_dependent_the_others_mean_the_same_in_every_query(name: str) -> None:
    d = make_family_splits(name, "small")["train"]
    dependent = truth(FAMILIES[name])[0]["dependent"]
    assert dependent.sum() == round(0.5 * d.n_features)
    # the variance of the per-query means: the query-level spread (0.5 or 0.3) squared plus about
    # 1/60 from the documents' own spread, against that 1/60 alone
    means = np.stack([np.bincount(d.query_index, weights=d.features[:, j]) / d.query_sizes
                      for j in range(d.n_features)], axis=1)
    between = means.var(axis=0)
    assert between[dependent].min() > 0.05 and between[~dependent].max() < 0.04


def test_tiny_queries_and_long_lists_have_their_query_sizes() -> None:
    tiny = make_family_splits("tiny_queries", "small")
    assert all(2 <= d.query_sizes.min() and d.query_sizes.max() <= 8 for d in tiny.values())
    assert tiny["train"].n_queries == 2000 and set(np.unique(tiny["train"].query_sizes)) == set(range(2, 9))
    long = make_family_splits(_shrunk("long_lists"), "small")
    assert all(300 <= d.query_sizes.min() and d.query_sizes.max() <= 1000 for d in long.values())
    assert np.mean(long["train"].labels == 0) > 0.6  # more skewed: most of a long list is irrelevant


def test_linear_is_linear_within_queries_and_interactions_are_not() -> None:
    assert _within_query_r2(make_family_splits("linear", "small")["train"]) > 0.5
    assert _within_query_r2(make_family_splits("interactions", "small")["train"]) < 0.25


def test_the_data_set_names_expand_and_parse_in_bench_defaults() -> None:
    every = defaults.expand_datasets(["families"])
    assert len(every) == 2 * len(FAMILIES) and every[0] == "family:query_types:small"
    assert defaults.expand_datasets(["families:small", "mq2008"])[-1] == "mq2008"
    assert len(defaults.expand_datasets(["families:small"])) == len(FAMILIES)
    assert defaults.expand_datasets(["family:sparse"]) == ["family:sparse:small", "family:sparse:large"]
    assert families.parse("family:linear:large") == ("linear", "large")
    defaults.check_data(every)  # generated: known, nothing to find
    with pytest.raises(SystemExit, match="unknown data set"):
        defaults.check_data(["family:sparse:huge"])
    with pytest.raises(ValueError, match="unknown family"):
        defaults.expand_datasets(["family:nope"])
    with pytest.raises(ValueError, match="unknown size"):
        defaults.expand_datasets(["families:huge"])


def test_the_family_summary_pools_per_query_differences_by_role() -> None:
    """Hand arithmetic: sparse (held out) ahead by 0.1 on two queries at one size and 0.3 on two at
    the other; label_noise (choosing) behind by 0.2 on two queries (a NaN query left out)."""
    pq = {"family:sparse:small": {"tunemix": [np.array([0.6, 0.5])], "lgbm_es": [np.array([0.5, 0.4])]},
          "family:sparse:large": {"tunemix": [np.array([0.9, 0.7])], "lgbm_es": [np.array([0.6, 0.4])]},
          "family:label_noise:small": {"tunemix": [np.array([0.3, 0.0, np.nan])],
                                       "lgbm_es": [np.array([0.5, 0.2, 0.1])]}}
    datasets = {n: {"folds": {"tunemix": [{"train_docs": 100}], "lgbm_es": [{"train_docs": 100}]},
                    "summary": {"tunemix": {"fit_s": 2.0}, "lgbm_es": {"fit_s": 1.0}}} for n in pq}
    out = defaults.family_summary(datasets, pq)
    sparse = out["families"]["sparse"]
    assert sparse["role"] == "held-out" and sparse["sizes"] == ["small", "large"]
    assert sparse["tunemix"] == 0.675 and sparse["lgbm_es"] == 0.475
    assert sparse["difference"]["mean"] == 0.2 and sparse["difference"]["queries"] == 4
    noise = out["families"]["label_noise"]
    assert noise["role"] == "choosing" and noise["difference"]["mean"] == -0.2 and noise["difference"]["queries"] == 2
    assert out["pooled"]["held_out"] == sparse["difference"]
    assert out["pooled"]["choosing"] == noise["difference"]
    assert out["pooled"]["all"]["queries"] == 6
    assert out["pooled"]["all"]["mean"] == round((0.1 + 0.1 + 0.3 + 0.3 - 0.2 - 0.2) / 6, 4)
    assert out["family_weighted"]["all"]["mean"] == pytest.approx(0.0, abs=1e-9)
    assert out["family_weighted"]["all"]["se"] == pytest.approx(sparse["difference"]["se"] / 2, abs=1e-4)
    assert out["criteria"]["held_out_at_least_peer"] and out["criteria"]["held_out_behind"] == []
    assert out["criteria"]["pooled_all_above_two_se"] is False  # 0.067 against an SE of 0.092
    text = "\n".join(defaults.family_markdown(out))
    assert "| sparse | held-out | small | 100 | 0.5500 | 0.4500 | +0.1000 ± 0.0000 (2 q) | 2.0 | 1.0 |" in text
    assert "- every held-out family at least the peer: yes" in text
    swapped = defaults.family_summary(datasets, pq, ours="lgbm_es", peer="tunemix")
    assert swapped["criteria"]["held_out_behind"] == ["sparse"]
    assert "behind on sparse" in "\n".join(defaults.family_markdown(swapped))
