"""Five-fold quality benchmark: the "Tune and mix" MQ2008 table reproduced, our choices measured.

One command, resumable, JSON + markdown table + PNG ::

    .venv/bin/python -m bench.quality                      # MQ2008, folds 1-5, full and 60-query
    .venv/bin/python -m bench.quality --folds 1 --sizes full --quick   # a smoke run
    .venv/bin/python -m bench.quality --report-only        # re-mix and re-render from the cache

Two stages per cell (data set x fold x training size):

1. *Members* (slow, cached in ``--cache``, default ``bench/results/quality/cache``, not in git):
   one training run of the superset of every choice under test, through the pipeline's own
   stages (``tunemix.train.train``): AdaBoost.MH trees {8, 64} and products {3, 10} on the
   views raw, raw+std and raw+white and both label groupings, McRank (multi-class, ordinal),
   LambdaMART, the Crammer-Singer SVM, every calibrator of :data:`POOL`; then every member's
   scores on the calibration part, the validation and the test queries, saved as arrays
   (``.npz``, loaded with ``allow_pickle=False``) plus a JSON of the member metadata. The peers
   (``bench.quality_peers``) are trained here too.
2. *Mixes* (fast, recomputed on every run): every row of the table is a member subset and a
   mixer, fitted on the validation queries (or the calibration part) and scored on test.

A cell's training set is the fold's ``train.txt``, or (size ``60``) 60 of its queries drawn
with a fixed seed, so that a gain is not an artefact of one size (small real data sets have
has about 60 training queries per fold). Validation and test are always the fold's own.

The table reports mean and sample SD over folds of the test NDCG@10 and ERR (``err:top=2``,
the paper's ERR on three-level data) under the ``yahoo`` convention, NDCG@10 under the six
tools' conventions, validation NDCG@10 (what any choice may look at), and training seconds.
The default configuration is chosen on validation means (``decision`` in the JSON), never on test.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import RESULTS, SHARED_DATA, machine_info

OUT = RESULTS / "quality"
MQ2008 = SHARED_DATA / "MQ2008"
#: every calibrator under test
POOL = (
    "shift", "cpc:ls", "cpc:ewls(C=2)", "cpc:ewls(C=-1)", "cpc:el", "cpc:ell", "cpc:sndcg(sigma=0.01)",
    "rbc:linear:gain", "rbc:linear:ndcg", "rbc:logistic:gain", "rbc:logistic:ndcg", "rbc:poly2:gain",
    "rbc:poly2:ndcg", "rbc:poly3:gain", "rbc:poly3:ndcg", "rbc:poly4:gain", "rbc:poly4:ndcg",
    "rbc:nn:gain", "rbc:nn:ndcg",
)
#: the six tools of docs/conventions.md (the JSON holds all ten)
SIX = ("letor3", "letor4", "mslr", "yahoo", "ranklib", "trec")
MEASURE, CONVENTION = "ndcg@10", "yahoo"

SUPERSET = """
name = "quality"
seed = 0
[data]
{data}
[members]
views = {views}
label_groupings = {groupings}
calibrators = {pool}
best_feature = true
[[members.adaboost]]
base = "tree"
n_leaves = [8, 64]
n_iterations = {tree_T}
checkpoints = {tree_cp}
[[members.adaboost]]
base = "product"
n_terms = [3, 10]
n_iterations = {prod_T}
checkpoints = {prod_cp}
{others}
[mixer]
name = "exp_forecaster"
[run]
backend = "loky"
n_jobs = {n_jobs}
report_plots = false
"""
OTHERS = """
[[members.mcrank]]
variant = ["multiclass", "ordinal"]
n_leaves = [8, 32]
learning_rate = 0.1
n_iterations = 300
checkpoints = [30, 100, 300]
[[members.lambdamart]]
n_leaves = [8, 32]
learning_rate = 0.1
n_iterations = 300
checkpoints = [30, 100, 300]
[[members.svm]]
C = [1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0]
"""


# ------------------------------------------------------------------------------------ data
def load_fold(root: Path, fold: int) -> dict[str, Any]:
    from tunemix.core.data.svmlight import read_svmlight

    d = root / f"Fold{fold}"
    train = read_svmlight(d / "train.txt")
    return {"train": train, "vali": read_svmlight(d / "vali.txt", n_features=train.n_features),
            "test": read_svmlight(d / "test.txt", n_features=train.n_features)}


MSLR_SAMPLE = SHARED_DATA / "MSLR-WEB10K-sample"


def load_sample_fold(root: Path, fold: int) -> dict[str, Any]:
    """The MSLR-WEB10K sample (two files of 43 queries each, five-level labels) as five query
    folds: its 86 queries shuffled once (seed 0) and cut in five parts; fold k tests on part k,
    validates on part k+1 and trains on the other three."""
    from tunemix.core.data.dataset import RankingData
    from tunemix.core.data.svmlight import read_svmlight

    a = read_svmlight(root / "msn1.fold1.train.5k.txt")
    b = read_svmlight(root / "msn1.fold1.test.5k.txt", n_features=a.n_features)
    sizes = np.concatenate([np.diff(a.query_offsets), np.diff(b.query_offsets)])
    whole = RankingData.from_arrays(np.vstack([a.features, b.features]), np.concatenate([a.labels, b.labels]),
                                    np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64))
    parts = np.array_split(np.random.default_rng(0).permutation(whole.n_queries), 5)
    k = fold - 1
    train = np.sort(np.concatenate([parts[i] for i in range(5) if i not in (k, (k + 1) % 5)]))
    return {"train": whole.subset_queries(train), "vali": whole.subset_queries(np.sort(parts[(k + 1) % 5])),
            "test": whole.subset_queries(np.sort(parts[k]))}


def subsample_queries(data: Any, n_queries: int, seed: int) -> Any:
    """``n_queries`` of the set's queries, drawn without replacement (fixed seed), in file order."""
    if n_queries >= data.n_queries:
        return data
    rng = np.random.default_rng(seed)
    return data.subset_queries(np.sort(rng.choice(data.n_queries, size=n_queries, replace=False)))


