"""The training report's plots and words: the grid marks the chosen point, coinciding convention
curves share a legend entry, and a mix below its best member on validation is explained."""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import pytest

from tunemix.train.report import mix_explanation, render_plots


def _record(c: float, val: float, best: float) -> dict[str, Any]:
    rows = {conv: {f"ndcg@{k}": 0.5 + 0.01 * k for k in range(1, 11)} for conv in ("letor4", "mslr", "yahoo")}
    rows["yahoo"] = {f"ndcg@{k}": 0.7 + 0.01 * k for k in range(1, 11)}
    return {
        "members": [{"omega": w} for w in (0.70, 0.72, 0.75)],
        "mixer": {"name": "exp_forecaster", "measure": "ndcg@10", "convention": "yahoo", "c": c,
                  "omega_min": -np.inf, "validation_quality": val, "kept": [True, True, True],
                  "grid": {"c": [0.0, 1.0, 2.0, 5.0], "omega_min": [-np.inf, *np.linspace(0.70, 0.75, 30)],
                           "quality": np.random.default_rng(0).random((4, 31)).tolist()}},
        "best_member": {"name": "m3", "omega": best},
        "evaluation": {"test": {"ensemble": rows}},
    }


def test_the_plots_are_written_and_the_chosen_point_is_marked() -> None:
    pytest.importorskip("matplotlib")
    import matplotlib.image as mpimg

    out = render_plots(_record(0.0, 0.74, 0.75))
    assert {"omega.png", "ndcg_by_convention.png", "grid.png"} <= set(out)
    for png in out.values():
        assert mpimg.imread(io.BytesIO(png)).shape[0] > 100
    with_marker, without = out["grid.png"], render_plots({**_record(0.0, 0.74, 0.75), "mixer": {
        **_record(0.0, 0.74, 0.75)["mixer"], "c": None}})["grid.png"]
    assert with_marker != without  # the star is drawn only where a point was chosen


def test_the_relevance_section_and_its_reliability_diagram() -> None:
    pytest.importorskip("matplotlib")
    from tunemix.train.relevance.fit import relevance_metrics
    from tunemix.train.report import relevance_lines

    rng = np.random.default_rng(1)
    probs = rng.dirichlet([2, 1, 1], size=400)
    labels = np.array([rng.choice(3, p=p) for p in probs])
    head = {"measured_on": "test", "models": [{"iterations": 41}, {"iterations": 73}],
            "recalibration": {"gain": 0.05, "standard_error": 0.01, "applied": True},
            **relevance_metrics(probs, labels)}
    record = {**_record(1.0, 0.76, 0.75), "relevance_head": head}
    assert "reliability.png" in render_plots(record)
    text = "\n".join(relevance_lines(record))
    assert "Brier score" in text and "| 0.5 |" in text and "| 0.9 |" in text
    assert "2 McRank models" in text and "41, 73" in text and "then recalibrated per grade" in text
    head["recalibration"]["applied"] = False
    assert "no recalibration" in "\n".join(relevance_lines(record))


def test_a_mix_below_its_best_member_is_explained() -> None:
    why = mix_explanation(_record(0.0, 0.74, 0.75))
    assert why is not None and "uniform mix" in why and "0.7400" in why and "0.7500" in why
    assert "c = 2" in (mix_explanation(_record(2.0, 0.74, 0.75)) or "")
    assert mix_explanation(_record(1.0, 0.76, 0.75)) is None
