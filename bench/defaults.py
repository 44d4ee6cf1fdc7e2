"""The default model against what a user would run instead, out of the box, in one run.

``python -m bench.defaults`` (JSON and a table in ``bench/results/defaults.{json,md}``):
for every split, each system (``bench.fitproc``: tunemix's default ``TuneMixRanker(n_jobs=2)``,
``LGBMRanker()``, LightGBM early-stopped on validation NDCG@10, ``XGBRanker(tree_method="hist")``)
is fitted in a process of its own on the same train / validation / test queries; reported: test
NDCG@10 (yahoo convention; mean of the folds with the standard error of the mean), fit seconds
and peak memory of the process tree.

Data:

- ``mq2008``: the five official folds of MQ2008 (``../shared/data/MQ2008``).
- ``mslr-sample``: the MSLR-WEB10K sample's train and test files pooled (86 queries) and cut into
  five query folds in file order; fold i tests on part i, validates on part i+1 (mod 5) and trains
  on the other three, as LETOR rotates its parts.
- ``mslr-small``: a tiny validation set: the MSLR-WEB10K sample's train file in file order, its
  first 34 queries train and its last 9 validate; its test file (43 queries) is the test set; one
  split. (The early-stopped peer scores 0.3881 there; with the 9 validation queries drawn as
  ``TuneMixRanker.fit`` holds out, seed 0, it scores 0.2996.)
- ``synthetic-mslr``: McRank's cubic-polynomial data shaped like MSLR (136 features, 5 grades,
  60 to 180 documents a query; 250 training, 60 validation, 100 test queries, about 29k training
  documents), one split.
- ``families``: the generator families of ``bench.families`` (query-dependent relevance, 3
  informative features among 136, heavy label noise, heavy-tailed features, 2 to 8 documents a
  query, 300 to 1,000, interactions, linear relevance), each at two sizes (about 10k and 40k
  training documents), one split each: ``family:<name>:<size>``. ``families:small`` is every
  family at one size, ``family:<name>`` one family at both. Three families are *choosing* (the
  default's choices may be tuned on them), five *held out*; the summary ``families`` gives, per
  family, tunemix's and the early-stopped peer's mean test NDCG@10 and their per-query difference
  with its SE, pooled over the family's sizes, and the per-query difference pooled over the
  held-out families, the choosing ones and all (also as the mean of the family means).

On a machine loaded beyond its cores, run with ``OMP_WAIT_POLICY=PASSIVE`` (the fits inherit the
environment): OpenMP threads that spin while they wait (LightGBM's, every system's) otherwise take
tens of times longer there, and fit seconds measure the spinning.

Systems (``bench.fitproc``): besides the peers above, ``lgbm_es1`` (the early-stopped peer on one
LightGBM thread: the cost peer on small data), ``tunemix1`` (``TuneMixRanker(n_jobs=1)`` on one
core, at ``--seeds``' first seed: the one-thread-each comparison; the summary's ``fit_ratios``
give tunemix/lgbm_es1, tunemix1/lgbm_es1 and tunemix/lgbm_es) and ``lgbm_tuned`` (Optuna's TPE over LGBMRanker's
parameters, every trial early-stopped, the best by validation NDCG@10) searching as many wall
seconds as tunemix's seed-0 fit took on the same split (``--tuned-budget S`` when tunemix is not
run; ``--tuned-at-once 2``: two trials at once, one thread each); the summary gives tunemix's
per-query difference to it too. ``tunemix_budget`` is ``TuneMixRanker(time_budget_s=S)`` with
S the ``--tuned-budget``: the default members, then the rounds of the search of "tune, then mix"
while they are measured to help (docs/method.md); it is fitted at every seed like ``tunemix``, its
summary ``tunemix_budget_seeds`` gives its per-query differences to ``tunemix`` (both averaged over
the seeds), ``lgbm_es``, ``lgbm_es1`` and ``lgbm_tuned``. ``tunemix_budget:S`` is the same with a
budget of S seconds, for several budgets in one run:
``--systems tunemix,tunemix_budget:60,tunemix_budget:600``. The comparison at one budget:
``--systems tunemix_budget,lgbm_tuned,lgbm_es1 --seeds 0,1,2 --tuned-budget 60 --tuned-at-once 2``.

``--warm-fits`` fits tunemix and the early-stopped peers twice in their process and reports the
second fit's seconds beside the first's (``warm_fit_s``; ``fit_ratios`` `` warm``): the fit a user
waits for inside a warm process, without the imports and first calls a fresh process pays.

``--datasets mq2008,mslr-sample`` picks some; ``--systems`` some systems; ``--config FILE.toml``
gives tunemix a configuration instead of the default (what-if runs; the JSON says so).

``--seeds 0,1,2,3,4`` (the default): tunemix is also fitted with ``random_state`` 1 to 4 (its LightGBM runs bag
documents and features, AdaBoost.MH's calibration part is drawn: one seed is one draw of a
noisy result; the early-stopped peer bags nothing and is the same at every seed). The row
``tunemix`` is seed 0, what ``TuneMixRanker()`` gives; ``tunemix_seeds`` is the mean over the
seeds of each fold's test NDCG@10, then over the folds (SE over the folds), with its per-query
difference to the early-stopped peer.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from bench import families
from bench.common import RESULTS, SHARED_DATA, machine_info, mslr_shaped_sets
from bench.fitproc import SYSTEMS, run_fit, warm_up
from tunemix.core.data.dataset import RankingData
from tunemix.core.evaluation import evaluate

MEASURE, CONVENTION = "ndcg@10", "yahoo"
DATASETS = ("mq2008", "mslr-sample", "mslr-small", "synthetic-mslr")


def _pool(parts: list[RankingData]) -> RankingData:
    feats = np.concatenate([p.features for p in parts])
    labels = np.concatenate([p.labels for p in parts])
    sizes = np.concatenate([p.query_sizes for p in parts])
    return RankingData.from_arrays(feats, labels, group_sizes=sizes)


def mq2008_splits() -> list[dict[str, RankingData]]:
    from tunemix.core.data.svmlight import read_svmlight

    out = []
    for k in range(1, 6):
        fold = SHARED_DATA / "MQ2008" / f"Fold{k}"
        train = read_svmlight(fold / "train.txt")
        out.append({"train": train, "vali": read_svmlight(fold / "vali.txt", n_features=train.n_features),
                    "test": read_svmlight(fold / "test.txt", n_features=train.n_features)})
    return out


def mslr_sample_splits(n_folds: int = 5) -> list[dict[str, RankingData]]:
    from tunemix.core.data.svmlight import read_svmlight

    root = SHARED_DATA / "MSLR-WEB10K-sample"
    train = read_svmlight(root / "msn1.fold1.train.5k.txt", n_features=136)
    test = read_svmlight(root / "msn1.fold1.test.5k.txt", n_features=136)
    pooled = _pool([train, test])
    parts = np.array_split(np.arange(pooled.n_queries), n_folds)
    out = []
    for i in range(n_folds):
        t, v = parts[i], parts[(i + 1) % n_folds]
        rest = np.concatenate([parts[j] for j in range(n_folds) if j not in (i, (i + 1) % n_folds)])
        out.append({"train": pooled.subset_queries(rest), "vali": pooled.subset_queries(v),
                    "test": pooled.subset_queries(t)})
    return out


def mslr_small_splits() -> list[dict[str, RankingData]]:
    from tunemix.core.data.svmlight import read_svmlight

    root = SHARED_DATA / "MSLR-WEB10K-sample"
    train = read_svmlight(root / "msn1.fold1.train.5k.txt", n_features=136)
    test = read_svmlight(root / "msn1.fold1.test.5k.txt", n_features=136)
    cut = train.n_queries - 9
    return [{"train": train.query_slice(0, cut), "vali": train.query_slice(cut, train.n_queries), "test": test}]


def synthetic_mslr_splits(train_queries: int = 250, seed: int = 0) -> list[dict[str, RankingData]]:
    return [mslr_shaped_sets({"train": train_queries, "vali": 60, "test": 100}, seed)]


def data_files(name: str) -> list[Path]:
    """The files a data set's splits read (none for generated data)."""
    if name == "mq2008":
        return [SHARED_DATA / "MQ2008" / f"Fold{k}" / f"{part}.txt" for k in range(1, 6)
                for part in ("train", "vali", "test")]
    if name == "mslr-sample":
        root = SHARED_DATA / "MSLR-WEB10K-sample"
        return [root / "msn1.fold1.train.5k.txt", root / "msn1.fold1.test.5k.txt"]
    return []


