"""A trained tunemix model loaded from its artifact: ``tunemix.load`` and ``Model``."""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from tunemix._inputs import features_matrix, query_offsets
from tunemix.core.artifact import ArtifactError, list_versions, resolve_artifact
from tunemix.core.explain.explanation import (
    DEFAULT_BUDGET,
    Explanation,
    PairExplanation,
    explain_pair,
    explain_rows,
    manifest_feature_names,
)
from tunemix.core.scoring.ensemble_model import EnsembleModel, load_model
from tunemix.core.scoring.runtime import set_openmp_wait_policy

PathLike = str | os.PathLike[str]


@dataclass(frozen=True, eq=False)
class Model:
    """A loaded model version. Scores are ranking scores: higher first, comparable within a query.

    >>> model = tunemix.load("default", models_dir="models")          # doctest: +SKIP
    >>> model.predict(X, group=[2, 3])                                  # doctest: +SKIP
    array([ 0.41, -0.12,  0.93,  0.05,  0.27])
    """

    ensemble: EnsembleModel
    manifest: dict[str, Any]
    path: Path

    @property
    def n_features(self) -> int:
        return self.ensemble.n_features

    @property
    def name(self) -> str:
        return str(self.manifest["name"])

    @property
    def version(self) -> str:
        return str(self.manifest["version"])

    @property
    def created(self) -> str | None:
        """When the version was trained (ISO-8601, UTC), as the manifest says."""
        created = self.manifest.get("created")
        return None if created is None else str(created)

    @property
    def feature_names(self) -> tuple[str, ...]:
        """The features' names, as trained (``[data] feature_names``, ``fit(feature_names=)``;
        default f1, f2, ...)."""
        return manifest_feature_names(self.manifest, self.n_features)

    @property
    def list_dependent(self) -> tuple[str, ...]:
        """What makes a document's score depend on the other documents of its query (empty: each
        document scores alone): query-wise feature views (``raw+std``, ``raw+white``) and a mix
        that rescales the members' scores per query (``zscore_query``, ``minmax_query``)."""
        reasons = [f"the query-wise feature view {v}" for v in self.ensemble.extra_views]
        rescale = getattr(self.ensemble.mixer, "rescale", None)
        if rescale in ("zscore_query", "minmax_query"):
            reasons.append(f"the mix's per-query rescaling of member scores ({rescale})")
        return tuple(reasons)

    def member_table(self) -> list[dict[str, Any]]:
        """The ensemble's calibrated members as served, in mix order: per member its ``name``,
        the ``learner`` of its run (``adaboost``, ``lambdamart``, ...), ``view``, label
        ``grouping``, snapshot ``iterations`` (0 for a linear member), ``calibrator`` and
        ``weight``: its share of the mix, w_m / sum_j w_j (the exponentially weighted forecaster's
        weights; None for a mixer without per-member weights). The mixed score is
        sum_m weight_m * (member m's calibrated score, rescaled per the mix's ``rescale``)."""
        e = self.ensemble
        w = e.mix_weights()
        share = None if w is None or w.shape[0] != len(e.members) or w.sum() <= 0 else w / w.sum()
        rows = []
        for j, m in enumerate(e.members):
            run = e.runs[m.run]
            learner = run.learner.get("type", "adaboost" if run.kind == "forest" else run.kind)
            rows.append({"name": m.name, "learner": str(learner), "view": run.view,
                         "grouping": run.grouping, "iterations": int(m.iterations),
                         "calibrator": str(getattr(m.calibrator, "name", type(m.calibrator).__name__)),
                         "weight": None if share is None else float(share[j])})
        return rows

    def _offsets(self, x: npt.NDArray[np.float32], group: Any, method: str) -> npt.NDArray[np.int64]:
        """``group``'s query offsets; without ``group``, a warning when several rows would be
        scored as one query by a model whose scores depend on the query's whole list."""
        if group is None and x.shape[0] > 1 and self.list_dependent:
            warnings.warn(
                f"{method}(X) without group scores all {x.shape[0]} rows as ONE query, but this model's scores "
                f"depend on each query's whole candidate list ({'; '.join(self.list_dependent)}): pass group= "
                f"the query sizes (as LightGBM's), or group=[{x.shape[0]}] if the rows really are one query",
                UserWarning, stacklevel=3)
        return query_offsets(group, x.shape[0])

    @property
    def members(self) -> list[str]:
        """The names of the ensemble's calibrated members (what the mix weighs)."""
        return [m.name for m in self.ensemble.members]

    def predict(self, X: Any, group: Any = None) -> npt.NDArray[np.float64]:
        """One score per row of ``X`` (n_documents, n_features), higher is better.

        ``group`` holds the query sizes, as in LightGBM and XGBoost: ``[2, 3]`` means rows 0-1
        are one query and rows 2-4 another (None: all rows are one query). Query-wise feature
        views standardise each feature within a query, so pass a query's whole candidate list;
        without ``group``, a model with such parts (``list_dependent``) warns (UserWarning).

        Threads: a call of fewer than ``TUNEMIX_PARALLEL_MIN_DOCUMENTS`` documents (default 256)
        scores on one thread, as the service does when workers share the cores (docs/library.md).
        """
        x = features_matrix(X, self.n_features)
        return np.asarray(self.ensemble.score(x, self._offsets(x, group, "predict")), dtype=np.float64)

    def predict_proba(self, X: Any, group: Any = None) -> npt.NDArray[np.float64]:
        """P(y = k) for every row and grade, (n_documents, n_grades): column k is the probability
        of grade k (rows sum to 1). Comparable across queries: among documents given P(y >= 1) =
        0.8, about 80% are relevant. Within a query a document ranked higher never gets a lower
        P(y >= k). ValueError for a model without a relevance head (trained with ``[relevance]
        enabled = false``, or an artifact whose head is of another kind)."""
        x = features_matrix(X, self.n_features)
        return self.ensemble.score_and_relevance(x, self._offsets(x, group, "predict_proba"))[1]

    def predict_relevance(self, X: Any, group: Any = None) -> npt.NDArray[np.float64]:
        """The expected grade E[y] of every row, comparable across queries (see ``predict_proba``)."""
        x = features_matrix(X, self.n_features)
        return self.ensemble.score_and_relevance(x, self._offsets(x, group, "predict_relevance"))[2]

    def explain(self, X: Any, group: Any = None, *, rows: Any = None, reference: Any = "median",
                method: str = "exact", budget: int = DEFAULT_BUDGET, seed: int = 0) -> Explanation:
        """Why each document (or each of ``rows``) scores what it scores: per document a
        ``baseline`` and one contribution per feature, ``baseline + contributions.sum() == score``
        (to float rounding). By default (``method="exact"``) exact and the same on every call:
        each member's exact Shapley values against the ``reference`` document (default: the
        query's per-feature median; ``"mean"`` or an array of n_features), carried through the
        calibrators and the mix, the rest of the list as posted; the baseline is the score the
        reference document would get in the document's place (the rest of the list). ``method="shapley"``:
        the Shapley values of the whole model's score, the list's statistics recomputed for each
        hybrid list, enumerated when the features that matter fit ``budget`` (documents scored
        per explained document), else sampled (``seed``) with a ``standard_error``
        (``tunemix.core.explain.explanation`` has the details and the references).

        >>> e = model.explain(X, group=[20, 35], rows=[0])                # doctest: +SKIP
        >>> e.baseline[0] + e.contributions[0].sum() == model.predict(X, [20, 35])[0]  # doctest: +SKIP
        >>> e.top(0, 3)                                                    # doctest: +SKIP
        [('f40', 0.31), ('f12', -0.08), ('f3', 0.05)]
        """
        x = features_matrix(X, self.n_features)
        return explain_rows(self.ensemble, x, self._offsets(x, group, "explain"), rows, reference=reference,
                            method=method, budget=budget, seed=seed, feature_names=self.feature_names)

    @property
    def feature_importances_(self) -> npt.NDArray[np.float64]:
        """The importances the version stores (d,): each feature's mean absolute exact
        contribution over the fitted ranker's sample of its training rows (``TuneMixRanker
        .feature_importances_``, stored by ``TuneMixRanker.save``). AttributeError for a version
        that stores none (``tunemix train`` writes none): ``feature_importances(X)`` computes them
        on rows of your data."""
        stored = self.manifest.get("training_record", {}).get("feature_importances")
        if stored is None:
            raise AttributeError(
                f"model {self.name!r} version {self.version} stores no feature importances (TuneMixRanker.save "
                "stores them, tunemix train does not): call feature_importances(X, group) with rows of your data")
        values = np.asarray(stored, dtype=np.float64)
        if values.shape != (self.n_features,) or not np.isfinite(values).all():
            raise ArtifactError(f"{self.path}: training_record.feature_importances must be {self.n_features} "
                                f"finite numbers, got shape {values.shape}")
        return values

    def feature_importances(self, X: Any = None, group: Any = None) -> npt.NDArray[np.float64]:
        """Each feature's mean absolute exact contribution (d,). With ``X`` (and ``group``, the
        query sizes): over a deterministic sample of its rows (whole queries of at least 2
        documents evenly spread, up to 5,000 documents: ``tunemix.train.importance``). Without:
        the stored ``feature_importances_``, as LightGBM's ``Booster.feature_importance()`` needs
        no data."""
        if X is None:
            if group is not None:
                raise ValueError("group without X: pass the rows whose importances to compute")
            return self.feature_importances_
        from tunemix.train.importance import global_importance

        x = features_matrix(X, self.n_features)
        return global_importance(self.ensemble, x, self._offsets(x, group, "feature_importances"))[0]

    def explain_pair(self, X: Any, a: int, b: int, group: Any = None, **options: Any) -> PairExplanation:
        """Why row ``a`` is above (or below) row ``b`` of the same query: contributions to
        score(a) - score(b), the difference of the two documents' explanations (``explain``'s
        keyword options apply). ``rest_of_list`` (also ``baseline``) is what the two baselines
        differ by: what the other documents do to a's score against b's (0 unless the model rescales
        its members per query or has query-wise views)."""
        x = features_matrix(X, self.n_features)
        return explain_pair(self.ensemble, x, self._offsets(x, group, "explain_pair"), a, b,
                            feature_names=self.feature_names, **options)

    def rank(self, X: Any, group: Any = None, ids: Any = None,
             top_k: int | None = None) -> list[list[tuple[Any, float]]]:
        """Each query's documents best first as ``(id, score)`` pairs (ids default to the row's
        position within its query; ties keep the input order); ``top_k`` keeps the best k."""
        x = features_matrix(X, self.n_features)
        off = self._offsets(x, group, "rank")
        scores = self.ensemble.score(x, off)
        if ids is not None and len(ids) != x.shape[0]:
            raise ValueError(f"ids has {len(ids)} entries but X has {x.shape[0]} rows")
        if top_k is not None and top_k < 1:
            raise ValueError(f"top_k must be at least 1, got {top_k}")
        out = []
        for q in range(off.shape[0] - 1):
            lo, hi = int(off[q]), int(off[q + 1])
            order = np.argsort(-scores[lo:hi], kind="stable")[:top_k]
            out.append([(ids[lo + j] if ids is not None else int(j), float(scores[lo + j])) for j in order])
        return out

    def __repr__(self) -> str:
        return f"Model(name={self.name!r}, version={self.version!r}, n_features={self.n_features}, " \
               f"members={len(self.members)})"


