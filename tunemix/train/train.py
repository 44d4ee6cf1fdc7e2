"""``tunemix train``: read -> views -> fit runs -> snapshots -> calibrate -> mix -> artifact + report.

:func:`train` is a short sequence of stages; each stage is a function of its own (below, and the
mixing stages in ``tunemix.train.mixing``). Member types (AdaBoost.MH, McRank, ...) plug in
through ``tunemix.train.members.types``; the joblib backend and the progress bars live in
``tunemix.train.parallel``.
Time budget: when ``[run] time_budget_s`` is set, it bounds the whole of :func:`train`: one
deadline from the start, an end for each stage (boosting, calibration, mixing, the relevance
head), each stage cut to what is left (``tunemix.train.budget``); the default's model is a
candidate of the budgeted fit, replaced only on evidence beyond the validation queries' noise
(``tunemix.train.budget_choice``).
Nothing is written until the very end, and then atomically (``tunemix.core.artifact``):
Ctrl-C at any point leaves no half-written model.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import logging
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import joblib
import numpy as np

from tunemix.core.artifact import save_artifact, sha256_file
from tunemix.core.data.dataset import RankingData, query_rows
from tunemix.core.data.svmlight import read_svmlight
from tunemix.core.ensemble.exponential_forecaster import one_standard_error
from tunemix.core.ensemble.registry import make_mixer
from tunemix.core.evaluation import evaluate, mean_metric
from tunemix.core.scoring.ensemble_model import EXTRA_VIEWS, EnsembleModel, Member, RunInfo, prune, remap_forest
from tunemix.core.scoring.forest import FlatForest, concatenate, score_forest
from tunemix.core.version import __version__
from tunemix.train.budget import FitBudget, clock_for
from tunemix.train.budget_choice import Choice, choose_with_search
from tunemix.train.budget_sample import budget_sample, lightgbm_import_s
from tunemix.train.config import TrainConfig, missing_data_message, resolve_feature_names
from tunemix.train.data.binned import BinnedView, bin_view, view_in_chunks
from tunemix.train.data.splits import query_split
from tunemix.train.importance import explanation_summary
from tunemix.train.learners import lightgbm_capi as capi
from tunemix.train.learners.label_groups import get_grouping, groupings_for
from tunemix.train.learners.lightgbm_data import sharing_datasets
from tunemix.train.members.auto import DataShape, apply_auto, is_peer_recipe, small_validation
from tunemix.train.members.types import (
    LIGHTGBM_TYPES,
    CalibrationResult,
    RunResult,
    RunSpec,
    calibrate_snapshot,
    fit_run,
    get_member_type,
    member_types,
    run_specs,
)
from tunemix.train.mixing import (
    Mixing,
    compare,
    compare_type_subsets,
    fit_mixer,
    mixer_params,
    score_members,
)
from tunemix.train.parallel import iteration_bar, parallel_backend, run_parallel
from tunemix.train.prepared import Prepared
from tunemix.train.record import build_record, metrics_all_conventions
from tunemix.train.relevance.beside import HeadBeside, head_beside, head_model_task
from tunemix.train.relevance.stage import fit_head, reusable_head_models
from tunemix.train.search import SearchOutcome, add_weight_shares, search

log = logging.getLogger(__name__)



@dataclass
class TrainOutcome:
    path: Path | None  # None when the model was not saved
    record: dict[str, Any]
    model: EnsembleModel


class _Clock:
    """Seconds per stage: ``with clock("views_s"): ...`` adds to ``clock.timings["views_s"]``."""

    def __init__(self, compiling: Any = None) -> None:
        self.start = time.perf_counter()
        self.timings: dict[str, float] = {}
        self.compiling = compiling  # a tunemix.core.compile_clock.CompileClock: numba's share of each stage
        self.compile_timings: dict[str, float] = {}

    @contextlib.contextmanager
    def __call__(self, key: str) -> Iterator[None]:
        t0 = time.perf_counter()
        c0 = self.compiling.seconds if self.compiling is not None else 0.0
        try:
            yield
        finally:
            self.timings[key] = self.timings.get(key, 0.0) + time.perf_counter() - t0
            if self.compiling is not None:
                self.compile_timings[key] = self.compile_timings.get(key, 0.0) + self.compiling.seconds - c0

    def compile_record(self) -> dict[str, Any]:
        """Seconds of this process in numba's compiler (compiling, or loading from the cache), in
        all and per stage (the stages of ``timings`` that spent at least 0.05 s there)."""
        total = self.compiling.seconds if self.compiling is not None else 0.0
        return {"total_s": total, "by_stage": {k: v for k, v in self.compile_timings.items() if v >= 0.05},
                "note": "numba compiling kernels on their first call (or loading them from its disk cache), in "
                        "this process; worker processes (backend loky) compile or load on their own. A cold cache "
                        "pays it once: tunemix warm"}


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
    for role, path in (("train", d.train), ("vali", d.vali), ("test", d.test)):
        if path is not None and not Path(path).exists():  # before any work, saying where data belong
            raise FileNotFoundError(missing_data_message(path, f"[data] {role}"))
    train = read_svmlight(d.train, missing=d.missing)
    sets = {"train": train, "vali": read_svmlight(d.vali, n_features=train.n_features, missing=d.missing)}
    records = [_file_record("train", d.train, train), _file_record("vali", d.vali, sets["vali"])]
    if d.test is not None:
        sets["test"] = read_svmlight(d.test, n_features=train.n_features, missing=d.missing)
        records.append(_file_record("test", d.test, sets["test"]))
    return sets, records


def label_count(train: RankingData) -> int:
    """K, the number of label levels the members learn: the training data's top label + 1 (>= 2)."""
    return max(int(train.labels.max()) + 1, 2)


