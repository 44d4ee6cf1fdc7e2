"""``TuneMixRanker``: the scikit-learn estimator of the tunemix method, as LightGBM's ``LGBMRanker``."""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
import tomllib
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from tunemix._inputs import features_matrix, grades, query_offsets
from tunemix.core.data.dataset import RankingData
from tunemix.core.explain.explanation import Explanation, PairExplanation
from tunemix.core.scoring.runtime import set_openmp_wait_policy
from tunemix.model import Model, PathLike, load

log = logging.getLogger(__name__)

#: the share of the training queries held out to tune the calibration and the mix when ``fit``
#: gets no ``eval_set``
HOLDOUT_FRACTION = 0.2


class TuneMixRanker:
    """Calibrated multi-class ensembles mixed by an exponentially weighted forecaster.

    ``config`` is a training TOML file (its ``[data]`` table is ignored: the data come to
    ``fit``) or a dict of its tables; None takes the packaged default (the model ``make serve``
    trains): no member tables, so the members are chosen from the data
    (``tunemix.train.members.auto``: LambdaMART and McRank stopped early on the validation queries,
    AdaBoost.MH sized to the data); a config without member tables does the same. Parameters
    are stored unchanged; ``fit`` learns ``model_`` (a :class:`Model` in memory), ``record_``
    (the training record: members, mixer, validation figures) and ``n_features_in_``.

    >>> ranker = TuneMixRanker(n_jobs=2).fit(X, y, group=[20, 35, 12])      # doctest: +SKIP
    >>> ranker.predict(X_new, group=[40])                                     # doctest: +SKIP
    """

    def __init__(self, config: PathLike | dict[str, Any] | None = None, *, n_jobs: int | None = None,
                 random_state: int = 0, time_budget_s: float | None = None, progress: bool = True) -> None:
        self.config = config
        self.n_jobs = n_jobs
        self.random_state = random_state
        self.time_budget_s = time_budget_s
        self.progress = progress

    # ------------------------------------------------------------------ scikit-learn's contract
    def get_params(self, deep: bool = True) -> dict[str, Any]:
        return {"config": self.config, "n_jobs": self.n_jobs, "random_state": self.random_state,
                "time_budget_s": self.time_budget_s, "progress": self.progress}

    def set_params(self, **params: Any) -> TuneMixRanker:
        valid = self.get_params()
        for key, value in params.items():
            if key not in valid:
                raise ValueError(f"invalid parameter {key!r} for TuneMixRanker; valid: {', '.join(valid)}")
            setattr(self, key, value)
        return self

    def __repr__(self) -> str:
        changed = {k: v for k, v in self.get_params().items() if v != TuneMixRanker().get_params()[k]}
        return f"TuneMixRanker({', '.join(f'{k}={v!r}' for k, v in changed.items())})"

    # ------------------------------------------------------------------ training
    def _config(self) -> Any:
        from tunemix.train.config import load_config

        if self.config is None:  # the packaged default (tunemix/train/default.toml)
            tables = tomllib.loads(resources.files("tunemix.train").joinpath("default.toml").read_text())
        elif isinstance(self.config, dict):
            tables = dict(self.config)
        else:
            tables = tomllib.loads(Path(self.config).read_text())
        tables.pop("data", None)  # the data come to fit
        overrides: dict[str, Any] = {"seed": self.random_state}
        if self.n_jobs is not None:
            overrides["run.n_jobs"] = self.n_jobs
        if self.time_budget_s is not None:
            overrides["run.time_budget_s"] = self.time_budget_s
        return load_config(None, overrides, tables=tables, require_data=False)

    def fit(self, X: Any, y: Any, group: Any, eval_set: list[tuple[Any, Any]] | None = None,
            eval_group: list[Any] | None = None, feature_names: Any = None, *, eval_X: Any = None,
            eval_y: Any = None) -> TuneMixRanker:
        """Train on ``X`` (n, d; dense or scipy CSR; NaN is a missing value, which each member
        type handles its own way: docs/missing-values.md), integer grades ``y`` and query sizes
        ``group``. The first ``eval_set`` pair (with its ``eval_group``) tunes the calibration and
        the mix; without one, ``HOLDOUT_FRACTION`` of the training queries is held out for it.
        ``eval_X`` and ``eval_y`` (a matrix and its grades, or tuples of them, with ``eval_group``)
        are LightGBM's other spelling of ``eval_set``; give one spelling, not both.
        ``feature_names`` (d distinct strings; default: the columns of a pandas DataFrame, else
        f1, f2, ...) are stored with the model and name the features of its explanations."""
        # the budget bounds the whole fit, the imports below included (seconds on a busy machine)
        from tunemix.train.budget import FitBudget, clock_for

        deadline = FitBudget.begin(self.time_budget_s)
        from tunemix.train.config import ConfigError, resolve_feature_names
        from tunemix.train.data.splits import split_by_query
        from tunemix.train.train import train

        set_openmp_wait_policy()  # before numba's first parallel launch (tunemix.core.scoring.runtime)
        if self.progress:  # a cold numba cache: compile once, saying so (tunemix.compile.warm)
            from tunemix.compile.warm import ensure_warm

            ensure_warm()
        cfg = self._config()
        clock = clock_for(cfg.run.backend)  # the budget as the config says, on its backend's clock
        deadline = FitBudget(start=deadline.start + clock() - deadline.clock(), budget_s=cfg.run.time_budget_s,
                            clock=clock)
        if feature_names is None and hasattr(X, "columns") and all(isinstance(c, str) for c in X.columns):
            feature_names = list(X.columns)
        train_set = _ranking_data(X, y, group, "X", "y", "group")
        if feature_names is not None:
            if isinstance(feature_names, str) or not all(isinstance(v, str) for v in feature_names):
                raise TypeError("feature_names must be a sequence of strings (one per column of X)")
            names = list(feature_names)
            cfg = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, feature_names=names))
        try:
            resolve_feature_names(cfg.data, train_set.n_features)
        except ConfigError as exc:
            raise ValueError(str(exc).replace("[data] feature_names", "feature_names")) from None
        eval_set = _eval_pairs(eval_set, eval_X, eval_y)
        if eval_set:
            if not eval_group or len(eval_group) < 1:
                raise ValueError("eval_set needs eval_group: the query sizes of each evaluation set")
            xv, yv = eval_set[0]
            vali = _ranking_data(xv, yv, eval_group[0], "eval_set[0][0]", "eval_set[0][1]", "eval_group[0]",
                                 n_features=train_set.n_features)
        else:
            if train_set.n_queries < 2:
                raise ValueError("fit needs at least 2 queries to hold some out (or pass eval_set)")
            train_set, vali = split_by_query(train_set, fraction=1.0 - HOLDOUT_FRACTION, seed=self.random_state)
        outcome = train(cfg, progress=self.progress, sets={"train": train_set, "vali": vali}, save=False,
                        deadline=deadline)
        self._cfg_ = cfg
        self.record_ = outcome.record
        self.model_ = Model(ensemble=outcome.model, manifest={"name": cfg.name, "version": "unsaved",
                                                              "n_features": outcome.model.n_features,
                                                              "feature_names": outcome.record["feature_names"]},
                            path=Path("."))
        self.n_features_in_ = outcome.model.n_features
        # feature_importances_ is computed on first access from this deterministic sample of the
        # training rows (whole queries evenly spread, up to 5,000 documents): it costs 2.2-2.8 CPU-s
        # of a 26 CPU-s fit on MQ2008 Fold1 (docs/performance.md)
        from tunemix.train.importance import importance_sample

        self._importance_sample_ = importance_sample(train_set.features, train_set.query_offsets)
        self._feature_importances: npt.NDArray[np.float64] | None = None
        return self

    @property
    def feature_importances_(self) -> npt.NDArray[np.float64]:
        """The mean absolute exact contribution of each feature (d,) over a deterministic sample of
        the training rows fit kept (whole queries of at least 2 documents evenly spread, up to
        5,000 documents: ``tunemix.train.importance``), computed on first access and kept
        (AttributeError before ``fit``)."""
        from tunemix.train.importance import sample_importance

        model = self._check_fitted()
        if self._feature_importances is None:
            x, off = self._importance_sample_
            self._feature_importances = sample_importance(model.ensemble, x, off)
        return self._feature_importances

    def feature_importances(self, X: Any = None, group: Any = None) -> npt.NDArray[np.float64]:
        """``feature_importances_`` without ``X``; with ``X`` (and ``group``), the same measure over
        a sample of those rows (``Model.feature_importances``): the method a loaded model has too."""
        if X is None:
            if group is not None:
                raise ValueError("group without X: pass the rows whose importances to compute")
            return self.feature_importances_
        return self._check_fitted().feature_importances(X, group)

    def _check_fitted(self) -> Model:
        model = getattr(self, "model_", None)
        if model is None:
            raise AttributeError("this TuneMixRanker is not fitted yet: call fit(X, y, group) first")
        return model

    def predict(self, X: Any, group: Any = None) -> npt.NDArray[np.float64]:
        """One ranking score per row (higher first); ``group`` as in ``fit`` (None: one query)."""
        return self._check_fitted().predict(X, group)

    def predict_proba(self, X: Any, group: Any = None) -> npt.NDArray[np.float64]:
        """P(y = k) per row and grade, (n, n_grades) (``Model.predict_proba``)."""
        return self._check_fitted().predict_proba(X, group)

    def predict_relevance(self, X: Any, group: Any = None) -> npt.NDArray[np.float64]:
        """The expected grade per row (``Model.predict_relevance``)."""
        return self._check_fitted().predict_relevance(X, group)

    @property
    def members_(self) -> list[dict[str, Any]]:
        """The members the fit chose, as served (after the mix dropped the zero-weight ones), in
        mix order: per member ``name``, ``learner``, ``view``, ``grouping``, ``iterations``,
        ``calibrator`` and ``weight`` (its share of the mix, the weights adding up to 1;
        ``Model.member_table``). ``record_["members"]`` has every candidate the mix weighed.

        >>> [(m["name"], round(m["weight"], 3)) for m in ranker.members_][:2]   # doctest: +SKIP
        [('lambdamart-raw@412/sigmoid', 0.61), ('mcrank-raw@300/isotonic', 0.39)]
        """
        return self._check_fitted().member_table()

    @property
    def feature_names_(self) -> tuple[str, ...]:
        """The features' names the model was trained with (``fit(feature_names=)``)."""
        return self._check_fitted().feature_names

    def explain(self, X: Any, group: Any = None, **options: Any) -> Explanation:
        """Per document a baseline (the rest of the list) and one contribution per feature adding up
        to its score (``Model.explain``: exact by default, ``method="shapley"`` for the whole model's)."""
        return self._check_fitted().explain(X, group, **options)

    def explain_pair(self, X: Any, a: int, b: int, group: Any = None, **options: Any) -> PairExplanation:
        """Contributions to score(a) - score(b) for two rows of one query (``Model.explain_pair``)."""
        return self._check_fitted().explain_pair(X, a, b, group, **options)

    def save(self, models_dir: PathLike, name: str) -> Path:
        """Write the fitted model as the next version of ``name`` under ``models_dir`` (the
        artifact ``tunemix serve`` and ``tunemix.load`` read), with ``feature_importances_`` (computed
        here on first access), which the loaded model offers as its own; the version directory."""
        from tunemix.train.train import save_model

        model = self._check_fitted()
        cfg = dataclasses.replace(self._cfg_, name=name,
                                  run=dataclasses.replace(self._cfg_.run, models_dir=os.fspath(models_dir)))
        x, off = self._importance_sample_
        record = {**self.record_, "feature_importances": [float(v) for v in self.feature_importances_],
                  "feature_importances_sample": {"queries": int(off.size - 1), "documents": int(x.shape[0]),
                                                 "rows": getattr(self, "_importance_rows_", "training")}}
        path = save_model(cfg, model.ensemble, record)
        self.model_ = load(path)
        log.info("saved model %r version %s to %s", name, path.name, path)
        if self.progress:  # what the progress bars go to: the user sees which version was written
            sys.stderr.write(f"tunemix: saved model {name!r} version {path.name} to {path}\n")
        return path


