"""/fuse memory: the fusion by entries (``app.routers.fuse.fuse_entries``) against the dense
documents x systems matrix it replaced, on the body that once cost a worker 670-860 MB.

    python -m bench.bench_fuse_memory

The body (about 156 KiB): one query of 6,000 one-id systems and one query of one system of
6,000 ids. Each way runs in a fresh process with the systems bound raised to let the body in;
the figure is the rise of the process's peak RSS over the fusion alone (the kernels warmed on a
small body first). JSON: bench/results/fuse_memory.json.
"""

from __future__ import annotations

import subprocess
import sys

from bench.common import ROOT, write_result

CODE = r"""
import json, resource, sys
import numpy as np
import msgspec
from app.routers.fuse import FuseRequest, fuse_entries
from app.settings import Settings
from training.ensemble.list_fusion import fuse_lists

def dense(req):
    # the layout /fuse used before: distinct ids x the most systems of any query, NaN where absent
    n_sys = max(len(q.systems) for q in req.queries)
    blocks = []
    for q in req.queries:
        index = {}
        for s in q.systems:
            for d in s.ids:
                index.setdefault(str(d), len(index))
        mat = np.full((len(index), n_sys), np.nan)
        for m, s in enumerate(q.systems):
            mat[[index[str(d)] for d in s.ids], m] = np.arange(len(s.ids), 0, -1, dtype=np.float64)
        blocks.append(mat)
    off = np.concatenate([[0], np.cumsum([b.shape[0] for b in blocks])])
    return fuse_lists(np.concatenate(blocks), off, req.method)

way = sys.argv[1]
body = {"queries": [{"qid": "a", "systems": [{"ids": [str(i)]} for i in range(6000)]},
                    {"qid": "b", "systems": [{"ids": [str(i) for i in range(6000)]}]}]}
raw = json.dumps(body).encode()
req = msgspec.json.decode(raw, type=FuseRequest)
small = msgspec.convert({"queries": [{"qid": "w", "systems": [{"ids": ["x", "y"]}, {"ids": ["y"]}]}]}, FuseRequest)
run = (lambda r: fuse_entries(r, Settings(max_fuse_systems=6000))[1]) if way == "entries" else dense
run(small)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
fused = run(req)
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"body_kib": round(len(raw) / 1024, 1), "peak_rss_rise_mb": round((after - before) / 1024, 1),
                  "documents": int(fused.shape[0])}))
"""


def main() -> int:
    import json

    out = {}
    for way in ("entries", "dense"):
        proc = subprocess.run([sys.executable, "-c", CODE, way], cwd=ROOT, capture_output=True, text=True, check=True)
        out[way] = json.loads(proc.stdout.strip().splitlines()[-1])
        print(way, out[way], flush=True)
    path = write_result("fuse_memory", {"command": "python -m bench.bench_fuse_memory", **out})
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