# ------------------------------------------------------------------------------- members
@dataclass
class Cell:
    key: str
    meta: list[dict[str, Any]]        # one per member column
    arrays: dict[str, np.ndarray]     # {split}_scores (n, M), {split}_labels, {split}_offsets, peers
    info: dict[str, Any]


def _config(fold_dir: Path, n_jobs: int, quick: bool, views: list[str], with_others: bool,
            groupings: tuple[str, ...] = ("original", "binary"), short: bool = False) -> Any:
    """The superset's TrainConfig (its [data] names the fold's files, any existing file for the
    sample; the cell's sets, maybe a subsample, are passed in memory)."""
    from tunemix.train.config import load_config

    files = {k: fold_dir / (k + ".txt") for k in ("train", "vali", "test")}
    if not files["train"].exists():
        files = dict.fromkeys(files, next(fold_dir.glob("*.txt")))
    text = SUPERSET.format(
        data="\n".join(f'{k} = "{v}"' for k, v in files.items()),
        views=json.dumps(views), groupings=json.dumps(list(groupings)), pool=json.dumps(list(POOL)), n_jobs=n_jobs,
        tree_T=100 if quick else 300 if short else 1000,
        tree_cp=[10, 30, 100] if quick else [10, 30, 100, 300] if short else [10, 30, 100, 300, 1000],
        prod_T=100 if quick or short else 300, prod_cp=[10, 30, 100] if quick or short else [10, 30, 100, 300],
        others=OTHERS if with_others else "")
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as fh:
        fh.write(text)
    try:
        return load_config(fh.name)
    finally:
        Path(fh.name).unlink()


def _members(cfg: Any, sets: dict[str, Any], *, progress: bool, others: Any = None
             ) -> tuple[list[dict[str, Any]], dict[str, np.ndarray], dict[str, float]]:
    """Train ``cfg``'s AdaBoost.MH runs (and ``others``' runs of the other member types) on
    ``sets`` through the pipeline's stages; member metadata and the member scores on the
    calibration part, validation and test."""
    import dataclasses

    from tunemix.train import train as tr
    from tunemix.train.members.types import run_specs
    from tunemix.train.mixing import member_snapshot_iterations
    from tunemix.train.parallel import parallel_backend

    clock = tr._Clock()
    specs = [s for s in run_specs(cfg) if s.type in ("adaboost", "best_feature")]
    if others is not None:
        specs += [dataclasses.replace(s, index=len(specs) + i)
                  for i, s in enumerate(x for x in run_specs(others) if x.type not in ("adaboost", "best_feature"))]
    prep = tr.prepare(cfg, clock, specs, sets)
    with parallel_backend(cfg.run.backend, cfg.run.n_jobs, None) as n_jobs:
        t0 = time.perf_counter()
        runs = tr.fit_runs(cfg, prep, specs, n_jobs, progress)
        boost_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        cals = tr.calibrate_runs(cfg, prep, runs, n_jobs, progress)
        cal_s = time.perf_counter() - t0
    model, _ = tr.assemble(cfg, prep, runs, cals)
    assert prep.test is not None
    scores = {"cal": model.member_scores(prep.cal_part.features, prep.cal_part.query_offsets),
              "vali": model.member_scores(prep.vali.features, prep.vali.query_offsets),
              "test": model.member_scores(prep.test.features, prep.test.query_offsets)}
    members = list(model.members)
    its = member_snapshot_iterations(runs, members)
    meta = []
    for j, m in enumerate(members):
        r = runs[m.run]
        meta.append({"name": m.name, "type": r.spec.type, "view": r.spec.view, "grouping": r.spec.grouping,
                     "learner": r.spec.learner_tag, "run": int(m.run), "T": int(its[j]),
                     "n_snapshots": len(r.snapshot_iterations), "calibrator": m.calibrator.name})
    arrays: dict[str, np.ndarray] = {}
    for split, data in (("cal", prep.cal_part), ("vali", prep.vali), ("test", prep.test)):
        assert data is not None
        arrays[f"{split}_scores"] = scores[split]
        arrays[f"{split}_labels"] = np.asarray(data.labels, dtype=np.int64)
        arrays[f"{split}_offsets"] = np.asarray(data.query_offsets, dtype=np.int64)
    seconds = {"boosting_s": boost_s, "calibration_s": cal_s,
               **{f"run:{r.spec.tag}": float(r.fit_seconds) for r in runs}}
    return meta, arrays, seconds


