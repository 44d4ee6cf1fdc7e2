"""The command-line options of ``python -m tunemix.service`` and ``tunemix serve``: each one a ``TUNEMIX_*``
environment variable set for the server and its workers (``tunemix.service.settings``), so that an option and
its variable can never disagree, and an option the server does not know is refused (exit status 2
with argparse's message) instead of being ignored while the server starts with its defaults.

Standard library only: ``tunemix``'s command line builds its ``serve`` parser from this module
without importing the service.
"""

from __future__ import annotations

import argparse
import os

#: (option, environment variable, type, help)
OPTIONS: tuple[tuple[str, str, type, str], ...] = (
    ("--models-dir", "TUNEMIX_MODELS_DIR", str, "directory of <name>/vN versions"),
    ("--model", "TUNEMIX_DEFAULT_MODEL", str, "the default model"),
    ("--host", "TUNEMIX_HOST", str, "address to listen on (default 127.0.0.1, this machine only: 0.0.0.0 "
                                    "serves every interface, with nothing in front to authenticate)"),
    ("--port", "TUNEMIX_PORT", int, "port (default 8000)"),
    ("--workers", "TUNEMIX_WORKERS", int, "worker processes (default: one per usable core)"),
)

DESCRIPTION = ("Serve the trained models over HTTP (uvicorn). Every setting is a TUNEMIX_* environment "
               "variable (docs/service.md lists them all); the options below set the most common ones and "
               "take precedence over the environment.")


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """``parser`` with the options of ``OPTIONS`` (each defaulting to None: the environment's)."""
    for flag, var, kind, text in OPTIONS:
        parser.add_argument(flag, type=kind, default=None, help=f"{text} ({var})")
    return parser


def parser(prog: str = "python -m tunemix.service") -> argparse.ArgumentParser:
    return add_arguments(argparse.ArgumentParser(prog=prog, description=DESCRIPTION))


def to_environment(args: argparse.Namespace) -> dict[str, str]:
    """Set each given option's variable in ``os.environ`` (read by ``Settings`` here and in every
    worker); returns what was set."""
    values = {var: getattr(args, flag[2:].replace("-", "_")) for flag, var, _, _ in OPTIONS}
    given = {var: str(value) for var, value in values.items() if value is not None}
    os.environ.update(given)
    return given
