"""A time budget is never worse than no budget: the default's model stays a candidate, the search's
mixes replace it only on evidence beyond the noise of the validation queries, and the search goes
on only while it is measured to help.

Under a time budget the default members train first, as without one (sized to the budget only
when it is too small for them: ``tunemix.train.members.auto``), and their mix is the first
candidate: the default's model. The search of "tune, then mix" (``tunemix.train.search``) then
runs in rounds, and after each round the mix of every member so far is a candidate:

- **Round r's time.** The first round lasts at most ``FIRST_ROUND_SHARE`` (0.5) of the default's
  boosting stage (its seconds on the fit's clock, D): its runs start only while the time left to
  the round's end buys ``tunemix.train.search.MIN_ITERATIONS`` of their iterations (the search's
  cost model), are capped to it and stop at it, as the search's runs do at the boosting end
  (``FitBudget.within``). Round r lasts at most 2^(r-1) x 0.5 D. Every round also ends at the
  boosting stage's end, and all rounds together at ``tunemix.train.search.MAX_RUNS`` runs.
- **The candidates.** C_0, the default's members mixed as the fit mixes them
  (``tunemix.train.mixing.fit_mixer``: every rescaling mode, the forecaster's own tie rule), then
  C_r, the default's members and the runs of rounds 1 to r, mixed the same way. Each is scored
  on the validation queries: q_r, its mean NDCG@10 (the mixer's measure) over them.
- **The choice: the one-standard-error rule** (Breiman et al. 1984; the rule of
  ``[mixer] tie_tolerance = "one_se"``, ``tunemix.core.ensemble.exponential_forecaster.
  one_standard_error``): with b the candidate of the best q, SE the standard error of b's mean
  (per-query SD / sqrt(queries)), the fit keeps the first candidate, in the order C_0, C_1, ...,
  whose q is at least q_b - SE. The default's model is replaced only by a mix better than it by
  more than one standard error of the validation mean, and a later round's by one better than
  the earlier candidates by as much.
- **When the search stops.** After round r, unless the kept candidate is C_r (the round's runs
  are measured to help); and at the boosting end or the last configuration. So a budget far above
  what the default needs costs the default's fit, one round of at most half its boosting stage
  (and the last iteration of the runs the round's end stops), that round's calibration and two
  mixes, unless the first round beats the default by more than a standard error; the runs of
  candidates not kept are dropped from the model.

The record (``record["time_budget"]["choice"]``) lists every candidate (its runs, q, SE), the
tolerance, the kept one and why; ``record["search"]["rounds"]`` each round's length and what
stopped it; each search run's row says whether it is kept.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tunemix.core.ensemble.exponential_forecaster import one_standard_error
from tunemix.train.members.types import CalibrationResult, RunResult
from tunemix.train.search import MAX_RUNS, SearchOutcome

log = logging.getLogger(__name__)

#: the first round's length: this share of the default's boosting stage (each further round: twice the last)
FIRST_ROUND_SHARE = 0.5


@dataclass
class Candidate:
    """The first ``runs`` runs of the fit and their first ``cals`` calibrated snapshots, mixed;
    its per-query validation measure."""

    label: str
    runs: int
    cals: int
    per_query: np.ndarray

    @property
    def mean(self) -> float:
        values = self.per_query[np.isfinite(self.per_query)]
        return float(values.mean()) if values.size else float("nan")


def one_se_pick(candidates: Sequence[Candidate]) -> tuple[int, int, float]:
    """(the kept candidate, the best one, the tolerance): the first candidate whose mean is at
    least the best mean less one standard error of the best's per-query values."""
    means = [c.mean for c in candidates]
    best = int(np.nanargmax(means))
    tolerance = one_standard_error(candidates[best].per_query)
    kept = next(k for k, m in enumerate(means) if m >= means[best] - tolerance)
    return kept, best, tolerance


@dataclass
class Choice:
    """The runs and calibrations kept, the search's record with its rounds, the choice's record."""

    runs: list[RunResult]
    cals: list[CalibrationResult]
    search: dict[str, Any]
    record: dict[str, Any] = field(default_factory=dict)


