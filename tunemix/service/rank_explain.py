"""/rank's explanations: the pairs and documents a request asks to explain, within its caps; the
scoring pass followed by the exact explanations, under the explain lane's deadline and row budget;
and their answer structs' contents."""

from __future__ import annotations

import bisect
import dataclasses
import itertools
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from tunemix.core.deadline import Deadline, current_deadline
from tunemix.core.explain.explanation import explain_pair, explain_rows
from tunemix.service.errors import input_error, query_label
from tunemix.service.parsing import CandidateLists
from tunemix.service.rank_answer import Contribution, Explained, PairContribution, PairExplained
from tunemix.service.rank_body import Options
from tunemix.service.registry import ServedModel
from tunemix.service.settings import Settings


def explain_options(lists: CandidateLists, pairs: list[tuple[int, Any]], options: Options,
                    settings: Settings) -> Options:
    """``options`` with the asked pairs as rows; 422 for an unknown id or beyond the request's cap."""
    rows = []
    off = lists.offsets.tolist()
    for q, ids in pairs:
        lo, hi = off[q], off[q + 1]
        where = query_label(q, lists.qids[q])
        by_text = {str(i): lo + j for j, i in enumerate(lists.ids[lo:hi])}
        found = []
        for side, doc in zip("ab", ids, strict=True):
            if str(doc) not in by_text:
                raise input_error(f"{where}: explain_pair id {doc!r} (the pair's {side}) is not a document of "
                                  "the query")
            found.append(by_text[str(doc)])
        rows.append((q, found[0], found[1]))
    sizes = [b - a for a, b in itertools.pairwise(off)]  # Python ints: a request has few queries
    longest = max(sizes, default=0)
    top_k = longest if options.top_k is None else min(options.top_k, longest)  # top_k may exceed 64 bits
    n = (sum(min(size, top_k) for size in sizes) if options.explain else 0) + 2 * len(rows)
    if n > settings.explain_max_documents:
        raise input_error(f"explain: the request asks to explain {n} documents (each query's returned top_k, and 2 per "
                          f"explain_pair); the limit is {settings.explain_max_documents} "
                          "(TUNEMIX_EXPLAIN_MAX_DOCUMENTS): ask for a smaller top_k")
    return dataclasses.replace(options, pairs=tuple(rows)) if rows else options


def with_explanations(served: ServedModel, options: Options, settings: Settings) -> Callable[..., Any]:
    """The scoring call followed by the explanations ``options`` ask for, on one scoring pass
    (``EnsembleModel.scoring_pass``): (what ``score`` or ``score_and_relevance`` returns, the
    documents' explanation or None, the pairs' explanations). Run in the explain lane
    (``explain_work``), on one thread; the explanations run under a deadline of their own
    (``TUNEMIX_EXPLAIN_TIMEOUT_S``, within the request's) and a budget of forest rows counted as
    they are scored (``explain_row_budget``)."""
    names = served.feature_names
    budget = settings.explain_budget

    def scored_and_explained(features: np.ndarray, offsets: np.ndarray) -> tuple[Any, Any, list[Any]]:
        # one scoring pass: its scores answer the request and the explanations reuse it
        sp = served.model.scoring_pass(features, offsets, relevance=options.needs_head, whitening=True)
        scores = sp.scores
        scored = (scores, *sp.relevance) if options.needs_head and sp.relevance is not None else scores
        explanation = None
        rows = np.zeros(0, dtype=np.int64)
        if options.explain:
            rows = np.concatenate([lo + np.argsort(-scores[lo:hi], kind="stable")[: options.top_k]
                                   for lo, hi in zip(offsets[:-1].tolist(), offsets[1:].tolist(), strict=True)])
        outer = current_deadline()
        limit = explain_row_budget(offsets, rows, options.pairs, budget)
        lane = (outer.within(settings.explain_timeout_s, row_budget=limit) if outer is not None
                else Deadline.after(settings.explain_timeout_s, row_budget=limit))
        with lane.active():
            if rows.size:
                explanation = explain_rows(served.model, features, offsets, rows, budget=budget,
                                           feature_names=names, scoring=sp)
            pairs = [explain_pair(served.model, features, offsets, a, b, budget=budget, feature_names=names,
                                  scoring=sp)
                     for _, a, b in options.pairs]
        return scored, explanation, pairs

    return scored_and_explained


def explain_row_budget(offsets: npt.NDArray[np.int64], rows: npt.NDArray[np.int64],
                       pairs: tuple[tuple[int, int, int], ...], budget: int) -> int:
    """Forest rows a request's explanations may score: per explained document (each pair counts
    two) ``budget`` for its coalitions and two passes over its query's list (the posted scores and
    the members' scores the coalitions start from)."""
    off = offsets.tolist()
    explained = rows.tolist() + [r for _, a, b in pairs for r in (a, b)]
    # each explained row's query size, by bisection in Python ints (at most
    # TUNEMIX_EXPLAIN_MAX_DOCUMENTS rows: NumPy's calls cost more than the search)
    sizes = [off[q + 1] - off[q] for q in (bisect.bisect_right(off, r) - 1 for r in explained)]
    return len(explained) * budget + 2 * sum(sizes)


def _top(contributions: np.ndarray, k: int) -> list[int]:
    """The k largest non-zero contributions (zero ones are not listed)."""
    return [f for f in np.argsort(-np.abs(contributions), kind="stable")[:k].tolist() if contributions[f] != 0.0]


def explained_documents(e: Any, features: np.ndarray, k: int) -> dict[int, Explained]:
    """Each explained row's answer: baseline, its k largest contributions named, the rest (one
    sort, one gather and one sum for all the rows, then one list of each per row: a row's NumPy
    calls cost more than its ten values)."""
    c = e.contributions
    order = np.argsort(-np.abs(c), axis=1, kind="stable")[:, :k]
    top_c = np.take_along_axis(c, order, axis=1)
    keep = top_c != 0.0  # zero contributions are not listed (they sort last: a prefix is kept)
    rest = c.sum(axis=1) - np.where(keep, top_c, 0.0).sum(axis=1)
    top_x = features[e.rows[:, None], order]
    names = e.feature_names
    exact = e.exact.tolist()
    out = {}
    for j, (row, base, r, n_kept, fs, vs, cs) in enumerate(zip(
            e.rows.tolist(), e.baseline.tolist(), rest.tolist(), keep.sum(axis=1).tolist(), order.tolist(),
            top_x.tolist(), top_c.tolist(), strict=True)):
        shown = [Contribution(feature=names[f], value=v, contribution=cf)
                 for f, v, cf in zip(fs[:n_kept], vs[:n_kept], cs[:n_kept], strict=True)]
        out[row] = Explained(baseline=base, contributions=shown, rest=r, exact=exact[j],
                             standard_error=None if exact[j] else float(e.standard_error[j].max()))
    return out


def explained_pair(p: Any, lists: CandidateLists, k: int) -> PairExplained:
    c, x = p.contributions, lists.features
    top = _top(c, k)
    return PairExplained(
        a=lists.ids[p.a], b=lists.ids[p.b], score_difference=p.score_a - p.score_b, baseline=p.baseline,
        contributions=[PairContribution(feature=p.feature_names[f], value_a=float(x[p.a, f]),
                                        value_b=float(x[p.b, f]), contribution=float(c[f])) for f in top],
        rest=float(c.sum() - c[top].sum()), exact=p.exact,
        standard_error=None if p.exact else float(p.standard_error.max()))


