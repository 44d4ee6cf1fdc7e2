"""The typed training configuration (``tunemix train --config CONFIG.toml``).

Every numeric default of the trainer lives here, once. The configuration as resolved (defaults
filled in) is copied verbatim into the artifact's manifest, so a model records exactly how it
was made. Example (see ``configs/`` for complete files)::

    name = "mq2008"
    seed = 0

    [data]
    train = "../shared/data/MQ2008/Fold1/train.txt"
    vali  = "../shared/data/MQ2008/Fold1/vali.txt"
    test  = "../shared/data/MQ2008/Fold1/test.txt"
    feature_names = "names.txt"   # optional: one name per line, or a list; default f1, f2, ...
    missing = "zero"              # a feature a line omits: "zero" (0) or "nan" (a missing value)

    [members]
    views = ["raw", "raw+std"]
    label_groupings = ["original", "binary"]   # or ["all"]: every grouping of the data's label count
    calibrators = ["shift", "cpc:ls", "rbc:linear:gain"]

    [[members.adaboost]]           # list values expand into a grid
    base = "tree"
    n_leaves = [8, 64]
    n_iterations = 1000
    checkpoints = [10, 30, 100, 300, 1000]

    # further member types (tunemix.train.members.types). A config without any member table
    # trains the default members, chosen from the data (tunemix.train.members.auto)
    [[members.mcrank]]             # LightGBM; variant multiclass or ordinal
    variant = ["multiclass", "ordinal"]
    n_leaves = [8, 32]
    n_iterations = 300
    checkpoints = [30, 100, 300]
    [[members.lambdamart]]         # LightGBM lambdarank, one score
    n_leaves = 16
    n_iterations = 300
    [[members.svm]]                # Crammer-Singer; the paper's C, liblinear gets C / n
    views = ["raw"]                # any block: its runs on these views / label groupings only
    C = [1e-3, 1e-1, 10.0]
    # and, under [members]: best_feature = true

    [mixer]
    name = "exp_forecaster"
    measure = "ndcg@10"
    convention = "yahoo"
    snapshots = "all"           # or "tune": one iteration count T for every run, chosen with c
    tune_on = "validation"      # or "calibration": where c, omega_min (and T) are chosen

    [run]
    backend = "loky"
    n_jobs = 2

    [relevance]                 # the relevance head (what the scores mean); these are the defaults
    enabled = true
    n_leaves = [4, 7, 15, 31]
    min_data_in_leaf = [20, 50, 100]
"""

from __future__ import annotations

import copy
import dataclasses
import os
import tomllib
import types
import typing
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from tunemix.core.calibration.registry import DEFAULT_CALIBRATORS
from tunemix.core.data.normalization import VIEWS
from tunemix.train.members.names import name_problem

BACKENDS = ("loky", "threads", "dask", "ray", "sequential")
DEFAULT_CHECKPOINTS = [10, 30, 100, 300, 1000]
DEFAULT_COMPARE = ["one_best", "uniform", "rrf", "combsum", "combmnz", "condorcet"]


class ConfigError(ValueError):
    """The training configuration is invalid; the message names the key."""


@dataclass
class SyntheticData:
    queries: list[int] = field(default_factory=lambda: [300, 100, 100])  # train, vali, test
    docs_per_query: list[int] = field(default_factory=lambda: [20, 60])  # [n] or [lo, hi]
    features: int = 30
    levels: int = 5
    noise: float = 0.3
    seed: int = 0

    def make(self) -> dict[str, Any]:
        """The train / vali / test :class:`RankingData` this table describes."""
        from tunemix.train.data.synthetic import make_synthetic_splits

        if len(self.queries) != 3:
            raise ConfigError(f"[data.synthetic] queries needs 3 numbers (train, vali, test), got {self.queries}")
        if len(self.docs_per_query) not in (1, 2):
            raise ConfigError(f"[data.synthetic] docs_per_query must be [n] or [lo, hi], got {self.docs_per_query}")
        return make_synthetic_splits(
            n_queries=dict(zip(("train", "vali", "test"), self.queries, strict=True)),
            docs_per_query=(int(self.docs_per_query[0]), int(self.docs_per_query[-1])),
            n_features=self.features, n_levels=self.levels, noise=self.noise, seed=self.seed,
        )


