"""The training report written beside the artifact: ``report.json``, ``report.md`` and PNG plots.

Plots (matplotlib, Agg backend, imported only here):
- ``omega.png``: every member's validation quality (omega), sorted, with the members the
  forecaster kept and their weights;
- ``ndcg_by_convention.png``: NDCG@1..10 of the ensemble on the test (else validation)
  queries under each convention;
- ``grid.png``: the forecaster's grid surface, validation quality over c x omega_min;
- ``importance.png``: global feature importance (``tunemix.train.importance``).
"""

from __future__ import annotations

import io
import json
import logging
from typing import Any

import numpy as np

from tunemix.core.artifact import json_safe
from tunemix.train.importance import explanation_lines, importance_plot
from tunemix.train.members.names import md_code, md_text
from tunemix.train.report_remarks import (
    TRAIN_ERROR_NOTE,
    compile_lines,
    ensemble_below_best_member,
    feature_label,
    train_error_cell,
    without_float32_noise,
)
from tunemix.train.search import search_lines

log = logging.getLogger(__name__)


TABLE_MEASURES = ("ndcg@1", "ndcg@3", "ndcg@5", "ndcg@10")


def _fmt(v: Any) -> str:
    return "–" if v is None else f"{v:.4f}" if isinstance(v, float) else str(v)


def render_markdown(record: dict[str, Any]) -> str:
    cfg = record["config"]
    mixer = record["mixer"]
    lines = [f"# Training report: {md_text(cfg['name'])}", ""]
    lines.append("## Data")
    for d in record["data"]:
        src = d.get("path", "synthetic")
        lines.append(f"- {d['role']}: {md_code(src)} — {d['rows']} rows, {d['queries']} queries, "
                     f"{d['features']} features" + (f", sha256 `{d['sha256'][:16]}…`" if "sha256" in d else ""))
    sp = record["split"]
    lines += [f"- fit / calibration split of train by query: {sp['fit_queries']} / {sp['calibration_queries']}"
              f" queries (seed {sp['seed']})"]
    sample = (record.get("time_budget") or {}).get("subsample") or {}
    if sample.get("applied"):  # the time budget could not pay for every training query
        lines.append(f"- {sample['summary']}")
    rule = record.get("small_validation")
    if rule:
        se = rule.get("vali_measure_se")
        measured = "" if se is None else (f" (measured: the served model's validation {mixer['measure']} has a "
                                          f"standard error of {se:.4f})")
        lines.append(f"- {rule['summary']}{measured}")
    lines += ["", "## Members"]
    lines.append(f"{len(record['runs'])} runs, {len(record['members'])} calibrated members, "
                 f"{len(record['calibration_failures'])} calibrators dropped.")
    lines += ["", "| run | iterations | stop | train error | seconds |", "|---|---|---|---|---|"]
    for r in record["runs"]:
        lines.append(f"| {md_text(r['tag'])} | {r['iterations']} | {r['stop_reason']} | "
                     f"{train_error_cell(r['train_error'])} | {r['fit_seconds']:.1f} |")
    lines += ["", TRAIN_ERROR_NOTE]
    if record.get("member_types"):
        lines += ["", "### Member types", "",
                  f"| type | runs | members | best validation {mixer['measure']} | best member | kept | "
                  "share of the mix's weight |", "|---|---|---|---|---|---|---|"]
        for row in record["member_types"]:
            share = row.get("weight_share")
            lines.append(f"| {row['type']} | {row['runs']} | {row['members']} | {_fmt(row.get('best_omega'))} | "
                         f"{md_code(row.get('best_member'), in_table=True)} | {_fmt(row.get('members_kept'))} | "
                         f"{'–' if share is None else f'{100 * share:.1f}%'} |")
        for row in record["member_types"]:
            if row.get("detail"):
                lines.append(f"\n{row['type']}: {row['detail']}.")
    if record.get("best_feature"):
        bf = record["best_feature"]
        lines += ["", "Best single feature (the paper's baseline, chosen on the fit part): "
                      f"{feature_label(record, bf['feature'], md_text)} "
                      f"({bf['sign']}), {bf['measure']} {bf['convention']}: fit {_fmt(bf['fit'])}, validation "
                      f"{_fmt(bf.get('vali'))}, test {_fmt(bf.get('test'))}."]
    best = record["best_member"]
    lines += ["", f"Best single member on validation: {md_code(best['name'])} "
              f"({mixer['measure']} {mixer['convention']} = {best['omega']:.4f}).", ""]
    lines.append("## Mixer")
    detail = ", ".join(f"{k} = {_fmt(mixer[k])}" for k in ("c", "omega_min", "members_kept", "validation_quality")
                       if k in mixer)
    lines += [f"`{mixer['name']}` on {mixer['measure']} under `{mixer['convention']}`: {detail}.", ""]
    why = mix_explanation(record)
    if why:
        lines += [why, ""]
    if record["mixer_comparison"]:
        m = mixer["measure"]
        lines += ["### Mixers side by side", "", f"The served mixer was chosen on the validation {m}; the test "
                  "column is reported, never used for a choice.", "",
                  f"| mixer | validation {m} | test {m} | detail |", "|---|---|---|---|"]
        for row in record["mixer_comparison"]:
            lines.append(f"| {row['mixer']} | {_fmt(row.get(f'val_{m}'))} | {_fmt(row.get(f'test_{m}'))} | "
                         f"{row.get('detail', '')} |")
        lines.append("")
    if record.get("mix_by_member_type"):
        m = mixer["measure"]
        lines += ["### The mixer on each member type alone", "",
                  f"| members | count | rescale | validation {m} | test {m} |", "|---|---|---|---|---|"]
        for row in record["mix_by_member_type"]:
            lines.append(f"| {row['members']} | {row['n_members']} | {_fmt(row.get('rescale'))} | "
                         f"{_fmt(row.get(f'val_{m}'))} | {_fmt(row.get(f'test_{m}'))} |")
        lines.append("")
    if record.get("rescaling_comparison"):
        m = mixer["measure"]
        lines += ["### Member rescaling before the forecaster", "",
                  f"| rescale | validation {m} | test {m} |", "|---|---|---|"]
        for row in record["rescaling_comparison"]:
            label = row["rescale"] + ("" if row.get("snapshot_T") is None else f", T = {row['snapshot_T']}")
            lines.append(f"| {label} | {_fmt(row.get(f'val_{m}'))} | {_fmt(row.get(f'test_{m}'))} |")
        lines.append("")
    lines += search_lines(record.get("search"))
    lines += relevance_lines(record)
    lines += quote_lines(record)
    for split, by_model in record["evaluation"].items():
        lines.append(f"## {split.capitalize()} metrics under the {len(next(iter(by_model.values())))} conventions")
        for who, table in by_model.items():
            # NDCG@1..10 are all in report.json and the plot; the table shows a readable subset
            measures = [m for m in next(iter(table.values())) if m in TABLE_MEASURES or not m.startswith("ndcg@")]
            lines += ["", f"**{who.replace('_', ' ')}**", "", "| convention | " + " | ".join(measures) + " |",
                      "|---" * (len(measures) + 1) + "|"]
            for conv, row in table.items():
                lines.append(f"| {conv} | " + " | ".join(_fmt(row[mm]) for mm in measures) + " |")
        lines.append("")
    lines += [*ensemble_below_best_member(record), ""]
    lines.append("## Timings (seconds)")
    lines += [f"- {k}: {v:.1f}" for k, v in record["timings"].items()]
    lines += compile_lines(record)
    lines += ["", *explanation_lines(record)]
    lines += ["", "![omega](omega.png)", "![ndcg](ndcg_by_convention.png)", "![grid](grid.png)"]
    if (record.get("relevance_head") or {}).get("reliability_relevant"):
        lines.append("![reliability](reliability.png)")
    lines.append("")
    return "\n".join(lines)


