"""The figure tables of docs/performance.md (and the README's headline table), written from the
tracked results in bench/results/.

    python -m bench.tables            # rewrite the generated blocks
    python -m bench.tables --check    # exit 1 when a file differs from what would be written

A generated block sits between ``<!-- table:NAME -->`` and ``<!-- /table -->``; everything
outside the blocks is left as it is. Every ``TABLES`` entry has its block in docs/performance.md;
README.md's ``readme`` block is rewritten only when README.md has its markers. Each table reads one
result file (``RESULTS``, the only JSONs git tracks under bench/results/): one number per cell,
the median of the runs where the file holds several (seeds, rounds), never the best; under it
the date and the machine the file records and the command that writes that file again.
tests/bench/test_tables.py keeps the documents equal to what this module writes.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import RESULTS, ROOT

PERFORMANCE = ROOT / "docs" / "performance.md"
README = ROOT / "README.md"
BLOCK = re.compile(r"(<!-- table:(?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- /table -->)", re.S)


# ------------------------------------------------------------------------------ formatting
def num(x: float | None, digits: int = 4) -> str:
    return "n/a" if x is None else f"{x:,.{digits}f}"


def ms(x: float | None) -> str:
    """Milliseconds with three significant digits (0.186, 1.47, 16.4, 148)."""
    if x is None:
        return "n/a"
    return f"{x:.3f}" if x < 1 else f"{x:.2f}" if x < 10 else f"{x:.1f}" if x < 100 else f"{x:,.0f}"


def ratio(a: float | None, b: float | None) -> str:
    return "n/a" if a is None or not b else f"{a / b:.2f}x"


def median(values: Iterable[float]) -> float:
    return float(statistics.median(list(values)))


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *("| " + " | ".join(r) + " |" for r in rows)]


def load(name: str) -> dict[str, Any]:
    return json.loads((RESULTS / f"{name}.json").read_text())


def machine_line(name: str, result: dict[str, Any], command: str) -> str:
    m = result["machine"]
    system = m["platform"].split("-")[0]
    return (f"Measured {m['time'][:10]} on {system} {m['processor']}, {m['cpu_count']} cores (Python {m['python']}, "
            f"numba {m['numba']}); `bench/results/{name}.json`, written by `{command}`.")


# ------------------------------------------------------------------------------ the tables
@dataclass(frozen=True)
class Table:
    name: str                       # the marker and the result file
    command: str                    # writes bench/results/<name>.json again
    rows: Callable[[dict[str, Any]], list[str]]

    def render(self) -> str:
        result = load(self.name)
        return "\n".join([*self.rows(result), "", machine_line(self.name, result, self.command)]) + "\n"


DATA_NAMES = {"mq2008": "MQ2008 (5 folds)", "mslr-sample": "MSLR-WEB10K sample (5 query folds)",
              "synthetic-mslr": "synthetic, MSLR-shaped (1 split)"}


def defaults_rows(r: dict[str, Any]) -> list[str]:
    rows = []
    for key, d in r["datasets"].items():
        s = d["summary"]
        rows.append([DATA_NAMES.get(key, key), num(median(s["tunemix_seeds"]["per_seed"])),
                     num(s["lgbm_es"]["test_ndcg@10"]), num(s["lgbm"]["test_ndcg@10"]), num(s["xgb"]["test_ndcg@10"])])
    seeds = ", ".join(str(x) for x in r["tunemix_seeds"])
    return table(["test NDCG@10 (yahoo), mean over the folds", f"tunemix (median of seeds {seeds})",
                  "LightGBM early-stopped", "LightGBM defaults", "XGBoost"], rows)


def fit_rows(r: dict[str, Any]) -> list[str]:
    s = r["datasets"]["mq2008"]["summary"]
    ours, peer = s["tunemix"], s["lgbm_es1"]
    return table(["MQ2008, five folds", "first fit of a fresh process, s (sum over the folds)",
                  "second fit in that process, s", "peak MB", "test NDCG@10"],
                 [["tunemix, `TuneMixRanker(n_jobs=2)`", num(ours["fit_s"], 1), num(ours.get("warm_fit_s"), 1),
                   num(ours["peak_mb"], 0), num(ours["test_ndcg@10"])],
                  ["LightGBM early-stopped, one thread", num(peer["fit_s"], 1), num(peer.get("warm_fit_s"), 1),
                   num(peer["peak_mb"], 0), num(peer["test_ndcg@10"])],
                  ["tunemix / LightGBM", ratio(ours["fit_s"], peer["fit_s"]),
                   ratio(ours.get("warm_fit_s"), peer.get("warm_fit_s")), ratio(ours["peak_mb"], peer["peak_mb"]),
                   ""]])


def rounds_median(side: dict[str, Any], key: str) -> float:
    return median(rnd[key] for rnd in side["rounds"])


def service_rows(r: dict[str, Any]) -> list[str]:
    (_, s), = r["sets"].items()
    rows = []
    for e in s["scenarios"].values():
        ours, peer = e["ours"], e["peer"]
        rows.append([f"{e['n_docs']:,} documents at {e['rate']:g}/s",
                     ms(rounds_median(ours, "p50_ms")), ms(rounds_median(ours, "p99_ms")),
                     ms(rounds_median(peer, "p50_ms")), ms(rounds_median(peer, "p99_ms")),
                     f"{e['rounds_won']['p50']} / {e['rounds_won']['p99']} of {e['rounds']}",
                     str(ours["errors"])])
    return table(["/rank over HTTP, one query a request", "tunemix p50 ms", "tunemix p99 ms", "peer p50 ms",
                  "peer p99 ms", "rounds won (p50 / p99)", "tunemix errors"], rows)


def explain_rows(r: dict[str, Any]) -> list[str]:
    rows = []
    for key, http_key, label in (("mq2008", "mq2008", "MQ2008 ensemble"),
                                 ("mslr_sample", "mslr_sample_default", "MSLR sample, default model")):
        d, h = r[key], r["rank_http"][http_key]
        ens, lgb = d["ensemble"], d["lightgbm_pred_contrib"]
        rows.append([f"{label} ({ens['n_bases']} bases; LightGBM {lgb['n_trees']} trees)",
                     ms(ens["exact"]["per_document_ms"]), ms(lgb["per_document_ms"]),
                     num(ens["agreement"]["spearman_mean"], 2), ms(h["without_explain"]["p50_ms"]),
                     ms(h["with_explain"]["p50_ms"]),
                     ratio(h["with_explain"]["p50_ms"], h["without_explain"]["p50_ms"])])
    return table(["model", "exact explanation, ms a document", "LightGBM `pred_contrib`, ms a document",
                  "Spearman with whole-model Shapley", "/rank p50 ms, 100 docs", "the same with `\"explain\": 10`",
                  "ratio"], rows)


def explain_lane_rows(r: dict[str, Any]) -> list[str]:
    rows = [[label, str(r[key]["requests"]), ms(r[key]["p50_ms"]), ms(r[key]["p99_ms"])]
            for key, label in (("quiet_before", "quiet"), ("explain_traffic", "two clients sending explain requests"),
                               ("quiet_after", "quiet again"))]
    a = r["explain_answers"]
    rows.append([f"the explain requests themselves ({', '.join(str(x) for x in a['statuses'])})", str(a["count"]),
                 ms(a["median_ms"]), ""])
    return table(["plain /rank, 100 documents, two workers", "requests", "p50 ms", "p99 ms"], rows)


def scale_rows(r: dict[str, Any]) -> list[str]:
    rows = []
    for size in r["sizes"]:
        ours, peer = size["systems"]["tunemix"], size["systems"]["lgbm_es"]
        rows.append([f"{size['train_docs']:,}", num(ours["fit_s"], 0), num(peer["fit_s"], 0),
                     ratio(ours["fit_s"], peer["fit_s"]), num(ours["peak_mb"], 0), num(peer["peak_mb"], 0),
                     num(ours["test_ndcg@10"]), num(peer["test_ndcg@10"])])
    return table(["training documents", "tunemix fit s", "LightGBM fit s", "time ratio", "tunemix peak MB",
                  "LightGBM peak MB", "tunemix NDCG@10", "LightGBM NDCG@10"], rows)


def budget_rows(r: dict[str, Any]) -> list[str]:
    rows = []
    for key, d in r["datasets"].items():
        for row in d["rows"]:
            if row["system"] != "tunemix" or row.get("budget_s") is None:
                continue
            rows.append([f"{key} ({d['train_docs']:,} training documents)", num(row["budget_s"], 0),
                         num(row["fit_s"], 1), "yes" if row["held"] else "no", num(row["test_ndcg@10"])])
    return table(["data", "budget s", "fit s", f"held (at most {r['tolerance']:g} x the budget)", "test NDCG@10"],
                 rows)


def cost_search_rows(r: dict[str, Any]) -> list[str]:
    rows = []
    for endpoint, e in r["endpoints"].items():
        statuses = ", ".join(f"{k}: {v}" for k, v in e["statuses"].items())
        rows.append([endpoint, str(e["bodies"]), statuses, num(e["worst_cpu_s_per_mib"], 2),
                     num(e["worst_cpu_s"], 2), ms(e["worst_health_s"] * 1e3), str(e["workers_lost"]),
                     str(e["answers_500"])])
    lines = table(["endpoint", "bodies", "answers", "worst CPU-s per MiB", "worst CPU-s of one request",
                   "slowest /health meanwhile, ms", "workers lost", "answers 500"], rows)
    if "attacks" not in r:
        return lines
    quiet = r["steady_quiet"]
    bound = r["attack_rules"]["memory_bound_bytes"] / 2**20
    rows = [["quiet (no attack)", "", f"{100 * quiet['fraction_200']:.1f}", ms(quiet["p50_ms"]),
             ms(quiet["p99_ms"]), "", ""]]
    for cls, results in r["attacks"].items():
        for a in results:
            st = a["steady"]
            rows.append([f"{cls}: {a['variant'].replace('_', ' ')}", a["drawn_text"],
                         f"{100 * (st['fraction_200'] or 0):.1f}", ms(st["p50_ms"]), ms(st["p99_ms"]),
                         num(max(a["peak_rise_mib"].values()), 0), str(a["workers_lost"])])
    header = ["attack", "drawn", "plain /rank answered 200, %", "p50 ms", "p99 ms",
              f"largest peak rise of a worker, MiB (bound {bound:.0f})", "workers lost"]
    return [*lines, "", *table(header, rows)]


def first_hour_rows(r: dict[str, Any]) -> list[str]:
    steps, after, train = r["make_serve_steps"], r["after_ready"], r["train_mq2008_fold1"]
    rows = [["install (`uv pip install -e '.[train,serve]'`, no download cache)", num(steps["install"]["seconds"], 1)],
            ["`make train-default`: `tunemix demo`, compiling the kernels first",
             num(steps["demo_with_warm"]["seconds"], 1)],
            ["`python -m tunemix.service` to /ready", num(steps["serve_to_ready_s"], 1)],
            ["**`make serve` to /ready**", num(r["make_serve_to_ready_s"], 1)],
            ["first /rank after /ready (ms)", ms(after["first_rank_ms"])],
            ["first /evaluate after /ready (ms)", ms(after["first_evaluate_ms"])],
            ["first /rank with explanations after /ready (ms)", ms(after["first_explain_ms"])],
            ["first `tunemix train --config configs/mq2008.toml`", num(train["first"]["seconds"], 1)],
            ["the second, same cache", num(train["second"]["seconds"], 1)]]
    return table(["a fresh clone, an empty numba cache", "seconds"], rows)


TABLES = (
    Table("defaults", "python -m bench.defaults --datasets mq2008,mslr-sample,synthetic-mslr "
          "--systems tunemix,lgbm,lgbm_es,xgb", defaults_rows),
    Table("defaults_fit_mq2008", "python -m bench.defaults --datasets mq2008 --systems tunemix,lgbm_es1 --seeds 0 "
          "--warm-fits --name defaults_fit_mq2008", fit_rows),
    Table("service_mq2008", "python -m bench.bench_service --model-set mq2008 --rate 100 --duration 40 "
          "--duration-1000 30 --skip-breakdown --name service_mq2008", service_rows),
    Table("service_mslr-default", "python -m bench.bench_service --model-set mslr-default --rate 100 --duration 40 "
          "--duration-1000 30 --skip-breakdown --name service_mslr-default", service_rows),
    Table("explain", "python -m bench.bench_explain --model models/mq2008-fold1/v1 "
          "--mslr-model models/mslr-sample-default/v1", explain_rows),
    Table("explain_lane", "python -m bench.bench_explain_lane", explain_lane_rows),
    Table("scale", "python -m bench.scale", scale_rows),
    Table("budget", "python -m bench.budget --datasets synthetic-120k,mq2008-fold1 --budgets 10,60 --no-default "
          "--no-peer", budget_rows),
    Table("cost_search", "python -m bench.cost_search --bodies 30 --seed 0 --attacks answers,held,artifacts "
          "--attack-s 10", cost_search_rows),
    Table("first_hour", "python -m bench.bench_first_hour --install", first_hour_rows),
)
BY_NAME = {t.name: t for t in TABLES}
#: the result files the tables read: the JSONs git tracks under bench/results/
TRACKED = tuple(f"{t.name}.json" for t in TABLES)


# ------------------------------------------------------------------------------ the README's headline
def readme_block() -> str:
    """The README's small table: out-of-the-box quality, fit time, /rank latency and an explanation's
    cost against LightGBM, each figure from the tables of docs/performance.md."""
    d, fit, svc, ex = load("defaults"), load("defaults_fit_mq2008"), load("service_mq2008"), load("explain")
    rows = []
    for key, label in (("mq2008", "MQ2008"), ("mslr-sample", "MSLR-WEB10K sample")):
        s = d["datasets"][key]["summary"]
        rows.append([f"out of the box, test NDCG@10 on {label} (5 folds)",
                     f"**{num(median(s['tunemix_seeds']['per_seed']))}**",
                     f"{num(s['lgbm_es']['test_ndcg@10'])} (early-stopped)", "`python -m bench.defaults`"])
    s = fit["datasets"]["mq2008"]["summary"]
    rows.append(["fit seconds, MQ2008's five folds, the first fit of a fresh process (imports included)",
                 f"{num(s['tunemix']['fit_s'], 1)} s ({ratio(s['tunemix']['fit_s'], s['lgbm_es1']['fit_s'])})",
                 f"{num(s['lgbm_es1']['fit_s'], 1)} s (early-stopped, one thread)",
                 "`python -m bench.defaults --datasets mq2008 --systems tunemix,lgbm_es1 --seeds 0 --warm-fits`"])
    if "warm_fit_s" in s["tunemix"] and "warm_fit_s" in s["lgbm_es1"]:
        rows.append(["fit seconds, the same five folds, the second fit in that process",
                     f"{num(s['tunemix']['warm_fit_s'], 1)} s "
                     f"({ratio(s['tunemix']['warm_fit_s'], s['lgbm_es1']['warm_fit_s'])})",
                     f"{num(s['lgbm_es1']['warm_fit_s'], 1)} s (early-stopped, one thread)", "the same"])
    (_, sset), = svc["sets"].items()
    e = sset["scenarios"]["docs_100"]
    rows.append(["/rank over HTTP, 100 MQ2008 documents at 100/s, p50 / p99",
                 f"**{ms(rounds_median(e['ours'], 'p50_ms'))} / {ms(rounds_median(e['ours'], 'p99_ms'))} ms**",
                 f"{ms(rounds_median(e['peer'], 'p50_ms'))} / {ms(rounds_median(e['peer'], 'p99_ms'))} ms "
                 "(FastAPI + `predict`)", "`python -m bench.bench_service --model-set mq2008`"])
    ens, lgb = ex["mq2008"]["ensemble"], ex["mq2008"]["lightgbm_pred_contrib"]
    http = ex["rank_http"]["mq2008"]
    rows.append(["exact explanation of one MQ2008 document",
                 f"{ms(ens['exact']['per_document_ms'])} ms; /rank p50 with `\"explain\": 10` "
                 f"{ratio(http['with_explain']['p50_ms'], http['without_explain']['p50_ms'])} the plain one",
                 f"{ms(lgb['per_document_ms'])} ms (`pred_contrib`, {lgb['n_trees']} trees)",
                 "`python -m bench.bench_explain`"])
    lines = table(["", "tunemix", "LightGBM", "reproduce"], rows)
    return "\n".join([*lines, "", "Medians of the runs on a shared 2-core machine; dates, machines and every "
                      "figure: [docs/performance.md](docs/performance.md)."]) + "\n"


# ------------------------------------------------------------------------------ rewriting
def blocks(text: str) -> list[str]:
    return [m.group("name") for m in BLOCK.finditer(text)]


def rewrite(text: str, render: Callable[[str], str]) -> str:
    """``text`` with every generated block's body replaced by ``render(name)``."""
    return BLOCK.sub(lambda m: m.group(1) + render(m.group("name")) + m.group(4), text)


def render_performance(name: str) -> str:
    if name not in BY_NAME:
        raise SystemExit(f"docs/performance.md: no table named {name!r} (bench.tables knows {', '.join(BY_NAME)})")
    return BY_NAME[name].render()


def render_readme(name: str) -> str:
    if name != "readme":
        raise SystemExit(f"README.md: no table named {name!r} (only 'readme')")
    return readme_block()


def expected() -> dict[Path, str]:
    """Each document as this module writes it (README.md only when it has the readme block)."""
    text = PERFORMANCE.read_text()
    missing = [t.name for t in TABLES if t.name not in blocks(text)]
    if missing:
        raise SystemExit(f"docs/performance.md lacks the blocks {', '.join(missing)}")
    out = {PERFORMANCE: rewrite(text, render_performance)}
    if README.exists() and blocks(README.read_text()):
        out[README] = rewrite(README.read_text(), render_readme)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.tables", description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 when a file would change")
    args = parser.parse_args(argv)
    stale = []
    for path, text in expected().items():
        if path.read_text() != text:
            stale.append(path)
            if not args.check:
                path.write_text(text)
    for path in stale:
        print(f"{path.relative_to(ROOT)}: {'differs from the results' if args.check else 'rewritten'}")
    return 1 if stale and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