def expand_datasets(names: list[str]) -> list[str]:
    """``--datasets``' names with ``families``, ``families:<size>`` and ``family:<name>`` written
    out as ``family:<name>:<size>`` (``bench.families.dataset_names``); other names unchanged."""
    out: list[str] = []
    for name in names:
        out += families.dataset_names(name) if name.split(":", 1)[0] in ("families", "family") else [name]
    return list(dict.fromkeys(out))


def check_data(datasets: list[str]) -> None:
    """Before any fit: every data set known and its files present, else SystemExit saying where
    the data are expected (not a FileNotFoundError after the warm-up)."""
    unknown = []
    for n in datasets:
        try:
            known = n in DATASETS or families.parse(n) is not None
        except ValueError:
            known = False
        if not known:
            unknown.append(n)
    if unknown:
        raise SystemExit(f"bench.defaults: unknown data set(s) {', '.join(unknown)}; known: {', '.join(DATASETS)}, "
                         f"families, families:<{'|'.join(families.SIZES)}>, family:<name>[:<size>] "
                         f"(names: {', '.join(families.FAMILIES)})")
    missing = [p for n in datasets for p in data_files(n) if not p.is_file()]
    if missing:
        raise SystemExit(f"bench.defaults: {len(missing)} data file(s) missing, e.g. {missing[0]}. The benchmark "
                         f"data are expected under {SHARED_DATA} (shared/data beside the repository; set "
                         "TUNEMIX_SHARED_DATA to their folder), or measure generated data only: "
                         "--datasets synthetic-mslr")


