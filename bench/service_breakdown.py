"""Where the time goes inside one /rank request, in-process (no socket): ``bench.bench_service``'s
breakdown of our handler's steps and of the LightGBM peer's, for one model set's bodies; and the
whole request through each ASGI application (routing, dependencies, middleware, thread hops,
response), the two applications alternating request by request.

    python -m bench.service_breakdown                        # both model sets (bench/results/service_breakdown.json)
    python -m bench.service_breakdown --model-set mslr-default --name service_breakdown_x --quick

The model sets and their peers are ``bench.service_models``', the request bodies
``bench.service_requests``' (the same seeds as ``bench.bench_service``); our application is
``tunemix.service.main.create_app`` with the settings ``python -m tunemix.service`` gives a worker of
the benchmark's (``TUNEMIX_WORKERS`` workers: that many scoring threads and the parallel floor),
the peer's ``bench.peer_lightgbm_service.app`` with the benchmark's environment.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import median_ms
from bench.service_requests import columnar, log, make_bodies, service_config


def breakdown(model_path: Path, bodies: dict[int, list[bytes]], quick: bool) -> dict[str, Any]:
    """Our /rank handler's steps in this process (median ms), the way ``tunemix.service.routers.rank`` runs them.

    ``steps``: the route's steps 2 and 3, body to checked arrays (``parse_ms``: ``json_lists``,
    and its parts), ``model.score``, ranking and encoding (``ranked`` + msgspec);
    ``whole_handler_ms`` runs them in a row. ``model_stages`` splits ``model.score`` by its own
    ``timings`` (views, forest pass, calibration step, mixer). ``model_cumulative`` times the
    public methods, each including the previous (wide_features < raw_scores < member_scores <
    score), a cross-check that does not depend on the model's internals. Also the columnar
    form's parse.
    """
    import numba

    from tunemix.core.scoring import runtime
    from tunemix.service.registry import ModelRegistry

    runtime.limit_blas_threads(1)  # as the service does at start-up (TUNEMIX_BLAS_THREADS)
    registry = ModelRegistry(model_path.parent.parent, model_path.parent.name)
    registry.load_initial([])
    served = registry.get()
    model = served.model
    out: dict[str, Any] = {"numba_threads": numba.get_num_threads(), "n_members": model.n_members,
                           "n_bases": model.forest.n_base}
    for n_docs, bl in bodies.items():
        rep = 20 if quick else (200 if n_docs <= 100 else 50)
        entry = breakdown_one(registry, bl[0], rep)
        out[f"docs_{n_docs}"] = entry
        log(f"breakdown {n_docs} docs: {entry['steps']}, whole {entry['whole_handler_ms']} ms, "
            f"stages {entry['model_stages']}")
    return out


def parse_parts(body: bytes, d: int, settings: Any, rep: int) -> dict[str, float]:
    """The parts of ``json_lists`` (median ms each): the one pass (jiter's objects, then msgspec's
    convert into the structs), each of its halves, and the checks and arrays; for comparison
    the two passes' decode and repeated-key pass, and the rows by ``np.array``."""
    import jiter
    import msgspec

    from tunemix.service.json_body import check_repeated_keys, decode_json, gc_paused, one_pass
    from tunemix.service.rank_body import DECODER, RankRequest, rank_lists

    def tree() -> Any:
        with gc_paused():
            return jiter.from_json(body, allow_inf_nan=False, catch_duplicate_keys=True, cache_mode="keys")

    obj = tree()
    req = one_pass(DECODER, body)
    assert req is not None, "the bench's bodies are valid: the one pass takes them"
    rows = [r for q in req.queries
            for r in ([doc.features for doc in q.documents] if q.documents else q.features or [])]
    return {"one_pass_ms": median_ms(lambda: one_pass(DECODER, body), rep),
            "jiter_ms": median_ms(tree, rep),
            "convert_ms": median_ms(lambda: msgspec.convert(obj, RankRequest, strict=True), rep),
            "to_arrays_ms": median_ms(lambda: rank_lists(req, d, settings), rep),
            "two_passes_decode_ms": median_ms(lambda: decode_json(DECODER, body, "/rank"), rep),
            "two_passes_repeated_keys_ms": median_ms(lambda: check_repeated_keys(body), rep),
            "rows_by_np_array_ms": median_ms(lambda: np.array(rows, dtype=np.float32), rep)}


