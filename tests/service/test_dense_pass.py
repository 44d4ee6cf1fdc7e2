"""/rank's dense pass (``tunemix.service.dense_body.dense_pass``: msgspec's skeleton and simdjson's doubles)
against its slow twins: each value read by Python's ``float`` (correctly rounded), each verdict
the two passes' (``json_lists_two_passes``); which bodies it takes and which it leaves to the
one pass; its peak memory. ``tests/service/test_one_pass.py`` runs its fixed and generated bodies
through ``json_lists``, whose first pass this is, against the same two passes."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.service.conftest import N_FEATURES
from tests.service.test_one_pass import ROW, SETTINGS, outcome, q, same_verdict
from tunemix.service import dense_body, rank_body
from tunemix.service.json_body import ONE_PASS_MAX_BYTES, ONE_PASS_MULTIPLE
from tunemix.service.rank_body import DENSE_DECODER, json_lists
from tunemix.service.registry import ModelRegistry

pytestmark = pytest.mark.skipif(not dense_body.AVAILABLE, reason="pysimdjson is not installed")


def dense(body: bytes) -> Any:
    return dense_body.dense_pass(DENSE_DECODER, body)


# ---------------------------------------------------------------------------- the values
def rows_body(texts: list[str], columnar: bool) -> bytes:
    """A /rank body of one query whose rows are ``texts`` (each a features value's JSON text),
    as columns (ids 0..m-1 + features) or as documents (id j, features the j-th text)."""
    if columnar:
        return q('"ids":[' + ",".join(str(i) for i in range(len(texts))) + '],"features":[' + ",".join(texts) + "]")
    return q('"documents":[' + ",".join(f'{{"id":{i},"features":{t}}}' for i, t in enumerate(texts)) + "]")


def twin_value(text: str) -> float:
    """A JSON number as the service's parsers read it into a float field: an integer literal as
    an integer, then converted (``-0`` is 0, as msgspec and jiter read it), any other by Python's
    ``float`` (correctly rounded)."""
    return float(int(text)) if re.fullmatch(r"-?[0-9]+", text) else float(text)


def twin_block(texts: list[list[str]]) -> np.ndarray:
    """The slow twin: each number's text read by ``twin_value``."""
    return np.array([[twin_value(t) for t in row] for row in texts], dtype=np.float64).reshape(len(texts), -1)


DIGITS = st.text("0123456789", min_size=1, max_size=25)
NUMBER_TEXT = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.integers(-(2**63), 2**64 - 1).map(str),
    st.builds(lambda sign, whole, frac, exp: f"{sign}{int(whole)}.{frac}e{exp}", st.sampled_from(["", "-"]),
              DIGITS, DIGITS, st.integers(-330, 310)),
    st.sampled_from(["-0", "-0.0", "0e0", "1E5", "1e+5", "4.9e-324", "2.4703282292062327e-324",
                     "2.2250738585072011e-308", "1.7976931348623157e308", "9007199254740993",
                     "18446744073709551615", "-9223372036854775808", "0.30000000000000004"]))


@settings(max_examples=400, deadline=None)
@given(rows=st.lists(st.lists(NUMBER_TEXT, min_size=3, max_size=3), min_size=1, max_size=4),
       columnar=st.booleans())
def test_the_doubles_are_pythons_float_of_each_text(rows: list[list[str]], columnar: bool) -> None:
    body = rows_body(["[" + ",".join(r) + "]" for r in rows], columnar)
    got = dense(body)
    want = twin_block(rows)
    if not np.isfinite(want).all():  # beyond float64: left to the others, which refuse it
        assert got is None, body
        return
    assert got is not None, body
    (block,) = got[1]
    assert block.dtype == np.float64 and block.shape == want.shape and block.tobytes() == want.tobytes(), body


# ---------------------------------------------------------------------------- what it takes
def test_dense_bodies_take_the_dense_pass_only(registry: ModelRegistry, monkeypatch: pytest.MonkeyPatch) -> None:
    """A dense body (documents or columns) never reaches the one pass or the two passes."""
    def never(*args: Any) -> None:
        raise AssertionError("another pass ran")

    for name in ("one_pass", "decode_json", "check_repeated_keys"):
        monkeypatch.setattr(rank_body, name, never)
    bodies = [q(f'"ids":["a","b"],"features":[{ROW},{ROW}]'),
              q(f'"documents":[{{"id":"a","features":{ROW}}},{{"id":7,"features":[1,2,3,4,5]}}]'),
              b'{"top_k":1,"queries":[{"qid":1,"ids":[1],"features":[' + ROW.encode() + b']},{"qid":2,"documents":'
              b'[{"features":' + ROW.encode() + b',"id":"x"}],"explain_pair":["x","x"]}],"relevance":true}']
    for body in bodies:
        req, _, lists = json_lists(body, registry, SETTINGS)
        assert isinstance(req, rank_body.DenseRequest) and lists.features.shape[1] == N_FEATURES


