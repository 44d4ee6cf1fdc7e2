"""The ``tunemix`` command line: ``data``, ``evaluate``, ``train``, ``demo``, ``warm``, ``predict``,
``explain``, ``serve``, ``models``.

Errors in the user's input (a malformed file, a bad option value) are printed to stderr as one
line naming the file and line where there is one, with exit code 2; warnings (a file narrower
than the model) as one line ``tunemix COMMAND: warning: ...``. A reader that closes the pipe early
(``tunemix predict ... | head``) ends the command quietly (exit 141, as SIGPIPE would).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
import warnings
from collections.abc import Sequence
from typing import Any

# Sub-command modules, each with add_parser(subparsers); imported lazily so that
# `tunemix --help` stays fast and a missing optional extra only affects its own command.
_SUBCOMMANDS = (
    "tunemix.cli.data",
    "tunemix.cli.evaluate",
    "tunemix.cli.train",
    "tunemix.cli.serve",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tunemix",
        description="Calibrated multi-class ensembles for learning to rank.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in _SUBCOMMANDS:
        module = importlib.import_module(name)
        module.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from tunemix.core.scoring.runtime import set_openmp_wait_policy

    set_openmp_wait_policy()  # before numba's first parallel launch (tunemix.core.scoring.runtime)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(levelname)s %(name)s: %(message)s",
    )
    warnings.showwarning = _show_warning(args.command)
    try:
        code = int(args.func(args) or 0)
        sys.stdout.flush()  # a closed pipe raises here, inside the try, not at interpreter exit
        return code
    except BrokenPipeError:
        # the reader stopped early (`tunemix predict ... | head -3`): no traceback, and nothing more
        # written to the closed pipe (Python's documented recipe: stdout to devnull before exit)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, as a C tool killed by the signal
    except (ValueError, FileNotFoundError, IsADirectoryError, PermissionError) as exc:
        sys.stderr.write(f"tunemix {args.command}: error: {exc}\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write("tunemix: interrupted\n")
        return 130


def _show_warning(command: str) -> Any:
    """Warnings (a file narrower than the model, predict without group) as one line on stderr,
    ``tunemix COMMAND: warning: ...``, without Python's source line."""

    def show(message: Warning | str, category: type[Warning], filename: str, lineno: int,
             file: Any = None, line: str | None = None) -> None:
        sys.stderr.write(f"tunemix {command}: warning: {message}\n")

    return show

