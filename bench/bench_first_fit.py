"""The first fit on an empty numba cache against the next, both fresh processes, with the compiled
code shipped in the wheel and without it.

    python -m bench.bench_first_fit [--repeat 3] [--contrast-repeat 1] [--wheel PATH]

Builds the wheel as the Dockerfile's wheel stage does (a copy of pyproject.toml, README.md and
tunemix; ``python -m tunemix.compile.ship`` into its ``tunemix/_compiled``, timed; ``pip wheel``)
and installs it with ``pip install --no-deps --target`` into a scratch folder (``--wheel`` installs
that wheel instead and skips the build). Each fit is ``python -m tunemix.cli train`` of MQ2008 Fold1
(its train, vali and test files, the packaged default configuration) in a fresh process importing
that install, timed from ``Popen`` to exit: with the shipped cache, ``--repeat`` times a new empty
``NUMBA_CACHE_DIR`` then the next fit on it; without (``TUNEMIX_SHIPPED_CACHE=0``: the
warm-up compiles every kernel), ``--contrast-repeat`` times the same. Then the speed of the
shipped (generic x86-64) code against the host's own, on the two warm caches, interleaved
(``--speed-rounds`` each): one-thread scoring of the fitted model (100 and 1,000 documents, median
of 30 calls) and the warm fit, each a fresh process. JSON: bench/results/first_fit.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import ROOT, SHARED_DATA, machine_probe_ms, write_result

FOLD = SHARED_DATA / "MQ2008" / "Fold1"


def build_wheel(work: Path) -> tuple[Path, float]:
    """The wheel with the shipped cache, built from a copy of the sources; the ship step's seconds."""
    src = work / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "tunemix", src / "tunemix",
                    ignore=shutil.ignore_patterns("__pycache__", "_compiled", "_compiled.building"))
    env = dict(os.environ, PYTHONPATH=str(src))
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "tunemix.compile.ship"], cwd=src, env=env, check=True)
    ship_s = time.perf_counter() - t0
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", str(work / "wheels"),
                    str(src)], cwd=work, check=True)
    return next((work / "wheels").glob("tunemix-*.whl")), ship_s


def install(wheel: Path, work: Path) -> Path:
    site = work / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(site), str(wheel)],
                   cwd=work, check=True)
    if not (site / "tunemix" / "_compiled" / "manifest.json").is_file():
        raise SystemExit(f"{wheel} carries no shipped cache (tunemix/_compiled/manifest.json)")
    return site


def fit(site: Path, cache: Path, models: Path, shipped: bool) -> dict[str, Any]:
    """One ``tunemix train`` of MQ2008 Fold1 in a fresh process: its seconds, and the record's."""
    # TUNEMIX_HOST_CODE=0: no background compilation of the host's code after a seeding (the next fit
    # loads the shipped code it seeded; the contrast's next fit is the host's own code)
    env = dict(os.environ, PYTHONPATH=str(site), NUMBA_CACHE_DIR=str(cache), TUNEMIX_HOST_CODE="0",
               TUNEMIX_SHIPPED_CACHE="" if shipped else "0")
    env.pop("NUMBA_CPU_NAME", None)
    run_dir = models.parent / "run"  # not the repository: python -m puts the working folder first on sys.path
    run_dir.mkdir(exist_ok=True)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "tunemix.cli", "train", "--train", str(FOLD / "train.txt"),
                           "--vali", str(FOLD / "vali.txt"), "--test", str(FOLD / "test.txt"), "--models-dir",
                           str(models), "--name", "fold1", "--no-progress"], cwd=run_dir, env=env,
                          capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"tunemix train failed: {proc.stderr[-3000:]}")
    version = sorted((models / "fold1").glob("v*"), key=lambda p: int(p.name[1:]))[-1]
    record = json.loads((version / "report.json").read_text())
    compile_ = record.get("numba_compile") or {}
    return {"seconds": round(seconds, 2), "fit_total_s": round(float(record["timings"]["total_s"]), 2),
            "numba_compile_s": round(float(compile_.get("total_s", 0.0)), 2),
            "warmed_up": "the numba cache is cold" in proc.stderr, "model": str(version)}


SCORE = """
import sys, time, statistics, numpy as np
from tunemix.core.scoring import runtime
from tunemix.core.scoring.ensemble_model import load_model
runtime.configure(scoring_threads=1)
m = load_model(sys.argv[1])[0]
rng = np.random.default_rng(0)
for n in (100, 1000):
    x = rng.random((n, m.n_features), dtype=np.float32); off = np.array([0, n])
    m.score(x, off); ts = []
    for _ in range(30):
        t = time.perf_counter(); m.score(x, off); ts.append(time.perf_counter() - t)
    print(n, statistics.median(ts) * 1e3)
"""