NESTED = "[[0.1],[0.2],[0.3],[0.4],[0.5]]"  # five values once flattened: as_buffer alone would take it
DECLINED = [
    q(f'"documents":[{{"id":"a","features":{NESTED}}}]'),
    q(f'"ids":["a"],"features":[{NESTED}]'),
    q('"ids":["a"],"features":[[0.1,0.2,[0.3,0.4],0.5]]'),
    q('"ids":["a"],"features":[[0.1,0.2,[],0.3,0.4,0.5]]'),
    q('"documents":[{"id":"a","features":{"1":0.5}}]'),  # sparse: the one pass's
    q(f'"documents":[{{"id":"a","features":{ROW},"id":"b"}}]'),
    q(f'"documents":[{{"id":"a","features":{ROW},"features":{ROW}}}]'),
    q(f'"ids":["a"],"features":[{ROW}],"ids":["b"]'),
    q(f'"ids":["a"],"features":[{ROW}]')[:-1] + b',"top_k":1,"top_k":2}',
    b'{"queries":[{"qid":1,"ids":["a"],"features":[' + ROW.encode() + b']}],"queries":[]}',
    q('"ids":["a"],"features":[["0.1",0.2,0.3,0.4,0.5]]'),
    q('"ids":["a"],"features":[[true,0.2,0.3,0.4,0.5]]'),
    q('"ids":["a"],"features":[[null,0.2,0.3,0.4,0.5]]'),
    q('"ids":["a"],"features":[[{},0.2,0.3,0.4,0.5]]'),
    q('"ids":["a"],"features":[[1e400,0.2,0.3,0.4,0.5]]'),
    q('"ids":["a"],"features":[[123456789012345678901234567890,0.2,0.3,0.4,0.5]]'),
    q(f'"ids":["a","b"],"features":[{ROW},[0.1,0.2]]'),
    q('"documents":[]'),
    q(f'"documents":[{{"id":"a","features":{ROW}}}],"ids":["a"]'),
    q(f'"ids":["a"],"features":[{ROW}]')[:-3] + b"]",
    q('"ids":["a"],"features":[[0.1,0.2,0.3,0.4,0.5' + "]" * 3),
    q('"ids":["a"],"features":[' + "[" * 100_000 + "]" * 100_000 + "]"),
    q(f'"ids":["#"],"features":[{ROW}]').replace(b"#", b"\xff"),
    # one [ a row in all, but not one in each: a row without its own (a number, a string, an
    # object) beside a nested one
    q(f'"ids":["a","b"],"features":[0.5,[{ROW}]]'),
    q(f'"documents":[{{"id":"a","features":0.5}},{{"id":"b","features":[{ROW}]}}]'),
    q(f'"documents":[{{"id":"a","features":"x"}},{{"id":"b","features":[{ROW}]}}]'),
    q(f'"documents":[{{"id":"a","features":{{"1":[0.5]}}}},{{"id":"b","features":{ROW}}}]'),
]


@pytest.mark.parametrize("body", DECLINED, ids=[str(i) for i in range(len(DECLINED))])
def test_what_the_dense_pass_leaves_to_the_others(registry: ModelRegistry, body: bytes) -> None:
    """Nested rows, sparse documents, repeated keys, non-numbers, numbers beyond float64 or 64-bit
    integers, unequal rows, another form: the dense pass takes none, and the verdict is the two
    passes' (a nested row refused as a row of numbers is)."""
    assert dense(body) is None
    verdict = same_verdict(body, registry)
    if b"[[0.1]" in body or b"[0.3,0.4]" in body or b",[]," in body:
        assert verdict[0] == "refused" and verdict[1] == 422 and "float" in verdict[2], verdict[:3]


#: a row's text: flat, nested, empty, or a number, a string or an object where a row should be
ROW_TEXTS = st.sampled_from([ROW, "[1,2,3,4,5]", "[0.1,0.2]", "[]", "0.5", '"[x"', '"x"', '{"1":[0.5]}', '{"1":0.5}',
                             f"[{ROW}]", "[[0.1,0.2],[0.3,0.4,0.5]]", "[0.1,[0.2],0.3,0.4,0.5]", "[[]]"])


