"""``tunemix predict``, ``tunemix explain``, ``tunemix serve`` and ``tunemix models``: the trained
models from the command line.

``predict`` writes one score a line in the file's order (as LightGBM's predict task and
RankLib's ``-score``), or with ``--rank`` one line per document ``qid docid rank score``, best
first within each query; ``--proba`` adds, tab-separated, the expected grade and P(grade = k) for
every grade (the relevance head); ``--model`` is a model name under ``--models-dir`` or a version or model
directory.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

PREDICT_HELP = """Score a LETOR/SVMlight file with a trained model.

Writes one score a line in the file's order (as LightGBM's predict task and RankLib's -score),
or with --rank one line per document 'qid docid rank score', best first within each query.
--proba adds, tab-separated, the expected grade and P(grade = k) for every grade (the model's
relevance head), under a header line naming the columns. --model is a model name under
--models-dir, or a version or model directory."""


#: the forms ``--doc`` accepts, for the help and for every error that cannot find a document
DOC_FORMS = ("its docid (the line's '# docid = X' comment), Q:N or qid:Q:N (the N-th document of query Q, "
             "from 1; e.g. 18219:1 or qid:18219:1) or line:N (the file's N-th document)")


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("predict", help="score a LETOR/SVMlight file with a trained model",
                              description=PREDICT_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("file", help="LETOR/SVMlight file (labels are read and ignored)")
    p.add_argument("--missing", choices=("zero", "nan"), default="zero",
                   help="a feature a line omits: zero (0, the default) or nan (a missing value)")
    p.add_argument("--model", required=True, help="model name under --models-dir, or a model/version directory")
    p.add_argument("--models-dir", default="models", help="where model names are looked up (default: models)")
    p.add_argument("--version", help="a version of the model (default: the latest)")
    p.add_argument("-o", "--output", help="write here instead of standard output")
    p.add_argument("--rank", action="store_true", help="write 'qid docid rank score' per document, best first")
    p.add_argument("--proba", action="store_true",
                   help="also write each document's expected grade and P(grade = k) for every k (tab-separated)")
    p.set_defaults(func=run_predict)

    e = subparsers.add_parser(
        "explain", help="why a document of a LETOR/SVMlight file scores what it scores (or why one is above another)",
        description="Each feature's contribution to a document's score, exact and the same on every run: each "
                    "member's exact Shapley values against the query's per-feature median document, carried through "
                    "the calibrators and the mix (the query's other documents as in the file). score = the rest of "
                    "the list (what the median document would score in its place) + contributions. Two --doc: the "
                    "contributions to score(first) - score(second), two documents of one query. --method shapley: "
                    "the whole model's Shapley values (slower; sampled when --budget does not suffice).")
    e.add_argument("file", help="LETOR/SVMlight file holding the document's whole query (labels are ignored)")
    e.add_argument("--missing", choices=("zero", "nan"), default="zero",
                   help="a feature a line omits: zero (0, the default) or nan (a missing value)")
    e.add_argument("--model", required=True, help="model name under --models-dir, or a model/version directory")
    e.add_argument("--models-dir", default="models", help="where model names are looked up (default: models)")
    e.add_argument("--version", help="a version of the model (default: the latest)")
    e.add_argument("--doc", required=True, action="append",
                   help=f"the document: {DOC_FORMS}; twice for a pair")
    e.add_argument("--qid", help="the query of --doc when a docid occurs in several queries")
    e.add_argument("--top", type=int, default=10, help="contributions shown, largest first (default: 10)")
    e.add_argument("--method", choices=("exact", "shapley"), default="exact",
                   help="exact (default) or the whole model's Shapley values (shapley)")
    e.add_argument("--budget", type=int, default=1 << 16,
                   help="--method shapley: forest rows scored per document at most (default: 65536)")
    e.set_defaults(func=run_explain)

    i = subparsers.add_parser(
        "importance", help="global feature importance of a model over a LETOR/SVMlight file",
        description="Each feature's mean absolute exact contribution over the documents of up to 200 queries of the "
                    "file (evenly spread, whole queries, up to 5,000 documents), largest first.")
    i.add_argument("file", help="LETOR/SVMlight file (labels are ignored)")
    i.add_argument("--missing", choices=("zero", "nan"), default="zero",
                   help="a feature a line omits: zero (0, the default) or nan (a missing value)")
    i.add_argument("--model", required=True, help="model name under --models-dir, or a model/version directory")
    i.add_argument("--models-dir", default="models", help="where model names are looked up (default: models)")
    i.add_argument("--version", help="a version of the model (default: the latest)")
    i.add_argument("--top", type=int, default=20, help="features shown (default: 20; 0: all)")
    i.set_defaults(func=run_importance)

    from tunemix.service.serve_options import DESCRIPTION, add_arguments  # the standard library only

    s = add_arguments(subparsers.add_parser("serve", help="serve the models over HTTP (what `python -m "
                                                          "tunemix.service` does)",
                                            description=DESCRIPTION))
    s.set_defaults(func=run_serve)

    m = subparsers.add_parser("models", help="list the trained models and their versions")
    m.add_argument("--models-dir", default="models", help="default: models")
    m.set_defaults(func=run_models)


def _load(args: argparse.Namespace) -> Any:
    import tunemix

    return tunemix.load(args.model, models_dir=None if Path(args.model).is_dir() else args.models_dir,
                        version=args.version)


def run_predict(args: argparse.Namespace) -> int:
    import numpy as np

    from tunemix.core.data.svmlight import read_svmlight

    model = _load(args)
    data = read_svmlight(args.file, n_features=model.n_features, missing=args.missing)
    if args.proba:
        scores, probs, expected = model.ensemble.score_and_relevance(data.features, data.query_offsets)
        extra = ["\t" + "\t".join(repr(float(v)) for v in (e, *p)) for e, p in zip(expected, probs, strict=True)]
        header = "\t".join(["qid", "docid", "rank", "score"] if args.rank else ["score"]) + "\texpected_grade\t" \
            + "\t".join(f"p{k}" for k in range(probs.shape[1])) + "\n"
    else:
        scores = model.ensemble.score(data.features, data.query_offsets)
        extra = [""] * scores.shape[0]
        header = ""
    out = open(args.output, "w") if args.output else sys.stdout
    try:
        out.write(header)
        if not args.rank:
            out.writelines(f"{float(s)!r}{e}\n" for s, e in zip(scores, extra, strict=True))
            return 0
        off = data.query_offsets
        for q in range(off.shape[0] - 1):
            lo, hi = int(off[q]), int(off[q + 1])
            order = np.argsort(-scores[lo:hi], kind="stable")
            for r, j in enumerate(order, start=1):
                docid = data.docids[lo + j] if data.docids is not None and data.docids[lo + j] else str(j)
                out.write(f"{data.qids[q]}\t{docid}\t{r}\t{float(scores[lo + j])!r}{extra[lo + j]}\n")
    finally:
        if args.output:
            out.close()
    return 0


def run_serve(args: argparse.Namespace) -> int:
    from tunemix.core.artifact import list_versions, versions_on_disk
    from tunemix.service.__main__ import main
    from tunemix.service.serve_options import to_environment
    from tunemix.service.settings import Settings

    to_environment(args)
    settings = Settings()
    name, root = settings.default_model, settings.models_dir
    if not list_versions(root, name):  # a clear error now, not a service that never gets ready
        known = ", ".join(versions_on_disk(root)) or "none"
        raise FileNotFoundError(f"model {name!r} has no trained version under {root} (models there: {known}); "
                                "train one (tunemix demo, tunemix train) or name another with --model")
    main([])  # the options are in the environment now; main's own parser sees none
    return 0


def run_models(args: argparse.Namespace) -> int:
    from tunemix.core.artifact import read_manifest, versions_on_disk

    root = Path(args.models_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"{root}: no such models directory")
    rows = []
    for name, versions in versions_on_disk(root).items():
        for v in versions:
            try:
                created = read_manifest(root / name / v).get("created", "")
            except (OSError, ValueError):  # ArtifactError is a ValueError
                created = "(unreadable manifest)"
            rows.append((name, v, str(created)))
    if not rows:
        sys.stdout.write(f"no trained model under {root}\n")
        return 0
    width = max(len(r[0]) for r in rows)
    sys.stdout.write(f"{'model':<{width}}  version  created\n")
    sys.stdout.writelines(f"{n:<{width}}  {v:<7}  {c}\n" for n, v, c in rows)
    return 0


def find_document(data: Any, doc: str, qid: str | None, file: str) -> int:
    """The row of ``doc`` (a docid, ``qid:N`` the N-th document of query qid, or ``line:N`` the
    N-th document of the file) in ``data``."""
    off, qids = data.query_offsets, [str(q) for q in data.qids]
    head, sep, tail = doc.rpartition(":")
    if head.startswith("qid:") and sep and tail.isdigit():  # qid:Q:N, as the LETOR line writes the query
        if head[4:] not in qids:
            raise ValueError(f"{file}: --doc {doc}: no query {head[4:]!r} in the file ({len(qids)} queries, "
                             f"e.g. {', '.join(qids[:3])})")
        head = head[4:]
    if head == "line" and tail.isdigit():
        if not 1 <= int(tail) <= data.n_docs:
            raise ValueError(f"{file}: --doc {doc}: the file has {data.n_docs} documents")
        return int(tail) - 1
    if sep and tail.isdigit() and head in qids:
        q = qids.index(head)
        n = int(off[q + 1] - off[q])
        if not 1 <= int(tail) <= n:
            raise ValueError(f"{file}: query {head} has {n} documents; --doc {doc} asks for document {tail}")
        return int(off[q]) + int(tail) - 1
    if data.docids is None:
        raise ValueError(f"{file}: --doc {doc}: not a query:position or line:N, and the file has no "
                         f"'# docid = X' comments; name the document as {DOC_FORMS}")
    rows = [int(r) for r in (data.docids == doc).nonzero()[0]]
    if qid is not None:
        rows = [r for r in rows if qids[int((off <= r).sum()) - 1] == qid]
    if not rows:
        raise ValueError(f"{file}: no document {doc!r}" + (f" in query {qid}" if qid is not None else "")
                         + f"; --doc takes {DOC_FORMS}")
    if len(rows) > 1:
        found = sorted({qids[int((off <= r).sum()) - 1] for r in rows})
        raise ValueError(f"{file}: document {doc!r} occurs in queries {', '.join(found)}: say which with --qid")
    return rows[0]


def run_explain(args: argparse.Namespace) -> int:
    import numpy as np

    from tunemix.core.data.svmlight import read_svmlight

    if len(args.doc) > 2:
        raise ValueError("--doc: one document, or two for a pair")
    if args.top < 1 or args.budget < 1:
        raise ValueError("--top and --budget must be at least 1")
    model = _load(args)
    data = read_svmlight(args.file, n_features=model.n_features, missing=args.missing)
    rows = [find_document(data, d, args.qid, args.file) for d in args.doc]
    off = data.query_offsets
    q = [int(np.searchsorted(off, r, side="right") - 1) for r in rows]
    if len(rows) == 2 and q[0] != q[1]:
        raise ValueError(f"{args.file}: {args.doc[0]} and {args.doc[1]} are in different queries "
                         f"({data.qids[q[0]]} and {data.qids[q[1]]}): a pair is explained within one query")
    lo, hi = int(off[q[0]]), int(off[q[0] + 1])
    x = data.features[lo:hi]
    local = [r - lo for r in rows]
    if len(rows) == 1:
        e = model.explain(x, group=[hi - lo], rows=local, method=args.method, budget=args.budget)
        c, exact, columns = e.contributions[0], bool(e.exact[0]), ("value", "median")
        values = (x[local[0]], e.reference[0])
        head = (f"query {data.qids[q[0]]}, document {args.doc[0]} ({hi - lo} documents in the query)\n"
                f"score {e.scores[0]:.6g} = {e.baseline[0]:.6g} from the rest of the list (what the query's median "
                "document would score in its place) + the features' contributions")
        se = float(e.standard_error[0].max())
    else:
        p = model.explain_pair(x, local[0], local[1], group=[hi - lo], method=args.method, budget=args.budget)
        c, exact, columns = p.contributions, p.exact, (args.doc[0], args.doc[1])
        values = (x[local[0]], x[local[1]])
        v = p.rest_of_list
        rest = f" {'+' if v >= 0 else '-'} {abs(v):.6g} from the rest of the list" if v != 0.0 else ""
        head = (f"query {data.qids[q[0]]}: {args.doc[0]} scores {p.score_a:.6g}, {args.doc[1]} {p.score_b:.6g}\n"
                f"difference {p.score_a - p.score_b:+.6g} = the features' contributions{rest}")
        se = float(p.standard_error.max())
    names = model.feature_names
    width = max(len(n) for n in (*names, "feature"))
    wide = max(10, *(len(col) for col in columns))
    top = np.array([f for f in np.argsort(-np.abs(c), kind="stable")[: args.top] if c[f] != 0.0], dtype=np.int64)
    how = ("exact" if args.method == "exact" else "the whole model's Shapley values") if exact else \
        f"a sampled estimate, largest standard error {se:.2g}"
    lines = [f"{head} ({how})", f"  {'feature':<{width}}  {columns[0]:>{wide}}  {columns[1]:>{wide}}  contribution"]
    lines += [f"  {names[f]:<{width}}  {values[0][f]:>{wide}.4g}  {values[1][f]:>{wide}.4g}  {c[f]:+.6g}" for f in top]
    others = int(np.count_nonzero(c)) - top.size
    if others:
        lines.append(f"  {'(the other ' + str(others) + ')':<{width + 2 * wide + 4}}  {c.sum() - c[top].sum():+.6g}")
    if not np.any(c):
        lines.append("  (no feature contributes: the document matches the reference wherever the model looks)")
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


def run_importance(args: argparse.Namespace) -> int:
    """``tunemix importance``: the mean absolute exact contribution per feature, largest first."""
    import numpy as np

    from tunemix.core.data.svmlight import read_svmlight
    from tunemix.train.importance import global_importance

    if args.top < 0:
        raise ValueError("--top must be at least 0")
    model = _load(args)
    data = read_svmlight(args.file, n_features=model.n_features, missing=args.missing)
    mean, queries, docs = global_importance(model.ensemble, data.features, data.query_offsets)
    names = model.feature_names
    order = np.argsort(-mean, kind="stable")
    order = order[: args.top] if args.top else order
    width = max(len(n) for n in (*names, "feature"))
    lines = [f"{args.file}: mean absolute contribution to the score over {docs} documents of {queries} queries "
             "(exact explanations against each query's median document)",
             f"  {'feature':<{width}}  mean |contribution|"]
    lines += [f"  {names[f]:<{width}}  {mean[f]:.6g}" for f in order]
    sys.stdout.write("\n".join(lines) + "\n")
    return 0
