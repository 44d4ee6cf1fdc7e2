"""The default members, chosen from the data: what ``TuneMixRanker()`` and a configuration that
names only its data train.

A configuration without any ``[[members.<type>]]`` table gets the members below, sized to the
training set (documents, features, label levels) and to ``[run] time_budget_s``. The choice is
written into the resolved configuration (the artifact's manifest and the report show exactly
what was trained) with the reasons in the record (``auto_members``).

What is chosen, and why (measured with ``python -m bench.defaults``; docs/method.md):

- **LambdaMART** (LightGBM ``lambdarank``), trained on the whole training set and stopped early
  on the validation queries' NDCG@10: the strongest single ranker on wide web data, and a peer
  a careful user would otherwise run alone. Two runs: 31 leaves on the raw features, and 15
  leaves on the query-standardised view (``raw+std``), each tree on 80% of the features and each
  iteration on 80% of the documents: their errors differ, so their mix is better than either.
  Up to 200k documents the 31-leaf run is exactly the recipe of the early-stopped peer
  (``PEER_RECIPE``: learning rate 0.05, leaves of at least 20 documents, every document and
  feature each iteration, patience 100), on the shared codes instead of LightGBM's own bins:
  the mix's candidates include it alone, so the served model is at least as good as the
  peer's recipe on the validation queries, and can fall behind it on new queries only by what
  the choice fits to their noise (``record["peer_recipe"]``: the served model minus the run on
  validation, with its standard error). Above 200k documents the peer's learning rate would
  make that run the fit's critical path (the default leads the peer by 0.09 to 0.12 there).
  On small data (below 20k documents, ``SMALL_DOCUMENTS``) every LightGBM run learns at 0.05
  (as the early-stopped peer) and a third LambdaMART run, 7 leaves on ``raw+std``, joins: small
  trees are the regularised model such data want, and a third view of the errors; both cost
  seconds there. Test NDCG@10, mean of five seeds over the five folds: MQ2008 0.7839 to 0.7879
  (every seed at least 0.7857; early-stopped LightGBM 0.7809), the MSLR sample 0.4487 to 0.4550;
  the rate alone gives 0.7865 and 0.4498, the third run alone 0.7860 and 0.4501. Not taken: a
  linear SVM (0.7869 on MQ2008 but 0.4388 on the MSLR sample, three seeds), a second seed of
  each run, no bagging, patience 100, no AdaBoost.MH run (0.4413 on the MSLR sample).
- **McRank** (LightGBM multi-class), on the whole training set, stopped early on the validation
  log loss; served through its expected relevance (``er:*``, nothing fitted).
- **AdaBoost.MH** Hamming trees (8 leaves) on the fit part, calibrated on the calibration part:
  the method's own member and the ensemble's most different one. Its iteration count is sized to
  the data (fewer iterations on large sets: its cost grows with documents x iterations) and
  to the time budget; it is left out when the budget is too small for it, and above 100k
  documents, where its members take no weight in the mix (``ADABOOST_MAX_DOCUMENTS``).
- Above 200k documents (``LARGE_DOCUMENTS``) the LightGBM runs bag half the documents each
  iteration and McRank learns at 0.2: the boosting is then the whole cost of training. Above
  500k documents (``FAST_RATE_DOCUMENTS``) the LambdaMART runs learn faster too, at 0.1 x
  documents / 500k, up to 0.2 from 1M documents (``lambdamart_rate``): at 1M documents at 0.1
  the query-standardised run takes 1,075 iterations, 1,114 s, the critical path of a 19.5-minute
  fit; at 0.2, 564 iterations and a 10.2-minute fit, 0.013 NDCG@10 lower and still 0.10 above
  the early-stopped peer. At 500k documents 0.2 would save a third of the time (303 to 206 s, the
  peer 193-239 s) for 0.018 NDCG@10: there 0.1 stays (python -m bench.scale).
- Below 15 validation queries (``SMALL_VALIDATION_QUERIES``, ``small_validation``) the
  LambdaMART runs wait 100 iterations before they stop and no LightGBM run bags: on so few queries the
  validation curve is noise against the differences between iterations, and the runs would stop
  at its first peak (the MSLR sample's tiny split of 34 / 9 / 43 queries: test NDCG@10 0.3924 over
  five seeds against 0.3881 for early-stopped LightGBM). The record says whether it is used.
- Every run reads the shared codes of its view (``tunemix.train.data.binned``): one binning stage.
- The calibrators of the AdaBoost.MH runs: a small pool (class-probability calibration by log
  loss and the linear regression on gains), not the whole grid: the pool's other members rarely
  take weight in the mix (the MQ2008 record) and each costs a pass over the calibration part.
- The relevance head takes the McRank member as one of its models (the same kind of model) and
  trains a model of its own only on small data, one (``auto_relevance``): its whole grid of 12
  would be most of the default's time there, for a head 0.1% better in log loss.

Member runs on the whole training set use only calibrators that fit nothing (``identity``,
``er:*``): the calibration part is inside their training data.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from typing import Any

import numpy as np

from tunemix.core.data.normalization import view_width
from tunemix.train.budget import VIEW_S_PER_VALUE, VIEW_SHARE, affordable_views

log = logging.getLogger(__name__)

#: the small calibrator pool of the default AdaBoost.MH runs
AUTO_CALIBRATORS = ["cpc:ls", "rbc:linear:gain"]
#: seconds of AdaBoost.MH (8-leaf trees) per document, searched feature and iteration on this
#: project's reference machine (2-core x86-64, one thread a run: 1.05 s for 300 iterations on
#: MQ2008 Fold1's 9,630 documents and 46 features, python -m bench.bench_bandit), used to size its
#: runs to a time budget
ADABOOST_S_PER_DOC_FEATURE_ITER = 8.0e-9
#: documents above which the default trains no AdaBoost.MH run: its members take no weight in the
#: mix at 120k and 500k documents (python -m bench.scale: weight share 0.0 at both, against 0.33 at
#: 30k), and its cost grows with documents x iterations
ADABOOST_MAX_DOCUMENTS = 100_000
#: documents below which the default is "small data": learning rate 0.05, a third LambdaMART run
#: (7 leaves on raw+std), leaves of at least 20 documents, patience 50 (McRank 20), one model of
#: the relevance head's own
SMALL_DOCUMENTS = 20_000
#: documents above which the LightGBM runs bag half the documents an iteration (instead of 80%)
#: and McRank learns at 0.2: there the data are plenty (bench.scale: 0.09 to 0.12 NDCG@10 above
#: the early-stopped peer at 500k and 1M documents) and the boosting is the whole cost of training
LARGE_DOCUMENTS = 200_000
#: documents above which the LambdaMART runs' learning rate grows with the data (module docstring)
FAST_RATE_DOCUMENTS = 500_000
#: validation queries below which the validation set is "small" (``small_validation``): its
#: mean NDCG@10 has a standard error of about 0.25 / sqrt(n) (0.083 for 9 queries), larger than
#: most differences between stopping points of a run. Measured at two sizes: 9 queries (the MSLR
#: sample's tiny split) gain 0.029 over five seeds; the MSLR sample's 17-query folds lose 0.005
#: (0.4550 to 0.4502, five seeds, fold SE 0.036): no gain there, so the rule starts below 15
#: the per-query standard deviation of NDCG@10 that estimate takes (0.248 on the 9 validation
#: queries of the MSLR sample's tiny split, 0.219 on its 43 test queries, early-stopped LightGBM's scores)
PER_QUERY_SD = 0.25
SMALL_VALIDATION_QUERIES = 15
#: the patience of the LambdaMART runs on a small validation set (the early-stopped peer's)
SMALL_VALIDATION_PATIENCE = 100
#: McRank's patience on small data: it stops on the validation documents' log loss, a
#: smooth curve, unlike NDCG@10's. Recorded in the default's fits (MQ2008's five folds at seed 0 and
#: the MSLR sample's five folds at seeds 0-2, 20 runs): the longest run of iterations without a new
#: best before the best one is 8, and patience 10 to 40 picks the same best iteration as 50 in all
#: 20, i.e. the same model, for 30 fewer iterations (3 trees each on three grades) a run; the
#: relevance head's 4-leaf model and the LambdaMART runs' NDCG@10 curves do not (docs/method.md)
SMALL_MCRANK_PATIENCE = 20


#: the recipe a careful LightGBM user runs, and the early-stopped peer of ``bench.defaults``: 31
#: leaves, learning rate 0.05, leaves of at least 20 documents (LightGBM's default), every document
#: and feature each iteration, stopped on the validation queries' NDCG@10 with patience 100 (at
#: most 2,000 iterations), on the raw features. Up to ``LARGE_DOCUMENTS`` the first LambdaMART run
#: is this recipe (``peer_recipe``)
PEER_RECIPE: dict[str, Any] = {"n_leaves": 31, "learning_rate": 0.05, "min_data_in_leaf": 20, "feature_fraction": 1.0,
                               "bagging_fraction": 1.0, "early_stopping": 100, "n_iterations": 2000}


def is_peer_recipe(params: dict[str, Any]) -> bool:
    """Whether a LambdaMART run's parameters are ``PEER_RECIPE``'s."""
    return all(params.get(k) == v for k, v in PEER_RECIPE.items())


def lambdamart_rate(n_docs: int) -> float:
    """The default LambdaMART runs' learning rate: 0.05 on small data, 0.1 up to
    ``FAST_RATE_DOCUMENTS``, then 0.1 x documents / 500k up to 0.2 (from 1M documents): the
    iterations a run needs shrink as its cost per iteration grows."""
    if n_docs < SMALL_DOCUMENTS:
        return 0.05
    return round(min(0.2, 0.1 * max(1.0, n_docs / FAST_RATE_DOCUMENTS)), 3)


@dataclass(frozen=True)
class DataShape:
    """What the choice reads of the training data."""

    n_docs: int
    n_features: int
    n_labels: int
    n_queries: int
    vali_queries: int


def small_validation(shape: DataShape) -> dict[str, Any]:
    """The rule for small validation sets, and the record of it (``record["small_validation"]``).

    Below ``SMALL_VALIDATION_QUERIES`` validation queries each LightGBM run's validation curve is
    noise against the differences between its iterations: the standard error of a mean
    per-query NDCG@10 over n queries is sd / sqrt(n) with sd about 0.25 (``PER_QUERY_SD``): 0.083
    for 9 queries,
    while a run's curve moves by a few hundredths between iterations 20 and 300. Early stopping
    then stops at the first noise peak (on the MSLR sample's tiny split of 34 training and 9
    validation queries the 31-, 15- and 7-leaf LambdaMART runs stop after 23, 96 and 109
    iterations, where their test NDCG@10 is still rising to iteration 300). The rule: the
    LambdaMART runs stop with patience ``SMALL_VALIDATION_PATIENCE`` (100; McRank, which stops on
    the log loss of hundreds of documents, keeps its own) and no LightGBM run bags (every document and
    feature each iteration: a run's curve is then a function of the iterations alone, not of the
    bag each one drew, so a longer patience walks past the noise of the 9 queries instead of
    that of the bags). Measured (docs/method.md, "Tiny validation sets"): test NDCG@10 0.3634 to
    0.3924 over seeds 0-4 on that split, the early-stopped peer 0.3881; patience 100 alone
    0.3516 and no bagging alone 0.3354 at seed 0 (base 0.3525). On the MSLR sample's five folds of
    17 validation queries it gives 0.4502 against 0.4550 (seeds 0-4): no gain, hence the
    threshold of 15. Validation sets of at least 15 queries (the MSLR sample's 17, MQ2008's 157
    a fold) keep the default unchanged."""
    n = shape.vali_queries
    applied = n < SMALL_VALIDATION_QUERIES
    out: dict[str, Any] = {"applied": applied, "vali_queries": n, "threshold": SMALL_VALIDATION_QUERIES,
                           "ndcg_se_about": round(PER_QUERY_SD / max(n, 1) ** 0.5, 3)}
    if applied:
        out["rule"] = {"lambdamart_early_stopping": SMALL_VALIDATION_PATIENCE, "bagging_fraction": 1.0,
                       "feature_fraction": 1.0}
        out["summary"] = (f"validation set of {n} queries is small (below {SMALL_VALIDATION_QUERIES}; the standard "
                          f"error of its mean NDCG@10 is about {out['ndcg_se_about']:g}): the LambdaMART runs stop "
                          f"early with patience {SMALL_VALIDATION_PATIENCE} and no LightGBM run bags (all documents "
                          "and features each iteration), so that a run's stopping point does not follow the noise of "
                          "a few queries")
    else:
        out["summary"] = (f"validation set of {n} queries is large enough (at least {SMALL_VALIDATION_QUERIES}): "
                          "the default's early stopping and bagging as they are")
    return out


def adaboost_search(shape: DataShape) -> str:
    """The AdaBoost.MH base search of the default: the UCB1 bandit over the features at every size
    (each iteration searches ceil(sqrt(d)) features instead of all: 3.4x faster per iteration at
    equal NDCG@10 on MQ2008's 46 features, python -m bench.bench_bandit, more on wider data; on
    30k documents of 136 features 300 iterations take 9 s instead of minutes). Beside the peer's
    recipe (``PEER_RECIPE``) the full search's runs mix no better: test NDCG@10, mean of seeds
    0-2 over the five folds, full / bandit, MQ2008 0.7871 / 0.7873, the MSLR sample 0.4524 /
    0.4535, for 23% (MQ2008: 2.61 against 3.37 CPU seconds a fit) and 38% (the MSLR sample: 5.34
    against 8.61) less CPU (seeds 1 and 2, in one warm process)."""
    return "ucb1"


def adaboost_iterations(shape: DataShape, time_budget_s: float | None) -> int:
    """AdaBoost.MH iterations of the default: 300 up to 50k documents, then fewer as the data grow
    (a run's cost is documents x iterations: 150 at 100k), none above ``ADABOOST_MAX_DOCUMENTS``,
    capped so that the run takes at most a quarter of the time budget."""
    n = max(shape.n_docs, 1)
    iterations = 300 if n <= 50_000 else int(max(50, 300 * 50_000 / n))
    if n > ADABOOST_MAX_DOCUMENTS:
        iterations = 0
    if time_budget_s is not None:
        searched = np.sqrt(shape.n_features) if adaboost_search(shape) == "ucb1" else shape.n_features
        per_iteration = ADABOOST_S_PER_DOC_FEATURE_ITER * n * max(searched, 1.0)
        iterations = min(iterations, int(0.25 * time_budget_s / max(per_iteration, 1e-9)))
    return iterations if iterations >= 20 else 0


def auto_members(shape: DataShape, time_budget_s: float | None, fixed_s: float = 0.0
                 ) -> tuple[dict[str, Any], list[str]]:
    """The ``[members]`` table of the default, and the reasons (one line each) for the record
    (``fixed_s``: as :func:`apply_auto`)."""
    reasons = [f"training data: {shape.n_docs} documents, {shape.n_features} features, {shape.n_labels} levels, "
               f"{shape.n_queries} queries ({shape.vali_queries} validation queries)"]
    # patience: on small data the validation curve is noisy and a run is cheap; on large data the
    # curve is smooth, so fewer iterations past the best one tell it, and each costs more
    small = shape.n_docs < SMALL_DOCUMENTS
    patience = 50 if small else 25
    large = shape.n_docs > LARGE_DOCUMENTS
    rate = lambdamart_rate(shape.n_docs)
    mcrank_rate = 0.2 if large else rate  # up to 200k documents LambdaMART's rate (0.05 or 0.1)
    bagging = 0.5 if large else 0.8
    rule = small_validation(shape)
    # LambdaMART stops on the validation queries' NDCG@10: on few queries it waits longer. McRank
    # stops on the log loss of the validation documents (hundreds even for 9 queries): its patience
    # stays (with bagging off its curve is the same whatever the patience, so a longer one would
    # only train iterations that are dropped)
    ranking_patience = max(patience, SMALL_VALIDATION_PATIENCE) if rule["applied"] else patience
    mcrank_patience = SMALL_MCRANK_PATIENCE if small else patience
    if rule["applied"]:
        bagging = 1.0
    features = 1.0 if rule["applied"] else 0.8
    boosting = {"learning_rate": rate, "n_iterations": 2000, "early_stopping": ranking_patience, "fit_on": "train",
                "checkpoints": []}
    min_leaf = 20 if small else 50
    members: dict[str, Any] = {
        "views": ["raw", "raw+std"],
        "label_groupings": ["original"],
        "calibrators": list(AUTO_CALIBRATORS),
        "lambdamart": [
            {**boosting, "n_leaves": 31, "min_data_in_leaf": min_leaf, "feature_fraction": features,
             "bagging_fraction": bagging, "views": ["raw"]},
            {**boosting, "n_leaves": 15, "min_data_in_leaf": min_leaf, "feature_fraction": features,
             "bagging_fraction": bagging, "views": ["raw+std"]},
        ],
        "mcrank": [{**boosting, "early_stopping": mcrank_patience, "learning_rate": mcrank_rate,
                    "variant": "multiclass", "n_leaves": 31, "min_data_in_leaf": min_leaf, "feature_fraction": features,
                    "bagging_fraction": bagging, "views": ["raw"]}],
        "adaboost": [],
    }
    if small:
        members["lambdamart"].append({**members["lambdamart"][1], "n_leaves": 7})
    peer = not large
    if peer:
        members["lambdamart"][0] = {**boosting, **PEER_RECIPE, "views": ["raw"]}
    third = "; raw+std, 7 leaves on small data" if small else ""
    if rule["applied"]:
        reasons.append(rule["summary"])
    reasons.append(f"LambdaMART (raw, 31 leaves; raw+std, 15 leaves{third}) and McRank multiclass (raw, 31 leaves): "
                   f"whole training set, learning rate {rate:g} (McRank {mcrank_rate:g}), stopped early on validation "
                   f"(patience {ranking_patience}, McRank {mcrank_patience}), min_data_in_leaf {min_leaf}, "
                   f"bagging {bagging:g}")
    if peer:
        reasons.append("the raw 31-leaf LambdaMART run is the early-stopped LightGBM recipe (learning rate 0.05, "
                       "min_data_in_leaf 20, no bagging, patience 100): the mix's candidates include that run "
                       "alone, so the served model is at least as good on validation")
    views = affordable_views(time_budget_s, shape.n_docs, [(v, view_width(shape.n_features, v))
                                                            for v in members["views"]], fixed_s)
    if views != members["views"]:  # the budget cannot pay for every view: runs of the others go
        dropped = [v for v in members["views"] if v not in views]
        members["views"] = views
        members["lambdamart"] = [b for b in members["lambdamart"] if set(b["views"]) <= set(views)]
        members["mcrank"] = [b for b in members["mcrank"] if set(b["views"]) <= set(views)]
        reasons.append(f"time budget of {time_budget_s:g} s: no run on {', '.join(dropped)} (computing, binning and "
                       f"LightGBM's Dataset of a view cost about {VIEW_S_PER_VALUE:g} s a document and column before "
                       f"its first iteration; the views may take {VIEW_SHARE:g} of the budget)")
    iterations = adaboost_iterations(shape, time_budget_s) if "raw+std" in views else 0
    if iterations:
        checkpoints = sorted({c for c in (iterations // 10, iterations // 3, iterations) if c >= 1})
        search = adaboost_search(shape)
        members["adaboost"] = [{"base": "tree", "n_leaves": 8, "n_iterations": iterations, "search": search,
                                "checkpoints": checkpoints, "views": ["raw+std"]}]
        reasons.append(f"AdaBoost.MH trees of 8 leaves on raw+std, {iterations} iterations (snapshots {checkpoints}), "
                       f"{search} search, calibrated by {', '.join(AUTO_CALIBRATORS)}")
    else:
        reasons.append("no AdaBoost.MH run: " + (f"above {ADABOOST_MAX_DOCUMENTS} documents its members took no "
                                                  "weight in the mix" if shape.n_docs > ADABOOST_MAX_DOCUMENTS
                                                  else "the time budget is too small for it"))
    return members, reasons


#: the relevance head's own model on small data: 4 leaves of at least 50 documents, learning rate
#: 0.1, patience 25 (``auto_relevance``)
SMALL_HEAD_GRID: dict[str, Any] = {"n_leaves": [4], "min_data_in_leaf": [50], "learning_rate": 0.1, "patience": 25}


def auto_relevance(shape: DataShape) -> dict[str, Any]:
    """The relevance head's own grid (the default McRank member is always one of its models,
    ``[relevance] reuse_members``): up to 20k documents one model of its own
    (``SMALL_HEAD_GRID``: 4 leaves, at learning rate 0.1 with patience 25: the head's test log
    loss, mean of the five folds at seed 0, 0.5339 at 0.05 with patience 50, 0.5344 at 0.1, 0.5351
    with the McRank member alone on MQ2008, 0.9749 / 0.9757 / 0.9802 on the MSLR sample, for 0.22
    and 0.62 CPU seconds less a fit than at 0.05), above them the McRank member alone. The whole default grid
    (12 models) would be the default's largest fixed cost on small data (27 of 36 s on MQ2008
    Fold1, busy machine) for little: test log loss of the head, mean of five folds, whole grid / 4
    and 15 leaves / the McRank member alone: MQ2008 0.5563 / 0.5570 / 0.5598, the MSLR sample
    (query folds 1-3) 0.9824 / 0.9830 / 0.9879 (docs/method.md). No 15-leaf model either: the
    heads of ``TuneMixRanker()`` on MQ2008's five folds (test log loss, mean), McRank and 4 and 15
    leaves 0.5351, McRank and 4 leaves 0.5349 (-0.0002 +- 0.0005 per fold), McRank alone 0.5365
    (+0.0014 +- 0.0007), and the 15-leaf model is the dearer of the two. (On 30k synthetic
    MSLR-shaped documents the whole grid takes 1.8 times as long as every member's boosting
    together, and one model of its own a quarter of the fit.)"""
    if shape.n_docs < SMALL_DOCUMENTS:
        return dict(SMALL_HEAD_GRID)
    return {"n_leaves": [], "min_data_in_leaf": []}


def apply_auto(cfg: Any, shape: DataShape, fixed_s: float = 0.0) -> tuple[Any, list[str]]:
    """``cfg`` with the default members (and, on large data, a smaller relevance grid), and the
    reasons. Settings the user gave in ``[members]`` (views, label groupings, calibrators other
    than the defaults) are kept. ``fixed_s``: seconds of the views' share of a time budget spent
    before any view (``tunemix.train.budget.fixed_seconds``)."""
    from tunemix.core.calibration.registry import DEFAULT_CALIBRATORS
    from tunemix.train.config import MembersConfig, RelevanceConfig

    table, reasons = auto_members(shape, cfg.run.time_budget_s, fixed_s)
    given = cfg.members
    defaults = MembersConfig()
    members = dataclasses.replace(
        given,
        views=table["views"] if list(given.views) == list(defaults.views) else list(given.views),
        label_groupings=table["label_groupings"] if list(given.label_groupings) == list(defaults.label_groupings)
        else list(given.label_groupings),
        calibrators=table["calibrators"] if list(given.calibrators) == list(DEFAULT_CALIBRATORS)
        else list(given.calibrators),
        lambdamart=table["lambdamart"], mcrank=table["mcrank"], adaboost=table["adaboost"],
    )
    relevance = cfg.relevance
    head = auto_relevance(shape)
    if head and list(relevance.n_leaves) == [4, 7, 15, 31] and list(relevance.min_data_in_leaf) == [20, 50, 100]:
        given = RelevanceConfig()  # a rate or patience the user set stays
        head = {k: v for k, v in head.items() if k not in ("learning_rate", "patience")
                or getattr(relevance, k) == getattr(given, k)}
        relevance = dataclasses.replace(relevance, **head)
        grid = (f"n_leaves {head['n_leaves']} x min_data_in_leaf {head['min_data_in_leaf']}" if head["n_leaves"]
                else "no models of its own")
        if "learning_rate" in head:
            grid += f" at learning rate {head['learning_rate']:g}, patience {head['patience']}"
        reasons.append(f"relevance head: the McRank member and {grid} on {shape.n_docs} documents")
    for line in reasons:
        log.info("default members: %s", line)
    return dataclasses.replace(cfg, members=members, relevance=relevance), reasons
