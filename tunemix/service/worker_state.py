"""The state directory the workers of ``python -m tunemix.service`` share (``TUNEMIX_STATE_DIR``).

Two kinds of small JSON files, each written whole to a temporary file and renamed over the old one
(a reader sees the old or the new file, never half of one)::

    served.json          {"default": "v3"}   the versions the service serves (its pins): written by the
                                             first worker to load at start-up, and by every reload
    worker-<pid>.json    {"serving": {"default": "v3"}, "failed": {"other": "<why it did not load>"}}
                                             what one worker serves, written on every change

A worker starting after a crash loads the pinned versions (not the newest on disk), ``/ready`` and the
``tunemix_model_info`` metric read the workers' files, and a reload waits on them until every worker
follows. The file of a process that no longer runs is removed by the supervisor when the worker exits
(``tunemix.service.supervisor``) and by any reader that finds it.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

STATE_FILE = "served.json"
WORKER_PREFIX = "worker-"

#: what one worker serves: {"serving": {name: version}, "failed": {name: reason},
#: "kernels": {"state": "warm" | "warming"}}
WorkerState = dict[str, dict[str, str]]


def _write(path: Path, data: Any) -> str:
    """``data`` as JSON in a temporary file beside ``path`` (its name returned)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}-")
    with os.fdopen(fd, "w") as fh:
        json.dump(data, fh)
    return tmp


def read_pins(state_dir: Path) -> tuple[dict[str, str], float | None]:
    """(the pinned versions, the file's mtime); ({}, None) when nothing is pinned yet."""
    path = state_dir / STATE_FILE
    try:
        mtime = path.stat().st_mtime
        pins = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}, None
    if not isinstance(pins, dict):
        return {}, mtime
    return {str(k): str(v) for k, v in pins.items()}, mtime


def write_pins(state_dir: Path, versions: dict[str, str], *, only_if_absent: bool = False) -> bool:
    """Pin ``versions``; with ``only_if_absent`` only where no pin exists yet (a hard link: of two
    workers starting together, one pins). Whether this call wrote the file."""
    tmp = _write(state_dir / STATE_FILE, versions)
    try:
        if only_if_absent:
            try:
                os.link(tmp, state_dir / STATE_FILE)
            except FileExistsError:
                return False
            return True
        os.replace(tmp, state_dir / STATE_FILE)
        return True
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def publish_worker(state_dir: Path, pid: int, serving: dict[str, str], failed: dict[str, str],
                   warm: bool = False) -> None:
    """Write what worker ``pid`` serves, what it failed to load and whether its kernels are warm
    (``"kernels": {"state": "warm" | "warming"}``)."""
    data = {"serving": serving, "failed": failed, "kernels": {"state": "warm" if warm else "warming"}}
    tmp = _write(state_dir / f"{WORKER_PREFIX}{pid}.json", data)
    os.replace(tmp, state_dir / f"{WORKER_PREFIX}{pid}.json")


def forget_worker(state_dir: Path, pid: int) -> None:
    """Remove the file of worker ``pid`` (it exited)."""
    (state_dir / f"{WORKER_PREFIX}{pid}.json").unlink(missing_ok=True)


def live_workers(state_dir: Path) -> dict[int, WorkerState]:
    """What each running worker serves, by pid (files of processes that no longer run are removed)."""
    out: dict[int, WorkerState] = {}
    for path in state_dir.glob(f"{WORKER_PREFIX}*.json"):
        try:
            pid = int(path.stem.removeprefix(WORKER_PREFIX))
            os.kill(pid, 0)
        except ValueError:
            continue
        except ProcessLookupError:
            path.unlink(missing_ok=True)
            continue
        except PermissionError:  # a process of another user: alive
            pass
        if _exited(pid):
            continue
        try:
            raw = json.loads(path.read_text())
        except (OSError, ValueError):  # removed meanwhile (the process exited)
            continue
        if not isinstance(raw, dict):
            continue
        out[pid] = {key: {str(k): str(v) for k, v in raw.get(key, {}).items()}
                    for key in ("serving", "failed", "kernels")}
    return out


def _exited(pid: int) -> bool:
    """Whether ``pid`` has exited but not yet been reaped by its parent (a zombie, which ``kill(pid, 0)``
    still finds): on Linux, state ``Z`` in ``/proc/<pid>/stat``."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2:][:1] == "Z"