def data_shape(sets: dict[str, RankingData]) -> DataShape:
    """What the default's choice (``tunemix.train.members.auto``) reads of the training and validation sets."""
    tr = sets["train"]
    return DataShape(n_docs=tr.n_docs, n_features=tr.n_features, n_labels=label_count(tr), n_queries=tr.n_queries,
                     vali_queries=sets["vali"].n_queries)


def prepare(cfg: TrainConfig, clock: _Clock, specs: list[RunSpec],
            sets: dict[str, RankingData] | None = None, records: list[dict[str, Any]] | None = None) -> Prepared:
    """Read (or take ``sets``: train, vali and optionally test, already in memory), split train by
    query into fit and calibration parts, compute the feature views the runs read."""
    with clock("read_and_split_s"):
        if sets is None:
            sets, records = load_data(cfg)
        elif records is None:
            records = [{"role": k, "in_memory": True, "rows": v.n_docs, "queries": v.n_queries,
                        "features": v.n_features} for k, v in sets.items()]
        train_set = sets["train"]
        n_labels = label_count(train_set)
        for name, part in sets.items():
            if part.n_docs and int(part.labels.max()) >= n_labels:
                log.warning("%s has label %d, above the training data's top label %d",
                            name, int(part.labels.max()), n_labels - 1)
        groupings = {g: get_grouping(g, n_labels) for g in cfg.members.label_groupings}
        # the training set once, the fit part's queries first, then the calibration part's: the
        # two parts are slices of it (no copy per part or per run). Its float features are copied
        # only for runs that read floats; the others read the codes (computed in this order from
        # the training set itself), and the calibration part's floats are then copied alone.
        first, second = query_split(train_set.n_queries, fraction=1.0 - cfg.run.calibration_fraction, seed=cfg.seed)
        order = np.concatenate([first, second])
        coded = [s for s in specs if get_member_type(s.type).reads_codes_of(s)]
        floats = [s for s in specs if s not in coded]
        if floats:
            whole = train_set.subset_queries(order)
            cal_part = whole.query_slice(first.size, whole.n_queries)
        else:
            whole = train_set.subset_queries(order, features=False)
            cal_part = train_set.subset_queries(second)
        fit_part = whole.query_slice(0, first.size)
    with clock("views_s"):  # per query, so the views of the whole are those of each part
        views = list(dict.fromkeys([*cfg.members.views, *(s.view for s in specs)]))
        view_x: dict[tuple[str, str], np.ndarray] = {}
        for v in dict.fromkeys(s.view for s in floats):
            view_x[("train", v)] = view_in_chunks(whole.features, whole.query_offsets, v)
            view_x[("fit", v)] = view_x[("train", v)][:fit_part.n_docs]
        for v in dict.fromkeys(s.view for s in specs):  # every run's snapshots are calibrated on it
            view_x[("cal", v)] = (view_x[("train", v)][fit_part.n_docs:] if ("train", v) in view_x
                                  else view_in_chunks(cal_part.features, cal_part.query_offsets, v))
        # one binning stage: the codes of each view, shared by every run that reads codes
        binned: dict[tuple[str, str], BinnedView] = {}
        for v in dict.fromkeys(s.view for s in coded):
            binned[("train", v)] = bin_view(train_set.features, train_set.query_offsets, v, queries=order,
                                            seed=cfg.seed)
            binned[("fit", v)] = binned[("train", v)].rows(0, fit_part.n_docs)
        # runs that stop early read the validation queries in their view
        vali = sets["vali"]

        def stopping_views(runs: list[RunSpec]) -> dict[str, None]:
            return dict.fromkeys(s.view for s in runs if int(s.params.get("early_stopping", 0)) > 0)

        for v in stopping_views(coded):
            binned[("vali", v)] = bin_view(vali.features, vali.query_offsets, v, bins=binned[("train", v)].bins)
        for v in stopping_views(floats):
            view_x[("vali", v)] = view_in_chunks(vali.features, vali.query_offsets, v)
    return Prepared(sets=sets, records=records, n_labels=n_labels, groupings=groupings, fit_part=fit_part,
                    cal_part=cal_part, extra_views=[v for v in EXTRA_VIEWS if v in views], view_x=view_x,
                    whole=whole, binned=binned, fit_queries=first)


