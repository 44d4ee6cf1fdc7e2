"""``python -m tunemix.service``'s command line: the options set their ``TUNEMIX_*`` variables, ``--help``
answers without starting a server, and an unknown option is refused (it used to be ignored: a
script that passed ``--port 8791`` waited for a server that listened on 8000)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.service.conftest import ROOT, Store, copy_version, free_port, stop_process
from tunemix.service.serve_options import OPTIONS, parser, to_environment


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    # the process ends by itself (help or an error); the timeout only turns a hang into a failure
    return subprocess.run([sys.executable, "-m", "tunemix.service", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, check=False)


def test_help_lists_the_options_and_starts_nothing() -> None:
    proc = _run("--help")
    assert proc.returncode == 0, proc.stderr
    for flag, var, _, _ in OPTIONS:
        assert flag in proc.stdout and var in proc.stdout
    assert "uvicorn" not in proc.stderr.lower()  # no server log: nothing started


def test_an_unknown_option_is_refused_with_its_name() -> None:
    proc = _run("--prot", "8791")
    assert proc.returncode == 2
    assert "unrecognized arguments: --prot 8791" in proc.stderr


def test_a_bad_port_is_refused() -> None:
    proc = _run("--port", "eighty")
    assert proc.returncode == 2
    assert "--port" in proc.stderr and "eighty" in proc.stderr


def test_each_option_sets_its_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    for _, var, _, _ in OPTIONS:
        monkeypatch.setenv(var, "from-the-environment")
    args = parser().parse_args(["--port", "9123", "--workers", "3", "--host", "::1"])
    assert to_environment(args) == {"TUNEMIX_PORT": "9123", "TUNEMIX_WORKERS": "3", "TUNEMIX_HOST": "::1"}
    assert os.environ["TUNEMIX_PORT"] == "9123" and os.environ["TUNEMIX_HOST"] == "::1"
    assert os.environ["TUNEMIX_MODELS_DIR"] == "from-the-environment"  # not given: the environment's stays
    assert to_environment(argparse.Namespace(**{f[2:].replace("-", "_"): None for f, _, _, _ in OPTIONS})) == {}


def test_the_server_listens_where_the_options_say(store: Store, tmp_path: Path) -> None:
    copy_version(store.default_v1, tmp_path / "models", "chosen", "v1")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TUNEMIX_") and k != "PROMETHEUS_MULTIPROC_DIR"}
    log = (tmp_path / "server.log").open("wb")
    proc = subprocess.Popen([sys.executable, "-m", "tunemix.service", "--port", str(port), "--workers", "1",
                             "--models-dir",
                             str(tmp_path / "models"), "--model", "chosen"], cwd=ROOT, env=env, stdout=log,
                            stderr=subprocess.STDOUT)
    try:
        while True:  # the event: the server answers on the port the option named
            if proc.poll() is not None:
                raise AssertionError((tmp_path / "server.log").read_text()[-2000:])
            try:
                r = httpx.get(f"http://127.0.0.1:{port}/ready", timeout=None)
            except httpx.TransportError:
                time.sleep(0.2)
                continue
            if r.status_code == 200:
                break
            time.sleep(0.2)
        served = httpx.get(f"http://127.0.0.1:{port}/models", timeout=None).json()["models"]
        assert [(m["name"], m["version"]) for m in served] == [("chosen", "v1")]
    finally:
        stop_process(proc)