def load(path_or_name: PathLike, *, models_dir: PathLike | None = None, version: str | None = None) -> Model:
    """A model from a version directory (``models/default/v3``), a model directory (its latest
    version, or ``version``), or a model name under ``models_dir`` (default ``models``).
    Never unpickles: the artifact is a JSON manifest and ``.npz`` arrays."""
    p = Path(path_or_name)
    if (p / "manifest.json").is_file():
        if version is not None:
            raise ValueError(f"{p} is a version directory already; version={version!r} would be ignored")
        target = p
    else:
        root = p if p.is_dir() and models_dir is None and list_versions(p.parent, p.name) else None
        base, name = (p.parent, p.name) if root is not None else (Path(models_dir or "models"), str(path_or_name))
        if version is not None:
            target = base / name / version
            if not (target / "manifest.json").is_file():
                raise ArtifactError(f"model {name!r} has no version {version!r} in {base} "
                                    f"(available: {', '.join(list_versions(base, name)) or 'none'})")
        else:
            target = resolve_artifact(base, name)  # the latest version
    set_openmp_wait_policy()  # before numba's first parallel launch (tunemix.core.scoring.runtime)
    ensemble, manifest = load_model(target)
    model = Model(ensemble=ensemble, manifest=manifest, path=target)
    model.feature_names  # noqa: B018 (malformed names: an ArtifactError at load, not at the first explanation)
    return model
