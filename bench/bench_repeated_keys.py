"""What the repeated-key check costs a /rank request, in-process: jiter's pass (``tunemix.service.json_body.
check_repeated_keys``, the check since issue 37's leftovers) against the standard library's
(``tunemix.service.json_body.name_repeated_key``, the check before, now run only to name a repeat jiter found),
timed in the same run on the service benchmark's bodies.

    python -m bench.bench_repeated_keys [--rounds 200] [--name repeated_keys]

Bodies: ``bench.bench_service.make_bodies`` (real test rows, one query, 6 decimals), 100 and
1,000 documents, in the row (``documents``) and the columnar (``ids`` + ``features``) form, for
MQ2008 Fold1 (46 features) and the MSLR-WEB10K sample (136 features). Each round calls every
method once on every body, in turn (so a machine's phase touches all alike); per body and method
the median and the 10th percentile of the calls' thread CPU time (``time.thread_time``: the
worker's GIL time, not the waits of a busy machine). Also, for scale, msgspec's typed decode of
the same body (``decode_json``, which every request pays before the check), jiter with the other
string caches, and two growth checks: one object of 60,000 and of 600,000 distinct keys (a
linear check costs 10 times more for 10 times the keys), and a 1,000-document body whose last
key repeats (jiter's pass plus the naming pass); and each pass's peak traced memory per body
byte on the largest ordinary bodies (``memory``). Writes ``bench/results/<name>.json``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

from bench.common import SHARED_DATA, machine_probe_ms, write_result

MSLR_TEST = SHARED_DATA / "MSLR-WEB10K-sample" / "msn1.fold1.test.5k.txt"
MQ2008_TEST = SHARED_DATA / "MQ2008" / "Fold1" / "test.txt"


def bench_bodies() -> dict[str, bytes]:
    """``{"mq2008_100_row": body, ...}``: one body per data set, list length and form."""
    from bench.bench_service import columnar, make_bodies
    from tunemix.core.data.svmlight import read_svmlight

    out: dict[str, bytes] = {}
    for name, path, d in (("mq2008", MQ2008_TEST, 46), ("mslr", MSLR_TEST, 136)):
        if not path.is_file():
            raise SystemExit(f"bench_repeated_keys: {path} not found (shared/data beside the repository, or set "
                             "TUNEMIX_SHARED_DATA)")
        test = read_svmlight(path, n_features=d)
        for n_docs in (100, 1000):
            row = make_bodies(test, n_docs, 1, seed=n_docs)[0]
            out[f"{name}_{n_docs}_row"] = row
            out[f"{name}_{n_docs}_columnar"] = columnar(row)
    return out


def methods() -> dict[str, Callable[[bytes], Any]]:
    import jiter

    from tunemix.service.json_body import check_repeated_keys, decode_json, name_repeated_key
    from tunemix.service.rank_body import DECODER

    return {
        "stdlib_before": name_repeated_key,
        "jiter_now": check_repeated_keys,
        "jiter_cache_all": lambda b: jiter.from_json(b, catch_duplicate_keys=True, cache_mode="all"),
        "jiter_cache_none": lambda b: jiter.from_json(b, catch_duplicate_keys=True, cache_mode="none"),
        "msgspec_typed_decode": lambda b: decode_json(DECODER, b, "/rank"),
    }


def cpu_ms(fn: Callable[[bytes], Any], body: bytes) -> float:
    t0 = time.thread_time()
    fn(body)
    return (time.thread_time() - t0) * 1e3


def interleaved(bodies: dict[str, bytes], fns: dict[str, Callable[[bytes], Any]], rounds: int) -> dict[str, Any]:
    """Per body: each method's median and 10th percentile over ``rounds`` interleaved calls."""
    samples: dict[tuple[str, str], list[float]] = {(b, m): [] for b in bodies for m in fns}
    for r in range(rounds + 3):  # three unrecorded rounds first
        for b, body in bodies.items():
            for m, fn in fns.items():
                t = cpu_ms(fn, body)
                if r >= 3:
                    samples[b, m].append(t)
    out: dict[str, Any] = {}
    for b, body in bodies.items():
        entry: dict[str, Any] = {"body_bytes": len(body)}
        for m in fns:
            xs = sorted(samples[b, m])
            entry[m] = {"median_ms": round(statistics.median(xs), 4), "p10_ms": round(xs[len(xs) // 10], 4)}
        entry["ratio_now_over_before"] = round(entry["jiter_now"]["median_ms"] / entry["stdlib_before"]["median_ms"],
                                               3)
        entry["saved_ms"] = round(entry["stdlib_before"]["median_ms"] - entry["jiter_now"]["median_ms"], 4)
        out[b] = entry
    return out


def growth(rounds: int) -> dict[str, Any]:
    """One object of n distinct keys, n = 60,000 and 600,000: median CPU ms of each check."""
    from tunemix.service.json_body import check_repeated_keys, name_repeated_key

    out: dict[str, Any] = {}
    for n in (60_000, 600_000):
        body = ("{" + ",".join(f'"k{i}":{i}' for i in range(n)) + "}").encode()
        reps = max(3, rounds // (10 if n < 100_000 else 50))
        out[f"keys_{n}"] = {"body_bytes": len(body),
                            "jiter_now_ms": round(statistics.median(cpu_ms(check_repeated_keys, body)
                                                                    for _ in range(reps)), 3),
                            "stdlib_before_ms": round(statistics.median(cpu_ms(name_repeated_key, body)
                                                                        for _ in range(reps)), 3)}
    for m in ("jiter_now_ms", "stdlib_before_ms"):
        out[f"{m.removesuffix('_ms')}_growth_for_10x_keys"] = round(out["keys_600000"][m] / out["keys_60000"][m], 2)
    return out


def repeated(bodies: dict[str, bytes], rounds: int) -> dict[str, Any]:
    """A 1,000-document columnar body with ``"top_k"`` twice: the cost of a refusal (both passes)."""
    from tunemix.service.errors import ServiceError
    from tunemix.service.json_body import check_repeated_keys, name_repeated_key

    body = bodies["mq2008_1000_columnar"][:-1] + b',"top_k":1,"top_k":2}'

    def refused(fn: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
        def call(b: bytes) -> str:
            try:
                fn(b)
            except ServiceError as exc:
                return exc.message
            raise SystemExit("bench_repeated_keys: a repeated top_k was not refused")
        return call

    reps = max(5, rounds // 10)
    return {"body_bytes": len(body), "detail": refused(check_repeated_keys)(body),
            "jiter_now_ms": round(statistics.median(cpu_ms(refused(check_repeated_keys), body)
                                                    for _ in range(reps)), 3),
            "stdlib_before_ms": round(statistics.median(cpu_ms(refused(name_repeated_key), body)
                                                        for _ in range(reps)), 3)}


def memory() -> dict[str, Any]:
    """Peak traced memory (``tracemalloc``) of each pass over the largest ordinary bodies
    (``bench.bench_request_cost``'s at the body limit), per body byte: jiter builds the numbers,
    the standard library's pass built only small integers (``len``)."""
    import tracemalloc

    from bench.bench_request_cost import rank_columnar, rank_documents, rank_zeros
    from tunemix.service.json_body import check_repeated_keys, name_repeated_key
    from tunemix.service.settings import Settings

    limit = Settings().max_body_bytes
    out: dict[str, Any] = {"body_limit_bytes": limit}
    for name, make in (("rank_columnar", rank_columnar), ("rank_documents", rank_documents),
                       ("rank_zeros", rank_zeros)):
        body = make(limit)
        entry: dict[str, Any] = {"body_bytes": len(body)}
        for m, fn in (("jiter_now", check_repeated_keys), ("stdlib_before", name_repeated_key)):
            tracemalloc.start()
            try:
                fn(body)
                entry[f"{m}_peak_per_body_byte"] = round(tracemalloc.get_traced_memory()[1] / len(body), 2)
            finally:
                tracemalloc.stop()
        out[name] = entry
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--rounds", type=int, default=200, help="interleaved calls per body and method")
    ap.add_argument("--name", default="repeated_keys")
    args = ap.parse_args(argv)
    from importlib.metadata import version

    bodies = bench_bodies()
    probe = machine_probe_ms()
    result: dict[str, Any] = {"jiter": version("jiter"), "rounds": args.rounds, "machine_probe_ms_before": probe,
                              "timer": "time.thread_time (CPU of the calling thread), ms per call"}
    result["bodies"] = interleaved(bodies, methods(), args.rounds)
    result["growth"] = growth(args.rounds)
    result["refusal"] = repeated(bodies, args.rounds)
    result["memory"] = memory()
    result["machine_probe_ms_after"] = machine_probe_ms()
    for b, e in result["bodies"].items():
        print(f"{b:24s} {e['body_bytes']:>8d} B  before {e['stdlib_before']['median_ms']:.3f} ms  "
              f"now {e['jiter_now']['median_ms']:.3f} ms  ({e['ratio_now_over_before']:.2f} x)  "
              f"msgspec decode {e['msgspec_typed_decode']['median_ms']:.3f} ms")
    print("growth", result["growth"])
    print("refusal", {k: v for k, v in result["refusal"].items() if k != "detail"})
    print("memory", result["memory"])
    print("wrote", write_result(args.name, result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
