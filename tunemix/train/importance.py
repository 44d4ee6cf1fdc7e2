"""What the training report says about why documents rank where they do: global feature importance
and two worked examples, from the exact explanations of ``tunemix.core.explain.explanation``; and
``global_importance``, the fitted ranker's ``feature_importances_`` and ``tunemix importance``.

``global_importance(model, X, offsets)``: the mean absolute exact contribution of each feature
over every document of up to ``GLOBAL_QUERIES`` queries of the data (queries of at least 2
documents, evenly spread over the set in its order, so the sample is deterministic), stopping
once ``GLOBAL_ROWS`` documents are in (``importance_sample``); each document is explained against
its query's per-feature median document. ``TuneMixRanker.fit`` keeps that sample of its training
rows and ``feature_importances_`` explains it on first access (``sample_importance``), not in
the fit: it costs about 9% of a fit's CPU time on MQ2008 Fold1 (docs/performance.md).

Global importance is the mean absolute contribution of each feature over the top
``IMPORTANCE_TOP`` documents (the ones a user sees) of up to ``IMPORTANCE_QUERIES`` test queries
(validation queries without a test set), evenly spread over the set; every document is explained
against its query's per-feature median document, the other documents as posted, with at most
``IMPORTANCE_BUDGET`` forest rows each (exact when that suffices; the share of exact explanations
is recorded). The examples are the first of those queries: its top document, and the pair of its
top two documents (why the first is above the second).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tunemix.core.data.dataset import RankingData
from tunemix.core.explain.explanation import Explanation, explain_rows
from tunemix.core.scoring.ensemble_model import EnsembleModel
from tunemix.train.members.names import md_text, plot_text

IMPORTANCE_QUERIES = 40
#: ``global_importance``'s sample: whole queries, evenly spread, up to this many documents
GLOBAL_QUERIES = 200
GLOBAL_ROWS = 5_000
IMPORTANCE_TOP = 5
IMPORTANCE_BUDGET = 2048
#: features in the report's table and bar chart; contributions in a worked example
SHOWN = 20
EXAMPLE_SHOWN = 8


def _contributions(e: Explanation, k: int, values: np.ndarray, shown: int) -> tuple[list[dict[str, Any]], float]:
    c = e.contributions[k]
    top = [f for f in np.argsort(-np.abs(c), kind="stable")[:shown] if c[f] != 0.0]
    return ([{"feature": e.feature_names[f], "value": float(values[f]), "contribution": float(c[f])} for f in top],
            float(c.sum() - c[top].sum()))


def importance_sample(features: np.ndarray, query_offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(rows (n', d), query offsets) of ``global_importance``'s sample (module docstring): whole
    queries of at least 2 documents, up to ``GLOBAL_QUERIES`` evenly spread over the set, taken in
    order until ``GLOBAL_ROWS`` documents are in (a copy: a fitted ranker keeps it)."""
    off = np.asarray(query_offsets, dtype=np.int64)
    candidates = np.flatnonzero(np.diff(off) >= 2)
    picked = candidates[np.unique(np.linspace(0, candidates.size - 1, min(GLOBAL_QUERIES, candidates.size))
                                  .round().astype(np.int64))] if candidates.size else candidates
    blocks, sizes = [], []
    for q in picked.tolist():
        lo, hi = int(off[q]), int(off[q + 1])
        blocks.append(features[lo:hi])
        sizes.append(hi - lo)
        if sum(sizes) >= GLOBAL_ROWS:
            break
    x = np.concatenate(blocks) if blocks else np.zeros((0, features.shape[1]), dtype=features.dtype)
    return np.ascontiguousarray(x), np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)


def global_importance(model: EnsembleModel, features: np.ndarray, query_offsets: np.ndarray
                      ) -> tuple[np.ndarray, int, int]:
    """(mean absolute exact contribution per feature (d,), queries, documents) over the sample of
    the module docstring (``importance_sample``)."""
    x, off = importance_sample(features, query_offsets)
    return sample_importance(model, x, off), off.size - 1, x.shape[0]


def sample_importance(model: EnsembleModel, x: np.ndarray, off: np.ndarray) -> np.ndarray:
    """The mean absolute exact contribution per feature (d,) over every row of an
    ``importance_sample`` (each query explained on its own)."""
    total = np.zeros(model.n_features)
    for q in range(off.size - 1):
        lo, hi = int(off[q]), int(off[q + 1])
        e = explain_rows(model, x[lo:hi], np.array([0, hi - lo], dtype=np.int64))
        total += np.abs(e.contributions).sum(axis=0)
    return total / max(x.shape[0], 1)


