"""How the default's cost grows with the data, against the peers in the same run.

``python -m bench.scale`` (JSON in ``bench/results/scale.json``, a log-log plot in
``bench/results/scale.png``): synthetic MSLR-shaped data (McRank's cubic polynomials, 136
features, 5 grades, 60 to 180 documents a query) at about 30k, 120k, 500k and 1M training
documents (validation: a fifth as many queries; test: 100 queries); each system of
``bench.fitproc`` (tunemix's default, ``LGBMRanker()``, LightGBM early-stopped, ``XGBRanker``)
fitted in a process of its own: fit seconds, peak memory of the process tree, test NDCG@10
(yahoo). The ratios to the early-stopped peer are computed per size, in the same run (these
machines are shared: absolute seconds drift, ratios much less).

``--sizes 30000,120000`` picks sizes; ``--timeout S`` stops a fit after S seconds (recorded);
``--update`` re-measures the given sizes and keeps the other rows of the existing ``--out`` (each
row says when and at which commit it was measured: a change that only touches one size
re-measures that size, peers included, not all four).
Goal: at every size the default within 3x the
early-stopped peer's fit time and peak memory, at least its NDCG@10; 1M documents within 15
minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from bench.common import RESULTS, git, machine_info, mslr_shaped_sets
from bench.defaults import ndcg
from bench.fitproc import SYSTEMS, run_fit, warm_up

SIZES = (30_000, 120_000, 500_000, 1_000_000)
MEAN_DOCS_PER_QUERY = 120


def make_sets(train_docs: int, seed: int = 0) -> dict[str, Any]:
    q = max(train_docs // MEAN_DOCS_PER_QUERY, 10)
    return mslr_shaped_sets({"train": q, "vali": max(q // 5, 20), "test": 100}, seed)


def run(sizes: list[int], systems: list[str], timeout_s: float | None) -> dict[str, Any]:
    report: dict[str, Any] = {"machine": machine_info(), "measure": "ndcg@10", "convention": "yahoo", "sizes": []}
    if "tunemix" in systems:  # numba's first compilation is not the fit a user meets every time
        report["warm_up"] = warm_up()
    for size in sizes:
        sets = make_sets(size)
        row: dict[str, Any] = {"target_docs": size, "commit": git("rev-parse", "HEAD") or None,
                               "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                               "train_docs": sets["train"].n_docs,
                               "train_queries": sets["train"].n_queries, "vali_docs": sets["vali"].n_docs,
                               "systems": {}}
        for system in systems:
            res = run_fit(system, sets, timeout_s=timeout_s)
            out = {k: v for k, v in res.items() if k != "scores"}
            if "scores" in res:
                out["test_ndcg@10"] = round(ndcg(sets["test"], res["scores"]["test"])[0], 4)
            row["systems"][system] = out
            print(f"{sets['train'].n_docs:>9} docs {system:8s} fit {out.get('fit_s', float('nan')):8.1f} s "
                  f"peak {out['peak_mb']:8.1f} MB test {out.get('test_ndcg@10', float('nan')):.4f} "
                  f"{out.get('error', '')}", flush=True)
        peer = row["systems"].get("lgbm_es", {})
        ours = row["systems"].get("tunemix", {})
        if "fit_s" in peer and "fit_s" in ours:
            row["tunemix_over_lgbm_es"] = {
                "fit_time": round(ours["fit_s"] / peer["fit_s"], 2),
                "peak_memory": round(ours["peak_mb"] / peer["peak_mb"], 2),
                "test_ndcg@10_diff": round(ours["test_ndcg@10"] - peer["test_ndcg@10"], 4)}
        report["sizes"].append(row)
        del sets
    return report


def updated(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """``old`` with the rows of ``new``'s sizes replaced (or added), in size order; the rest of
    ``new`` (machine, warm-up) describes the newest run."""
    rows = {r["target_docs"]: r for r in old.get("sizes", [])}
    rows.update({r["target_docs"]: r for r in new["sizes"]})
    return {**new, "sizes": [rows[k] for k in sorted(rows)]}


def plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for system in SYSTEMS:
        pts = [(r["train_docs"], r["systems"][system]) for r in report["sizes"] if system in r["systems"]]
        pts = [(n, s) for n, s in pts if "fit_s" in s]
        if not pts:
            continue
        axes[0].loglog([n for n, _ in pts], [s["fit_s"] for _, s in pts], marker="o", label=system)
        axes[1].loglog([n for n, _ in pts], [s["peak_mb"] for _, s in pts], marker="o", label=system)
    axes[0].set(xlabel="training documents", ylabel="fit seconds")
    axes[1].set(xlabel="training documents", ylabel="peak MB (process tree)")
    for ax in axes:
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default=",".join(str(s) for s in SIZES))
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--timeout", type=float, default=None)
    ap.add_argument("--out", default=str(RESULTS / "scale.json"))
    ap.add_argument("--update", action="store_true", help="keep the existing rows of the other sizes")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    report = run([int(s) for s in args.sizes.split(",")], args.systems.split(","), args.timeout)
    report["seconds"] = round(time.perf_counter() - t0, 1)
    out = Path(args.out)
    if args.update and out.exists():
        report = updated(json.loads(out.read_text()), report)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1))
    plot(report, out.with_suffix(".png"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
