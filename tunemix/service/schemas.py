"""The answers of /evaluate, /models and the errors, as pydantic models (the OpenAPI contract).

The /rank, /evaluate, /fuse and /models/reload bodies are decoded by msgspec structs defined beside
their routers (strict: no coercion, unknown fields refused; the OpenAPI schema comes from those
structs); the /rank and /fuse answers are the msgspec structs that are sent
(``tunemix.service.rank_answer``, ``tunemix.service.routers.fuse.FuseAnswer``). Feature ids in the
sparse form are 1-based, as in LETOR files (``{"7": 0.31}`` is column 6); absent sparse features
are 0.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

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
