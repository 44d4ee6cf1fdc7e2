"""OpenAPI for endpoints that read their body and write their answer themselves, with msgspec:
``msgspec_body_spec`` documents the body (the schema comes from the very structs that decode it),
``msgspec_answer_spec`` the answer (from the very structs that are encoded and sent);
``install_openapi`` adds both kinds of types to ``components/schemas``, and to the routes that have
a deadline its query parameter and header (``tunemix.service.deadlines.openapi_parameters``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec
from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel

from tunemix.service.deadlines import TIMED_PATHS, openapi_parameters
from tunemix.service.settings import Settings

REF = "#/components/schemas/{model}"
#: each with the function that writes its example for a model of n features (None: not loaded yet)
_BODY_STRUCTS: dict[type[msgspec.Struct], Callable[[int | None], dict[str, Any]] | None] = {}
#: the answers' structs, as sent
_ANSWER_STRUCTS: list[type[msgspec.Struct]] = []


def msgspec_body_spec(struct: type[msgspec.Struct], example: Callable[[int | None], dict[str, Any]] | None, *,
                      text: str | None = None, required: bool = True) -> dict[str, Any]:
    """``openapi_extra`` for a POST whose JSON body the msgspec ``struct`` decodes; ``example(n)``
    writes an example for the served default model's feature count (the page's "Try it out"
    then works as it is); None: no example (a body that only works with a token)."""
    _BODY_STRUCTS[struct] = example
    content: dict[str, Any] = {"application/json": {"schema": {"$ref": REF.format(model=struct.__name__)}}}
    if example is not None:
        content["application/json"]["example"] = example(None)
    if text is not None:
        content["text/plain"] = {"schema": {"type": "string", "description": text}}
    return {"requestBody": {"required": required, "content": content}}


def msgspec_answer_spec(struct: type[msgspec.Struct], description: str) -> dict[int | str, Any]:
    """``responses`` entry of a route whose 200 answer is ``struct`` encoded by msgspec: its schema
    is the struct's own (``msgspec.json.schema_components``), so the documented answer is what is
    sent."""
    if struct not in _ANSWER_STRUCTS:
        _ANSWER_STRUCTS.append(struct)
    return {200: {"description": description,
                  "content": {"application/json": {"schema": {"$ref": REF.format(model=struct.__name__)}}}}}


def query_parameters(model: type[BaseModel]) -> list[dict[str, Any]]:
    """``openapi_extra["parameters"]`` for a route that reads its query parameters as ``model``
    (``tunemix.service.deps.query_model``): each field, optional, with its schema and description."""
    props = model.model_json_schema()["properties"]
    return [{"name": name, "in": "query", "required": False, "description": prop.get("description", ""),
             "schema": {k: v for k, v in prop.items() if k != "description"}} for name, prop in props.items()]


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
        structs = [*_BODY_STRUCTS, *_ANSWER_STRUCTS]
        _, struct_comps = msgspec.json.schema_components(structs, ref_template=REF.replace("model", "name"))
        for name, sub in struct_comps.items():
            comps.setdefault(name, sub)
        for struct, example in _BODY_STRUCTS.items():
            if example is None:
                continue
            body = example(n_features)
            comps[struct.__name__]["examples"] = [body]
            for operations in schema.get("paths", {}).values():
                for op in operations.values():
                    content = op.get("requestBody", {}).get("content", {}).get("application/json", {})
                    if content.get("schema", {}).get("$ref") == REF.format(model=struct.__name__):
                        content["example"] = body
        settings = getattr(app.state, "settings", None) or Settings()
        for path in TIMED_PATHS:  # timeout_s and its header, with the served bounds
            operation = schema.get("paths", {}).get(path, {}).get("post")
            if operation is not None:
                operation.setdefault("parameters", []).extend(openapi_parameters(settings))
        if n_features is not None:  # kept once the examples fit the served model
            app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
