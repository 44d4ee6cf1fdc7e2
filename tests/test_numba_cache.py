"""``tunemix.core.numba_cache``: numba's cache entries written by one process at a time. Two
processes compile different signatures of one function into one cache at the same moment; a
third then loads every signature from the cache, and each must be its own machine code."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import tunemix.core.numba_cache  # noqa: F401 - installs the lock in this process too
from tunemix.core.numba_cache import locked

ROOT = Path(__file__).resolve().parents[1]

KERNEL = textwrap.dedent('''
    from numba import njit

    @njit(cache=True)
    def f(x):
        return x + x * 3
''')

CHILD = textwrap.dedent('''
    import os, sys, time
    from pathlib import Path
    import numpy as np
    import tunemix.core.numba_cache  # the lock
    sys.path.insert(0, sys.argv[1])
    from kern import f
    go = Path(sys.argv[1]) / "go"
    (Path(sys.argv[1]) / f"ready-{sys.argv[2]}").touch()
    while not go.exists():  # both children start compiling together
        time.sleep(0.001)
    types = [np.int64, np.float64, np.int32, np.float32, np.int16, np.uint8, np.complex128, np.uint32]
    if sys.argv[2] == "b":
        types = types[::-1]
    for t in types:
        f(t(3))
''')

CHECK = textwrap.dedent('''
    import sys
    import numpy as np
    import tunemix.core.numba_cache
    sys.path.insert(0, sys.argv[1])
    from kern import f
    types = [np.int64, np.float64, np.int32, np.float32, np.int16, np.uint8, np.complex128, np.uint32]
    for t in types:
        v = f(t(3))
        assert v == t(3) + t(3) * 3, (t, v)
    hits = sum(f.stats.cache_hits.values())
    misses = sum(f.stats.cache_misses.values())
    print(hits, misses)
''')


def test_two_processes_compiling_one_function_leave_a_consistent_cache(tmp_path: Path) -> None:
    for round_ in range(3):
        work = tmp_path / f"r{round_}"
        work.mkdir()
        (work / "kern.py").write_text(KERNEL)
        env = dict(os.environ, NUMBA_CACHE_DIR=str(work / "cache"), PYTHONPATH=str(ROOT))
        kids = [subprocess.Popen([sys.executable, "-c", CHILD, str(work), name], env=env) for name in "ab"]
        while not all((work / f"ready-{name}").exists() for name in "ab"):
            assert all(k.poll() is None for k in kids), "a child exited before compiling"
            time.sleep(0.001)
        (work / "go").touch()
        assert [k.wait() for k in kids] == [0, 0]
        out = subprocess.run([sys.executable, "-c", CHECK, str(work)], env=env, capture_output=True, text=True)
        assert out.returncode == 0, out.stderr[-2000:]
        hits, misses = (int(v) for v in out.stdout.split())
        # every signature from the cache, each its own code (checked above)
        assert (hits, misses) == (8, 0)


def test_the_lock_is_exclusive_across_processes(tmp_path: Path) -> None:
    """While this process holds the lock, another cannot take it (LOCK_NB fails)."""
    lock = str(tmp_path / "x.lock")
    probe = ("import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDWR)\n"
             "try:\n    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB); print('took')\n"
             "except BlockingIOError:\n    print('held')\n")
    with locked(lock, exclusive=True):
        held = subprocess.run([sys.executable, "-c", probe, lock], capture_output=True, text=True).stdout.strip()
    free = subprocess.run([sys.executable, "-c", probe, lock], capture_output=True, text=True).stdout.strip()
    assert (held, free) == ("held", "took")


def test_the_lock_is_installed_on_import() -> None:
    """Importing a module with cached kernels installs it."""
    from numba.core.caching import IndexDataCacheFile

    import tunemix.core.scoring.forest  # noqa: F401

    assert IndexDataCacheFile.save.__name__ == "locked_save"
    assert IndexDataCacheFile.load.__name__ == "locked_load"


def test_an_unopenable_lock_path_does_not_stop_the_work(tmp_path: Path) -> None:
    with locked(str(tmp_path / "missing-dir" / "x.lock"), exclusive=True):
        done = True
    assert done


def test_every_entry_point_uses_one_cache() -> None:
    """Without NUMBA_CACHE_DIR, the library, the service, the compile plan and the ``tunemix``
    command of this environment all point numba at one cache (``default_cache_dir``: this virtual
    environment's, or the user's), and export it to their child processes."""
    from tunemix.core.numba_cache import default_cache_dir

    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    probe = ("import os, numba, {module}; "
             "print(numba.config.CACHE_DIR); print(os.environ['NUMBA_CACHE_DIR'])")
    seen = set()
    for module in ("tunemix", "tunemix.core.evaluation", "tunemix.service.main", "tunemix.compile.warm"):
        proc = subprocess.run([sys.executable, "-c", probe.format(module=module)], env=env, cwd=ROOT,
                              capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr[-2000:]
        seen.update(proc.stdout.split())
    script = Path(sys.executable).parent / "tunemix"
    if script.exists():  # the command on PATH of this environment
        proc = subprocess.run([str(script), "warm", "--where"], env=env, cwd=ROOT, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr[-2000:]
        seen.add(proc.stdout.strip())
    assert seen == {str(default_cache_dir())}


def test_the_cache_follows_numba_cache_dir(tmp_path: Path) -> None:
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "mine")}
    proc = subprocess.run([sys.executable, "-m", "tunemix.cli", "warm", "--where"], env=env, cwd=ROOT,
                          capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.strip() == str(tmp_path / "mine"), proc.stderr[-2000:]


def test_the_default_cache_is_the_environments_or_the_users(tmp_path: Path, monkeypatch) -> None:
    from tunemix.core import numba_cache

    monkeypatch.setattr(sys, "prefix", str(tmp_path / "venv"))
    monkeypatch.setattr(sys, "base_prefix", "/usr")
    (tmp_path / "venv").mkdir()
    assert numba_cache.default_cache_dir() == tmp_path / "venv" / "numba-cache"
    monkeypatch.setattr(sys, "prefix", "/usr")  # not a virtual environment: the user's cache
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert numba_cache.default_cache_dir() == tmp_path / "cache" / "tunemix" / "numba-cache"


# ---------------------------------------------------------------------------- stale code
CALLER = textwrap.dedent('''
    from numba import njit
    from callee import g

    @njit(cache=True)
    def f(x):
        return g(x) + 1
''')

CALLEE = '''
from numba import njit

@njit(cache=True)
def g(x):
    return x * {factor}
'''

RUN = textwrap.dedent('''
    import sys
    from pathlib import Path
    from tunemix.core import numba_cache
    if sys.argv[2] == "stamped":
        numba_cache.stamp_sources(Path(sys.argv[1]))
    sys.path.insert(0, sys.argv[1])
    from caller import f
    print(f(10))
''')


def run_caller(pkg: Path, cache: Path, how: str) -> int:
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache), "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", RUN, str(pkg), how], env=env, capture_output=True, text=True,
                         check=True, cwd=ROOT)
    return int(out.stdout.split()[-1])


def test_a_change_to_a_called_kernel_recompiles_its_callers(tmp_path: Path) -> None:
    """f (caller.py) calls g (callee.py), both cached. After g's module changes, numba's own stamp
    (f's file) loads f's old machine code, g compiled in: the old answer. With the package's
    stamp (``stamp_sources``), f is compiled again: the new answer."""
    for how in ("numba's own", "stamped"):
        pkg, cache = tmp_path / how.replace(" ", "-").replace("'", ""), tmp_path / f"cache-{len(how)}"
        pkg.mkdir()
        (pkg / "caller.py").write_text(CALLER)
        (pkg / "callee.py").write_text(CALLEE.format(factor=2))
        assert run_caller(pkg, cache, how) == 21
        (pkg / "callee.py").write_text(CALLEE.format(factor=3))
        got = run_caller(pkg, cache, how)
        if how == "stamped":
            assert got == 31
        else:
            assert got == 21  # the stale code this guards against: if numba fixes it, drop the stamp


def test_the_packages_stamp_carries_the_digest_of_its_numba_modules(tmp_path: Path) -> None:
    from tunemix.core.numba_cache import sources_digest

    (tmp_path / "a.py").write_text("import numba\n")
    (tmp_path / "b.py").write_text("x = 1\n")
    (tmp_path / "c.py").write_text('"""Calls the numba kernels of a."""\nNUMBA_THREADS = 2\n')
    (tmp_path / "d.py").write_text("from numba import njit\n")
    first = sources_digest(tmp_path)
    sources_digest.cache_clear()
    (tmp_path / "b.py").write_text("x = 2\n")  # no numba: no part of it
    (tmp_path / "c.py").write_text('"""Calls the numba kernels of a, edited."""\nNUMBA_THREADS = 4\n')  # names it only
    assert sources_digest(tmp_path) == first
    for name, text in (("a.py", "import numba  # changed\n"), ("d.py", "from numba import njit, prange\n")):
        sources_digest.cache_clear()
        (tmp_path / name).write_text(text)  # a module that imports numba: a new digest
        assert sources_digest(tmp_path) != first
        first = sources_digest(tmp_path)