def _ranking_data(X: Any, y: Any, group: Any, xn: str, yn: str, gn: str, n_features: int | None = None) -> RankingData:
    x = features_matrix(X, n_features, xn)
    labels = grades(y, x.shape[0], yn)
    off = query_offsets(group, x.shape[0], gn)
    return RankingData(features=x, labels=labels, query_offsets=off,
                       qids=np.arange(off.shape[0] - 1).astype(np.str_))


def _eval_pairs(eval_set: list[tuple[Any, Any]] | None, eval_X: Any, eval_y: Any) -> list[tuple[Any, Any]] | None:
    """``eval_set``, or the pairs of LightGBM's ``eval_X`` / ``eval_y`` (each a matrix and its
    grades, or tuples of them)."""
    if eval_X is None and eval_y is None:
        return eval_set
    if eval_set is not None:
        raise ValueError("pass eval_set or eval_X and eval_y, not both")
    if eval_X is None or eval_y is None:
        raise ValueError("eval_X and eval_y go together: the evaluation matrix and its grades")
    xs = eval_X if isinstance(eval_X, tuple) else (eval_X,)
    ys = eval_y if isinstance(eval_y, tuple) else (eval_y,)
    if len(xs) != len(ys):
        raise ValueError(f"eval_X has {len(xs)} matrices and eval_y {len(ys)} label arrays: one each")
    return list(zip(xs, ys, strict=True))
