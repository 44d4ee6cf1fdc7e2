"""``tunemix evaluate``: score files evaluated under one or all tool conventions.

Usage::

    tunemix evaluate --data test.txt --scores test.scores --convention all --metrics ndcg@10,err
    tunemix evaluate --data test.txt --scores test.scores --convention trec --metrics map --json
    tunemix evaluate --data test.txt --scores test.scores --plot ndcg.png

``--scores`` holds one float per line, aligned with the data file's documents. The table marks
derived values (the tool has no such metric) with ``*`` and unsupported cutoffs with ``n/a``.
With ``--convention all`` a convention whose tool refuses the input (LightGBM: a label above 30)
shows ``n/a`` and the reason below the table; the other conventions are still reported.
``--json`` prints ``mean`` and ``per_query`` (keyed by qid) per measure, null for no value.
Errors go to stderr with exit code 2, naming file and line where possible.

Wire it into the main parser with ``add_parser(subparsers)``; it sets ``func=run``.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from tunemix.core.evaluation.conventions import CONVENTION_NAMES, get_convention
from tunemix.core.evaluation.evaluate import EvaluationInputError, EvaluationResult, evaluate
from tunemix.core.evaluation.measures import Measure, parse_measures

PROG = "tunemix evaluate"

# What the tools' own readers (C atof, Perl, Java parseDouble) all read the same way: ASCII
# digits, optional sign, decimal point and exponent. Python's float() also takes "1_000" and
# non-ASCII digits, which the tools would read differently, so those are rejected.
_PLAIN_NUMBER = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


class _CliError(Exception):
    """A user error: message for stderr, exit code 2."""


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``evaluate`` sub-command to an argparse ``subparsers`` object."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "evaluate",
        help="evaluate a score file under the public tools' conventions",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    p.add_argument("--data", required=True, help="LETOR/SVMlight data file (labels, qids)")
    p.add_argument("--scores", required=True, help="one float per line, aligned with --data")
    p.add_argument(
        "--convention",
        default="yahoo",
        choices=[*CONVENTION_NAMES, "all"],
        help="which tool's rules to follow, or 'all' side by side (default: yahoo)",
    )
    p.add_argument(
        "--metrics",
        default="ndcg@10,err",
        help="comma-separated measures, e.g. ndcg@10,dcg@5,err,err@10:top=2,p@5,map,meanndcg",
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--plot", metavar="FILE.png", help="draw NDCG@1..10 under every convention")
    p.set_defaults(func=run)
    return p


def read_scores(path: str | Path) -> npt.NDArray[np.float64]:
    """One finite float per line; raise _CliError naming file and line otherwise."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise _CliError(f"{p}: no such scores file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise _CliError(f"{p}: cannot read scores file: {exc}") from None
    lines = text.splitlines()
    while lines and not lines[-1].strip():
        lines.pop()
    out = np.empty(len(lines), dtype=np.float64)
    for i, line in enumerate(lines):
        s = line.strip()
        try:
            v = float(s)
        except ValueError:
            raise _CliError(
                f"{p}: line {i + 1}: expected one number per line, got {line[:40]!r}"
            ) from None
        if not math.isfinite(v):
            raise _CliError(f"{p}: line {i + 1}: score {s!r} is not finite")
        if not _PLAIN_NUMBER.fullmatch(s):
            raise _CliError(
                f"{p}: line {i + 1}: score {s!r} is not a plain decimal number "
                "(ASCII digits with optional sign, point and exponent, e.g. -1.25e-3)"
            )
        out[i] = v
    if out.size == 0:
        raise _CliError(f"{p}: no scores in file")
    return out


def _fmt(v: float | None) -> str:
    return "n/a" if v is None else ("-" if math.isnan(v) else f"{v:.4f}")


def _evaluate_all(
    data: Any, scores: npt.NDArray[np.float64], conventions: list[str], measures: list[Measure],
    errors: dict[str, str] | None = None,
) -> dict[str, tuple[EvaluationResult, list[str]]]:
    """Per convention: its result over the supported measures and the unsupported ones.

    With several conventions, one whose tool refuses the input gets no values (all measures
    unsupported) and its reason in ``errors``; when every convention refuses, the first error
    is raised.
    """
    out: dict[str, tuple[EvaluationResult, list[str]]] = {}
    first_error: EvaluationInputError | None = None
    for name in conventions:
        conv = get_convention(name)
        ok = [m for m in measures if conv.unsupported_reason(m) is None]
        bad = [str(m) for m in measures if conv.unsupported_reason(m) is not None]
        if bad and len(conventions) == 1:
            reason = conv.unsupported_reason(Measure.parse(bad[0]))
            raise EvaluationInputError(str(reason))
        if ok:
            try:
                res = evaluate(
                    data.labels, scores, data.query_offsets, ok, name,
                    docids=data.docids, qids=data.qids,
                )
            except EvaluationInputError as exc:
                if len(conventions) == 1 or errors is None:
                    raise
                first_error = first_error or exc
                errors[name] = str(exc)
                res = EvaluationResult(name, np.asarray(data.qids).astype(np.str_), {}, {}, {}, [])
                bad = [str(m) for m in measures]
        else:
            res = EvaluationResult(name, np.asarray(data.qids).astype(np.str_), {}, {}, {}, [])
        out[name] = (res, bad)
    if first_error is not None and errors is not None and len(errors) == len(conventions):
        raise first_error
    return out