def quote_lines(record: dict[str, Any]) -> list[str]:
    """Which figure to quote, and why the conventions' figures differ."""
    mixer = record["mixer"]
    split = "test" if "test" in record["evaluation"] else "vali"
    m, conv = mixer["measure"], mixer["convention"]
    value = record["evaluation"][split]["ensemble"].get(conv, {}).get(m)
    return ["## The figure to quote", "",
            f"**{split} {m} = {_fmt(value)} under the `{conv}` convention**: the chosen mix on the "
            f"{'test queries, which took no part in any choice' if split == 'test' else 'validation queries (no test set was given; they also tuned the mix, so this figure is optimistic)'}; "  # noqa: E501
            "name the convention with it. The tables below give the same ranking under every convention. Their "
            "figures differ by the tools' rules, not by the model (docs/conventions.md): letor3, letor4 and mslr "
            "give a query with fewer than k documents no NDCG@k of its own (it counts 0), so on lists shorter than "
            "10 NDCG@10 can be far below NDCG@5; a query without relevant documents scores 1 under yahoo, lightgbm "
            "and xgboost and 0 elsewhere; the gain tables and ideal DCGs differ too.", ""]


def _recalibration_words(rh: dict[str, Any]) -> str:
    """What the report says of the head's recalibration (cross-validated on validation queries)."""
    r = rh.get("recalibration")
    if not r:
        return ""
    gain = f"held-out log loss gain {_fmt(r['gain'])} per document, standard error {_fmt(r['standard_error'])}"
    if r["applied"]:
        return f", then recalibrated per grade (a cross-validation over the validation queries: {gain})"
    return f"; no recalibration (a cross-validation over the validation queries: {gain})"


