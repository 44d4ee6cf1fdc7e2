"""Run the engine and service benchmarks in turn (``make bench``); each writes its JSON to
bench/results/.

    python -m bench.run_all [--quick]

The data reader, evaluation, AdaBoost.MH, the scoring engine, the service under load and its
request heads, each against its peer. ``--quick`` is passed to the benchmarks that accept it
(smaller data, minutes instead of tens of minutes). Benchmarks run one after another, never in
parallel: they measure ratios against a peer in the same run and must not compete with each
other for the 2 cores. The other benchmarks (the figures of docs/performance.md among them) are
run one by one; docs/performance.md lists them.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

BENCHMARKS = [
    ("bench.bench_data", ["--lines", "200000"]),
    ("bench.bench_evaluation", ["--queries", "20000"]),
    ("bench.bench_adaboost", ["--quick"]),
    ("bench.bench_scoring", ["--quick"]),
    ("bench.bench_service", ["--quick"]),
    ("bench.bench_request_heads", []),
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="short versions where available")
    args = parser.parse_args()
    failed = []
    for module, quick_flags in BENCHMARKS:
        cmd = [sys.executable, "-m", module, *(quick_flags if args.quick else [])]
        print(f"== {' '.join(cmd[1:])}", flush=True)
        t0 = time.perf_counter()
        rc = subprocess.call(cmd)
        print(f"== {module}: exit {rc} after {time.perf_counter() - t0:.0f}s", flush=True)
        if rc != 0:
            failed.append(module)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
