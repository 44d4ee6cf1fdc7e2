"""bench.bench_service's model sets: the data each needs is named when missing, and the verdict
against the peer is the issue's (p50 and p99 at most the peer's, no error)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import service_models
from bench.bench_service import peer_verdict


def test_missing_data_names_the_set_and_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(service_models, "MSLR_TRAIN", tmp_path / "train.txt")
    monkeypatch.setattr(service_models, "MSLR_TEST", tmp_path / "test.txt")
    (tmp_path / "test.txt").write_text("0 qid:1 1:0.5\n")
    with pytest.raises(SystemExit, match=r"--model-set mslr-default: .*train\.txt not found"):
        service_models.check_data(["mslr-default"])
    monkeypatch.setattr(service_models, "SHARED_DATA", tmp_path)
    with pytest.raises(SystemExit, match=r"--model-set mq2008: .*MQ2008/Fold1/train\.txt not found"):
        service_models.check_data(["mq2008"])


@pytest.mark.parametrize(("ours", "peer", "want"), [
    ({"p50_ms": 3.0, "p99_ms": 10.0, "errors": 0}, {"p50_ms": 4.0, "p99_ms": 9.0},
     {"p50": True, "p99": False, "no_errors": True}),
    ({"p50_ms": 4.0, "p99_ms": 9.0, "errors": 2}, {"p50_ms": 4.0, "p99_ms": 9.0},
     {"p50": True, "p99": True, "no_errors": False}),
    ({"p50_ms": None, "p99_ms": None, "errors": 100}, {"p50_ms": 4.0, "p99_ms": 9.0},
     {"p50": False, "p99": False, "no_errors": False}),
])
def test_the_verdict_against_the_peer(ours: dict, peer: dict, want: dict) -> None:
    assert peer_verdict(ours, peer) == want