#: runs per job at once on the threads backend: with three or four runs of unequal length on two
#: cores, waves of two leave a core idle while the last run finishes; all at once the cores stay
#: busy until the work is done (each run holds its LightGBM dataset meanwhile)
THREAD_RUNS_PER_JOB = 2


#: features (floats, or the shared codes of the run's view), labels, query offsets, then the same
#: of the validation queries (None unless the run stops early on them)
RunInputs = tuple[np.ndarray | BinnedView, np.ndarray, np.ndarray, np.ndarray | BinnedView | None, np.ndarray | None,
                  np.ndarray | None]


def run_inputs(prep: Prepared, spec: RunSpec) -> RunInputs:
    """What one run trains on: features (in its view: the shared codes for a run that reads codes,
    else floats), labels and query offsets of the fit part,
    or of the whole training set (``fit_on = "train"``: the fit part, then the calibration part),
    and the validation queries (features in its view, labels, offsets; None unless it stops early
    on them). Every run that reads the same data gets the same array objects: a distributed
    backend (joblib's dask backend scatters each argument array once, by identity) sends each
    array to a worker once, not once per task."""
    store: Any = prep.binned if get_member_type(spec.type).reads_codes_of(spec) else prep.view_x
    if spec.params.get("fit_on") == "train":
        assert prep.whole is not None
        labels, offsets = prep.whole.labels, prep.whole.query_offsets
        features = store[("train", spec.view)]
    else:
        labels, offsets = prep.fit_part.labels, prep.fit_part.query_offsets
        features = store[("fit", spec.view)]
    if int(spec.params.get("early_stopping", 0)) > 0:
        return features, labels, offsets, store[("vali", spec.view)], prep.vali.labels, prep.vali.query_offsets
    return features, labels, offsets, None, None, None


# ---------------------------------------------------------------------------------- runs


def run_within(deadline: FitBudget, spec: RunSpec, *args: Any) -> RunResult:
    """``fit_run`` with the seconds left to the boosting stage's end when the run starts (a task of
    its own: a run of a later wave gets what is left then)."""
    features, labels, offsets, eval_features, eval_labels, eval_offsets, n_labels, seed, queue = args
    return fit_run(spec, features, labels, offsets, eval_features, eval_labels, eval_offsets, n_labels, seed,
                   deadline.run_seconds("boosting"), queue)


def fit_runs(cfg: TrainConfig, prep: Prepared, specs: list[RunSpec], n_jobs: int, progress: bool,
             deadline: FitBudget | None = None, head: HeadBeside | None = None) -> list[RunResult]:
    """Every run on the fit part, in parallel (one job per run). On the threads backend up to
    ``THREAD_RUNS_PER_JOB`` runs per job go at once (the OS shares the cores among them) when
    there are several jobs; with one, one run at a time. Each
    run stops at the ``deadline``'s boosting end (``tunemix.train.budget``). The LightGBM runs
    of one view share its Datasets (``tunemix.train.learners.lightgbm_data.sharing_datasets``).
    ``head``: the relevance head's own models, trained in the same pool after the runs
    (``tunemix.train.relevance.beside``); their results go to ``head.models``."""
    deadline = deadline or FitBudget.begin(None)
    if any(s.type in LIGHTGBM_TYPES for s in specs):
        capi.library()  # a few milliseconds, once per process: before the runs and their budgets
    beside = optimiser_beside_runs()
    head_jobs = head.jobs if head is not None else []
    at_once = n_jobs
    if cfg.run.backend == "threads" and n_jobs > 1:  # n_jobs = 1: one run at a time, on one core
        at_once = max(n_jobs, min(len(specs) + len(head_jobs), THREAD_RUNS_PER_JOB * n_jobs))
    total_iterations = sum(get_member_type(s.type).iterations(s.params) for s in specs)
    with sharing_datasets(cfg.seed), iteration_bar(total_iterations, progress and total_iterations > 0
                       and cfg.run.backend in ("loky", "threads", "sequential"),
                       processes=cfg.run.backend == "loky") as queue:
        tasks = [joblib.delayed(run_within)(deadline, s, *run_inputs(prep, s), prep.n_labels, cfg.seed, queue)
                 for s in specs]
        tasks += [joblib.delayed(head_model_task)(*args) for args in head_jobs]  # last: they fill the tail
        besides = f" and the relevance head's {len(head_jobs)} models" if head_jobs else ""
        done = run_parallel(tasks, at_once, f"boosting {len(specs)} runs{besides}", progress)
    if beside is not None:
        beside.join()
    if head is not None:
        head.models = done[len(specs):]
    return list(done[:len(specs)])


def optimiser_beside_runs() -> threading.Thread | None:
    """SciPy's optimiser (which the calibration stage needs: 0.3 s of Python holding the GIL)
    imported on a thread of its own while the runs train, when it is not loaded yet: the runs
    hold no GIL while they train (LightGBM's C calls, AdaBoost.MH's chunks of Hamming trees), so
    the import takes a core the runs leave, not time after them. None when there is nothing to
    import (already loaded, or no SciPy: the calibration stage then says so)."""
    if "scipy.optimize" in sys.modules or importlib.util.find_spec("scipy") is None:
        return None

    def load() -> None:
        with contextlib.suppress(ImportError):
            import scipy.optimize  # noqa: F401

    thread = threading.Thread(target=load, name="tunemix-import-optimiser", daemon=True)
    thread.start()
    return thread


