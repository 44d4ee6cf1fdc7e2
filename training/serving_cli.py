"""``tunemix predict``, ``tunemix serve`` and ``tunemix models``: the trained models from the
command line.

``predict`` writes one score a line in the file's order (as LightGBM's predict task and
RankLib's ``-score``), or with ``--rank`` one line per document ``qid docid rank score``, best
first within each query; ``--proba`` adds, tab-separated, the expected grade and P(grade = k) for
every grade (the relevance head); ``--model`` is a model name under ``--models-dir`` or a version or model
directory.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("predict", help="score a LETOR/SVMlight file with a trained model",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("file", help="LETOR/SVMlight file (labels are read and ignored)")
    p.add_argument("--model", required=True, help="model name under --models-dir, or a model/version directory")
    p.add_argument("--models-dir", default="models", help="where model names are looked up (default: models)")
    p.add_argument("--version", help="a version of the model (default: the latest)")
    p.add_argument("-o", "--output", help="write here instead of standard output")
    p.add_argument("--rank", action="store_true", help="write 'qid docid rank score' per document, best first")
    p.add_argument("--proba", action="store_true",
                   help="also write each document's expected grade and P(grade = k) for every k (tab-separated)")
    p.set_defaults(func=run_predict)

    s = subparsers.add_parser("serve", help="serve the models over HTTP (what `python -m app` does)")
    s.add_argument("--models-dir", help="directory of <name>/vN versions (TUNEMIX_MODELS_DIR)")
    s.add_argument("--model", help="the default model (TUNEMIX_DEFAULT_MODEL)")
    s.add_argument("--port", type=int, help="port (TUNEMIX_PORT)")
    s.add_argument("--workers", type=int, help="worker processes (TUNEMIX_WORKERS)")
    s.set_defaults(func=run_serve)

    m = subparsers.add_parser("models", help="list the trained models and their versions")
    m.add_argument("--models-dir", default="models", help="default: models")
    m.set_defaults(func=run_models)


def run_predict(args: argparse.Namespace) -> int:
    import numpy as np

    import tunemix
    from training.data.svmlight import read_svmlight

    model = tunemix.load(args.model, models_dir=None if Path(args.model).is_dir() else args.models_dir,
                         version=args.version)
    data = read_svmlight(args.file, n_features=model.n_features)
    if args.proba:
        scores, probs, expected = model.ensemble.score_and_relevance(data.features, data.query_offsets)
        extra = ["\t" + "\t".join(repr(float(v)) for v in (e, *p)) for e, p in zip(expected, probs, strict=True)]
    else:
        scores = model.ensemble.score(data.features, data.query_offsets)
        extra = [""] * scores.shape[0]
    out = open(args.output, "w") if args.output else sys.stdout
    try:
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
    for key, value in (("TUNEMIX_MODELS_DIR", args.models_dir), ("TUNEMIX_DEFAULT_MODEL", args.model),
                       ("TUNEMIX_PORT", args.port), ("TUNEMIX_WORKERS", args.workers)):
        if value is not None:
            os.environ[key] = str(value)
    from app.__main__ import main
    from app.settings import Settings
    from training.artifact.store import list_versions, versions_on_disk

    settings = Settings()
    name, root = settings.default_model, settings.models_dir
    if not list_versions(root, name):  # a clear error now, not a service that never gets ready
        known = ", ".join(versions_on_disk(root)) or "none"
        raise FileNotFoundError(f"model {name!r} has no trained version under {root} (models there: {known}); "
                                "train one (tunemix demo, tunemix train) or name another with --model")
    main()
    return 0


def run_models(args: argparse.Namespace) -> int:
    import json

    from training.artifact.store import versions_on_disk

    root = Path(args.models_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"{root}: no such models directory")
    rows = []
    for name, versions in versions_on_disk(root).items():
        for v in versions:
            try:
                created = json.loads((root / name / v / "manifest.json").read_text()).get("created", "")
            except (OSError, ValueError):
                created = "(unreadable manifest)"
            rows.append((name, v, str(created)))
    if not rows:
        sys.stdout.write(f"no trained model under {root}\n")
        return 0
    width = max(len(r[0]) for r in rows)
    sys.stdout.write(f"{'model':<{width}}  version  created\n")
    sys.stdout.writelines(f"{n:<{width}}  {v:<7}  {c}\n" for n, v, c in rows)
    return 0
