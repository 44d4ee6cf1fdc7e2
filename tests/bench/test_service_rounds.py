"""bench.bench_service's pooling of several rounds of one side: the pooled figures are those of
every round's requests together, as if they were one run."""

from __future__ import annotations

import numpy as np

from bench.bench_service import pool_raw, summarise


def _raw(latencies_ms: list[float], errors: list[str | None], duration: float) -> dict:
    n = len(latencies_ms)
    return {"rate": 100.0, "duration_s": duration, "n_requests": n, "max_lag_s": 1.0,
            "schedule_span_s": duration, "wall_s": duration + 0.5, "generator_cpu_s": 0.25,
            "error": errors, "latency_s": [x / 1e3 for x in latencies_ms],
            "latency_from_schedule_s": [x / 1e3 + 0.001 for x in latencies_ms],
            "server_time_ms": [x / 2 for x in latencies_ms], "issue_lag_s": [0.001] * n,
            "issue_offset_s": list(np.linspace(0.0, duration, n, endpoint=False))}


def test_pooled_rounds_are_their_requests_together() -> None:
    a = _raw([1.0, 2.0, 3.0, 100.0], [None, None, None, None], 10.0)
    b = _raw([4.0, 5.0, 6.0, 7.0], [None, "timeout", None, None], 10.0)
    pooled = summarise(pool_raw([a, b]))
    ok = [1.0, 2.0, 3.0, 100.0, 4.0, 6.0, 7.0]  # the failed request is not a latency
    assert pooled["p50_ms"] == round(float(np.percentile(ok, 50)), 3)
    assert pooled["p99_ms"] == round(float(np.percentile(ok, 99)), 3)
    assert pooled["max_ms"] == 100.0
    assert pooled["errors"] == 1 and pooled["errors_by_kind"] == {"timeout": 1}
    assert pooled["requests_scheduled"] == 8 and pooled["duration_s"] == 20.0
    # the second round's requests come after the first's in time: two 10 s windows, one per round
    assert [w["n_ok"] for w in pooled["by_10s_window"]] == [4, 3]
    assert pooled["by_10s_window"][1]["p50_ms"] == 6.0


def test_one_round_pools_to_itself() -> None:
    a = _raw([3.0, 1.0, 2.0], [None, None, None], 5.0)
    assert summarise(pool_raw([a])) == summarise(a)
