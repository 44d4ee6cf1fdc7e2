"""A trained tunemix model loaded from its artifact: ``tunemix.load`` and ``Model``."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from training.artifact.store import ArtifactError, list_versions, resolve_artifact
from training.scoring.ensemble_model import EnsembleModel, load_model
from tunemix._inputs import features_matrix, query_offsets

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
    def members(self) -> list[str]:
        """The names of the ensemble's calibrated members (what the mix weighs)."""
        return [m.name for m in self.ensemble.members]

    def predict(self, X: Any, group: Any = None) -> npt.NDArray[np.float64]:
        """One score per row of ``X`` (n_documents, n_features), higher is better.

        ``group`` holds the query sizes, as in LightGBM and XGBoost: ``[2, 3]`` means rows 0-1
        are one query and rows 2-4 another (None: all rows are one query). Query-wise feature
        views standardise each feature within a query, so pass a query's whole candidate list.
        """
        x = features_matrix(X, self.n_features)
        return np.asarray(self.ensemble.score(x, query_offsets(group, x.shape[0])), dtype=np.float64)

    def predict_proba(self, X: Any, group: Any = None) -> npt.NDArray[np.float64]:
        """P(y = k) for every row and grade, (n_documents, n_grades): column k is the probability
        of grade k (rows sum to 1). Comparable across queries: among documents given P(y >= 1) =
        0.8, about 80% are relevant. Within a query a document ranked higher never gets a lower
        P(y >= k). ValueError for a model without a relevance head (trained with ``[relevance]
        enabled = false`` or before the current head existed)."""
        x = features_matrix(X, self.n_features)
        return self.ensemble.score_and_relevance(x, query_offsets(group, x.shape[0]))[1]

    def predict_relevance(self, X: Any, group: Any = None) -> npt.NDArray[np.float64]:
        """The expected grade E[y] of every row, comparable across queries (see ``predict_proba``)."""
        x = features_matrix(X, self.n_features)
        return self.ensemble.score_and_relevance(x, query_offsets(group, x.shape[0]))[2]

    def rank(self, X: Any, group: Any = None, ids: Any = None,
             top_k: int | None = None) -> list[list[tuple[Any, float]]]:
        """Each query's documents best first as ``(id, score)`` pairs (ids default to the row's
        position within its query; ties keep the input order); ``top_k`` keeps the best k."""
        x = features_matrix(X, self.n_features)
        off = query_offsets(group, x.shape[0])
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
    ensemble, manifest = load_model(target)
    return Model(ensemble=ensemble, manifest=manifest, path=target)
