"""A new user's first hour (issue 40): the library's threading floor, ``predict`` without
``group`` on a list-dependent model, the chosen members on the fitted ranker, and the CLI's
messages (a closed pipe, ``--doc`` forms, a file narrower than the model, a misspelt ``qid:``,
``tunemix serve``'s address)."""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tunemix
from tunemix.core.data.svmlight import write_svmlight
from tunemix.core.scoring import forest, runtime
from tunemix.train.data.synthetic import make_synthetic_splits

ROOT = Path(__file__).resolve().parents[1]

#: a small model with a query-wise view (raw+std) and the default per-query rescaled mix
TABLES: dict[str, Any] = {
    "name": "first",
    "members": {"views": ["raw", "raw+std"], "label_groupings": ["original"],
                "calibrators": ["shift", "rbc:linear:gain"],
                "adaboost": [{"base": "tree", "n_leaves": 3, "n_iterations": 8, "checkpoints": [4, 8]}]},
    "run": {"backend": "sequential", "report_plots": False},
}


@pytest.fixture(scope="module")
def sets() -> dict[str, Any]:
    return make_synthetic_splits(n_queries={"train": 24, "vali": 10, "test": 8}, docs_per_query=(4, 9),
                                 n_features=6, n_levels=3, seed=5)


@pytest.fixture(scope="module")
def fitted(sets: dict[str, Any]) -> tunemix.TuneMixRanker:
    t, v = sets["train"], sets["vali"]
    return tunemix.TuneMixRanker(TABLES, n_jobs=1, progress=False).fit(
        t.features, t.labels, np.diff(t.query_offsets), eval_set=[(v.features, v.labels)],
        eval_group=[np.diff(v.query_offsets)])


