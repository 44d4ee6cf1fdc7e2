"""Shared fixtures. ../shared/data is only for benchmark-style tests; they skip when it is absent."""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]

# `tunemix train`/`demo` warm a cold numba cache first (tunemix.compile.warm); the suite's own
# runs do not (make test runs `tunemix warm` before pytest; tests/test_warm.py tests the step)
os.environ.setdefault("TUNEMIX_AUTO_WARM", "0")
SHARED_DATA = Path(os.environ.get("TUNEMIX_SHARED_DATA", ROOT.parent / "shared" / "data"))


@pytest.fixture
def mq2008_fold1() -> Path:
    path = SHARED_DATA / "MQ2008" / "Fold1"
    if not (path / "train.txt").exists():
        pytest.skip(f"MQ2008 not found at {path} (../shared/data is absent)")
    return path


#: The tiny training configuration: synthetic data of three grades, one run of 3-leaf AdaBoost.MH
#: trees on the raw features, the one-thread backend, no plots: a fit of a few seconds.
#: ``tiny_tables`` and ``tiny_config`` give it with changes.
TINY_CONFIG: dict[str, Any] = {
    "name": "tiny",
    "data": {"synthetic": {"queries": [20, 10, 10], "docs_per_query": [4, 9], "features": 5, "levels": 3,
                           "seed": 3}},
    "members": {"views": ["raw"], "label_groupings": ["original"], "calibrators": ["shift", "rbc:linear:gain"],
                "adaboost": [{"base": "tree", "n_leaves": 3, "n_iterations": 6, "checkpoints": [3, 6]}]},
    "mixer": {"compare": ["one_best"]},
    "run": {"backend": "sequential", "report_plots": False},
}


def tiny_tables(changes: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A copy of ``TINY_CONFIG`` with ``changes``: each dotted key (``"data.synthetic.features"``,
    ``"members.adaboost.0.views"``: a number picks a list entry) set to its value, or removed when
    the value is None.

    >>> tiny_tables({"run.backend": "threads", "mixer": None})["run"]["backend"]
    'threads'
    """
    tables = copy.deepcopy(TINY_CONFIG)
    for key, value in (changes or {}).items():
        *path, last = key.split(".")
        node: Any = tables
        for part in path:
            node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
        if isinstance(node, list):
            node[int(last)] = copy.deepcopy(value)
        elif value is None:
            node.pop(last, None)
        else:
            node[last] = copy.deepcopy(value)
    return tables


def toml_text(tables: Mapping[str, Any]) -> str:
    """``tables`` as TOML: plain values, tables and arrays of tables (what a training configuration
    holds). Strings and lists are written as JSON, which TOML reads as basic strings and arrays."""

    def value(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, list):
            return "[" + ", ".join(value(x) for x in v) + "]"
        return json.dumps(v, ensure_ascii=False)

    def table(prefix: str, t: Mapping[str, Any]) -> list[str]:
        plain = [f"{k} = {value(v)}" for k, v in t.items()
                 if not isinstance(v, Mapping) and not (isinstance(v, list) and v and isinstance(v[0], Mapping))]
        lines = ([f"[{prefix}]"] if prefix else []) + plain
        for k, v in t.items():
            name = f"{prefix}.{k}" if prefix else k
            if isinstance(v, Mapping):
                lines += table(name, v)
            elif isinstance(v, list) and v and isinstance(v[0], Mapping):
                for entry in v:
                    lines += [f"[[{name}]]", *table("", entry)]
        return lines

    return "\n".join(table("", tables)) + "\n"


def tiny_config(directory: Path, changes: Mapping[str, Any] | None = None, filename: str = "tiny.toml") -> Path:
    """``tiny_tables(changes)`` written as ``directory / filename``; its path."""
    path = Path(directory) / filename
    path.write_text(toml_text(tiny_tables(changes)), encoding="utf-8")
    return path
