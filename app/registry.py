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

import numpy as np

from app.errors import ServiceError
from training.artifact.store import ArtifactError, check_name, list_versions
from training.scoring.ensemble_model import EnsembleModel, load_model
from training.scoring.forest import single_threaded

log = logging.getLogger(__name__)

STATE_FILE = "served.json"
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
    #: scoring time per document on one thread, measured once after warm-up (the fast lane's
    #: estimate of how long a request would hold the event loop; ``app.fastlane``)
    ns_per_document: float = float("inf")

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
            "loaded_at": self.loaded_at,
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


def load_served(models_dir: Path, name: str, version: str | None = None) -> ServedModel:
    """Load (latest or ``version``) and warm model ``name``; ServiceError 404/422 naming the problem."""
    try:
        check_name(name)
    except ValueError as exc:
        raise ServiceError(422, f"model: {exc}", kind="unknown_model") from None
    versions = list_versions(models_dir, name)
    if not versions:
        raise ServiceError(404, f"model {name!r} has no trained version in {models_dir}", kind="unknown_model")
    if version is None:
        version = versions[-1]
    elif version not in versions:
        raise ServiceError(404, f"model {name!r} has no version {version!r} (available: {', '.join(versions)})",
                           kind="unknown_version")
    path = models_dir / name / version
    try:
        model, manifest = load_model(path)
        model.warm_up()
        ns_per_document = scoring_cost(model)
    except ArtifactError as exc:
        raise ServiceError(422, f"model {name!r} {version} cannot be loaded: {exc}", kind="corrupt_model") from None
    except (OSError, ValueError) as exc:
        raise ServiceError(422, f"model {name!r} {version} cannot be loaded: {exc}", kind="corrupt_model") from None
    return ServedModel(name=name, version=version, path=path, model=model, manifest=manifest,
                       ns_per_document=ns_per_document)


#: the list measured by ``scoring_cost``: long enough that the per-call overhead is small, short
#: enough to take a few milliseconds on a large model
COST_DOCUMENTS = 64


def scoring_cost(model: EnsembleModel, repeats: int = 3) -> float:
    """Nanoseconds per document of ``model.score`` on one thread: the best of ``repeats`` calls
    on one list of ``COST_DOCUMENTS`` varied documents (a warm cache; a request that finds the
    cache cold takes up to about 1.5 times as long)."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((COST_DOCUMENTS, model.n_features)).astype(np.float32)
    offsets = np.array([0, COST_DOCUMENTS], dtype=np.int64)
    best = float("inf")
    with single_threaded():
        for _ in range(repeats):
            t0 = time.perf_counter_ns()
            model.score(x, offsets)
            best = min(best, time.perf_counter_ns() - t0)
    return best / COST_DOCUMENTS


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
        self.load_error: str | None = None
        self.warm = False  # evaluation and fusion kernels compiled (set by the start-up loader)

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
        served = self._current.get(name)
        if served is not None and (version is None or version == served.version):
            return served
        if served is None and version is None:
            if name == self.default_model:
                raise ServiceError(503, "the default model is not loaded yet"
                                   + (f": {self.load_error}" if self.load_error else ""), kind="not_ready")
            with self._lock:
                if name not in self._current:
                    self._current[name] = load_served(self.models_dir, name)
                return self._current[name]
        key = (name, version or "")
        with self._lock:
            hit = self._cache.get(key)
            if hit is None:
                hit = load_served(self.models_dir, name, version)  # version is set on this path
                self._cache[key] = hit
                while len(self._cache) > self.max_cached:
                    self._cache.popitem(last=False)
            else:
                self._cache.move_to_end(key)
            return hit

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