@pytest.fixture(scope="module")
def saved(fitted: tunemix.TuneMixRanker, sets: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("first-hour")
    fitted.save(root / "models", "first")
    write_svmlight(sets["test"], root / "test.txt")
    return root


def cli(*args: str, cwd: Path = ROOT, **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tunemix.cli", *args], cwd=cwd, capture_output=True, text=True,
                          **kw)


# ---------------------------------------------------------------- the library's threading floor
def test_the_library_scores_short_lists_on_one_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """Unset, the floor is LIBRARY_PARALLEL_MIN_DOCUMENTS; TUNEMIX_PARALLEL_MIN_DOCUMENTS (the
    service's variable) changes it; a bad value is an error naming the variable."""
    monkeypatch.setattr(runtime, "_parallel_min_documents", None)
    monkeypatch.delenv("TUNEMIX_PARALLEL_MIN_DOCUMENTS", raising=False)
    assert runtime.get_parallel_min_documents() == runtime.LIBRARY_PARALLEL_MIN_DOCUMENTS == 256
    monkeypatch.setattr(runtime, "_parallel_min_documents", None)
    monkeypatch.setenv("TUNEMIX_PARALLEL_MIN_DOCUMENTS", "40")
    assert runtime.get_parallel_min_documents() == 40
    for bad in ("many", "-3"):
        monkeypatch.setattr(runtime, "_parallel_min_documents", None)
        monkeypatch.setenv("TUNEMIX_PARALLEL_MIN_DOCUMENTS", bad)
        with pytest.raises(ValueError, match="TUNEMIX_PARALLEL_MIN_DOCUMENTS"):
            runtime.get_parallel_min_documents()
    runtime.set_parallel_min_documents(7)  # the service's explicit setting wins over the variable
    assert runtime.get_parallel_min_documents() == 7


def test_predict_of_a_short_list_takes_no_parallel_launch(fitted: tunemix.TuneMixRanker, sets: dict[str, Any],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Through ``predict``, a list below the floor never launches numba threads, one at it does,
    and both give the same scores as one thread."""
    import numba

    if int(numba.config.NUMBA_NUM_THREADS) < 2:  # type: ignore[attr-defined]
        pytest.skip("numba has one thread here")
    calls: list[int] = []
    kernel = forest._score_parallel
    monkeypatch.setattr(forest, "_score_parallel", lambda *a: (calls.append(1), kernel(*a)))
    monkeypatch.setattr(runtime, "_scoring_threads", 2)
    monkeypatch.setattr(forest, "PARALLEL_MIN_WORK", 1)
    monkeypatch.setattr(runtime, "_parallel_min_documents", None)
    monkeypatch.delenv("TUNEMIX_PARALLEL_MIN_DOCUMENTS", raising=False)
    t = sets["train"]
    x, g = t.features[:100], [100]
    short = fitted.predict(x, group=g)
    assert calls == [], "a 100-document list launched the parallel forest pass"
    monkeypatch.setattr(runtime, "_parallel_min_documents", 100)
    at_floor = fitted.predict(x, group=g)
    assert calls == [1]
    np.testing.assert_array_equal(short, at_floor)


# ---------------------------------------------------------------- predict without group
def test_predict_without_group_warns_on_a_list_dependent_model(fitted: tunemix.TuneMixRanker,
                                                                sets: dict[str, Any]) -> None:
    t = sets["test"]
    g = np.diff(t.query_offsets)
    reasons = fitted.model_.list_dependent
    assert any("raw+std" in r for r in reasons)
    for method in ("predict", "predict_proba", "predict_relevance"):
        with pytest.warns(UserWarning, match=rf"{method}\(X\) without group scores all {t.n_docs} rows as ONE "
                                             r"query.*raw\+std.*pass group="):
            getattr(fitted, method)(t.features)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        grouped = fitted.predict(t.features, group=g)
        fitted.predict(t.features[:1])  # one row: nothing to depend on
        fitted.predict(t.features[: g[0]], group=[int(g[0])])
    with pytest.warns(UserWarning):
        ungrouped = fitted.predict(t.features)
    assert not np.array_equal(grouped, ungrouped)  # why the warning exists


def test_a_model_of_raw_features_and_no_query_rescaling_predicts_silently(sets: dict[str, Any]) -> None:
    tables = {**TABLES, "members": {**TABLES["members"], "views": ["raw"]}, "mixer": {"rescale": "none"}}
    t = sets["train"]
    ranker = tunemix.TuneMixRanker(tables, n_jobs=1, progress=False).fit(t.features, t.labels,
                                                                          np.diff(t.query_offsets))
    assert ranker.model_.list_dependent == ()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ranker.predict(sets["test"].features)


# ---------------------------------------------------------------- the chosen members
def test_the_fitted_ranker_names_its_members_and_their_weights(fitted: tunemix.TuneMixRanker,
                                                                sets: dict[str, Any], tmp_path: Path) -> None:
    members = fitted.members_
    assert [m["name"] for m in members] == fitted.model_.members
    assert {m["learner"] for m in members} == {"adaboost"} and {m["view"] for m in members} <= {"raw", "raw+std"}
    weights = np.array([m["weight"] for m in members])
    assert (weights > 0).all() and weights.sum() == pytest.approx(1.0, abs=1e-12)
    raw = fitted.model_.ensemble.mix_weights()
    assert raw is not None
    np.testing.assert_allclose(weights, raw / raw.sum(), rtol=1e-15)
    assert all(m["calibrator"] for m in members) and all(m["iterations"] in (4, 8) for m in members)
    recorded = {m["name"] for m in fitted.record_["members"]}
    assert {m["name"] for m in members} <= recorded
    # the same table from the saved artifact
    assert tunemix.load(fitted.save(tmp_path, "m")).member_table() == members


# ---------------------------------------------------------------- the CLI's messages
def test_predict_into_a_closed_pipe_ends_quietly(saved: Path, sets: dict[str, Any]) -> None:
    """``tunemix predict ... --proba | head -3``: the reader leaves after three lines; the
    writer must stop without a BrokenPipeError traceback. The output is made larger than a pipe's
    buffer so that the writer really meets the closed pipe."""
    from tunemix.core.data.dataset import RankingData

    t = sets["test"]
    reps = 400
    big = RankingData.from_arrays(np.tile(t.features, (reps, 1)), np.tile(t.labels, reps),
                                  group_sizes=np.tile(np.diff(t.query_offsets), reps))
    write_svmlight(big, saved / "big.txt")
    proc = subprocess.Popen([sys.executable, "-m", "tunemix.cli", "predict", "--model", "first", "--models-dir",
                             str(saved / "models"), str(saved / "big.txt"), "--proba"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stderr is not None
    head = [proc.stdout.readline() for _ in range(3)]
    proc.stdout.close()
    err = proc.stderr.read()
    proc.wait()
    assert head[0].startswith("score\texpected_grade") and all(line.endswith("\n") for line in head)
    assert "Traceback" not in err and "BrokenPipe" not in err, err
    assert proc.returncode in (0, 141)


def test_a_file_narrower_than_the_model_warns_with_both_widths(saved: Path) -> None:
    (saved / "narrow.txt").write_text("1 qid:1 1:0.5 2:0.1\n0 qid:1 1:0.2 3:0.7\n")
    proc = cli("predict", "--model", "first", "--models-dir", str(saved / "models"), str(saved / "narrow.txt"))
    assert proc.returncode == 0, proc.stderr
    assert "tunemix predict: warning: " in proc.stderr
    assert "largest feature id is 3 but 6 features are expected" in proc.stderr
    assert "Warning:" not in proc.stderr and "warnings.warn" not in proc.stderr  # one line, no source echo
    assert len(proc.stdout.split()) == 2


def test_cli_data_errors_say_what_they_found_and_expected(saved: Path) -> None:
    (saved / "wide.txt").write_text("1 qid:1 1:0.5\n0 qid:1 1:0.2 47:0.7\n")
    proc = cli("predict", "--model", "first", "--models-dir", str(saved / "models"), str(saved / "wide.txt"))
    assert proc.returncode == 2
    assert f"{saved / 'wide.txt'}:2:" in proc.stderr
    assert "feature id 47 is larger than the number of features: the model takes 6" in proc.stderr
    (saved / "typo.txt").write_text("1 qid:1 1:0.5\n0 qdi:1 1:0.2\n")
    proc = cli("predict", "--model", "first", "--models-dir", str(saved / "models"), str(saved / "typo.txt"))
    assert proc.returncode == 2 and "unknown key 'qdi'" in proc.stderr and "did you mean qid:" in proc.stderr
    assert "positive integer" not in proc.stderr.split("expected")[0]


def test_explain_accepts_qid_colon_forms_and_lists_the_forms(saved: Path, sets: dict[str, Any]) -> None:
    from tunemix.cli.serve import find_document

    t = sets["test"]
    q = str(t.qids[1])
    row = int(t.query_offsets[1]) + 1
    file = str(saved / "test.txt")
    assert find_document(t, f"{q}:2", None, file) == row
    assert find_document(t, f"qid:{q}:2", None, file) == row
    with pytest.raises(ValueError, match=r"no query 'nope'"):
        find_document(t, "qid:nope:1", None, file)
    with pytest.raises(ValueError, match=r"--doc takes its docid .*qid:Q:N .*line:N"):
        find_document(t, "no-such-doc", None, file)
    proc = cli("explain", "--model", "first", "--models-dir", str(saved / "models"), file, "--doc", f"qid:{q}:2",
               "--top", "2")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"query {q}, document qid:{q}:2")


def test_serve_listens_on_loopback_unless_told(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """``tunemix serve`` (and ``python -m tunemix.service``) bind 127.0.0.1 unless TUNEMIX_HOST or --host says
    otherwise; the container image says 0.0.0.0 explicitly."""
    import tunemix.service.__main__
    from tunemix.cli import main
    from tunemix.service.settings import Settings

    for key in ("TUNEMIX_HOST", "TUNEMIX_MODELS_DIR", "TUNEMIX_DEFAULT_MODEL", "TUNEMIX_PORT", "TUNEMIX_WORKERS"):
        monkeypatch.setenv(key, "")  # recorded, so that what run_serve writes is undone after the test
        monkeypatch.delenv(key)
    assert Settings().host == "127.0.0.1"
    assert 'TUNEMIX_HOST=0.0.0.0' in (ROOT / "Dockerfile").read_text()
    seen: list[str] = []
    monkeypatch.setattr(tunemix.service.__main__, "main", lambda argv=None: seen.append(Settings().host))
    for name in ("default", "other"):
        (tmp_path / name / "v1").mkdir(parents=True)
        (tmp_path / name / "v1" / "manifest.json").write_text("{}")
    assert main(["serve", "--models-dir", str(tmp_path)]) == 0
    monkeypatch.setenv("TUNEMIX_HOST", "127.0.0.2")
    assert main(["serve", "--models-dir", str(tmp_path)]) == 0
    assert main(["serve", "--models-dir", str(tmp_path), "--host", "::1"]) == 0
    assert seen == ["127.0.0.1", "127.0.0.2", "::1"]


# ---------------------------------------------------------------- where the data are expected
def test_the_mq2008_config_follows_tunemix_shared_data(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from tunemix.train.config import load_config, shared_data_dir

    monkeypatch.setenv("TUNEMIX_SHARED_DATA", str(tmp_path / "elsewhere"))
    cfg = load_config(ROOT / "configs" / "mq2008.toml")
    assert cfg.data.train == str(tmp_path / "elsewhere" / "MQ2008" / "Fold1" / "train.txt")
    monkeypatch.delenv("TUNEMIX_SHARED_DATA")
    assert shared_data_dir() == ROOT.parent / "shared" / "data"
    assert load_config(ROOT / "configs" / "mq2008.toml").data.test == \
        str(ROOT.parent / "shared" / "data" / "MQ2008" / "Fold1" / "test.txt")


def test_train_without_the_data_says_where_it_is_expected(tmp_path: Path) -> None:
    import os

    env = {**os.environ, "TUNEMIX_SHARED_DATA": str(tmp_path / "absent")}
    proc = cli("train", "--config", str(ROOT / "configs" / "mq2008.toml"), "--models-dir", str(tmp_path / "m"),
               env=env)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"[data] train = {tmp_path / 'absent' / 'MQ2008' / 'Fold1' / 'train.txt'}: no such file" in proc.stderr
    assert "TUNEMIX_SHARED_DATA" in proc.stderr and "tunemix demo" in proc.stderr


def test_bench_defaults_without_the_data_stops_before_any_fit(monkeypatch: pytest.MonkeyPatch,
                                                              tmp_path: Path) -> None:
    from bench import defaults

    monkeypatch.setattr(defaults, "SHARED_DATA", tmp_path)
    monkeypatch.setattr(defaults, "run", lambda *a, **k: pytest.fail("fitted without the data"))
    with pytest.raises(SystemExit, match=r"15 data file\(s\) missing.*TUNEMIX_SHARED_DATA.*synthetic-mslr"):
        defaults.main(["--datasets", "mq2008", "--out", str(tmp_path / "d.json")])
    with pytest.raises(SystemExit, match="unknown data set"):
        defaults.main(["--datasets", "mq2009", "--out", str(tmp_path / "d.json")])
    defaults.check_data(["synthetic-mslr"])  # generated: nothing to find
