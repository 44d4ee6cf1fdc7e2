"""The training report's explanations (global importance and two worked examples) and ``tunemix
explain`` on the command line, both against ``tunemix.Model.explain``."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tunemix
from tunemix.core.data.svmlight import read_svmlight, write_svmlight
from tunemix.train.config import load_config
from tunemix.train.train import load_data, train

ROOT = Path(__file__).resolve().parents[2]

CONFIG = """
name = "why"
seed = 1
[data.synthetic]
queries = [30, 12, 12]
docs_per_query = [5, 12]
features = 6
levels = 3
seed = 5
[members]
views = ["raw", "raw+std"]
label_groupings = ["original"]
calibrators = ["shift", "rbc:linear:gain"]
[[members.adaboost]]
base = "tree"
n_leaves = 4
n_iterations = 8
checkpoints = [4, 8]
[run]
backend = "sequential"
[relevance]
enabled = false
"""


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("why")
    (tmp / "why.toml").write_text(CONFIG)
    cfg = load_config(tmp / "why.toml", {"run.models_dir": str(tmp / "models")})
    out = train(cfg, progress=False)
    return {"path": out.path, "record": out.record, "test": load_data(cfg)[0]["test"], "tmp": tmp}


def test_report_shows_importance_and_worked_examples(trained: dict[str, Any]) -> None:
    ex = trained["record"]["explanations"]
    assert ex["split"] == "test" and ex["queries"] == 12 and ex["documents"] == 12 * 5
    means = [r["mean_abs_contribution"] for r in ex["importance"]]
    assert len(means) == 6 and means == sorted(means, reverse=True) and means[0] > 0
    model, test = tunemix.load(trained["path"]), trained["test"]
    lo, hi = (int(v) for v in test.query_offsets[:2])  # the first query is the worked example's
    x = test.features[lo:hi]
    scores = model.predict(x)
    top2 = np.argsort(-scores, kind="stable")[:2]
    e = model.explain(x, rows=top2)
    example = ex["example"]
    assert example["score"] == pytest.approx(scores[top2[0]], abs=1e-12)
    assert example["baseline"] + sum(c["contribution"] for c in example["contributions"]) + example["rest"] == \
        pytest.approx(example["score"], abs=1e-9)
    by_name = dict(zip(e.feature_names, e.contributions[0], strict=True))
    assert all(c["contribution"] == pytest.approx(by_name[c["feature"]], abs=1e-12) for c in example["contributions"])
    pair = ex["pair"]
    assert pair["score_difference"] == pytest.approx(scores[top2[0]] - scores[top2[1]], abs=1e-12)
    assert pair["baseline"] + sum(c["contribution"] for c in pair["contributions"]) + pair["rest"] == \
        pytest.approx(pair["score_difference"], abs=1e-9)
    report = (trained["path"] / "report.md").read_text()
    assert "## Why documents rank where they do" in report and "![importance](importance.png)" in report
    assert (trained["path"] / "importance.png").stat().st_size > 1000
    assert json.loads((trained["path"] / "report.json").read_text())["explanations"]["importance"][0]["feature"] \
        == ex["importance"][0]["feature"]


def run_cli(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tunemix.cli", *argv], capture_output=True, text=True, cwd=ROOT,
                          check=False)


def test_tunemix_explain_from_the_command_line(trained: dict[str, Any]) -> None:
    test, tmp = trained["test"], trained["tmp"]
    ids = np.array([f"doc{i}" for i in range(test.n_docs)])
    write_svmlight(dataclasses.replace(test, docids=ids), tmp / "test.txt")
    data = read_svmlight(tmp / "test.txt")
    lo, hi = (int(v) for v in data.query_offsets[1:3])
    model = tunemix.load(trained["path"])
    e = model.explain(data.features[lo:hi], group=[hi - lo], rows=[2])
    proc = run_cli("explain", str(tmp / "test.txt"), "--model", str(trained["path"]), "--doc", f"doc{lo + 2}",
                   "--top", "3")
    assert proc.returncode == 0, proc.stderr
    assert "warning" not in proc.stderr  # the file says the query: no library warning about group=
    lines = proc.stdout.splitlines()
    assert f"score {e.scores[0]:.6g} = {e.baseline[0]:.6g} from the rest of the list" in lines[1]
    assert "(exact)" in lines[1]
    best = np.argsort(-np.abs(e.contributions[0]), kind="stable")[:3]
    assert [ln.split()[0] for ln in lines[3:6]] == [e.feature_names[f] for f in best]
    assert [float(ln.split()[-1]) for ln in lines[3:6]] == pytest.approx(e.contributions[0, best], abs=1e-5)
    same = run_cli("explain", str(tmp / "test.txt"), "--model", str(trained["path"]), "--doc",
                   f"{data.qids[1]}:3", "--top", "3")
    assert same.stdout.splitlines()[1:] == lines[1:]
    by_line = run_cli("explain", str(tmp / "test.txt"), "--model", str(trained["path"]), "--doc", f"line:{lo + 3}",
                      "--top", "3")
    assert by_line.stdout.splitlines()[1:] == lines[1:]
    pair = run_cli("explain", str(tmp / "test.txt"), "--model", str(trained["path"]), "--doc", f"doc{lo}",
                   "--doc", f"doc{lo + 1}")
    assert pair.returncode == 0 and "difference" in pair.stdout and "warning" not in pair.stderr
    assert f"doc{lo}" in pair.stdout.splitlines()[2] and "baseline" not in pair.stdout  # ids whole, plain words
    for doc, message in (("nope", "no document 'nope'"), (f"{data.qids[1]}:99", "asks for document 99")):
        bad = run_cli("explain", str(tmp / "test.txt"), "--model", str(trained["path"]), "--doc", doc)
        assert bad.returncode == 2 and message in bad.stderr and "test.txt" in bad.stderr
    far = run_cli("explain", str(tmp / "test.txt"), "--model", str(trained["path"]), "--doc", "doc0",
                  "--doc", f"doc{hi}")
    assert far.returncode == 2 and "different queries" in far.stderr


def test_train_summary_says_why_so_many_runs_and_members(trained: dict[str, Any]) -> None:
    from tunemix.cli.train import _summary, count_lines

    rec = trained["record"]
    runs, members = count_lines(rec)
    assert runs.startswith("  2 runs (2 adaboost)") and "2 view(s) (raw, raw+std)" in runs
    assert "1 label grouping(s) (original)" in runs and "[members] views and label_groupings" in runs
    failed = len(rec["calibration_failures"])
    assert members.startswith(f"  {len(rec['members'])} members: 4 snapshots") and "x 2 calibrators" in members
    assert len(rec["members"]) == 4 * 2 - failed
    outcome = type("Outcome", (), {"record": rec, "path": trained["path"]})()
    assert _summary(outcome).startswith(f"model 'why' version {trained['path'].name} written to")
