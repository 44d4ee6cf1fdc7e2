"""docs/performance.md (and README.md's headline block, when it has one) hold the tables that
bench.tables writes from the tracked results: the figures cannot drift from their files."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import tables

ROOT = Path(__file__).resolve().parents[2]


def test_the_performance_page_has_the_generated_tables() -> None:
    expected = tables.expected()
    assert tables.PERFORMANCE.read_text() == expected[tables.PERFORMANCE], "run: python -m bench.tables"
    assert set(tables.blocks(tables.PERFORMANCE.read_text())) == set(tables.BY_NAME)


def test_the_readme_block_when_there_is_one() -> None:
    text = tables.README.read_text()
    if "readme" not in tables.blocks(text):
        pytest.skip("README.md has no <!-- table:readme --> block")
    assert text == tables.expected()[tables.README], "run: python -m bench.tables"


def test_the_readme_block_is_small() -> None:
    block = tables.readme_block()
    rows = [line for line in block.splitlines() if line.startswith("| ")]
    assert 3 <= len(rows) <= 8
    for row in rows:
        for cell in row.strip("|").split(" | "):
            assert len(cell.strip()) <= 160, cell


def test_check_passes_on_the_tree_and_fails_on_a_stale_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert tables.main(["--check"]) == 0
    stale = tmp_path / "performance.md"
    stale.write_text(tables.PERFORMANCE.read_text().replace("<!-- table:scale -->\n", "<!-- table:scale -->\nold\n"))
    monkeypatch.setattr(tables, "PERFORMANCE", stale)
    monkeypatch.setattr(tables, "ROOT", tmp_path)
    monkeypatch.setattr(tables, "README", tmp_path / "README.md")
    before = stale.read_text()
    assert tables.main(["--check"]) == 1
    assert stale.read_text() == before  # --check writes nothing
    assert "performance.md: differs" in capsys.readouterr().out
    assert tables.main([]) == 0
    assert "old\n" not in stale.read_text()
    assert tables.main(["--check"]) == 0


def test_rewrite_touches_only_the_blocks() -> None:
    text = "a\n<!-- table:x -->\nold\n<!-- /table -->\nb <!-- table:y -->\n<!-- /table -->\nc\n"
    out = tables.rewrite(text, lambda name: f"new {name}\n")
    assert out == "a\n<!-- table:x -->\nnew x\n<!-- /table -->\nb <!-- table:y -->\nnew y\n<!-- /table -->\nc\n"


def test_the_tracked_results_are_the_tables_files() -> None:
    """.gitignore ignores bench/results/ but for the files the tables read, and they are there."""
    exceptions = {line.removeprefix("!/bench/results/") for line in (ROOT / ".gitignore").read_text().splitlines()
                  if line.startswith("!/bench/results/")}
    assert exceptions == set(tables.TRACKED)
    assert len(tables.TRACKED) <= 10
    for name in tables.TRACKED:
        assert (tables.RESULTS / name).is_file(), name


def test_a_cell_is_the_median_of_the_runs_not_the_best() -> None:
    assert tables.median([0.7871, 0.7886, 0.788, 0.7904, 0.7857]) == 0.788
    side = {"rounds": [{"p50_ms": 1.0}, {"p50_ms": 3.0}, {"p50_ms": 2.0}]}
    assert tables.rounds_median(side, "p50_ms") == 2.0
    assert [tables.ms(x) for x in (0.1861, 1.473, 16.36, 148.1)] == ["0.186", "1.47", "16.4", "148"]
