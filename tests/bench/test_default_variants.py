"""bench.default_variants' member tables (no fits): 'before' is the old small-data default, and
'default' is what TuneMixRanker() trains."""

import pytest

from bench.default_variants import apply_variant
from tunemix.train.members.auto import DataShape, auto_members

SMALL = DataShape(n_docs=9_630, n_features=46, n_labels=3, n_queries=471, vali_queries=157)


def _runs(members: dict) -> list[tuple[int, float]]:
    return [(b["n_leaves"], b["learning_rate"]) for b in members["lambdamart"] + members["mcrank"]]


def test_the_variants_change_only_what_they_name() -> None:
    default = auto_members(SMALL, None)[0]
    assert apply_variant(default, "default") == default
    assert _runs(default) == [(31, 0.05), (15, 0.05), (7, 0.05), (31, 0.05)]
    assert _runs(apply_variant(default, "before")) == [(31, 0.1), (15, 0.1), (31, 0.1)]
    assert _runs(apply_variant(default, "rate")) == [(31, 0.05), (15, 0.05), (31, 0.05)]
    assert _runs(apply_variant(default, "third")) == [(31, 0.1), (15, 0.1), (7, 0.1), (31, 0.1)]
    svm = apply_variant(default, "before+svm+noab")
    assert svm["svm"] and svm["adaboost"] == [] and _runs(svm) == [(31, 0.1), (15, 0.1), (31, 0.1)]
    assert len(apply_variant(default, "rep2")["lambdamart"]) == 6
    assert default["adaboost"] and "svm" not in default  # the input is not changed
    with pytest.raises(ValueError, match="unknown variant"):
        apply_variant(default, "nonsense")
