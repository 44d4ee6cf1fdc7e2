"""``tunemix.core.shipped_cache`` and ``tunemix.compile.ship``: compiled code shipped with the package
seeds an empty numba cache, so that a fresh process loads the kernel instead of compiling it; a
shipped cache of other sources is refused, and without one nothing changes.

The shipped cache here holds one small kernel (``normalization._standardise``) compiled for the
generic x86-64 CPU in a child process, collected as the build step collects the whole warm-up's."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tunemix.compile import host_code, warm
from tunemix.compile.ship import collect
from tunemix.core import shipped_cache
from tunemix.core.numba_cache import PACKAGE, sources_digest

ROOT = Path(__file__).resolve().parents[1]

#: calls the kernel; prints its cache hits and misses and its output
CALL = textwrap.dedent('''
    import json
    import numpy as np
    from tunemix.core.data import normalization as nz
    x = np.random.default_rng(0).normal(size=(50, 4)).astype(np.float32)
    off = np.array([0, 20, 50], dtype=np.int64)
    out = np.empty_like(x)
    nz._standardise(x, off, out, 10**9)
    st = nz._standardise.stats
    print(json.dumps({"hits": sum(st.cache_hits.values()), "misses": sum(st.cache_misses.values()),
                      "out": out.tolist()}))
''')

#: seeds ``argv[1]`` (a cache) once ``argv[2]/go`` exists, after saying it is ready
SEED = textwrap.dedent('''
    import sys, time
    from pathlib import Path
    from tunemix.core import shipped_cache
    work = Path(sys.argv[2])
    (work / f"ready-{sys.argv[3]}").touch()
    while not (work / "go").exists():
        time.sleep(0.001)
    print(shipped_cache.seed(cache=Path(sys.argv[1]))["status"])
''')


def run(code: str, cache: Path, shipped: str, *args: str, cpu: str | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache), TUNEMIX_SHIPPED_CACHE=shipped, PYTHONPATH=str(ROOT))
    env.pop("NUMBA_CPU_NAME", None)
    env.pop("NUMBA_CPU_FEATURES", None)
    if cpu is not None:
        env["NUMBA_CPU_NAME"] = cpu
    out = subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    return out


def call(cache: Path, shipped: str, cpu: str | None = None) -> dict[str, object]:
    return dict(json.loads(run(CALL, cache, shipped, cpu=cpu).stdout.splitlines()[-1]))


@pytest.fixture(scope="module")
def shipped(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A shipped cache of the one kernel, compiled for the generic CPU."""
    work = tmp_path_factory.mktemp("ship")
    built = call(work / "build", "0", cpu="generic")
    assert (built["hits"], built["misses"]) == (0, 1)
    manifest = collect(work / "build", work / "shipped", complete=False)
    assert manifest["magic"][1] == "generic" and manifest["entries"] == 1
    assert manifest["digest"] == sources_digest(PACKAGE).hex()
    return work / "shipped"


def index_keys(cache: Path) -> list[tuple[object, ...]]:
    """The keys of the kernel's index in ``cache``."""
    (index,) = cache.glob("*/normalization._standardise-*.nbi")
    with index.open("rb") as f:
        pickle.load(f)
        _, overloads = pickle.loads(f.read())
    return list(overloads)


def test_a_fresh_process_on_an_empty_cache_loads_the_shipped_kernel(shipped: Path, tmp_path: Path) -> None:
    seeded = call(tmp_path / "user", str(shipped))
    assert (seeded["hits"], seeded["misses"]) == (1, 0)  # loaded, not compiled
    (key,) = index_keys(tmp_path / "user")
    host = shipped_cache.host_magic_tuple()
    assert tuple(key[1]) == tuple(host)  # keyed for this host
    assert list(tmp_path.glob("user/tunemix-shipped-*.json"))  # the marker
    own = call(tmp_path / "host", "0")  # the host's own code, compiled
    assert (own["hits"], own["misses"]) == (0, 1)
    assert seeded["out"] == own["out"]