def choose_with_search(runs: list[RunResult], cals: list[CalibrationResult], *, default_s: float,
                       search_round: Callable[[float, list[RunResult]], SearchOutcome],
                       calibrate: Callable[[list[RunResult]], list[CalibrationResult]],
                       quality: Callable[[list[RunResult], list[CalibrationResult]], np.ndarray],
                       boosting_left: Callable[[], float], measure: str = "ndcg@10") -> Choice:
    """The rounds and the choice of the module docstring. ``runs``/``cals``: the default's;
    ``default_s``: its boosting stage's seconds (D); ``search_round(seconds, tried)``: one round
    of the search (``tunemix.train.search.search`` with the boosting end at most ``seconds`` from
    now, after the runs ``tried`` so far); ``calibrate(new_runs)``: their calibrated snapshots;
    ``quality(runs, cals)``: the per-query validation measure of their mix; ``boosting_left()``:
    the seconds left to the fit's boosting end."""
    candidates: list[Candidate] = []  # the default's once a search run is there to compare it with
    all_runs, all_cals = list(runs), list(cals)
    tried: list[RunResult] = []
    rounds: list[dict[str, Any]] = []
    first_record: dict[str, Any] | None = None
    seconds = FIRST_ROUND_SHARE * max(default_s, 0.0)
    stopped = ""
    while True:
        out = search_round(seconds, tried)
        if first_record is None:
            first_record = out.record
        r = len(rounds) + 1
        ended = str(out.record.get("ended") or out.record.get("summary", ""))
        rounds.append({"round": r, "seconds": round(seconds, 3), "runs": len(out.runs), "ended": ended})
        for row in out.record.get("runs", []):
            row["round"] = r
        if r > 1:
            first_record["runs"].extend(out.record.get("runs", []))
        if not out.runs:
            stopped = f"round {r} started no run ({ended})"
            break
        if not candidates:
            candidates.append(Candidate("default", len(runs), len(cals),
                                        np.asarray(quality(runs, cals), dtype=np.float64)))
        tried += out.runs
        all_runs += out.runs
        all_cals += calibrate(out.runs)
        candidates.append(Candidate(f"round {r}", len(all_runs), len(all_cals),
                                    np.asarray(quality(all_runs, all_cals), dtype=np.float64)))
        kept, _, tolerance = one_se_pick(candidates)
        if kept != len(candidates) - 1:
            stopped = f"round {r}'s mix is not the candidate kept"
            break
        if len(tried) >= MAX_RUNS or boosting_left() <= 0:
            stopped = f"round {r} reached the " + ("boosting end" if len(tried) < MAX_RUNS else f"{MAX_RUNS}th run")
            break
        seconds *= 2.0
    assert first_record is not None
    if not candidates:  # no search run: the default's model, nothing to compare
        if first_record.get("enabled"):
            first_record["rounds"] = rounds
        return Choice(runs=list(runs), cals=list(cals), search=first_record,
                      record={"candidates": [], "kept_label": "default", "stopped": stopped,
                              "summary": f"kept the default's model: {stopped}"})
    kept, best, tolerance = one_se_pick(candidates)
    chosen = candidates[kept]
    kept_runs = {r.spec.index for r in all_runs[:chosen.runs]}
    for row in first_record.get("runs", []):
        row["kept"] = row.get("index") in kept_runs
    if kept == 0:
        why = ("the default's model: no mix with the search's runs beats it on the validation queries by more "
               f"than one standard error of the best mean ({tolerance:.4f})")
    else:
        why = (f"the {chosen.label} mix: it beats the default's model on the validation queries by "
               f"{chosen.mean - candidates[0].mean:.4f}, more than one standard error of the best mean "
               f"({tolerance:.4f})")
    summary = f"kept {why}; the search stopped: {stopped}"
    record = {
        "rule": "the first candidate (the default's, then each round's) whose validation mean is at least the best "
                "mean less one standard error of the best's per-query values (the one-standard-error rule)",
        "first_round_share": FIRST_ROUND_SHARE, "default_boosting_s": round(default_s, 3),
        "candidates": [{"label": c.label, "runs": c.runs, "search_runs": c.runs - len(runs),
                        f"vali_{measure}": round(c.mean, 6),
                        "se": round(one_standard_error(c.per_query), 6)} for c in candidates],
        "best": best, "tolerance": round(tolerance, 6), "kept": kept, "kept_label": chosen.label,
        "stopped": stopped, "summary": summary,
    }
    first_record["rounds"] = rounds
    first_record["choice"] = summary
    first_record["ended"] = rounds[-1]["ended"]
    n_kept = chosen.runs - len(runs)
    first_record["summary"] = (f"{len(tried)} LambdaMART runs of sampled configurations in {len(rounds)} round(s) "
                               f"after the default runs, every one early-stopped on validation; {n_kept} kept as "
                               f"members ({summary})")
    log.info("time budget: %s", summary)
    return Choice(runs=all_runs[:chosen.runs], cals=all_cals[:chosen.cals], search=first_record, record=record)
