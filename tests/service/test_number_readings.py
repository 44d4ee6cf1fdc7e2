"""One reading of every number: each JSON path (/rank's dense pass, one pass and two passes,
/evaluate, /fuse, /models/reload) reads a number's text as Python's ``float(text)`` does, or
refuses it as every other path does. Three libraries read the numbers (msgspec's decoder, jiter,
simdjson); past ``MAX_NUMBER_CHARS`` characters they part (msgspec reads ``0.`` + 99,999 zeros +
``1e100000`` as 0.0, the others as 1.0), so every path refuses a longer number
(``tunemix.service.json_body.check_number_lengths``, after msgspec's decode and the counts),
with a 422 naming the query and the field.

The readers are compared double for double on crafted and generated texts (each double written
many ways: shortest, in exponent form at every precision, positional, its exact decimal
expansion, padded with zeros); the endpoints are compared with the same request written with
the double's shortest text."""

from __future__ import annotations

import json
import re
from decimal import Decimal
from typing import Any

import msgspec
import numpy as np
import pytest
from fastapi.testclient import TestClient
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.service.conftest import N_FEATURES
from tunemix.service import dense_body
from tunemix.service.errors import ServiceError
from tunemix.service.json_body import MAX_NUMBER_CHARS, ONE_PASS_MAX_BYTES, check_number_lengths, decode_json, one_pass
from tunemix.service.rank_body import DECODER, DENSE_DECODER, json_lists, json_lists_two_passes
from tunemix.service.registry import ModelRegistry
from tunemix.service.routers import evaluate, fuse, models
from tunemix.service.settings import Settings

SETTINGS = Settings()
REST = ",0.25,0.5,0.75,1"  # the row's other features
assert REST.count(",") == N_FEATURES - 1


def zeros_then(digits: str, zeros: int, exponent: int, sign: str = "") -> str:
    """``0.`` + ``zeros`` zeros + ``digits`` + ``e<exponent>``."""
    return f"{sign}0.{'0' * zeros}{digits}e{exponent}"


def of_length(n: int) -> str:
    """1.0 written in exactly ``n`` characters: ``0.000...01e<k>``."""
    return next(t for k in range(n, 0, -1) if len(t := zeros_then("1", k, k + 1)) == n)


SMALLEST = float(np.nextafter(0.0, 1.0))
MAX_DOUBLE = float(np.finfo(np.float64).max)
CRAFTED = [
    # the attack's forms: msgspec read them as 0.0 (or refused them), jiter and simdjson as 1.0 or 0.5
    zeros_then("1", 99_999, 100_000), zeros_then("1", 100_000, 100_001, "-"), zeros_then("5", 100_000, 100_000),
    zeros_then("1", 150_000, 149_700), "1" + "0" * 100_000 + "e-100000",
    # either side of the bound
    of_length(MAX_NUMBER_CHARS), of_length(MAX_NUMBER_CHARS + 1), "1" + "0" * 1093 + "e-1093",
    "1" + "0" * 1094 + "e-1094",
    # every double written out in full fits
    format(Decimal(SMALLEST * (2**52 - 1)), "f"), "-" + format(Decimal(SMALLEST), "f"),
    format(Decimal(MAX_DOUBLE), "f"), np.format_float_positional(SMALLEST),
    # long mantissas about a halfway point, denormals, zeros, integers
    "1.00000000000000011102230246251565404236316680908203125",
    "1.00000000000000011102230246251565404236316680908203125" + "0" * 900 + "1",
    "2.4703282292062327e-324", "2.4703282292062328e-324", "4.9e-324", "2.2250738585072011e-308", "1e-400",
    "-0", "-0.0", "0e999999999", "9007199254740993", "18446744073709551617", "1.7976931348623157e308",
    "-1.7976931348623157e308", "1" + "0" * 400, "1e400", "0." + "0" * 1000 + "1",
]


def twin(text: str) -> float:
    """The value a path gives a number's text in a float field: an integer literal read as an
    integer, then converted (``-0`` is 0), any other by Python's correctly rounded ``float``
    (infinity beyond float64: refused by every path)."""
    if not re.fullmatch(r"-?[0-9]+", text):
        return float(text)
    try:
        return float(int(text))
    except OverflowError:
        return -np.inf if text.startswith("-") else np.inf


