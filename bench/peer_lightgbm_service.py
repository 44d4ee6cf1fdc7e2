"""The peer of the service benchmark: a plain FastAPI app ranking with LightGBM.

    PEER_LGB_MODEL=/tmp/model.txt PEER_LGB_THREADS=2 PEER_LGB_MIN_PARALLEL_ROWS=256 \\
        python -m uvicorn bench.peer_lightgbm_service:app --host 127.0.0.1 --port 8001 --workers 2

One ``POST /rank`` taking the tunemix body (``{"queries": [{"qid", "documents": [{"id",
"features"}]}]}`` or the columnar ``{"qid", "ids", "features"}``), scoring every posted list
with ``Booster.predict`` (``num_threads=PEER_LGB_THREADS``; one thread for lists shorter than
``PEER_LGB_MIN_PARALLEL_ROWS``, the rule tunemix's workers follow) and answering with tunemix's
response shape (``model``, ``version``, ``results[].ranking[]`` of ``id``/``score``/``rank``,
``server_time_ms``), plus ``GET /ready``. The body is validated from raw bytes by pydantic
(``model_validate_json``) and the response serialised by pydantic-core, which is what a plain
FastAPI app does when it is written with speed in mind; everything runs in the event loop (no
thread hops). ``server_time_ms`` covers the handler from before reading the body to the
serialised response, as in tunemix. Dense features only (the
benchmark posts dense rows). Used by ``bench.bench_service``; not part of the product.
"""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import numpy as np
from fastapi import FastAPI, Request, Response
from pydantic import BaseModel, ConfigDict, Field

Id = str | int


class Document(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: Id
    features: list[float]


class RankQuery(BaseModel):
    model_config = ConfigDict(extra="forbid")
    qid: Id
    documents: list[Document] | None = None
    ids: list[Id] | None = None
    features: list[list[float]] | None = None


class RankRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    queries: list[RankQuery] = Field(min_length=1)
    model: str | None = None
    version: str | None = None
    top_k: int | None = Field(None, ge=1)


class RankedDocument(BaseModel):
    id: Id
    score: float
    rank: int


class RankedQuery(BaseModel):
    qid: Id
    n_documents: int
    ranking: list[RankedDocument]


class RankResponse(BaseModel):
    model: str
    version: str
    results: list[RankedQuery]
    server_time_ms: float


_state: dict[str, Any] = {}


def booster() -> Any:
    if "booster" not in _state:
        import lightgbm as lgb

        path = os.environ["PEER_LGB_MODEL"]
        bst = lgb.Booster(model_file=path)
        _state["booster"] = bst
        _state["threads"] = int(os.environ.get("PEER_LGB_THREADS", "1"))
        # the same rule as tunemix's TUNEMIX_PARALLEL_MIN_DOCUMENTS: shorter lists on one thread
        _state["min_parallel_rows"] = int(os.environ.get("PEER_LGB_MIN_PARALLEL_ROWS", "0"))
        _state["n_features"] = bst.num_feature()
        bst.predict(np.zeros((2, bst.num_feature())), num_threads=_state["threads"])  # warm
    return _state["booster"]


@asynccontextmanager
async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
    booster()  # load and warm before the first request
    yield


app = FastAPI(title="LightGBM peer (benchmark only)", lifespan=lifespan)


@app.get("/ready")
def ready() -> dict[str, Any]:
    bst = booster()
    return {"ready": True, "n_trees": bst.num_trees(), "threads": _state["threads"]}


def rank_body(body: bytes, t0: float | None = None) -> bytes:
    """Raw request body -> serialised response body (the whole handler, used in-process too);
    ``server_time_ms`` counts from ``t0`` (default: now)."""
    t0 = time.perf_counter() if t0 is None else t0
    req = RankRequest.model_validate_json(body)
    bst = booster()
    d = _state["n_features"]
    results = []
    for q in req.queries:
        if q.documents is not None:
            ids = [doc.id for doc in q.documents]
            x = np.array([doc.features for doc in q.documents], dtype=np.float64)
        else:
            ids = list(q.ids or [])
            x = np.array(q.features or [], dtype=np.float64)
        x = x.reshape(len(ids), d)
        threads = 1 if len(ids) < _state["min_parallel_rows"] else _state["threads"]
        scores = np.asarray(bst.predict(x, num_threads=threads), dtype=np.float64)
        order = np.argsort(-scores, kind="stable")
        if req.top_k is not None:
            order = order[: req.top_k]
        ranking = [RankedDocument(id=ids[i], score=float(scores[i]), rank=r + 1)
                   for r, i in enumerate(order.tolist())]
        results.append(RankedQuery(qid=q.qid, n_documents=len(ids), ranking=ranking))
    resp = RankResponse(model="lightgbm-peer", version="v1", results=results, server_time_ms=0.0)
    resp.server_time_ms = (time.perf_counter() - t0) * 1e3
    return resp.model_dump_json().encode()


@app.post("/rank")
async def rank(request: Request) -> Response:
    t0 = time.perf_counter()  # before reading the body, as tunemix's handler
    body = await request.body()
    return Response(rank_body(body, t0), media_type="application/json")
