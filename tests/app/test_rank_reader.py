"""The /rank body reader (app.rank_reader, through app.parsing.fast_rank_body and fast_rank_lists)
against its slow twin: the full validation (``RankRequest`` by pydantic, then ``rank_lists``).

Wherever the reader takes a body, the arrays, qids, ids, model, version and top_k it gives must
be those of the full validation, the feature values equal to the bit (the sign of zero included),
and a body the full validation rejects must be rejected with the same error or left to it."""

from __future__ import annotations

import json
import random
import struct
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.errors import ServiceError
from app.parsing import fast_rank_body, fast_rank_lists, parse_json, rank_lists
from app.rank_reader import read_body
from app.schemas import RankRequest

LIMITS = {"max_queries": 10_000, "max_documents": 1_000_000}


def _outcome(lists: Any, model: Any, version: Any, top_k: Any) -> tuple[Any, ...]:
    return ("ok", lists.features.shape, lists.features.view(np.uint32).tobytes(), lists.offsets.tolist(),
            [(type(q), q) for q in lists.qids], [(type(i), i) for i in lists.ids], model, version, top_k)


def reference(body: bytes, d: int) -> tuple[Any, ...]:
    """The slow twin: pydantic's full validation, then ``rank_lists``."""
    try:
        req = parse_json(RankRequest, body)
        lists = rank_lists(req.queries, d, **LIMITS)
    except ServiceError as exc:
        return ("error", exc.status, exc.message)
    return _outcome(lists, req.model, req.version, req.top_k)


def fast(body: bytes, d: int) -> tuple[Any, ...] | None:
    """What the fast path gives: None where it leaves the body to the full validation."""
    parsed = fast_rank_body(body)
    if parsed is None:
        return None
    try:
        lists = fast_rank_lists(parsed, d, **LIMITS)
    except ServiceError as exc:
        return ("error", exc.status, exc.message)
    if lists is None:
        return None
    return _outcome(lists, parsed.model, parsed.version, parsed.top_k)


def agree(body: bytes, d: int) -> tuple[Any, ...] | None:
    got = fast(body, d)
    if got is not None:
        assert got == reference(body, d), body[:300]
    return got


def body_of(rows: list[list[str]], qid: str = "q") -> bytes:
    """A one-query body whose feature values are the given JSON number texts."""
    docs = ", ".join(f'{{"id": "d{j}", "features": [{", ".join(r)}]}}' for j, r in enumerate(rows))
    return f'{{"queries": [{{"qid": "{qid}", "documents": [{docs}]}}]}}'.encode()


def json_value(text: str) -> float:
    """The float a JSON number text stands for in the reference (an integer token is an int first:
    ``-0`` is 0)."""
    return float(int(text)) if not any(c in text for c in ".eE") else float(text)


def values_of(body: bytes) -> np.ndarray | None:
    read = read_body(body)
    return None if read is None else read.features.ravel()


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
    st.tuples(st.integers(-(10**8), 10**8), st.integers(0, 9)).map(lambda t: f"{t[0] / 10 ** t[1]:.{t[1]}f}"),
    st.sampled_from(["0", "-0", "0.0", "-0.0", "0e5", "-0E-3", "1e-45", "1e-38", "3.4028235e38", "3.4028236e38",
                     "1e22", "1e23", "123456789012345678", "1234567890123456789012", "0.000000", "0.0000001",
                     "9999999.9999999", "-9999999.9999999", "1234567", "12345678", "0.12345678", "00", "-00.5",
                     "9007199254740993", "9007199254740992", "1e-22", "4.9e-324", "7.", "-.5", "1.5.2", "--1"]),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(number_text, min_size=3, max_size=3), min_size=1, max_size=6),
       st.sampled_from(["", " ", "\n\t", "\r\n "]))
def test_the_reader_reads_what_the_reference_reads(rows: list[list[str]], blank: str) -> None:
    body = body_of(rows).replace(b", ", f",{blank}".encode())
    agree(body, 3)
    values = values_of(body)
    if values is not None:  # where the reader reads, it reads every value exactly
        want = np.array([json_value(t) for r in rows for t in r]).astype(np.float32)
        np.testing.assert_array_equal(values.view(np.uint32), want.view(np.uint32))


def test_short_decimals_never_make_the_reader_give_up() -> None:
    rng = np.random.default_rng(1)
    rows = [[f"{v:.6f}" for v in rng.normal(0, 50, 46)] for _ in range(100)]
    rows[0][:4] = ["0", "-0", "12", "-3e2"]
    body = body_of(rows)
    values = values_of(body)
    assert values is not None and values.shape == (4600,)
    assert agree(body, 46) is not None