def search_runs(cfg: TrainConfig, prep: Prepared, runs: list[RunResult], cals: list[CalibrationResult], auto: bool,
                n_jobs: int, deadline: FitBudget, boosting_s: float) -> Choice:
    """The default ``runs`` (calibrated: ``cals``; their boosting stage took ``boosting_s``), the
    rounds of the search that spends the boosting time left after them (``tunemix.train.search``:
    default members under a time budget only) while they are measured to help, and the choice
    between the default's mix and the search's (``tunemix.train.budget_choice``): what is kept,
    and the records."""
    rule = auto and bool(small_validation(data_shape(prep.sets))["applied"])

    def search_round(seconds: float, tried: list[RunResult]) -> SearchOutcome:
        until = deadline.within("boosting", seconds)  # the round's end: its runs start, are capped and stop by it

        def fit_one(spec: RunSpec) -> RunResult:
            return run_within(until, spec, *run_inputs(prep, spec), prep.n_labels, cfg.seed, None)

        return search(runs, fit_one, until, seed=cfg.seed, rule=rule, workers=n_jobs, enabled=cfg.run.search,
                      why_not=None if auto else "members configured: the search adds to the default members only",
                      tried=tried)

    def calibrate(new_runs: list[RunResult]) -> list[CalibrationResult]:
        return calibrate_runs(cfg, prep, new_runs, n_jobs, False, deadline=deadline)

    def quality(kept_runs: list[RunResult], kept_cals: list[CalibrationResult]) -> np.ndarray:
        return mix_validation_quality(cfg, prep, kept_runs, kept_cals, deadline)

    return choose_with_search(runs, cals, default_s=boosting_s, search_round=search_round, calibrate=calibrate,
                              quality=quality, boosting_left=lambda: deadline.left("boosting"),
                              measure=cfg.mixer.measure)


def mix_validation_quality(cfg: TrainConfig, prep: Prepared, runs: list[RunResult], cals: list[CalibrationResult],
                           deadline: FitBudget) -> np.ndarray:
    """The per-query validation measure of ``runs`` mixed as the mixing stage mixes them
    (``assemble``, then ``fit_mixer``): a candidate of the time budget's choice. The test queries
    are not read."""
    model, _ = assemble(cfg, prep, runs, cals)
    vali = prep.vali
    mixing = Mixing(vali_members=model.member_scores(vali.features, vali.query_offsets), test_members=None)
    fit_mixer(cfg, prep, model, mixing, runs, deadline)
    mixed = model.mixer.transform(mixing.vali_members, vali.query_offsets)
    per_query = evaluate(vali.labels, mixed, vali.query_offsets, [cfg.mixer.measure],
                         cfg.mixer.convention).per_query[cfg.mixer.measure]
    return np.asarray(per_query, dtype=np.float64)


def calibrate_within(deadline: FitBudget, last: bool, *args: Any) -> CalibrationResult | None:
    """``calibrate_snapshot(*args)``, or None (skipped) for a snapshot that is not its run's last
    once the ``deadline``'s calibration end has passed (a task of its own)."""
    if not last and deadline.passed("calibration"):
        return None
    return calibrate_snapshot(*args)


def calibrate_runs(cfg: TrainConfig, prep: Prepared, runs: list[RunResult], n_jobs: int,
                   progress: bool, *, own_gains: bool = True, deadline: FitBudget | None = None
                   ) -> list[CalibrationResult]:
    """Every run's snapshots scored on the calibration part, then one calibration job per snapshot.
    Regression and SNDCG targets are the documents' own gains (``own_gains=False``: their class
    gains instead).
    Under a time budget every run's last snapshot goes first and is always calibrated; the earlier
    snapshots only while the ``deadline``'s calibration end is not passed."""
    deadline = deadline or FitBudget.begin(None)
    cal_part = prep.cal_part
    doc_gains = np.exp2(cal_part.labels.astype(np.float64)) - 1.0 if own_gains else None
    tasks = []
    for r in runs:
        member_type = get_member_type(r.spec.type)
        raw = member_type.raw_scores(r, prep.view_x[("cal", r.spec.view)])
        grouping = prep.groupings.get(r.spec.grouping) or get_grouping(r.spec.grouping, prep.n_labels)
        classes = grouping.apply(cal_part.labels)
        specs = member_type.calibrators(list(cfg.members.calibrators), r)
        last = len(r.snapshot_iterations) - 1
        for c, it in enumerate(r.snapshot_iterations):
            tasks.append((c == last, joblib.delayed(calibrate_within)(
                deadline, c == last, r.spec.index, it, np.ascontiguousarray(raw[:, c, :]), classes,
                cal_part.query_offsets, r.class_gains, specs, r.shift_scales[c], c, doc_gains,
            )))
    order = list(range(len(tasks)))
    if deadline.limited:  # the last snapshots first: they are calibrated whatever the time
        order.sort(key=lambda i: not tasks[i][0])
    done = run_parallel([tasks[i][1] for i in order], n_jobs, f"calibrating {len(tasks)} snapshots", progress)
    by_task = dict(zip(order, done, strict=True))  # back in the runs' order, budget or not
    return [c for c in (by_task[i] for i in range(len(tasks))) if c is not None]


