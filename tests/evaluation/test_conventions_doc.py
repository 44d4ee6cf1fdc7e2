"""docs/conventions.md holds the table the code generates: the page cannot drift from the code."""

from __future__ import annotations

from pathlib import Path

from tunemix.core.evaluation.conventions import CONVENTION_NAMES, conventions_table

DOC = Path(__file__).resolve().parents[2] / "docs" / "conventions.md"


def test_the_doc_has_the_generated_table() -> None:
    text = DOC.read_text()
    assert conventions_table() in text
    for name in CONVENTION_NAMES:
        assert f"- **{name}**" in text, name
