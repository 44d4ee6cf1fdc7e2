"""Errors a client can act on: every 4xx names the query and the field it is about.

``ServiceError`` carries an HTTP status and a message; ``validation_message`` turns pydantic's
location tuples (``("queries", 3, "documents", 0, "features", 7)``) into the same wording,
with the query's qid when the body has one. Bodies of error responses::

    {"detail": "query 'q7' (queries[3]): documents[0].features[7]: Input should be a valid number",
     "errors": [{"loc": [...], "msg": "...", "type": "..."}]}
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class ServiceError(Exception):
    """An error answered with ``status`` and ``{"detail": message}`` (never logged as a crash)."""

    def __init__(self, status: int, message: str, *, kind: str = "bad_request",
                 errors: list[dict[str, Any]] | None = None, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.headers = headers
        self.status = status
        self.message = message
        self.kind = kind
        self.errors = errors


def input_error(message: str) -> ServiceError:
    """HTTP 422: the body is well-formed but its content cannot be used."""
    return ServiceError(422, message, kind="invalid_input")


def too_large(message: str) -> ServiceError:
    return ServiceError(413, message, kind="too_large")


def query_label(index: int, qid: object | None) -> str:
    """``query 'q7' (queries[3])`` or ``queries[3]`` when the qid is unknown."""
    return f"query {str(qid)!r} (queries[{index}])" if qid is not None else f"queries[{index}]"


def _path(loc: Sequence[Any]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def _qid_at(body: Any, index: int) -> object | None:
    try:
        q = body["queries"][index]
        return q.get("qid") if isinstance(q, dict) else None
    except (KeyError, IndexError, TypeError):
        return None


def _clean_loc(loc: Sequence[Any]) -> list[Any]:
    # pydantic names union branches ("list[float]", "dict[str,float]"): they are not fields
    return [p for p in loc if p != "body" and not (isinstance(p, str) and ("[" in p or p.startswith("function-")))]


def validation_message(errors: Sequence[Any], body: Any = None) -> str:
    """One line for the first error (and a count of the others), naming query and field."""
    if not errors:
        return "invalid request body"
    loc = _clean_loc(errors[0].get("loc", ()))
    same = [e for e in errors if _clean_loc(e.get("loc", ())) == loc]
    if len(same) > 1:  # every branch of a union failed: say what would have been accepted
        msg = "expected " + " or ".join(str(e.get("msg", "")).removeprefix("Input should be ") for e in same)
    else:
        msg = str(errors[0].get("msg", "invalid value"))
    if len(loc) >= 2 and loc[0] == "queries" and isinstance(loc[1], int):
        where = f"{query_label(loc[1], _qid_at(body, loc[1]))}: {_path(loc[2:]) or 'the query'}"
    else:
        where = _path(loc) or "body"
    rest = len(errors) - len(same)
    more = f" (and {rest} more error(s))" if rest > 0 else ""
    return f"{where}: {msg}{more}"


def plain_errors(errors: Sequence[Any], limit: int = 20) -> list[dict[str, Any]]:
    """The first ``limit`` pydantic errors as JSON-safe dicts (no input echo, no context objects)."""
    return [{"loc": [p for p in e.get("loc", ())], "msg": str(e.get("msg", "")), "type": str(e.get("type", ""))}
            for e in errors[:limit]]
