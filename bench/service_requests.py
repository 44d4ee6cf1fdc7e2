"""What the service benchmarks share: the /rank request bodies they send, our service's worker
configuration as ``python -m tunemix.service`` resolves it, and their progress log.

``bench.bench_service`` (over HTTP), ``bench.service_breakdown`` (in-process) and
``bench.bench_explain`` import these; none of them imports another's module for them.
"""

from __future__ import annotations

import json
import time
from typing import Any

import numpy as np


def log(msg: str) -> None:
    """One progress line on stdout, with the wall-clock time."""
    print(f"[bench_service {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def service_config(workers: int | None) -> tuple[int, int, int]:
    """(workers, numba threads per worker, parallel floor in documents) of our service as
    ``python -m tunemix.service`` runs it with ``workers`` (None: its default), by its settings' rules."""
    from tunemix.service.settings import Settings

    settings = Settings() if workers is None else Settings(workers=workers)
    resolved = settings.model_copy(update={"workers": settings.worker_processes()})  # as its workers see it
    return resolved.this_process_workers(), resolved.scoring_thread_count(), resolved.parallel_floor()


def make_bodies(test: Any, n_docs: int, n_bodies: int, seed: int) -> list[bytes]:
    """``n_bodies`` request bodies of one query with ``n_docs`` real test rows each (row form,
    features with 6 decimals, as printed in the data files)."""
    rng = np.random.default_rng(seed)
    n = test.features.shape[0]
    ids = test.docids if test.docids is not None else np.array([f"r{i}" for i in range(n)])
    bodies = []
    for b in range(n_bodies):
        rows = rng.choice(n, size=n_docs, replace=n_docs > n)
        docs = [{"id": f"{ids[r]}#{j}", "features": [round(float(v), 6) for v in test.features[r]]}
                for j, r in enumerate(rows.tolist())]
        bodies.append(json.dumps({"queries": [{"qid": f"q{b}", "documents": docs}]},
                                 separators=(",", ":")).encode())
    return bodies


def columnar(body: bytes) -> bytes:
    """The same request in the columnar form (``ids`` + ``features``)."""
    doc = json.loads(body)
    q = doc["queries"][0]
    return json.dumps({"queries": [{"qid": q["qid"], "ids": [d["id"] for d in q["documents"]],
                                    "features": [d["features"] for d in q["documents"]]}]},
                      separators=(",", ":")).encode()


def large_body(test: Any, n_docs: int, max_bytes: int, per_query: int = 1000, seed: int = 0) -> tuple[bytes, int]:
    """A columnar request of ``n_docs`` real test rows in queries of ``per_query`` (features with 6
    decimals), or of the most documents (a multiple of ``per_query``) whose body fits in
    ``max_bytes`` when those do not: (the body, its documents)."""
    rng = np.random.default_rng(seed)
    n = test.features.shape[0]
    rows = rng.choice(n, size=n_docs, replace=n_docs > n)
    feats = [[round(float(v), 6) for v in test.features[r]] for r in rows.tolist()]

    def body(k: int) -> bytes:
        queries = [{"qid": f"q{q}", "ids": [str(j) for j in range(min(per_query, k - lo))],
                    "features": feats[lo:lo + per_query]} for q, lo in enumerate(range(0, k, per_query))]
        return json.dumps({"queries": queries}, separators=(",", ":")).encode()

    k = n_docs
    out = body(k)
    while len(out) > max_bytes and k > per_query:
        k = max(per_query, (int(k * max_bytes / len(out) * 0.98) // per_query) * per_query)
        out = body(k)
    return out, k
