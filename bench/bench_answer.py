"""/rank's answer in-process: ranking and encoding (``tunemix.service.routers.rank.ranked`` + msgspec) of 100
and 1,000 documents (one query, and 20 queries of 50), without and with the relevance fields;
and, with ``--model`` (a version directory or a models/ name), the scoring itself without and
with the relevance head (``EnsembleModel.score`` against ``score_and_relevance``, one thread, as
a worker scores a short list) on rows of the model's feature count.

    python -m bench.bench_answer [--repeat 300] [--model models/mq2008-fold1]

Median ms over ``--repeat`` calls (a third of it for 1,000 documents). JSON:
bench/results/answer.json.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import numpy as np

from bench.common import median_ms, write_result


def _scoring(where: str, repeat: int) -> dict[str, Any]:
    """Median ms of the model's score and score_and_relevance, one thread, 100 and 1,000 documents."""
    import tunemix
    from tunemix.core.scoring.runtime import single_threaded

    model = tunemix.load(where).ensemble
    head = model.relevance_head
    out: dict[str, Any] = {"model": where, "head_models": None if head is None else head.n_models,
                           "head_trees": None if head is None else head.forest.n_base,
                           "model_bases": model.forest.n_base}
    rng = np.random.default_rng(1)
    with single_threaded():
        for n in (100, 1000):
            x = rng.normal(size=(n, model.n_features)).astype(np.float32)
            off = np.array([0, n], dtype=np.int64)
            model.score_and_relevance(x, off)  # warm
            rep = repeat if n <= 100 else max(repeat // 3, 10)
            row = {"score_ms": median_ms(lambda x=x, off=off: model.score(x, off), rep),
                   "score_and_relevance_ms": median_ms(lambda x=x, off=off: model.score_and_relevance(x, off), rep)}
            out[f"docs_{n}"] = row
            print("scoring", n, row, flush=True)
    return out


def main() -> int:
    from tunemix.service.parsing import CandidateLists
    from tunemix.service.rank_answer import ENCODER, RankAnswer, ranked
    from tunemix.service.rank_body import Options

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=300)
    ap.add_argument("--model", default=None, help="also time scoring with and without the relevance head")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    out: dict[str, Any] = {}
    for n, n_queries in ((100, 1), (1000, 1), (1000, 20)):
        off = np.arange(0, n + 1, n // n_queries, dtype=np.int64)
        lists = CandidateLists(features=np.zeros((n, 1), np.float32), offsets=off,
                               qids=[f"q{i}" for i in range(n_queries)], ids=[f"d{i}" for i in range(n)])
        scores = rng.normal(size=n)
        probs = rng.dirichlet([1.0, 1.0, 1.0], size=n)
        head = (probs, probs @ np.arange(3.0))

        def plain(s: np.ndarray = scores, ls: CandidateLists = lists) -> bytes:
            return ENCODER.encode(RankAnswer(model="m", version="v1", results=ranked(s, ls, None), server_time_ms=1.0))

        def relevance(s: np.ndarray = scores, ls: CandidateLists = lists, h: Any = head) -> bytes:
            return ENCODER.encode(RankAnswer(model="m", version="v1", server_time_ms=1.0,
                                             results=ranked(s, ls, None, h, Options(relevance=True))))

        rep = args.repeat if n <= 100 else max(args.repeat // 3, 10)
        out[f"docs_{n}_queries_{n_queries}"] = {"plain_ms": median_ms(plain, rep),
                                                "relevance_ms": median_ms(relevance, rep),
                                                "bytes_plain": len(plain()), "bytes_relevance": len(relevance())}
        print(n, n_queries, out[f"docs_{n}_queries_{n_queries}"], flush=True)
    if args.model:
        out["scoring"] = _scoring(args.model, args.repeat)
    path = write_result("answer", {"command": "python -m bench.bench_answer " + " ".join(sys.argv[1:]), **out})
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