def assemble(cfg: TrainConfig, prep: Prepared, runs: list[RunResult], cals: list[CalibrationResult]
             ) -> tuple[EnsembleModel, list[dict[str, Any]]]:
    """One wide forest of every tree run, the linear maps, the members, an unfitted mixer: the
    model; and the calibration failures."""
    n_features = prep.train.n_features
    k_max = max(r.n_outputs for r in runs)
    wide = [remap_forest(FlatForest.from_arrays(r.forest), r.spec.view, n_features, prep.extra_views, k_max)
            for r in runs if r.forest is not None]
    forest = concatenate(wide) if wide else FlatForest.empty(n_features * (1 + len(prep.extra_views)), k_max)
    infos: list[RunInfo] = []
    linear: dict[int, dict[str, np.ndarray]] = {}
    start = 0
    for i, r in enumerate(runs):
        if r.linear is not None:
            linear[i] = r.linear
        infos.append(RunInfo(view=r.spec.view, grouping=r.spec.grouping, n_classes=r.n_outputs,
                             base_start=start, base_end=start + r.n_bases,
                             learner={"type": r.spec.type, **r.spec.params} if r.spec.type != "adaboost"
                             else dict(r.spec.params),
                             kind="forest" if r.linear is None else "linear"))
        start += r.n_bases
    by_index = {r.spec.index: r for r in runs}
    members: list[Member] = []
    failures: list[dict[str, Any]] = []
    for cr in cals:
        r = by_index[cr.run]
        tag = r.spec.tag
        for cal in cr.fitted:
            members.append(Member(name=f"{tag}|t={cr.iterations}|{cal.name}", run=cr.run,
                                  iterations=r.checkpoints[cr.snapshot], calibrator=cal))
        failures.extend({"run": tag, "iterations": cr.iterations, **f} for f in cr.failed)
    if not members:
        raise RuntimeError("every calibrator failed on every snapshot; nothing to mix (see the warnings above)")
    mixer = make_mixer(cfg.mixer.name, **mixer_params(cfg))
    model = EnsembleModel(n_features=n_features, extra_views=prep.extra_views, forest=forest,
                          runs=infos, members=members, mixer=mixer, linear=linear)
    return model, failures


def best_feature_baseline(cfg: TrainConfig, prep: Prepared) -> dict[str, Any]:
    """The paper's baseline, in every report: the raw feature (either sign) with the best mean of
    the mixer's measure on the fit part's queries, and its quality on validation and test."""
    from tunemix.train.members.linear import best_single_feature

    measure, convention = cfg.mixer.measure, cfg.mixer.convention
    fit = prep.fit_part
    if fit.n_features == prep.train.n_features:
        j, sign, quality = best_single_feature(fit.features, fit.labels, fit.query_offsets, measure, convention)
    else:  # the fit part holds no float copy: its rows of the training set, one column at a time
        train = prep.train
        assert prep.fit_queries is not None
        rows, _ = query_rows(train.query_offsets, prep.fit_queries)
        j, sign, quality = best_single_feature(train.features, fit.labels, fit.query_offsets, measure, convention,
                                               rows=rows)
    out: dict[str, Any] = {"feature": j + 1, "sign": "+" if sign > 0 else "-", "measure": measure,
                           "convention": convention, "fit": quality}
    for split, data in (("vali", prep.vali), ("test", prep.test)):
        if data is not None:
            out[split] = mean_metric(data.labels, sign * np.nan_to_num(data.features[:, j].astype(np.float64), nan=0.0),
                                     data.query_offsets, measure, convention)
    return out


def served_scores(prep: Prepared, model: EnsembleModel) -> dict[str, np.ndarray]:
    """The served model's scores (through the serving path) of the validation and test queries,
    computed once for the evaluation and the relevance head."""
    return {split: model.score(data.features, data.query_offsets)
            for split, data in (("vali", prep.vali), ("test", prep.test)) if data is not None}


def evaluate_model(prep: Prepared, model: EnsembleModel, mixing: Mixing,
                   served: dict[str, np.ndarray], conventions: list[str] | None = None) -> dict[str, Any]:
    """The served model (``served``: its scores, ``served_scores``) and the best single member
    under every convention (or those of ``conventions``: the time budget's cut)."""
    top = prep.n_labels - 1
    best = int(np.argmax(mixing.omega))
    out: dict[str, Any] = {}
    for split, data, members in (("vali", prep.vali, mixing.vali_members), ("test", prep.test, mixing.test_members)):
        if data is None or members is None:
            continue
        out[split] = {
            "ensemble": metrics_all_conventions(data.labels, served[split], data.query_offsets, data.docids, top,
                                                conventions),
            "best_member": metrics_all_conventions(data.labels, members[:, best], data.query_offsets,
                                                   data.docids, top, conventions),
        }
    return out


