"""/fuse memory: the fusion by entries (``tunemix.service.routers.fuse.fuse_entries``) against the dense
documents x systems matrix it replaced, on the body that once cost a worker 670-860 MB.

    python -m bench.bench_fuse_memory

Condorcet (issue 37, reproduction 6): the kernel of ``BEFORE_COMMIT`` (an n x n int64 matrix of
pairwise wins per query, loaded from git) against this one (no matrix), each in a fresh process
on 20 queries of 5,000 documents (one system, a ranking: the reproduction) and on one query of
5,000 documents x 64 systems (the most /fuse takes): CPU seconds and the rise of peak RSS.

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
from tunemix.service.routers.fuse import FuseRequest, fuse_entries
from tunemix.service.settings import Settings
from tunemix.core.ensemble.list_fusion import fuse_lists

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


BEFORE_COMMIT = "0fe30cb"  # the last commit with the n x n Condorcet matrix

CONDORCET = r"""
import importlib.util, json, resource, sys, time
import numpy as np
way, path, n_queries, n, systems = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:6])
if way == "before":
    spec = importlib.util.spec_from_file_location("fusion_kernels_before", path)
    fk = importlib.util.module_from_spec(spec); spec.loader.exec_module(fk)
else:
    from tunemix.core.ensemble import fusion_kernels as fk
fk.condorcet_scores(np.zeros((4, 2)), np.array([0, 4]))
rng = np.random.default_rng(0)
x = np.ascontiguousarray(np.concatenate([np.stack([rng.permutation(n) for _ in range(systems)], 1)
                                         for _ in range(n_queries)]).astype(np.float64))
off = np.arange(0, n * n_queries + 1, n, dtype=np.int64)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t0 = time.process_time()
fused = fk.condorcet_scores(x, off)
cpu = time.process_time() - t0
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"cpu_s": round(cpu, 3), "peak_rss_rise_mb": round((after - before) / 1024, 1),
                  "checksum": float(np.dot(fused, np.arange(fused.shape[0]) % 97))}))
"""


def condorcet() -> dict[str, dict[str, object]]:
    """Before/after Condorcet kernel cost, each case in fresh processes (see the module docstring)."""
    import json
    import subprocess as sp
    import tempfile

    src = sp.run(["git", "show", f"{BEFORE_COMMIT}:tunemix/core/ensemble/fusion_kernels.py"], cwd=ROOT,
                 capture_output=True, text=True, check=True).stdout.replace("cache=True", "cache=False")
    out: dict[str, dict[str, object]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = f"{tmp}/fusion_kernels_before.py"
        with open(path, "w") as fh:
            fh.write(src)
        for case, shape in (("20_queries_x_5000_ids_1_system", (20, 5000, 1)),
                            ("1_query_x_5000_ids_64_systems", (1, 5000, 64))):
            res = {}
            for way in ("after", "before"):
                proc = sp.run([sys.executable, "-c", CONDORCET, way, path, *map(str, shape)], cwd=ROOT,
                              capture_output=True, text=True)
                if proc.returncode != 0:
                    raise RuntimeError(f"condorcet {way} {case}: {proc.stderr[-2000:]}")
                res[way] = json.loads(proc.stdout.strip().splitlines()[-1])
            assert res["after"]["checksum"] == res["before"]["checksum"], "before and after disagree"
            out[case] = res
            print("condorcet", case, res, flush=True)
    return out


def main() -> int:
    import json

    out: dict[str, object] = {"condorcet": condorcet()}
    for way in ("entries", "dense"):
        proc = subprocess.run([sys.executable, "-c", CODE, way], cwd=ROOT, capture_output=True, text=True, check=True)
        out[way] = json.loads(proc.stdout.strip().splitlines()[-1])
        print(way, out[way], flush=True)
    path = write_result("fuse_memory", {"command": "python -m bench.bench_fuse_memory", **out})
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