def relevance_lines(record: dict[str, Any]) -> list[str]:
    """The report's section on the relevance head: how well its probabilities match the grades."""
    rh = record.get("relevance_head")
    if not rh:
        return []
    if "error" in rh:
        return ["## What the scores mean", "", f"No relevance head: {rh['error']}.", ""]
    split = {"test": "test", "vali": "validation"}[rh["measured_on"]]
    lines = ["## What the scores mean", "",
             f"The relevance head gives every document P(y = k) and E[y], comparable across queries and in the "
             f"ranking's order: {len(rh.get('models', []))} McRank models trained on the training set and stopped "
             f"early on the validation queries (their iterations: "
             f"{', '.join(str(m['iterations']) for m in rh.get('models', []))}), their class probabilities "
             f"averaged and handed out within each query in the ranking's order{_recalibration_words(rh)}. "
             f"On the {split} queries "
             f"({rh['documents']} documents): "
             f"Brier score {_fmt(rh['brier'])}, log loss {_fmt(rh['log_loss'])}, expected calibration error of "
             f"P(y >= 1) {_fmt(rh['ece_relevant'])} and of P(y = top grade) {_fmt(rh['ece_top'])} (15 bins), RMSE of "
             f"the expected grade {_fmt(rh['rmse_expected_grade'])}.", "",
             "| documents with P(y >= 1) above | count | share relevant |", "|---|---|---|"]
    for key, row in rh["share_relevant_above"].items():
        lines.append(f"| {key.removeprefix('above_')} | {row['documents']} | {_fmt(row['share_relevant'])} |")
    return [*lines, ""]


def _grid_index(values: list[float], chosen: float) -> int:
    """Where ``chosen`` sits on a grid axis (exactly, -inf included, else the nearest point)."""
    vals = np.asarray(values, dtype=float)
    exact = np.flatnonzero(vals == float(chosen))
    if exact.size:
        return int(exact[0])
    finite = np.where(np.isfinite(vals), vals, np.inf)
    return int(np.argmin(np.abs(finite - float(chosen))))


def mix_explanation(record: dict[str, Any]) -> str | None:
    """In words, why the mix was chosen when its validation quality is below the best member's
    (the forecaster keeps the simplest grid point within its tie tolerance; c = 0 is the uniform
    mix of the kept members)."""
    mixer, best = record["mixer"], record["best_member"]
    val = mixer.get("validation_quality")
    if val is None or best.get("omega") is None or float(val) >= float(best["omega"]):
        return None
    c = mixer.get("c")
    uniform = c is not None and float(c) == 0.0
    return (f"The mix scores {float(val):.4f} on validation, below its best member ({float(best['omega']):.4f}): "
            f"the forecaster does not pick a member by its validation score, it weighs the members by it. "
            + ("With c = 0 every kept member has the same weight (the uniform mix): no larger c did better "
               "by more than the tie tolerance on the validation queries, and the simplest such point wins, "
               "which guards against a weighting fitted to the noise of a small validation set."
               if uniform else
               f"c = {_fmt(c)} was the simplest grid point within the tie tolerance of the best one; a single "
               "member's lead on validation is often noise that does not carry over to new queries "
               "(compare the test column of the mixers side by side)."))


def _png(fig: Any) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    return buf.getvalue()