def refused_for_length(text: str) -> bool:
    return len(text) > MAX_NUMBER_CHARS


def length_refusal(text: str) -> str:
    """The words of every path's refusal of a number past the bound: its length, or "out of
    range" where msgspec's decode, which names a body's errors first, refuses the number itself."""
    try:
        msgspec.json.decode(f"[{text}]".encode(), type=list[float])
    except msgspec.ValidationError:
        return "out of range"
    return f"a number of {len(text)} characters"


def same(a: float, b: float) -> bool:
    return np.float64(a).tobytes() == np.float64(b).tobytes()


# ---------------------------------------------------------------------------- the bodies
def columnar(text: str) -> bytes:
    return f'{{"queries":[{{"qid":"q","ids":["a"],"features":[[{text}{REST}]]}}]}}'.encode()


def sparse(text: str) -> bytes:
    return f'{{"queries":[{{"qid":"q","documents":[{{"id":"a","features":{{"1":{text},"2":0.25}}}}]}}]}}'.encode()


def padded(body: bytes) -> bytes:
    """``body`` past ``ONE_PASS_MAX_BYTES`` (white space after it): the two passes' size."""
    return body + b" " * (ONE_PASS_MAX_BYTES + 1 - len(body))


def readings(text: str) -> dict[str, Any]:
    """What each library makes of ``text`` in a features field, read without the length check: a
    double, or None where it refuses the body."""
    out: dict[str, Any] = {}
    body = columnar(text)
    if dense_body.AVAILABLE:
        got = dense_body.dense_pass(DENSE_DECODER, body)
        out["simdjson"] = None if got is None else float(got[1][0][0, 0])
    req = one_pass(DECODER, body)
    out["jiter"] = None if req is None else req.queries[0].features[0][0]
    try:
        out["msgspec"] = msgspec.json.decode(body, type=DECODER.type).queries[0].features[0][0]
    except msgspec.ValidationError:
        out["msgspec"] = None
    return out


def refusal(fn: Any, *args: Any) -> tuple[int, str] | None:
    try:
        fn(*args)
    except ServiceError as exc:
        return exc.status, exc.message
    return None


def endpoints(text: str, registry: ModelRegistry) -> dict[str, Any]:
    """What each path makes of ``text``: the float32 feature /rank's paths put in the matrix (or
    their refusal), the double /evaluate's and /fuse's decode gives a score (or its refusal; the
    routes themselves are compared over HTTP below)."""
    def rank(fn: Any, body: bytes) -> Any:
        try:
            return float(fn(body, registry, SETTINGS)[2].features[0, 0])
        except ServiceError as exc:
            return exc.status, exc.message

    def scores(decoder: Any, body: bytes, get: Any) -> Any:
        """The route's reading: msgspec's decode, then (after the counts) the numbers' length."""
        try:
            value = get(decode_json(decoder, body, "test"))
            check_number_lengths(body)
        except ServiceError as exc:
            return exc.status, exc.message
        return value

    eval_body = f'{{"queries":[{{"qid":"q","labels":[1],"scores":[{text}]}}]}}'.encode()
    fuse_body = f'{{"queries":[{{"qid":"q","systems":[{{"ids":["a"],"scores":[{text}]}}]}}]}}'.encode()
    return {
        "rank dense": rank(json_lists, columnar(text)),
        "rank one pass": rank(json_lists, sparse(text)),
        "rank two passes": rank(json_lists, padded(columnar(text))),
        "rank two passes (sparse)": rank(json_lists_two_passes, sparse(text)),
        "evaluate": scores(evaluate.DECODER, eval_body, lambda r: r.queries[0].scores[0]),
        "evaluate, large": scores(evaluate.DECODER, padded(eval_body), lambda r: r.queries[0].scores[0]),
        "fuse": scores(fuse.DECODER, fuse_body, lambda r: r.queries[0].systems[0].scores[0]),
        "fuse, large": scores(fuse.DECODER, padded(fuse_body), lambda r: r.queries[0].systems[0].scores[0]),
    }


