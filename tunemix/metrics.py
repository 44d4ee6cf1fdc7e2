"""``tunemix.evaluate``: the numbers of ``/evaluate`` and ``tunemix evaluate`` from Python."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tunemix._inputs import grades, query_offsets
from tunemix.core.evaluation.evaluate import evaluate as _evaluate


def evaluate(y_true: Any, y_score: Any, group: Any, metrics: str | Sequence[str] = ("ndcg@10",),
             convention: str = "yahoo", *, retrieved: Any = None) -> dict[str, Any]:
    """Ranking measures of scored queries under one of the ten tools' conventions
    (docs/conventions.md): ``{"mean": {measure: value}, "per_query": {measure: [values]},
    "derived": {measure: bool}, "warnings": [...], "convention": name}``.

    ``retrieved`` (booleans, one per row; None: all True) evaluates a truncated run: a row marked
    False is a judged document the run did not rank, which trec and ranx count as unretrieved (in
    the ideal DCG and AP's divisor, at no rank); the other conventions refuse it, naming the
    query (docs/conventions.md, "Truncated runs").

    >>> evaluate([2, 0, 1, 0, 1], [0.9, 0.8, 0.3, 0.2, 0.1], group=[3, 2], metrics=["ndcg@10"])["mean"]
    {'ndcg@10': 0.9297...}                                              # doctest: +SKIP
    """
    scores = np.asarray(y_score, dtype=np.float64)
    if scores.ndim != 1:
        raise ValueError(f"y_score must be 1-D, got shape {scores.shape}")
    labels = grades(y_true, scores.shape[0], "y_true")
    off = query_offsets(group, scores.shape[0])
    res = _evaluate(labels, scores, off, [metrics] if isinstance(metrics, str) else list(metrics), convention,
                    retrieved=retrieved)
    return {"convention": res.convention, "mean": dict(res.mean),
            "per_query": {k: [None if np.isnan(v) else float(v) for v in vals] for k, vals in res.per_query.items()},
            "derived": dict(res.derived), "warnings": list(res.warnings)}