def render_plots(record: dict[str, Any]) -> dict[str, bytes]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out: dict[str, bytes] = {}
    mixer = record["mixer"]
    omega = np.array([m["omega"] for m in record["members"]])
    order = np.argsort(-omega)
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.plot(np.arange(omega.size), omega[order], ".", ms=3, label="member omega (validation)")
    if "weights" in mixer:
        w = np.asarray(mixer["weights"])[order]
        kept = w > 0
        ax.plot(np.flatnonzero(kept), omega[order][kept], "o", mfc="none", ms=5, label="kept by the forecaster")
    if "omega_min" in mixer and np.isfinite(mixer["omega_min"]):
        ax.axhline(mixer["omega_min"], color="grey", ls="--", lw=1, label="omega_min")
    ax.set_xlabel("member (sorted by omega)")
    ax.set_ylabel(f"{mixer['measure']} ({mixer['convention']})")
    ax.legend(loc="lower left", fontsize=8)
    ax.set_title("Member quality on the validation queries")
    out["omega.png"] = _png(fig)
    plt.close(fig)

    split = "test" if "test" in record["evaluation"] else "vali"
    table = record["evaluation"][split]["ensemble"]
    ks = list(range(1, 11))
    fig, ax = plt.subplots(figsize=(8, 4.5))
    # conventions whose curves coincide share one line and one legend entry ("letor4 = mslr")
    curves: dict[tuple[float, ...], list[str]] = {}
    for conv, row in table.items():
        ys = tuple(np.nan if row.get(f"ndcg@{k}") is None else round(float(row[f"ndcg@{k}"]), 6) for k in ks)
        curves.setdefault(ys, []).append(conv)
    markers = "osD^vP*Xh<>"
    styles = ("-", "--", "-.", ":")
    width = 0.5 / max(len(curves), 1)
    for i, (ys, convs) in enumerate(curves.items()):
        shift = (i - (len(curves) - 1) / 2) * width  # a small offset: touching curves stay apart
        ax.plot([k + shift for k in ks], ys, marker=markers[i % len(markers)], ls=styles[i % len(styles)],
                ms=5, lw=1.2, label=" = ".join(convs))
    ax.set_xlabel("k")
    ax.set_ylabel("NDCG@k")
    ax.set_xticks(ks)
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
    ax.set_title(f"Ensemble NDCG@k on the {split} queries under each convention")
    out["ndcg_by_convention.png"] = _png(fig)
    plt.close(fig)

    rh = record.get("relevance_head") or {}
    if rh.get("reliability_relevant"):
        fig, axes = plt.subplots(1, 2, figsize=(9, 4), sharey=True)
        for ax, key, title in ((axes[0], "reliability_relevant", "P(y >= 1)"),
                               (axes[1], "reliability_top", "P(y = top grade)")):
            rel = rh[key]
            ax.plot([0, 1], [0, 1], color="grey", lw=1, ls="--", label="perfect")
            sizes = 10 + 90 * np.sqrt(np.asarray(rel["count"]) / max(max(rel["count"]), 1))
            ax.scatter(rel["predicted"], rel["observed"], s=sizes, zorder=3, label="bins (area: documents)")
            ax.plot(rel["predicted"], rel["observed"], lw=1)
            ax.set_xlim(0, 1)
            ax.set_ylim(0, 1)
            ax.set_xlabel(f"predicted {title}")
            ax.set_title(f"{title}: ECE {rh['ece_relevant' if key == 'reliability_relevant' else 'ece_top']:.4f}")
        axes[0].set_ylabel("observed frequency")
        axes[0].legend(loc="upper left", fontsize=8)
        fig.suptitle(f"Reliability of the relevance head on the {rh['measured_on']} queries")
        out["reliability.png"] = _png(fig)
        plt.close(fig)

    fig = importance_plot(record)
    if fig is not None:
        out["importance.png"] = _png(fig)
        plt.close(fig)

    if "grid" in mixer:
        g = mixer["grid"]
        q = np.asarray(g["quality"], dtype=float)
        fig, ax = plt.subplots(figsize=(7, 4))
        im = ax.imshow(q, aspect="auto", origin="lower", cmap="viridis")
        # at most about ten labels a side: every tick labelled is unreadable on a fine grid
        c_step = max(1, -(-len(g["c"]) // 10))
        o_step = max(1, -(-len(g["omega_min"]) // 10))
        ax.set_yticks(range(0, len(g["c"]), c_step), [f"{c:g}" for c in g["c"][::c_step]])
        ax.set_xticks(range(0, len(g["omega_min"]), o_step), [f"{v:.3f}" for v in g["omega_min"][::o_step]],
                      rotation=45, fontsize=8)
        if mixer.get("c") is not None and mixer.get("omega_min") is not None:  # the chosen point
            ci, oi = (_grid_index(g[key], mixer[key]) for key in ("c", "omega_min"))
            ax.plot(oi, ci, marker="*", ms=16, mfc="red", mec="white",
                    label=f"chosen: c = {_fmt(mixer['c'])}, omega_min = {_fmt(mixer['omega_min'])}")
            ax.legend(loc="upper right", fontsize=8)
        ax.set_ylabel("c")
        ax.set_xlabel("omega_min")
        fig.colorbar(im, ax=ax, label=f"validation {mixer['measure']}")
        ax.set_title("Exponential forecaster grid search")
        out["grid.png"] = _png(fig)
        plt.close(fig)
    return out


def render_report(record: dict[str, Any], *, plots: bool = True) -> dict[str, bytes]:
    """Files to write beside the artifact: report.json, report.md and (optionally) PNG plots."""
    files = {
        "report.json": (json.dumps(without_float32_noise(json_safe(record)), indent=2, default=float,
                                   allow_nan=False) + "\n").encode(),
        "report.md": render_markdown(record).encode(),
    }
    if plots:
        try:
            files.update(render_plots(record))
        except ImportError:
            log.warning("matplotlib is not installed; the report has no plots")
    return files
