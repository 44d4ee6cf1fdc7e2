"""`tunemix demo` (what `make serve` runs): generate data, train, and leave an existing model alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import tiny_config
from tunemix.cli import main
from tunemix.cli.train import DEFAULT_CONFIG
from tunemix.train.config import load_config

#: the tiny configuration under the default model's name
TINY = {"name": "default"}


def test_demo_generates_trains_and_is_idempotent(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tiny_config(tmp_path, TINY)
    args = ["demo", "--config", str(cfg), "--models-dir", str(tmp_path / "models"),
            "--data-dir", str(tmp_path / "data"), "--no-progress"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "generated synthetic data" in out and "model 'default' version v1 written to" in out
    assert "test: ensemble ndcg@10 =" in out
    for split in ("train", "vali", "test"):
        assert (tmp_path / "data" / f"{split}.txt").stat().st_size > 0
    assert (tmp_path / "models" / "default" / "v1" / "manifest.json").is_file()
    assert main(args) == 0
    assert "already trained" in capsys.readouterr().out
    assert not (tmp_path / "models" / "default" / "v2").exists()
    assert main([*args, "--retrain"]) == 0
    assert (tmp_path / "models" / "default" / "v2" / "manifest.json").is_file()


def test_shipped_configs_are_valid() -> None:
    configs = [DEFAULT_CONFIG, *sorted((Path(__file__).resolve().parents[2] / "configs").glob("*.toml"))]
    assert len(configs) >= 2
    for path in configs[1:]:
        cfg = load_config(path)
        assert cfg.adaboost_grid(), path
    default = load_config(DEFAULT_CONFIG)
    assert default.data.synthetic is not None
    # the default names only its data: its members are chosen from the data (test_auto_members)
    from tunemix.train.members.types import member_types

    assert not any(mt.blocks(default) for mt in member_types().values())


@pytest.mark.parametrize("backend", ["sequential", "loky", "threads"])
def test_progress_bar_counts_every_boosting_iteration(tmp_path: Path, backend: str,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    from tunemix.train.train import train

    cfg_path = tiny_config(tmp_path, {**TINY, "run.backend": backend})
    cfg = load_config(cfg_path, {"run.models_dir": str(tmp_path / "models")})
    train(cfg, progress=True)
    err = capsys.readouterr().err
    assert "boosting iterations" in err
    assert "6 of at most 6 it" in err  # one run of 6 iterations, all reported (an upper bound: no time left)
    assert "boosting 1 runs" in err and "1/1" in err


def test_demo_on_a_cold_cache_fits_beside_the_learners_part(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """With the stamp absent, ``tunemix demo`` warms first and its fit runs inside the warm-up,
    once the serving part's kernels are compiled and before the learners' part is awaited; the
    child's ``rest`` part is left in the background, told that this process's parts succeeded,
    and it leaves the stamp (the parts are stand-ins here: test_warm runs the real ones); an
    existing model still gets the warm-up (make serve's step), with nothing to fit, all of it
    awaited."""
    import io
    import json
    from typing import Any

    from tunemix.compile import warm as warm_module

    manifest = tmp_path / "models" / "default" / "v1" / "manifest.json"
    seen: list[str] = []
    line = json.dumps({"part": "learners", "seconds": 0.0, "compiled": 0, "loaded": 0})

    class Told(io.StringIO):
        def close(self) -> None:  # the child leaves the stamp when its parent said it succeeded
            seen.append(f"child told {self.getvalue().strip()!r}")
            if self.getvalue().strip() == "serving done":
                warm_module.write_stamp(tmp_path / "cache")
            super().close()

    class Learners:
        returncode = 0
        started_at = 0.0
        pid = 4242

        def __init__(self, names: list[str], background: Path | None) -> None:
            self.background = background
            self.stdin = Told()
            self.stdout = self

        def readline(self) -> str:  # background: the learners' part awaited, rest left running
            seen.append(f"learners awaited, model written: {manifest.is_file()}")
            return line + "\n"

        def close(self) -> None:
            pass

        def poll(self) -> int:
            return 0

        def communicate(self) -> tuple[str, str]:
            seen.append(f"both awaited, model written: {manifest.is_file()}")
            return line + "\n" + line.replace("learners", "rest"), ""

    def serving_part(tables: dict[str, Any], *, part: str, then: Any = None) -> None:
        seen.append(f"{part} fit")
        if then is not None:
            then()

    monkeypatch.setenv("TUNEMIX_AUTO_WARM", "1")
    monkeypatch.setattr(warm_module, "cache_dir", lambda: tmp_path / "cache")
    monkeypatch.setattr(warm_module, "warm_processes", lambda: 2)
    monkeypatch.setattr(warm_module, "_start_part", Learners)
    monkeypatch.setattr(warm_module, "_warm_fit", serving_part)
    cfg = tiny_config(tmp_path, TINY)
    args = ["demo", "--config", str(cfg), "--models-dir", str(tmp_path / "models"),
            "--data-dir", str(tmp_path / "data"), "--no-progress"]
    assert main(args) == 0
    assert seen == ["serving fit", "learners awaited, model written: True", "child told 'serving done'"]
    captured = capsys.readouterr()
    assert "the numba cache is cold" in captured.err and "the fit that waited for it" in captured.err
    assert "part rest (the other learners' kernels, for tunemix train) goes on compiling in the background, " \
           "niced (pid 4242" in captured.err
    assert "model 'default' version v1 written to" in captured.out and warm_module.is_warm()
    (tmp_path / "cache" / warm_module.STAMP).unlink()
    seen.clear()
    assert main(args) == 0
    assert seen == ["serving fit", "both awaited, model written: True"]  # warmed, nothing fitted, all awaited
    assert warm_module.is_warm()
    assert "already trained" in capsys.readouterr().out and not (tmp_path / "models" / "default" / "v2").exists()
