"""The report's remarks (issue 40): the ensemble below its best member, ``n/a`` for learners
without a training error, the best single feature by name, JSON without float32 noise, and a
progress bar over an upper bound that predicts no end."""

from __future__ import annotations

import io
import json
from typing import Any

import numpy as np
import pytest

from tunemix.train.report_remarks import (
    ensemble_below_best_member,
    feature_label,
    train_error_cell,
    without_float32_noise,
)


def _record(ens: float, member: float) -> dict[str, Any]:
    table = {"ensemble": {"yahoo": {"ndcg@10": ens}}, "best_member": {"yahoo": {"ndcg@10": member}}}
    return {"mixer": {"measure": "ndcg@10", "convention": "yahoo"}, "best_member": {"name": "lambdamart-raw@90"},
            "evaluation": {"test": table, "vali": {"ensemble": {"yahoo": {"ndcg@10": 0.9}},
                                                   "best_member": {"yahoo": {"ndcg@10": 0.8}}}}}


def test_the_ensemble_below_its_best_member_is_remarked() -> None:
    (remark,) = ensemble_below_best_member(_record(0.8174, 0.8197))
    assert remark.startswith("On test the ensemble (ndcg@10 0.8174) scores below its best single member "
                             "`lambdamart-raw@90` (0.8197, 0.0023 more)")
    assert ensemble_below_best_member(_record(0.8200, 0.8197)) == []
    assert ensemble_below_best_member(_record(float("nan"), 0.8197)) == []


def test_learners_without_a_training_error_say_n_a() -> None:
    assert train_error_cell(float("nan")) == "n/a" and train_error_cell(None) == "n/a"
    assert train_error_cell(0.123456) == "0.1235" and train_error_cell(0.0) == "0.0000"


def test_the_best_feature_is_named_when_names_were_given() -> None:
    assert feature_label({"feature_names": ["bm25", "tf", "idf"]}, 3) == "feature 3 (idf)"
    assert feature_label({"feature_names": ["f1", "f2"]}, 2) == "feature 2"  # the default names add nothing
    assert feature_label({}, 7) == "feature 7"


def test_json_values_carry_no_float32_noise() -> None:
    rng = np.random.default_rng(0)
    f32 = rng.normal(size=200).astype(np.float32)
    f64 = rng.normal(size=200)
    out = without_float32_noise({"a": [float(v) for v in f32], "b": f64.tolist(), "c": {"d": np.float32(0.8)},
                                 "n": 3, "s": "x", "z": 0.0, "tiny": float(np.float32(3e-7)), "inf": float("inf")})
    assert out["c"]["d"] == 0.8 and json.dumps(without_float32_noise(float(np.float32(0.8)))) == "0.8"
    assert np.array_equal(np.array(out["a"], dtype=np.float32), f32)  # the same float32 values read back
    assert all(len(repr(v)) <= len(repr(float(w))) for v, w in zip(out["a"], f32, strict=True))
    assert out["b"] == f64.tolist()  # float64 values are not float32s: unchanged
    assert out["n"] == 3 and out["s"] == "x" and out["z"] == 0.0 and out["inf"] == float("inf")
    assert out["tiny"] == 3e-7


def test_a_bar_over_an_upper_bound_predicts_no_end() -> None:
    pytest.importorskip("tqdm")
    from tunemix.train.parallel import progress_bar

    bar = progress_bar(100_000, "boosting iterations", True, unit="it", upper_bound=True)
    bar.fp = io.StringIO()
    bar.update(10)
    text = str(bar)
    bar.close()
    assert "10 of at most 100000 it" in text and "<" not in text  # tqdm writes the time left after '<'
    exact = progress_bar(4, "jobs", True)
    exact.update(1)
    assert "<" in str(exact)
    exact.close()
