"""Reader throughput: lines per second for MQ2008 Fold1 train and a generated 1M-line file.

Peer in the same run: numpy's ``np.loadtxt``-free baseline is not meaningful for sparse text, so
the peer is a plain-Python line parser (split on whitespace and ':') on a slice of the same file,
the approach our reader replaces.

    python -m bench.bench_data [--lines 1000000]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.common import SHARED_DATA, best_of, write_result
from tunemix.core.data.svmlight import read_svmlight, write_svmlight
from tunemix.train.data.synthetic import make_synthetic


def python_parse(path: Path, max_lines: int) -> int:
    n = 0
    with open(path) as fh:
        for line in fh:
            body = line.split("#", 1)[0].split()
            int(body[0])
            for tok in body[1:]:
                k, v = tok.split(":", 1)
                if k != "qid":
                    float(v)
            n += 1
            if n >= max_lines:
                break
    return n


def measure(path: Path, n_lines: int, repeat: int) -> dict[str, float]:
    seconds = best_of(lambda: read_svmlight(path), repeat)
    peer_lines = min(n_lines, 100_000)
    peer = best_of(lambda: python_parse(path, peer_lines), 1)
    ours = n_lines / seconds
    theirs = peer_lines / peer
    return {
        "lines": n_lines,
        "bytes": path.stat().st_size,
        "seconds": seconds,
        "lines_per_s": ours,
        "mb_per_s": path.stat().st_size / seconds / 1e6,
        "python_parser_lines_per_s": theirs,
        "speedup_vs_python_parser": ours / theirs,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--lines", type=int, default=1_000_000)
    args = parser.parse_args()
    results: dict[str, object] = {}
    # warm up the JIT on a tiny file
    with tempfile.TemporaryDirectory() as tmp:
        tiny = Path(tmp) / "tiny.txt"
        tiny.write_text("1 qid:1 1:0.5 #docid = a\n")
        read_svmlight(tiny)
        mq = SHARED_DATA / "MQ2008" / "Fold1" / "train.txt"
        if mq.exists():
            results["mq2008_fold1_train"] = measure(mq, read_svmlight(mq).n_docs, repeat=5)
        else:
            results["mq2008_fold1_train"] = {"skipped": f"{mq} not found"}
        # 1M lines, 46 dense features (MQ2008-like width), written once
        n_queries = max(1, args.lines // 50)
        t0 = time.perf_counter()
        big = make_synthetic(n_queries=n_queries, docs_per_query=50, n_features=46, seed=0)
        path = Path(tmp) / "big.txt"
        write_svmlight(big, path, sparse=False)
        gen_s = time.perf_counter() - t0
        res = measure(path, big.n_docs, repeat=2)
        res["generate_and_write_seconds"] = gen_s
        back = read_svmlight(path)
        res["round_trip_exact"] = bool(np.array_equal(back.features, big.features))
        results["synthetic_dense_46"] = res
    out = write_result("data_reader", {"results": results})
    for name, res in results.items():
        print(name, res)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
