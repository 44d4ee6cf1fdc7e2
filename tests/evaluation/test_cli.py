"""``tunemix evaluate`` as a function: table, JSON, plot, errors (exit 2, file and line)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tunemix.cli.evaluate import main

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
    for name in ("letor3", "letor4", "mslr", "yahoo", "ranklib", "trec", "lightgbm", "xgboost",
                 "sklearn", "ranx"):
        assert name in out
    assert "n/a" in out  # ndcg@12 is beyond letor4/mslr cutoffs
    assert "*" in out  # derived ERR under letor


def test_all_conventions_one_tool_refuses(tmp_path, capsys) -> None:
    """LightGBM stops on a label above 30: its column is n/a with the reason; the rest report."""
    data = tmp_path / "big.txt"
    data.write_text("31 qid:1 1:0.5\n0 qid:1 1:0.1\n")
    scores = tmp_path / "big.scores"
    scores.write_text("0.2\n0.1\n")
    assert main(["evaluate", "--data", str(data), "--scores", str(scores), "--convention", "all",
                 "--metrics", "ndcg@1"]) == 0
    out = capsys.readouterr().out
    assert "n/a under lightgbm:" in out and "above 30" in out
    assert main(["evaluate", "--data", str(data), "--scores", str(scores), "--convention", "all",
                 "--metrics", "ndcg@1", "--json"]) == 0
    conv = json.loads(capsys.readouterr().out)["conventions"]
    assert conv["lightgbm"]["mean"]["ndcg@1"] is None and "above 30" in conv["lightgbm"]["error"]
    assert conv["xgboost"]["mean"]["ndcg@1"] == 1.0  # XGBoost takes labels up to 31
    assert main(["evaluate", "--data", str(data), "--scores", str(scores), "--convention",
                 "lightgbm", "--metrics", "ndcg@1"]) == 2


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


# ------------------------------------------------ through the real entry point (tunemix.cli)
def _tunemix(argv: list[str]) -> int:
    from tunemix.cli import main as tunemix_main

    return tunemix_main(argv)


def test_entry_point_all_conventions_json_shape_and_values(files, capsys) -> None:
    import numpy as np

    from tunemix.core.evaluation import CONVENTION_NAMES, evaluate

    data, scores = files
    metrics = "ndcg@1,ndcg@3,err,p@2,map,meanndcg"
    assert _tunemix(["evaluate", "--data", str(data), "--scores", str(scores), "--convention", "all",
                     "--metrics", metrics, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert list(out) == ["conventions"]
    assert list(out["conventions"]) == list(CONVENTION_NAMES)
    labels = np.array([2, 0, 1, 0, 1])
    sc = np.array([0.1, 0.9, 0.5, -1.0, 2.0])
    off = np.array([0, 3, 5])
    for name, payload in out["conventions"].items():
        assert set(payload) == {"convention", "mean", "per_query", "derived", "warnings"}, name
        assert payload["convention"] == name
        assert list(payload["mean"]) == metrics.split(",")  # the order asked for
        direct = evaluate(labels, sc, off, metrics, name, docids=[f"d{i}" for i in range(1, 6)],
                          qids=["1", "2"])
        for m in metrics.split(","):
            assert set(payload["per_query"][m]) == {"1", "2"}
            for q, v in zip(("1", "2"), direct.per_query[m], strict=True):
                got = payload["per_query"][m][q]
                assert (got is None) if np.isnan(v) else got == pytest.approx(v, abs=1e-12), (name, m, q)
            assert payload["mean"][m] == pytest.approx(direct.mean[m], abs=1e-12), (name, m)
            assert payload["derived"][m] is direct.derived[m]
    # hand values: trec NDCG@3 of query 1 (ranked labels 0, 1, 2, linear gain)
    l3 = 1 / np.log2(3)
    assert out["conventions"]["trec"]["per_query"]["ndcg@3"]["1"] == pytest.approx((l3 + 1) / (2 + l3))
    # letor3 has no NDCG@3 for the 2-document query: null, counted 0 in the mean
    assert out["conventions"]["letor3"]["per_query"]["ndcg@3"]["2"] is None
    assert out["conventions"]["letor3"]["mean"]["ndcg@3"] == pytest.approx(
        out["conventions"]["letor3"]["per_query"]["ndcg@3"]["1"] / 2)


def test_entry_point_table_and_plot(files, tmp_path, capsys) -> None:
    data, scores = files
    png = tmp_path / "curves.png"
    assert _tunemix(["evaluate", "--data", str(data), "--scores", str(scores), "--convention", "all",
                     "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split() == ["measure", "letor3", "letor4", "mslr", "yahoo", "ranklib", "trec",
                                           "lightgbm", "xgboost", "sklearn", "ranx"]
    assert "(2 queries)" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 1000


def test_entry_point_plot_into_missing_directory_fails_before_output(files, tmp_path, capsys) -> None:
    data, scores = files
    assert _tunemix(["evaluate", "--data", str(data), "--scores", str(scores), "--plot",
                     str(tmp_path / "nope" / "x.png")]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "--plot" in captured.err and "does not exist" in captured.err


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("0.1\n0.2\n0.3\n0.4\n", "has 4 scores but"),  # one line short
        ("0.1\n0.2\n0.3\n0.4\n0.5\n0.6\n", "has 6 scores but"),  # one line too many
        ("0.1\n0.2\nabc\n0.4\n0.5\n", "line 3: expected one number per line, got 'abc'"),
        ("0.1\n0.2\n0.3\n\n0.5\n", "line 4: expected one number per line"),  # blank line inside
        ("0.1\n0.2\n0.3\n0.4\nNaN\n", "line 5: score 'NaN' is not finite"),
        ("0.1\n-inf\n0.3\n0.4\n0.5\n", "line 2: score '-inf' is not finite"),
        ("0.1\n0.2\n1_000\n0.4\n0.5\n", "line 3: score '1_000' is not a plain decimal number"),
        ("0.1\n0.2\n0.3\n0.4\n\u0661\n", "line 5: score '\u0661' is not a plain decimal number"),
    ],
)
def test_entry_point_bad_scores_files(files, tmp_path, capsys, text: str, message: str) -> None:
    data, _ = files
    bad = tmp_path / "bad.scores"
    bad.write_text(text, encoding="utf-8")
    assert _tunemix(["evaluate", "--data", str(data), "--scores", str(bad), "--convention", "all"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "bad.scores" in captured.err and message in captured.err, captured.err


def test_entry_point_accepts_tool_style_numbers(files, tmp_path, capsys) -> None:
    data, _ = files
    ok = tmp_path / "ok.scores"
    ok.write_text("1e-1\n+.9\n5E-1\r\n-1.\n 2 \n\n")  # exponents, signs, CRLF, padding, trailing blank
    assert _tunemix(["evaluate", "--data", str(data), "--scores", str(ok), "--metrics", "map",
                     "--convention", "letor4", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["mean"]["map"] == pytest.approx(((1 / 2 + 2 / 3) / 2 + 1.0) / 2)
