"""``tunemix train``: read -> views -> fit runs -> snapshots -> calibrate -> mix -> artifact + report.

Parallelism: runs and calibration jobs go through joblib with the configured backend (``loky``
processes by default; ``dask`` on a given scheduler or a local cluster; ``ray``; ``sequential``).
Time budget: when ``[run] time_budget_s`` is set, 60% of it is shared among the boosting runs
(each run gets ``0.6 * budget / ceil(n_runs / n_jobs)`` seconds and stops after the iteration
that exceeds it); calibration and mixing use the rest.
Nothing is written until the very end, and then atomically (``training.artifact.store``):
Ctrl-C at any point leaves no half-written model.
"""

from __future__ import annotations

import contextlib
import logging
import math
import platform
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import joblib
import numpy as np

from training import __version__
from training.artifact.store import save_artifact, sha256_file
from training.data.dataset import RankingData
from training.data.normalization import apply_view
from training.data.splits import split_by_query
from training.data.svmlight import read_svmlight
from training.ensemble.base import member_qualities
from training.ensemble.member_rescaling import RESCALE_MODES
from training.ensemble.registry import compare_mixers, make_mixer
from training.evaluation import CONVENTION_NAMES, evaluate, mean_metric
from training.learners.label_groups import get_grouping
from training.pipeline.config import TrainConfig
from training.pipeline.members import (
    CalibrationResult,
    RunResult,
    RunSpec,
    calibrate_snapshot,
    fit_run,
)
from training.scoring.ensemble_model import EXTRA_VIEWS, EnsembleModel, Member, RunInfo, prune, remap_forest
from training.scoring.forest import FlatForest, concatenate, score_forest

log = logging.getLogger(__name__)

#: measures recorded for validation and test under every convention
RECORD_MEASURES = [*(f"ndcg@{k}" for k in range(1, 11)), "err", "p@10", "map"]


@dataclass
class TrainOutcome:
    path: Path
    record: dict[str, Any]
    model: EnsembleModel


# ---------------------------------------------------------------------------------- data
def _file_record(role: str, path: str, data: RankingData) -> dict[str, Any]:
    return {"role": role, "path": str(path), "sha256": sha256_file(path), "bytes": Path(path).stat().st_size,
            "rows": data.n_docs, "queries": data.n_queries, "features": data.n_features}


def load_data(cfg: TrainConfig) -> tuple[dict[str, RankingData], list[dict[str, Any]]]:
    """train / vali / (test) sets and a record of where they came from."""
    d = cfg.data
    if d.synthetic is not None:
        sets = d.synthetic.make()
        records = [{"role": k, "synthetic": True, "rows": v.n_docs, "queries": v.n_queries,
                    "features": v.n_features} for k, v in sets.items()]
        return sets, records
    assert d.train is not None and d.vali is not None  # validated by the config
    train = read_svmlight(d.train)
    sets = {"train": train, "vali": read_svmlight(d.vali, n_features=train.n_features)}
    records = [_file_record("train", d.train, train), _file_record("vali", d.vali, sets["vali"])]
    if d.test is not None:
        sets["test"] = read_svmlight(d.test, n_features=train.n_features)
        records.append(_file_record("test", d.test, sets["test"]))
    return sets, records


# ---------------------------------------------------------------------------------- parallel
@contextlib.contextmanager
def parallel_backend(backend: str, n_jobs: int, scheduler: str | None) -> Iterator[int]:
    """Configure joblib for ``backend``; yields the n_jobs to use."""
    if backend == "sequential":
        yield 1
    elif backend == "loky":
        with joblib.parallel_config(backend="loky", n_jobs=n_jobs):
            yield n_jobs
    elif backend == "dask":
        try:
            from dask.distributed import Client, LocalCluster
        except ImportError:
            raise ValueError("backend 'dask' needs dask[distributed]: pip install 'tunemix[train]'") from None
        if scheduler:
            client = Client(scheduler)
            cluster = None
        else:
            cluster = LocalCluster(n_workers=n_jobs, threads_per_worker=1, processes=True,
                                   dashboard_address=None)
            client = Client(cluster)
        try:
            with joblib.parallel_config(backend="dask"):
                yield n_jobs
        finally:
            client.close()
            if cluster is not None:
                cluster.close()
    elif backend == "ray":
        try:
            import ray
            from ray.util.joblib import register_ray
        except ImportError:
            raise ValueError("backend 'ray' needs ray, which is not installed: pip install ray") from None
        register_ray()
        ray.init(address=scheduler or None, ignore_reinit_error=True, include_dashboard=False)
        try:
            with joblib.parallel_config(backend="ray"):
                yield n_jobs
        finally:
            ray.shutdown()
    else:
        raise ValueError(f"unknown backend {backend!r}")