def check_text(text: str, registry: ModelRegistry) -> None:
    """Every path gives ``twin(text)`` (a float32 of it for /rank), or all refuse it alike (one
    body, one message, whichever path takes it)."""
    got = endpoints(text, registry)
    for one_body in (("rank dense", "rank two passes"), ("rank one pass", "rank two passes (sparse)"),
                     ("evaluate", "evaluate, large"), ("fuse", "fuse, large")):
        assert got[one_body[0]] == got[one_body[1]], (text[:80], got[one_body[0]], got[one_body[1]])
    if refused_for_length(text):
        words = length_refusal(text)
        for path, value in got.items():
            assert isinstance(value, tuple) and value[0] == 422, (path, text[:80], value)
            # a value beyond float32 is named by /rank's checks, which come first
            assert words in value[1] or (path.startswith("rank") and "finite float32" in value[1]), (path, value)
            assert "features" in value[1] or "scores[0]" in value[1], value
        assert refusal(check_number_lengths, columnar(text)) is not None
        assert refusal(models.reload_request, f'{{"model":{text}}}'.encode())[0] == 422  # type: ignore[index]
        return
    want = twin(text)
    for reader, value in readings(text).items():  # the libraries themselves
        assert value is None or same(value, want), (reader, text[:80], value, want)
    want32 = np.float32(want) if abs(want) <= float(np.finfo(np.float32).max) else None
    for path, value in got.items():
        if path.startswith("rank"):
            if want32 is None or not np.isfinite(want32):
                assert isinstance(value, tuple) and value[0] == 422, (path, text[:80], value)
            else:
                assert value == float(want32), (path, text[:80], value, want32)
        elif np.isfinite(want):
            assert isinstance(value, float) and same(value, want), (path, text[:80], value, want)
        else:
            assert isinstance(value, tuple) and value[0] == 422, (path, text[:80], value)


@pytest.mark.parametrize("text", CRAFTED, ids=[f"{i}-{len(t)}" for i, t in enumerate(CRAFTED)])
def test_crafted_numbers_read_alike_on_every_path(registry: ModelRegistry, text: str) -> None:
    check_text(text, registry)


def test_the_libraries_part_past_the_bound() -> None:
    """Why the bound: past it msgspec reads 1.0 as 0.0 where jiter reads 1.0 (simdjson too)."""
    import jiter

    text = zeros_then("1", 99_999, 100_000)
    assert float(text) == 1.0 and jiter.from_json(f"[{text}]".encode())[0] == 1.0
    assert msgspec.json.decode(f"[{text}]".encode(), type=list[float]) == [0.0]


# ---------------------------------------------------------------------------- generated texts
@st.composite
def number_texts(draw: Any) -> str:
    """A finite double written one of many ways (a valid JSON number each)."""
    x = draw(st.floats(allow_nan=False, allow_infinity=False))
    sign = "-" if np.signbit(x) else ""
    digits, exponent = np.format_float_scientific(abs(x), unique=True, trim="-").split("e")
    d = digits.replace(".", "")  # abs(x) = 0.d * 10**(exponent + 1)
    e = int(exponent) + 1
    zeros = draw(st.one_of(st.integers(0, 40), st.integers(0, MAX_NUMBER_CHARS + 20), st.sampled_from([100_000])))
    form = draw(st.sampled_from(["repr", "e", "positional", "exact", "leading zeros", "trailing zeros",
                                 "integer and exponent"]))
    if form == "repr":
        return repr(x)
    if form == "e":
        return format(x, f".{draw(st.integers(0, 40))}e")
    if form == "positional":
        text = np.format_float_positional(x, unique=True)
        return text + "0" if text.endswith(".") else text
    if form == "exact":
        return format(Decimal(x), "f")
    if form == "leading zeros":
        return f"{sign}0.{'0' * zeros}{d}e{e + zeros}"
    if form == "trailing zeros":
        return f"{sign}{d[0]}.{d[1:]}{'0' * zeros}e{e - 1}" if d[1:] or zeros else f"{sign}{d}e{e - 1}"
    if x == 0:  # "00e0" is not JSON
        return f"{sign}0e{zeros}"
    return f"{sign}{d}{'0' * zeros}e{e - len(d) - zeros}"


