"""bench.ab: one benchmark module run in two trees alternately, each in its own tree, and the
ratio of the medians of a field of the JSON each run wrote (a tiny fake benchmark, no fits)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import ab

FAKE = '''
import json, os, pathlib, sys
import bench

tree = pathlib.Path(bench.__file__).resolve().parents[1]
log = pathlib.Path(sys.argv[sys.argv.index("--log") + 1])
with log.open("a") as fh:
    fh.write(tree.name + "\\n")
runs = sum(1 for line in log.read_text().splitlines() if line == tree.name)
if (tree / "FAIL").exists():
    sys.exit(3)
value = float((tree / "VALUE").read_text()) + runs  # 1, 2, 3 added over the rounds: median + 2
out = tree / "bench" / "results"
out.mkdir(exist_ok=True)
(out / "fake.json").write_text(json.dumps({"nested": {"v": [value]}, "cwd": os.getcwd(), "args": sys.argv[1:]}))
'''


def fake_tree(root: Path, name: str, value: float) -> Path:
    tree = root / name
    (tree / "bench" / "results").mkdir(parents=True)
    (tree / "bench" / "__init__.py").write_text("")
    (tree / "bench" / "fake.py").write_text(FAKE)
    (tree / "bench" / "results" / "old.json").write_text("{}")  # there before: not the run's result
    (tree / "VALUE").write_text(str(value))
    return tree


def test_runs_alternate_each_in_its_own_tree_and_the_ratio_is_of_the_medians(tmp_path: Path) -> None:
    this, before = fake_tree(tmp_path, "this", 10.0), fake_tree(tmp_path, "before", 20.0)
    log, out = tmp_path / "order.log", tmp_path / "ab.json"
    rc = ab.main(["--before", str(before), "--this", str(this), "--rounds", "3", "--field", "nested.v.0",
                  "--out", str(out), "--", "fake", "--log", str(log)])
    assert rc == 0
    assert log.read_text().split() == ["this", "before", "before", "this", "this", "before"]
    record = json.loads(out.read_text())
    assert record["module"] == "bench.fake" and record["args"] == ["--log", str(log)]
    assert [(r["round"], r["side"]) for r in record["runs"]] == [
        (0, "this"), (0, "before"), (1, "before"), (1, "this"), (2, "this"), (2, "before")]
    for run in record["runs"]:
        tree = this if run["side"] == "this" else before
        assert run["result_file"] == "bench/results/fake.json"
        assert Path(run["result"]["cwd"]) == tree.resolve()
    assert [r["value"] for r in record["runs"] if r["side"] == "this"] == [11.0, 12.0, 13.0]
    assert record["median"] == {"this": 12.0, "before": 22.0}
    assert record["ratio_this_over_before"] == pytest.approx(12.0 / 22.0)


def test_a_failing_side_ends_the_ab(tmp_path: Path) -> None:
    this, before = fake_tree(tmp_path, "this", 1.0), fake_tree(tmp_path, "before", 1.0)
    (before / "FAIL").write_text("")
    with pytest.raises(SystemExit, match="exited with 3"):
        ab.main(["--before", str(before), "--this", str(this), "--rounds", "1", "--out", str(tmp_path / "o.json"),
                 "--", "bench.fake", "--log", str(tmp_path / "log")])
    assert not (tmp_path / "o.json").exists()


def test_both_trees_need_the_module(tmp_path: Path) -> None:
    this = fake_tree(tmp_path, "this", 1.0)
    (tmp_path / "before" / "bench").mkdir(parents=True)
    with pytest.raises(SystemExit):
        ab.main(["--before", str(tmp_path / "before"), "--this", str(this), "--", "fake"])
    with pytest.raises(SystemExit) as stop:
        ab.main(["--before", str(tmp_path / "before"), "fake"])  # no "--": no module named
    assert stop.value.code == 2


def test_field_value_follows_the_dotted_path() -> None:
    payload = {"a": {"b": [{"c": 2}, {"c": 3.5}]}, "s": "x"}
    assert ab.field_value(payload, "a.b.1.c") == 3.5
    with pytest.raises(KeyError, match="'d'"):
        ab.field_value(payload, "a.d")
    with pytest.raises(TypeError, match="not a number"):
        ab.field_value(payload, "s")