def breakdown_one(registry: Any, body: bytes, rep: int) -> dict[str, Any]:
    from tunemix.service.rank_answer import ENCODER, RankAnswer, ranked
    from tunemix.service.rank_body import json_lists
    from tunemix.service.settings import Settings

    settings = Settings()
    model = registry.get().model
    d = model.n_features
    _, _, lists = json_lists(body, registry, settings)
    x, off = lists.features, lists.offsets
    scores = model.score(x, off)

    def answer(sc: Any, cl: Any, k: Any) -> bytes:
        return bytes(ENCODER.encode(RankAnswer(model="m", version="v1", results=ranked(sc, cl, k),
                                               server_time_ms=1.0)))

    def whole() -> bytes:
        r, _, cl = json_lists(body, registry, settings)
        return answer(model.score(cl.features, cl.offsets), cl, r.top_k)

    steps = {  # the route's steps (tunemix/service/routers/rank.py), as the handler runs them
        "parse_ms": median_ms(lambda: json_lists(body, registry, settings), rep),
        "model_score_ms": median_ms(lambda: model.score(x, off), rep),
        "rank_and_encode_ms": median_ms(lambda: answer(scores, lists, None), rep),
    }
    entry: dict[str, Any] = {"steps": steps, "sum_of_steps_ms": round(sum(steps.values()), 4),
                             "parse_parts": parse_parts(body, d, settings, rep),
                             "whole_handler_ms": median_ms(whole, rep), "response_bytes": len(whole())}
    # the model's own stages (EnsembleModel.score's ``timings``): median of each over the calls
    samples: dict[str, list[float]] = {}
    for _ in range(rep):
        t: dict[str, float] = {}
        model.score(x, off, timings=t)
        for k, v in t.items():
            samples.setdefault(k, []).append(v * 1e3)
    stages: dict[str, Any] = {f"{k}_ms": round(statistics.median(v), 4) for k, v in samples.items()}
    stages["sum_ms"] = round(sum(v for v in stages.values()), 4)
    stages["forest_checkpoints"] = len(model._checkpoints)
    entry["model_stages"] = stages
    entry["model_cumulative"] = {
        "wide_features_ms": median_ms(lambda: model.wide_features(x, off), rep),
        "raw_scores_ms": median_ms(lambda: model.raw_scores(x, off), rep),
        "member_scores_ms": median_ms(lambda: model.member_scores(x, off), rep),
        "score_ms": median_ms(lambda: model.score(x, off), rep),
    }

    cbody = columnar(body)
    entry["columnar_form"] = {"body_bytes": len(cbody),
                              "parse_ms": median_ms(lambda: json_lists(cbody, registry, settings), rep)}
    return entry


def _peer_array(docs: list[Any]) -> np.ndarray:
    """The peer's step from validated documents to its float64 matrix."""
    return np.array([d.features for d in docs], dtype=np.float64)


def peer_breakdown(model_file: Path, threads: int, bodies: dict[int, list[bytes]], quick: bool) -> dict[str, Any]:
    """The peer's handler in-process: validation, arrays, predict, response (median ms)."""
    os.environ["PEER_LGB_MODEL"] = str(model_file)
    os.environ["PEER_LGB_THREADS"] = str(threads)
    from bench import peer_lightgbm_service as peer

    peer._state.clear()  # the booster of an earlier model set, if any: load this set's
    bst = peer.booster()
    out: dict[str, Any] = {}
    for n_docs, bl in bodies.items():
        body = bl[0]
        rep = 20 if quick else (100 if n_docs <= 100 else 40)
        req = peer.RankRequest.model_validate_json(body)
        docs = req.queries[0].documents or []
        x = np.array([d.features for d in docs], dtype=np.float64)
        out[f"docs_{n_docs}"] = {
            "validate_ms": median_ms(partial(peer.RankRequest.model_validate_json, body), rep),
            "to_array_ms": median_ms(partial(_peer_array, docs), rep),
            "predict_ms": median_ms(partial(bst.predict, x, num_threads=threads), rep),
            "whole_handler_ms": median_ms(partial(peer.rank_body, body), rep),
        }
    return out


# ---------------------------------------------------------------------------- the whole request, in-process
def _scope(body: bytes) -> dict[str, Any]:
    """An HTTP ``POST /rank`` scope as uvicorn hands it to the application."""
    return {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1",
            "method": "POST", "scheme": "http", "path": "/rank", "raw_path": b"/rank", "root_path": "",
            "query_string": b"", "client": ("127.0.0.1", 40000), "server": ("127.0.0.1", 8000),
            "headers": [(b"host", b"127.0.0.1:8000"), (b"content-type", b"application/json"),
                        (b"content-length", str(len(body)).encode())]}


