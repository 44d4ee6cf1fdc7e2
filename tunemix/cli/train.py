"""``tunemix train`` and ``tunemix demo``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from tunemix.train.config import BACKENDS, load_config
from tunemix.train.members.names import plain_text
from tunemix.train.report_remarks import feature_label

#: the default model's configuration, shipped inside the package (an installed wheel has it too)
DEFAULT_CONFIG = Path(__file__).resolve().parents[1] / "train" / "default.toml"


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    tr = subparsers.add_parser(
        "train", help="train a calibrated ensemble and write a versioned artifact",
        description="Train members, calibrate, mix and save models/<name>/vN/ with a report. "
        "Flags override the config file.",
    )
    tr.add_argument("--config", type=Path, help="TOML configuration (see configs/)")
    _add_overrides(tr)
    tr.set_defaults(func=run_train)

    demo = subparsers.add_parser(
        "demo", help="train the default model on generated data unless one exists, then summarise it",
    )
    demo.add_argument("--models-dir", default="models", help="models directory (default models)")
    demo.add_argument("--name", default="default", help="model name (default 'default')")
    demo.add_argument("--data-dir", type=Path, default=Path("data") / "synthetic",
                      help="where the generated data set is written (default data/synthetic)")
    demo.add_argument("--config", type=Path, default=DEFAULT_CONFIG,
                      help="configuration with a [data.synthetic] table (default: the packaged default.toml)")
    demo.add_argument("--retrain", action="store_true", help="train a new version even if one exists")
    demo.add_argument("--no-progress", action="store_true", help="no progress bars")
    demo.set_defaults(func=run_demo)

    warm = subparsers.add_parser(
        "warm", help="compile the numba kernels of training and scoring once (or load them from the cache)",
        description="Compile every numba kernel of training and scoring (or load it from numba's disk cache: "
                    "the environment's numba-cache, or NUMBA_CACHE_DIR), saying how long it took: a fresh "
                    "install's first fit otherwise pays it unannounced. tunemix train and demo run it first "
                    "when the cache is cold.",
    )
    warm.add_argument("--if-cold", action="store_true",
                      help="only when the cache does not hold this install's kernels yet (what make serve runs)")
    warm.add_argument("--where", action="store_true", help="print the cache directory and exit")
    warm.set_defaults(func=run_warm)


def _add_overrides(p: argparse.ArgumentParser) -> None:
    p.add_argument("--train", help="training data file")
    p.add_argument("--vali", help="validation data file (tunes the mixer)")
    p.add_argument("--test", help="test data file (reported, never used for choices)")
    p.add_argument("--missing", choices=("zero", "nan"),
                   help="a feature a line omits: zero (0, the default) or nan (a missing value)")
    p.add_argument("--name", help="model name (models/<name>/vN)")
    p.add_argument("--models-dir", help="models directory")
    p.add_argument("--backend", choices=BACKENDS, help="joblib backend for parallel jobs")
    p.add_argument("--scheduler", help="dask scheduler address (default: a local cluster) or ray address")
    p.add_argument("--n-jobs", type=int, help="parallel jobs")
    p.add_argument("--time-budget", type=float, help="seconds; boosting runs stop early to fit in it")
    p.add_argument("--seed", type=int, help="random seed")
    p.add_argument("--no-search", action="store_true",
                   help="under a time budget, no search of extra LambdaMART runs ([run] search = false)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    over: dict[str, Any] = {
        "data.train": args.train, "data.vali": args.vali, "data.test": args.test, "name": args.name,
        "data.missing": args.missing,
        "run.models_dir": args.models_dir, "run.backend": args.backend, "run.scheduler": args.scheduler,
        "run.n_jobs": args.n_jobs, "run.time_budget_s": args.time_budget, "seed": args.seed,
        "run.search": False if args.no_search else None,
    }
    return over


def count_lines(rec: dict[str, Any]) -> list[str]:
    """Why a config trained so many runs and members: a run is one member block's grid point on one
    view and one label grouping; a member is one snapshot of a run with one calibrator."""
    members = rec["config"]["members"]
    views, groupings, cals = members["views"], members["label_groupings"], members["calibrators"]
    runs = rec["runs"]
    snapshots = sum(len(r["checkpoints"]) for r in runs)
    failed = len(rec["calibration_failures"])
    by_type: dict[str, int] = {}
    for r in runs:
        by_type[r["type"]] = by_type.get(r["type"], 0) + 1
    kinds = ", ".join(f"{n} {t}" for t, n in by_type.items())
    return [f"  {len(runs)} runs ({kinds}): each member block's grid points ([[members.<type>]] list values) x "
            f"{len(views)} view(s) ({', '.join(views)}) x {len(groupings)} label grouping(s) "
            f"({', '.join(groupings)}); [members] views and label_groupings (or a block's own) set them",
            f"  {len(rec['members'])} members: {snapshots} snapshots (each run's checkpoints) x {len(cals)} "
            f"calibrators ([members] calibrators)" + (f", less {failed} calibrations that failed" if failed else "")]


def _summary(outcome: Any) -> str:
    rec = outcome.record
    m = rec["mixer"]
    lines = [f"model {outcome.path.parent.name!r} version {outcome.path.name} written to {outcome.path}",
             *count_lines(rec), f"  mixer {m['name']} ({m['measure']}, {m['convention']})"]
    for split, table in rec["evaluation"].items():
        ens = table["ensemble"][m["convention"]].get(m["measure"])
        best = table["best_member"][m["convention"]].get(m["measure"])
        lines.append(f"  {split}: ensemble {m['measure']} = {ens:.4f}, best single member = {best:.4f}"
                     + (" (the ensemble is below it: see the report's remark)" if ens < best else ""))
    for row in rec["mixer_comparison"]:
        lines.append(f"    {row['mixer']:>15}: test {m['measure']} = {row.get('test_' + m['measure']):.4f}")
    bf = rec.get("best_feature")
    if bf and "test" in bf:
        lines.append(f"  best single feature: {feature_label(rec, bf['feature'])} ({bf['sign']}), "
                     f"test {m['measure']} = {bf['test']:.4f}")
    types = rec.get("member_types", [])
    if len(types) > 1:
        subsets = {r["members"]: r for r in rec.get("mix_by_member_type", [])}
        for row in types:
            share = row.get("weight_share")
            alone = subsets.get(row["type"], {}).get("test_" + m["measure"])
            best = "-" if row["best_omega"] is None else f"{row['best_omega']:.4f}"
            lines.append(f"  {row['type']:>12}: {row['members']} members, best validation {m['measure']} = "
                         f"{best}, {'-' if share is None else f'{100 * share:.1f}%'} of the weight"
                         + ("" if alone is None else f", mixed alone: test {alone:.4f}"))
    comp = rec.get("numba_compile") or {}
    if comp.get("total_s", 0.0) >= 1.0:
        stages = ", ".join(f"{k} {v:.1f} s" for k, v in sorted(comp.get("by_stage", {}).items(), key=lambda kv: -kv[1]))
        lines.append(f"  of the {rec['timings']['total_s']:.1f} s, {comp['total_s']:.1f} s were numba compiling "
                     f"kernels or loading them from its cache ({stages}); a warm cache skips that")
    lines.append(f"  report: {outcome.path / 'report.md'}")
    return "".join(plain_text(line) + "\n" for line in lines)  # a name's line break or escape: its code


def run_train(args: argparse.Namespace) -> int:
    from tunemix.compile.warm import ensure_warm
    from tunemix.train.train import train

    cfg = load_config(args.config, _overrides(args))
    if cfg.data.train is None and cfg.data.synthetic is None:
        raise ValueError("no training data: give --train/--vali (and --test) or a config with [data]")
    for role, path in (("train", cfg.data.train), ("vali", cfg.data.vali), ("test", cfg.data.test)):
        if path is not None and not Path(path).exists():  # a missing file before the warm-up
            from tunemix.train.config import missing_data_message

            raise FileNotFoundError(missing_data_message(path, f"[data] {role}"))
    ensure_warm()
    outcome = train(cfg, progress=not args.no_progress)
    sys.stdout.write(_summary(outcome))
    return 0


def run_warm(args: argparse.Namespace) -> int:
    from tunemix.compile.warm import cache_dir, compile_bytecode, is_warm, warm
    from tunemix.compile.warm_child import wait_for_background

    if args.where:
        sys.stdout.write(f"{cache_dir()}\n")
        return 0
    wait_for_background(cache_dir(), sys.stderr)  # tunemix demo's background part: not the same kernels twice
    if args.if_cold and is_warm():
        compile_bytecode()  # the modules' bytecode: source edited since, or never written
        sys.stdout.write(f"tunemix warm: the kernels are compiled already (cache {cache_dir()})\n")
        return 0
    warm()
    return 0


def run_demo(args: argparse.Namespace) -> int:
    from tunemix.compile.warm import ensure_warm
    from tunemix.core.artifact import latest_version
    from tunemix.core.data.svmlight import write_svmlight
    from tunemix.train.train import train

    existing = latest_version(args.models_dir, args.name)
    if existing is not None and not args.retrain:
        sys.stdout.write(f"model {args.name!r} already trained: {existing} (use --retrain for a new version)\n")
        ensure_warm()  # make serve's step: the service then loads its kernels instead of compiling them
        return 0
    cfg = load_config(args.config, {"name": args.name, "run.models_dir": args.models_dir})
    files = {k: args.data_dir / f"{k}.txt" for k in ("train", "vali", "test")}
    if not all(f.exists() for f in files.values()):
        if cfg.data.synthetic is None:
            raise ValueError(f"{args.config} must have a [data.synthetic] table for the demo")
        sets = cfg.data.synthetic.make()
        args.data_dir.mkdir(parents=True, exist_ok=True)
        for k, data in sets.items():
            write_svmlight(data, files[k])
        sys.stdout.write(f"generated synthetic data in {args.data_dir}\n")
    cfg.data.synthetic = None
    cfg.data.train, cfg.data.vali, cfg.data.test = (str(files[k]) for k in ("train", "vali", "test"))
    fitted: list[Any] = []
    # on a cold cache the fit runs inside the warm-up, once the kernels it needs are compiled,
    # beside the learners' part; the other learners' kernels (what tunemix train needs, not the
    # service or this fit) go on compiling in the background (tunemix.compile.warm_child)
    ensure_warm(then=lambda: fitted.append(train(cfg, progress=not args.no_progress)), background=True)
    outcome = fitted[0] if fitted else train(cfg, progress=not args.no_progress)
    sys.stdout.write(_summary(outcome))
    return 0
