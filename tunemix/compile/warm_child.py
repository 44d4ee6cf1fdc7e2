"""The warm-up's child process: its start, its report, and its last part left in the background
so that ``make serve`` waits only for what the service and the default model need.

``start_part`` runs ``python -m tunemix.compile.warm --part learners rest`` beside the serving
part (``tunemix.compile.warm``); each part it finishes is a JSON line on its stdout
(``finish_parts`` reads them, ``said`` prints the line a user sees).

``tunemix demo`` on a cold cache (``make serve``'s step) needs the serving kernels and the default
model's (``warm_tables.BEFORE_READY``) before it fits and the service says /ready; the other
learners' kernels (every member type and class count of configs/mq2008.toml: ``PART_MEMBERS
["rest"]``) only a later ``tunemix train`` needs. So the child process that compiles the
``learners`` part goes on with ``rest`` after reporting ``learners``, niced (``os.nice``: the
service and the demo's fit first), its output in ``BACKGROUND_LOG`` in the cache, while the
demo fits, exits and the service starts; it writes the stamp (``warm.STAMP``: every kernel
compiled) when ``rest`` is done and the parent said that its own parts succeeded (a line on the
child's stdin; a parent that died says nothing, and no stamp is written).

The child holds an exclusive ``flock`` on ``LOCK`` in the cache from its start to its exit (the
kernel releases it when the process ends, however it ends). ``wait_for_background`` (``tunemix
train``, ``tunemix warm``, ``TuneMixRanker.fit`` on a cold cache) waits on that lock, saying
so, instead of compiling the same kernels beside it; then the stamp says whether anything is left
(a failed background part leaves it to the caller's own warm-up, which loads what was saved).
A kernel the background part has not saved yet is compiled by whichever process calls it first:
numba's cache takes two writers (``tunemix.core.numba_cache``).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import IO, Any

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no background part (warm() runs every part itself)
    fcntl = None  # type: ignore[assignment]

#: held by the background part for its whole life, in the numba cache directory
LOCK = "tunemix-warm.lock"
#: the background part's output, in the numba cache directory
BACKGROUND_LOG = "tunemix-warm-background.log"
#: what the parent writes on the child's stdin once its own parts succeeded
PARENT_DONE = "serving done"


def start_part(names: list[str], background: Path | None = None) -> Any:
    """``python -m tunemix.compile.warm --part names...`` in a child process on this cache;
    with ``background`` (a log file), the parts after the first go on there after this process
    exits (``tunemix.compile.warm_child``)."""
    import subprocess

    # the child imports this process's training package (numba caches a kernel under its source
    # file's path: another copy of the code would fill another part of the cache)
    root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, *filter(None, [os.environ.get("PYTHONPATH")])]),
               TUNEMIX_WARM_T0=repr(time.time()))
    args = [sys.executable, "-m", "tunemix.compile.warm", "--part", *names]
    if background is None:
        proc = subprocess.Popen(args, cwd=root, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
    else:
        background.parent.mkdir(parents=True, exist_ok=True)
        with background.open("w") as log_file:  # the child's stderr from its start, its stdout after its first part
            proc = subprocess.Popen([*args, "--background", str(background)], cwd=root, env=env,
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log_file, text=True)
    proc.started_at = float(env["TUNEMIX_WARM_T0"])  # type: ignore[attr-defined]
    return proc


def said(out: Any, result: dict[str, Any]) -> dict[str, Any]:
    """The line ``tunemix warm`` prints for a part done (``result``: ``warm.warm_part``'s)."""
    cpu = f"; {result['cpu_s']:.1f} CPU-s" if "cpu_s" in result else ""
    out.write(f"tunemix warm: part {result['part']} done in {result['seconds']:.1f} s ({result['compiled']} kernel "
              f"specialisations compiled, {result['loaded']} loaded{cpu})\n")
    out.flush()
    return result


def _reported(lines: list[str], names: list[str]) -> dict[str, dict[str, Any]]:
    """The child's JSON lines of the parts it finished, by name."""
    done: dict[str, dict[str, Any]] = {}
    for line in lines:
        try:
            result = json.loads(line)
        except ValueError:
            continue
        if isinstance(result, dict) and result.get("part") in names:
            done[result["part"]] = result
    return done


def finish_parts(names: list[str], proc: Any, out: Any, background: Path | None) -> list[dict[str, Any]]:
    """What the child reported of ``names`` (a failed part left out, said on ``out``); with
    ``background``, only its first part, awaited (the others go on in the child)."""
    if background is None:
        stdout, stderr = proc.communicate()
        where = stderr[-2000:]
        done = _reported(stdout.splitlines(), names)
    else:
        names = names[:1]
        done = _reported([proc.stdout.readline()], names)
        proc.stdout.close()
        where = f"see {background}"
    exited_s = round(time.time() - proc.started_at, 2)
    for name in names:
        if name not in done:  # the final pass compiles what this part did not: say so, go on
            out.write(f"tunemix warm: part {name} failed (exit {proc.poll()}); the final pass compiles its kernels "
                      f"instead: {where}\n")
    # from the parent's start of the child: its start-up before the part, and its exit after
    return [said(out, {**done[n], "exited_s": exited_s}) for n in names if n in done]


def supported() -> bool:
    """A background part needs ``flock`` (its lock) and ``os.nice``."""
    return fcntl is not None and hasattr(os, "nice")


def hold_lock(where: Path) -> int:
    """The exclusive lock on ``where / LOCK``, taken (blocking) and kept: its descriptor (the
    process's exit releases it)."""
    where.mkdir(parents=True, exist_ok=True)
    fd = os.open(where / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def wait_for_background(where: Path, out: IO[str]) -> float | None:
    """Wait for a background warm-up part holding ``where / LOCK`` to exit, saying so on ``out``;
    the seconds waited, or None when none was running."""
    if fcntl is None:  # pragma: no cover
        return None
    try:
        fd = os.open(where / LOCK, os.O_RDONLY)
    except OSError:  # no lock file: no background part ever ran on this cache
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            return None
        except BlockingIOError:
            pass
        out.write(f"tunemix: the numba kernels are still compiling in the background (started by tunemix demo; "
                  f"log {where / BACKGROUND_LOG}): waiting for them ...\n")
        out.flush()
        started = time.perf_counter()
        fcntl.flock(fd, fcntl.LOCK_SH)  # blocks until the background part exits
        waited = time.perf_counter() - started
        out.write(f"tunemix: the background compilation is done (waited {waited:.1f} s)\n")
        out.flush()
        return waited
    finally:
        os.close(fd)


def go_background(log_path: Path) -> None:
    """In the child, once its first part is reported: later output to ``log_path`` (the parent
    may exit and close the pipes), and the lowest priority (the service and the demo's fit run
    first). Threads started from now on inherit the priority."""
    sys.stdout.flush()
    sys.stderr.flush()
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    os.nice(19)


def parent_succeeded() -> bool:
    """In the child: the parent's line on stdin (waits for it: the parent writes it or exits)."""
    try:
        return sys.stdin.readline().strip() == PARENT_DONE
    except (OSError, ValueError):
        return False


def tell_child(child: Any, ok: bool) -> None:
    """In the parent: tell the background child whether this process's parts succeeded, and let
    it go on alone (its stdin closed)."""
    try:
        if ok:
            child.stdin.write(PARENT_DONE + "\n")
        child.stdin.close()
    except (OSError, ValueError):  # the child is gone: it wrote no stamp
        pass
