"""tunemix: learning to rank with calibrated multi-class ensembles, from Python.

    import tunemix

    model = tunemix.load("default", models_dir="models")       # a trained version (no pickles)
    scores = model.predict(X, group=[20, 35])                  # group: query sizes, as LightGBM's
    ranker = tunemix.TuneMixRanker().fit(X, y, group=sizes)    # the scikit-learn estimator
    ranker.save("models", "mine")                              # -> models/mine/v1, servable
    tunemix.evaluate(y, scores, group=sizes, metrics=["ndcg@10"], convention="lightgbm")
    e = model.explain(X, group=[20, 35], rows=[0])              # baseline + contributions = score

This package is the library's public face: the service (``app``) and users import from here.
``training`` (the trainer, its kernels) and ``app`` (the FastAPI service) are the project's two
halves; they install beside it.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from tunemix.metrics import evaluate
from tunemix.model import Explanation, Model, PairExplanation, load
from tunemix.ranker import HOLDOUT_FRACTION, TuneMixRanker

try:
    __version__ = version("tunemix")
except PackageNotFoundError:  # a source tree that was not installed
    __version__ = "0+unknown"

__all__ = ["HOLDOUT_FRACTION", "Explanation", "Model", "PairExplanation", "TuneMixRanker", "__version__", "evaluate",
           "load"]
