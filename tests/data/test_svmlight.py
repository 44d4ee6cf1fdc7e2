from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.data.naive_svmlight import naive_read
from tunemix.core.data.dataset import RankingData
from tunemix.core.data.svmlight import DataFormatError, DataWidthWarning, read_svmlight, write_svmlight
from tunemix.train.data.synthetic import make_synthetic

SAMPLE = """\
2 qid:10 1:0.5 3:-1.25e-2 #docid = GX-1 inc = 1
0 qid:10 2:7 #docid = GX-2

# a comment line
1 qid:11 1:1e3 2:.5 3:-0.0 #docid=GX-3
0 qid:12 3:42
"""


def write(tmp_path: Path, text: str, name: str = "d.txt") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_reads_hand_example(tmp_path: Path) -> None:
    data = read_svmlight(write(tmp_path, SAMPLE))
    assert data.n_docs == 4 and data.n_features == 3
    assert data.labels.tolist() == [2, 0, 1, 0]
    assert data.query_offsets.tolist() == [0, 2, 3, 4]
    assert data.qids.tolist() == ["10", "11", "12"]
    assert data.docids is not None
    assert data.docids.tolist() == ["GX-1", "GX-2", "GX-3", ""]
    expected = np.array(
        [[0.5, 0, -0.0125], [0, 7, 0], [1000, 0.5, 0], [0, 0, 42]], dtype=np.float32
    )
    np.testing.assert_array_equal(data.features, expected)