def explanation_summary(model: EnsembleModel, data: RankingData, names: list[str], split: str) -> dict[str, Any]:
    """The record's ``explanations`` section (module docstring)."""
    off = data.query_offsets
    sizes = np.diff(off)
    candidates = np.flatnonzero(sizes >= 2)
    picked = candidates[np.unique(np.linspace(0, candidates.size - 1, min(IMPORTANCE_QUERIES, candidates.size))
                                  .round().astype(np.int64))] if candidates.size else candidates
    total = np.zeros(data.n_features)
    n_docs = n_exact = 0
    first: tuple[int, np.ndarray, Explanation, np.ndarray] | None = None
    for q in picked.tolist():
        lo, hi = int(off[q]), int(off[q + 1])
        xq = data.features[lo:hi]
        one = np.array([0, hi - lo], dtype=np.int64)
        order = np.argsort(-model.score(xq, one), kind="stable")[:IMPORTANCE_TOP]
        e = explain_rows(model, xq, one, order, budget=IMPORTANCE_BUDGET, feature_names=names)
        total += np.abs(e.contributions).sum(axis=0)
        n_docs += order.size
        n_exact += int(e.exact.sum())
        if first is None:
            first = (q, order, e, xq)
    out: dict[str, Any] = {"split": split, "queries": int(picked.size), "documents": n_docs,
                           "top_per_query": IMPORTANCE_TOP, "budget": IMPORTANCE_BUDGET,
                           "exact_share": n_exact / n_docs if n_docs else None,
                           "reference": "the query's per-feature median document, the list's statistics as posted",
                           "method": first[2].method if first is not None else "exact"}
    mean = total / max(n_docs, 1)
    rank = np.argsort(-mean, kind="stable")[:SHOWN]
    out["importance"] = [{"feature": names[f], "mean_abs_contribution": float(mean[f])} for f in rank]
    if first is None:
        return out
    q, order, e, xq = first
    ids = [str(data.docids[int(off[q]) + r]) if data.docids is not None else f"row {r}" for r in order[:2].tolist()]
    shown, rest = _contributions(e, 0, xq[order[0]], EXAMPLE_SHOWN)
    out["example"] = {"qid": str(data.qids[q]), "docid": ids[0], "score": float(e.scores[0]),
                      "baseline": float(e.baseline[0]), "exact": bool(e.exact[0]), "contributions": shown,
                      "rest": rest}
    if order.size >= 2:
        diff = e.contributions[0] - e.contributions[1]
        top = np.array([f for f in np.argsort(-np.abs(diff), kind="stable")[:EXAMPLE_SHOWN] if diff[f] != 0.0],
                       dtype=np.int64)
        out["pair"] = {
            "qid": str(data.qids[q]), "a": ids[0], "b": ids[1],
            "score_difference": float(e.scores[0] - e.scores[1]), "baseline": float(e.baseline[0] - e.baseline[1]),
            "exact": bool(e.exact[:2].all()), "rest": float(diff.sum() - diff[top].sum()),
            "contributions": [{"feature": names[f], "value_a": float(xq[order[0], f]),
                               "value_b": float(xq[order[1], f]), "contribution": float(diff[f])} for f in top]}
    return out


def explanation_lines(record: dict[str, Any]) -> list[str]:
    """The report's section (markdown lines) from the record's ``explanations``."""
    ex = record.get("explanations")
    if not ex:
        return []
    lines = ["## Why documents rank where they do", ""]
    if "error" in ex:
        return [*lines, f"No explanations: {ex['error']}.", ""]
    if "skipped" in ex:
        return [*lines, f"No explanations: {ex['skipped']}; `Model.explain` and `tunemix explain` give them.", ""]
    exact = "–" if ex.get("exact_share") is None else f"{100 * ex['exact_share']:.0f}%"
    lines += [f"Each feature's contribution to a document's score is exact and the same on every run: each "
              f"member's exact Shapley values against {ex['reference']} (one-reference TreeSHAP), carried through "
              "the calibrators and the mix (docs/method.md). The rest of the list (what the query's median document "
              "would score in the document's place) plus the contributions is the served score. Global "
              "importance: the mean absolute "
              f"contribution over the top {ex['top_per_query']} documents of {ex['queries']} {ex['split']} queries "
              f"({ex['documents']} documents; {exact} exact).", "",
              "| feature | mean abs. contribution |", "|---|---|"]
    lines += [f"| {md_text(r['feature'])} | {r['mean_abs_contribution']:.4f} |" for r in ex["importance"]]
    lines += ["", "![importance](importance.png)", ""]
    if "example" in ex:
        e = ex["example"]
        lines += [f"**The top document of query {md_text(e['qid'])}** ({md_text(e['docid'])}): score "
                  f"{e['score']:.4f} = {e['baseline']:.4f} from the rest of the list (what the query's median "
                  f"document would score in its place) + the contributions below + {e['rest']:.4f} from the other "
                  "features.", "",
                  "| feature | value | contribution |", "|---|---|---|"]
        lines += [f"| {md_text(c['feature'])} | {c['value']:.4g} | {c['contribution']:+.4f} |"
                  for c in e["contributions"]]
        lines.append("")
    if "pair" in ex:
        p = ex["pair"]
        a, b = md_text(p["a"]), md_text(p["b"])
        lines += [f"**Why {a} is above {b}** (query {md_text(p['qid'])}): score difference "
                  f"{p['score_difference']:+.4f} = the contributions below + {p['rest']:+.4f} from the other features"
                  + (f" + {p['baseline']:+.4f} from the rest of the list" if p["baseline"] != 0.0 else "") + ".", "",
                  f"| feature | {a} | {b} | contribution to the difference |", "|---|---|---|---|"]
        lines += [f"| {md_text(c['feature'])} | {c['value_a']:.4g} | {c['value_b']:.4g} | {c['contribution']:+.4f} |"
                  for c in p["contributions"]]
        lines.append("")
    return lines


def importance_plot(record: dict[str, Any]) -> Any:
    """The bar chart of global importance (a matplotlib figure), or None without explanations."""
    ex = record.get("explanations") or {}
    rows = ex.get("importance")
    if not rows:
        return None
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 0.25 * len(rows) + 1.2))
    # positions, not category names: two names equal after escaping stay two bars
    ax.barh(range(len(rows)), [r["mean_abs_contribution"] for r in rows][::-1])
    ax.set_yticks(range(len(rows)), [plot_text(r["feature"]) for r in rows][::-1])
    ax.set_xlabel("mean |contribution| to the score")
    ax.set_title(f"Feature importance: top {ex['top_per_query']} documents of {ex['queries']} {ex['split']} queries")
    return fig