def _next_f32_midpoint_repr() -> str:
    """The shortest text of a float64 that lies exactly halfway between two float32 values, with
    17 significant digits (more than 2^53 as an integer: the reader's inexact path)."""
    a = np.float32(1.3)
    b = np.nextafter(a, np.float32(2))
    mid = (float(a) + float(b)) / 2  # exact in float64
    text = f"{mid:.16e}"
    assert float(text) == mid
    return text


def test_a_value_near_a_float32_midpoint_goes_to_the_reference() -> None:
    mid = _next_f32_midpoint_repr()
    body = body_of([[mid, "1.5", "2"]])
    assert values_of(body) is None  # too close to call from a 3-ulp estimate
    got = fast_rank_body(body)
    assert got is not None and agree(body, 3) is not None
    # round half to even, as numpy does
    assert got.features[0, 0] == np.float32(float(mid))


@pytest.mark.parametrize("bad", ["01", "1.", ".5", "+1", "1e", "-", "1e+", "--1", "0x10", "NaN", "Infinity",
                                 "true", "null", '"1.5"', "[1]", "1 2", "1.2.3", "-01.5", "0.5e", "1e5e5"])
def test_what_the_reader_cannot_read_is_read_by_the_reference(bad: str) -> None:
    body = body_of([[bad, "1.5", "2"]])
    assert values_of(body) is None
    agree(body, 3)


def test_exactly_rounded_without_the_reference() -> None:
    """Fixed cases against float32(float(text)) computed here (Python's own correctly rounded
    reading), so a change common to both paths would still be caught."""
    texts = ["0.1", "0.333333", "-17.125", "1e10", "2.5e-5", "16777217", "0.30000000000000004",
             "123456.789012345678", "3.4e20", "-1.5e-20", "1e22", "1e-22", "9999999.9999999", "0.0000001",
             "1234567.1234567", "-0.0", "-0"]
    values = values_of(body_of([texts]))
    assert values is not None
    want = [struct.unpack("<I", struct.pack("<f", float(t)))[0] for t in texts]
    want[-1] = 0  # the integer -0 is 0
    assert values.view(np.uint32).tolist() == want


def test_full_precision_doubles_are_read_exactly_in_bulk() -> None:
    """20,000 float64 texts of up to 17 significant digits, 1e-7 to 1e7 (the inexact path,
    checked against float32 midpoints), and float32 reprs: read exactly, without giving up."""
    rng = np.random.default_rng(11)
    v = rng.standard_normal(20_000) * 10.0 ** rng.integers(-6, 7, 20_000)
    texts = [repr(float(t)) for t in v] + [repr(float(np.float32(t))) for t in v[:5_000]]
    width = 50
    rows = [texts[i:i + width] for i in range(0, len(texts) - len(texts) % width, width)]
    values = values_of(body_of(rows))
    # a value within 8 ulp of a float32 midpoint (about 3e-8 of them) would send it all to the reference
    assert values is not None
    want = np.array([float(t) for r in rows for t in r]).astype(np.float32)
    np.testing.assert_array_equal(values.view(np.uint32), want.view(np.uint32))


def test_dense_and_columnar_bodies_as_json_dumps_writes_them() -> None:
    rng = np.random.default_rng(5)
    x = rng.standard_normal((30, 7)).astype(np.float32)
    queries = [{"qid": 1, "documents": [{"id": j, "features": x[j].tolist()} for j in range(12)]},
               {"qid": "b", "ids": [f"é{j}" for j in range(12, 30)], "features": x[12:].tolist()}]
    for indent in (None, 2):
        body = json.dumps({"queries": queries, "top_k": 3, "model": "m", "version": None}, indent=indent,
                          ensure_ascii=False).encode()
        read = read_body(body)
        assert read is not None
        np.testing.assert_array_equal(read.features, x)
        assert read.offsets.tolist() == [0, 12, 30] and read.qids == [1, "b"]
        assert read.ids == list(range(12)) + [f"é{j}" for j in range(12, 30)]
        assert (read.model, read.version, read.top_k) == ("m", None, 3)
        assert agree(body, 7) is not None


# ---------------------------------------------------------------------------- shapes, by hand
GOOD = {"queries": [{"qid": "q", "documents": [{"id": "a", "features": [1, 2]}, {"id": 5, "features": [3.5, -4]}]},
                    {"qid": 9, "ids": ["x", "y"], "features": [[0.5, 0], [-0.0, 1e3]]}]}


