"""Linear members: the multi-class linear SVM (Crammer and Singer) and the best single feature.

Both are served as a small matrix product (``tunemix.core.scoring.ensemble_model``: a linear run
stores ``weights`` (d, K), ``intercept`` (K,), ``mean`` and ``scale`` (d,), and its raw K-vector
is ``((x - mean) / scale) @ weights + intercept``); the artifact holds these arrays only.

- ``[[members.svm]]`` (method section 3.2): scores f(x) = M^T x' + b on the standardised
  features x' = (x - mean) / scale (mean and standard deviation of the fit part; a constant
  feature gets scale 1). Crammer and Singer (JMLR 2001) minimise
  0.5 ||M||^2 + (C / n) sum_i xi_i  s.t.  m_{l_i} . x_i + delta(l_i, l) - m_l . x_i >= 1 - xi_i;
  liblinear (scikit-learn's ``LinearSVC(multi_class="crammer_singer")``, a training-only
  dependency) minimises 0.5 ||M||^2 + C' sum_i xi_i, so the paper's C maps to ``C' = C / n``
  (n the fit part's documents). The paper's grid is C in {1e-6, 1e-5, ..., 10}. The intercept
  is liblinear's: a constant feature 1 (``intercept_scaling``), regularised like the weights.
  With two classes liblinear returns one score f = m_1 . x - m_0 . x; the member's K-vector is
  then (0, f). Keys: ``C``, ``max_iter``, ``tol``.
  Missing values (``docs/missing-values.md``): a feature with a missing value in the fit part is
  read as its imputed value (the mean of its present values) and gets a missing indicator, a
  column of its own (1 where missing); both are standardised and learned with the rest. The
  served map keeps d weights: a missing value's term (the run's ``missing`` row) is its weight
  times the standardised imputed value plus its indicator's weight, and the indicators' terms
  for present values are inside the intercept.
- ``[members] best_feature = true``: the paper's baseline, the raw feature j and sign s in
  {+1, -1} whose score s x_j has the best mean of the mixer's measure (NDCG@10, "yahoo") on the
  fit part's queries; one member (raw view, K = 1, used as it is), weights s e_j. A missing
  value scores 0 (it is read as 0 when the feature is chosen, and served so).
"""

from __future__ import annotations

import time
import warnings
from typing import Any, ClassVar

import numpy as np

from tunemix.train.members.types import MemberType, RunResult, RunSpec, linear_scores, register

#: the paper's log grid of C (method section 3.2)
PAPER_C_GRID = [1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0]


