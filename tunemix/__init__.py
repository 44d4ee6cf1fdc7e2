"""tunemix: learning to rank with calibrated multi-class ensembles, from Python.

    import tunemix

    X, y, sizes, qids, docids = tunemix.read_letor("train.txt")  # a LETOR/SVMlight file
    model = tunemix.load("default", models_dir="models")       # a trained version (no pickles)
    scores = model.predict(X, group=[20, 35])                  # group: query sizes, as LightGBM's
    ranker = tunemix.TuneMixRanker().fit(X, y, group=sizes)    # the scikit-learn estimator
    ranker.save("models", "mine")                              # -> models/mine/v1, servable
    tunemix.evaluate(y, scores, group=sizes, metrics=["ndcg@10"], convention="lightgbm")
    e = model.explain(X, group=[20, 35], rows=[0])              # baseline + contributions = score

A missing feature value is NaN (``read_letor(path, missing="nan")`` reads a feature a line leaves
out as one): every member type handles missing values its own way (docs/missing-values.md).

Errors a user may catch: ``ArtifactError`` (a model that cannot be loaded), ``ConfigError`` (a
training configuration), ``DataFormatError`` (a LETOR file, naming file and line),
``EvaluationInputError`` (``evaluate``'s inputs); all are ValueErrors.

This module is the library's public face. The layers below it are folders: ``tunemix.core``
(what scoring needs: data, artifact, evaluation, calibration, ensemble, scoring, explanations;
numpy and numba only), ``tunemix.train`` (learners and training stages), ``tunemix.compile``
(kernel warm-up), ``tunemix.service`` (the FastAPI service) and ``tunemix.cli`` (the command).
"""

from __future__ import annotations

from typing import Any

from tunemix.core.artifact import ArtifactError
from tunemix.core.data.svmlight import DataFormatError
from tunemix.core.evaluation.evaluate import EvaluationInputError
from tunemix.core.version import __version__
from tunemix.data import LetorData, read_letor
from tunemix.metrics import evaluate
from tunemix.model import Explanation, Model, PairExplanation, load
from tunemix.ranker import HOLDOUT_FRACTION, TuneMixRanker


def __getattr__(name: str) -> Any:
    # ConfigError lives with the trainer's configuration: imported on first use, so that the
    # public face does not load the trainer's modules
    if name == "ConfigError":
        from tunemix.train.config import ConfigError

        return ConfigError
    raise AttributeError(f"module 'tunemix' has no attribute {name!r}")

__all__ = ["HOLDOUT_FRACTION", "ArtifactError", "ConfigError", "DataFormatError", "EvaluationInputError", "Explanation",
           "LetorData", "Model", "PairExplanation", "TuneMixRanker", "__version__", "evaluate", "load", "read_letor"]
