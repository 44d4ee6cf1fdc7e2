"""Names from data and configuration (feature names, qids, docids, the model's, data paths, run
tags and member names) are written as literal text in report.md, the plots and ``tunemix train``'s
summary, and a feature name that cannot be is refused when the configuration is read, before any
training."""

from __future__ import annotations

import copy
import io
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from markdown_it import MarkdownIt

from tests.conftest import tiny_config
from tunemix.cli import train as train_cli
from tunemix.train.config import ConfigError, load_config
from tunemix.train.importance import explanation_lines, importance_plot
from tunemix.train.members.names import MAX_NAME_LENGTH, md_code, md_text, plain_text, plot_text
from tunemix.train.report import render_markdown
from tunemix.train.train import train

HOSTILE = ["$\\foo$", "<img src=x onerror=alert(1)>", "a|b", "`tick`", "*em* _u_ [l](http://x) #h",
           "back\\slash", "$5 and $6", "ünï cödé ✓"]

#: the tiny configuration (tests/conftest.py) with plots and without a relevance head
CONFIG = {"name": "names", "seed": 1, "run.report_plots": True, "relevance.enabled": False}


def config(directory: Path, names: list[str] | str, n: int) -> Path:
    """The configuration with ``[data] feature_names`` (a list, or a file) for ``n`` features."""
    return tiny_config(directory, {**CONFIG, "data.feature_names": names, "data.synthetic.features": n}, "c.toml")


def _cells(md: str) -> list[list[str]]:
    """The text of every table cell, per row, as GitHub-flavoured Markdown renders it."""
    tokens = MarkdownIt("commonmark").enable("table").parse(md)
    rows, row = [], None
    for t in tokens:
        if t.type == "tr_open":
            row = []
        elif t.type == "inline" and row is not None:
            row.append("".join(c.content for c in t.children or [] if c.type in ("text", "code_inline")))
        elif t.type == "tr_close":
            rows.append(row)
            row = None
    return rows


def test_md_text_renders_every_hostile_name_literally_in_one_cell() -> None:
    md = "| feature | value |\n|---|---|\n" + "".join(f"| {md_text(n)} | 1 |\n" for n in HOSTILE)
    rows = _cells(md)
    assert rows[1:] == [[n, "1"] for n in HOSTILE]
    html = MarkdownIt("commonmark").enable("table").render(md)
    assert "<img" not in html and "<em>" not in html and "<a " not in html and "<code>" not in html
    assert md_text("a\x1bb\u2028") == "a\\u001bb\\u2028"


def test_md_code_renders_every_hostile_name_as_one_code_span() -> None:
    names = [*HOSTILE, "x``y", "` lead", "trail `", "a\\|b"]
    md = "| name | value |\n|---|---|\n" + "".join(f"| {md_code(n, in_table=True)} | 1 |\n" for n in names)
    assert _cells(md)[1:] == [[n, "1"] for n in names]
    tokens = MarkdownIt("commonmark").parse("\n\n".join(md_code(n) for n in names))
    spans = [[c.content for c in t.children or []] for t in tokens if t.type == "inline"]
    assert spans == [[n] for n in names]
    assert md_code("a\nb") == "`a\\u000ab`"


def test_plot_text_draws_mathtext_names_literally() -> None:
    record = {"explanations": {"top_per_query": 5, "queries": 3, "split": "test",
                               "importance": [{"feature": n, "mean_abs_contribution": 1.0 / (i + 1)}
                                              for i, n in enumerate(HOSTILE)]}}
    fig = importance_plot(record)
    fig.savefig(io.BytesIO(), format="png")  # mathtext would raise on $\foo$ here
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert labels == [plot_text(n) for n in HOSTILE][::-1]
    assert plot_text("$\\foo$") == "\\$\\foo\\$"


def test_the_explanation_section_escapes_qids_docids_and_features() -> None:
    contributions = [{"feature": n, "value": 1.0, "value_a": 1.0, "value_b": 0.0, "contribution": 0.1}
                     for n in HOSTILE]
    record = {"explanations": {
        "reference": "the median", "top_per_query": 5, "queries": 3, "split": "test", "documents": 15,
        "exact_share": 1.0, "budget": 100,
        "importance": [{"feature": n, "mean_abs_contribution": 0.5} for n in HOSTILE],
        "example": {"qid": "q|1", "docid": "<b>d</b>", "score": 1.0, "baseline": 0.5, "rest": 0.0,
                    "contributions": contributions},
        "pair": {"qid": "`q`", "a": "a|b", "b": "$x$", "score_difference": 0.1, "baseline": 0.0, "rest": 0.0,
                 "contributions": contributions}}}
    md = "\n".join(explanation_lines(record))
    rows = _cells(md)
    assert all(len(r) == len(rows[0]) or len(r) in (3, 4) for r in rows)
    assert [r[0] for r in rows if len(r) == 2][1:] == HOSTILE
    assert ["feature", "a|b", "$x$", "contribution to the difference"] in rows
    html = MarkdownIt("commonmark").enable("table").render(md)
    assert "<b>" not in html and "<img src=x" not in html


