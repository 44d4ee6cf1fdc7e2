"""Member types: one interface for every kind of learner in the mix, and their registry.

A *run* is one fit of one member type (feature view x label grouping x learner parameters) on
the fit part; its snapshots times the calibrators are the *members* of the ensemble (Tune and
mix, Sects. 4-6). Every member type knows how to

- expand its grid (:meth:`MemberType.grid`, from its ``[[members.<type>]]`` blocks),
- fit one run on the fit part (:meth:`MemberType.fit`, runs in a worker process),
- export its raw K-vector scores at every snapshot (:meth:`MemberType.raw_scores`), and its
  serving form: a :class:`~tunemix.core.scoring.forest.FlatForest` (trees, stumps, products; a
  snapshot of t bases has raw scores ``S[t] - S[0]``, the forest's running sums) or a linear
  map (``RunResult.linear``: weights, intercept, standardisation; raw scores
  ``((x - mean) / scale) @ W + b``),
- name the calibrators its snapshots get (:meth:`MemberType.calibrators`).

``MEMBER_TYPES`` maps a type's name (its key under ``[members]``) to its single instance. The
functions here are top-level and take plain arrays so that joblib can ship them to worker
processes (loky), a dask cluster or ray.
"""

from __future__ import annotations

import importlib
import itertools
import logging
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

import numpy as np

from tunemix.core.calibration.base import CalibrationError
from tunemix.core.calibration.registry import make_calibrator
from tunemix.core.scoring.forest import FlatForest, score_forest


class TrainConfig(Protocol):
    """What this registry reads of a training configuration (``tunemix.train.config`` defines
    it; a structural type here, so that the two modules do not import each other)."""

    @property
    def members(self) -> Any: ...

log = logging.getLogger(__name__)

#: member types whose runs train with LightGBM (its import comes before their runs; the
#: relevance head's own models train beside them: ``tunemix.train.relevance.beside``)
LIGHTGBM_TYPES = ("lambdamart", "mcrank")


@dataclass(frozen=True)
class RunSpec:
    """What one run trains on and with."""

    index: int
    view: str
    grouping: str
    params: dict[str, Any]
    type: str = "adaboost"

    @property
    def learner_tag(self) -> str:
        return get_member_type(self.type).learner_tag(self.params)

    @property
    def tag(self) -> str:
        return f"{self.view}|{self.grouping}|{self.learner_tag}"


@dataclass
class RunResult:
    """A fitted run in plain arrays (picklable, no learner object).

    ``checkpoints[s]`` is snapshot s's size in bases of ``forest`` (a forest run) or 0 (a
    linear run, one snapshot); ``snapshot_iterations[s]`` is the iteration count shown in the
    member's name; ``shift_scales[s]`` is the member's natural bound R for the ``shift``
    calibrator (None: max |f| on the calibration part). ``n_outputs`` is the number of raw
    columns a member has (K, or K-1 for cumulative models, 1 for a single score).
    """

    spec: RunSpec
    n_outputs: int
    n_classes: int
    class_gains: np.ndarray
    checkpoints: list[int]
    snapshot_iterations: list[int]
    shift_scales: list[float | None]
    n_iterations: int
    n_bases: int
    stop_reason: str
    fit_seconds: float
    train_error: float
    forest: dict[str, np.ndarray] | None = None
    linear: dict[str, np.ndarray] | None = None
    #: the validation loss the run stopped early on (McRank multiclass: log loss), else None
    validation_loss: float | None = None


