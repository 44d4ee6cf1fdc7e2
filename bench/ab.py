"""One benchmark run against two checkouts of the tree, alternately: an A/B of a change.

    python -m bench.ab --before DIR [--rounds 3] [--field PATH] [--name NAME] -- MODULE [ARGS...]

``MODULE`` is a benchmark module (``bench.defaults`` or ``defaults``) and ``ARGS`` its own
arguments, the same for both sides. ``DIR`` is another checkout of the tree (``git worktree add
/tmp/before main``, or ``git archive <commit> | tar -x -C /tmp/before``) that has the module too;
``--this`` is this tree unless given. For each of ``--rounds`` rounds both sides run the
module once, one after the other, the first side alternating from round to round (this tree
first in even rounds, ``DIR`` first in odd ones), so that neither always runs first on a machine
whose speed drifts. Each run is ``python -m MODULE ARGS`` with this interpreter in a fresh
process whose working directory and ``PYTHONPATH`` are its tree (so it imports that tree's
``tunemix`` and ``bench``) and whose ``NUMBA_CACHE_DIR`` is ``<tree>/.numba-cache``.

The result of a run is the JSON the benchmark writes to its tree's ``bench/results/`` (the file
written or rewritten during the run, the newest if several; ``--result RELPATH`` names it
instead). ``--field`` is a dotted path into that JSON (``datasets.mq2008.summary.tunemix.fit_s``,
``sets.mq2008.scenarios.docs_100.ours.p50_ms``; an integer picks a list item): per side the median
of its value over the rounds, and the ratio of this tree's median to ``DIR``'s.

Writes ``bench/results/ab_<module>.json`` (``--name``: another name; ``--out``: a path): the
command, both trees, every run (side, seconds, the JSON it wrote, the field's value), the medians
and the ratio. A side's failure ends the A/B with exit 1 (its output is printed).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.common import RESULTS, ROOT, machine_info

SIDES = ("this", "before")


def module_name(name: str) -> str:
    """``defaults`` and ``bench.defaults`` both name ``bench.defaults``."""
    return name if "." in name else f"bench.{name}"


def module_file(tree: Path, module: str) -> Path:
    return tree.joinpath(*module.split(".")).with_suffix(".py")


def side_order(round_index: int) -> tuple[str, str]:
    """This tree first in even rounds, the other tree first in odd ones."""
    return SIDES if round_index % 2 == 0 else (SIDES[1], SIDES[0])


def snapshot(results_dir: Path) -> dict[Path, tuple[int, int]]:
    """(mtime in ns, size) of every JSON file under ``results_dir``."""
    if not results_dir.is_dir():
        return {}
    out = {}
    for path in results_dir.rglob("*.json"):
        st = path.stat()
        out[path] = (st.st_mtime_ns, st.st_size)
    return out


def written(before: dict[Path, tuple[int, int]], after: dict[Path, tuple[int, int]]) -> list[Path]:
    """The files new or changed between two snapshots, newest first."""
    changed = [p for p, sig in after.items() if before.get(p) != sig]
    return sorted(changed, key=lambda p: after[p][0], reverse=True)


def field_value(payload: Any, path: str) -> float:
    """The number at the dotted ``path`` of ``payload`` (integers index lists)."""
    node = payload
    for part in path.split("."):
        if isinstance(node, list):
            node = node[int(part)]
        elif isinstance(node, dict) and part in node:
            node = node[part]
        else:
            raise KeyError(f"{path!r}: no {part!r} in the result")
    if isinstance(node, bool) or not isinstance(node, int | float):
        raise TypeError(f"{path!r} is {node!r}, not a number")
    return float(node)


def run_side(tree: Path, module: str, args: list[str], result: str | None,
             timeout: float | None) -> dict[str, Any]:
    """One run of ``python -m module args`` in ``tree``; what it wrote to ``tree/bench/results``."""
    results_dir = tree / "bench" / "results"
    env = {**os.environ, "PYTHONPATH": str(tree), "NUMBA_CACHE_DIR": str(tree / ".numba-cache")}
    seen = snapshot(results_dir)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", module, *args], cwd=tree, env=env, capture_output=True,
                          text=True, timeout=timeout)
    seconds = round(time.perf_counter() - t0, 2)
    if proc.returncode != 0:
        sys.stdout.write(proc.stdout)
        sys.stderr.write(proc.stderr)
        raise SystemExit(f"{module} in {tree} exited with {proc.returncode}")
    if result is not None:
        path = tree / result
        if not path.is_file():
            raise SystemExit(f"{module} in {tree} wrote no {result}")
    else:
        new = written(seen, snapshot(results_dir))
        if not new:
            raise SystemExit(f"{module} in {tree} wrote no JSON under {results_dir}")
        path = new[0]
    return {"seconds": seconds, "result_file": str(path.relative_to(tree)), "result": json.loads(path.read_text())}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    split = argv.index("--") if "--" in argv else len(argv)
    own, bench_cmd = argv[:split], argv[split + 1:]
    parser = argparse.ArgumentParser(prog="python -m bench.ab", description=__doc__.split("\n\n")[0],
                                     usage="%(prog)s --before DIR [options] -- MODULE [ARGS...]")
    parser.add_argument("--before", type=Path, required=True, help="the other checkout of the tree")
    parser.add_argument("--this", type=Path, default=ROOT, help="this side's tree (default: this checkout)")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each side (default 3)")
    parser.add_argument("--field", help="dotted path of the number to compare in the benchmark's JSON")
    parser.add_argument("--result", help="the JSON the benchmark writes, relative to the tree")
    parser.add_argument("--timeout", type=float, help="seconds one run may take")
    parser.add_argument("--name", help="output name under bench/results (default ab_<module>)")
    parser.add_argument("--out", type=Path, help="output path (default bench/results/NAME.json)")
    args = parser.parse_args(own)
    if not bench_cmd:
        parser.error("name the benchmark module after --")
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    module, bench_args = module_name(bench_cmd[0]), bench_cmd[1:]
    trees = {"this": args.this.resolve(), "before": args.before.resolve()}
    for side, tree in trees.items():
        if not module_file(tree, module).is_file():
            parser.error(f"{side} tree {tree} has no {module_file(tree, module).relative_to(tree)}")

    runs: list[dict[str, Any]] = []
    for r in range(args.rounds):
        for side in side_order(r):
            print(f"[ab] round {r + 1}/{args.rounds}: {side} ({trees[side]})", flush=True)
            run = {"round": r, "side": side, **run_side(trees[side], module, bench_args, args.result, args.timeout)}
            if args.field:
                run["value"] = field_value(run["result"], args.field)
                print(f"[ab]   {args.field} = {run['value']:g} ({run['seconds']} s)", flush=True)
            runs.append(run)

    record: dict[str, Any] = {
        "benchmark": args.name or f"ab_{module.rsplit('.', 1)[-1]}",
        "machine": machine_info(),
        "command": "python -m bench.ab " + " ".join(own) + " -- " + " ".join(bench_cmd),
        "module": module, "args": bench_args, "trees": {k: str(v) for k, v in trees.items()},
        "rounds": args.rounds, "field": args.field, "runs": runs,
    }
    if args.field:
        medians = {side: statistics.median(run["value"] for run in runs if run["side"] == side) for side in SIDES}
        record["median"] = medians
        record["ratio_this_over_before"] = medians["this"] / medians["before"] if medians["before"] else None
        print(f"[ab] {args.field}: median this {medians['this']:g}, before {medians['before']:g}, "
              f"this / before {record['ratio_this_over_before']}")
    out = args.out or RESULTS / f"{record['benchmark']}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=2, default=float) + "\n")
    print(f"[ab] wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