def build_cell(key: str, fold_dir: Path, sets: dict[str, Any], *, n_jobs: int, quick: bool, progress: bool,
               groupings: tuple[str, ...] = ("original", "binary")) -> Cell:
    """Stage 1 of one cell: the superset's members, the peers and the best single feature."""
    from bench.quality_peers import PEERS, fit_peer
    from tunemix.train.train import best_feature_baseline

    t0 = time.perf_counter()
    # five groupings of five-level data: shorter runs (trees to 300 iterations, products to 100)
    short = len(groupings) > 2
    cfg = _config(fold_dir, n_jobs, quick, ["raw", "raw+std", "raw+white"], with_others=False, groupings=groupings,
                  short=short)
    # the other member types on the raw view and the original labels only (their own rows)
    others = None if quick else _config(fold_dir, n_jobs, quick, ["raw"], with_others=True, groupings=("original",))
    meta, arrays, seconds = _members(cfg, sets, progress=progress, others=others)
    info: dict[str, Any] = {"seconds": seconds}
    # the peers and the best single feature (chosen on the fit part: prepare's 80% split)
    for name in PEERS:
        res = fit_peer(name, sets["train"], sets["vali"], sets["test"], n_threads=n_jobs)
        arrays[f"peer:{name}:vali"] = res.vali_scores
        arrays[f"peer:{name}:test"] = res.test_scores
        info[f"peer:{name}"] = {"params": res.params, "fit_seconds": res.fit_seconds}
    from tunemix.train import train as tr
    from tunemix.train.members.types import run_specs

    prep = tr.prepare(cfg, tr._Clock(), run_specs(cfg)[:1], sets)
    info["best_feature"] = best_feature_baseline(cfg, prep)
    info["build_seconds"] = time.perf_counter() - t0
    return Cell(key=key, meta=meta, arrays=arrays, info=info)


def save_cell(cell: Cell, cache: Path) -> None:
    cache.mkdir(parents=True, exist_ok=True)
    tmp = cache / f"{cell.key}.tmp.npz"
    np.savez(tmp, **cell.arrays)  # type: ignore[arg-type]
    tmp.replace(cache / f"{cell.key}.npz")
    (cache / f"{cell.key}.json").write_text(json.dumps({"meta": cell.meta, "info": cell.info}, default=float))