def train(cfg: TrainConfig, *, progress: bool = True, sets: dict[str, RankingData] | None = None,
          save: bool = True, deadline: FitBudget | None = None) -> TrainOutcome:
    """Train, mix, evaluate and (``save``) save a model as configured; return where it went (None
    when not saved) and the record. ``sets`` (train, vali, optionally test) replace the config's
    data. ``deadline``: the time budget's (default: ``[run] time_budget_s`` from now)."""
    from tunemix.core.compile_clock import compile_clock
    from tunemix.core.threads import one_blas_thread

    deadline = deadline or FitBudget.begin(cfg.run.time_budget_s, clock_for(cfg.run.backend))
    with one_blas_thread(), compile_clock() as compiling:
        clock = _Clock(compiling)
        outcome = _train(cfg, clock, progress, sets, save, deadline)
    return outcome


def _train(cfg: TrainConfig, clock: _Clock, progress: bool, sets: dict[str, RankingData] | None,
           save: bool, deadline: FitBudget) -> TrainOutcome:
    """The stages in order: the choices that depend on the data, the views and bins, the members'
    fits, their calibration and mix, the evaluation, the relevance head, the record."""
    chosen = choose(cfg, clock, sets, deadline)
    cfg = chosen.cfg
    specs = run_specs(cfg)
    prep = prepare(cfg, clock, specs, chosen.sets, chosen.records)
    feature_names = resolve_feature_names(cfg.data, prep.sets["train"].n_features)  # checked before any fit
    head = head_beside(cfg, prep, specs, deadline)  # the head's own models beside the runs (no budget)
    runs, searched, cals, choice = fit_members(cfg, clock, prep, specs, chosen.auto, progress, deadline, head)
    mixed = mix_members(cfg, clock, prep, runs, cals, deadline)
    checked = evaluate_mix(cfg, clock, prep, mixed, feature_names, save, deadline)
    with clock("relevance_head_s"):
        relevance = fit_head(cfg, prep, mixed.model, checked.served, progress, reusable_head_models(cfg, prep, runs),
                             deadline, pretrained=head.models if head is not None else None)
    clock.timings["total_s"] = time.perf_counter() - clock.start
    numba_compile = clock.compile_record()
    served_per_query = vali_per_query(cfg, prep, checked.served["vali"])
    record = build_record(cfg, prep, runs, mixed.members, mixed.failures, mixed.model, mixed.full_size,
                          mixed.mixing, checked.evaluation, clock.timings)
    add_weight_shares(searched, [m.run for m in mixed.members], record["mixer"].get("weights"))
    record.update({
        "relevance_head": relevance,
        "search": searched,
        "time_budget": {**budget_record(clock, deadline, chosen, runs, cals, mixed, checked), "choice": choice},
        "auto_members": chosen.auto_reasons or None,
        "small_validation": validation_rule_record(cfg, prep, served_per_query, chosen.auto),
        "peer_recipe": peer_recipe_record(cfg, prep, runs, served_per_query),
        "mix_by_member_type": mixed.by_type,
        "best_feature": checked.baseline,
        "feature_names": feature_names,
        "explanations": checked.explanations,
        "numba_compile": numba_compile,
    })
    path = _save(cfg, mixed.model, record) if save else None
    return TrainOutcome(path=path, record=record, model=mixed.model)


@dataclass
class Chosen:
    """The configuration once the data is known, with the data read for it (None: not read yet)."""

    cfg: TrainConfig
    sets: dict[str, RankingData] | None
    records: list[dict[str, Any]] | None
    subsample: dict[str, Any] | None
    auto: bool
    auto_reasons: list[str]


def choose(cfg: TrainConfig, clock: _Clock, sets: dict[str, RankingData] | None, deadline: FitBudget) -> Chosen:
    """The choices that depend on the data: the members chosen from its shape (no member tables),
    the queries a time budget can pay for, ``label_groupings = all`` for its number of labels."""
    records = None
    auto = not any(mt.blocks(cfg) for mt in member_types().values())
    auto_reasons: list[str] = []
    if auto or "all" in cfg.members.label_groupings:  # choices that depend on the data: read it first
        with clock("read_and_split_s"):
            if sets is None:
                sets, records = load_data(cfg)
    subsample: dict[str, Any] | None = None
    import_s = lightgbm_import_s(cfg, auto)  # seconds of loading LightGBM still to come
    if deadline.limited:  # cost known before work: train on the queries the budget can pay for
        if sets is None:
            with clock("read_and_split_s"):
                sets, records = load_data(cfg)
        sets, subsample = budget_sample(sets, deadline, import_s, cfg.seed)
    if auto:
        assert sets is not None
        cfg, auto_reasons = apply_auto(cfg, data_shape(sets), import_s)
    if "all" in cfg.members.label_groupings:
        assert sets is not None
        n_labels = label_count(sets["train"])
        cfg = dataclasses.replace(cfg, members=dataclasses.replace(
            cfg.members, label_groupings=groupings_for(list(cfg.members.label_groupings), n_labels)))
        log.info("label_groupings = all: %s for %d labels", ", ".join(cfg.members.label_groupings), n_labels)
    return Chosen(cfg, sets, records, subsample, auto, auto_reasons)