def twin_flat(raws: list[Any]) -> bool:
    """``_flat``'s slow twin: each row's bytes, one at a time, hold exactly one ``[``."""
    return all(bytes(r).count(b"[") == 1 for r in raws)


@settings(max_examples=300, deadline=None)
@given(rows=st.lists(ROW_TEXTS, min_size=1, max_size=5), columnar=st.booleans())
def test_the_one_count_takes_what_the_count_per_row_takes(rows: list[str], columnar: bool) -> None:
    """Rows of every shape (flat, nested, empty, a number, a string or an object where a row
    should be), mixed in one body: the pass with ``_flat``'s one count over the rows takes what
    it takes with a count per row, the same block; and what it takes is rows of numbers only."""
    body = rows_body(rows, columnar)
    got = dense(body)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(dense_body, "_flat", twin_flat)
        want = dense(body)
    assert (got is None) == (want is None), body
    if got is not None and want is not None:
        assert [b.tobytes() for b in got[1]] == [b.tobytes() for b in want[1]], body
        values = [json.loads(r) for r in rows]
        assert all(type(v) is list and all(type(x) in (int, float) for x in v) for v in values), body
        assert got[1][0].tobytes() == np.array(values, dtype=np.float64).tobytes(), body


def test_without_pysimdjson_every_body_takes_the_one_pass(registry: ModelRegistry,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    body = q(f'"ids":["a","b"],"features":[{ROW},{ROW}]')
    with_it = outcome(json_lists, body, registry)
    monkeypatch.setattr(dense_body, "simdjson", None)
    assert dense(body) is None
    assert outcome(json_lists, body, registry) == with_it


# ---------------------------------------------------------------------------- memory
PEAK_SCRIPT = """
import json, resource, sys
from tunemix.service import dense_body
from tunemix.service.rank_body import DENSE_DECODER
unit, head, tail, size = sys.argv[1].encode(), sys.argv[2].encode(), sys.argv[3].encode(), int(sys.argv[4])
body = head + (unit * ((size - len(head) - len(tail)) // len(unit)))[:-1] + tail
dense_body.dense_pass(DENSE_DECODER, head + unit[:-1] + tail)  # warm
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
got = dense_body.dense_pass(DENSE_DECODER, body)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"bytes": len(body), "taken": got is not None, "peak_kib": peak - before}))
"""


@pytest.mark.parametrize(("unit", "head", "tail"), [
    ("0,", '{"queries":[{"qid":1,"ids":[1],"features":[[', "]]}]}"),
    ("[0,0,0,0,0,0,0],", '{"queries":[{"qid":1,"ids":[1],"features":[', "]}]}"),
    ("[0,0,0,0,0,0],", '{"queries":[{"qid":1,"ids":[1],"features":[', "]}]}"),  # 14 bytes a row: the one pass's
    ("[0],", '{"queries":[{"qid":1,"ids":[1],"features":[', "]}]}"),
    ('{"id":1,"features":[0]},', '{"queries":[{"qid":1,"documents":[', "]}]}"),
    ('{"id":1,"features":[]},', '{"queries":[{"qid":1,"documents":[', "]}]}"),
])
def test_the_dense_pass_peak_stays_within_the_one_pass_multiple(unit: str, head: str, tail: str) -> None:
    """The dense pass's costliest shapes at ``ONE_PASS_MAX_BYTES`` (one-byte numbers, rows of
    ``MIN_ROW_BYTES``, one-value documents, empty rows; narrower rows, which it leaves to the one
    pass), measured as the process's peak resident memory in a
    fresh interpreter (simdjson's tape is C++ memory, which tracemalloc does not see): within the
    one pass's ``ONE_PASS_MULTIPLE`` times the body."""
    out = subprocess.run([sys.executable, "-c", PEAK_SCRIPT, unit, head, tail, str(ONE_PASS_MAX_BYTES)],
                         capture_output=True, text=True, check=True, cwd=Path(__file__).parents[2])
    res = json.loads(out.stdout)
    assert ONE_PASS_MAX_BYTES - 64 < res["bytes"] <= ONE_PASS_MAX_BYTES
    multiple = res["peak_kib"] * 1024 / res["bytes"]
    assert multiple <= ONE_PASS_MULTIPLE, (unit, res, multiple)