@pytest.mark.parametrize(("name", "message"), [
    ("a\x07b", "printable characters only"),
    ("", "must not be empty"),
    ("x" * (MAX_NAME_LENGTH + 1), f"at most {MAX_NAME_LENGTH} characters"),
    ("line\u2028break", "printable characters only"),
])
def test_a_bad_name_is_refused_when_the_config_is_read(tmp_path: Path, name: str, message: str) -> None:
    names = ["f1", name, "f3"]
    config(tmp_path, names, 3)
    with pytest.raises(ConfigError, match=r"\[data\] feature_names\[1\]: a feature name .*" + message):
        load_config(tmp_path / "c.toml")


def test_a_repeated_name_in_a_file_is_refused_with_its_line(tmp_path: Path) -> None:
    (tmp_path / "names.txt").write_text("a\nb\na\n")
    config(tmp_path, "names.txt", 3)
    with pytest.raises(ConfigError, match=r"names.txt, line 3: feature name 'a' repeats .*line 1"):
        load_config(tmp_path / "c.toml")


def test_reproduction_9_hostile_names_train_and_are_written_literally(tmp_path: Path) -> None:
    config(tmp_path, HOSTILE, len(HOSTILE))
    cfg = load_config(tmp_path / "c.toml", {"run.models_dir": str(tmp_path / "models")})
    out = train(cfg, progress=False)
    path = Path(out.path)
    assert (path / "importance.png").stat().st_size > 1000
    md = (path / "report.md").read_text()
    html = MarkdownIt("commonmark").enable("table").render(md)
    assert "<img src=x" not in html
    shown = {r[0] for r in _cells(md) if len(r) == 2}
    assert set(HOSTILE) <= shown


# ---------------------------------------------------------------------------- report.md and the summary
LINKS = ["[x](javascript:alert(1))", "<javascript:alert(1)>", "<b>bold</b>", "x\n# heading", "`a|b`"]


@pytest.fixture(scope="module")
def trained_record(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    """A tiny model's training record (and its version directory), to be given hostile names."""
    tmp = tmp_path_factory.mktemp("record")
    path = tiny_config(tmp, {**CONFIG, "run.report_plots": False}, "c.toml")
    out = train(load_config(path, {"run.models_dir": str(tmp / "models")}), progress=False)
    assert out.record.get("best_feature"), "the tiny model's record names a best single feature"
    return out.record, Path(out.path)


def _hostile_record(record: dict[str, Any], name: str, feature: int) -> dict[str, Any]:
    """``record`` with ``name`` as the best feature's name, the model's, a data path, a run tag and
    the best member's."""
    rec = copy.deepcopy(record)
    names = [f"f{j + 1}" for j in range(len(rec.get("feature_names") or [1] * feature))]
    names[feature - 1] = name
    rec["feature_names"] = names
    rec["best_feature"]["feature"] = feature
    rec["config"]["name"] = name
    rec["data"][0]["path"] = name
    rec["runs"][0]["tag"] = name
    rec["best_member"]["name"] = name
    for row in rec.get("member_types") or []:
        row["best_member"] = name
    return rec


@pytest.mark.parametrize("name", [*HOSTILE, *LINKS])
def test_report_md_writes_every_user_given_name_literally(trained_record: tuple[dict[str, Any], Path],
                                                          name: str) -> None:
    """The best single feature's name, the model's name, data paths, run tags and member names
    render as text: no HTML, link, emphasis or heading of their own, and a table keeps its columns."""
    record, _ = trained_record
    md = render_markdown(_hostile_record(record, name, feature=2))
    tokens = MarkdownIt("commonmark").enable("table").parse(md)
    plain = MarkdownIt("commonmark").enable("table").parse(render_markdown(_hostile_record(record, "x", feature=2)))
    # the same structure as with a plain name: no element of the name's own
    assert [(t.type, t.tag) for t in tokens] == [(t.type, t.tag) for t in plain]
    for t, p in zip(tokens, plain, strict=True):
        assert [(c.type, c.tag) for c in t.children or []] == [(c.type, c.tag) for c in p.children or []]
    html = MarkdownIt("commonmark").enable("table").render(md)
    assert "javascript:" not in html or 'href="javascript' not in html
    line = plain_text(name)  # a line break in a name is written as its code, on the name's line
    texts = ["".join(c.content for c in t.children or [] if c.type in ("text", "code_inline"))
             for t in tokens if t.type == "inline"]
    best = next(t for t in texts if t.startswith("Best single feature"))
    assert f"feature 2 ({line})" in best, best
    assert any(t == f"Training report: {line}" for t in texts), texts[0]
    assert any(f"Best single member on validation: {line} " in t for t in texts)
    rows = _cells(md)
    assert any(r and r[0] == line for r in rows), "the run table's tag cell"
    widths = {len(r) for r in rows if r and r[0] == line}
    assert widths == {5}, widths  # the run table's five columns


def test_the_summary_writes_names_as_one_line_of_printable_text(trained_record: tuple[dict[str, Any], Path]) -> None:
    record, path = trained_record
    plain = train_cli._summary(SimpleNamespace(record=record, path=path))
    rec = _hostile_record(record, "x\n\x1b[31mred\u202e", feature=1)
    text = train_cli._summary(SimpleNamespace(record=rec, path=path))
    assert "\x1b" not in text and "\u202e" not in text and text.count("\n") == plain.count("\n")
    assert "best single feature: feature 1 (x\\u000a\\u001b[31mred\\u202e)" in text