def test_matches_slow_twin_on_random_file(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    lines = []
    for q in range(40):
        for _ in range(rng.integers(1, 8)):
            ids = np.sort(rng.choice(np.arange(1, 60), size=rng.integers(0, 12), replace=False))
            vals = rng.standard_normal(ids.size) * 10.0 ** rng.integers(-4, 4, size=ids.size)
            feats = " ".join(f"{i}:{v:.6g}" for i, v in zip(ids, vals, strict=True))
            lines.append(f"{rng.integers(0, 5)} qid:q{q} {feats} #docid = d{len(lines)}")
    text = "\n".join(lines) + "\n"
    data = read_svmlight(write(tmp_path, text))
    x, labels, qids, sizes, docids = naive_read(text)
    np.testing.assert_array_equal(data.features[:, : x.shape[1]], x)
    np.testing.assert_array_equal(data.labels, labels)
    assert data.qids.tolist() == qids
    assert data.query_sizes.tolist() == sizes
    assert data.docids is not None and data.docids.tolist() == docids


def test_write_read_round_trip_is_exact(tmp_path: Path) -> None:
    data = make_synthetic(n_queries=20, docs_per_query=(1, 9), n_features=7, seed=3)
    path = tmp_path / "rt.txt"
    write_svmlight(data, path)
    back = read_svmlight(path)
    np.testing.assert_array_equal(back.features, data.features)
    np.testing.assert_array_equal(back.labels, data.labels)
    np.testing.assert_array_equal(back.query_offsets, data.query_offsets)
    assert back.qids.tolist() == data.qids.tolist()
    assert back.docids is not None and data.docids is not None
    assert back.docids.tolist() == data.docids.tolist()


def test_lightgbm_style_with_query_file(tmp_path: Path) -> None:
    data = make_synthetic(n_queries=5, docs_per_query=(2, 4), n_features=4, seed=1)
    path = tmp_path / "lgb.txt"
    write_svmlight(data, path, write_qid=False)
    assert "qid:" not in path.read_text()
    back = read_svmlight(path)  # picks up lgb.txt.query
    np.testing.assert_array_equal(back.query_offsets, data.query_offsets)
    np.testing.assert_array_equal(back.features, data.features)


def test_query_file_size_mismatch(tmp_path: Path) -> None:
    path = write(tmp_path, "1 1:0.5\n0 1:0.1\n")
    (tmp_path / "d.txt.query").write_text("3\n")
    with pytest.raises(DataFormatError, match="group sizes add up to 3"):
        read_svmlight(path)


def test_n_features_pads_and_rejects(tmp_path: Path) -> None:
    path = write(tmp_path, "1 qid:1 2:0.5\n")
    with pytest.warns(DataWidthWarning, match=r"largest feature id is 2 but 5 features are expected") as seen:
        assert read_svmlight(path, n_features=5).features.shape == (1, 5)
    assert "features 3-5 are read as 0" in str(seen[0].message) and str(path) in str(seen[0].message)
    with pytest.raises(DataFormatError, match=r"feature id 2 is larger than the number of features: "
                                              r"the model takes 1 \(ids 1-1\)"):
        read_svmlight(path, n_features=1)


def test_a_file_as_wide_as_the_model_reads_without_a_warning(tmp_path: Path) -> None:
    import warnings

    path = write(tmp_path, "1 qid:1 2:0.5\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert read_svmlight(path, n_features=2).features.shape == (1, 2)
        assert read_svmlight(path).features.shape == (1, 2)


def test_a_misspelt_qid_is_named_as_such(tmp_path: Path) -> None:
    path = write(tmp_path, "1 qid:1 1:0.5\n0 qdi:1 1:0.2\n")
    with pytest.raises(DataFormatError, match=r"unknown key 'qdi' in 'qdi:1' \(did you mean qid:\?\)") as info:
        read_svmlight(path)
    assert (info.value.line, info.value.column) == (2, 3)


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ("1 qid:1 1:0.5\nx qid:1 1:0.2\n", 2, "label is not an integer"),
        ("1 qid:1 1:0.5\n1.5 qid:1 1:0.2\n", 2, "label is not an integer"),
        ("-1 qid:1 1:0.5\n", 1, "label is negative"),
        ("1 qid:1 1:0.5\n0 1:0.2\n", 2, "no qid"),
        ("1 qid:1 1:0.5\n1 qid:2 1:0.5\n1 qid:1 1:0.5\n", 3, "two separate blocks"),
        ("1 qid:1 1:0.5 2\n", 1, "malformed"),
        ("1 qid:1 1:\n", 1, "malformed"),
        ("1 qid:1 1:abc\n", 1, "not a number"),
        ("1 qid:1 1:nan\n", 1, "NaN or infinite"),
        ("1 qid:1 1:inf\n", 1, "NaN or infinite"),
        ("1 qid:1 1:1e999\n", 1, "NaN or infinite"),
        ("1 qid:1 0:0.5\n", 1, "positive integer"),
        ("1 qid:1 -3:0.5\n", 1, "positive integer"),
        ("1 qid:1 a:0.5\n", 1, "unknown key 'a' in 'a:0.5'"),
        ("1 qid:1 1:abc\n", 1, "found 'abc'"),
        ("1 qid:1 2:0.5 2:0.7\n", 1, "appears twice"),
        ("1 qid: 1:0.5\n", 1, "qid: has no value"),
    ],
)
def test_errors_name_file_and_line(tmp_path: Path, text: str, line: int, message: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(DataFormatError, match=message) as info:
        read_svmlight(path)
    assert info.value.line == line
    assert str(path) in str(info.value)


def test_empty_and_missing_files(tmp_path: Path) -> None:
    with pytest.raises(DataFormatError, match="no data lines"):
        read_svmlight(write(tmp_path, "# only a comment\n\n"))
    with pytest.raises(FileNotFoundError, match="no such data file"):
        read_svmlight(tmp_path / "absent.txt")


def test_crlf_and_no_trailing_newline(tmp_path: Path) -> None:
    data = read_svmlight(write(tmp_path, "1 qid:1 1:0.5\r\n0 qid:1 1:0.25"))
    assert data.features[:, 0].tolist() == [0.5, 0.25]


def test_reads_mq2008(mq2008_fold1: Path) -> None:
    data = read_svmlight(mq2008_fold1 / "train.txt")
    assert (data.n_docs, data.n_queries, data.n_features) == (9630, 471, 46)
    assert data.docids is not None and data.docids[0] == "GX008-86-4444840"
    assert isinstance(data, RankingData)