def _run_parallel(tasks: list[tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]], n_jobs: int,
                  desc: str, progress: bool) -> list[Any]:
    """Run ``joblib.delayed`` tasks in parallel with a progress bar; results in task order."""
    if not tasks:
        return []
    bar = _progress_bar(len(tasks), desc, progress)
    results: list[Any] = []
    try:
        if n_jobs == 1:
            for func, args, kwargs in tasks:
                results.append(func(*args, **kwargs))
                bar.update(1)
        else:
            for res in joblib.Parallel(n_jobs=n_jobs, return_as="generator")(tasks):
                results.append(res)
                bar.update(1)
    finally:
        bar.close()
    return results


@contextlib.contextmanager
def _iteration_bar(total: int, enabled: bool) -> Iterator[Any]:
    """A progress bar over boosting iterations of all runs, fed by workers through a manager
    queue (works for local process pools; remote backends get the per-job bar only)."""
    if not enabled:
        yield None
        return
    import multiprocessing
    import threading

    manager = multiprocessing.Manager()
    queue = manager.Queue()
    bar = _progress_bar(total, "boosting iterations", True, unit="it")
    stop = threading.Event()

    def drain() -> None:
        import queue as queue_module

        while not stop.is_set() or not queue.empty():
            try:
                bar.update(queue.get(timeout=0.1))
            except queue_module.Empty:
                continue
            except (EOFError, OSError):
                return

    thread = threading.Thread(target=drain, daemon=True)
    thread.start()
    try:
        yield queue
    finally:
        stop.set()
        thread.join(timeout=5)
        bar.close()
        manager.shutdown()


class _NoBar:
    def update(self, n: int) -> None:
        pass

    def close(self) -> None:
        pass


def _progress_bar(total: int, desc: str, progress: bool, unit: str = "job") -> Any:
    if not progress:
        return _NoBar()
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return _NoBar()
    return tqdm(total=total, desc=desc, unit=unit, leave=True, dynamic_ncols=True)


# ---------------------------------------------------------------------------------- metrics
def metrics_all_conventions(labels: np.ndarray, scores: np.ndarray, offsets: np.ndarray,
                            docids: np.ndarray | None = None, top_label: int = 4) -> dict[str, dict[str, float | None]]:
    """Mean of RECORD_MEASURES under each of the ten conventions (None where the tool refuses).

    With fewer than five levels, ERR with the data's own top label (``err:top=K-1``, the papers'
    ERR: R = (2^l - 1) / 2^top) is recorded too.
    """
    measures = list(RECORD_MEASURES)
    if top_label < 4:
        measures.insert(measures.index("err") + 1, f"err:top={top_label}")
    out: dict[str, dict[str, float | None]] = {}
    for conv in CONVENTION_NAMES:
        try:  # one call validates and ranks once for all measures
            means = evaluate(labels, scores, offsets, measures, conv, docids=docids).mean
        except ValueError:  # a measure this tool refuses: take them one at a time
            means = {}
            for measure in measures:
                try:
                    means.update(evaluate(labels, scores, offsets, [measure], conv, docids=docids).mean)
                except ValueError as exc:
                    log.debug("%s under %s: %s", measure, conv, exc)
        row: dict[str, float | None] = {}
        for measure in measures:
            value = means.get(measure)
            row[measure] = None if value is None or np.isnan(value) else float(value)
        out[conv] = row
    return out


