"""Artifacts written by tunemix 0.1.0 (the layout of three top-level packages) load and answer
to the bit: scores, grade probabilities and exact explanations.

``tests/fixtures/artifacts-0.1.0`` holds two models trained by that tree on generated data, with
every member type (AdaBoost.MH on three views, McRank multi-class and ordinal, LambdaMART, the
linear SVM, the best feature): ``every`` mixed by the exponentially weighted forecaster with a
relevance head, ``uniform`` mixing every member; and beside each what that tree answered for a
fixed matrix (``expected*.npz``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import tunemix

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "artifacts-0.1.0"


@pytest.mark.parametrize(("name", "expected"), [("every", "expected.npz"), ("uniform", "expected-uniform.npz")])
def test_an_artifact_written_by_0_1_answers_the_same_bits(name: str, expected: str) -> None:
    want = np.load(FIXTURES / expected)
    model = tunemix.load(FIXTURES / "models" / name / "v1")
    X, group = want["X"], want["group"].tolist()
    assert np.array_equal(model.predict(X, group), want["scores"])
    assert np.array_equal(model.predict_proba(X, group), want["proba"])
    e = model.explain(X, group, rows=[0, 10, 25])
    assert np.array_equal(e.baseline, want["baseline"])
    assert np.array_equal(e.contributions, want["contributions"])


def test_the_uniform_fixture_serves_every_member_type() -> None:
    import json

    manifest = json.loads((FIXTURES / "models" / "uniform" / "v1" / "manifest.json").read_text())
    text = json.dumps(manifest)
    for kind in ("adaboost", "mcrank", "lambdamart", "svm", "best-feature"):
        assert kind in text, kind
