"""The README's walkthrough, run as written on generated data, so that it cannot go stale: its
shell block (train, report, predict, evaluate, serve, curl) and its Python block."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
SECTION = README.split("## Walkthrough", 1)[1].split("\n## ", 1)[0]
SHELL, PYTHON = re.findall(r"```(?:sh|python)\n(.*?)```", SECTION, flags=re.S)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """train.txt, vali.txt and test.txt of a small generated set, and a venv-like PATH."""
    work = tmp_path_factory.mktemp("walkthrough")
    subprocess.run([sys.executable, "-m", "tunemix.cli", "data", "synth", "--out", str(work), "--queries",
                    "40,15,15", "--docs", "8-20", "--features", "8", "--levels", "3", "--seed", "1"],
                   cwd=ROOT, check=True, capture_output=True)
    for part in ("train", "vali", "test"):
        assert (work / f"{part}.txt").is_file(), sorted(p.name for p in work.iterdir())
    return work


def test_the_shell_walkthrough(workdir: Path) -> None:
    port = _free_port()
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
               TUNEMIX_PORT=str(port), TUNEMIX_HOST="127.0.0.1", TUNEMIX_WORKERS="1", TUNEMIX_LOG_LEVEL="warning")
    script = SHELL.replace("source .venv/bin/activate", ": venv on PATH").replace("less ", "test -s ")
    serve = next(line for line in script.splitlines() if "tunemix serve" in line)
    before, after = script.split(serve, 1)
    # everything up to the server, then the server in the background, then what talks to it
    subprocess.run(["bash", "-euo", "pipefail", "-c", before], cwd=workdir, env=env, check=True)
    assert (workdir / "models" / "mine" / "v1" / "manifest.json").is_file()
    scores = (workdir / "test.scores").read_text().split()
    assert len(scores) == sum(1 for line in (workdir / "test.txt").read_text().splitlines() if line.strip())
    server = subprocess.Popen(["bash", "-c", serve.split("#")[0]], cwd=workdir, env=env, start_new_session=True)
    try:
        while True:  # until the server answers (the suite's timeout is the only limit)
            assert server.poll() is None, "tunemix serve exited"
            ready = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", f"localhost:{port}/ready"],
                                   capture_output=True, text=True)
            if ready.stdout == "200":
                break
            time.sleep(0.1)
        out = subprocess.run(["bash", "-euo", "pipefail", "-c", after.replace("localhost:8000", f"localhost:{port}")],
                             cwd=workdir, env=env, check=True, capture_output=True, text=True)
        assert '"model":"mine"' in out.stdout and '"ranking"' in out.stdout, out.stdout[:500]
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait()


def test_the_python_walkthrough(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As written: every array comes from the README's own read_letor calls."""
    from tunemix.core.data.svmlight import read_svmlight

    test = read_svmlight(workdir / "test.txt")
    monkeypatch.chdir(workdir)
    (workdir / "models" / "mine").mkdir(parents=True, exist_ok=True)
    if not any((workdir / "models" / "mine").iterdir()):
        pytest.skip("the shell walkthrough trains models/mine first")
    namespace: dict[str, object] = {}
    code = PYTHON.replace("tunemix.TuneMixRanker()", "tunemix.TuneMixRanker(progress=False)")
    exec(compile(code, "README.md walkthrough", "exec"), namespace)
    scores = namespace["scores"]
    assert isinstance(scores, np.ndarray) and scores.shape == (test.n_docs,)
    best = namespace["best"]
    assert isinstance(best, list) and len(best) == test.n_queries and len(best[0]) == 10
    why = namespace["why"]
    assert abs(why.baseline[0] + why.contributions[0].sum() - scores[0]) < 1e-9  # type: ignore[attr-defined]
    assert (workdir / "models" / "mine" / "v2" / "manifest.json").is_file()
