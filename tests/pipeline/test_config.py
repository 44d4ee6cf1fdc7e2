from __future__ import annotations

from pathlib import Path

import pytest

from tunemix.train.config import ConfigError, load_config


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "c.toml"
    p.write_text(text)
    return p


def test_defaults_and_grid_expansion(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, """
name = "x"
[data.synthetic]
queries = [10, 5, 5]
[[members.adaboost]]
base = "tree"
n_leaves = [8, 64]
search = ["full", "ucb1"]
checkpoints = [10, 30]
"""))
    grid = cfg.adaboost_grid()
    assert len(grid) == 4
    assert {(g["n_leaves"], g["search"]) for g in grid} == {(8, "full"), (8, "ucb1"), (64, "full"), (64, "ucb1")}
    assert all(g["checkpoints"] == [10, 30] for g in grid)
    assert cfg.mixer.convention == "yahoo"


def test_relative_paths_resolve_against_the_config(tmp_path: Path) -> None:
    (tmp_path / "t.txt").write_text("1 qid:1 1:1\n")
    cfg = load_config(write(tmp_path, 'name = "x"\n[data]\ntrain = "t.txt"\nvali = "t.txt"\n'))
    assert cfg.data.train == str(tmp_path / "t.txt")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('name = "x"\nbogus = 1\n[data.synthetic]\n', "unknown key"),
        ('name = "x"\n[data]\ntrain = "a"\n', "vali is required"),
        ('name = "x"\n', "needs train"),
        ('name = "x"\n[data.synthetic]\n[members]\nviews = ["pca"]\n', "unknown view"),
        ('name = "x"\n[data.synthetic]\n[mixer]\nconvention = "galago"\n', "convention"),
        ('name = "x"\n[data.synthetic]\n[mixer]\nmeasure = "ndcg@"\n', "measure"),
        ('name = "x"\n[data.synthetic]\n[run]\nbackend = "spark"\n', "backend"),
        ('name = "../x"\n[data.synthetic]\n', "name"),
        ('name = "x"\n[data.synthetic]\n[[members.adaboost]]\nleaves = 8\n', "unknown key"),
        ('name = "x"\n[data.synthetic\n', "c.toml"),
        ('name = "x"\n[data.synthetic]\nqueries = [10, 5]\n', "3 numbers"),
        ('name = "x"\n[data.synthetic]\ndocs_per_query = [1, 2, 3]\n', r"\[lo, hi\]"),
    ],
)
def test_config_errors_name_the_key(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(write(tmp_path, text))


@pytest.mark.parametrize(("text", "words"), [
    ('seed = "zero"\n', ["cfg.toml", "seed must be int", "str 'zero'"]),
    ('[members]\nviews = "raw"\n', ["cfg.toml", "[members] views must be list of str"]),
    ("[run]\nn_jobs = 2.5\n", ["[run] n_jobs must be int", "float 2.5"]),
    ("[run]\nn_jobs = true\n", ["[run] n_jobs must be int", "bool"]),
    ('[mixer]\nrescale = 3\n', ["[mixer] rescale must be str or null"]),
    ("[data.synthetic]\nqueries = [1, 2, 'x']\n", ["[data.synthetic] queries must be list of int"]),
    ("colour = 1\n", ["cfg.toml", "unknown key(s) in [top level]: colour"]),
])
def test_a_wrong_type_names_the_key_the_type_and_the_file(tmp_path: Path, text: str, words: list[str]) -> None:
    """No traceback from deep inside the trainer: the key, the expected type and the file."""
    path = tmp_path / "cfg.toml"
    path.write_text(text + '[data.synthetic]\nfeatures = 5\n' if "data.synthetic" not in text else text)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    for w in words:
        assert w in str(err.value), (w, str(err.value))


def test_numbers_fit_float_fields(tmp_path: Path) -> None:
    path = tmp_path / "cfg.toml"
    path.write_text("[data.synthetic]\nnoise = 1\n[run]\ncalibration_fraction = 0.25\n")
    assert load_config(path).data.synthetic.noise == 1  # type: ignore[union-attr]