def fit_members(cfg: TrainConfig, clock: _Clock, prep: Prepared, specs: list[RunSpec], auto: bool, progress: bool,
                deadline: FitBudget, head: Any
                ) -> tuple[list[RunResult], dict[str, Any], list[CalibrationResult], dict[str, Any] | None]:
    """The runs (boosting) and each snapshot's calibrations, on the configured backend; then,
    where it applies, the search of "tune, then mix" in rounds and the choice between the
    default's model and the search's mixes (``tunemix.train.budget_choice``): the runs and
    calibrations kept, the search's record, the choice's record (None without a search run)."""
    with parallel_backend(cfg.run.backend, cfg.run.n_jobs, cfg.run.scheduler) as n_jobs:
        with clock("boosting_s"):
            t0 = deadline.clock()
            runs = fit_runs(cfg, prep, specs, n_jobs, progress, deadline, head=head)
            boosting_s = deadline.clock() - t0  # on the budget's clock: the search's rounds are sized by it
        with clock("calibration_s"):
            cals = calibrate_runs(cfg, prep, runs, n_jobs, progress, deadline=deadline)
        with clock("search_s"):
            choice = search_runs(cfg, prep, runs, cals, auto, n_jobs, deadline, boosting_s)
    return choice.runs, choice.search, choice.cals, choice.record if choice.record.get("candidates") else None


@dataclass
class Mixed:
    """The mixed model (pruned to what the mix uses) and what its mixing stage found."""

    model: EnsembleModel
    failures: Any
    members: list[Member]
    mixing: Mixing
    full_size: tuple[int, int]
    by_type: list[dict[str, Any]]
    skipped: list[str]


def mix_members(cfg: TrainConfig, clock: _Clock, prep: Prepared, runs: list[RunResult],
                cals: list[CalibrationResult], deadline: FitBudget) -> Mixed:
    """Score the calibrated members, fit the mixer, compare mixers and member-type subsets while the
    mixing stage's time lasts, and drop what the mix never uses."""
    with clock("member_scoring_s"):
        model, failures = assemble(cfg, prep, runs, cals)
        members = list(model.members)
        mixing = score_members(prep, model)
    with clock("mixing_s"):
        fit_mixer(cfg, prep, model, mixing, runs, deadline)
    skipped = []  # the side comparisons, once the mixing stage's time is over
    if mixing.test_members is not None and cfg.mixer.compare:
        if deadline.passed("mixing"):
            skipped.append("mixer_comparison")
        else:
            with clock("mixer_comparison_s"):
                compare(cfg, prep, mixing)
    by_type: list[dict[str, Any]] = []
    if deadline.passed("mixing"):
        skipped.append("type_comparison")
    else:
        with clock("type_comparison_s"):
            by_type = compare_type_subsets(cfg, prep, runs, members, mixing)
    with clock("pruning_s"):  # drop what the mixer never uses
        full_size = (model.n_members, model.forest.n_base)
        model = prune(model)
    return Mixed(model, failures, members, mixing, full_size, by_type, skipped)


@dataclass
class Checked:
    """The served model's scores and evaluation, the best single feature's, the report's
    explanations, and what the time budget left out."""

    served: dict[str, np.ndarray]
    evaluation: Any
    baseline: dict[str, Any] | None
    explanations: dict[str, Any]
    skipped: list[str]


def evaluate_mix(cfg: TrainConfig, clock: _Clock, prep: Prepared, mixed: Mixed, feature_names: list[str],
                 save: bool, deadline: FitBudget) -> Checked:
    """Evaluate the served model under every convention (the served one alone once the mixing
    stage's time is over) and explain a few documents for the report when the model is saved."""
    skipped = list(mixed.skipped)
    with clock("evaluation_s"):
        served = served_scores(prep, mixed.model)
        late = deadline.passed("mixing")  # past it: the served convention only, no baseline
        conventions = [cfg.mixer.convention] if late else None
        evaluation = evaluate_model(prep, mixed.model, mixed.mixing, served, conventions)
        baseline = None if late else best_feature_baseline(cfg, prep)
        skipped += ["other_conventions", "best_feature"] if late else []
    with clock("explanations_s"):  # for the report, written only with the model
        explanations = (explain_for_report(prep, mixed.model, feature_names) if save and not late
                        else {"skipped": "the time budget was spent" if late
                              else "the report computes them only when `tunemix train` saves the model"})
    return Checked(served, evaluation, baseline, explanations, skipped)


