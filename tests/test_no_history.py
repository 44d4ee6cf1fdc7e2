"""The package's comments and docstrings say what the code does and why, in the present tense; the
story of a change (the issue, the run that decided it, the results file) belongs in the commit
message (docs: the house style's "Where history lives"). This scan fails on the marks such a story
leaves: an issue number, a run or session label, a results file."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: each pattern with what it stands for (case-insensitive)
PATTERNS = {
    "an issue number": re.compile(r"\bissues? #?\d+", re.IGNORECASE),
    "a run or session label": re.compile(r"\b(session|run|helper|round)\s?\d+[a-z]?\b", re.IGNORECASE),
    "a run label in a file name": re.compile(r"_s\d+_"),
    "a results file": re.compile(r"bench/results/"),
}

def scanned_files() -> list[Path]:
    """Every module of the package, the packaged default configuration and pyproject.toml."""
    files = sorted((ROOT / "tunemix").rglob("*.py"))
    files += [ROOT / "tunemix" / "train" / "default.toml", ROOT / "pyproject.toml"]
    return files


def history_marks(text: str) -> list[tuple[int, str, str]]:
    """(line number, what was found, the line) for every line of ``text`` that matches a pattern."""
    found = []
    for number, line in enumerate(text.splitlines(), start=1):
        for what, pattern in PATTERNS.items():
            if pattern.search(line):
                found.append((number, what, line.strip()))
    return found


@pytest.mark.parametrize("line", [
    "whole default fit (issue 39: MQ2008, 5.6 s a fold; the LightGBM runs could not start before it",
    '"""``POST /rank`` handed straight to its route function, past FastAPI\'s routing (issue 37\'s p50).',
    "#: 25.5 (bench/results/request_cost.json: 4 MiB of empty /rank rows, 102 MB; a body of many small",
    "    shared 2-core machine (helper 38f, load 4-6), not a limit of about 100 us).",
    "measured in session 14 against run3 (explain_lane_s15_before.json)",
])
def test_the_patterns_find_the_marks_of_history(line: str) -> None:
    """Lines of the kind the package held before its history moved to the commit messages."""
    assert history_marks(line), line


@pytest.mark.parametrize("line", [
    "numba/numba#10128 is the same race for gufuncs",
    "each run holds its LightGBM dataset meanwhile",
    "measured: python -m bench.bench_request_cost",
    "fit_runs(prep, specs, n_jobs=2)",
])
def test_the_patterns_leave_present_tense_text_alone(line: str) -> None:
    assert not history_marks(line), line


def test_the_package_tells_no_history() -> None:
    files = scanned_files()
    assert len(files) > 100, "the scan found too few files"
    marks = [f"{path.relative_to(ROOT)}:{number}: {what}: {line}"
             for path in files
             for number, what, line in history_marks(path.read_text(encoding="utf-8"))]
    assert not marks, ("comments and docstrings say what the code does and why, in the present tense; "
                       "the story goes in the commit message:\n" + "\n".join(marks))
