"""Benchmarks: each module runs as `python -m bench.<name>` and writes JSON to bench/results/
(scratch, but for the files `python -m bench.tables` builds docs/performance.md's tables from);
`python -m bench.ab` runs one against another checkout of the tree."""
