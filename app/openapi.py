"""OpenAPI for endpoints that read their body themselves (JSON decoded by msgspec or validated by
pydantic-core from the raw bytes, or a LETOR text body): ``body_spec`` (a pydantic model) and
``msgspec_body_spec`` (msgspec structs: the schema comes from the very types that decode the
body) document the body; ``install_openapi`` adds the body types to ``components/schemas``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec
from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel

REF = "#/components/schemas/{model}"
_BODY_MODELS: list[type[BaseModel]] = []
#: each with the function that writes its example for a model of n features (None: not loaded yet)
_BODY_STRUCTS: dict[type[msgspec.Struct], Callable[[int | None], dict[str, Any]]] = {}


def body_spec(model: type[BaseModel], *, text: str | None = None, required: bool = True) -> dict[str, Any]:
    """``openapi_extra`` for a POST whose JSON body is ``model`` (and optionally a text body)."""
    _BODY_MODELS.append(model)
    content: dict[str, Any] = {"application/json": {"schema": {"$ref": REF.format(model=model.__name__)}}}
    if text is not None:
        content["text/plain"] = {"schema": {"type": "string", "description": text}}
    return {"requestBody": {"required": required, "content": content}}


def msgspec_body_spec(struct: type[msgspec.Struct], example: Callable[[int | None], dict[str, Any]], *,
                      text: str | None = None) -> dict[str, Any]:
    """``openapi_extra`` for a POST whose JSON body the msgspec ``struct`` decodes; ``example(n)``
    writes an example for the served default model's feature count (the page's "Try it out"
    then works as it is)."""
    _BODY_STRUCTS[struct] = example
    content: dict[str, Any] = {"application/json": {"schema": {"$ref": REF.format(model=struct.__name__)},
                                                    "example": example(None)}}
    if text is not None:
        content["text/plain"] = {"schema": {"type": "string", "description": text}}
    return {"requestBody": {"required": True, "content": content}}


def _default_n_features(app: FastAPI) -> int | None:
    registry = getattr(app.state, "registry", None)
    served = registry.current(registry.default_model) if registry is not None else None
    return None if served is None else int(served.n_features)


def install_openapi(app: FastAPI) -> None:
    def openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        n_features = _default_n_features(app)
        schema = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
        comps = schema.setdefault("components", {}).setdefault("schemas", {})
        for model in _BODY_MODELS:
            js = model.model_json_schema(ref_template=REF)
            for name, sub in js.pop("$defs", {}).items():
                comps.setdefault(name, sub)
            comps[model.__name__] = js
        _, struct_comps = msgspec.json.schema_components(list(_BODY_STRUCTS), ref_template=REF.replace("model", "name"))
        for name, sub in struct_comps.items():
            comps.setdefault(name, sub)
        for struct, example in _BODY_STRUCTS.items():
            body = example(n_features)
            comps[struct.__name__]["examples"] = [body]
            for operations in schema.get("paths", {}).values():
                for op in operations.values():
                    content = op.get("requestBody", {}).get("content", {}).get("application/json", {})
                    if content.get("schema", {}).get("$ref") == REF.format(model=struct.__name__):
                        content["example"] = body
        if n_features is not None:  # kept once the examples fit the served model
            app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