# ---------------------------------------------------------------------------------- train
def train(cfg: TrainConfig, *, progress: bool = True) -> TrainOutcome:
    """Train, mix, evaluate and save a model as configured; return where it went and the record."""
    t_start = time.perf_counter()
    timings: dict[str, float] = {}
    sets, data_records = load_data(cfg)
    train_set, vali = sets["train"], sets["vali"]
    test = sets.get("test")
    n_labels = max(int(train_set.labels.max()) + 1, 2)
    for name, part in sets.items():
        if part.n_docs and int(part.labels.max()) >= n_labels:
            log.warning("%s has label %d, above the training data's top label %d",
                        name, int(part.labels.max()), n_labels - 1)
    groupings = {g: get_grouping(g, n_labels) for g in cfg.members.label_groupings}
    fit_part, cal_part = split_by_query(train_set, fraction=1.0 - cfg.run.calibration_fraction, seed=cfg.seed)
    timings["read_and_split_s"] = time.perf_counter() - t_start

    # --- views (per query, so per part is the same as on the whole file)
    t0 = time.perf_counter()
    views = list(dict.fromkeys(cfg.members.views))
    extra_views = [v for v in EXTRA_VIEWS if v in views]
    parts = {"fit": fit_part, "cal": cal_part}
    view_x = {(p, v): apply_view(d.features, d.query_offsets, v) for p, d in parts.items() for v in views}
    timings["views_s"] = time.perf_counter() - t0

    # --- boosting runs
    specs = [
        RunSpec(index=i, view=view, grouping=g, params=params)
        for i, (view, g, params) in enumerate(
            (view, g, params) for view in views for g in groupings for params in cfg.adaboost_grid()
        )
    ]
    n_runs = len(specs)
    with parallel_backend(cfg.run.backend, cfg.run.n_jobs, cfg.run.scheduler) as n_jobs:
        budget = None
        if cfg.run.time_budget_s is not None:
            budget = 0.6 * cfg.run.time_budget_s / math.ceil(n_runs / n_jobs)
        t0 = time.perf_counter()
        total_iterations = sum(int(p.get("n_iterations", 100)) for p in (s.params for s in specs))
        with _iteration_bar(total_iterations, progress and cfg.run.backend in ("loky", "sequential")) as queue:
            run_results: list[RunResult] = _run_parallel(
                [joblib.delayed(fit_run)(s, view_x[("fit", s.view)], fit_part.labels, n_labels, cfg.seed, budget,
                                         queue)
                 for s in specs],
                n_jobs, f"boosting {n_runs} runs", progress,
            )
        timings["boosting_s"] = time.perf_counter() - t0

        # --- snapshots on the calibration part, then calibration jobs
        t0 = time.perf_counter()
        forests = [FlatForest.from_arrays(r.forest) for r in run_results]
        cal_tasks = []
        for r, forest in zip(run_results, forests, strict=True):
            raw = score_forest(forest, view_x[("cal", r.spec.view)], r.checkpoints)
            classes = groupings[r.spec.grouping].apply(cal_part.labels)
            for c, it in enumerate(r.checkpoints):
                cal_tasks.append(joblib.delayed(calibrate_snapshot)(
                    r.spec.index, it, np.ascontiguousarray(raw[:, c, :]), classes, cal_part.query_offsets,
                    r.class_gains, list(cfg.members.calibrators), float(r.alphas[:it].sum()),
                ))
        cal_results: list[CalibrationResult] = _run_parallel(
            cal_tasks, n_jobs, f"calibrating {len(cal_tasks)} snapshots", progress)
        timings["calibration_s"] = time.perf_counter() - t0

    # --- one wide forest, the members
    t0 = time.perf_counter()
    k_max = max(r.n_classes for r in run_results)
    wide = [remap_forest(f, r.spec.view, train_set.n_features, extra_views, k_max)
            for r, f in zip(run_results, forests, strict=True)]
    forest = concatenate(wide)
    runs: list[RunInfo] = []
    start = 0
    for r in run_results:
        runs.append(RunInfo(view=r.spec.view, grouping=r.spec.grouping, n_classes=r.n_classes,
                            base_start=start, base_end=start + r.n_iterations, learner=dict(r.spec.params)))
        start += r.n_iterations
    members: list[Member] = []
    failures: list[dict[str, Any]] = []
    for cr in cal_results:
        tag = specs[cr.run].tag
        for cal in cr.fitted:
            members.append(Member(name=f"{tag}|t={cr.iterations}|{cal.name}", run=cr.run,
                                  iterations=cr.iterations, calibrator=cal))
        failures.extend({"run": tag, "iterations": cr.iterations, **f} for f in cr.failed)
    if not members:
        raise RuntimeError("every calibrator failed on every snapshot; nothing to mix (see the warnings above)")
    mixer = make_mixer(cfg.mixer.name, **_mixer_params(cfg))
    model = EnsembleModel(n_features=train_set.n_features, extra_views=extra_views, forest=forest,
                          runs=runs, members=members, mixer=mixer)
    vali_members = model.member_scores(vali.features, vali.query_offsets)
    test_members = model.member_scores(test.features, test.query_offsets) if test is not None else None
    timings["member_scoring_s"] = time.perf_counter() - t0

    # --- mixing
    t0 = time.perf_counter()
    measure, convention = cfg.mixer.measure, cfg.mixer.convention
    rescaling: list[dict[str, Any]] = []
    chosen_rescale: str | None = None
    if cfg.mixer.name == "exp_forecaster":
        # Member rescaling (method section 5): with rescale "auto" (the default) the forecaster is
        # fitted under every mode and the best on the validation queries is kept; the record shows
        # all of them, on test too, so the choice can be checked.
        modes = list(RESCALE_MODES) if cfg.mixer.rescale in (None, "auto") else [str(cfg.mixer.rescale)]
        fitted = []
        for mode in modes:
            fc = make_mixer("exp_forecaster", measure=measure, convention=convention, rescale=mode)
            fc.fit(vali_members, vali.labels, vali.query_offsets)
            row: dict[str, Any] = {"rescale": mode, f"val_{measure}": float(fc.validation_quality_)}  # type: ignore[attr-defined]
            if test is not None and test_members is not None:
                row[f"test_{measure}"] = mean_metric(test.labels, fc.transform(test_members, test.query_offsets),
                                                     test.query_offsets, measure, convention)
            rescaling.append(row)
            fitted.append(fc)
        pick = int(np.argmax([r[f"val_{measure}"] for r in rescaling]))  # ties: the first mode listed
        mixer, chosen_rescale = fitted[pick], modes[pick]
        log.info("exp_forecaster: rescale=%s (best on validation of %s), c=%g, omega_min=%g, %d of %d members kept",
                 chosen_rescale, "/".join(modes), mixer.c_, mixer.omega_min_,  # type: ignore[attr-defined]
                 int(np.sum(mixer.kept_)), len(members))  # type: ignore[attr-defined]
    else:
        mixer.fit(vali_members, vali.labels, vali.query_offsets)
    model.mixer = mixer
    timings["mixing_s"] = time.perf_counter() - t0
    omega = member_qualities(vali_members, vali.labels, vali.query_offsets, measure, convention, mean_metric)
    best = int(np.argmax(omega))
    comparison: list[dict[str, Any]] = []
    if test is not None and test_members is not None and cfg.mixer.compare:
        t0 = time.perf_counter()
        names = list(dict.fromkeys([cfg.mixer.name, *cfg.mixer.compare]))
        mixer_specs: list[Any] = []
        for name in names:
            if name == "exp_forecaster" and chosen_rescale is not None:
                mixer_specs.append(make_mixer(name, measure=measure, convention=convention, rescale=chosen_rescale))
            elif name == "uniform" and chosen_rescale is not None:
                mixer_specs.append(make_mixer(name, rescale=chosen_rescale))  # c = 0 of the same forecaster
            else:
                mixer_specs.append(name)
        comparison = compare_mixers(vali_members, vali.labels, vali.query_offsets, test_members, test.labels,
                                    test.query_offsets, mixers=mixer_specs, measures=[measure], convention=convention)
        timings["mixer_comparison_s"] = time.perf_counter() - t0

    # --- drop what the mixer never uses, then evaluate through the serving path
    t0 = time.perf_counter()
    full_size = (len(model.members), model.forest.n_base)
    model = prune(model)
    timings["pruning_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    evaluation: dict[str, Any] = {
        "vali": {"ensemble": metrics_all_conventions(vali.labels, model.score(vali.features, vali.query_offsets),
                                                     vali.query_offsets, vali.docids, n_labels - 1),
                 "best_member": metrics_all_conventions(vali.labels, vali_members[:, best], vali.query_offsets,
                                                        vali.docids, n_labels - 1)},
    }
    if test is not None and test_members is not None:
        test_scores = model.score(test.features, test.query_offsets)
        evaluation["test"] = {
            "ensemble": metrics_all_conventions(test.labels, test_scores, test.query_offsets, test.docids,
                                                n_labels - 1),
            "best_member": metrics_all_conventions(test.labels, test_members[:, best], test.query_offsets,
                                                   test.docids, n_labels - 1),
        }
    timings["evaluation_s"] = time.perf_counter() - t0
    timings["total_s"] = time.perf_counter() - t_start

    record = {
        "config": cfg.to_dict(),
        "data": data_records,
        "split": {"fit_queries": fit_part.n_queries, "calibration_queries": cal_part.n_queries,
                  "fit_rows": fit_part.n_docs, "calibration_rows": cal_part.n_docs, "seed": cfg.seed},
        "n_labels": n_labels,
        "runs": [{"tag": r.spec.tag, "view": r.spec.view, "grouping": r.spec.grouping, "params": r.spec.params,
                  "iterations": r.n_iterations, "stop_reason": r.stop_reason, "fit_seconds": r.fit_seconds,
                  "train_error": r.train_error, "checkpoints": r.checkpoints} for r in run_results],
        "members": [{"name": m.name, "omega": float(omega[j])} for j, m in enumerate(members)],
        "calibration_failures": failures,
        "served": {"members": len(model.members), "bases": model.forest.n_base,
                   "members_before_pruning": full_size[0], "bases_before_pruning": full_size[1]},
        "mixer": {"name": cfg.mixer.name, "measure": measure, "convention": convention,
                  "rescale": chosen_rescale, **_mixer_summary(mixer)},
        "best_member": {"index": best, "name": members[best].name, "omega": float(omega[best])},
        "mixer_comparison": comparison,
        "rescaling_comparison": rescaling,
        "evaluation": evaluation,
        "timings": timings,
        "versions": _versions(),
    }
    path = _save(cfg, model, record)
    return TrainOutcome(path=path, record=record, model=model)


