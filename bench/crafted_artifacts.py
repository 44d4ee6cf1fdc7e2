"""Crafted model versions for ``bench.cost_attacks``: a good version copied and tampered as someone
who can write the models directory would (``tamper``: a declared width, counts the arrays do not
have, a manifest of many empty objects or nested thousands deep, its checksums rewritten; or bytes
changed under the checksum), then asked for by unauthenticated clients (``Tampered``), or through
``POST /models/reload`` with the token."""

from __future__ import annotations

import hashlib
import io
import json
import random
import shutil
import threading
import zipfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np


def reseal(version: Path) -> None:
    digest = hashlib.sha256((version / "manifest.json").read_bytes()).hexdigest()
    (version / "manifest.sha256").write_text(f"{digest}  manifest.json\n")


def edit_manifest(version: Path, change: Callable[[dict[str, Any]], object], *, seal: bool = True) -> None:
    manifest = json.loads((version / "manifest.json").read_text())
    change(manifest)
    (version / "manifest.json").write_text(json.dumps(manifest))
    if seal:
        reseal(version)


def npy(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=False)
    return buf.getvalue()


def declare_width(version: Path, n_features: int) -> None:
    """The version declares ``n_features`` everywhere its width is stored (the manifest, its model
    section, the forests' ``n_features`` members), its checksums rewritten: only a bound on the width
    itself refuses it."""
    manifest = json.loads((version / "manifest.json").read_text())
    blocks = 1 + len(manifest["model"]["extra_views"])
    replace = {"forest/n_features.npy": npy(np.array(n_features * blocks, dtype=np.int64)),
               "relevance_head/forest/n_features.npy": npy(np.array(n_features, dtype=np.int64))}
    src, tmp = version / "arrays.npz", version / "arrays.tmp"
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(tmp, "w") as zout:
        for info in zin.infolist():
            zout.writestr(info.filename, replace.get(info.filename) or zin.read(info.filename))
    tmp.replace(src)
    digest = hashlib.sha256(src.read_bytes()).hexdigest()

    def widen(m: dict[str, Any]) -> None:
        m["n_features"] = m["model"]["n_features"] = n_features
        m.pop("feature_names", None)
        m["arrays"].update(sha256=digest, bytes=src.stat().st_size)

    edit_manifest(version, widen)


COUNT_EDITS = ("mixer_members", "run_classes", "members_repeated", "top_width", "feature_names")


