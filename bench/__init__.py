"""Benchmarks: each module runs as `python -m bench.<name>` and writes JSON to bench/results/."""
