"""Where the time goes inside one /rank request, in-process (no HTTP): ``bench.bench_service``'s
breakdown of our handler's steps and of the LightGBM peer's, for one model set's bodies."""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import median_ms


def log(msg: str) -> None:
    print(f"[bench_service {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def breakdown(model_path: Path, bodies: dict[int, list[bytes]], quick: bool) -> dict[str, Any]:
    """Our /rank handler's steps in this process (median ms), the way ``app.routers.rank`` runs them.

    ``steps``: decoding the body (msgspec, ``decode_json``), checks and arrays (``rank_lists``),
    ``model.score``, ranking and encoding (``ranked`` + msgspec); ``whole_handler_ms`` runs them
    in a row; ``decode_and_arrays_ms`` is the decoding cost per request the route pays for
    safety. ``model_stages`` splits ``model.score`` by its own ``timings`` (views, forest pass,
    calibration step, mixer). ``model_cumulative`` times the public methods, each including the
    previous (wide_features < raw_scores < member_scores < score), a cross-check that does not
    depend on the model's internals. Also the columnar form's decoding and arrays.
    """
    import numba

    from training.scoring import runtime
    from training.scoring.ensemble_model import load_model

    runtime.limit_blas_threads(1)  # as the service does at start-up (TUNEMIX_BLAS_THREADS)
    model, _ = load_model(model_path)
    out: dict[str, Any] = {"numba_threads": numba.get_num_threads(), "n_members": model.n_members,
                           "n_bases": model.forest.n_base}
    for n_docs, bl in bodies.items():
        rep = 20 if quick else (200 if n_docs <= 100 else 50)
        entry = breakdown_one(model, bl[0], rep)
        out[f"docs_{n_docs}"] = entry
        log(f"breakdown {n_docs} docs: {entry['steps']}, whole {entry['whole_handler_ms']} ms, "
            f"stages {entry['model_stages']}")
    return out


def breakdown_one(model: Any, body: bytes, rep: int) -> dict[str, Any]:
    from app.parsing import decode_json
    from app.routers.rank import DECODER, ENCODER, RankAnswer, rank_lists, ranked
    from app.settings import Settings

    d = model.n_features
    settings = Settings()
    req = decode_json(DECODER, body, "/rank")
    lists = rank_lists(req, d, settings)
    x, off = lists.features, lists.offsets
    scores = model.score(x, off)

    def answer(sc: Any, cl: Any, k: Any) -> bytes:
        return bytes(ENCODER.encode(RankAnswer(model="m", version="v1", results=ranked(sc, cl, k),
                                               server_time_ms=1.0)))

    def whole() -> bytes:
        r = decode_json(DECODER, body, "/rank")
        cl = rank_lists(r, d, settings)
        return answer(model.score(cl.features, cl.offsets), cl, r.top_k)

    steps = {  # the route's steps (app/routers/rank.py), as the handler runs them
        "decode_ms": median_ms(lambda: decode_json(DECODER, body, "/rank"), rep),
        "to_arrays_ms": median_ms(lambda: rank_lists(req, d, settings), rep),
        "model_score_ms": median_ms(lambda: model.score(x, off), rep),
        "rank_and_encode_ms": median_ms(lambda: answer(scores, lists, None), rep),
    }
    entry: dict[str, Any] = {"steps": steps, "sum_of_steps_ms": round(sum(steps.values()), 4),
                             "decode_and_arrays_ms": median_ms(lambda: rank_lists(decode_json(DECODER, body, "/rank"),
                                                                                  d, settings), rep),
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
    from bench.bench_service import columnar

    cbody = columnar(body)
    entry["columnar_form"] = {
        "body_bytes": len(cbody),
        "decode_and_arrays_ms": median_ms(lambda: rank_lists(decode_json(DECODER, cbody, "/rank"), d, settings), rep),
    }
    return entry


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
            "validate_ms": median_ms(lambda b=body: peer.RankRequest.model_validate_json(b), rep),
            "to_array_ms": median_ms(lambda d=docs: np.array([x.features for x in d], dtype=np.float64), rep),
            "predict_ms": median_ms(lambda x=x: bst.predict(x, num_threads=threads), rep),
            "whole_handler_ms": median_ms(lambda b=body: peer.rank_body(b), rep),
        }
    return out
