"""The coverage-guided fuzzer over /rank's decode-check-score path (``tests/service/fuzz_rank.py``),
run for ``TUNEMIX_FUZZ_SECONDS`` (60 by default; ``make fuzz`` runs it for 600). It passes when
libFuzzer ends its run without a finding."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.service.conftest import ROOT, Store

pytest.importorskip("atheris")


def test_the_rank_path_survives_the_fuzzer(store: Store, tmp_path: Path) -> None:
    seconds = int(os.environ.get("TUNEMIX_FUZZ_SECONDS", "60"))
    proc = subprocess.run(
        [sys.executable, "-m", "tests.service.fuzz_rank", str(store.default_v1), str(tmp_path / "corpus"),
         f"-max_total_time={seconds}", "-rss_limit_mb=4096", "-max_len=65536", f"-artifact_prefix={tmp_path}/"],
        cwd=ROOT, capture_output=True, text=True)
    tail = proc.stderr[-3000:]
    assert proc.returncode == 0, tail
    runs = re.search(r"Done (\d+) runs in (\d+) second", proc.stderr)
    assert runs is not None and int(runs.group(1)) > 0, tail
    print(f"fuzzer: {runs.group(1)} executions in {runs.group(2)} s, no finding")
