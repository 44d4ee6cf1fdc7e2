"""``tunemix data ...``: write synthetic data sets, describe a data file."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from tunemix.core.data.svmlight import read_svmlight, write_svmlight
from tunemix.train.data.synthetic import make_synthetic_splits


def _int_list(text: str) -> list[int]:
    try:
        return [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def _range(text: str) -> int | tuple[int, int]:
    try:
        if "-" in text:
            lo, hi = text.split("-", 1)
            return int(lo), int(hi)
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected N or LO-HI, got {text!r}") from None


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    data = subparsers.add_parser("data", help="make or inspect ranking data files")
    sub = data.add_subparsers(dest="data_command", required=True)

    synth = sub.add_parser(
        "synth", help="write a synthetic data set (McRank's random cubic polynomials)",
        description="Write train.txt, vali.txt and test.txt in LETOR format, sampled from one random "
        "cubic polynomial of the features (see tunemix/train/data/synthetic.py).",
    )
    synth.add_argument("--out", required=True, type=Path, help="output directory")
    synth.add_argument("--queries", type=_int_list, default=[300, 100, 100],
                       help="queries in train,vali,test (default 300,100,100)")
    synth.add_argument("--docs", type=_range, default=(20, 60), help="documents per query: N or LO-HI (default 20-60)")
    synth.add_argument("--features", type=int, default=30, help="number of features (default 30)")
    synth.add_argument("--levels", type=int, default=5, help="relevance levels K (default 5)")
    synth.add_argument("--noise", type=float, default=0.3, help="label noise std (default 0.3)")
    synth.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    synth.set_defaults(func=run_synth)

    info = sub.add_parser("info", help="read a data file and print its shape and label counts")
    info.add_argument("file", type=Path)
    info.add_argument("--json", action="store_true", help="print JSON")
    info.set_defaults(func=run_info)


def run_synth(args: argparse.Namespace) -> int:
    if len(args.queries) != 3:
        raise ValueError(f"--queries needs three numbers (train,vali,test), got {len(args.queries)}")
    splits = make_synthetic_splits(
        n_queries=dict(zip(("train", "vali", "test"), args.queries, strict=True)),
        docs_per_query=args.docs, n_features=args.features, n_levels=args.levels,
        noise=args.noise, seed=args.seed,
    )
    args.out.mkdir(parents=True, exist_ok=True)
    for name, data in splits.items():
        path = args.out / f"{name}.txt"
        write_svmlight(data, path)
        sys.stdout.write(f"wrote {path}: {data.n_docs} rows, {data.n_queries} queries\n")
    return 0


def run_info(args: argparse.Namespace) -> int:
    data = read_svmlight(args.file)
    sizes = data.query_sizes
    summary = {
        "file": str(args.file),
        "rows": data.n_docs,
        "features": data.n_features,
        "queries": data.n_queries,
        "docs_per_query": {"min": int(sizes.min()), "median": float(np.median(sizes)), "max": int(sizes.max())},
        "label_counts": {str(k): int(v) for k, v in enumerate(np.bincount(data.labels)) if v},
        "has_docids": data.docids is not None,
    }
    if args.json:
        sys.stdout.write(json.dumps(summary, indent=2) + "\n")
    else:
        for key, value in summary.items():
            sys.stdout.write(f"{key:>15}: {value}\n")
    return 0
