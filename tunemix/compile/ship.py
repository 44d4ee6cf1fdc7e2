"""The build step of the compiled code shipped with the package (``tunemix.core.shipped_cache``):

    python -m tunemix.compile.ship [OUT] [--cpu-name generic]

runs ``tunemix warm`` in a child process on an empty cache with ``NUMBA_CPU_NAME`` (default
``generic``: code for any x86-64 CPU), then copies numba's index and data files of this package's
kernels into ``OUT`` (default ``tunemix/_compiled`` of the imported package, which the wheel
carries: pyproject.toml's package-data) by package folder, with the manifest written last. The
Dockerfile's wheel stage runs it before ``pip wheel``; a checkout that skips it ships nothing and
compiles on first use. ``collect`` is the copy alone, for a cache built some other way (the tests
build one of a few kernels).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tunemix.core.numba_cache import PACKAGE, sources_digest
from tunemix.core.shipped_cache import FILES, FORMAT, MANIFEST, SHIPPED, environment, package_folders

log = logging.getLogger(__name__)


def collect(cache: Path, out: Path, *, complete: bool, seconds: float | None = None) -> dict[str, Any]:
    """Copy the entries of this package's kernels in numba cache ``cache`` (of one target: their
    key's magic tuple) to the shipped folder ``out`` (replaced), under each kernel's folder in the
    package, and write its manifest; ``complete`` says the cache holds every kernel ``tunemix warm``
    compiles. Returns the manifest."""
    import numba

    digest = sources_digest(PACKAGE)
    folders = package_folders()
    staging = out.with_name(f"{out.name}.building")
    shutil.rmtree(staging, ignore_errors=True)
    magics: set[tuple[Any, ...]] = set()
    indexes = entries = size = 0
    for index in sorted(cache.glob("*/*.nbi")):
        rel = folders.get(index.parent.name)
        if rel is None:  # not a folder of this package
            continue
        with index.open("rb") as f:
            if pickle.load(f) != numba.__version__:
                continue
            stamp, overloads = pickle.loads(f.read())
        if not (isinstance(stamp, tuple) and len(stamp) == 2 and stamp[1] == digest):
            continue  # of other sources: never shipped
        folder = staging / FILES / rel
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(index, folder / index.name)
        for key, name in overloads.items():
            magics.add(tuple(key[1]))
            shutil.copyfile(index.parent / name, folder / name)
            size += (folder / name).stat().st_size
            entries += 1
        indexes += 1
    if len(magics) != 1:
        shutil.rmtree(staging, ignore_errors=True)
        raise RuntimeError(f"the cache {cache} holds this package's kernels for {len(magics)} targets, not one")
    manifest = {"format": FORMAT, "digest": digest.hex(), **environment(), "magic": list(next(iter(magics))),
                "complete": complete, "indexes": indexes, "entries": entries, "bytes": size,
                "build_s": None if seconds is None else round(seconds, 1)}
    (staging / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    shutil.rmtree(out, ignore_errors=True)
    os.replace(staging, out)
    return manifest


def build(out: Path = SHIPPED, *, cpu_name: str = "generic") -> dict[str, Any]:
    """``tunemix warm`` for ``cpu_name`` on an empty cache in a child process, then ``collect``
    into ``out``; its output goes to this process's stderr. Returns the manifest."""
    root = str(PACKAGE.parent)  # the child imports this package (numba caches by the source's path)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="tunemix-ship-") as tmp:
        env = dict(os.environ, NUMBA_CACHE_DIR=tmp, NUMBA_CPU_NAME=cpu_name, TUNEMIX_SHIPPED_CACHE="0",
                   PYTHONPATH=os.pathsep.join([root, *filter(None, [os.environ.get("PYTHONPATH")])]))
        env.pop("NUMBA_CPU_FEATURES", None)  # numba's own for the CPU name (none for generic)
        subprocess.run([sys.executable, "-m", "tunemix.cli", "warm"], cwd=root, env=env, check=True)
        return collect(Path(tmp), out, complete=True, seconds=time.perf_counter() - started)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Build the numba cache shipped with the package (tunemix/_compiled).")
    ap.add_argument("out", nargs="?", type=Path, default=SHIPPED, help=f"the shipped folder (default {SHIPPED})")
    ap.add_argument("--cpu-name", default="generic", help="NUMBA_CPU_NAME of the code (default generic)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    manifest = build(args.out, cpu_name=args.cpu_name)
    sys.stderr.write(f"tunemix ship: {manifest['entries']} compiled specialisations of {manifest['indexes']} kernels "
                     f"({manifest['bytes'] / 1e6:.1f} MB, target {manifest['magic'][1]}) in {args.out}, built in "
                     f"{manifest['build_s']} s\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