@dataclass
class DataConfig:
    train: str | None = None
    vali: str | None = None
    test: str | None = None
    synthetic: SyntheticData | None = None
    # the features' names (explanations, the report, /models): a list, or a file of one name per
    # line (relative to the TOML); None: f1, f2, ... (LETOR's numbering)
    feature_names: list[str] | str | None = None
    # what a feature a line of the files omits is: "zero" (0, LETOR's rule) or "nan" (a missing
    # value, docs/missing-values.md)
    missing: str = "zero"


def read_feature_names(d: DataConfig) -> list[str] | None:
    """``[data] feature_names`` read and checked name by name (``tunemix.train.members.names``:
    1-200 printable characters, no repeats), or None when not given; ConfigError naming the file
    and line (or list index) of a bad name. Called when the configuration is read, so a name
    that cannot be written is refused before any training."""
    spec = d.feature_names
    if spec is None:
        return None
    where = "[data] feature_names"
    if isinstance(spec, str):
        try:
            lines = Path(spec).read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{where}: cannot read {spec}: {exc}") from None
        while lines and not lines[-1].strip():
            lines.pop()
        names, places = [ln.strip() for ln in lines], [f"{spec}, line {i + 1}" for i in range(len(lines))]
    else:
        names, places = list(spec), [f"{where}[{i}]" for i in range(len(spec))]
    seen: dict[str, str] = {}
    for name, place in zip(names, places, strict=True):
        problem = name_problem(name)
        _require(problem is None, f"{place}: {problem}: {name!r}")
        _require(name not in seen, f"{place}: feature name {name!r} repeats {seen.get(name)}")
        seen[name] = place
    return names


def resolve_feature_names(d: DataConfig, n_features: int) -> list[str]:
    """The names of the ``n_features`` columns: ``[data] feature_names`` (a list, or a file of one
    name per line; :func:`read_feature_names`) or f1, f2, ..."""
    names = read_feature_names(d)
    if names is None:
        return [f"f{j + 1}" for j in range(n_features)]
    _require(len(names) == n_features, f"[data] feature_names: {len(names)} names for {n_features} features")
    return names


@dataclass
class MembersConfig:
    views: list[str] = field(default_factory=lambda: ["raw", "raw+std"])
    label_groupings: list[str] = field(default_factory=lambda: ["original", "binary"])
    calibrators: list[str] = field(default_factory=lambda: list(DEFAULT_CALIBRATORS))
    # member tables (tunemix.train.members.types): none given = the default members, chosen
    # from the data (tunemix.train.members.auto)
    adaboost: list[dict[str, Any]] = field(default_factory=list)
    mcrank: list[dict[str, Any]] = field(default_factory=list)
    lambdamart: list[dict[str, Any]] = field(default_factory=list)
    svm: list[dict[str, Any]] = field(default_factory=list)
    best_feature: bool = False


@dataclass
class MixerConfig:
    name: str = "exp_forecaster"
    measure: str = "ndcg@10"
    convention: str = "yahoo"
    rescale: str | None = "auto"  # "auto": the mode best on validation; or one of RESCALE_MODES
    compare: list[str] = field(default_factory=lambda: list(DEFAULT_COMPARE))
    # "all": every snapshot is a member (the weights decide); "tune": the paper's protocol, one
    # iteration count T for every boosted run (a run with fewer uses its last), chosen with c
    snapshots: str = "all"
    # where c and omega_min are tuned: the validation queries (tune and mix sects. 6, 7.3) or the
    # calibration part (sect. 7.2; the calibrators were fitted there)
    tune_on: str = "validation"
    # grid points within this of the best are ties (the simpler wins): a number, or "one_se" (the
    # standard error of the best point's validation mean: the one-standard-error rule)
    tie_tolerance: float | str = 1e-4
    # how the forecaster's grid point (and rescaling mode, T) is chosen: "validation" (best on the
    # tuning queries) or "cv" (best cross-validated over them: docs/method.md, the mix's choice)
    selection: str = "validation"


@dataclass
class RunConfig:
    backend: str = "threads"
    n_jobs: int = 2
    scheduler: str | None = None
    time_budget_s: float | None = None
    # under a time budget, the default members' boosting time left goes to a search of
    # LambdaMART runs, mixed with the default members where that is measured to help
    # (tunemix.train.search, tunemix.train.budget_choice); false: no search
    search: bool = True
    models_dir: str = "models"
    calibration_fraction: float = 0.2
    report_plots: bool = True


