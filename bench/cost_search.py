"""A generative search for costly requests: bodies built from a grammar of each endpoint's schema,
sent to the real service, the worst cost found per endpoint reported.

    python -m bench.cost_search                      # 30 bodies per endpoint (~5 min on 2 busy cores)
    python -m bench.cost_search --bodies 100 --seed 3
    python -m bench.cost_search --bodies 30 --seed 0 --attacks answers,held,artifacts --attack-s 10  # ~10 min
    python -m bench.cost_search --bodies 0 --attacks held --per-class 6 --seed 2   # the attacks alone

Writes ``bench/results/cost_search.json`` (``--name``: another name); prints the attacks as a table.
Exits 1 when an attack breaks one of its three properties (below).

**Server**: ``python -m tunemix.service`` with two workers and its default settings (and a reload
token), serving the 46-feature model ``bench.bench_request_cost`` trains. **Bodies** (``Grammar``):
each endpoint's schema (/rank's columnar and documents forms, dense and sparse features, explain and
explain_pair; /evaluate's scores, rankings and features; /fuse's methods and systems), each part
drawn from productions that cost a decoder or a check the most: empty, huge and nested lists, long
strings, many (unknown or sparse) keys, repeated keys, integers beyond 64 bits, and, for the sorts,
adversarial orders (ascending, descending, all tied, organ pipe). A body is grown by repetition
towards a size drawn log-uniformly up to the body limit. **Measures**, per body: the CPU seconds of
both workers (``/proc``, summed: the idle one costs nothing), the wall time, the status, the slowest
``/health`` answer meanwhile, and whether both workers are still the same processes; over the run,
each worker's peak memory rise (``VmHWM``) against the largest body sent. Per endpoint: the worst
CPU-s per MiB (a body under 64 KiB counted as 64 KiB), the worst CPU-s and wall of one request, the
statuses seen, workers lost, answers 500.

**Attacks** (``--attacks``, after the bodies; ``bench.cost_attacks``): answers nobody reads, bodies
held, crafted artifacts, their sizes, counts and rates drawn from the same seed, each run while a
steady client sends plain 100-document /rank requests at ``--steady-rate`` a second (first alone,
for the quiet figures). Per attack: the fraction of those answered 200 and their p50 and p99, each
worker's peak memory rise against ``bench.cost_attacks.memory_bound`` (resting size + 2 x
``DECODED_BODY_MULTIPLE`` x ``TUNEMIX_MAX_BODY_BYTES`` + ``TUNEMIX_MAX_INFLIGHT_BYTES``, the bound
docs/service.md states), the worker pids before and after, the statuses the attackers saw; it
holds when no worker is lost, memory stays within the bound and at least 90% of the plain
requests are answered 200.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from bench.bench_request_cost import (
    MIB,
    N_FEATURES,
    SMALL_BODY,
    Server,
    cpu_seconds,
    health_poller,
    proc_status,
    train_model,
)
from bench.common import machine_probe_ms, write_result
from bench.cost_attacks import CLASSES, SERVED_FLOOR, STEADY_DOCUMENTS, Target, memory_bound, run_attacks, table

JSON = {"Content-Type": "application/json"}


class Grammar:
    """Random bodies for /rank, /evaluate and /fuse (see the module docstring)."""

    def __init__(self, rng: random.Random, limit: int, n_features: int = N_FEATURES) -> None:
        self.rng = rng
        self.limit = limit
        self.n_features = n_features  # the served model's (a row of n_features + 1 values is one bad shape)

    # ------------------------------------------------------------------ terminals
    def size(self) -> int:
        """A target body size, log-uniform from 100 bytes to the body limit."""
        return int(math.exp(self.rng.uniform(math.log(100), math.log(self.limit - 2048))))

    def id(self) -> Any:
        r = self.rng.random()
        if r < 0.1:
            return "x" * self.rng.choice([256, 257, 5000])
        if r < 0.2:
            return self.rng.choice([2**63, -(2**63) - 1, 10**30, 2**63 - 1])
        if r < 0.3:
            return self.rng.choice([[], {}, None, 1.5, True])
        return self.rng.choice([self.rng.randrange(10**6), f"d{self.rng.randrange(10**6)}"])

    def order(self, n: int) -> list[float]:
        """Scores in an order adversarial for sorts (or random)."""
        kind = self.rng.choice(["ascending", "descending", "tied", "organ", "random"])
        if kind == "ascending":
            return [float(i) for i in range(n)]
        if kind == "descending":
            return [float(n - i) for i in range(n)]
        if kind == "tied":
            return [0.5] * n
        if kind == "organ":
            return [float(min(i, n - i)) for i in range(n)]
        return [self.rng.random() for _ in range(n)]

    def count(self, big: int) -> int:
        """A list length: empty, one, small, or as many as ``big``."""
        return self.rng.choice([0, 1, self.rng.randint(2, 20), big])

    def features(self, dense: bool) -> Any:
        r = self.rng.random()
        if r < 0.1:  # the wrong width, or nested
            return self.rng.choice([[], [[0.5]], [0.5] * (self.n_features + 1)])
        if dense:
            return [round(self.rng.random(), 3) for _ in range(self.n_features)]
        keys = self.rng.choice([self.n_features, 3, 2000])
        return {str(self.rng.randint(1, max(keys, 1))): 0.5 for _ in range(keys)}

    # ------------------------------------------------------------------ bodies
    def rank(self, n: int) -> dict[str, Any]:
        dense = self.rng.random() < 0.7
        if self.rng.random() < 0.5:
            q: dict[str, Any] = {"qid": self.id(), "ids": [f"d{j}" for j in range(n)],
                                 "features": [self.features(True) for _ in range(n)]}
        else:
            q = {"qid": self.id(), "documents": [{"id": f"d{j}", "features": self.features(dense)}
                                                 for j in range(n)]}
        if self.rng.random() < 0.2 and n >= 2:
            q["explain_pair"] = ["d0", f"d{n - 1}"]
        body: dict[str, Any] = {"queries": [q]}
        if self.rng.random() < 0.3:
            body["explain"] = self.rng.choice([1, 5, 10_000])
            body["top_k"] = self.rng.choice([1, 20, 10**30])
        if self.rng.random() < 0.2:
            body["relevance"] = True
        return body

    def evaluate(self, n: int) -> dict[str, Any]:
        labels = [self.rng.choice([0, 1, 2, 3, 1000]) for _ in range(n)]
        q: dict[str, Any] = {"qid": self.id(), "labels": labels}
        kind = self.rng.choice(["scores", "ranking", "features"])
        if kind == "scores":
            q["scores"] = self.order(n)
        elif kind == "ranking":
            q["docids"] = [f"d{j}" for j in range(n)]
            q["ranking"] = list(reversed(q["docids"]))
        else:
            q["features"] = [self.features(True) for _ in range(n)]
        metrics = self.rng.choice([["ndcg@10"], [f"ndcg@{k}" for k in range(1, 33)], ["err", "map", "p@5"],
                                   ["dcg@2147483647", "err@10:top=3"]])
        body = {"queries": [q], "metrics": metrics, "convention": self.rng.choice(["yahoo", "trec", "ranx", "all"]),
                "per_query": self.rng.random() < 0.3}
        if kind == "features":
            body["model"] = "default"
        return body

    def fuse(self, n: int) -> dict[str, Any]:
        systems = []
        for _ in range(self.rng.choice([1, 2, 10, 64])):
            ids = [f"d{self.rng.randrange(max(n, 1))}" for _ in range(n)]
            s: dict[str, Any] = {"ids": list(dict.fromkeys(ids)) or ["d0"]}
            if self.rng.random() < 0.5:
                s["scores"] = self.order(len(s["ids"]))
            systems.append(s)
        return {"queries": [{"qid": self.id(), "systems": systems}],
                "method": self.rng.choice(["rrf", "combsum", "combmnz", "condorcet"]),
                "top_k": self.rng.choice([None, 1, 10**30])}

    def body(self, endpoint: str) -> bytes:
        """One body for ``endpoint``: a few queries of the schema, grown towards a drawn size by
        repeating queries (or one query's list), with hostile touches now and then."""
        target = self.size()
        make: Callable[[int], dict[str, Any]] = {"/rank": self.rank, "/evaluate": self.evaluate,
                                                 "/fuse": self.fuse}[endpoint]
        per_doc = {"/rank": 8 * self.n_features, "/evaluate": 12, "/fuse": 8}[endpoint]
        if self.rng.random() < 0.5:  # one long list
            doc = make(max(1, min(target // per_doc, 100_000)))
        else:  # many queries
            doc = make(self.count(50) or 1)
            one = len(json.dumps(doc["queries"][0]))
            doc["queries"] = doc["queries"] * max(1, min(target // max(one, 1), 20_000))
        text = json.dumps(doc, separators=(",", ":"))
        r = self.rng.random()
        if r < 0.08:  # a repeated key
            text = text[:-1] + ',"queries":[]}'
        elif r < 0.16:  # many unknown keys
            text = text[:-1] + "," + ",".join(f'"k{i}":0' for i in range(min(target // 8, 200_000))) + "}"
        elif r < 0.22:  # deep nesting where a list goes
            depth = min(target // 2, 100_000)
            text = text.replace('"queries":[', '"queries":' + "[" * depth + "[", 1) + "]" * depth
        return text.encode()[: self.limit]


def worker_pids(pid: int) -> list[int]:
    """The uvicorn workers under ``python -m tunemix.service`` (its children but multiprocessing's resource tracker)."""
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return sorted(int(c) for c in children if b"resource_tracker" not in Path(f"/proc/{c}/cmdline").read_bytes())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bodies", type=int, default=30, help="bodies per endpoint (0: none)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--attacks", default="", help="attack classes to run after the bodies, comma-separated: "
                                                      f"{','.join(CLASSES)} (bench.cost_attacks)")
    parser.add_argument("--per-class", type=int, default=0,
                        help="attacks per class, the variants in turn (default: one of each variant)")
    parser.add_argument("--attack-s", type=float, default=15.0, help="seconds each attack runs at least")
    parser.add_argument("--steady-rate", type=float, default=20.0,
                        help="plain 100-document /rank requests a second during the attacks")
    parser.add_argument("--name", default="cost_search", help="result file name (bench/results/<name>.json)")
    args = parser.parse_args(argv)
    classes = [c for c in args.attacks.split(",") if c]
    unknown = set(classes) - set(CLASSES)
    if unknown:
        parser.error(f"--attacks: unknown class(es) {', '.join(sorted(unknown))}; choose among {', '.join(CLASSES)}")
    from tunemix.service.settings import Settings

    token = "cost-search-token"
    settings = Settings(reload_token=token)
    limit = settings.max_body_bytes
    grammar = Grammar(random.Random(args.seed), limit)
    probe = machine_probe_ms()
    per: dict[str, dict[str, Any]] = {}
    attacks: dict[str, list[dict[str, Any]]] = {}
    quiet: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="cost-search-") as tmp:
        work = Path(tmp)
        models = work / "models"
        train_model(models)
        server = Server(models, work / "server.log", workers=2, env={"TUNEMIX_RELOAD_TOKEN": token})
        try:
            server.wait_warm(timeout=1800)
            pids = worker_pids(server.proc.pid)
            resting = {p: proc_status(p)["VmRSS"] for p in pids}
            largest = 0
            stop, worst_health = threading.Event(), [0.0]
            poller = threading.Thread(target=health_poller, args=(server.url, stop, worst_health), daemon=True)
            poller.start()
            with httpx.Client(base_url=server.url, timeout=600) as c:
                for endpoint in ("/rank", "/evaluate", "/fuse") if args.bodies else ():
                    e = per.setdefault(endpoint, {"bodies": 0, "statuses": Counter(), "workers_lost": 0,
                                                  "answers_500": 0, "worst_cpu_s_per_mib": 0.0, "worst_cpu_s": 0.0,
                                                  "worst_wall_s": 0.0, "worst_health_s": 0.0, "worst": {}})
                    for _ in range(args.bodies):
                        body = grammar.body(endpoint)
                        largest = max(largest, len(body))
                        alive = worker_pids(server.proc.pid)
                        before = sum(cpu_seconds(p) for p in alive)
                        worst_health[0] = 0.0
                        t0 = time.perf_counter()
                        try:
                            status = c.post(endpoint, content=body, headers={**JSON, "Connection": "close"}).status_code
                        except httpx.TransportError:
                            status = 0
                        wall = time.perf_counter() - t0
                        now = worker_pids(server.proc.pid)
                        cpu = sum(cpu_seconds(p) for p in now if p in alive) - before
                        e["bodies"] += 1
                        e["statuses"][status] += 1
                        e["answers_500"] += status == 500
                        if now != alive:
                            e["workers_lost"] += 1
                        per_mib = cpu / max(len(body), SMALL_BODY) * MIB
                        for key, value in (("worst_cpu_s_per_mib", per_mib), ("worst_cpu_s", cpu),
                                           ("worst_wall_s", wall), ("worst_health_s", worst_health[0])):
                            if value > e[key]:
                                e[key] = round(value, 4)
                                e["worst"][key] = {"body_bytes": len(body), "status": status,
                                                   "head": body[:160].decode("utf-8", "replace")}
            stop.set()
            poller.join()
            rises = {p: proc_status(p)["VmHWM"] - resting[p] for p in pids if Path(f"/proc/{p}").exists()}
            if classes:
                target = Target(server.url, settings, N_FEATURES, models, models / "default" / "v1", token)
                quiet, attacks = run_attacks(classes, target, lambda: worker_pids(server.proc.pid), resting,
                                             seed=args.seed, per_class=args.per_class, attack_s=args.attack_s,
                                             steady_rate=args.steady_rate)
        finally:
            server.stop()
    for e in per.values():
        e["statuses"] = {str(k): v for k, v in sorted(e["statuses"].items())}
    command = f"python -m bench.cost_search --bodies {args.bodies} --seed {args.seed}" + (
        f" --attacks {','.join(classes)}" if classes else "") + (
        f" --per-class {args.per_class}" if args.per_class else "") + (
        f" --attack-s {args.attack_s:g}" if args.attack_s != 15.0 else "") + (
        f" --steady-rate {args.steady_rate:g}" if args.steady_rate != 20.0 else "")
    out: dict[str, Any] = {
        "command": command, "max_body_bytes": limit, "machine_probe_ms": [probe, machine_probe_ms()],
        "endpoints": per, "largest_body_bytes": largest,
        "peak_rise_per_largest_body_byte": {str(p): round(r / max(largest, 1), 2) for p, r in rises.items()}}
    if classes:
        out.update(steady_quiet=quiet, attacks=attacks, attack_rules={
            "steady": f"plain {STEADY_DOCUMENTS}-document /rank, {args.steady_rate:g} a second, a fresh connection "
                      "each",
            "served_floor": SERVED_FLOOR, "memory_bound_bytes": memory_bound(settings),
            "memory_bound": "2 x DECODED_BODY_MULTIPLE x max_body_bytes + max_inflight_bytes over the worker's "
                            "resting size (docs/service.md, What a request may cost; Settings.max_inflight_bytes)"})
    path = write_result(args.name, out)
    print(json.dumps({k: v for k, v in out.items() if k != "attacks"}, indent=1)[:4000])
    if classes:
        print(table(attacks))
    print(f"wrote {path}")
    return 0 if all(r["holds"] for rs in attacks.values() for r in rs) else 1


if __name__ == "__main__":
    sys.exit(main())