def test_a_shipped_cache_of_other_sources_is_refused(shipped: Path, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    other = tmp_path / "other"
    shutil.copytree(shipped, other)
    manifest = json.loads((other / "manifest.json").read_text())
    (other / "manifest.json").write_text(json.dumps({**manifest, "digest": "00" * 32}))
    monkeypatch.setenv("TUNEMIX_SHIPPED_CACHE", str(other))
    done = shipped_cache.seed(shipped_cache.host_magic_tuple(), cache=tmp_path / "user")
    assert done["status"] == "refused" and "other sources" in done["reason"]
    assert not list((tmp_path / "user").glob("**/*.nbi"))
    fresh = call(tmp_path / "fresh", str(other))
    assert (fresh["hits"], fresh["misses"]) == (0, 1)  # compiled: the shipped code is not loaded


def test_without_a_shipped_cache_nothing_is_seeded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TUNEMIX_SHIPPED_CACHE", str(tmp_path / "none"))
    assert shipped_cache.seed(("t", "c", "f"), cache=tmp_path / "user")["status"] == "absent"
    monkeypatch.setenv("TUNEMIX_SHIPPED_CACHE", "0")
    assert shipped_cache.seed(("t", "c", "f"), cache=tmp_path / "user")["status"] == "off"
    assert not (tmp_path / "user").exists()
    assert not warm.seed_shipped(tmp_path / "user")  # the warm-up goes on as without
    fresh = call(tmp_path / "fresh", str(tmp_path / "none"))
    assert (fresh["hits"], fresh["misses"]) == (0, 1)
    assert not list((tmp_path / "fresh").glob("tunemix-shipped-*.json"))


def test_two_processes_seeding_at_once_leave_one_entry(shipped: Path, tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    env = dict(os.environ, TUNEMIX_SHIPPED_CACHE=str(shipped), PYTHONPATH=str(ROOT))
    kids = [subprocess.Popen([sys.executable, "-c", SEED, str(tmp_path / "user"), str(work), name], cwd=ROOT,
                             env=env, stdout=subprocess.PIPE, text=True) for name in "ab"]
    while not all((work / f"ready-{name}").exists() for name in "ab"):
        assert all(k.poll() is None for k in kids), "a child exited before seeding"
        time.sleep(0.001)
    (work / "go").touch()
    statuses = sorted(k.communicate()[0].strip() for k in kids)
    assert [k.returncode for k in kids] == [0, 0]
    assert set(statuses) <= {"seeded", "seeded already"}
    assert len(index_keys(tmp_path / "user")) == 1
    assert len(list((tmp_path / "user").glob("*/normalization._standardise-*.nbc"))) == 1
    loaded = call(tmp_path / "user", str(shipped))
    assert (loaded["hits"], loaded["misses"]) == (1, 0)


def test_the_host_code_a_cache_holds_is_kept(shipped: Path, tmp_path: Path) -> None:
    own = call(tmp_path / "user", "0")
    assert (own["hits"], own["misses"]) == (0, 1)
    (data,) = (tmp_path / "user").glob("*/normalization._standardise-*.nbc")
    before = data.read_bytes()
    (tmp_path / "go").touch()  # the seeding child goes at once
    done = run(SEED, tmp_path / "user", str(shipped), str(tmp_path / "user"), str(tmp_path), "a")
    assert done.stdout.strip() == "seeded"
    assert len(index_keys(tmp_path / "user")) == 1 and data.read_bytes() == before


def test_a_complete_shipped_cache_makes_the_cache_warm(shipped: Path, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    complete = tmp_path / "complete"
    shutil.copytree(shipped, complete)
    manifest = json.loads((complete / "manifest.json").read_text())
    (complete / "manifest.json").write_text(json.dumps({**manifest, "complete": True}))
    monkeypatch.setenv("TUNEMIX_HOST_CODE", "0")  # no background compilation of every kernel here
    monkeypatch.setenv("TUNEMIX_SHIPPED_CACHE", str(shipped))
    assert not warm.seed_shipped(tmp_path / "partial")  # one kernel of many: the warm-up still runs
    assert not (tmp_path / "partial" / warm.STAMP).exists()
    monkeypatch.setenv("TUNEMIX_SHIPPED_CACHE", str(complete))
    assert warm.seed_shipped(tmp_path / "user")
    assert json.loads((tmp_path / "user" / warm.STAMP).read_text()) == warm._stamp_key()


def test_the_host_code_replaces_the_seeded_code(shipped: Path, tmp_path: Path) -> None:
    seeded = call(tmp_path / "user", str(shipped))
    assert (seeded["hits"], seeded["misses"]) == (1, 0)
    (generic,) = (tmp_path / "user").glob("*/normalization._standardise-*.nbc")
    own = call(tmp_path / "host", "0")
    assert (own["hits"], own["misses"]) == (0, 1)
    (host,) = (tmp_path / "host").glob("*/normalization._standardise-*.nbc")
    assert host.read_bytes() != generic.read_bytes()
    done = shipped_cache.merge_cache(tmp_path / "host", tmp_path / "user", tuple(shipped_cache.host_magic_tuple()))
    assert done == {"indexes": 1, "entries": 1}
    (data,) = (tmp_path / "user").glob("*/normalization._standardise-*.nbc")  # the generic file removed
    assert data.read_bytes() == host.read_bytes() and len(index_keys(tmp_path / "user")) == 1
    loaded = call(tmp_path / "user", str(shipped))
    assert (loaded["hits"], loaded["misses"]) == (1, 0) and loaded["out"] == own["out"]


def test_no_background_compilation_when_turned_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TUNEMIX_HOST_CODE", "0")
    assert not host_code.wanted()
    assert host_code.start_background(tmp_path) is None
    assert not (tmp_path / host_code.LOG).exists()