@dataclass
class RelevanceConfig:
    """``[relevance]``: the relevance head (``tunemix.core.scoring.relevance_head``). Its models are
    McRank multiclass models, one per (n_leaves, min_data_in_leaf) pair, each stopped early on
    the validation queries' log loss; the head averages the probabilities of those within
    ``keep_within`` of the best validation log loss."""

    enabled: bool = True
    n_leaves: list[int] = field(default_factory=lambda: [4, 7, 15, 31])
    min_data_in_leaf: list[int] = field(default_factory=lambda: [20, 50, 100])
    learning_rate: float = 0.05
    max_iterations: int = 1000
    patience: int = 50
    # models whose validation log loss is more than this (relative) above the best one's are left
    # out (on small data the large-leaf models barely learn)
    keep_within: float = 0.02
    # each tree sees this share of the features, each iteration this share of the documents: the
    # models differ more and their average is better (measured: python -m bench.bench_relevance)
    feature_fraction: float = 0.7
    bagging_fraction: float = 0.8
    # McRank multiclass members trained on the whole training set and stopped early on the
    # validation log loss (the default members) are models of the same kind: the head takes them
    # as models of its own (kept by the same keep_within rule) instead of training them again
    reuse_members: bool = True


@dataclass
class TrainConfig:
    name: str = "default"
    seed: int = 0
    data: DataConfig = field(default_factory=DataConfig)
    members: MembersConfig = field(default_factory=MembersConfig)
    mixer: MixerConfig = field(default_factory=MixerConfig)
    run: RunConfig = field(default_factory=RunConfig)
    relevance: RelevanceConfig = field(default_factory=RelevanceConfig)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    # ------------------------------------------------------------------ grid
    def adaboost_grid(self) -> list[dict[str, Any]]:
        """Every AdaBoost.MH parameter set: list values in a [[members.adaboost]] block expand
        into their Cartesian product (``checkpoints`` is a list by nature and never expands)."""
        from tunemix.train.members.types import get_member_type

        return get_member_type("adaboost").grid(self)


def _type_name(hint: Any) -> str:
    """``int``, ``list of str``, ``number or null`` ...: a TOML user's words for a field's type."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (types.UnionType, typing.Union):
        return " or ".join(_type_name(a) for a in args)
    if origin is list:
        return f"list of {_type_name(args[0])}" if args else "list"
    if origin is dict or hint is dict:
        return "table"
    if hint is type(None):
        return "null (leave it out)"
    if hint is float:
        return "number"
    return getattr(hint, "__name__", str(hint))


def _fits(value: Any, hint: Any) -> bool:
    """Whether a TOML value fits a field's annotation (an int is a float; a bool is no number)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return True
    if origin in (types.UnionType, typing.Union):
        return any(_fits(value, a) for a in args)
    if hint is type(None):
        return value is None
    if origin is list:
        return isinstance(value, list) and (not args or all(_fits(v, args[0]) for v in value))
    if origin is dict or hint is dict:
        return isinstance(value, dict)
    if hint is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if isinstance(hint, type):
        return isinstance(value, hint) or (dataclasses.is_dataclass(hint) and isinstance(value, dict))
    return True


def _build(cls: type, raw: Any, where: str, source: str = "config") -> Any:
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: [{where}] must be a table")
    known = {f.name: f for f in fields(cls)}
    unknown = sorted(set(raw) - set(known))
    if unknown:
        raise ConfigError(f"{source}: unknown key(s) in [{where or 'top level'}]: {', '.join(unknown)}; "
                          f"known: {', '.join(sorted(known))}")
    hints = typing.get_type_hints(cls)
    kwargs = {}
    nested = {"data": DataConfig, "members": MembersConfig, "mixer": MixerConfig, "run": RunConfig,
              "relevance": RelevanceConfig, "synthetic": SyntheticData}
    for key, value in raw.items():
        if key in nested and isinstance(value, dict):
            kwargs[key] = _build(nested[key], value, f"{where}.{key}" if where else key, source)
            continue
        if not _fits(value, hints[key]):
            table = f"[{where}] " if where else ""
            raise ConfigError(f"{source}: {table}{key} must be {_type_name(hints[key])}, "
                              f"got {type(value).__name__} {value!r}")
        kwargs[key] = value
    return cls(**kwargs)


def _require(cond: bool, message: str) -> None:
    if not cond:
        raise ConfigError(message)