def standardisation(features: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and standard deviation per column (float64); scale 1 where a column is constant."""
    x = np.asarray(features, dtype=np.float64)
    mean = x.mean(axis=0) if x.shape[0] else np.zeros(x.shape[1])
    scale = x.std(axis=0) if x.shape[0] else np.ones(x.shape[1])
    return mean, np.where(scale > 0, scale, 1.0)


def fit_crammer_singer(features: np.ndarray, classes: np.ndarray, n_classes: int, *, C: float,
                       max_iter: int = 2000, tol: float = 1e-4, seed: int = 0) -> tuple[dict[str, np.ndarray], Any]:
    """The linear map of a Crammer-Singer SVM on standardised features (module docstring) and the
    fitted ``LinearSVC`` (its ``decision_function`` on standardised rows is the reference)."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.svm import LinearSVC

    x = np.asarray(features, dtype=np.float64)
    nan = np.isnan(x)
    miss = np.flatnonzero(nan.any(axis=0))
    d = x.shape[1]
    impute = np.zeros(d)
    if miss.size:
        present = (~nan).sum(axis=0)
        impute = np.divide(np.where(nan, 0.0, x).sum(axis=0), present, out=np.zeros(d), where=present > 0)
        x = np.hstack([np.where(nan, impute, x), nan[:, miss].astype(np.float64)])
    mean, scale = standardisation(x)
    xs = (x - mean) / scale
    n = xs.shape[0]
    svc = LinearSVC(multi_class="crammer_singer", C=float(C) / n, fit_intercept=True, max_iter=int(max_iter),
                    tol=float(tol), random_state=int(seed))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        svc.fit(xs, classes)
    coef = np.asarray(svc.coef_, dtype=np.float64)
    icpt = np.asarray(svc.intercept_, dtype=np.float64).reshape(-1)
    weights = np.zeros((xs.shape[1], n_classes))
    intercept = np.zeros(n_classes)
    present = [int(c) for c in svc.classes_]
    if coef.shape[0] == 1:  # two classes present: one score f, K-vector (0, f)
        weights[:, present[1]] = coef[0]
        intercept[present[1]] = icpt[0]
    else:
        for row, c in enumerate(present):
            weights[:, c] = coef[row]
            intercept[c] = icpt[row]
    linear = {"weights": weights[:d], "intercept": intercept, "mean": mean[:d], "scale": scale[:d]}
    if miss.size:  # the indicators folded into the intercept (present) and the missing rows
        ind_w = weights[d:] / scale[d:, None]
        linear["intercept"] = intercept - (mean[d:, None] * ind_w).sum(axis=0)
        missing = ((impute - mean[:d]) / scale[:d])[:, None] * weights[:d]
        missing[miss] += ind_w
        linear["missing"] = missing
    return linear, svc


def best_single_feature(features: np.ndarray, labels: np.ndarray, query_offsets: np.ndarray, measure: str,
                        convention: str, rows: np.ndarray | None = None) -> tuple[int, float, float]:
    """(feature index, sign, mean quality) of the best signed raw feature on these queries; ties:
    the lower index, + before -. ``rows``: the queries' documents are these rows of ``features``."""
    from tunemix.core.evaluation import mean_metric

    best = (0, 1.0, -np.inf)
    x = np.asarray(features)
    for j in range(x.shape[1]):
        # one column at a time: no float64 copy of the matrix
        column = np.nan_to_num((x[:, j] if rows is None else x[rows, j]).astype(np.float64), nan=0.0)
        for sign in (1.0, -1.0):
            q = mean_metric(labels, sign * column, query_offsets, measure, convention)
            if q > best[2]:
                best = (j, sign, float(q))
    return best


def _linear_result(spec: RunSpec, linear: dict[str, np.ndarray], n_classes: int, gains: np.ndarray,
                   t0: float, train_error: float = float("nan")) -> RunResult:
    return RunResult(spec=spec, n_outputs=int(linear["weights"].shape[1]), n_classes=n_classes, class_gains=gains,
                     checkpoints=[0], snapshot_iterations=[0], shift_scales=[None], n_iterations=0, n_bases=0,
                     stop_reason="converged", fit_seconds=time.perf_counter() - t0, train_error=train_error,
                     linear=linear)


@register
class SVMMember(MemberType):
    """``[[members.svm]]`` (module docstring)."""

    name: ClassVar[str] = "svm"
    keys: ClassVar[frozenset[str]] = frozenset({"C", "max_iter", "tol", "seed"})

    def learner_tag(self, params: dict[str, Any]) -> str:
        return f"svm-C{params.get('C', 1.0):g}"

    def fit(self, spec: RunSpec, features: np.ndarray, labels: np.ndarray, query_offsets: np.ndarray,
            n_labels: int, seed: int, time_budget_s: float | None, progress_queue: Any = None,
            eval_set: Any = None) -> RunResult:
        from tunemix.train.learners.label_groups import get_grouping

        t0 = time.perf_counter()
        grouping = get_grouping(spec.grouping, n_labels)
        classes = grouping.apply(labels)
        params = dict(spec.params)
        linear, svc = fit_crammer_singer(features, classes, grouping.n_classes, C=float(params.get("C", 1.0)),
                                         max_iter=int(params.get("max_iter", 2000)),
                                         tol=float(params.get("tol", 1e-4)),
                                         seed=int(params.get("seed", seed + spec.index)))
        error = float(np.mean(np.argmax(linear_scores(linear, features), axis=1) != classes))
        result = _linear_result(spec, linear, grouping.n_classes, grouping.class_gains(labels), t0, error)
        result.stop_reason = "max_iter" if int(np.max(svc.n_iter_)) >= svc.max_iter else "converged"
        return result


@register
class BestFeatureMember(MemberType):
    """``[members] best_feature = true`` (module docstring)."""

    name: ClassVar[str] = "best_feature"
    keys: ClassVar[frozenset[str]] = frozenset({"measure", "convention"})  # filled in from [mixer]

    def blocks(self, cfg: Any) -> list[dict[str, Any]]:
        if not cfg.members.best_feature:
            return []
        return [{"measure": cfg.mixer.measure, "convention": cfg.mixer.convention}]

    def views(self, cfg: Any) -> list[str]:
        return ["raw"]

    def groupings(self, cfg: Any) -> list[str]:
        return ["original"]

    def learner_tag(self, params: dict[str, Any]) -> str:
        return "best-feature"

    def fit(self, spec: RunSpec, features: np.ndarray, labels: np.ndarray, query_offsets: np.ndarray,
            n_labels: int, seed: int, time_budget_s: float | None, progress_queue: Any = None,
            eval_set: Any = None) -> RunResult:
        t0 = time.perf_counter()
        j, sign, quality = best_single_feature(features, labels, query_offsets, spec.params["measure"],
                                               spec.params["convention"])
        d = features.shape[1]
        weights = np.zeros((d, 1))
        weights[j, 0] = sign
        linear = {"weights": weights, "intercept": np.zeros(1), "mean": np.zeros(d), "scale": np.ones(d)}
        result = _linear_result(spec, linear, n_labels, 2.0 ** np.arange(n_labels) - 1.0, t0)
        result.stop_reason = f"feature {j + 1} ({'+' if sign > 0 else '-'}), fit-part {spec.params['measure']} " \
                             f"{quality:.4f}"
        return result

    def calibrators(self, configured: list[str], result: RunResult) -> list[str]:
        return ["identity"]
