"""The byte scanner of feature arrays (app.feature_scan) against its slow twin: pydantic-core's
JSON reader, numpy's conversion to float32 (what /rank did before, and still does where the
scan gives up). Equal means equal to the bit, the sign of zero included."""

from __future__ import annotations

import json
import struct
from typing import Any

import numpy as np
import pydantic_core
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.feature_scan import scan_body
from app.parsing import _listed_rows, _rank_shape, fast_rank_body


def reference(body: bytes) -> Any:
    """The slow twin: the whole body read into Python lists, then numpy."""
    try:
        doc = pydantic_core.from_json(body)
    except ValueError:
        return None
    return _rank_shape(doc, _listed_rows)


def same(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if (a.model, a.version, a.top_k) != (b.model, b.version, b.top_k) or len(a.queries) != len(b.queries):
        return False
    for (qa, ia, xa), (qb, ib, xb) in zip(a.queries, b.queries, strict=True):
        with np.errstate(over="ignore"):  # beyond float32: inf on both sides
            fa, fb = xa.astype(np.float32), xb.astype(np.float32)
        if qa != qb or ia != ib or fa.shape != fb.shape or fa.view(np.uint32).tolist() != fb.view(np.uint32).tolist():
            return False
    return True


def body_of(rows: list[list[str]], qid: str = "q") -> bytes:
    """A one-query body whose feature values are the given JSON number texts."""
    docs = ", ".join(f'{{"id": "d{j}", "features": [{", ".join(r)}]}}' for j, r in enumerate(rows))
    return f'{{"queries": [{{"qid": "{qid}", "documents": [{docs}]}}]}}'.encode()


def scanned(body: bytes) -> np.ndarray | None:
    out = scan_body(body)
    return None if out is None else out[0]


# numbers as clients write them: repr of float64 (17 digits), of float32 values, fixed decimals,
# exponents, integers, signed zeros
f64 = st.floats(allow_nan=False, allow_infinity=False, min_value=-3e38, max_value=3e38)
f32 = st.floats(width=32, allow_nan=False, allow_infinity=False)
number_text = st.one_of(
    f64.map(repr),
    f32.map(lambda v: repr(float(v))),
    f32.map(lambda v: repr(float(np.float32(v)))),
    st.tuples(f64, st.integers(0, 9)).map(lambda t: f"{t[0]:.{t[1]}f}"),
    st.tuples(f64, st.integers(0, 17)).map(lambda t: f"{t[0]:.{t[1]}e}"),
    st.tuples(f64, st.integers(0, 17)).map(lambda t: f"{t[0]:.{t[1]}E}".replace("E+", "E")),
    st.integers(-(2**60), 2**60).map(str),
    st.sampled_from(["0", "-0", "0.0", "-0.0", "0e5", "-0E-3", "1e-45", "1e-38", "3.4028235e38", "3.4028236e38",
                     "1e22", "1e23", "123456789012345678", "1234567890123456789012", "0.000000",
                     "9007199254740993", "9007199254740992", "1e-22", "4.9e-324"]),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(number_text, min_size=3, max_size=3), min_size=1, max_size=6),
       st.sampled_from(["", " ", "\n\t", "\r\n "]))
def test_the_scan_reads_what_the_reference_reads(rows: list[list[str]], blank: str) -> None:
    body = body_of(rows).replace(b", ", f",{blank}".encode())
    want = reference(body)
    assert same(fast_rank_body(body), want)
    values = scanned(body)
    if values is not None and want is not None:  # where the scan reads, it reads every value exactly
        expected = want.queries[0][2].astype(np.float32).ravel()
        np.testing.assert_array_equal(values.view(np.uint32), expected.view(np.uint32))


def test_short_decimals_never_make_the_scan_give_up() -> None:
    rng = np.random.default_rng(1)
    rows = [[f"{v:.6f}" for v in rng.normal(0, 50, 46)] for _ in range(100)]
    rows[0][:4] = ["0", "-0", "12", "-3e2"]
    body = body_of(rows)
    values = scanned(body)
    assert values is not None and values.shape == (4600,)
    assert same(fast_rank_body(body), reference(body))


def _next_f32_midpoint_repr() -> str:
    """The shortest text of a float64 that lies exactly halfway between two float32 values, with
    17 significant digits (more than 2^53 as an integer: the scan's inexact path)."""
    a = np.float32(1.3)
    b = np.nextafter(a, np.float32(2))
    mid = (float(a) + float(b)) / 2  # exact in float64
    text = f"{mid:.16e}"
    assert float(text) == mid
    return text


def test_a_value_near_a_float32_midpoint_goes_to_the_reference() -> None:
    mid = _next_f32_midpoint_repr()
    body = body_of([[mid, "1.5", "2"]])
    assert scanned(body) is None  # too close to call from a 2-ulp estimate
    got = fast_rank_body(body)
    assert same(got, reference(body)) and got is not None
    # round half to even, as numpy does
    assert got.queries[0][2].astype(np.float32)[0, 0] == np.float32(float(mid))


