"""tunemix: learning to rank with calibrated multi-class ensembles, from Python.

    import tunemix

    X, y, sizes, qids, docids = tunemix.read_letor("train.txt")  # a LETOR/SVMlight file
    model = tunemix.load("default", models_dir="models")       # a trained version (no pickles)
    scores = model.predict(X, group=[20, 35])                  # group: query sizes, as LightGBM's
    ranker = tunemix.TuneMixRanker().fit(X, y, group=sizes)    # the scikit-learn estimator
    ranker.save("models", "mine")                              # -> models/mine/v1, servable
    tunemix.evaluate(y, scores, group=sizes, metrics=["ndcg@10"], convention="lightgbm")
    e = model.explain(X, group=[20, 35], rows=[0])              # baseline + contributions = score

Errors a user may catch: ``ArtifactError`` (a model that cannot be loaded), ``ConfigError`` (a
training configuration), ``DataFormatError`` (a LETOR file, naming file and line),
``EvaluationInputError`` (``evaluate``'s inputs); all are ValueErrors.

This package is the library's public face: the service (``app``) and users import from here.
``training`` (the trainer, its kernels) and ``app`` (the FastAPI service) are the project's two
halves; they install beside it.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Any

from training.artifact.store import ArtifactError
from training.data.svmlight import DataFormatError
from training.evaluation.evaluate import EvaluationInputError
from tunemix.data import LetorData, read_letor
from tunemix.metrics import evaluate
from tunemix.model import Explanation, Model, PairExplanation, load
from tunemix.ranker import HOLDOUT_FRACTION, TuneMixRanker


def __getattr__(name: str) -> Any:
    # ConfigError lives with the trainer's configuration: imported on first use, so that the
    # service (which imports tunemix) does not load the trainer's modules
    if name == "ConfigError":
        from training.pipeline.config import ConfigError

        return ConfigError
    raise AttributeError(f"module 'tunemix' has no attribute {name!r}")


try:
    __version__ = version("tunemix")
except PackageNotFoundError:  # a source tree that was not installed
    __version__ = "0+unknown"

__all__ = ["HOLDOUT_FRACTION", "ArtifactError", "ConfigError", "DataFormatError", "EvaluationInputError", "Explanation",
           "LetorData", "Model", "PairExplanation", "TuneMixRanker", "__version__", "evaluate", "load", "read_letor"]