def splits(name: str) -> list[dict[str, RankingData]]:
    if name.startswith("family:"):
        return [families.make_family_splits(*families.parse(name))]
    return {"mq2008": mq2008_splits, "mslr-sample": mslr_sample_splits, "mslr-small": mslr_small_splits,
            "synthetic-mslr": synthetic_mslr_splits}[name]()


def ndcg(data: RankingData, scores: np.ndarray) -> tuple[float, np.ndarray]:
    res = evaluate(data.labels, scores, data.query_offsets, [MEASURE], CONVENTION)
    per_query = np.asarray(res.per_query[MEASURE], dtype=np.float64)
    return float(np.nanmean(per_query)), per_query


def mean_se(values: npt.ArrayLike) -> tuple[float, float | None]:
    """The mean of ``values`` and its standard error (None for fewer than two), rounded to 4 places."""
    v = np.asarray(values, dtype=np.float64)
    se = round(float(v.std(ddof=1) / math.sqrt(v.size)), 4) if v.size > 1 else None
    return round(float(v.mean()), 4), se


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean test NDCG@10 over folds with the standard error of that mean, summed fit seconds and the
    largest peak memory; the pooled per-query differences against the early-stopped peer."""
    ok = [r for r in rows if "test_ndcg" in r]
    out: dict[str, Any] = {"folds": len(rows), "folds_done": len(ok)}
    if not ok:
        return out
    out["test_ndcg@10"], out["test_ndcg@10_se"] = mean_se([r["test_ndcg"] for r in ok])
    out["vali_ndcg@10"] = round(float(np.mean([r["vali_ndcg"] for r in ok])), 4)
    out["fit_s"] = round(float(sum(r["fit_s"] for r in ok)), 1)
    out["fit_s_max"] = round(float(max(r["fit_s"] for r in ok)), 1)
    if all("warm_fit_s" in r for r in ok):
        out["warm_fit_s"] = round(float(sum(r["warm_fit_s"] for r in ok)), 2)
    out["peak_mb"] = round(float(max(r["peak_mb"] for r in ok)), 1)
    return out


#: the systems fitted a second time in their process with ``--warm-fits`` (``warm_fit_s``)
WARM_FIT_SYSTEMS = ("tunemix", "tunemix1", "lgbm_es", "lgbm_es1")
#: the cost comparisons: (tunemix system, peer), one thread each or two each, and the default
#: (two jobs) against the one-thread peer (the goal: at most 2)
COST_PAIRS = (("tunemix", "lgbm_es1"), ("tunemix1", "lgbm_es1"), ("tunemix", "lgbm_es"))


def fit_ratios(summary: dict[str, Any]) -> dict[str, float]:
    """Fit seconds over the folds, each ``COST_PAIRS`` system's over its peer's (pairs measured):
    first fits in fresh processes, and (`` warm``) second fits in the same process."""
    out = {}
    for ours, peer in COST_PAIRS:
        for key, suffix in (("fit_s", ""), ("warm_fit_s", " warm")):
            a, b = summary.get(ours, {}).get(key), summary.get(peer, {}).get(key)
            if a is not None and b:
                out[f"{ours}/{peer}{suffix}"] = round(a / b, 2)
    return out


def per_query_difference(ours: list[np.ndarray], peer: list[np.ndarray]) -> dict[str, Any]:
    """Mean and SE of the pooled per-query test NDCG@10 differences (NaN queries left out)."""
    diff = np.concatenate(ours) - np.concatenate(peer)
    diff = diff[~np.isnan(diff)]
    return {"mean": round(float(diff.mean()), 4), "se": round(float(diff.std(ddof=1) / math.sqrt(diff.size)), 4),
            "queries": int(diff.size)}


def seed_summary(rows: dict[int, list[dict[str, Any]]], per_query: dict[int, list[np.ndarray]],
                 peers: dict[str, list[np.ndarray]]) -> dict[str, Any]:
    """A seeded system over its seeds: each fold's test NDCG@10 averaged over the seeds, then the
    folds' mean with its SE; the per-query scores averaged the same way against each peer's
    (``minus_<peer>_per_query``)."""
    seeds = sorted(rows)
    folds = [[r.get("test_ndcg") for r in rows[s]] for s in seeds]
    if any(v is None for f in folds for v in f):
        return {"seeds": seeds, "error": "a fit failed"}
    mean, se = mean_se(np.mean(np.array(folds, dtype=np.float64), axis=0))
    fit_s = [r["fit_s"] for s in seeds for r in rows[s] if "fit_s" in r]
    out: dict[str, Any] = {"seeds": seeds, "test_ndcg@10": mean, "test_ndcg@10_se": se,
                           "per_seed": [round(float(np.mean(f)), 4) for f in folds],
                           "fit_s_mean": round(float(np.mean(fit_s)), 2) if fit_s else None}
    for name, peer in peers.items():
        if peer and all(len(per_query[s]) == len(peer) for s in seeds):
            mean_pq = [np.mean([per_query[s][k] for s in seeds], axis=0) for k in range(len(peer))]
            out[f"minus_{name}_per_query"] = per_query_difference(mean_pq, peer)
    return out


def paired_over_seeds(ours: dict[int, list[np.ndarray]], theirs: dict[int, list[np.ndarray]]) -> dict[str, Any] | None:
    """Per query, the mean over the seeds of ``ours`` less that of ``theirs`` (both seeded, same
    seeds and folds): the pooled differences' mean and SE (None when a fit is missing)."""
    seeds = sorted(ours)
    n = {len(ours[s]) for s in seeds} | {len(theirs.get(s, [])) for s in seeds}
    if len(n) != 1 or not n.pop():
        return None
    folds = range(len(ours[seeds[0]]))
    return per_query_difference([np.mean([ours[s][k] for s in seeds], axis=0) for k in folds],
                                [np.mean([theirs[s][k] for s in seeds], axis=0) for k in folds])