def tamper(version: Path, kind: str, value: int, rng: random.Random) -> str:
    """Tamper ``version`` as someone who can write the models directory would (checksums rewritten,
    except for ``checksum``); what was done, in words."""
    if kind == "width":
        declare_width(version, value)
        return f"declares {value:,} features"
    if kind == "counts":
        edit = rng.choice(COUNT_EDITS)

        def change(m: dict[str, Any]) -> None:
            model = m["model"]
            if edit == "mixer_members":
                model["mixer"]["n_members"] = value
            elif edit == "run_classes":
                model["runs"][0]["n_classes"] = value
            elif edit == "members_repeated":
                model["members"] = (model["members"] * (value // max(len(model["members"]), 1) + 1))[:value]
            elif edit == "top_width":
                m["n_features"] = min(value, 4096)
            else:
                m["feature_names"] = [f"f{j}" for j in range(value)]

        edit_manifest(version, change)
        return f"{edit} = {value:,}"
    if kind == "bloated":
        edit_manifest(version, lambda m: m["training_record"].update(bulk=[{}] * value))
        return f"{value:,} empty objects"
    if kind == "nesting":
        raw = (version / "manifest.json").read_bytes()
        deep = b'"deep":' + b"[" * value + b"]" * value + b","
        (version / "manifest.json").write_bytes(raw[:1] + deep + raw[1:])
        reseal(version)
        return f"nested {value:,} deep"
    if kind == "checksum":
        edit_manifest(version, lambda m: m.update(created=f"edited {value}"), seal=False)
        return "manifest edited under its checksum"
    raise ValueError(f"unknown tampering {kind!r}")


@dataclass
class Tampered:
    """A tampered version ``name/version`` in ``models_dir``, asked for by ``clients`` threads, each
    request on a fresh connection and unauthenticated (but ``POST /models/reload``, with
    ``token``, when ``reload``); ``done`` is set once ``rounds`` requests are answered."""

    url: str
    models_dir: Path
    base: Path
    kind: str
    value: int
    reload: bool
    clients: int
    n_features: int
    token: str | None
    rounds: int = 30
    seed: int = 0
    seen: Counter[str] = field(default_factory=Counter)
    done: threading.Event = field(default_factory=threading.Event)
    what: str = ""
    name: str = ""  # the tampered version's model and version, once started
    version: str = ""
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    _path: Path | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> None:
        if self.reload:
            name = self.base.parent.name
            taken = {int(p.name[1:]) for p in (self.models_dir / name).glob("v*") if p.name[1:].isdigit()}
            # a number never used before in this run (each attack's seed differs): a worker may still
            # remember an earlier tampered version by its name
            version = f"v{max(taken) + 1 + self.seed % 1000}"
        else:
            name, version = f"tampered{self.seed}", "v1"
        self._path = self.models_dir / name / version
        tmp = self.models_dir / f".incoming-{name}-{version}"
        shutil.copytree(self.base, tmp)
        self.what = tamper(tmp, self.kind, self.value, random.Random(self.seed))
        self._path.parent.mkdir(parents=True, exist_ok=True)
        tmp.rename(self._path)  # appears whole
        self.name, self.version = name, version
        for i in range(self.clients):
            t = threading.Thread(target=self._run, args=(i,), daemon=True)
            t.start()
            self._threads.append(t)

    def _requests(self, i: int) -> list[tuple[str, str, bytes | None, dict[str, str]]]:
        x = np.random.default_rng(i).random((5, self.n_features)).round(3).tolist()
        rank = {"model": self.name, "version": self.version,
                "queries": [{"qid": "q", "ids": [f"d{j}" for j in range(5)], "features": x}]}
        evaluate = {"model": self.name, "version": self.version, "metrics": ["ndcg@10"],
                    "queries": [{"qid": "q", "labels": [1, 0, 2, 0, 1], "features": x}]}
        json_type = {"Content-Type": "application/json"}
        out = [("GET", f"/models/{self.name}", None, {}),
               ("POST", "/rank", json.dumps(rank).encode(), json_type),
               ("POST", "/evaluate", json.dumps(evaluate).encode(), json_type)]
        if self.reload and i == 0:
            body = json.dumps({"model": self.name, "version": self.version}).encode()
            out.append(("POST", "/models/reload", body, {**json_type, "Authorization": f"Bearer {self.token}"}))
        return out

    def _run(self, i: int) -> None:
        requests = self._requests(i)
        k = 0
        with httpx.Client(base_url=self.url, timeout=60) as client:
            while not self._stop.is_set():
                method, path, body, headers = requests[k % len(requests)]
                k += 1
                try:  # a fresh connection each (Connection: close): either worker may take it
                    status = client.request(method, path, content=body,
                                            headers={**headers, "Connection": "close"}).status_code
                except httpx.HTTPError:
                    status = 0
                with self._lock:
                    self.seen[f"{'_'.join(path.split('/')[1:3])}_{status}"] += 1
                    if sum(self.seen.values()) >= self.rounds:
                        self.done.set()

    def stop(self) -> None:
        """Stop the clients; the default model served from the good version again (when a reload
        took the tampered one: one within every limit is a good one) and the tampered one removed."""
        self._stop.set()
        for t in self._threads:
            t.join()
        if self.reload:
            httpx.post(self.url + "/models/reload", json={"model": self.name, "version": self.base.name},
                       headers={"Authorization": f"Bearer {self.token}"}, timeout=120).raise_for_status()
        if self._path is not None:
            shutil.rmtree(self._path, ignore_errors=True)
