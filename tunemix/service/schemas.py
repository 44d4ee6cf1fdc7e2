"""Request and response models: the OpenAPI contract of the service.

The /rank, /evaluate, /fuse and /models/reload bodies are decoded by msgspec structs defined in
their routers (strict: no coercion, unknown fields refused; the OpenAPI schema comes from those
structs). The answers are described here. Feature ids in the sparse form are 1-based, as in
LETOR files (``{"7": 0.31}`` is column 6); absent sparse features are 0.
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


class Contribution(BaseModel):
    feature: str = Field(description="the feature's name (the model's feature_names; default f1, f2, ...)",
                         examples=["f40"])
    value: float = Field(description="the document's value of the feature", examples=[0.83])
    contribution: float = Field(description="its Shapley value: what it adds to the score from the baseline",
                                examples=[0.212])


class Explanation(BaseModel):
    baseline: float = Field(description="the rest of the list: the score the query's per-feature median "
                                        "document would get in this document's place", examples=[0.04])
    contributions: list[Contribution] = Field(description="the \"explain\" largest contributions by absolute value")
    rest: float = Field(description="the other features' contributions together: baseline + contributions + rest "
                                    "= score", examples=[0.013])
    exact: bool = Field(description="true: exact (the default explanations, the same on every call); false: a "
                                    "sampled estimate that still adds up")
    standard_error: float | None = Field(None, description="sampled: the largest standard error of a contribution")


class PairContribution(BaseModel):
    feature: str = Field(examples=["f40"])
    value_a: float = Field(description="document a's value", examples=[0.83])
    value_b: float = Field(description="document b's value", examples=[0.12])
    contribution: float = Field(description="its contribution to score(a) - score(b)", examples=[0.19])


class PairExplanation(BaseModel):
    a: Id
    b: Id
    score_difference: float = Field(description="score(a) - score(b)", examples=[0.35])
    baseline: float = Field(description="the rest of the list: baseline(a) - baseline(b), what the other "
                                        "documents do to a's score against b's (through the per-query rescaling of "
                                        "the mix; 0 without it)", examples=[0.0])
    contributions: list[PairContribution] = Field(description="the largest contributions to the difference")
    rest: float = Field(description="the other features' together: baseline + contributions + rest = "
                                    "score_difference")
    exact: bool
    standard_error: float | None = None


class RankedDocument(BaseModel):
    id: Id = Field(description="the document's id, as posted", examples=["d7"])
    score: float = Field(description="the ranking score: higher first; comparable within the query",
                         examples=[1.2731])
    rank: int = Field(description="1-based position", examples=[1])
    relevance: float | None = Field(None, description="with \"relevance\": true: the expected grade E[y], "
                                                     "comparable across queries (never higher further down a list)",
                                    examples=[1.42])
    probabilities: list[float] | None = Field(None, description="with \"relevance\": true: P(y = k) for grades "
                                                                "k = 0, 1, ... (sums to 1)",
                                              examples=[[0.21, 0.16, 0.63]])
    explanation: Explanation | None = Field(None, description="with \"explain\": k: why this score")


class RankedQuery(BaseModel):
    qid: Qid = Field(description="the query's id, as posted", examples=["q1"])
    n_documents: int = Field(description="documents posted for the query (the ranking may hold fewer: top_k)",
                             examples=[2])
    ranking: list[RankedDocument] = Field(description="the documents best first (ties keep the posted order)")
    pair: PairExplanation | None = Field(None, description="with the query's \"explain_pair\": [a, b]: why a "
                                                           "scores above (or below) b")


class RankResponse(BaseModel):
    model: str = Field(description="the model that scored the request", examples=["default"])
    version: str = Field(description="its version", examples=["v3"])
    results: list[RankedQuery] = Field(description="one entry per posted query, in the posted order")
    server_time_ms: float = Field(description="time in the handler, from the first body byte read to the "
                                              "answer serialised", examples=[1.84])


# ---------------------------------------------------------------------------- evaluate
Convention = Literal["letor3", "letor4", "mslr", "yahoo", "ranklib", "trec", "lightgbm", "xgboost", "sklearn", "ranx",
                     "all"]


class ConventionResult(BaseModel):
    convention: str = Field(description="the tool whose rules gave these values", examples=["yahoo"])
    error: str | None = Field(None, description="with convention 'all': why this convention could not "
                                                "evaluate the input (its other fields are then empty)")
    mean: dict[str, float | None] = Field(description="each measure's mean over the queries, as the tool computes "
                                                      "it", examples=[{"ndcg@10": 0.8731, "err": 0.5221}])
    derived: dict[str, bool] = Field(description="true for a measure the tool itself does not report (computed "
                                                 "under its rules)", examples=[{"ndcg@10": False, "err": False}])
    warnings: list[str] = Field(description="what the tool would have done differently with this input")
    per_query: dict[str, dict[str, float | None]] | None = Field(
        None, description="with per_query: every query's value by qid (null: the tool has none)")


class EvaluateResponse(BaseModel):
    results: list[ConventionResult] = Field(description="one entry per convention asked for")
    n_queries: int = Field(description="queries evaluated", examples=[2])
    model: str | None = Field(None, description="the model that scored posted features, if any")
    version: str | None = Field(None, description="its version")
    server_time_ms: float = Field(description="time in the handler", examples=[0.91])


# ---------------------------------------------------------------------------- fuse
class FuseResponse(BaseModel):
    method: str = Field(description="the fusion method", examples=["rrf"])
    results: list[RankedQuery] = Field(description="each query's fused list, best first")
    server_time_ms: float = Field(description="time in the handler", examples=[0.42])


# ---------------------------------------------------------------------------- models
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
    name: str = Field(description="model name", examples=["default"])
    version: str = Field(description="the version served", examples=["v3"])
    n_features: int = Field(description="features a document must have", examples=[30])
    n_members: int = Field(description="calibrated members the mix weighs", examples=[192])
    n_bases: int = Field(description="base classifiers in the flat forest", examples=[5120])
    views: list[str] = Field(description="feature views the members read", examples=[["raw", "raw+std"]])
    mixer: str = Field(description="the mixer", examples=["exp_forecaster"])
    created: str | None = Field(None, description="when it was trained (ISO-8601, UTC)",
                                examples=["2026-11-26T01:50:34Z"])
    loaded_at: str | None = Field(None, description="when this worker loaded it (ISO-8601, UTC)")


class ModelsResponse(BaseModel):
    default: str = Field(description="the model a request that names none gets", examples=["default"])
    models: list[ModelSummary] = Field(description="the models this worker serves")
    on_disk: dict[str, list[str]] = Field(description="every model's versions in the models directory",
                                          examples=[{"default": ["v1", "v2", "v3"]}])


class ErrorResponse(BaseModel):
    detail: str = Field(description="what is wrong, naming the query and the field",
                        examples=["query 'q1' (queries[0]): documents[3].features has 29 values; the model takes 30"])
    errors: list[dict[str, Any]] | None = Field(None, description="the validator's errors (location, message, type)")