@settings(max_examples=300, deadline=None)
@given(text=number_texts())
def test_generated_numbers_read_alike_on_every_path(registry: ModelRegistry, text: str) -> None:
    assert float(text) == float(text)  # the strategy writes finite numbers
    check_text(text, registry)


# ---------------------------------------------------------------------------- over HTTP
def post(client: TestClient, path: str, body: bytes) -> tuple[int, Any]:
    r = client.post(path, content=body, headers={"Content-Type": "application/json"})
    answer = r.json()
    if isinstance(answer, dict):
        answer.pop("server_time_ms", None)
    return r.status_code, answer


def bracketed(text: str, v: float) -> tuple[bytes, bytes]:
    """An /evaluate and a /fuse body that tell whether ``text`` reads as ``v`` or as a double
    either side of it: each answer changes for a reading one ulp off (sklearn's convention
    averages a tie; a tie changes CombSUM's normalised scores)."""
    with np.errstate(over="ignore"):
        neighbours = (("below", float(np.nextafter(v, -np.inf))), ("above", float(np.nextafter(v, np.inf))))
    sides = [(name, repr(u)) for name, u in neighbours if np.isfinite(u)]
    # "below": the relevant document is the text's, above its neighbour; "above": the reverse
    queries = [{"qid": name, "labels": [0, 1] if name == "below" else [1, 0],
                "scores": [u, "T"] if name == "below" else ["T", u]} for name, u in sides]
    ev = json.dumps({"queries": queries, "metrics": ["ndcg@1"], "convention": "sklearn", "per_query": True})
    fu = json.dumps({"queries": [{"qid": "q", "systems": [{"ids": ["t", *(name for name, _ in sides)],
                                                           "scores": ["T", *(u for _, u in sides)]}]}],
                     "method": "combsum"})
    return tuple(re.sub(r'"(-?[0-9][^"]*)"', r"\1", b).replace('"T"', text).encode()  # type: ignore[return-value]
                 for b in (ev, fu))


@pytest.mark.parametrize("text", CRAFTED, ids=[f"{i}-{len(t)}" for i, t in enumerate(CRAFTED)])
def test_every_endpoint_answers_as_for_the_shortest_text(client: TestClient, text: str) -> None:
    """/rank (dense pass, one pass, two passes), /evaluate and /fuse answer a body as they answer
    it with the number's shortest text, or all refuse it for its length (422 naming the field)."""
    v = twin(text)
    rank_bodies = [columnar, sparse, lambda t: padded(columnar(t))]
    if refused_for_length(text):
        bodies = [("/rank", b(text)) for b in rank_bodies]
        bodies += list(zip(("/evaluate", "/fuse"), bracketed(text, v), strict=True))
        for path, body in bodies:
            status, answer = post(client, path, body)
            assert status == 422 and length_refusal(text) in answer["detail"], (path, answer)
            assert "(queries[0])" in answer["detail"], answer
        return
    if not np.isfinite(v):  # beyond float64: every /rank path refuses it, one body alike
        dense, one, two = (post(client, "/rank", b(text)) for b in rank_bodies)
        assert dense[0] == one[0] == 422 and dense == two, (dense, one, two)
        return
    shortest = repr(v)
    for path, make in [("/rank", b) for b in rank_bodies] + [("/evaluate", lambda t: bracketed(t, v)[0]),
                                                               ("/fuse", lambda t: bracketed(t, v)[1])]:
        assert post(client, path, make(text)) == post(client, path, make(shortest)), (path, text[:80])


def test_the_brackets_see_one_ulp(client: TestClient) -> None:
    """The /evaluate and /fuse bodies of ``bracketed`` answer otherwise for a text one ulp off."""
    for v in (1.0, 0.0, SMALLEST, MAX_DOUBLE):
        with np.errstate(over="ignore"):
            offs = (np.nextafter(v, -np.inf), np.nextafter(v, np.inf))
        for off in offs:
            if not np.isfinite(off):
                continue
            for path, exact, wrong in zip(("/evaluate", "/fuse"), bracketed(repr(v), v),
                                          bracketed(repr(float(off)), v), strict=True):
                assert post(client, path, exact) != post(client, path, wrong), (path, v, off)