def scoring_ms(site: Path, cache: Path, model: str, run_dir: Path) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=str(site), NUMBA_CACHE_DIR=str(cache))
    out = subprocess.run([sys.executable, "-c", SCORE, model], cwd=run_dir, env=env, capture_output=True, text=True,
                         check=True).stdout
    return {f"docs_{n}_ms": round(float(v), 4) for n, v in (line.split() for line in out.splitlines())}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3, help="empty-cache fits, shipped cache (each then the next)")
    ap.add_argument("--contrast-repeat", type=int, default=1, help="the same without the shipped cache")
    ap.add_argument("--wheel", type=Path, default=None, help="a wheel with the shipped cache (skips the build)")
    ap.add_argument("--speed-rounds", type=int, default=3, help="interleaved scoring processes and warm fits per code")
    ap.add_argument("--name", default="first_fit", help="bench/results/<name>.json")
    args = ap.parse_args(argv)
    if not (FOLD / "train.txt").is_file():
        raise SystemExit(f"bench_first_fit: MQ2008 Fold1 not found under {FOLD}")
    work = Path(tempfile.mkdtemp(prefix="tunemix-first-fit-"))
    try:
        result: dict[str, Any] = {"probe_ms_start": machine_probe_ms(),
                                  "command": "python -m bench.bench_first_fit " + " ".join(
                                      argv if argv is not None else sys.argv[1:])}
        if args.wheel is None:
            wheel, ship_s = build_wheel(work)
            result["ship_build_s"] = round(ship_s, 1)
        else:
            wheel = args.wheel
        site = install(wheel, work)
        manifest = json.loads((site / "tunemix" / "_compiled" / "manifest.json").read_text())
        result["wheel_mb"] = round(wheel.stat().st_size / 1e6, 1)
        result["shipped"] = {k: manifest[k] for k in ("entries", "indexes", "bytes", "magic", "build_s")}
        runs: dict[str, list[dict[str, Any]]] = {"shipped": [], "no_shipped": []}
        caches: dict[str, Path] = {}
        for kind, shipped, repeat in (("shipped", True, args.repeat), ("no_shipped", False, args.contrast_repeat)):
            for r in range(repeat):
                cache = work / f"cache-{kind}-{r}"
                first = fit(site, cache, work / "models", shipped)
                second = fit(site, cache, work / "models", shipped)
                runs[kind].append({"first": first, "next": second, "ratio": round(first["seconds"] /
                                                                                  second["seconds"], 2)})
                caches[kind] = cache
                print(f"{kind}: first fit on an empty cache {first['seconds']} s, the next {second['seconds']} s "
                      f"(ratio {runs[kind][-1]['ratio']})", flush=True)
        result["runs"] = runs
        result["median_s"] = {kind: {"first": statistics.median(r["first"]["seconds"] for r in rs),
                                     "next": statistics.median(r["next"]["seconds"] for r in rs),
                                     "ratio": statistics.median(r["ratio"] for r in rs)}
                              for kind, rs in runs.items() if rs}
        if runs["shipped"] and runs["no_shipped"]:
            # the shipped (generic) code against the host's: the warm fits, and one-thread scoring
            result["generic_vs_host_fit"] = {
                key: round(statistics.median(r["next"][key] for r in runs["shipped"]) /
                           statistics.median(r["next"][key] for r in runs["no_shipped"]), 3)
                for key in ("seconds", "fit_total_s")}
            model = runs["no_shipped"][-1]["next"]["model"]
            speeds: dict[str, list[dict[str, float]]] = {"generic": [], "host": []}
            warm_fits: dict[str, list[dict[str, Any]]] = {"generic": [], "host": []}
            for _ in range(args.speed_rounds):
                for name, kind in (("generic", "shipped"), ("host", "no_shipped")):
                    speeds[name].append(scoring_ms(site, caches[kind], model, work / "run"))
                    warm_fits[name].append(fit(site, caches[kind], work / "models", kind == "shipped"))
            result["warm_fits_interleaved"] = {
                name: {"seconds": statistics.median(f["seconds"] for f in fs),
                       "fit_total_s": statistics.median(f["fit_total_s"] for f in fs), "runs": fs}
                for name, fs in warm_fits.items()}
            g, h = result["warm_fits_interleaved"]["generic"], result["warm_fits_interleaved"]["host"]
            result["generic_vs_host_fit_interleaved"] = {k: round(g[k] / h[k], 3) for k in ("seconds", "fit_total_s")}
            result["scoring_one_thread_ms"] = {
                name: {k: round(statistics.median(s[k] for s in rs), 4) for k in rs[0]} for name, rs in speeds.items()}
        result["probe_ms_end"] = machine_probe_ms()
        path = write_result(args.name, result)
        print(json.dumps({k: result[k] for k in ("median_s", "ship_build_s", "generic_vs_host_fit",
                                                 "generic_vs_host_fit_interleaved", "scoring_one_thread_ms")
                          if k in result}), flush=True)
        print(f"written to {path}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
