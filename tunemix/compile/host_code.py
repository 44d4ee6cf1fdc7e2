"""The host's own code in place of the shipped generic code, compiled in the background.

The compiled code shipped with the package (``tunemix.core.shipped_cache``) is for the generic
x86-64 CPU, slower than code for the host (docs/deployment.md has the figures). When
``tunemix train``/``demo`` or ``TuneMixRanker.fit`` seeds an empty cache from it
(``tunemix.compile.warm.seed_shipped``), ``start_background`` starts

    python -m tunemix.compile.host_code CACHE --background

in its own session, niced (``os.nice(19)``: the fit that started it first), its output in
``LOG`` in the cache. It runs ``tunemix warm`` on an empty temporary cache (the host's code:
the same kernels, ``NUMBA_CPU_NAME`` as the user set it), then writes each entry over the seeded
one (``shipped_cache.merge_cache``, under numba's index lock): processes started afterwards load
the host's code, those started before go on with the generic code they loaded. An exclusive
``flock`` on ``LOCK`` in the cache keeps it to one such process per cache. Nothing starts with
``TUNEMIX_HOST_CODE=0``, without ``flock``/``os.nice``, or without the training extras (the warm-up
fits every member type: an install for serving only keeps the generic code, or the host code its
image warmed at build time). Without ``--background`` it runs in the foreground, once.
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tunemix.compile.warm_child import supported
from tunemix.core.numba_cache import PACKAGE
from tunemix.core.shipped_cache import host_magic_tuple, merge_cache

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no background compilation
    fcntl = None  # type: ignore[assignment]

log = logging.getLogger(__name__)

#: held by the background compilation for its life, in the numba cache
LOCK = "tunemix-host-code.lock"
#: its output, in the numba cache
LOG = "tunemix-host-code.log"


def wanted() -> bool:
    """A background compilation may start: not turned off, and the warm-up can run here."""
    if os.environ.get("TUNEMIX_HOST_CODE", "1").strip() == "0" or not supported():
        return False
    return all(importlib.util.find_spec(name) is not None for name in ("lightgbm", "scipy"))


def _env(cache: Path) -> dict[str, str]:
    root = str(PACKAGE.parent)  # the child imports this package (numba caches by the source's path)
    return dict(os.environ, NUMBA_CACHE_DIR=str(cache), TUNEMIX_SHIPPED_CACHE="0", TUNEMIX_HOST_CODE="0",
                PYTHONPATH=os.pathsep.join([root, *filter(None, [os.environ.get("PYTHONPATH")])]))


def start_background(cache: Path) -> Any:
    """``python -m tunemix.compile.host_code cache --background`` started and left running (module
    docstring); the process, or None when ``wanted()`` says no."""
    if not wanted():
        return None
    cache.mkdir(parents=True, exist_ok=True)
    env = _env(cache)
    with (cache / LOG).open("w") as out:
        return subprocess.Popen([sys.executable, "-m", "tunemix.compile.host_code", str(cache), "--background"],
                                cwd=str(PACKAGE.parent), env=env, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)


def compile_host_code(cache: Path) -> dict[str, Any]:
    """``tunemix warm`` on an empty temporary cache, then its entries written over ``cache``'s."""
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="tunemix-host-code-") as tmp:
        subprocess.run([sys.executable, "-m", "tunemix.cli", "warm"], cwd=str(PACKAGE.parent), env=_env(Path(tmp)),
                       check=True)
        done = merge_cache(Path(tmp), cache, tuple(host_magic_tuple()))
    return {**done, "seconds": round(time.perf_counter() - started, 1)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Compile the host's code over the shipped generic code in a cache.")
    ap.add_argument("cache", type=Path, help="the numba cache (tunemix warm --where)")
    ap.add_argument("--background", action="store_true", help="niced, once per cache (under its lock)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO)
    if args.background and fcntl is not None:
        fd = os.open(args.cache / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            sys.stdout.write("tunemix host code: another process compiles it for this cache\n")
            return 0
        os.nice(19)
    done = compile_host_code(args.cache)
    sys.stdout.write(f"tunemix host code: {done['entries']} compiled specialisations of {done['indexes']} kernels "
                     f"written over the shipped code in {args.cache} in {done['seconds']} s\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
