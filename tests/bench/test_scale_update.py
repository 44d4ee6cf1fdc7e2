"""bench.scale --update: the re-measured sizes replace their rows, the others stay."""

from bench.scale import updated


def test_update_replaces_the_measured_sizes_and_keeps_the_others() -> None:
    old = {"machine": {"time": "then"}, "sizes": [{"target_docs": 30_000, "v": 1}, {"target_docs": 500_000, "v": 2},
                                                   {"target_docs": 1_000_000, "v": 3}]}
    new = {"machine": {"time": "now"}, "sizes": [{"target_docs": 500_000, "v": 9}, {"target_docs": 120_000, "v": 8}]}
    out = updated(old, new)
    assert [(r["target_docs"], r["v"]) for r in out["sizes"]] == [(30_000, 1), (120_000, 8), (500_000, 9),
                                                                   (1_000_000, 3)]
    assert out["machine"] == {"time": "now"}