def _combined(diffs: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The mean of per-family differences (each family one weight) with the SE of that mean
    (the families' SEs combined as independent)."""
    if not diffs:
        return None
    mean = float(np.mean([d["mean"] for d in diffs]))
    se = math.sqrt(sum(d["se"] ** 2 for d in diffs)) / len(diffs)
    return {"mean": round(mean, 4), "se": round(se, 4), "families": len(diffs)}


def family_summary(datasets: dict[str, dict[str, Any]], per_query: dict[str, dict[str, list[np.ndarray]]],
                   ours: str = "tunemix", peer: str = "lgbm_es") -> dict[str, Any]:
    """The ``bench.families`` data sets of a run: per data set and per family (its sizes pooled),
    ``ours``' and ``peer``'s mean test NDCG@10 over the queries and the per-query difference with
    its SE; the per-query difference pooled over the held-out families, the choosing ones and all
    (``pooled``), and the mean of the family means (``family_weighted``: each family one weight,
    whatever its number of test queries); whether every held-out family's mean is at least the
    peer's and whether the pooled difference over all is above two SEs (``criteria``)."""
    rows: dict[str, dict[str, Any]] = {}
    grouped: dict[str, tuple[list[np.ndarray], list[np.ndarray]]] = {}
    for name, pq in per_query.items():
        family, size = families.parse(name)
        if not pq.get(ours) or not pq.get(peer):
            continue
        summary = datasets[name]["summary"]
        rows[name] = {"family": family, "size": size, "role": families.role(family),
                      "train_docs": datasets[name]["folds"][ours][0].get("train_docs"),
                      ours: round(float(np.nanmean(np.concatenate(pq[ours]))), 4),
                      peer: round(float(np.nanmean(np.concatenate(pq[peer]))), 4),
                      f"{ours}_fit_s": summary[ours].get("fit_s"), f"{peer}_fit_s": summary[peer].get("fit_s"),
                      "difference": per_query_difference(pq[ours], pq[peer])}
        a, b = grouped.setdefault(family, ([], []))
        a += pq[ours]
        b += pq[peer]
    per_family = {}
    for family, (a, b) in grouped.items():
        per_family[family] = {"role": families.role(family), "sizes": [r["size"] for r in rows.values()
                                                                     if r["family"] == family],
                              ours: round(float(np.nanmean(np.concatenate(a))), 4),
                              peer: round(float(np.nanmean(np.concatenate(b))), 4),
                              "difference": per_query_difference(a, b)}
    pooled, weighted = {}, {}
    for group, names in (("held_out", families.HELD_OUT), ("choosing", families.CHOOSING),
                         ("all", tuple(families.FAMILIES))):
        chosen = [f for f in names if f in grouped]
        if chosen:
            pooled[group] = per_query_difference([q for f in chosen for q in grouped[f][0]],
                                                 [q for f in chosen for q in grouped[f][1]])
            weighted[group] = _combined([per_family[f]["difference"] for f in chosen])
    behind = [f for f, r in per_family.items() if r["role"] == "held-out" and r[ours] < r[peer]]
    criteria = {"held_out_behind": behind, "held_out_at_least_peer": not behind}
    if "all" in pooled:
        criteria["pooled_all_above_two_se"] = pooled["all"]["mean"] > 2 * pooled["all"]["se"]
    return {"ours": ours, "peer": peer, "choosing": list(families.CHOOSING), "held_out": list(families.HELD_OUT),
            "datasets": rows, "families": per_family, "pooled": pooled, "family_weighted": weighted,
            "criteria": criteria}


#: systems fitted at every seed of ``--seeds`` (the peers once)
SEEDED = ("tunemix", "tunemix_budget")


def base_system(system: str) -> str:
    """``tunemix_budget:600`` -> ``tunemix_budget``: a system with its budget in its name."""
    return system.split(":", 1)[0]


def system_budget(system: str, tuned_budget: float) -> float:
    """``tunemix_budget:S``'s S, else ``--tuned-budget``."""
    _, _, given = system.partition(":")
    return float(given) if given else tuned_budget


def run(datasets: list[str], systems: list[str], config: str | None, seeds: list[int] | None = None,
        tuned_budget: float = 30.0, warm: bool = True, tuned_at_once: int = 1,
        warm_fits: bool = False) -> dict[str, Any]:
    extra = {"config": str(Path(config).resolve())} if config else {}
    seeds = seeds or [0]
    report: dict[str, Any] = {"machine": machine_info(), "measure": MEASURE, "convention": CONVENTION,
                              "tunemix_config": config or "default (chosen from the data)", "tunemix_seeds": seeds,
                              "tuned_budget_s": tuned_budget, "tuned_trials_at_once": tuned_at_once, "datasets": {}}
    if any(base_system(s) in SEEDED for s in systems) and warm:  # numba's first compilation is not the fit a user meets
        report["warm_up"] = warm_up()
    # the seeded systems at every seed (the first is their row), the peers once
    fits = [(s, seed) for s in systems for seed in (seeds if base_system(s) in SEEDED else [None])]
    fits.sort(key=lambda f: f[0] == "lgbm_tuned")  # after tunemix: its search gets tunemix's seconds
    seeded = [s for s in systems if base_system(s) in SEEDED]
    family_pq: dict[str, dict[str, list[np.ndarray]]] = {}
    for name in datasets:
        folds = splits(name)
        per_system: dict[str, list[dict[str, Any]]] = {s: [] for s in systems}
        per_query: dict[str, list[np.ndarray]] = {s: [] for s in systems}
        seed_rows: dict[str, dict[int, list[dict[str, Any]]]] = {s: {sd: [] for sd in seeds} for s in seeded}
        seed_pq: dict[str, dict[int, list[np.ndarray]]] = {s: {sd: [] for sd in seeds} for s in seeded}
        for k, sets in enumerate(folds):
            budget = tuned_budget
            for system, seed in fits:
                options: dict[str, Any] | None = ({**extra, "random_state": seed} if base_system(system) in SEEDED
                                                  else None)
                if system == "tunemix1":
                    options = {**extra, "random_state": seeds[0]}
                if base_system(system) == "tunemix_budget":
                    options = {**(options or {}), "budget_s": system_budget(system, tuned_budget)}
                if system == "lgbm_tuned":
                    options = {"budget_s": budget, "seed": 0, "n_jobs": 1, "trials_at_once": tuned_at_once}
                if warm_fits and system in WARM_FIT_SYSTEMS and seed in (None, seeds[0]):
                    options = {**(options or {}), "warm_fit": True}
                res = run_fit(base_system(system), sets, extra=options)
                row = {k2: v for k2, v in res.items() if k2 != "scores"}
                row["fold"] = k + 1
                row["train_docs"] = sets["train"].n_docs
                headline = seed in (None, seeds[0])  # a peer, or a seeded system's first seed
                if "scores" in res:
                    row["vali_ndcg"], _ = ndcg(sets["vali"], res["scores"]["vali"])
                    row["test_ndcg"], pq = ndcg(sets["test"], res["scores"]["test"])
                    if seed is not None:
                        seed_pq[system][seed].append(pq)
                    if headline:
                        per_query[system].append(pq)
                if system == "tunemix" and seed == seeds[0] and "fit_s" in res:
                    budget = float(res["fit_s"])  # the tuned peer's search seconds on this split
                if seed is not None:
                    row["seed"] = seed
                    seed_rows[system][seed].append(row)
                if headline:
                    per_system[system].append(row)
                label = system if seed is None else f"{system}@{seed}"
                print(f"{name} fold {k + 1} {label:10s} test {row.get('test_ndcg', float('nan')):.4f} "
                      f"vali {row.get('vali_ndcg', float('nan')):.4f} fit {row.get('fit_s', float('nan')):7.1f} s "
                      f"peak {row['peak_mb']:7.1f} MB {row.get('error', '')}", flush=True)
        summary: dict[str, Any] = {s: summarise(rows) for s, rows in per_system.items()}
        if "tunemix" in systems and "lgbm_es" in systems and per_query["tunemix"] and per_query["lgbm_es"]:
            summary["tunemix_minus_lgbm_es_per_query"] = per_query_difference(per_query["tunemix"],
                                                                              per_query["lgbm_es"])
        for ours in seeded:
            for peer in ("lgbm_tuned", "lgbm_es1"):
                if per_query[ours] and per_query.get(peer):
                    summary[f"{ours}_minus_{peer}_per_query"] = per_query_difference(per_query[ours],
                                                                                    per_query[peer])
            if len(seeds) > 1:
                peers = {p: per_query[p] for p in ("lgbm_es", "lgbm_es1", "lgbm_tuned") if per_query.get(p)}
                summary[f"{ours}_seeds"] = seed_summary(seed_rows[ours], seed_pq[ours], peers)
                if base_system(ours) == "tunemix_budget" and "tunemix" in seeded:
                    summary[f"{ours}_seeds"]["minus_tunemix_per_query"] = paired_over_seeds(seed_pq[ours],
                                                                                          seed_pq["tunemix"])
        summary["fit_ratios"] = fit_ratios(summary)
        report["datasets"][name] = {"folds": per_system,
                                    "seed_folds": seed_rows if len(seeds) > 1 else None,
                                    "summary": summary}
        if name.startswith("family:"):
            family_pq[name] = per_query
            report["datasets"][name]["per_query"] = {s: [q.round(6).tolist() for q in v]
                                                     for s, v in per_query.items() if v}
    if family_pq and "tunemix" in systems and "lgbm_es" in systems:
        report["families"] = family_summary(report["datasets"], family_pq)
    return report


def _plus_minus(r: dict[str, Any]) -> str:
    """``0.7871 ± 0.0086`` (the SE left out when there is none)."""
    se = r.get("test_ndcg@10_se")
    return f"{r['test_ndcg@10']:.4f}" + (f" ± {se:.4f}" if se is not None else "")


def family_markdown(summary: dict[str, Any]) -> list[str]:
    """The families' table (one row per data set, then one per family with its sizes pooled) and
    the pooled differences, from ``family_summary``."""
    ours, peer = summary["ours"], summary["peer"]
    lines = [f"Generator families (bench.families; choosing: {', '.join(summary['choosing'])}; held out: "
             f"{', '.join(summary['held_out'])}): mean test NDCG@10 over the test queries, {ours} - {peer} per "
             "query ± SE, fit seconds", "",
             f"| family | role | size | train docs | {ours} | {peer} | {ours} - {peer} per query | "
             f"{ours} fit s | {peer} fit s |", "|---|---|---|---|---|---|---|---|---|"]
    for r in summary["datasets"].values():
        d = r["difference"]
        lines.append(f"| {r['family']} | {r['role']} | {r['size']} | {r['train_docs']:,} | {r[ours]:.4f} | "
                     f"{r[peer]:.4f} | {d['mean']:+.4f} ± {d['se']:.4f} ({d['queries']} q) | "
                     f"{r[ours + '_fit_s']:.1f} | {r[peer + '_fit_s']:.1f} |")
    lines += ["", f"| family (sizes pooled) | role | {ours} | {peer} | {ours} - {peer} per query |",
              "|---|---|---|---|---|"]
    for name, r in summary["families"].items():
        d = r["difference"]
        lines.append(f"| {name} | {r['role']} | {r[ours]:.4f} | {r[peer]:.4f} | "
                     f"{d['mean']:+.4f} ± {d['se']:.4f} ({d['queries']} q) |")
    lines.append("")
    for group, d in summary["pooled"].items():
        w = summary["family_weighted"][group]
        lines.append(f"- {group.replace('_', '-')} families, every test query pooled: {d['mean']:+.4f} ± "
                     f"{d['se']:.4f} ({d['queries']} q); the mean of the family means: {w['mean']:+.4f} ± "
                     f"{w['se']:.4f} ({w['families']} families)")
    c = summary["criteria"]
    lines.append("- every held-out family at least the peer: " + ("yes" if c["held_out_at_least_peer"] else
                 "no, behind on " + ", ".join(c["held_out_behind"]))
                 + ("; pooled over all above two SEs: " + ("yes" if c["pooled_all_above_two_se"] else "no")
                    if "pooled_all_above_two_se" in c else ""))
    return lines


def markdown(report: dict[str, Any]) -> str:
    systems = list(SYSTEMS) + [s for d in report["datasets"].values() for s in d.get("folds", {}) if s not in SYSTEMS]
    systems = list(dict.fromkeys(systems))
    lines = [f"Test {report['measure']} ({report['convention']}), mean over folds ± SE; fit seconds (sum over "
             "folds: the first fit of a fresh process; warm: the second fit in that process); peak MB of the "
             "process tree (largest fold). tunemix: " + report["tunemix_config"], ""]
    # the families' data sets have a table of their own below
    tabled = {n: d for n, d in report["datasets"].items() if not (n.startswith("family:") and "families" in report)}
    if tabled:
        lines += ["| data | " + " | ".join(systems) + " |", "|---|" + "---|" * len(systems)]
    for name, d in tabled.items():
        cells = []
        for s in systems:
            r = d["summary"].get(s)
            if not r or "test_ndcg@10" not in r:
                cells.append("")
                continue
            warm = f" (warm {r['warm_fit_s']:.1f} s)" if "warm_fit_s" in r else ""
            cells.append(f"{_plus_minus(r)}; {r['fit_s']:.0f} s{warm}; {r['peak_mb']:.0f} MB")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    for system in [s for s in systems if base_system(s) in SEEDED]:
        seeded = [(name, d["summary"][f"{system}_seeds"]) for name, d in report["datasets"].items()
                  if "test_ndcg@10" in d["summary"].get(f"{system}_seeds", {})]
        if not seeded:
            continue
        lines += ["", f"{system} over seeds " + ", ".join(str(s) for s in report["tunemix_seeds"])
                  + " (each fold's mean over the seeds, then the folds' mean ± SE; per-query difference to "
                  "each peer ± SE):", ""]
        for name, r in seeded:
            diffs = [(p, r[f"minus_{p}_per_query"]) for p in ("tunemix", "lgbm_es", "lgbm_es1", "lgbm_tuned")
                     if r.get(f"minus_{p}_per_query")]
            fit = f"; fit {r['fit_s_mean']:.1f} s a fold" if r.get("fit_s_mean") is not None else ""
            lines.append(f"- {name}: {_plus_minus(r)} (per seed "
                         + ", ".join(f"{v:.4f}" for v in r["per_seed"]) + ")" + fit
                         + "".join(f"; - {p} {d['mean']:+.4f} ± {d['se']:.4f} ({d['queries']} q)" for p, d in diffs))
    if "families" in report:
        lines += ["", *family_markdown(report["families"])]
    ratios = [(name, d["summary"].get("fit_ratios")) for name, d in report["datasets"].items()]
    if any(r for _, r in ratios):
        lines += ["", "Fit seconds over the folds, tunemix against its peer in the same run:", ""]
        lines += [f"- {name}: " + ", ".join(f"{k} {v:.2f}" for k, v in r.items()) for name, r in ratios if r]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--datasets", default=",".join(DATASETS))
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--config", default=None, help="a tunemix TOML to measure instead of the default")
    ap.add_argument("--seeds", default="0,1,2,3,4", help="tunemix's random_state values (the first: row 'tunemix')")
    ap.add_argument("--tuned-budget", type=float, default=30.0,
                    help="tunemix_budget's time budget, and lgbm_tuned's search seconds when tunemix is not run "
                         "(else tunemix's fit seconds)")
    ap.add_argument("--tuned-at-once", type=int, default=1,
                    help="lgbm_tuned's trials at once, each on one thread (2: the peer of tunemix's two threads)")
    ap.add_argument("--warm-fits", action="store_true",
                    help="fit tunemix and the early-stopped peers twice in their process; the second fit's "
                         "seconds (warm_fit_s, the fit a user waits for in a warm process) beside the first's")
    ap.add_argument("--no-warm-up", action="store_true",
                    help="skip the warm-up fit (numba's cache already filled, e.g. by the previous run)")
    where = ap.add_mutually_exclusive_group()
    where.add_argument("--name", help="results as bench/results/<name>.json and .md, as the other benchmarks take "
                                      "it (default: defaults)")
    where.add_argument("--out", help="results at this path instead (and the same path with .md)")
    args = ap.parse_args(argv)
    try:
        datasets = expand_datasets(args.datasets.split(","))
    except ValueError as exc:
        raise SystemExit(f"bench.defaults: {exc}") from None
    check_data(datasets)
    t0 = time.perf_counter()
    report = run(datasets, args.systems.split(","), args.config,
                 [int(s) for s in args.seeds.split(",")], args.tuned_budget, not args.no_warm_up,
                 args.tuned_at_once, args.warm_fits)
    report["seconds"] = round(time.perf_counter() - t0, 1)
    out = Path(args.out) if args.out else RESULTS / f"{args.name or 'defaults'}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1))
    out.with_suffix(".md").write_text(markdown(report))
    print(markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