@pytest.mark.parametrize("text", [
    '{"queries": [{"qid": "q", "documents": [{"id": "features", "features": [1, 2]}]}]}',
    '{"queries": [{"qid": "\\"features\\": [", "documents": [{"id": "a", "features": [1, 2]}]}]}',
    '{"queries": [{"qid": "q", "documents": [{"id": "a", "feat\\u0075res": [1, 2]}]}]}',
    '{"queries": [{"qid": "q", "documents": [{"id": "a", "features": 0}, {"id": "b", "features": [1, 2]}]}]}',
    '{"queries": [{"qid": "q", "documents": [{"id": "a", "features": [1, 2]}, {"id": "b", "features": 0}]}]}',
    '{"queries": [{"qid": "q", "documents": [{"id": "a", "features": [1, 2], "features": [3, 4]}]}]}',
    '{"queries": [{"qid": "q", "documents": [{"id": "a", "id": "b", "features": [1, 2]}]}]}',
    '{"queries": [{"qid": "q", "documents": [{"id": "a", "features": [1, 2]}, {"id": "b", "features": [3]}]}]}',
    '{"queries": [{"qid": "q", "documents": [{"id": "a", "features": []}]}]}',
    '{"queries": [{"qid": "q", "features": [1], "documents": [{"id": "a", "features": [1, 2]}]}]}',
    '{"queries": [{"qid": "q", "documents": [{"id": "a", "features": {"1": 2.5}}]}]}',
    '{"queries": [{"qid": "q", "documents": [{"id": "a", "features": [1, true]}]}]}',
    '{"queries": [{"qid": "q", "documents": [{"id": "a", "features": [1, 2]}]}], "features": [1]}',
    '{"queries": [{"qid": "q", "documents": [{"id": "a", "features": [1, 2]}]}]} x',
    '{"queries": [{"qid": "q", "documents": [{"id": "a", "features": [1, 2]}]}]}\n\t ',
    '{"queries": [{"qid": "q", "documents": [{"id": "a", "features": [1, 2',
    '{"queries": [{"qid": "q", "documents": [{"id": "a\\u00e9", "features": [1, 2]}]}], "top_k": 1}',
    '{"queries": [{"qid": "q", "documents": [{"id": "a\tb", "features": [1, 2]}]}]}',
    '{"queries": [{"qid": "q", "documents": [{"id": "a", "features": [1, 2]}]}], "queries": []}',
    '{"queries": [{"qid": "q", "documents": [{"id": "a", "features": [1, 2]}]}], "top_k": null, "model": null}',
    '{"queries": [{"qid": "q", "documents": [{"id": "a", "features": [1, 2]}]}], "top_k": 2.0}',
    '{"queries": [{"qid": "q", "documents": [{"id": "a", "features": [1, 2]}]}], "top_k": -1}',
    '{"queries": [{"qid": "q", "documents": [{"id": "a", "features": [1, 2]}]}], "top_k": nul}',
    '{"queries": [{"qid": "q", "documents": [{"id": "a", "features": [1, 2]}]}], "model": 7}',
    '{"queries": [{"qid": "q", "documents": [{"id": 1e2, "features": [1, 2]}]}]}',
    '{"queries": [{"qid": -0, "documents": [{"id": -12, "features": [1, 2]}]}]}',
    '{"queries": [{"qid": 01, "documents": [{"id": 1, "features": [1, 2]}]}]}',
    '{"queries": [{"qid": 1234567890123456789, "documents": [{"id": 1, "features": [1, 2]}]}]}',
    '{"queries": [{"qid": "q", "documents": [{"id": 1, "features": [1, 2]}, {"id": "1", "features": [1, 2]}]}]}',
    '{"queries": [{"qid": "q", "ids": ["a", "b"], "features": [[1, 2]]}]}',
    '{"queries": [{"qid": "q", "ids": ["a"], "features": [[1, 2], [3, 4]]}]}',
    '{"queries": [{"qid": "q", "ids": [], "features": []}]}',
    '{"queries": [{"qid": "q", "ids": ["a"]}]}',
    '{"queries": [{"qid": "q", "features": [[1, 2]]}]}',
    '{"queries": [{"qid": "q", "ids": ["a"], "features": [[1, 2]], "documents": [{"id": "b", "features": [1, 2]}]}]}',
    '{"queries": [{"documents": [{"id": "a", "features": [1, 2]}]}]}',
    '{"queries": [{"qid": "q", "documents": [{"features": [1, 2]}]}]}',
    '{"queries": []}',
    '{"queries": {}}',
    '[]',
    '',
    '{"queries": [{"qid": "q", "documents": [{"id": "a", "features": [1, 2]},]}]}',
    '{"queries": [{"qid": "q", "documents": [{"id": "a", "features": [1, 2],}]}]}',
    '{"queries": [{"qid": "q", "documents": [{"id": "a", "features": [1, 2]}]},]}',
    '{"queries": [{"qid": "q", "documents": [{"id": "a" "features": [1, 2]}]}]}',
    '{"queries": [{"qid": "q", "documents": [{"id": "a", "features": [1 , 2 ] } ] } ] }',
    '{"queries": [{"qid": "q", "documents": [{"id": "a", "features": [1, 2]}]}]}\x00',
    '\ufeff{"queries": [{"qid": "q", "documents": [{"id": "a", "features": [1, 2]}]}]}',
    json.dumps(GOOD),
    json.dumps({**GOOD, "model": "default", "version": "v1", "top_k": 4}),
])
def test_shapes_and_strings(text: str) -> None:
    agree(text.encode(), 2)


