"""Request and response models: the OpenAPI contract of the service.

The /rank body is decoded by msgspec structs (``app.routers.rank``); the other bodies are
validated from raw JSON bytes by pydantic-core (``Model.model_validate_json``), strictly (no
coercion), then turned into the project's array layout by ``app.parsing``. Feature ids in the sparse form are
1-based, as in LETOR files (``{"7": 0.31}`` is column 6); absent sparse features are 0.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Id = Annotated[str | int, Field(description="a document id (echoed back as given)")]
Qid = Annotated[str | int, Field(description="the query id (echoed back as given)")]
DenseFeatures = list[float]
SparseFeatures = dict[str, float]

#: unknown fields refused; no coercion (``true`` or ``"2"`` is not a number, ``2.0`` not an integer)
_STRICT = ConfigDict(extra="forbid", strict=True)


class Document(BaseModel):
    model_config = _STRICT
    id: Id
    features: DenseFeatures | SparseFeatures = Field(
        description="dense list of n_features values, or sparse {\"<1-based feature id>\": value}")


class RankedDocument(BaseModel):
    id: Id
    score: float
    rank: int = Field(description="1-based position")


class RankedQuery(BaseModel):
    qid: Qid
    n_documents: int
    ranking: list[RankedDocument]


class RankResponse(BaseModel):
    model: str
    version: str
    results: list[RankedQuery]
    server_time_ms: float


# ---------------------------------------------------------------------------- evaluate
Convention = Literal["letor3", "letor4", "mslr", "yahoo", "ranklib", "trec", "lightgbm", "xgboost", "sklearn", "ranx",
                     "all"]


class EvalQuery(BaseModel):
    """Labels with ``scores``, or with a ``ranking`` of ``docids`` best first, or with
    features (``documents`` / ``features``) scored by ``model`` first."""

    model_config = _STRICT
    qid: Qid
    labels: list[int]
    scores: list[float] | None = None
    docids: list[Id] | None = None
    ranking: list[Id] | None = Field(None, description="docids best first (a permutation of docids)")
    documents: list[Document] | None = Field(None, description="with `model`: documents to score (labels in order)")
    features: list[DenseFeatures] | None = Field(None, description="with `model`: columnar features")


_EVAL_EXAMPLE: dict[str, Any] = {
    "queries": [{"qid": "a", "labels": [2, 0, 1], "scores": [0.9, 0.8, 0.3]},
                {"qid": "b", "labels": [0, 1], "docids": ["x", "y"], "ranking": ["y", "x"]}],
    "metrics": ["ndcg@10", "err"],
    "convention": "yahoo",
}


class EvaluateRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra={"examples": [_EVAL_EXAMPLE]})
    queries: list[EvalQuery] = Field(min_length=1)
    metrics: list[str] = Field(default_factory=lambda: ["ndcg@10"], min_length=1,
                               description="ndcg@k, dcg@k, err, err@k, err@k:top=L, p@k, map, meanndcg")
    convention: Convention = "yahoo"
    per_query: bool = Field(False, description="also return every query's values")
    model: str | None = Field(None, description="score posted features with this model first")
    version: str | None = None


class ConventionResult(BaseModel):
    convention: str
    error: str | None = Field(None, description="with convention 'all': why this convention could not "
                                                "evaluate the input (its other fields are then empty)")
    mean: dict[str, float | None]
    derived: dict[str, bool]
    warnings: list[str]
    per_query: dict[str, dict[str, float | None]] | None = None


class EvaluateResponse(BaseModel):
    results: list[ConventionResult]
    n_queries: int
    model: str | None = None
    version: str | None = None
    server_time_ms: float


# ---------------------------------------------------------------------------- fuse
class FuseSystem(BaseModel):
    """One system's result list: ids with scores, or ids alone (a ranking, best first)."""

    model_config = _STRICT
    ids: list[Id] = Field(min_length=1)
    scores: list[float] | None = None


class FuseQuery(BaseModel):
    model_config = _STRICT
    qid: Qid
    systems: list[FuseSystem] = Field(min_length=1)


_FUSE_EXAMPLE: dict[str, Any] = {
    "queries": [{"qid": "q", "systems": [{"ids": ["a", "b", "c"], "scores": [12.1, 9.5, 3.2]},
                                         {"ids": ["c", "a", "d"]}]}],
    "method": "rrf",
    "k": 60,
}


class FuseRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra={"examples": [_FUSE_EXAMPLE]})
    queries: list[FuseQuery] = Field(min_length=1)
    method: Literal["rrf", "combsum", "combmnz", "condorcet"] = "rrf"
    k: float = Field(60.0, gt=0, allow_inf_nan=False, description="RRF constant")
    top_k: int | None = Field(None, ge=1, description="CombSUM/CombMNZ: only each system's top_k count; "
                                                      "also cuts the returned list")


class FuseResponse(BaseModel):
    method: str
    results: list[RankedQuery]
    server_time_ms: float


# ---------------------------------------------------------------------------- models
class ReloadRequest(BaseModel):
    model_config = _STRICT
    model: str | None = Field(None, description="model name (default: the served default)")
    version: str | None = Field(None, description="version to serve (default: the latest on disk)")


class ReloadResponse(BaseModel):
    model: str = Field(description="the model reloaded", examples=["default"])
    version: str = Field(description="the version it now serves", examples=["v3"])
    previous_version: str | None = Field(description="the version it served before", examples=["v2"])
    workers_serving: int = Field(1, description="worker processes serving the new version when this answer "
                                                "was sent (the answer waits up to TUNEMIX_RELOAD_WAIT_S for all)")
    workers_total: int = Field(1, description="worker processes of the service")
    workers_lagging: list[int] = Field(default_factory=list,
                                       description="pids of the workers that did not serve it yet (empty: all do)")


class ModelSummary(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str
    version: str
    n_features: int
    n_members: int
    n_bases: int
    views: list[str]
    mixer: str


class ModelsResponse(BaseModel):
    default: str
    models: list[ModelSummary]
    on_disk: dict[str, list[str]]


class ErrorResponse(BaseModel):
    detail: str
    errors: list[dict[str, Any]] | None = None
