"""Loaded models and atomic reloads.

A ``ServedModel`` is one loaded, warmed version (its ``EnsembleModel``, manifest and a summary).
``ModelRegistry`` keeps the *current* version of each served model name; a request that names an
older version explicitly gets it from a small cache. Reloading loads and warms the new version
completely before one assignment replaces the old one, so requests in flight keep the object
they started with and finish on it; each response says which version scored it.

Several worker processes follow one another's reloads through ``state_dir/served.json``
(``{"name": "vN"}``): the worker that reloads writes it, the others poll its mtime.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.errors import ServiceError
from tunemix.serving import (
    ArtifactError,
    EnsembleModel,
    check_name,
    check_version,
    list_versions,
    load_model,
    versions_on_disk,
)

log = logging.getLogger(__name__)

STATE_FILE = "served.json"
WORKER_PREFIX = "worker-"
#: what ``GET /models/{name}`` shows of the manifest's training record
TRAINING_SUMMARY_KEYS = ("config", "data", "served", "mixer", "best_member", "evaluation", "timings", "versions")


@dataclass(frozen=True, eq=False)
class ServedModel:
    name: str
    version: str
    path: Path
    model: EnsembleModel
    manifest: dict[str, Any]
    loaded_at: float = field(default_factory=time.time)

    @property
    def n_features(self) -> int:
        return self.model.n_features

    def summary(self, *, detail: bool = False) -> dict[str, Any]:
        """What ``GET /models`` shows: identity, shape, mixer, training metrics."""
        m = self.manifest
        out: dict[str, Any] = {
            "name": self.name,
            "version": self.version,
            "n_features": self.n_features,
            "n_members": self.model.n_members,
            "n_bases": self.model.forest.n_base,
            "views": ["raw", *self.model.extra_views],
            "mixer": self.model.mixer.name,
            "created": m.get("created"),
            "loaded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.loaded_at)),  # ISO-8601, as created
        }
        if detail:
            out["members"] = [mem.name for mem in self.model.members]
            # the trainer writes its record under "training_record" (training.pipeline.train)
            record = m.get("training_record")
            record = record if isinstance(record, dict) else {}
            training = {k: record[k] for k in TRAINING_SUMMARY_KEYS if k in record}
            training.update({k: m[k] for k in ("metrics", "data", "config", "timings", "packages")
                             if k in m and k not in training})
            out["training"] = training
        return out


def _without_paths(message: str, models_dir: Path) -> str:
    """An error message with the server's directories taken out (clients see model/version)."""
    for root in {str(models_dir.resolve()), str(models_dir)}:
        message = message.replace(root + "/", "").replace(root, "<models>")
    return message


def load_served(models_dir: Path, name: str, version: str | None = None) -> ServedModel:
    """Load (latest or ``version``) and warm model ``name``; ServiceError 404/422 naming the problem."""
    try:
        check_name(name)
    except ValueError as exc:
        raise ServiceError(422, f"model: {exc}", kind="unknown_model") from None
    if version is not None:
        try:
            check_version(version)
        except ValueError as exc:
            raise ServiceError(422, f"version: {exc}", kind="unknown_version") from None
    versions = list_versions(models_dir, name)
    if not versions:
        known = list(versions_on_disk(models_dir))
        raise ServiceError(404, f"model {name!r} has no trained version; available: "
                                f"{', '.join(known) if known else 'none'}", kind="unknown_model")
    if version is None:
        version = versions[-1]
    elif version not in versions:
        raise ServiceError(404, f"model {name!r} has no version {version!r} (available: {', '.join(versions)})",
                           kind="unknown_version")
    path = models_dir / name / version
    try:
        model, manifest = load_model(path)
        started = time.perf_counter()
        model.warm_up(parallel=False)  # the parallel paths: after readiness (app.main.warm_in_background)
        log.info("model %s %s: one-thread scoring kernels warm in %.1f s", name, version, time.perf_counter() - started)
    except (ArtifactError, OSError, ValueError) as exc:
        log.error("model %s %s cannot be loaded: %s", name, version, exc)
        raise ServiceError(422, f"model {name!r} {version} cannot be loaded: {_without_paths(str(exc), models_dir)}",
                           kind="corrupt_model") from None
    return ServedModel(name=name, version=version, path=path, model=model, manifest=manifest)