@pytest.mark.parametrize("bad", ["01", "1.", ".5", "+1", "1e", "-", "1e+", "--1", "0x10", "NaN", "Infinity",
                                 "true", "null", '"1.5"', "[1]", "1 2"])
def test_what_the_scan_cannot_read_is_read_by_the_reference(bad: str) -> None:
    body = body_of([[bad, "1.5", "2"]])
    assert scanned(body) is None
    assert same(fast_rank_body(body), reference(body))


@pytest.mark.parametrize("text", [
    '{"queries": [{"qid": "q", "documents": [{"id": "features", "features": [1, 2]}]}]}',
    '{"queries": [{"qid": "\\"features\\": [", "documents": [{"id": "a", "features": [1, 2]}]}]}',
    '{"queries": [{"qid": "q", "documents": [{"id": "a", "feat\\u0075res": [1, 2]}]}]}',
    '{"queries": [{"qid": "q", "documents": [{"id": "a", "features": 0}, {"id": "b", "features": [1, 2]}]}]}',
    '{"queries": [{"qid": "q", "documents": [{"id": "a", "features": [1, 2]}, {"id": "b", "features": 0}]}]}',
    '{"queries": [{"qid": "q", "documents": [{"id": "a", "features": [1, 2], "features": [3, 4]}]}]}',
    '{"queries": [{"qid": "q", "documents": [{"id": "a", "features": [1, 2]}, {"id": "b", "features": [3]}]}]}',
    '{"queries": [{"qid": "q", "documents": [{"id": "a", "features": []}]}]}',
    '{"queries": [{"qid": "q", "features": [1], "documents": [{"id": "a", "features": [1, 2]}]}]}',
    '{"queries": [{"qid": "q", "documents": [{"id": "a", "features": {"1": 2.5}}]}]}',
    '{"queries": [{"qid": "q", "documents": [{"id": "a", "features": [1, true]}]}]}',
    '{"queries": [{"qid": "q", "documents": [{"id": "a", "features": [1, 2]}]}], "features": [1]}',
    '{"queries": [{"qid": "q", "documents": [{"id": "a", "features": [1, 2]}]}]} x',
    '{"queries": [{"qid": "q", "documents": [{"id": "a", "features": [1, 2',
    '{"queries": [{"qid": "q", "documents": [{"id": "a\\u00e9", "features": [1, 2]}]}], "top_k": 1}',
])
def test_shapes_and_strings_around_the_arrays(text: str) -> None:
    body = text.encode()
    assert same(fast_rank_body(body), reference(body))


def test_exactly_rounded_without_the_reference() -> None:
    """Fixed cases against float32(float(text)) computed here (Python's own correctly rounded
    reading), so a change common to both paths would still be caught."""
    texts = ["0.1", "0.333333", "-17.125", "1e10", "2.5e-5", "16777217", "0.30000000000000004",
             "123456.789012345678", "3.4e20", "-1.5e-20", "1e22", "1e-22"]
    values = scanned(body_of([texts]))
    assert values is not None
    want = [struct.unpack("<I", struct.pack("<f", float(t)))[0] for t in texts]
    assert values.view(np.uint32).tolist() == want


def test_dense_bodies_as_json_dumps_writes_them() -> None:
    rng = np.random.default_rng(5)
    x = rng.standard_normal((30, 7)).astype(np.float32)
    body = json.dumps({"queries": [{"qid": 1, "documents": [{"id": j, "features": x[j].tolist()} for j in range(30)]}],
                       "top_k": 3}).encode()
    assert scanned(body) is not None
    got = fast_rank_body(body)
    assert got is not None and same(got, reference(body))
    np.testing.assert_array_equal(got.queries[0][2], x)


def test_full_precision_doubles_are_read_exactly_in_bulk() -> None:
    """20,000 float64 texts of up to 17 significant digits, 1e-7 to 1e7 (the scan's inexact path,
    checked against float32 midpoints), and float32 reprs: read exactly, without giving up."""
    rng = np.random.default_rng(11)
    v = rng.standard_normal(20_000) * 10.0 ** rng.integers(-6, 7, 20_000)
    texts = [repr(float(t)) for t in v] + [repr(float(np.float32(t))) for t in v[:5_000]]
    width = 50
    rows = [texts[i:i + width] for i in range(0, len(texts) - len(texts) % width, width)]
    values = scanned(body_of(rows))
    # a value within 8 ulp of a float32 midpoint (about 3e-8 of them) would send it all to the reference
    assert values is not None
    want = np.array([float(t) for r in rows for t in r]).astype(np.float32)
    np.testing.assert_array_equal(values.view(np.uint32), want.view(np.uint32))