def test_the_common_shapes_are_read_by_the_reader_itself() -> None:
    for body in (json.dumps(GOOD), json.dumps({**GOOD, "model": "m", "top_k": 1}, indent=1)):
        assert read_body(body.encode()) is not None, body


def test_invalid_utf8_in_a_string_goes_to_the_reference() -> None:
    body = b'{"queries": [{"qid": "q\xff", "documents": [{"id": "a", "features": [1, 2]}]}]}'
    assert read_body(body) is None
    assert fast(body, 2) is None
    assert reference(body, 2)[0] == "error"


def test_duplicate_ids_are_named_as_the_full_validation_names_them() -> None:
    body = json.dumps({"queries": [{"qid": "q", "ids": ["a", "b", "a"], "features": [[1], [2], [3]]}]}).encode()
    got = agree(body, 1)
    assert got is not None and got[0] == "error" and "'a'" in got[2]


def _mutations(body: bytes, rng: random.Random, n: int) -> list[bytes]:
    alphabet = b'{}[]:,"0123456789.-eE \\ntruefalsn'
    out = []
    for _ in range(n):
        b = bytearray(body)
        for _ in range(rng.randint(1, 3)):
            at = rng.randrange(len(b))
            what = rng.random()
            if what < 0.4:
                del b[at]
            elif what < 0.7:
                b.insert(at, rng.choice(alphabet))
            else:
                b[at] = rng.choice(alphabet)
        out.append(bytes(b))
    return out


def test_mutated_bodies_are_read_as_the_full_validation_reads_them_or_left_to_it() -> None:
    """A byte deleted, inserted or replaced here and there (a JSON grammar error, a changed
    number, a broken key, ...): never an answer the full validation does not give."""
    rng = random.Random(3)
    bodies = [json.dumps(GOOD).encode(), json.dumps({**GOOD, "top_k": 3, "model": "m"}, separators=(",", ":")).encode()]
    taken = 0
    for body in bodies:
        for mutated in _mutations(body, rng, 1500):
            taken += agree(mutated, 2) is not None
    assert taken > 100  # some mutations stay valid (a digit changed, a blank added) and are read


# ids and qids: mostly strings (escapes, non-ASCII, blanks among them) and integers (beyond 18
# digits too), now and then a bool, a float or null (the full validation's to judge)
json_id = st.one_of(st.text(max_size=6), st.text(alphabet='ab"\\é\t/', max_size=3), st.integers(-(10**20), 10**20),
                    st.integers(-3, 3), st.text(alphabet="xyz0123456789", min_size=1, max_size=4),
                    st.integers(0, 10**6), st.sampled_from([True, 1.5, None, 2.0]))
top_fields = st.fixed_dictionaries({}, optional={
    "model": st.one_of(st.none(), st.text(max_size=3), st.just(7)),
    "version": st.one_of(st.none(), st.text(alphabet="v12é", max_size=3)),
    "top_k": st.one_of(st.none(), st.integers(-1, 5), st.sampled_from([True, 2.0])),
    "unknown": st.just(1),
})


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(json_id, st.booleans(), st.lists(json_id, min_size=1, max_size=4)), min_size=1, max_size=3),
       top_fields, st.booleans(), st.integers(1, 3))
