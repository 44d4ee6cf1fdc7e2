"""Loaded models and atomic reloads.

A ``ServedModel`` is one loaded, warmed version (its ``EnsembleModel``, manifest, and what
``GET /models`` shows of it, made once when it is loaded).
``ModelRegistry`` keeps the *current* version of each served model name; a request that names an
older version explicitly gets it from a small cache. Reloading loads and warms the new version
completely before one assignment replaces the old one, so requests in flight keep the object
they started with and finish on it; each response says which version scored it.

Several worker processes share a state directory (``tunemix.service.worker_state``): ``served.json`` pins the
versions the service serves (the first worker to load writes it, a reload rewrites it, the other
workers poll its mtime and follow), so a worker restarted after a crash loads what the others serve,
not the newest version on disk; each worker's own file says what it serves, for ``/ready`` (every
worker serves the default model), the ``tunemix_model_info`` metric and a reload's answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from tunemix.core.artifact import (
    MANIFEST,
    MANIFEST_SUM,
    check_name,
    check_version,
    list_versions,
    versions_on_disk,
)
from tunemix.core.explain.explanation import manifest_feature_names
from tunemix.core.scoring.ensemble_model import EnsembleModel, load_model
from tunemix.service import worker_state
from tunemix.service.errors import ServiceError
from tunemix.service.server_paths import without_paths, without_server_paths

log = logging.getLogger(__name__)

#: what ``GET /models/{name}`` shows of the manifest's training record
TRAINING_SUMMARY_KEYS = ("config", "data", "served", "mixer", "best_member", "evaluation", "timings", "versions")
#: the manifest's own fields it shows beside them (where the record has none of that name)
MANIFEST_SUMMARY_KEYS = ("metrics", "data", "config", "timings", "packages")
#: bytes of JSON the training parts of ``GET /models/{name}`` take at most: each part is shown
#: whole while the total fits (a trained model's take about 20 KB), a part that does not is named
#: in ``training_omitted``
MAX_TRAINING_SUMMARY_BYTES = 256 * 1024
#: characters of the manifest's ``created`` shown at most (an ISO-8601 time takes 20)
_MAX_CREATED_CHARS = 64


class NotInMemory(Exception):
    """A model version that must be loaded first, asked for on the event loop (where nothing
    loads): the caller retries in a thread."""


def on_event_loop() -> bool:
    """Whether this thread runs an asyncio event loop (a handler's own code, not a worker thread)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


@dataclass(frozen=True, eq=False)
class ServedModel:
    """One loaded version. What ``GET /models`` and ``GET /models/{name}`` show of it is made once,
    here, when the version is loaded (in the loading thread): ``brief`` (identity and shape) and
    ``detail_json`` (the whole answer of ``GET /models/{name}``, JSON bytes, bounded: the names
    by the model's limits, the training parts by ``MAX_TRAINING_SUMMARY_BYTES``). A request sends
    them as they are; nothing of the manifest is serialised per request."""

    name: str
    version: str
    path: Path
    model: EnsembleModel
    manifest: dict[str, Any]
    loaded_at: float = field(default_factory=time.time)
    #: the manifest's feature names, checked against the model's width (``manifest_feature_names``)
    feature_names: tuple[str, ...] = field(init=False, repr=False)
    #: what ``GET /models`` lists of this version
    brief: dict[str, Any] = field(init=False, repr=False)
    #: the body of ``GET /models/{name}``
    detail_json: bytes = field(init=False, repr=False)

    def __post_init__(self) -> None:
        names = manifest_feature_names(self.manifest, self.n_features)
        created = self.manifest.get("created")
        brief: dict[str, Any] = {
            "name": self.name,
            "version": self.version,
            "n_features": self.n_features,
            "n_members": self.model.n_members,
            "n_bases": self.model.forest.n_base,
            "views": ["raw", *self.model.extra_views],
            "mixer": self.model.mixer.name,
            "created": created if isinstance(created, str) and len(created) <= _MAX_CREATED_CHARS else None,
            "loaded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.loaded_at)),  # ISO-8601, as created
        }
        training, omitted = self._training()
        detail: dict[str, Any] = {**brief, "members": [mem.name for mem in self.model.members], "training": training}
        if omitted:
            detail["training_omitted"] = omitted
        # the names explanations use (the manifest's feature_names; f1, f2, ... for a manifest without them)
        detail["feature_names"] = list(names)
        object.__setattr__(self, "feature_names", names)
        object.__setattr__(self, "brief", brief)
        object.__setattr__(self, "detail_json", msgspec.json.encode(detail))

    @property
    def n_features(self) -> int:
        return self.model.n_features

    def _training(self) -> tuple[dict[str, Any], list[str]]:
        """(the training parts shown, the names of those left out): the record's
        ``TRAINING_SUMMARY_KEYS`` and the manifest's ``MANIFEST_SUMMARY_KEYS``, in that order, each
        whole while their JSON adds up to at most ``MAX_TRAINING_SUMMARY_BYTES``, without server
        paths."""
        m = self.manifest
        # the trainer writes its record under "training_record" (tunemix.train.train)
        record = m.get("training_record")
        record = record if isinstance(record, dict) else {}
        parts = {k: record[k] for k in TRAINING_SUMMARY_KEYS if k in record}
        parts.update({k: m[k] for k in MANIFEST_SUMMARY_KEYS if k in m and k not in parts})
        shown: dict[str, Any] = {}
        omitted: list[str] = []
        left = MAX_TRAINING_SUMMARY_BYTES
        for key, value in parts.items():
            # the record names the trainer's files (data, models_dir): clients see no server path
            value = without_server_paths(value, self.path.parent.parent)
            size = len(msgspec.json.encode(value))
            if size <= left:
                shown[key] = value
                left -= size
            else:
                omitted.append(key)
        return shown, omitted


def load_served(models_dir: Path, name: str, version: str | None = None, *,
                max_bytes: int | None = None) -> ServedModel:
    """Load (latest or ``version``) and warm model ``name``; ServiceError 404/422 naming the problem.

    Every failure of the load (a corrupt or oversized artifact, MemoryError, anything the model's
    arrays make the warm-up raise) is logged and becomes ServiceError 422 ``corrupt_model`` with
    the reason; ``max_bytes``: the arrays' uncompressed total at most (TUNEMIX_MAX_ARTIFACT_BYTES)."""
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
        model, manifest = load_model(path) if max_bytes is None else load_model(path, max_bytes=max_bytes)
        started = time.perf_counter()
        model.warm_up(parallel=False)  # the parallel paths: tunemix.service.main.warm_in_background
        log.info("model %s %s: one-thread scoring kernels warm in %.1f s", name, version, time.perf_counter() - started)
        served = ServedModel(name=name, version=version, path=path, model=model, manifest=manifest)
    except Exception as exc:  # every load failure is the artifact's, reported with its reason
        reason = f"{type(exc).__name__}: {exc}" if isinstance(exc, MemoryError) or not str(exc) else str(exc)
        log.error("model %s %s cannot be loaded: %s", name, version, reason)
        raise ServiceError(422, f"model {name!r} {version} cannot be loaded: {without_paths(reason, models_dir)}",
                           kind="corrupt_model") from None
    return served


class ModelRegistry:
    """The current version of every served model, plus a few older versions on request."""

    def __init__(self, models_dir: Path, default_model: str, *, max_cached_versions: int = 4,
                 state_dir: Path | None = None, max_artifact_bytes: int | None = None) -> None:
        self.models_dir = Path(models_dir)
        self.max_artifact_bytes = max_artifact_bytes
        #: loads under way, by (name, version) or ("", name) for a current model: a request for a
        #: version being loaded waits for that one load (single flight)
        self._loading: dict[tuple[str, str], Future[ServedModel]] = {}
        #: loads of a named version under way, by (name, version), as the start-up load and the pins
        #: poll make them: a version is loaded once however many of the two ask for it at once
        self._version_loads: dict[tuple[str, str], Future[ServedModel]] = {}
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
        #: why a model named at start-up (the default or a preloaded one) could not be loaded
        self.failed: dict[str, str] = {}
        self.warm = False  # set by the start-up loader once the default model scores on one thread
        #: set once the parallel scoring paths are compiled too: until then every request scores
        #: on one thread (``tunemix.service.lanes.scoring_turn``)
        self.parallel_warm = False
        #: every kernel a request can reach is warm (tunemix.service.main.warm_in_background): /ready may say 200
        self.all_warm = False

    # ------------------------------------------------------------------ lookup
    @property
    def ready(self) -> bool:
        return self.default_model in self._current

    def names(self) -> list[str]:
        return sorted(self._current)

    def current(self, name: str) -> ServedModel | None:
        return self._current.get(name)

    def get(self, name: str | None = None, version: str | None = None) -> ServedModel:
        """The model a request asked for; loads a model or version not yet in memory, never on the
        event loop (there it raises :class:`NotInMemory`: call again from a thread). One load per
        version at a time: concurrent requests for a version being loaded wait for that load."""
        name = name or self.default_model
        version = version or None  # "" is no version, as an absent one
        served = self._current.get(name)
        if served is not None and (version is None or version == served.version):
            return served
        if served is None and version is None:
            if name == self.default_model:
                if name in self.failed:
                    raise ServiceError(503, f"the default model {name!r} failed to load: {self.failed[name]}",
                                       kind="model_failed")
                raise ServiceError(503, f"the default model {name!r} is still loading (GET /ready says when "
                                        "it serves)", kind="not_ready")
            return self._single_flight(("", name), lambda: self._load_current(name))
        key = (name, version or "")
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                return hit
        return self._single_flight(key, lambda: self._load_cached(name, version))

    def _single_flight(self, key: tuple[str, str], load: Callable[[], ServedModel]) -> ServedModel:
        """``load()`` once for ``key`` however many threads ask at once; the others get its result
        (or its error). Refused on the event loop (:class:`NotInMemory`)."""
        if on_event_loop():
            raise NotInMemory(f"model {key[0] or key[1]!r} {key[1] if key[0] else ''} must be loaded first")
        with self._lock:
            pending = self._loading.get(key)
            owner = pending is None
            if pending is None:
                pending = self._loading[key] = Future()
        if not owner:
            return pending.result()
        try:
            result = load()
        except BaseException as exc:
            pending.set_exception(exc)
            raise
        else:
            pending.set_result(result)
            return result
        finally:
            with self._lock:
                self._loading.pop(key, None)

    def _load_current(self, name: str) -> ServedModel:
        """A model named for the first time becomes current: the pinned version where a reload pinned one."""
        with self._lock:
            if name in self._current:
                return self._current[name]
        served = self._load_once(name, self.pins().get(name))
        with self._lock:
            if name not in self._current:
                self.install(served)
            return self._current[name]

    def _load_cached(self, name: str, version: str | None) -> ServedModel:
        """An explicitly named version, kept among the ``max_cached`` most recently used."""
        served = self._load_once(name, version)
        with self._lock:
            self._cache[(name, version or "")] = served
            while len(self._cache) > self.max_cached:
                self._cache.popitem(last=False)
        return served

    def _load_once(self, name: str, version: str | None) -> ServedModel:
        """``load_served``, remembering a version that cannot be loaded until its manifest or the
        manifest's checksum file changes."""
        stamp = -1.0
        if version is None:
            with contextlib.suppress(OSError, ValueError):
                version = next(reversed(list_versions(self.models_dir, name)), None)
        if version is not None:
            for file in (MANIFEST, MANIFEST_SUM):
                with contextlib.suppress(OSError, ValueError):
                    stamp = max(stamp, (self.models_dir / name / version / file).stat().st_mtime)
            failed = self._failed.get((name, version))
            if failed is not None and failed[0] == stamp:
                raise failed[1]
        try:
            return self._load_version(name, version)  # shared with the start-up load, the pins poll, reloads
        except ServiceError as exc:
            if version is not None and exc.kind == "corrupt_model":
                self._failed[(name, version)] = (stamp, exc)
            raise

    # ------------------------------------------------------------------ loading
    def _load_version(self, name: str, version: str | None) -> ServedModel:
        """``load_served`` of ``name`` at ``version`` (None: the newest on disk, named before the load),
        once per version at a time: the start-up load, the pins poll, a reload and a request
        naming a version not in memory, asking for the same version together, share one load (a
        second copy of the arrays would double the worker's peak memory), and a version already
        current is not loaded again."""
        if version is None:
            with contextlib.suppress(OSError, ValueError):
                version = next(reversed(list_versions(self.models_dir, name)), None)
        if version is None:  # no version on disk: load_served says so
            return load_served(self.models_dir, name, version, max_bytes=self.max_artifact_bytes)
        key = (name, version)
        with self._lock:
            cur = self._current.get(name)
            if cur is not None and cur.version == version:
                return cur
            pending = self._version_loads.get(key)
            owner = pending is None
            if pending is None:
                pending = self._version_loads[key] = Future()
        if not owner:
            log.info("model %s %s: waiting for its load under way", name, version)
            return pending.result()
        try:
            served = load_served(self.models_dir, name, version, max_bytes=self.max_artifact_bytes)
        except BaseException as exc:
            pending.set_exception(exc)
            raise
        else:
            pending.set_result(served)
            return served
        finally:
            with self._lock:
                self._version_loads.pop(key, None)

    @property
    def load_error(self) -> str | None:
        """Why the default model could not be loaded at start-up (None: it was, or is loading)."""
        return self.failed.get(self.default_model)

    def pins(self) -> dict[str, str]:
        """The versions the service serves, as pinned in the state directory ({} without one)."""
        return worker_state.read_pins(self.state_dir)[0] if self.state_dir is not None else {}

    def load_initial(self, names: list[str]) -> None:
        """Load the default model and ``names``: the pinned versions where the state directory pins
        them (a worker restarted after a crash serves what the others serve), else the newest; then
        pin what was loaded unless another worker pinned first. Errors are kept in ``failed``, never
        raised."""
        pins, mtime = worker_state.read_pins(self.state_dir) if self.state_dir is not None else ({}, None)
        self._state_mtime = mtime
        for name in dict.fromkeys([self.default_model, *names]):
            try:
                served = self._load_version(name, pins.get(name))
                with self._lock:  # (the pins poll or a reload may have installed a version meanwhile)
                    if self._current.get(name) is None:
                        self.install(served)
            except ServiceError as exc:
                log.error("%s", exc.message)
                self.failed[name] = exc.message
                self.publish_self()
        if self.state_dir is not None and mtime is None and self._current:
            loaded = {n: s.version for n, s in self._current.items()}
            if worker_state.write_pins(self.state_dir, loaded, only_if_absent=True):
                self._state_mtime = worker_state.read_pins(self.state_dir)[1]

    def install(self, served: ServedModel) -> ServedModel | None:
        """Make ``served`` current; return the version it replaced."""
        with self._lock:
            old = self._current.get(served.name)
            self._current[served.name] = served  # one assignment: requests see old or new, never a mix
            self.failed.pop(served.name, None)
        log.info("serving %s %s (was %s)", served.name, served.version, old.version if old else "nothing")
        self.publish_self()
        return old

    def _install_new(self, served: ServedModel) -> None:
        """``install``, unless ``served`` is current already (a load the other path shared)."""
        with self._lock:
            if self._current.get(served.name) is not served:
                self.install(served)

    def reload(self, name: str | None = None, version: str | None = None) -> tuple[ServedModel, ServedModel | None]:
        """Load ``name`` (latest or ``version``), check it fits, swap it in; the old one stays on error.
        The load is ``_load_version``'s: a reload asking for a version the start-up load, the pins
        poll or another reload is loading waits for that load, and a version already served is
        not loaded again."""
        name = name or self.default_model
        new = self._load_version(name, version)
        with self._lock:  # checked and installed at once: a load the other paths shared is installed once
            old = self._current.get(name)
            if old is not None and new.n_features != old.n_features:
                raise ServiceError(409, f"model {name!r} {new.version} takes {new.n_features} features but the "
                                   f"served {old.version} takes {old.n_features}; clients would break, so "
                                   f"{old.version} stays", kind="feature_mismatch")
            if old is not new:
                self.install(new)
        self._publish()
        return new, old

    # ------------------------------------------------------------------ several workers
    def _publish(self) -> None:
        """Pin what this worker serves (after a reload): the others follow it."""
        if self.state_dir is None:
            return
        worker_state.write_pins(self.state_dir, {n: s.version for n, s in self._current.items()})
        self._state_mtime = worker_state.read_pins(self.state_dir)[1]

    def publish_self(self) -> None:
        """Write what this worker serves and failed to load to its file in the state directory."""
        if self.state_dir is None:
            return
        with self._lock:
            serving = {n: s.version for n, s in self._current.items()}
            failed = dict(self.failed)
        worker_state.publish_worker(self.state_dir, os.getpid(), serving, failed, self.all_warm)

    def served_by_worker(self) -> dict[int, dict[str, str]]:
        """{pid: {name: version}} of every running worker (this process alone without a state
        directory)."""
        if self.state_dir is None:
            return {os.getpid(): {n: s.version for n, s in self._current.items()}}
        return {pid: st["serving"] for pid, st in worker_state.live_workers(self.state_dir).items()}

    def workers_serving(self, name: str, version: str) -> tuple[int, list[int]]:
        """(workers serving ``name`` at ``version``, pids of the running workers that do not yet)."""
        if self.state_dir is None:
            return 1, []
        serving, lagging = 0, []
        for pid, versions in self.served_by_worker().items():
            if versions.get(name) == version:
                serving += 1
            else:
                lagging.append(pid)
        return serving, sorted(lagging)

    def others_serve_default(self) -> bool:
        """Whether another running worker serves the default model (this one was started after them:
        a restart after a crash)."""
        if self.state_dir is None:
            return False
        return any(self.default_model in versions for pid, versions in self.served_by_worker().items()
                   if pid != os.getpid())

    def readiness(self, workers: int) -> tuple[bool, dict[str, Any]]:
        """(ready, the body of ``GET /ready``): ready when this worker and every one of the ``workers``
        serves the default model and has every kernel warm (scoring, evaluation under every
        convention, fusion, explanations: ``tunemix.compile.serving.warm_all``)."""
        name = self.default_model
        served = self._current.get(name)
        if served is None or not self.warm:
            body: dict[str, Any] = {"status": "failed" if self.load_error else "loading", "model": name}
            if self.load_error:
                body["detail"] = self.load_error
            return False, body
        body = {"status": "ready", "model": name, "version": served.version,
                "kernels": "warm" if self.all_warm else "warming"}
        if not self.all_warm:  # every kernel a request can reach compiles first (tunemix.compile.serving)
            if self.load_error:
                return False, {**body, "status": "failed", "detail": self.load_error}
            return False, {**body, "status": "warming", "detail": "compiling or loading the scoring, evaluation, "
                                                                  "fusion and explanation kernels"}
        if self.state_dir is None:
            return True, body
        states = worker_state.live_workers(self.state_dir)
        serving = sorted(pid for pid, st in states.items()
                         if name in st["serving"] and st.get("kernels", {}).get("state") == "warm")
        body.update(workers_serving=len(serving), workers_total=max(workers, len(states)))
        if len(serving) >= body["workers_total"]:
            return True, body
        failed = {pid: st["failed"][name] for pid, st in states.items() if name in st["failed"]}
        body["status"] = "failed" if failed else "loading"
        body["detail"] = (f"{len(serving)} of {body['workers_total']} workers serve the default model {name!r} "
                          "with every kernel warm"
                          + "".join(f"; worker {pid} failed to load it: {why}" for pid, why in sorted(failed.items())))
        return False, body

    def state_changed(self) -> bool:
        """Whether the pins file's mtime differs from the one this worker last read (one ``stat``
        of a file in the worker's own state directory, cheap enough for the event loop): the
        periodic poll hops to a thread for ``follow_state`` only then. A missing file is no
        change (``follow_state`` would do nothing either)."""
        if self.state_dir is None:
            return False
        try:
            mtime = (self.state_dir / worker_state.STATE_FILE).stat().st_mtime
        except OSError:
            return False
        return mtime != self._state_mtime

    def follow_state(self) -> None:
        """Adopt versions another worker pinned (called periodically, when ``state_changed``)."""
        if self.state_dir is None:
            return
        state, mtime = worker_state.read_pins(self.state_dir)
        if mtime is None or mtime == self._state_mtime:
            return
        self._state_mtime = mtime
        for name, version in state.items():
            cur = self._current.get(name)
            if cur is None or cur.version != version:
                try:
                    self._install_new(self._load_version(name, version))
                except ServiceError as exc:
                    log.error("could not follow %s %s: %s", name, version, exc.message)