async def asgi_request(app: Any, body: bytes) -> tuple[int, bytes]:
    """(status, response body) of one ``POST /rank`` of ``body`` through the ASGI ``app``."""
    import asyncio

    sent: list[dict[str, Any]] = []
    delivered = False
    never = asyncio.Event()

    async def receive() -> dict[str, Any]:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        await never.wait()  # the client stays connected
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(_scope(body), receive, send)
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    return status, b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")


async def _asgi_run(apps: dict[str, Any], bodies: dict[int, list[bytes]], rep: int) -> dict[str, Any]:
    """Median wall and CPU (every thread of the process) ms of a whole request per application,
    and the handler's own ``server_time_ms`` from its answers; the applications alternate."""
    import gc
    import json

    out: dict[str, Any] = {}
    for n_docs, bl in bodies.items():
        wall: dict[str, list[float]] = {k: [] for k in apps}
        cpu: dict[str, list[float]] = {k: [] for k in apps}
        handler: dict[str, list[float]] = {k: [] for k in apps}
        collections = {k: 0 for k in apps}
        for i in range(rep + 3):
            body = bl[i % len(bl)]
            for key, app in apps.items():
                before = sum(g["collections"] for g in gc.get_stats())
                c0, t0 = time.process_time(), time.perf_counter()
                status, content = await asgi_request(app, body)
                t1, c1 = time.perf_counter(), time.process_time()
                if status != 200:
                    raise SystemExit(f"{key}: /rank answered {status}: {content[:300]!r}")
                if i < 3:
                    continue  # warm-up
                collections[key] += sum(g["collections"] for g in gc.get_stats()) - before
                wall[key].append((t1 - t0) * 1e3)
                cpu[key].append((c1 - c0) * 1e3)
                handler[key].append(float(json.loads(content)["server_time_ms"]))
        out[f"docs_{n_docs}"] = {key: {"wall_ms": round(statistics.median(wall[key]), 4),
                                       "cpu_ms": round(statistics.median(cpu[key]), 4),
                                       "server_time_ms": round(statistics.median(handler[key]), 4),
                                       "outside_handler_ms": round(statistics.median(wall[key])
                                                                   - statistics.median(handler[key]), 4),
                                       "gc_collections_per_request": round(collections[key] / rep, 3)}
                                 for key in apps}
        log(f"asgi {n_docs} docs: {out[f'docs_{n_docs}']}")
    return out


async def _asgi_main(model_path: Path, peer_file: Path, workers: int, bodies: dict[int, list[bytes]],
                     rep: int) -> dict[str, Any]:
    import asyncio
    import contextlib

    from bench import peer_lightgbm_service as peer
    from tunemix.service.main import create_app
    from tunemix.service.settings import Settings

    _, threads, floor = service_config(workers)
    os.environ.update({"PEER_LGB_MODEL": str(peer_file), "PEER_LGB_THREADS": str(threads),
                       "PEER_LGB_MIN_PARALLEL_ROWS": str(floor)})
    peer._state.clear()
    ours = create_app(Settings(models_dir=model_path.parent.parent, default_model=model_path.parent.name,
                               workers=workers))
    async with contextlib.AsyncExitStack() as stack:
        for app in (ours, peer.app):
            await stack.enter_async_context(app.router.lifespan_context(app))
        registry = ours.state.registry
        while not registry.all_warm:  # /ready's condition: every kernel warm
            if registry.failed:
                raise SystemExit(f"our model failed to load: {registry.failed}")
            await asyncio.sleep(0.2)
        return await _asgi_run({"ours": ours, "peer": peer.app}, bodies, rep)


def asgi_breakdown(model_path: Path, peer_file: Path, workers: int, bodies: dict[int, list[bytes]],
                   quick: bool) -> dict[str, Any]:
    """Whole requests through our application and the peer's, in this process: ``wall_ms`` from the
    scope handed over to the last byte of the answer, ``server_time_ms`` the handler's own clock,
    ``outside_handler_ms`` the difference (routing, dependencies, middleware, the response)."""
    import asyncio

    return asyncio.run(_asgi_main(model_path, peer_file, workers, bodies, 20 if quick else 200))