class MemberType(ABC):
    """One kind of member (see the module docstring)."""

    #: the type's key under ``[members]`` and in member names
    name: ClassVar[str]
    #: parameters of a ``[[members.<name>]]`` block that hold lists by nature (never expanded)
    list_keys: ClassVar[frozenset[str]] = frozenset({"checkpoints"})
    #: keys a block may contain
    keys: ClassVar[frozenset[str]] = frozenset()
    #: ``n_iterations`` of a run that does not set it (0: the type does not iterate)
    default_iterations: ClassVar[int] = 0
    #: the type's learner reads the shared codes of its view (``tunemix.train.data.binned``) instead of
    #: a float matrix, unless a run sets its own ``n_bins``
    reads_codes: ClassVar[bool] = False

    def reads_codes_of(self, spec: RunSpec) -> bool:
        """Whether ``spec``'s run trains on the shared codes of its view."""
        return self.reads_codes and "n_bins" not in spec.params

    def blocks(self, cfg: TrainConfig) -> list[dict[str, Any]]:
        """The type's ``[[members.<name>]]`` blocks."""
        return list(getattr(cfg.members, self.name))

    def grid(self, cfg: TrainConfig) -> list[dict[str, Any]]:
        """Every parameter set: list values in a block expand into their Cartesian product
        (a block's ``views`` and ``label_groupings``, which scope its runs, are not parameters)."""
        return [p for p, _ in self.scoped_grid(cfg)]

    def scoped_grid(self, cfg: TrainConfig) -> list[tuple[dict[str, Any], dict[str, list[str]]]]:
        """Every parameter set with its block's scope: the ``views`` and ``label_groupings`` it
        lists (absent: [members]' own)."""
        out = []
        for block in self.blocks(cfg):
            inner = {k: v for k, v in block.items() if k not in SCOPE_KEYS}
            scope = {k: list(block[k]) for k in SCOPE_KEYS if k in block}
            out += [(p, scope) for p in expand_blocks([inner], self.list_keys)]
        return out

    def views(self, cfg: TrainConfig) -> list[str]:
        return list(dict.fromkeys(cfg.members.views))

    def groupings(self, cfg: TrainConfig) -> list[str]:
        return list(cfg.members.label_groupings)

    def specs(self, cfg: TrainConfig, start: int) -> list[RunSpec]:
        """The type's runs, numbered from ``start``: views x groupings x grid, in that order; a
        block with ``views`` or ``label_groupings`` of its own runs on those only."""
        own_views, own_groupings = self.views(cfg), self.groupings(cfg)
        scoped = [(p, sc.get("views", own_views), sc.get("label_groupings", own_groupings))
                  for p, sc in self.scoped_grid(cfg)]
        views = list(dict.fromkeys([*own_views, *(v for _, vs, _ in scoped for v in vs)]))
        groupings = list(dict.fromkeys([*own_groupings, *(g for _, _, gs in scoped for g in gs)]))
        combos = [(v, g, p) for v in views for g in groupings for p, vs, gs in scoped if v in vs and g in gs]
        return [RunSpec(index=start + i, view=v, grouping=g, params=p, type=self.name)
                for i, (v, g, p) in enumerate(combos)]

    def iterations(self, params: dict[str, Any]) -> int:
        """Iterations a run reports to the progress bar (0: none)."""
        return int(params.get("n_iterations", self.default_iterations)) if self.default_iterations else 0

    @abstractmethod
    def learner_tag(self, params: dict[str, Any]) -> str:
        """Short name of the learner in run tags and member names."""

    @abstractmethod
    def fit(self, spec: RunSpec, features: np.ndarray, labels: np.ndarray, query_offsets: np.ndarray,
            n_labels: int, seed: int,
            time_budget_s: float | None, progress_queue: Any = None,
            eval_set: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None) -> RunResult:
        """Fit one run on the fit part, or on the whole training set (``fit_on = "train"``);
        features already in the run's view. ``eval_set`` (features in the same view, labels,
        query offsets: the validation queries) is passed to runs that stop early on it."""

    def calibrators(self, configured: list[str], result: RunResult) -> list[str]:
        """Calibrator specs of this run's snapshots (default: the configured pool)."""
        return list(configured)

    def serving_form(self, result: RunResult) -> FlatForest | dict[str, np.ndarray]:
        """What the artifact stores for the run: its forest or its linear map."""
        if result.forest is not None:
            return FlatForest.from_arrays(result.forest)
        assert result.linear is not None
        return result.linear

    def raw_scores(self, result: RunResult, features: np.ndarray) -> np.ndarray:
        """Raw scores of every snapshot, (n, n_snapshots, n_outputs)."""
        form = self.serving_form(result)
        if isinstance(form, FlatForest):
            return score_forest(form, features, np.asarray(result.checkpoints, dtype=np.int64))
        return linear_scores(form, features)[:, None, :]


def linear_scores(linear: dict[str, np.ndarray], features: np.ndarray) -> np.ndarray:
    """``((x - mean) / scale) @ weights + intercept``, (n, K), in float64; a missing value's term is
    the run's ``missing`` row (0 without one), as ``EnsembleModel.linear_terms`` serves it."""
    x = (np.asarray(features, dtype=np.float64) - linear["mean"]) / linear["scale"]
    nan = np.isnan(x)
    if not nan.any():
        return np.ascontiguousarray(x @ linear["weights"] + linear["intercept"])
    x[nan] = 0.0
    missing = linear.get("missing", np.zeros_like(linear["weights"]))
    return np.ascontiguousarray(x @ linear["weights"] + nan.astype(np.float64) @ missing + linear["intercept"])