def _json_payload(
    results: dict[str, tuple[EvaluationResult, list[str]]], measures: list[Measure],
    errors: dict[str, str] | None = None,
) -> dict[str, Any]:
    payloads: dict[str, Any] = {}
    for name, (res, bad) in results.items():
        d = res.to_dict()
        if errors and name in errors:
            d["error"] = errors[name]
        for m in bad:
            d["mean"][m] = None
            d["per_query"][m] = None
            d["derived"][m] = None
        order = [str(m) for m in measures]
        for key in ("mean", "per_query", "derived"):
            d[key] = {m: d[key][m] for m in order}
        if bad:
            d["unsupported"] = bad
        payloads[name] = d
    if len(payloads) == 1:
        return next(iter(payloads.values()))
    return {"conventions": payloads}


def _table(
    results: dict[str, tuple[EvaluationResult, list[str]]], measures: list[Measure],
    errors: dict[str, str] | None = None,
) -> str:
    names = list(results)
    keys = [str(m) for m in measures]
    width = max(10, *(len(k) for k in keys))
    head = "measure".ljust(width) + "".join(n.rjust(10) for n in names)
    rows = [head, "-" * len(head)]
    any_derived = False
    for k in keys:
        cells = []
        for n in names:
            res, bad = results[n]
            if k in bad:
                cells.append("n/a")
                continue
            cell = _fmt(res.mean[k])
            if res.derived[k]:
                cell += "*"
                any_derived = True
            cells.append(cell)
        rows.append(k.ljust(width) + "".join(c.rjust(10) for c in cells))
    n_queries = len(next(iter(results.values()))[0].qids)
    rows.append(f"({n_queries} queries)")
    if any_derived:
        rows.append("* derived: the tool has no such metric; same formula under its rules")
    for n in names:
        res, _ = results[n]
        rows.extend(f"warning: {w}" for w in res.warnings)
    rows.extend(f"n/a under {n}: {msg}" for n, msg in (errors or {}).items())
    return "\n".join(rows) + "\n"


def plot_ndcg_curves(data: Any, scores: npt.NDArray[np.float64], path: str | Path) -> None:
    """Draw mean NDCG@1..10 under every convention on one chart (PNG via matplotlib Agg)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ks = list(range(1, 11))
    fig, ax = plt.subplots(figsize=(7, 4.5))
    styles = ["-", "--", ":", "-."]
    markers = ["o", "s", "^", "D", "v", "x", "P", "*", "<", ">"]
    for i, name in enumerate(CONVENTION_NAMES):
        try:
            res = evaluate(
                data.labels, scores, data.query_offsets, [Measure("ndcg", k) for k in ks], name,
                docids=data.docids, qids=data.qids,
            )
        except EvaluationInputError:  # this tool refuses the input (reported with the table)
            continue
        ax.plot(ks, [res.mean[f"ndcg@{k}"] for k in ks], linestyle=styles[i % len(styles)],
                marker=markers[i % len(markers)], label=name)
    ax.set_xlabel("cutoff k")
    ax.set_ylabel("mean NDCG@k")
    ax.set_xticks(ks)
    ax.set_title(f"NDCG@k under the {len(CONVENTION_NAMES)} tool conventions (overlapping lines agree)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    try:
        fig.savefig(path)
    except OSError as exc:
        raise _CliError(f"{path}: cannot write plot: {exc}") from None
    finally:
        plt.close(fig)


def run(args: argparse.Namespace) -> int:
    """Run ``tunemix evaluate``; return the exit code (0 ok, 2 user error)."""
    try:
        return _run(args)
    except _CliError as exc:
        sys.stderr.write(f"{PROG}: error: {exc}\n")
        return 2


def _run(args: argparse.Namespace) -> int:
    from tunemix.core.data.svmlight import read_svmlight

    try:
        measures = list(dict.fromkeys(parse_measures(args.metrics)))
    except (ValueError, TypeError) as exc:
        raise _CliError(f"--metrics: {exc}") from None
    try:
        data = read_svmlight(args.data)
    except (OSError, ValueError) as exc:
        msg = str(exc)
        raise _CliError(msg if str(args.data) in msg else f"{args.data}: {msg}") from None
    if args.plot and not Path(args.plot).resolve().parent.is_dir():
        raise _CliError(f"--plot {args.plot}: directory {Path(args.plot).parent} does not exist")
    scores = read_scores(args.scores)
    if scores.shape[0] != data.n_docs:
        raise _CliError(
            f"{args.scores}: has {scores.shape[0]} scores but {args.data} has {data.n_docs} "
            f"documents; line {min(scores.shape[0], data.n_docs) + 1} has no partner"
        )
    conventions = list(CONVENTION_NAMES) if args.convention == "all" else [args.convention]
    errors: dict[str, str] = {}
    try:
        results = _evaluate_all(data, scores, conventions, measures, errors)
    except EvaluationInputError as exc:
        raise _CliError(f"{args.data}: {exc}") from None
    if args.json:
        sys.stdout.write(json.dumps(_json_payload(results, measures, errors), indent=2) + "\n")
    else:
        sys.stdout.write(_table(results, measures, errors))
    if args.plot:
        try:
            plot_ndcg_curves(data, scores, args.plot)
        except EvaluationInputError as exc:
            raise _CliError(f"{args.data}: {exc}") from None
    return 0


def main(argv: list[str] | None = None) -> int:
    """Stand-alone entry point (``python -m tunemix.cli.evaluate``) for testing."""
    parser = argparse.ArgumentParser(prog="tunemix")
    sub = parser.add_subparsers(dest="command", required=True)
    add_parser(sub)
    args = parser.parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