def _mixer_params(cfg: TrainConfig) -> dict[str, Any]:
    if cfg.mixer.name in ("exp_forecaster", "one_best"):
        return {"measure": cfg.mixer.measure, "convention": cfg.mixer.convention}
    return {}


def _mixer_summary(mixer: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for attr in ("c_", "omega_min_", "validation_quality_"):
        if hasattr(mixer, attr):
            out[attr.rstrip("_")] = float(getattr(mixer, attr))
    if hasattr(mixer, "kept_"):
        out["members_kept"] = int(np.sum(mixer.kept_))
    if hasattr(mixer, "grid_quality_"):
        out["grid"] = {"c": [float(c) for c in mixer.c_grid_],
                       "omega_min": [float(v) for v in mixer.omega_min_grid_],
                       "quality": np.asarray(mixer.grid_quality_).tolist()}
    if hasattr(mixer, "weights_"):
        out["weights"] = [float(w) for w in mixer.weights_]
    return out


def _versions() -> dict[str, str]:
    import numba

    out = {"tunemix": __version__, "python": platform.python_version(), "numpy": np.__version__,
           "numba": numba.__version__, "joblib": joblib.__version__}
    with contextlib.suppress(ImportError):
        import scipy

        out["scipy"] = scipy.__version__
    return out


def _save(cfg: TrainConfig, model: EnsembleModel, record: dict[str, Any]) -> Path:
    from training.pipeline.report import render_report

    doc, arrays = model.to_artifact()
    manifest = {
        "tunemix_version": __version__,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "n_features": model.n_features,
        "normalisation": {"views": list(cfg.members.views), "extra_views": list(model.extra_views)},
        "label_gains": [float(2.0**lab - 1.0) for lab in range(record["n_labels"])],
        "model": doc,
        "training_record": record,
    }
    extra = render_report(record, plots=cfg.run.report_plots)
    return save_artifact(cfg.run.models_dir, cfg.name, manifest, arrays, extra_files=extra)
