"""What ``tunemix warm`` fits: a small configuration that calls every kernel of training and
scoring (``WARM_TABLES``), cut in three parts (``PART_MEMBERS``): two compiled side by side before
a service's /ready, the third after.

The warm-up needs each kernel called once for each type signature numba will meet, not a model:
a few iterations on generated data, each class count once, one snapshot a run, the calibrators'
optimisers cut short (``warm_calibrators``). ``tunemix.compile.warm`` runs them.
"""

from __future__ import annotations

from typing import Any

#: Every member type of configs/mq2008.toml at a few iterations (the kernels, not the model,
#: matter) on 5-grade data with every label grouping: the boosting and scoring kernels take the
#: class count K as a tuple's length, so each K in 1..5 is a specialisation of its own (grow_tree,
#: fit_product, the forest pass: LambdaMART's K = 1, binary 2, three-level 3, four 4, five 5), and
#: data of up to five grades meets no kernel the warm-up did not compile. Each K once, not each
#: grouping (``K_GROUPINGS``: three-b is a second K = 3) nor each view times each grouping (the
#: views change no kernel's types): every run's snapshot is calibrated with the whole default pool,
#: about 1.7 CPU-s of L-BFGS a run that compiles nothing new: with the cache warm the learners'
#: part takes 71.0 s (46.9 CPU-s) with 22 runs, 17.8 s (20.8 CPU-s) with these 12, 6.1 s with the
#: calibrators cut short too (``few_iterations``; shared machine, niced), and an empty cache filled
#: by either holds the same 103 kernel signatures. One snapshot per run and a one-model relevance
#: head: the calibrators' and the head's kernels, not their number.
K_GROUPINGS = ["original", "binary", "three-a", "four"]


def few_iterations(spec: str) -> str:
    """``spec`` with its optimiser cut short (one start, ``WARM_ITERATIONS`` L-BFGS iterations
    where the family has them: cpc, rbc's logistic and nn): the same kernels, a fraction of the
    time (the warm-up compiles them, it does not need the fit)."""
    family, _, rest = spec.partition(":")
    if family == "cpc":
        opts = f"n_starts=1,max_iter={WARM_ITERATIONS}"
    elif family == "rbc" and rest.split(":")[0] in ("nn", "logistic"):
        opts = f"max_iter={WARM_ITERATIONS}"
    else:
        return spec
    head, _, tail = rest.partition(":")
    head = f"{head[:-1]},{opts})" if head.endswith(")") else f"{head}({opts})"
    return ":".join([family, head, *([tail] if tail else [])])


#: L-BFGS iterations of the warm-up's calibrators (``_few_iterations``): every fit of the warm-up
#: calibrates with the default pool, every family and target, each optimiser cut short
WARM_ITERATIONS = 5
WARM_TABLES: dict[str, Any] = {
    "name": "warm-up",
    "seed": 0,
    "data": {"synthetic": {"queries": [24, 10, 8], "docs_per_query": [6, 20], "features": 6, "levels": 5,
                           "noise": 0.3, "seed": 0}},
    "members": {
        "views": ["raw"], "label_groupings": ["all"], "best_feature": True,
        "adaboost": [{"base": "tree", "n_leaves": [8], "n_iterations": 4, "checkpoints": [4],
                      "views": ["raw+std"], "label_groupings": ["original"]},  # the default model's (auto.py)
                     {"base": "tree", "n_leaves": [8], "n_iterations": 4, "checkpoints": [4],
                      "label_groupings": K_GROUPINGS},
                     {"base": "tree", "n_leaves": [8], "n_iterations": 4, "checkpoints": [4],
                      "views": ["raw+white"], "label_groupings": ["original"]},
                     {"base": "product", "n_terms": [3], "n_iterations": 4, "checkpoints": [4],
                      "label_groupings": K_GROUPINGS}],
        "mcrank": [{"variant": ["multiclass", "ordinal"], "n_leaves": [8], "learning_rate": 0.1, "n_iterations": 4,
                    "checkpoints": [4], "label_groupings": ["original"]}],
        "lambdamart": [{"n_leaves": [8], "learning_rate": 0.1, "n_iterations": 4, "checkpoints": [4]}],
        "svm": [{"C": [1.0], "label_groupings": ["original"]}],
    },
    "mixer": {"name": "exp_forecaster", "measure": "ndcg@10", "convention": "yahoo", "snapshots": "tune",
              "tune_on": "validation", "rescale": "zscore_query", "tie_tolerance": "one_se"},
    "relevance": {"n_leaves": [4], "min_data_in_leaf": [20], "max_iterations": 20, "patience": 5},
    "run": {"backend": "sequential", "n_jobs": 1, "report_plots": False},
}


#: The warm-up in three parts (numba compiles on one thread, so two processes compile side by
#: side): ``serving`` (``tunemix warm``'s own process), the LightGBM runs (McRank multi-class,
#: LambdaMART), whose fit compiles nothing of ours and so reaches the shared kernels first (the
#: forest pass, the calibration step, the evaluation and mixing kernels, the relevance head) and
#: the explanations, then ``tunemix demo``'s fit when there is one, then every path the service
#: warms before /ready (``tunemix.compile.serving.warm_all``); ``learners`` (a child process, beside it),
#: what the default model's fit calls beyond that: the LETOR reader, the default's AdaBoost.MH
#: member (trees on ``raw+std``, the data's own grades: ``tunemix.train.members.auto``), then the
#: service's evaluation and fusion paths; ``rest`` (the same child, after ``learners``), every
#: other member type of configs/mq2008.toml: AdaBoost.MH trees and products at every class count,
#: trees on ``raw+white``, McRank ordinal, the linear SVM, the best feature, the views' big-query
#: pieces. ``serving`` and ``learners`` are what ``make serve`` needs before /ready; ``tunemix
#: demo`` leaves ``rest`` compiling in the background, niced (``tunemix.compile.warm_child``).
#: A kernel one part saved is loaded by another when it gets there; when a part failed, the whole
#: ``WARM_TABLES`` fit runs in the parent and compiles what it missed.
_ADABOOST = WARM_TABLES["members"]["adaboost"]
PART_MEMBERS: dict[str, dict[str, Any]] = {
    "learners": {"views": ["raw"], "label_groupings": ["all"], "best_feature": False, "adaboost": _ADABOOST[:1]},
    "serving": {"views": ["raw"], "label_groupings": ["all"], "best_feature": False,
                "mcrank": [{**WARM_TABLES["members"]["mcrank"][0], "variant": ["multiclass"]}],
                "lambdamart": WARM_TABLES["members"]["lambdamart"]},
    "rest": {**{k: v for k, v in WARM_TABLES["members"].items() if k not in ("mcrank", "lambdamart", "adaboost")},
             "adaboost": _ADABOOST[1:],
             "mcrank": [{**WARM_TABLES["members"]["mcrank"][0], "variant": ["ordinal"]}]},
}
#: the parts ``make serve`` needs before /ready; ``rest`` may come after
BEFORE_READY = ("serving", "learners")


def warm_calibrators() -> list[str]:
    """The default calibrator pool, every family and target, each optimiser cut short
    (``few_iterations``)."""
    from tunemix.core.calibration.registry import DEFAULT_CALIBRATORS

    return [few_iterations(spec) for spec in DEFAULT_CALIBRATORS]