def budget_record(clock: _Clock, deadline: FitBudget, chosen: Chosen, runs: list[RunResult],
                  cals: list[CalibrationResult], mixed: Mixed, checked: Checked) -> dict[str, Any]:
    """The record's ``time_budget``: the budget, the time spent, what it left out or stopped."""
    return {**deadline.record(), "elapsed_s": round(deadline.elapsed(), 3), "skipped": checked.skipped,
            "before_train_s": (round(clock.start - deadline.start, 3)
                               if deadline.clock is time.perf_counter else None),
            "subsample": chosen.subsample,
            "runs_stopped": [r.spec.tag for r in runs if r.stop_reason == "time_budget"],
            "snapshots_calibrated": len(cals), "mixing_candidates": len(mixed.mixing.rescaling)}


def vali_per_query(cfg: TrainConfig, prep: Prepared, scores: np.ndarray) -> np.ndarray:
    """Each validation query's value of the mixer's measure (and convention) for ``scores``."""
    vali, measure = prep.vali, cfg.mixer.measure
    return np.asarray(evaluate(vali.labels, scores, vali.query_offsets, [measure],
                               cfg.mixer.convention).per_query[measure], dtype=np.float64)


def validation_rule_record(cfg: TrainConfig, prep: Prepared, served_per_query: np.ndarray,
                           auto: bool) -> dict[str, Any]:
    """Whether the rule for small validation sets (``tunemix.train.members.auto.small_validation``)
    was used, why, and the measured standard error of the served model's mean validation
    measure (per-query sd / sqrt(queries)): what a difference between two choices made on these
    queries must exceed to be more than noise."""
    shape = data_shape(prep.sets)
    if auto:
        out = small_validation(shape)
    else:
        out = {"applied": False, "vali_queries": shape.vali_queries,
               "summary": "members configured: the rule for small validation sets applies to the default members only"}
    if int(np.isfinite(served_per_query).sum()) > 1:
        out["vali_measure_se"] = round(one_standard_error(served_per_query), 4)
    return out


def peer_recipe_record(cfg: TrainConfig, prep: Prepared, runs: list[RunResult], served_per_query: np.ndarray
                       ) -> dict[str, Any] | None:
    """The served model against the run of the early-stopped LightGBM recipe (``PEER_RECIPE``, a
    default member up to 200k documents) on the validation queries: the run's measure, and the
    per-query difference served minus run with its standard error. The mix's candidates include
    that run alone, so on validation the difference is at least about zero; on new queries the
    served model can fall behind the recipe only by what the choice on these queries fits to
    their noise, about this standard error. None without such a run."""
    run = next((r for r in runs if r.spec.type == "lambdamart" and r.spec.view == "raw" and r.forest is not None
                and is_peer_recipe(r.spec.params)), None)
    if run is None or run.forest is None or not run.checkpoints:
        return None
    measure = cfg.mixer.measure
    recipe = score_forest(FlatForest.from_arrays(run.forest), prep.vali.features, [run.checkpoints[-1]])[:, 0, 0]
    ours, theirs = served_per_query, vali_per_query(cfg, prep, recipe)
    diff = (ours - theirs)[np.isfinite(ours) & np.isfinite(theirs)]
    out: dict[str, Any] = {"run": run.spec.tag, "iterations": run.snapshot_iterations[-1],
                           f"vali_{measure}": round(float(np.nanmean(theirs)), 4),
                           f"served_vali_{measure}": round(float(np.nanmean(ours)), 4),
                           "served_minus_run": round(float(diff.mean()), 4) if diff.size else None,
                           "se": round(one_standard_error(diff), 4) if diff.size > 1 else None,
                           "queries": int(diff.size)}
    return out


def explain_for_report(prep: Prepared, model: EnsembleModel, names: list[str]) -> dict[str, Any]:
    """The report's importance and worked examples (``tunemix.train.importance``), on the test
    queries (else validation); a failure is recorded, the model is kept."""
    split = "test" if "test" in prep.sets else "vali"
    try:
        return explanation_summary(model, prep.sets[split], names, split)
    except (ValueError, MemoryError) as exc:
        log.warning("no explanations in the report: %s", exc)
        return {"error": f"{type(exc).__name__}: {exc}"}


def save_model(cfg: TrainConfig, model: EnsembleModel, record: dict[str, Any]) -> Path:
    """Write ``model`` and its training record as the next version of ``cfg.name`` under
    ``cfg.run.models_dir``; the version directory."""
    return _save(cfg, model, record)


def _save(cfg: TrainConfig, model: EnsembleModel, record: dict[str, Any]) -> Path:
    from tunemix.train.report import render_report

    doc, arrays = model.to_artifact()
    manifest = {
        "tunemix_version": __version__,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "n_features": model.n_features,
        "feature_names": record.get("feature_names") or resolve_feature_names(cfg.data, model.n_features),
        "normalisation": {"views": list(cfg.members.views), "extra_views": list(model.extra_views)},
        "label_gains": [float(2.0**lab - 1.0) for lab in range(record["n_labels"])],
        "model": doc,
        "training_record": record,
    }
    extra = render_report(record, plots=cfg.run.report_plots)
    return save_artifact(cfg.run.models_dir, cfg.name, manifest, arrays, extra_files=extra)
