"""``tunemix evaluate`` as a function: table, JSON, plot, errors (exit 2, file and line)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from training.evaluation.cli import main

DATA = """2 qid:1 1:0.5 #docid = d1
0 qid:1 1:0.1 #docid = d2
1 qid:1 1:0.3 #docid = d3
0 qid:2 1:0.2 #docid = d4
1 qid:2 1:0.9 #docid = d5
"""
SCORES = "0.1\n0.9\n0.5\n-1\n2\n"


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    data = tmp_path / "test.txt"
    data.write_text(DATA)
    scores = tmp_path / "test.scores"
    scores.write_text(SCORES)
    return data, scores


def test_json_single_convention(files, capsys) -> None:
    data, scores = files
    code = main(["evaluate", "--data", str(data), "--scores", str(scores),
                 "--convention", "letor4", "--metrics", "ndcg@1,ndcg@3,map", "--json"])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    # q1 ranked labels 0, 1, 2 -> NDCG@1 0; q2 ranked 1, 0 -> NDCG@1 1; q2 has n < 3 -> 0.
    assert out["per_query"]["ndcg@1"] == {"1": 0.0, "2": 1.0}
    assert out["per_query"]["ndcg@3"]["2"] == 0.0
    assert out["mean"]["map"] == pytest.approx(((1 / 2 + 2 / 3) / 2 + 1.0) / 2)
    assert out["derived"]["map"] is False


def test_table_all_conventions(files, capsys) -> None:
    data, scores = files
    code = main(["evaluate", "--data", str(data), "--scores", str(scores),
                 "--convention", "all", "--metrics", "ndcg@12,err"])
    assert code == 0
    out = capsys.readouterr().out
    for name in ("letor3", "letor4", "mslr", "yahoo", "ranklib", "trec"):
        assert name in out
    assert "n/a" in out  # ndcg@12 is beyond letor4/mslr cutoffs
    assert "*" in out  # derived ERR under letor


def test_json_all_has_null_for_unsupported(files, capsys) -> None:
    data, scores = files
    assert main(["evaluate", "--data", str(data), "--scores", str(scores), "--convention",
                 "all", "--metrics", "ndcg@12", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)["conventions"]
    assert out["letor4"]["mean"]["ndcg@12"] is None
    assert out["letor3"]["per_query"]["ndcg@12"] == {"1": None, "2": None}
    assert out["yahoo"]["mean"]["ndcg@12"] is not None


def test_plot(files, tmp_path, capsys) -> None:
    data, scores = files
    png = tmp_path / "ndcg.png"
    assert main(["evaluate", "--data", str(data), "--scores", str(scores), "--plot",
                 str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bad_score_line(files, tmp_path, capsys) -> None:
    data, _ = files
    bad = tmp_path / "bad.scores"
    bad.write_text("0.1\n0.2\nnope\n0.3\n0.4\n")
    assert main(["evaluate", "--data", str(data), "--scores", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "bad.scores: line 3" in err


def test_score_count_mismatch(files, tmp_path, capsys) -> None:
    data, _ = files
    short = tmp_path / "short.scores"
    short.write_text("0.1\n0.2\n")
    assert main(["evaluate", "--data", str(data), "--scores", str(short)]) == 2
    assert "has 2 scores" in capsys.readouterr().err


def test_unsupported_cutoff_single_convention(files, capsys) -> None:
    data, scores = files
    assert main(["evaluate", "--data", str(data), "--scores", str(scores), "--convention",
                 "letor4", "--metrics", "ndcg@11"]) == 2
    assert "1..10" in capsys.readouterr().err


def test_bad_metric_and_missing_file(files, tmp_path, capsys) -> None:
    data, scores = files
    assert main(["evaluate", "--data", str(data), "--scores", str(scores), "--metrics",
                 "ndgc@10"]) == 2
    assert "--metrics" in capsys.readouterr().err
    assert main(["evaluate", "--data", str(tmp_path / "none.txt"), "--scores",
                 str(scores)]) == 2
    assert "none.txt" in capsys.readouterr().err


def test_err_label_error_names_file_and_query(tmp_path, capsys) -> None:
    data = tmp_path / "d.txt"
    data.write_text("5 qid:7 1:1\n0 qid:7 1:2\n")
    scores = tmp_path / "s.txt"
    scores.write_text("1\n2\n")
    assert main(["evaluate", "--data", str(data), "--scores", str(scores), "--metrics",
                 "err"]) == 2
    err = capsys.readouterr().err
    assert "d.txt" in err and "query '7'" in err