def test_generated_bodies_agree_with_the_full_validation(queries: list[Any], extra: dict[str, Any], ascii_only: bool,
                                                         width: int) -> None:
    rng = np.random.default_rng(len(queries))
    out = []
    for qid, columnar, ids in queries:
        x = rng.standard_normal((len(ids), width)).round(3).tolist()
        if columnar:
            out.append({"qid": qid, "ids": ids, "features": x})
        else:
            out.append({"qid": qid, "documents": [{"id": i, "features": r} for i, r in zip(ids, x, strict=True)]})
    body = json.dumps({"queries": out, **extra}, ensure_ascii=ascii_only).encode()
    agree(body, width)


@pytest.fixture
def deferred(monkeypatch: pytest.MonkeyPatch) -> bool:
    """Every body read as a big one: the structure first, then the rows after the first (on two
    threads where numba has them: ``rank_reader.PARALLEL_MIN_BYTES``)."""
    from app import rank_reader
    from training.scoring import forest

    monkeypatch.setattr(rank_reader, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(forest, "_scoring_threads", 2)
    return forest.get_scoring_threads() > 1


def test_rows_read_after_the_structure_are_read_alike(deferred: bool) -> None:
    if not deferred:
        pytest.skip("numba has one thread here: no body is read in two passes")
    rng = np.random.default_rng(9)
    x = rng.standard_normal((700, 5)).round(6).astype(np.float32)
    queries = [{"qid": "a", "documents": [{"id": j, "features": x[j].tolist()} for j in range(300)]},
               {"qid": "b", "ids": [f"d{j}" for j in range(300, 700)], "features": x[300:].tolist()}]
    body = json.dumps({"queries": queries}).encode()
    read = read_body(body)
    assert read is not None
    np.testing.assert_array_equal(read.features, x)
    assert agree(body, 5) is not None
    text = body.decode()
    for bad in (
        text.replace(json.dumps(x[450].tolist()), json.dumps(x[450].tolist()[:4])),  # a short row, late
        text.replace(json.dumps(x[650].tolist()), json.dumps([*x[650].tolist(), 1.0])),  # a long one
        text.replace(json.dumps(x[500].tolist()), json.dumps([*x[500].tolist()[:4], "]"])),  # a string with ']'
        text.replace(json.dumps(x[520].tolist()), json.dumps([*x[520].tolist()[:4], True])),
        text.replace(json.dumps(x[699].tolist()), json.dumps(x[699].tolist())[:-1]),  # unclosed
        text[:text.index(json.dumps(x[600].tolist())) + 3],  # the body ends inside a row
    ):
        assert read_body(bad.encode()) is None
        agree(bad.encode(), 5)


def test_short_rows_after_a_long_first_one_are_given_up_within_the_buffer(deferred: bool) -> None:
    """The second pass places row r at r * width of the first row: 4,000 one-number rows after a
    row of 400 would reach far beyond the values the body holds; each slot is checked first."""
    if not deferred:
        pytest.skip("numba has one thread here: no body is read in two passes")
    rows = [[str(v) for v in range(400)]] + [["1"]] * 4000
    body = json.dumps({"queries": [{"qid": "q", "ids": list(range(len(rows))),
                                    "features": [[int(v) for v in r] for r in rows]}]}).encode()
    assert read_body(body) is None
    agree(body, 400)


def test_mutated_bodies_read_in_two_passes(deferred: bool) -> None:
    if not deferred:
        pytest.skip("numba has one thread here: no body is read in two passes")
    rng = random.Random(4)
    rows = [[f"{v:.3f}" for v in np.random.default_rng(j).standard_normal(3)] for j in range(40)]
    body = body_of(rows)
    taken = 0
    for mutated in _mutations(body, rng, 1500):
        taken += agree(mutated, 3) is not None
    assert taken > 100


def test_the_warm_up_compiles_the_parallel_row_reader(deferred: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    from app import rank_reader
    from app.main import warm_kernels

    monkeypatch.setattr(rank_reader, "PARALLEL_MIN_BYTES", 64 * 1024)
    if not deferred:
        pytest.skip("numba has one thread here: no body is read in two passes")
    calls: list[int] = []
    kernel = rank_reader._read_rows_parallel

    def spy(*args: Any) -> Any:
        calls.append(1)
        return kernel(*args)

    monkeypatch.setattr(rank_reader, "_read_rows_parallel", spy)
    warm_kernels()
    assert calls