class ModelRegistry:
    """The current version of every served model, plus a few older versions on request."""

    def __init__(self, models_dir: Path, default_model: str, *, max_cached_versions: int = 4,
                 state_dir: Path | None = None) -> None:
        self.models_dir = Path(models_dir)
        self.default_model = default_model
        self.max_cached = max_cached_versions
        self.state_dir = state_dir
        self._current: dict[str, ServedModel] = {}
        self._cache: OrderedDict[tuple[str, str], ServedModel] = OrderedDict()
        self._lock = threading.RLock()
        self._state_mtime: float | None = None
        #: versions that failed to load, with the manifest's mtime then: asked again, they answer
        #: the same error without reading the disk until the manifest changes
        self._failed: dict[tuple[str, str], tuple[float, ServiceError]] = {}
        self.load_error: str | None = None
        self.warm = False  # set by the start-up loader once the default model scores on one thread
        #: set once the parallel scoring paths are compiled too: until then every request scores
        #: on one thread (``app.deps.scoring_turn``)
        self.parallel_warm = False
        self.all_warm = False  # and the evaluation and fusion kernels (app.main.warm_in_background)

    # ------------------------------------------------------------------ lookup
    @property
    def ready(self) -> bool:
        return self.default_model in self._current

    def names(self) -> list[str]:
        return sorted(self._current)

    def current(self, name: str) -> ServedModel | None:
        return self._current.get(name)

    def get(self, name: str | None = None, version: str | None = None) -> ServedModel:
        """The model a request asked for; loads a model or version not yet in memory."""
        name = name or self.default_model
        version = version or None  # "" is no version, as an absent one
        served = self._current.get(name)
        if served is not None and (version is None or version == served.version):
            return served
        if served is None and version is None:
            if name == self.default_model:
                raise ServiceError(503, "the default model is not loaded yet"
                                   + (f": {self.load_error}" if self.load_error else ""), kind="not_ready")
            with self._lock:
                if name not in self._current:
                    self._current[name] = self._load_once(name, None)
                return self._current[name]
        key = (name, version or "")
        with self._lock:
            hit = self._cache.get(key)
            if hit is None:
                hit = self._load_once(name, version)
                self._cache[key] = hit
                while len(self._cache) > self.max_cached:
                    self._cache.popitem(last=False)
            else:
                self._cache.move_to_end(key)
            return hit

    def _load_once(self, name: str, version: str | None) -> ServedModel:
        """``load_served``, remembering a version that cannot be loaded until its manifest changes."""
        stamp = -1.0
        if version is None:
            with contextlib.suppress(OSError, ValueError):
                version = next(reversed(list_versions(self.models_dir, name)), None)
        if version is not None:
            with contextlib.suppress(OSError, ValueError):
                stamp = (self.models_dir / name / version / "manifest.json").stat().st_mtime
            failed = self._failed.get((name, version))
            if failed is not None and failed[0] == stamp:
                raise failed[1]
        try:
            return load_served(self.models_dir, name, version)
        except ServiceError as exc:
            if version is not None and exc.kind == "corrupt_model":
                self._failed[(name, version)] = (stamp, exc)
            raise

    # ------------------------------------------------------------------ loading
    def load_initial(self, names: list[str]) -> None:
        """Load the default model and ``names`` (errors are kept in ``load_error``, never raised)."""
        for name in dict.fromkeys([self.default_model, *names]):
            try:
                self.install(load_served(self.models_dir, name))
            except ServiceError as exc:
                log.error("%s", exc.message)
                if name == self.default_model:
                    self.load_error = exc.message

    def install(self, served: ServedModel) -> ServedModel | None:
        """Make ``served`` current; return the version it replaced."""
        with self._lock:
            old = self._current.get(served.name)
            self._current[served.name] = served  # one assignment: requests see old or new, never a mix
            if served.name == self.default_model:
                self.load_error = None
        log.info("serving %s %s (was %s)", served.name, served.version, old.version if old else "nothing")
        self.publish_self()
        return old

    def reload(self, name: str | None = None, version: str | None = None) -> tuple[ServedModel, ServedModel | None]:
        """Load ``name`` (latest or ``version``), check it fits, swap it in; the old one stays on error."""
        name = name or self.default_model
        new = load_served(self.models_dir, name, version)
        old = self._current.get(name)
        if old is not None and new.n_features != old.n_features:
            raise ServiceError(409, f"model {name!r} {new.version} takes {new.n_features} features but the served "
                               f"{old.version} takes {old.n_features}; clients would break, so {old.version} stays",
                               kind="feature_mismatch")
        self.install(new)
        self._publish()
        return new, old

    # ------------------------------------------------------------------ several workers
    def _publish(self) -> None:
        if self.state_dir is None:
            return
        state = {n: s.version for n, s in self._current.items()}
        self.state_dir.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.state_dir, prefix=".served-")
        with os.fdopen(fd, "w") as fh:
            json.dump(state, fh)
        os.replace(tmp, self.state_dir / STATE_FILE)
        self._state_mtime = (self.state_dir / STATE_FILE).stat().st_mtime

    def publish_self(self) -> None:
        """Write what this worker serves to ``state_dir/worker-<pid>.json`` (with several workers:
        the worker that takes a reload reads them to know when every worker serves it)."""
        if self.state_dir is None:
            return
        state = {n: s.version for n, s in self._current.items()}
        self.state_dir.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.state_dir, prefix=".worker-")
        with os.fdopen(fd, "w") as fh:
            json.dump(state, fh)
        os.replace(tmp, self.state_dir / f"{WORKER_PREFIX}{os.getpid()}.json")

    def workers_serving(self, name: str, version: str) -> tuple[int, list[int]]:
        """(workers serving ``name`` at ``version``, pids of the live workers that do not yet), from
        the workers' own files (a file of a process that no longer runs is removed)."""
        if self.state_dir is None:
            return 1, []
        serving, lagging = 0, []
        for path in self.state_dir.glob(f"{WORKER_PREFIX}*.json"):
            try:
                pid = int(path.stem.removeprefix(WORKER_PREFIX))
                os.kill(pid, 0)
            except (ValueError, ProcessLookupError):
                path.unlink(missing_ok=True)
                continue
            except PermissionError:
                pass
            try:
                state = json.loads(path.read_text())
            except (OSError, ValueError):
                state = {}
            if state.get(name) == version:
                serving += 1
            else:
                lagging.append(pid)
        return serving, sorted(lagging)

    def follow_state(self) -> None:
        """Adopt versions another worker published (called periodically)."""
        if self.state_dir is None:
            return
        path = self.state_dir / STATE_FILE
        try:
            mtime = path.stat().st_mtime
        except FileNotFoundError:
            return
        if mtime == self._state_mtime:
            return
        self._state_mtime = mtime
        try:
            state = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            return
        for name, version in state.items():
            cur = self._current.get(name)
            if cur is None or cur.version != version:
                try:
                    self.install(load_served(self.models_dir, name, version))
                except ServiceError as exc:
                    log.error("could not follow %s %s: %s", name, version, exc.message)