#: keys of any ``[[members.<type>]]`` block that scope its runs instead of parametrising them
SCOPE_KEYS = ("views", "label_groupings")


def expand_blocks(blocks: list[dict[str, Any]], list_keys: frozenset[str]) -> list[dict[str, Any]]:
    """List values in each block expand into their Cartesian product (keys in ``list_keys`` hold
    lists by nature and never expand)."""
    out: list[dict[str, Any]] = []
    for block in blocks:
        keys = sorted(block)
        axes = [block[k] if isinstance(block[k], list) and k not in list_keys else [block[k]] for k in keys]
        for combo in itertools.product(*axes):
            out.append(dict(zip(keys, combo, strict=True)))
    return out


# ------------------------------------------------------------------------------ registry
#: modules that define member types, imported on first use (they import the learners)
_TYPE_MODULES = ("tunemix.train.members.adaboost", "tunemix.train.members.lightgbm_members",
                 "tunemix.train.members.linear")
MEMBER_TYPES: dict[str, MemberType] = {}


def register(cls: type[MemberType]) -> type[MemberType]:
    """Class decorator: add the member type's instance to ``MEMBER_TYPES``."""
    MEMBER_TYPES[cls.name] = cls()
    return cls


def member_types() -> dict[str, MemberType]:
    """Every registered member type, in registration order (AdaBoost.MH first)."""
    for module in _TYPE_MODULES:
        importlib.import_module(module)
    return MEMBER_TYPES


def get_member_type(name: str) -> MemberType:
    types = member_types()
    if name not in types:
        raise ValueError(f"unknown member type {name!r}; expected one of {', '.join(types)}")
    return types[name]


def run_specs(cfg: TrainConfig) -> list[RunSpec]:
    """Every run of every member type, numbered in registry order."""
    specs: list[RunSpec] = []
    for mt in member_types().values():
        specs += mt.specs(cfg, len(specs))
    return specs


def fit_run(spec: RunSpec, features: np.ndarray, labels: np.ndarray, query_offsets: np.ndarray,
            eval_features: np.ndarray | None, eval_labels: np.ndarray | None, eval_offsets: np.ndarray | None,
            n_labels: int, seed: int, time_budget_s: float | None, progress_queue: Any = None) -> RunResult:
    """Fit one run of any type (a top-level function joblib can ship). The validation arrays come
    one by one, not as a tuple, so that a distributed backend ships each array object once;
    ``eval_features`` None: the run does not stop early."""
    eval_set = None
    if eval_features is not None and eval_labels is not None and eval_offsets is not None:
        eval_set = (eval_features, eval_labels, eval_offsets)
    return get_member_type(spec.type).fit(spec, features, labels, query_offsets, n_labels, seed, time_budget_s,
                                          progress_queue, eval_set=eval_set)


# ------------------------------------------------------------------------------ calibration
@dataclass
class CalibrationResult:
    """Fitted calibrators of one snapshot (failures recorded, never raised)."""

    run: int
    iterations: int
    fitted: list[Any] = field(default_factory=list)  # Calibrator objects
    failed: list[dict[str, str]] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)
    snapshot: int = 0  # index into the run's checkpoints


def calibrate_snapshot(run: int, iterations: int, raw: np.ndarray, classes: np.ndarray,
                       query_offsets: np.ndarray, gains: np.ndarray, specs: list[str],
                       shift_scale: float | None, snapshot: int = 0,
                       doc_gains: np.ndarray | None = None) -> CalibrationResult:
    """Fit every calibrator in ``specs`` on one snapshot's raw scores of the calibration part;
    ``doc_gains`` are the documents' own gains 2^l - 1 (the regression and SNDCG targets, also
    under a label grouping)."""
    out = CalibrationResult(run=run, iterations=iterations, snapshot=snapshot)
    for spec in specs:
        t0 = time.perf_counter()
        try:
            cal = make_calibrator(spec, shift_scale=shift_scale)
            cal.fit(raw, classes, query_offsets, gains, doc_gains=doc_gains)
            probe = cal.transform(raw[: min(len(raw), 64)])
            if not np.all(np.isfinite(probe)):
                raise CalibrationError("non-finite output on the calibration part")
            out.fitted.append(cal)
        except (CalibrationError, ValueError, FloatingPointError, np.linalg.LinAlgError) as exc:
            out.failed.append({"calibrator": spec, "error": f"{type(exc).__name__}: {exc}"})
            log.warning("run %d snapshot %d: calibrator %s dropped (%s)", run, iterations, spec, exc)
        out.seconds[spec] = time.perf_counter() - t0
    return out
