"""Remarks a training report and ``tunemix train``'s summary add to the figures, so that a
reader does not have to infer them: the ensemble below its own best member, what a run's
"train error" is (and why LambdaMART and McRank have none), the best single feature by name, and
report values without float32 noise."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from tunemix.train.members.names import md_code, plain_text


def ensemble_below_best_member(record: dict[str, Any]) -> list[str]:
    """One sentence per split where the ensemble's figure (the mixer's measure and convention) is
    below the member that was best on validation: that member is known to be best only after the
    fact, on the validation queries; the mix was chosen there too (report.md, "Mixer")."""
    m = record["mixer"]
    measure, convention = m["measure"], m["convention"]
    best = record.get("best_member") or {}
    out = []
    for split, table in record.get("evaluation", {}).items():
        try:
            ens = float(table["ensemble"][convention][measure])
            member = float(table["best_member"][convention][measure])
        except (KeyError, TypeError, ValueError):
            continue
        if math.isfinite(ens) and math.isfinite(member) and ens < member:
            out.append(f"On {split} the ensemble ({measure} {ens:.4f}) scores below its best single member "
                       f"{md_code(best.get('name', '?'))} ({member:.4f}, {member - ens:.4f} more). That member was "
                       "the best on the validation queries, where the mix was tuned too; the mixers side by side in "
                       "report.md say whether another mix would have done better, and on a few hundred queries a "
                       "difference of this size is often within noise.")
    return out


#: what each member type's "train error" column holds
TRAIN_ERROR_NOTE = ("train error: AdaBoost.MH's weighted Hamming loss on the fit part after its last iteration; "
                    "LambdaMART and McRank (LightGBM) track no training error (n/a): they stop early on the "
                    "validation loss; the linear members report none either.")


def train_error_cell(value: Any) -> str:
    """The run table's train-error cell: the value, or ``n/a`` where the learner tracks none."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "n/a"
    return f"{value:.4f}" if isinstance(value, float) else str(value)


def feature_label(record: dict[str, Any], feature: int, write: Callable[[object], str] = plain_text) -> str:
    """``feature 5`` or, when the features were named, ``feature 5 (bm25)`` (1-based id); the name
    as ``write`` makes it literal (``tunemix.train.members.names``: one line of printable text by
    default, ``md_text`` for Markdown)."""
    names = record.get("feature_names") or []
    if 1 <= feature <= len(names) and names[feature - 1] != f"f{feature}":
        return f"feature {feature} ({write(names[feature - 1])})"
    return f"feature {feature}"


def without_float32_noise(obj: Any) -> Any:
    """``obj`` with every float that is exactly a float32 written as the shortest decimal that
    reads back to that float32 (``0.800000011920929`` -> ``0.8``): values that passed through
    float32 (feature thresholds, float32 scores) carry no digits beyond float32's precision.
    A float64 that is not exactly a float32 is left as it is."""
    if isinstance(obj, dict):
        return {k: without_float32_noise(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [without_float32_noise(v) for v in obj]
    if isinstance(obj, np.floating):
        obj = float(obj)
    if isinstance(obj, float) and math.isfinite(obj):
        f32 = np.float32(obj)
        if float(f32) == obj:
            short = float(np.format_float_positional(f32, unique=True, trim="-")) if abs(obj) >= 1e-4 or obj == 0 \
                else float(np.format_float_scientific(f32, unique=True))
            return short if np.float32(short) == f32 else obj
    return obj


def compile_lines(record: dict[str, Any]) -> list[str]:
    """The timings' share of numba compiling (or loading compiled kernels from its cache), so that
    a first run's slow stages are not read as work."""
    comp = record.get("numba_compile")
    if not comp:
        return []
    stages = ", ".join(f"{k} {v:.1f}" for k, v in sorted(comp.get("by_stage", {}).items(), key=lambda kv: -kv[1]))
    return ["", f"Of these, {comp['total_s']:.1f} s were numba compiling kernels or loading them from its disk cache "
                f"in this process{f' ({stages})' if stages else ''}: a first run on a cold cache pays it once "
                "(`tunemix warm` does so ahead); worker processes compile or load on their own."]