def validate(cfg: TrainConfig, *, require_data: bool = True) -> TrainConfig:
    """Check the values a run depends on before any work starts (``require_data`` False: the
    data come in memory, ``tunemix.TuneMixRanker.fit``)."""
    from tunemix.core.artifact import check_name
    from tunemix.core.evaluation import CONVENTIONS, Measure

    try:
        check_name(cfg.name)
    except ValueError as exc:
        raise ConfigError(f"name: {exc}") from None
    d = cfg.data
    _require(not require_data or d.synthetic is not None or d.train is not None,
             "[data] needs train (a file) or a [data.synthetic] table")
    _require(not (d.synthetic is not None and d.train is not None), "[data]: give train files or synthetic, not both")
    if d.synthetic is not None:
        _require(len(d.synthetic.queries) == 3, "[data.synthetic] queries needs 3 numbers (train, vali, test)")
        _require(len(d.synthetic.docs_per_query) in (1, 2), "[data.synthetic] docs_per_query must be [n] or [lo, hi]")
    if d.train is not None:
        _require(d.vali is not None, "[data] vali is required with train (the mixer is tuned on it)")
    _require(d.missing in ("zero", "nan"), f"[data] missing must be \"zero\" or \"nan\", got {d.missing!r}")
    read_feature_names(d)  # every name checked now, the count once the data are read
    m = cfg.members
    for v in m.views:
        _require(v in VIEWS, f"[members] views: unknown view {v!r}; expected one of {', '.join(VIEWS)}")
    _require(bool(m.views), "[members] views must not be empty")
    _require(bool(m.calibrators), "[members] calibrators must not be empty")
    from tunemix.train.members.types import member_types

    types = member_types()
    for name, mt in types.items():
        for i, block in enumerate(mt.blocks(cfg)):
            _require(isinstance(block, dict), f"[[members.{name}]] #{i + 1} must be a table")
            unknown = sorted(set(block) - mt.keys - {"views", "label_groupings"})
            _require(not unknown, f"[[members.{name}]] #{i + 1}: unknown key(s) {', '.join(unknown)}; "
                                  f"known: {', '.join(sorted(mt.keys | {'views', 'label_groupings'}))}")
            for key in ("views", "label_groupings"):
                if key in block:
                    _require(isinstance(block[key], list) and bool(block[key])
                             and all(isinstance(v, str) for v in block[key]),
                             f"[[members.{name}]] #{i + 1}: {key} must be a non-empty list of names")
            _require("all" not in block.get("label_groupings", []),
                     f"[[members.{name}]] #{i + 1}: label_groupings = ['all'] is for [members] only")
            _require(block.get("fit_on", "fit") in ("fit", "train"),
                     f"[[members.{name}]] #{i + 1}: fit_on must be 'fit' (the fit part) or 'train' (the whole "
                     f"training set), got {block.get('fit_on')!r}")
            stop = block.get("early_stopping", 0)
            _require(isinstance(stop, int) and not isinstance(stop, bool) and stop >= 0,
                     f"[[members.{name}]] #{i + 1}: early_stopping must be a whole number of iterations >= 0 "
                     f"(0: off), got {stop!r}")
            for v in block.get("views", []):
                _require(v in VIEWS, f"[[members.{name}]] #{i + 1}: unknown view {v!r}; expected one of "
                                     f"{', '.join(VIEWS)}")
    _require(cfg.mixer.convention in CONVENTIONS,
             f"[mixer] convention {cfg.mixer.convention!r} is not one of {', '.join(CONVENTIONS)}")
    try:
        Measure.parse(cfg.mixer.measure)
    except ValueError as exc:
        raise ConfigError(f"[mixer] measure: {exc}") from None
    from tunemix.core.ensemble.member_rescaling import RESCALE_MODES

    _require(cfg.mixer.rescale in (None, "auto", *RESCALE_MODES),
             f"[mixer] rescale {cfg.mixer.rescale!r} is not 'auto' or one of {', '.join(RESCALE_MODES)}")
    _require(cfg.mixer.snapshots in ("all", "tune"),
             f"[mixer] snapshots {cfg.mixer.snapshots!r} is not 'all' or 'tune'")
    _require(cfg.mixer.tune_on in ("validation", "calibration"),
             f"[mixer] tune_on {cfg.mixer.tune_on!r} is not 'validation' or 'calibration'")
    tt = cfg.mixer.tie_tolerance
    _require(tt == "one_se" or (isinstance(tt, int | float) and not isinstance(tt, bool) and tt >= 0),
             f"[mixer] tie_tolerance {tt!r} is not a number >= 0 or 'one_se'")
    _require(cfg.mixer.selection in ("validation", "cv"),
             f"[mixer] selection {cfg.mixer.selection!r} is not 'validation' or 'cv'")
    _require(cfg.mixer.snapshots == "all" or cfg.mixer.name == "exp_forecaster",
             "[mixer] snapshots = 'tune' needs the exp_forecaster mixer")
    r = cfg.run
    _require(r.backend in BACKENDS, f"[run] backend {r.backend!r} is not one of {', '.join(BACKENDS)}")
    _require(r.n_jobs >= 1, "[run] n_jobs must be at least 1")
    _require(0.0 < r.calibration_fraction < 1.0, "[run] calibration_fraction must be in (0, 1)")
    _require(r.time_budget_s is None or r.time_budget_s > 0, "[run] time_budget_s must be positive")
    h = cfg.relevance
    _require((bool(h.n_leaves) or h.reuse_members) and all(v >= 2 for v in h.n_leaves),
             "[relevance] n_leaves must be a list of integers >= 2 (empty only with reuse_members = true)")
    _require((bool(h.min_data_in_leaf) or h.reuse_members) and all(v >= 1 for v in h.min_data_in_leaf),
             "[relevance] min_data_in_leaf must be a list of integers >= 1 (empty only with reuse_members = true)")
    _require(0.0 < h.learning_rate <= 1.0, "[relevance] learning_rate must be in (0, 1]")
    _require(h.max_iterations >= 1, "[relevance] max_iterations must be at least 1")
    _require(h.patience >= 1, "[relevance] patience must be at least 1")
    _require(h.keep_within >= 0, "[relevance] keep_within must be >= 0")
    _require(0 < h.feature_fraction <= 1 and 0 < h.bagging_fraction <= 1,
             "[relevance] feature_fraction and bagging_fraction must be in (0, 1]")
    return cfg