def main(argv: list[str] | None = None) -> int:
    import argparse
    import tempfile

    from bench.common import write_result
    from bench.service_models import MODEL_SETS, check_data, prepare

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--model-set", choices=[*MODEL_SETS, "both"], default="both")
    ap.add_argument("--quick", action="store_true", help="20 repetitions a figure")
    ap.add_argument("--workers", type=int, default=2, help="the benchmark's worker count (default 2)")
    ap.add_argument("--name", default="service_breakdown", help="bench/results/<name>.json")
    args = ap.parse_args(argv)
    keys = list(MODEL_SETS) if args.model_set == "both" else [args.model_set]
    check_data(keys)
    _, threads, _ = service_config(args.workers)
    result: dict[str, Any] = {"command": "python -m bench.service_breakdown " + " ".join(argv or sys.argv[1:]),
                              "workers": args.workers, "route_overhead": route_overhead(200 if args.quick else 2000),
                              "sets": {}}
    log(f"route overhead: {result['route_overhead']}")
    with tempfile.TemporaryDirectory(prefix="service-breakdown-") as tmp:
        for key in keys:
            mset = prepare(key, threads, Path(tmp))
            bodies = {nd: make_bodies(mset.test, nd, 8, seed=nd) for nd in (100, 1000)}
            result["sets"][key] = {
                "body_bytes": {f"docs_{nd}": len(bl[0]) for nd, bl in bodies.items()},
                "handler_steps_ours": breakdown(mset.model_path, bodies, args.quick),
                "handler_steps_peer": peer_breakdown(mset.peer_file, threads, bodies, args.quick),
                "asgi": asgi_breakdown(mset.model_path, mset.peer_file, args.workers, bodies, args.quick),
            }
    log(f"wrote {write_result(args.name, result)}")
    return 0



def route_overhead(rep: int) -> dict[str, float]:
    """What FastAPI costs a route per request for what it resolves, in this process: median CPU
    ms (every thread) of an ASGI ``POST /rank`` to routes that do nothing, one declaring /rank's
    eight query parameters and four dependencies (FastAPI resolving them), one reading its parameters
    itself (``tunemix.service.deps.query_model``, as /rank does), and one declaring nothing (the floor)."""
    import asyncio
    from typing import Annotated

    from fastapi import Depends, FastAPI, Query, Request, Response

    from tunemix.service.body import held_body
    from tunemix.service.deps import query_model
    from tunemix.service.routers.rank import RankParams

    async def dep(request: Request) -> Any:
        return request.app.state

    async def gen_dep(request: Request) -> Any:
        yield request.app.state

    app = FastAPI()
    app.state.admission = None

    @app.post("/declared")
    async def declared(request: Request, a: Annotated[Any, Depends(dep)], b: Annotated[Any, Depends(dep)],
                       c: Annotated[Any, Depends(dep)], hold: Annotated[Any, Depends(gen_dep)],
                       model: Annotated[str | None, Query()] = None, version: Annotated[str | None, Query()] = None,
                       top_k: Annotated[int | None, Query(ge=1)] = None, relevance: Annotated[bool, Query()] = False,
                       min_relevance: Annotated[float | None, Query(ge=0)] = None,
                       min_probability: Annotated[float | None, Query(ge=0, le=1)] = None,
                       explain: Annotated[int, Query(ge=0)] = 0) -> Response:
        return Response(b"{}")

    @app.post("/read")
    async def read(request: Request) -> Response:
        async with held_body(request):
            query_model(request, RankParams)
            return Response(b"{}")

    @app.post("/bare")
    async def bare(request: Request) -> Response:
        return Response(b"{}")

    async def run() -> dict[str, float]:
        out: dict[str, list[float]] = {"declared": [], "read": [], "bare": []}
        for i in range(rep + 20):
            for path in out:
                scope = {**_scope(b"{}"), "path": f"/{path}", "raw_path": f"/{path}".encode()}
                sent: list[Any] = []

                async def receive() -> dict[str, Any]:
                    return {"type": "http.request", "body": b"{}", "more_body": False}

                async def send(message: Any, sent: list[Any] = sent) -> None:
                    sent.append(message)

                c0 = time.process_time()
                await app(scope, receive, send)
                if i >= 20:
                    out[path].append((time.process_time() - c0) * 1e3)
        return {f"{k}_cpu_ms": round(statistics.median(v), 4) for k, v in out.items()}

    return asyncio.run(run())


if __name__ == "__main__":
    sys.exit(main())