def load_cell(key: str, cache: Path) -> Cell | None:
    npz, js = cache / f"{key}.npz", cache / f"{key}.json"
    if not (npz.exists() and js.exists()):
        return None
    with np.load(npz, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    doc = json.loads(js.read_text())
    return Cell(key=key, meta=doc["meta"], arrays=arrays, info=doc["info"])


# ------------------------------------------------------------------------------- mixes
Select = Callable[[dict[str, Any]], bool]


def _split(cell: Cell, split: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    a = cell.arrays
    return a[f"{split}_scores"], a[f"{split}_labels"], a[f"{split}_offsets"]


def _snapshot_masks(meta: list[dict[str, Any]]) -> list[tuple[int, np.ndarray]]:
    """``tunemix.train.mixing.snapshot_masks`` on the cached member metadata."""
    from tunemix.train.mixing import snapshot_masks

    boosted: dict[int, set[int]] = {}
    for m in meta:
        if m["n_snapshots"] > 1:
            boosted.setdefault(m["run"], set()).add(m["T"])
    return snapshot_masks(np.array([m["run"] for m in meta], dtype=np.int64),
                          np.array([m["T"] for m in meta], dtype=np.int64),
                          {run: sorted(ts) for run, ts in boosted.items()})


def _query_rows(offsets: np.ndarray, queries: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows and offsets of the given queries (in the given order)."""
    sizes = offsets[queries + 1] - offsets[queries]
    rows = np.concatenate([np.arange(offsets[q], offsets[q + 1]) for q in queries]) if queries.size else \
        np.zeros(0, dtype=np.int64)
    return rows, np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)


def mix(cell: Cell, select: Select, *, mixer: str = "exp_forecaster", snapshots: str = "all",
        tune_on: str = "validation", rescale: str = "zscore_query", vali_queries: np.ndarray | None = None,
        **forecaster: Any) -> dict[str, Any]:
    """Fit ``mixer`` on the selected members (validation or calibration part), score test.
    ``vali_queries``: tune on these validation queries only and report ``vali`` on the others
    (a small validation set, and an honest estimate of what the tuning chose)."""
    from tunemix.core.ensemble.registry import make_mixer
    from tunemix.core.evaluation import mean_metric
    from tunemix.train.mixing import search_forecasters

    cols = np.flatnonzero([select(m) for m in cell.meta])
    if cols.size == 0:
        return {"n_members": 0}
    meta = [cell.meta[c] for c in cols]
    vs, vl, vo = _split(cell, "vali")
    ts, _, to = _split(cell, "test")
    us, ul, uo = _split(cell, "cal" if tune_on == "calibration" else "vali")
    if vali_queries is not None:
        rest = np.setdiff1d(np.arange(vo.shape[0] - 1), vali_queries)
        tune_rows, uo = _query_rows(vo, np.asarray(vali_queries, dtype=np.int64))
        us, ul = vs[tune_rows], vl[tune_rows]
        held_rows, vo = _query_rows(vo, rest)
        vs, vl = vs[held_rows], vl[held_rows]
    vs, ts, us = (np.ascontiguousarray(x[:, cols]) for x in (vs, ts, us))
    out: dict[str, Any] = {"n_members": int(cols.size)}
    if mixer != "exp_forecaster":
        params = {"measure": MEASURE, "convention": CONVENTION} if mixer == "one_best" else {}
        mx = make_mixer(mixer, **params).fit(us, ul, uo)
        out["test_scores"] = mx.transform(ts, to)
        out["vali"] = mean_metric(vl, mx.transform(vs, vo), vo, MEASURE, CONVENTION)
        return out
    sets: list[tuple[int | None, np.ndarray | None]] = [(None, None)]
    if snapshots == "tune":
        sets = list(_snapshot_masks(meta)) or [(None, None)]
    # the pipeline's own search (tunemix.train.mixing): the bench measures what it ships
    search = search_forecasters(us, ul, uo, modes=[rescale], sets=sets, measure=MEASURE, convention=CONVENTION,
                                **forecaster)
    _, T, fc = search.candidates[search.pick]
    out.update(test_scores=fc.transform(ts, to), vali=mean_metric(vl, fc.transform(vs, vo), vo, MEASURE, CONVENTION),
               c=fc.c_, omega_min=fc.omega_min_, kept=int(np.sum(fc.kept_)), T=T,
               duplicates=int(np.sum(fc.duplicate_of_ >= 0)))
    return out


def held_out(cell: Cell, select: Select, **options: Any) -> tuple[float, float] | None:
    """A small validation set (small real data sets have has about 20 validation queries): the
    mix tuned on ``SMALL_VALI`` validation queries, ``SMALL_VALI_DRAWS`` draws, measured on the
    other validation queries and on test (means over the draws); None with fewer than twice
    ``SMALL_VALI`` validation queries. ``options`` go to ``mix``."""
    n_vali = cell.arrays["vali_offsets"].shape[0] - 1
    if n_vali < 2 * SMALL_VALI:
        return None
    held, test = [], []
    for seed in range(SMALL_VALI_DRAWS):
        qs = np.sort(np.random.default_rng(seed).choice(n_vali, size=SMALL_VALI, replace=False))
        r = mix(cell, select, vali_queries=qs, **options)
        held.append(r["vali"])
        test.append(test_metrics(cell, r["test_scores"], all_conventions=False)["test_ndcg@10"])
    return float(np.mean(held)), float(np.mean(test))


def test_metrics(cell: Cell, scores: np.ndarray, *, all_conventions: bool) -> dict[str, Any]:
    from tunemix.core.evaluation import CONVENTION_NAMES, mean_metric

    _, tl, to = _split(cell, "test")
    top = int(max(tl.max(), cell.arrays["vali_labels"].max()))
    out: dict[str, Any] = {"test_ndcg@10": mean_metric(tl, scores, to, MEASURE, CONVENTION),
           "test_err": mean_metric(tl, scores, to, f"err:top={max(top, 1)}", CONVENTION)}
    if all_conventions:
        for conv in CONVENTION_NAMES:
            try:
                out[f"test_ndcg@10:{conv}"] = mean_metric(tl, scores, to, MEASURE, conv)
            except ValueError:
                out[f"test_ndcg@10:{conv}"] = None
    return out


# selections -------------------------------------------------------------------------------
def _is(**want: Any) -> Select:
    def sel(m: dict[str, Any]) -> bool:
        for k, v in want.items():
            val = m.get(k)
            if isinstance(v, tuple | list | set | frozenset):
                if val not in v:
                    return False
            elif val != v:
                return False
        return True
    return sel


def _and(*fs: Select) -> Select:
    return lambda m: all(f(m) for f in fs)


def _in_pool(m: dict[str, Any]) -> bool:
    """A calibrator of the pool (McRank's ordinal+<spec> by its inner spec) or a member type's own
    (identity, McRank's expected relevance)."""
    cal = m["calibrator"].removeprefix("ordinal+")
    return cal in POOL or cal == "identity" or cal.startswith("er:")


def _learner(prefix: str) -> Select:
    return lambda m: str(m["learner"]).startswith(prefix)


#: the small-validation check: tuned on this many validation queries, this many draws
SMALL_VALI, SMALL_VALI_DRAWS = 20, 3
VIEW_SETS = {"raw": ("raw",), "raw+std": ("raw", "raw+std"), "raw+white": ("raw", "raw+white"),
             "all": ("raw", "raw+std", "raw+white")}


def ab(views: tuple[str, ...], pool: tuple[str, ...]) -> Select:
    return _is(type="adaboost", view=views, calibrator=pool)


def decisions() -> list[dict[str, Any]]:
    """The configuration choices measured on validation: the members
    (AdaBoost.MH alone, or every member type), the views of the AdaBoost.MH runs, every
    snapshot a member or one T, tuned on validation or on the calibration part (the latter
    for AdaBoost.MH only: it loses everywhere there)."""
    out = []
    for members in ("adaboost", "every type"):
        for vname in VIEW_SETS:
            for snapshots in ("all", "tune"):
                for tune_on in ("validation", "calibration"):
                    if members == "adaboost" or tune_on == "validation":
                        out.append({"members": members, "views": vname, "snapshots": snapshots, "tune_on": tune_on})
    return out


def _decision_members(d: dict[str, Any]) -> Select:
    rows = rows_for(d)
    if d.get("members", "adaboost") == "adaboost":
        return rows[0][1]
    return next(r[1] for r in rows if r[0].startswith("Full mix"))


def rows_for(decision: dict[str, Any]) -> list[tuple[str, Select, dict[str, Any]]]:
    """The table's rows under one configuration: (name, member selection, mix options)."""
    views = VIEW_SETS[decision["views"]]
    mixopt = {"snapshots": decision["snapshots"], "tune_on": decision["tune_on"]}
    cpc = tuple(c for c in POOL if c.startswith("cpc:") or c == "shift")
    rbc = tuple(c for c in POOL if c.startswith("rbc:"))
    every = _and(_in_pool, lambda m: m["type"] != "adaboost" or m["view"] in views)
    other = _in_pool
    return [
        ("AB+EXP", ab(views, POOL), mixopt),
        ("AB+EXP.CPC", ab(views, cpc), mixopt),
        ("AB+EXP.RBC", ab(views, rbc), mixopt),
        ("AB+OneBest", ab(views, POOL), {"mixer": "one_best", **mixopt}),
        ("AB+EXP, cross-validated choice", ab(views, POOL), {**mixopt, "selection": "cv"}),
        ("SVM+EXP", _and(other, _is(type="svm")), {"tune_on": decision["tune_on"]}),
        ("McRank multiclass", _and(other, _is(type="mcrank"), _learner("mcrank-mc")), mixopt),
        ("McRank ordinal", _and(other, _is(type="mcrank"), _learner("mcrank-ord")), mixopt),
        ("LambdaMART (member alone)", _and(other, _is(type="lambdamart"), _is(calibrator="identity")), mixopt),
        ("Full mix (every member type)", every, mixopt),
        ("Full mix, cross-validated choice", every, {**mixopt, "selection": "cv"}),
        ("Full mix, one-SE rule", every, {**mixopt, "tie_tolerance": "one_se"}),
        ("Full mix, uniform", every, {"mixer": "uniform", **mixopt}),
        ("Full mix, RRF", every, {"mixer": "rrf", **mixopt}),
        ("Full mix, CombMNZ", every, {"mixer": "combmnz", **mixopt}),
        ("Full mix, Condorcet", every, {"mixer": "condorcet", **mixopt}),
    ]


def mix_cell(cell: Cell, decision_list: list[dict[str, Any]], chosen: dict[str, Any] | None,
             done: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Stage 2 of one cell: validation of every decision on AB+EXP (unless ``done``); the
    table's rows under ``chosen`` (when known)."""
    from tunemix.core.evaluation import mean_metric

    out: dict[str, Any] = {"decisions": list(done or []), "rows": []}
    for d in [] if done is not None else decision_list:
        sel = _decision_members(d)
        r = mix(cell, sel, snapshots=d["snapshots"], tune_on=d["tune_on"])
        row = {**d, "vali": r["vali"], "T": r.get("T"), "c": r.get("c"),
               **test_metrics(cell, r["test_scores"], all_conventions=False)}
        small = held_out(cell, sel, snapshots=d["snapshots"]) if d["tune_on"] == "validation" else None
        if small is not None:
            row["small_vali_heldout"], row["small_vali_test"] = small
        out["decisions"].append(row)
    if chosen is None:
        return out
    run_seconds = {k[4:]: v for k, v in cell.info["seconds"].items() if k.startswith("run:")}
    for name, sel, opts in rows_for(chosen):
        r = mix(cell, sel, **opts)
        if "test_scores" not in r:
            out["rows"].append({"row": name, "n_members": 0})
            continue
        scores = r.pop("test_scores")
        tags = {m["name"].split("|t=")[0] for m in cell.meta if sel(m)}
        out["rows"].append({"row": name, **r, "train_s": float(sum(run_seconds.get(t, 0.0) for t in tags)),
                            **test_metrics(cell, scores, all_conventions=True)})
    vl, vo = cell.arrays["vali_labels"], cell.arrays["vali_offsets"]
    for name in ("lightgbm_lambdarank", "xgboost_rank_ndcg"):
        key = f"peer:{name}:test"
        if key in cell.arrays:
            vali = mean_metric(vl, cell.arrays[f"peer:{name}:vali"], vo, MEASURE, CONVENTION)
            out["rows"].append({"row": f"peer: {name}", "vali": vali,
                                "train_s": cell.info[f"peer:{name}"]["fit_seconds"],
                                **test_metrics(cell, cell.arrays[key], all_conventions=True)})
    bf = cell.info["best_feature"]
    out["rows"].append({"row": "Best single feature", "vali": bf.get("vali"), "test_ndcg@10": bf.get("test"),
                        "feature": f"{bf['sign']}{bf['feature']}"})
    return out


# ------------------------------------------------------------------------------ report
def _mean_sd(values: list[float | None]) -> tuple[float | None, float | None, int]:
    v = [x for x in values if x is not None and not (isinstance(x, float) and math.isnan(x))]
    if not v:
        return None, None, 0
    return float(np.mean(v)), (float(np.std(v, ddof=1)) if len(v) > 1 else None), len(v)


def choose(decision_cells: list[list[dict[str, Any]]]) -> dict[str, Any]:
    """The decision with the best mean validation NDCG@10 over every cell, full and 60-query
    training sets alike (a choice that holds at both sizes; ties: the first listed)."""
    table: dict[tuple[str, str, str, str], list[float]] = {}
    for cell_rows in decision_cells:
        for r in cell_rows:
            table.setdefault((r.get("members", "adaboost"), r["views"], r["snapshots"], r["tune_on"]), []).append(
                r["vali"])
    best = max(table.items(), key=lambda kv: (float(np.mean(kv[1])), -list(table).index(kv[0])))
    return {"members": best[0][0], "views": best[0][1], "snapshots": best[0][2], "tune_on": best[0][3],
            "vali_mean": float(np.mean(best[1]))}


def _fmt(mean: float | None, sd: float | None) -> str:
    if mean is None:
        return "n/a"
    return f"{mean:.4f}" + (f" ± {sd:.4f}" if sd is not None else "")


def render(summary: dict[str, Any]) -> str:
    lines = [f"# Quality over five folds: {summary.get('dataset', 'mq2008')} (bench/quality.py)", "",
             f"Command: `{summary['command']}`. Machine: {summary['machine']['processor']}, "
             f"{summary['machine']['cpu_count']} cores. Every number: mean ± sample SD over folds; NDCG@10 and "
             "ERR (`err:top=<the data's top label>`: 2 on MQ2008, 4 on MSLR) under the `yahoo` convention "
             "unless named.", "",
             "Configuration chosen on validation (mean over every fold and training size): "
             f"members `{summary['decision'].get('members', 'adaboost')}`, views `{summary['decision']['views']}`, "
             f"snapshots `{summary['decision']['snapshots']}`, "
             f"tuned on `{summary['decision']['tune_on']}`.", ""]
    for size, block in summary["sizes"].items():
        lines += [f"## Training set: {size}", "",
                  "| method | members | validation NDCG@10 | test NDCG@10 | test ERR | " + " | ".join(SIX)
                  + " | training s per fold |", "|---|---|---|---|---|" + "---|" * len(SIX) + "---|"]
        for row in block["rows"]:
            train_s = row.get("train_s", (None, None))[0]
            cells = [row["row"], str(row.get("n_members", "")), _fmt(*row["vali"]), _fmt(*row["test_ndcg@10"]),
                     _fmt(*row["test_err"])] + [_fmt(row["conv"][c][0], None) for c in SIX] + [
                     "" if train_s is None else f"{train_s:.0f}"]
            lines.append("| " + " | ".join(cells) + " |")
        lines += ["", "Configuration choices (the choice reads validation only):", "",
                  "| members | views | snapshots | tuned on | validation NDCG@10 | test NDCG@10 | T per fold | "
                  f"tuned on {SMALL_VALI} validation queries: held-out validation | and test |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for row in block["decisions"]:
            small = row.get("small_vali_heldout", (None, None))
            small_t = row.get("small_vali_test", (None, None))
            lines.append(f"| {row.get('members', 'adaboost')} | {row['views']} | {row['snapshots']} | "
                         f"{row['tune_on']} | {_fmt(*row['vali'])} | {_fmt(*row['test_ndcg@10'])} | {row['T']} | "
                         f"{_fmt(*small)} | {_fmt(*small_t)} |")
        lines.append("")
    lines += ["Training seconds per fold (2 cores, the superset of every choice: "
              f"{summary.get('seconds_note', '')}).", ""]
    return "\n".join(lines) + "\n"


def aggregate(mixed: dict[str, dict[str, Any]], sizes: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for size in sizes:
        cells = [v for k, v in mixed.items() if k.endswith(f"-{size}")]
        if not cells:
            continue
        block: dict[str, Any] = {"folds": len(cells), "rows": [], "decisions": []}
        names = [r["row"] for r in cells[0]["rows"]]
        for name in names:
            rs = [r for c in cells for r in c["rows"] if r["row"] == name]
            conv = {c: _mean_sd([r.get(f"test_ndcg@10:{c}") for r in rs]) for c in SIX}
            block["rows"].append({"row": name, "n_members": rs[0].get("n_members", ""),
                                  "vali": _mean_sd([r.get("vali") for r in rs])[:2],
                                  "test_ndcg@10": _mean_sd([r.get("test_ndcg@10") for r in rs])[:2],
                                  "test_err": _mean_sd([r.get("test_err") for r in rs])[:2],
                                  "train_s": _mean_sd([r.get("train_s") for r in rs])[:2],
                                  "per_fold_test_ndcg@10": [r.get("test_ndcg@10") for r in rs],
                                  "conv": {c: v[:2] for c, v in conv.items()}})
        for i, d in enumerate(cells[0]["decisions"]):
            rs = [c["decisions"][i] for c in cells]
            block["decisions"].append({"members": d.get("members", "adaboost"), "views": d["views"],
                                       "snapshots": d["snapshots"], "tune_on": d["tune_on"],
                                       "vali": _mean_sd([r["vali"] for r in rs])[:2],
                                       "test_ndcg@10": _mean_sd([r["test_ndcg@10"] for r in rs])[:2],
                                       "small_vali_heldout": _mean_sd([r.get("small_vali_heldout") for r in rs])[:2],
                                       "small_vali_test": _mean_sd([r.get("small_vali_test") for r in rs])[:2],
                                       "T": [r["T"] for r in rs]})
        out[size] = block
    return out


def plot(summary: dict[str, Any], path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    sizes = list(summary["sizes"])
    fig, axes = plt.subplots(1, len(sizes), figsize=(7 * len(sizes), 6), squeeze=False)
    for ax, size in zip(axes[0], sizes, strict=True):
        rows = [r for r in summary["sizes"][size]["rows"] if r["test_ndcg@10"][0] is not None]
        y = np.arange(len(rows))
        means = [r["test_ndcg@10"][0] for r in rows]
        sds = [r["test_ndcg@10"][1] or 0.0 for r in rows]
        ax.barh(y, means, xerr=sds, color="#4a7ab5")
        ax.set_yticks(y, [r["row"] for r in rows], fontsize=8)
        ax.invert_yaxis()
        lo = min(means) - 0.05
        ax.set_xlim(lo, max(m + s for m, s in zip(means, sds, strict=True)) + 0.01)
        if summary.get("dataset", "mq2008") == "mq2008":
            ax.axvline(0.790, color="#b54a4a", linestyle="--", label="paper AB+EXP 0.790")
        ax.set_xlabel("test NDCG@10 (yahoo), mean ± SD over folds")
        ax.set_title(f"{summary.get('dataset', 'mq2008')}, training set: {size}")
        if summary.get("dataset", "mq2008") == "mq2008":
            ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _mix_job(key: str, cache: Path, dlist: list[dict[str, Any]], chosen: dict[str, Any] | None,
             done: list[dict[str, Any]] | None) -> dict[str, Any]:
    cell = load_cell(key, cache)
    assert cell is not None
    return mix_cell(cell, dlist, chosen, done)


def _train_seconds(cell: Cell) -> float:
    return float(cell.info["seconds"]["boosting_s"] + cell.info["seconds"]["calibration_s"])


# -------------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.quality", description=__doc__.split("\n")[0])
    ap.add_argument("--dataset", choices=("mq2008", "mslr-sample"), default="mq2008",
                    help="mq2008 (its five folds) or mslr-sample (the MSLR-WEB10K sample cut in five query "
                         "folds, five-level labels)")
    ap.add_argument("--data", type=Path, default=None, help="the data folder (default: ../shared/data/<set>)")
    ap.add_argument("--folds", default="1,2,3,4,5")
    ap.add_argument("--sizes", default="full,60", help="training sets: 'full' and/or a number of queries")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--cache", type=Path, default=None, help="member cache (default <out>/cache)")
    ap.add_argument("--n-jobs", type=int, default=2)
    ap.add_argument("--force", action="store_true", help="retrain cells already in the cache")
    ap.add_argument("--report-only", action="store_true", help="no training: mix and render the cached cells")
    ap.add_argument("--render-only", action="store_true", help="re-render quality.md and .png from quality.json")
    ap.add_argument("--quick", action="store_true", help="100 iterations, no McRank/LambdaMART/SVM (a smoke run)")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)
    sample = args.dataset == "mslr-sample"
    if args.data is None:
        args.data = MSLR_SAMPLE if sample else MQ2008
    if args.out == OUT and sample:
        args.out = RESULTS / "quality-mslr-sample"
    needed = args.data / ("msn1.fold1.train.5k.txt" if sample else "Fold1/train.txt")
    if not needed.exists():
        print(f"bench.quality: {needed} not found (see ../shared/data/README)", file=sys.stderr)
        return 2
    if args.render_only:
        summary = json.loads((args.out / "quality.json").read_text())
        summary["sizes"] = aggregate(summary["cells"], list(summary["sizes"]))
        (args.out / "quality.json").write_text(json.dumps(summary, indent=1, default=float) + "\n")
        (args.out / "quality.md").write_text(render(summary))
        plot(summary, args.out / "quality.png")
        print((args.out / "quality.md").read_text())
        return 0
    folds = [int(f) for f in args.folds.split(",")]
    sizes = [s.strip() for s in args.sizes.split(",")]
    cache = args.cache or (args.out / "cache")
    args.out.mkdir(parents=True, exist_ok=True)
    loaded: dict[str, dict[str, Any]] = {}  # cell key -> its info (arrays stay in the cache)
    for size in sizes:
        for fold in folds:
            key = f"{args.dataset}-fold{fold}-{size}" + ("-quick" if args.quick else "")
            cell = None if args.force else load_cell(key, cache)
            if cell is None:
                if args.report_only:
                    print(f"bench.quality: {key} is not in {cache}; skipped", file=sys.stderr)
                    continue
                print(f"bench.quality: training {key} ...", file=sys.stderr, flush=True)
                sets = load_sample_fold(args.data, fold) if sample else load_fold(args.data, fold)
                if size != "full":
                    sets["train"] = subsample_queries(sets["train"], int(size), seed=fold)
                from tunemix.train.learners.label_groups import groupings_for
                from tunemix.train.train import label_count

                n_labels = label_count(sets["train"])
                cell = build_cell(key, args.data if sample else args.data / f"Fold{fold}", sets, n_jobs=args.n_jobs,
                                  quick=args.quick, progress=not args.no_progress,
                                  groupings=tuple(groupings_for(["all"], n_labels)))
                save_cell(cell, cache)
                print(f"bench.quality: {key} built in {cell.info['build_seconds']:.0f} s", file=sys.stderr, flush=True)
            loaded[key] = cell.info
            del cell
    if not loaded:
        return 1
    dlist = decisions()
    import joblib  # the mixing jobs, a cell each, load their cell from the cache themselves

    keys = list(loaded)
    jobs = joblib.Parallel(n_jobs=args.n_jobs)
    first = dict(zip(keys, jobs(joblib.delayed(_mix_job)(k, cache, dlist, None, None) for k in keys), strict=True))
    chosen = choose([v["decisions"] for v in first.values()])
    print(f"bench.quality: chosen on validation: {chosen}", file=sys.stderr)
    mixed = dict(zip(keys, jobs(joblib.delayed(_mix_job)(k, cache, dlist, chosen, first[k]["decisions"])
                                for k in keys), strict=True))
    cells = {k: Cell(key=k, meta=[], arrays={}, info=v) for k, v in loaded.items()}
    size_keys = [s + ("-quick" if args.quick else "") for s in sizes]
    summary = {"benchmark": "quality", "machine": machine_info(),
               "command": "python -m bench.quality " + " ".join(argv if argv is not None else sys.argv[1:]),
               "dataset": args.dataset, "decision": chosen, "folds": folds,
               "sizes": aggregate(mixed, size_keys),
               "cells": {k: {"info": c.info, "rows": mixed[k]["rows"],
                             "decisions": mixed[k]["decisions"]} for k, c in cells.items()},
               "seconds_note": ", ".join(f"{k}: {_train_seconds(c):.0f} s" for k, c in cells.items())}
    (args.out / "quality.json").write_text(json.dumps(summary, indent=1, default=float) + "\n")
    (args.out / "quality.md").write_text(render(summary))
    plot(summary, args.out / "quality.png")
    print((args.out / "quality.md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