#: the placeholder a configuration's data paths may start with (configs/mq2008.toml)
SHARED_DATA_VARIABLE = "${TUNEMIX_SHARED_DATA}"


def shared_data_dir() -> Path:
    """Where the benchmark data (MQ2008, the MSLR sample) are expected: ``TUNEMIX_SHARED_DATA``,
    else ``shared/data`` beside the repository (``../shared/data`` from its root)."""
    env = os.environ.get("TUNEMIX_SHARED_DATA", "").strip()
    return Path(env) if env else Path(__file__).resolve().parents[2].parent / "shared" / "data"


def missing_data_message(path: str | Path, what: str) -> str:
    """``what`` (``[data] train``) names a file that does not exist: say where data are expected."""
    return (f"{what} = {path}: no such file. The MQ2008 folds and the MSLR sample are expected under "
            f"{shared_data_dir()} (shared/data beside the repository; set TUNEMIX_SHARED_DATA to their folder), "
            "or name your own files (tunemix train --train/--vali/--test), or train on generated data "
            "(tunemix demo)")


def load_config(path: str | Path | None = None, overrides: dict[str, Any] | None = None, *,
                tables: dict[str, Any] | None = None, require_data: bool = True) -> TrainConfig:
    """Read a TOML file (or take ``tables``, the file's tables as a dict, or start from defaults),
    apply dotted ``overrides``, validate."""
    raw: dict[str, Any] = copy.deepcopy(tables) if tables is not None else {}
    if path is not None:
        p = Path(path)
        try:
            raw = tomllib.loads(p.read_text())
        except FileNotFoundError:
            raise FileNotFoundError(f"{p}: no such config file") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{p}: {exc}") from None
        # ${TUNEMIX_SHARED_DATA} in a data path: the shared data folder; other relative data
        # paths are relative to the config file
        data = raw.get("data")
        if isinstance(data, dict):
            for key in ("train", "vali", "test", "feature_names"):
                if isinstance(data.get(key), str) and SHARED_DATA_VARIABLE in data[key]:
                    data[key] = data[key].replace(SHARED_DATA_VARIABLE, str(shared_data_dir()))
                if isinstance(data.get(key), str) and not Path(data[key]).is_absolute():
                    candidate = p.parent / data[key]
                    if candidate.exists() or not Path(data[key]).exists():
                        data[key] = str(candidate)
    for dotted, value in (overrides or {}).items():
        if value is None:
            continue
        node = raw
        parts = dotted.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    try:
        cfg = _build(TrainConfig, raw, "", str(path) if path is not None else "config")
    except TypeError as exc:
        raise ConfigError(str(exc)) from None
    return validate(cfg, require_data=require_data)
