"""/rank's one pass (``tunemix.service.json_body.one_pass``: jiter's objects validated by ``msgspec.convert``;
``tunemix.service.routers.rank.json_lists``) against its slow twin, the two passes it replaced
(``json_lists_two_passes``: msgspec's decode, the checks, then the repeated-key pass), on fixed
and generated bodies: the same structs and arrays for a body both take, the same status and
message for one they refuse. Also: which bodies take which path, and the rows' conversion
(``finite_rows``: ``struct`` packing, ``np.fromiter`` where it refuses) against ``np.array``."""

from __future__ import annotations

import tracemalloc
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.service.conftest import N_FEATURES
from tunemix.service import json_body, rank_body
from tunemix.service.errors import ServiceError
from tunemix.service.json_body import ONE_PASS_MAX_BYTES, ONE_PASS_MULTIPLE, one_pass
from tunemix.service.parsing import finite_rows
from tunemix.service.rank_body import DECODER, json_lists, json_lists_two_passes
from tunemix.service.registry import ModelRegistry
from tunemix.service.routers import rank
from tunemix.service.settings import DECODED_BODY_MULTIPLE, Settings

SETTINGS = Settings()
ROW = "[0.1,0.2,0.3,0.4,0.5]"


def outcome(fn: Any, body: bytes, registry: ModelRegistry) -> tuple[Any, ...]:
    """What a path makes of ``body``: its refusal (status, message), or what it took."""
    try:
        req, served, lists = fn(body, registry, SETTINGS)
    except ServiceError as exc:
        return ("refused", exc.status, exc.message)
    return ("taken", asked(req), served.name, served.version, lists.features.dtype, lists.features.shape,
            lists.features.tobytes(), lists.offsets.tolist(), lists.qids, lists.ids)


def asked(req: Any) -> tuple[Any, ...]:
    """What a parsed request asks besides its features (the same for ``RankRequest`` and the dense
    pass's skeleton): its options, and each query's qid and explain_pair."""
    return (tuple(getattr(req, f) for f in rank_body.RequestFields.__struct_fields__),
            [(q.qid, q.explain_pair) for q in req.queries])


def same_verdict(body: bytes, registry: ModelRegistry) -> tuple[Any, ...]:
    got, want = outcome(json_lists, body, registry), outcome(json_lists_two_passes, body, registry)
    assert got == want, (body[:300], got[:3], want[:3])
    return got


def q(rest: str, qid: str = '"q1"') -> bytes:
    return f'{{"queries":[{{"qid":{qid},{rest}}}]}}'.encode()


FIXED: list[tuple[bytes, str | None]] = [  # (body, words of the refusal, or None: taken)
    (q(f'"ids":["a","b"],"features":[{ROW},[1,2,3,4,5]]'), None),
    (q(f'"documents":[{{"id":"a","features":{ROW}}},{{"id":7,"features":{{"2":0.5,"5":-1e-3}}}}]'), None),
    (b'{"queries":[{"qid":1,"ids":[1],"features":[' + ROW.encode() + b']},{"qid":"2","ids":["x"],"features":['
     + ROW.encode() + b']}],"top_k":' + str(10**30).encode() + b',"min_relevance":0.5,"relevance":true}', None),
    (q(f'"ids":[9223372036854775807,-9223372036854775808],"features":[{ROW},{ROW}],"explain_pair":[1,2]'), None),
    (q('"ids":["\\u0061"],"features":[[-0.0,1E5,1e+5,1e-400,123456789012345678901234567890.5]]'), None),
    (q(f'"ids":["a"],"features":[{ROW}]') + b"  \n", None),  # whitespace after the body
    # null: a missing value, in every form (the dense pass refuses it; the one pass takes it)
    (q('"ids":["a","b"],"features":[[0.1,null,0.3,0.4,0.5],[null,null,null,null,null]]'), None),
    (q('"documents":[{"id":"a","features":[null,0.2,0.3,0.4,0.5]},{"id":"b","features":{"2":null,"5":1}}]'), None),
    (q('"ids":["a"],"features":[[null,0,0,0,1e39]]'), "finite float32"),
    # numbers: beyond float64 (jiter reads infinity; msgspec refuses), beyond float32, NaN, Infinity
    (q('"documents":[{"id":"a","features":[1e400,0,0,0,0]}]'), "out of range"),
    (q('"documents":[{"id":"a","features":{"3":-1e400}}]'), "out of range"),
    (q(f'"ids":["a"],"features":[{ROW}]')[:-1] + b',"min_relevance":1e400}', "out of range"),
    (q(f'"ids":["a"],"features":[{ROW}]')[:-1] + b',"min_probability":-1e400}', "out of range"),
    (q('"ids":["a"],"features":[[1e39,0,0,0,0]]'), "finite float32"),
    (q('"ids":["a"],"features":[[0.1,NaN,0.3,0.4,0.5]]'), "malformed"),
    (q('"documents":[{"id":"a","features":{"4":-Infinity}}]'), "malformed"),
    (q('"ids":["a"],"features":[[1' + "0" * 400 + ',0,0,0,0]]'), "out of range"),
    (q(f'"ids":["a"],"features":[{ROW}]', qid="1" + "0" * 30), "qid"),
    (q(f'"ids":["a"],"features":[{ROW}]')[:-1] + b',"top_k":' + b"1" * 5000 + b"}", "top_k"),
    # types, unknown fields, shape
    (q('"ids":["a"],"features":[["x",0,0,0,0]]'), "features[0][0]"),
    (q('"ids":["a"],"features":[[true,0,0,0,0]]'), "features[0][0]"),
    (q(f'"ids":["a"],"features":[{ROW}],"colour":1'), "colour"),
    (q(f'"ids":["a"],"features":[{ROW}]')[:-1] + b',"top_k":1.0}', "top_k"),
    (q('"ids":["a"],"features":[[0.1,0.2]]'), "2 values"),
    (q(f'"ids":["a","a"],"features":[{ROW},{ROW}]'), "duplicate id"),
    (q(f'"ids":[1.5],"features":[{ROW}]'), "ids[0]"),
    (q('"documents":[{"id":"a","features":{"07":1}}]'), "'07'"),
    (b'{"queries":[]}', "queries"),
    (b'{"queries":[{"ids":["a"]}]}', "qid"),
    (q(f'"ids":["a"],"features":[{ROW}]')[:-1] + b',"model":"nope"}', "nope"),
    (q(f'"ids":["a"],"features":[{ROW}]')[:-1] + b',"version":"v9"}', "v9"),
    # not JSON, or not UTF-8, too deep, repeated keys
    (b"", "empty"),
    (b"{nope", "JSON"),
    (b'\xef\xbb\xbf{"queries":[]}', "malformed"),
    (q(f'"ids":["#"],"features":[{ROW}]').replace(b"#", b"\xff"), "UTF-8"),
    (q(f'"ids":["\\ud800"],"features":[{ROW}]'), "surrogate"),  # a lone surrogate: not text
    (b'{"queries":' + b"[" * 5000 + b"]" * 5000 + b"}", "queries"),
    (q(f'"ids":["a"],"features":[{ROW}]')[:-1] + b',"top_k":1,"top_k":2}', "'top_k' appears twice"),
    (q(f'"qid":"r","ids":["a"],"features":[{ROW}]'), "'qid' appears twice"),
    (q('"documents":[{"id":"a","features":{"1":1,"\\u0031":2}}]'), "'1' appears twice"),
    (q('"ids":["a"],"features":[[0.1]]')[:-1] + b',"top_k":1,"top_k":2}', "1 values"),  # the checks' error first
]


@pytest.mark.parametrize(("body", "words"), FIXED, ids=[str(i) for i in range(len(FIXED))])
def test_fixed_bodies_match_the_two_passes(registry: ModelRegistry, body: bytes, words: str | None) -> None:
    got = same_verdict(body, registry)
    if words is None:
        assert got[0] == "taken", got[:3]
    else:
        assert got[0] == "refused" and got[1] == 422 and words in got[2], got[:3]


# ---------------------------------------------------------------------------- generated bodies
NUMBERS = ["0", "1", "-2", "0.5", "0.125", "1e-3", "1E5", "-0.0", "3.4e38", "2.5e-40", "0.30000000000000004", "null"]
ODD = ["1e39", "1e400", "-1e400", "1" + "0" * 30, "NaN", "Infinity", '"3"', "true", "null", "[]", "{}", "1.0"]
IDS = ['"a"', '"b"', '"\\u0061"', "1", "2", "-3", '"a\\"b"']
ODD_IDS = ["9223372036854775808", "1.5", "null", "true", "[]"]


def odd(draw: Any, rate: int) -> bool:
    """True once in ``rate`` draws (never for 0): how often a body's parts go wrong."""
    return rate > 0 and draw(st.integers(0, rate - 1)) == 0


@st.composite
def a_value(draw: Any, rate: int) -> str:
    return str(draw(st.sampled_from(ODD if odd(draw, rate) else NUMBERS)))


@st.composite
def an_id(draw: Any, rate: int) -> str:
    return str(draw(st.sampled_from(ODD_IDS if odd(draw, rate) else IDS)))


@st.composite
def an_object(draw: Any, pairs: list[tuple[str, str]], rate: int) -> str:
    """A JSON object of ``pairs`` in a drawn order, now and then with a key repeated, escaped or unknown."""
    pairs = draw(st.permutations(pairs)) if pairs else []
    if pairs and odd(draw, rate):
        pairs = [*pairs, draw(st.sampled_from(pairs))]
    if odd(draw, 2 * rate):
        pairs = [*pairs, ('"colour"', "1")]
    if pairs and draw(st.integers(0, 7)) == 0:  # the first key written with an escape (the same key)
        k, v = pairs[0]
        pairs[0] = ('"\\u00' + format(ord(k[1]), "02x") + k[2:], v)
    return "{" + ",".join(f"{k}:{v}" for k, v in pairs) + "}"


@st.composite
def a_row(draw: Any, rate: int, sparse: bool) -> str:
    if (sparse or odd(draw, rate)) and draw(st.integers(0, 4)) == 0:  # sparse
        keys = draw(st.lists(st.sampled_from(["1", "2", "5"] + (["6", "0", "01", "x"] if odd(draw, rate) else [])),
                             max_size=4, unique=not odd(draw, rate)))
        return str(draw(an_object([(f'"{k}"', draw(a_value(rate))) for k in keys], rate)))
    n = draw(st.integers(0, N_FEATURES + 1)) if odd(draw, rate) else N_FEATURES
    return "[" + ",".join(draw(a_value(4 * rate)) for _ in range(n)) + "]"


@st.composite
def a_query(draw: Any, rate: int) -> str:
    n = draw(st.integers(0, 3) if odd(draw, rate) else st.integers(1, 3))
    ids = draw(st.lists(an_id(rate), min_size=n, max_size=n, unique=not odd(draw, rate)))
    pairs = [('"qid"', draw(an_id(rate)))]
    form = draw(st.sampled_from(["documents", "columns", "both", "neither"] if odd(draw, rate) else
                                ["documents", "columns"]))
    if form in ("documents", "both"):
        docs = [draw(an_object([('"id"', i), ('"features"', draw(a_row(rate, True)))], rate)) for i in ids]
        pairs.append(('"documents"', "[" + ",".join(docs) + "]"))
    if form in ("columns", "both"):
        if odd(draw, rate):
            ids = ids[1:]
        pairs.append(('"ids"', "[" + ",".join(ids) + "]"))
        pairs.append(('"features"', "[" + ",".join(draw(a_row(rate, False)) for _ in range(n)) + "]"))
    if draw(st.integers(0, 5)) == 0:
        pair = draw(st.lists(an_id(rate), min_size=2, max_size=3 if odd(draw, rate) else 2))
        pairs.append(('"explain_pair"', "[" + ",".join(pair) + "]"))
    return str(draw(an_object(pairs, rate)))


OPTIONS = {'"top_k"': ["1", "2", str(10**30)], '"min_relevance"': ["0", "0.5", "null"],
           '"min_probability"': ["0.5", "0"], '"relevance"': ["false", "true"], '"explain"': ["0", "2"],
           '"model"': ['"default"', "null"], '"version"': ['"v1"', '"v2"']}
ODD_OPTIONS = {'"top_k"': ["0", "1.0", "-1"], '"min_relevance"': ["1e400", "-1", "-1e400"],
               '"min_probability"': ["1.5", "-1e400", "1e400"], '"relevance"': ["1"], '"explain"': ["-1", "1e400"],
               '"model"': ['"nope"'], '"version"': ['"v9"']}


@st.composite
def a_body(draw: Any) -> bytes:
    """A /rank body; ``rate``: its parts go wrong once in so many draws (never for half the bodies)."""
    rate = draw(st.sampled_from([0, 0, 0, 40, 15, 6]))
    queries = [draw(a_query(rate)) for _ in range(draw(st.integers(0 if odd(draw, rate) else 1, 3)))]
    pairs = [('"queries"', "[" + ",".join(queries) + "]")]
    for key, values in OPTIONS.items():
        if draw(st.integers(0, 3)) == 0:
            pairs.append((key, draw(st.sampled_from(ODD_OPTIONS[key] if odd(draw, rate) else values))))
    text = str(draw(an_object(pairs, rate)))
    if odd(draw, 4 * rate):  # cut short: not JSON
        text = text[: draw(st.integers(0, len(text)))]
    return text.encode()


@settings(max_examples=600, deadline=None)
@given(body=a_body())
def test_generated_bodies_match_the_two_passes(registry: ModelRegistry, body: bytes) -> None:
    same_verdict(body, registry)


# ---------------------------------------------------------------------------- which path
def test_a_valid_body_is_parsed_once(registry: ModelRegistry, monkeypatch: pytest.MonkeyPatch) -> None:
    """A body the one pass takes never reaches msgspec's decode or the repeated-key passes."""
    def never(*args: Any) -> None:
        raise AssertionError("a second pass ran")

    for name in ("decode_json", "check_repeated_keys"):
        monkeypatch.setattr(rank_body, name, never)
    monkeypatch.setattr(json_body, "name_repeated_key", never)
    req, _, lists = json_lists(q(f'"ids":["a","b"],"features":[{ROW},{ROW}]'), registry, SETTINGS)
    assert lists.features.shape == (2, N_FEATURES) and req.queries[0].ids == ["a", "b"]


def test_a_body_past_the_one_pass_size_takes_the_two_passes(registry: ModelRegistry,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Past ``ONE_PASS_MAX_BYTES`` the counts come before any generic tree is built."""
    def never(*args: Any) -> None:
        raise AssertionError("the one pass ran")

    monkeypatch.setattr(rank_body, "one_pass", never)
    n = ONE_PASS_MAX_BYTES // len(ROW) + 1
    body = q('"ids":[' + ",".join(map(str, range(n))) + '],"features":[' + ",".join([ROW] * n) + "]")
    assert len(body) > ONE_PASS_MAX_BYTES
    _, _, lists = json_lists(body, registry, SETTINGS)
    assert lists.features.shape == (n, N_FEATURES)


@pytest.mark.parametrize(("unit", "head", "tail"), [
    (b"{},", b'{"queries":[', b"]}"),
    (b"[],", b'{"queries":[{"qid":1,"ids":[1],"features":[', b"]}]}"),
    (b'{"qid":1},', b'{"queries":[', b"]}"),
    (b"0,", b'{"queries":[{"qid":1,"ids":[1],"features":[[', b"]]}]}"),
    (b"[0,0,0,0,0],", b'{"queries":[{"qid":1,"ids":[1],"features":[', b"]}]}"),
    (b'{"id":1,"features":{}},', b'{"queries":[{"qid":1,"documents":[', b"]}]}"),
])
def test_the_one_pass_peak_stays_within_its_multiple(unit: bytes, head: bytes, tail: bytes) -> None:
    """The costliest shapes for a generic tree, at ``ONE_PASS_MAX_BYTES``: the pass's peak (tree
    and structs) within ``ONE_PASS_MULTIPLE`` times the body, which at that size is within the
    per-body bound the service documents (``DECODED_BODY_MULTIPLE`` times the body limit)."""
    assert ONE_PASS_MULTIPLE * ONE_PASS_MAX_BYTES <= DECODED_BODY_MULTIPLE * SETTINGS.max_body_bytes
    body = head + (unit * ((ONE_PASS_MAX_BYTES - len(head) - len(tail)) // len(unit)))[:-1] + tail
    assert ONE_PASS_MAX_BYTES - 64 < len(body) <= ONE_PASS_MAX_BYTES
    tracemalloc.start()
    try:
        one_pass(DECODER, body)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak <= ONE_PASS_MULTIPLE * len(body), (unit, peak / len(body))


# ---------------------------------------------------------------------------- rows to a matrix
def finite_rows_twin(rows: list[list[float]], d: int) -> np.ndarray | str:
    """``np.array`` of the nested lists (None: NaN), every check after it: infinities refused."""
    if any(len(r) != d for r in rows):
        return "length"
    with np.errstate(over="ignore"):
        arr = np.array(rows, dtype=np.float32).reshape(len(rows), d)
    return arr if not np.isinf(arr).any() else "finite"


def rows_verdict(rows: list[list[float]], d: int) -> np.ndarray | str:
    try:
        return finite_rows(rows, d, "query 'q'", "features[{j}]")
    except ServiceError as exc:
        return "length" if "values; the model takes" in exc.message else "finite"


FIXED_ROWS = [[[0.1, 0.2, 0.3]], [[1e39, 0.0, 0.0]], [[-1e39, 0.0, 0.0]], [[3.4028235e38, -0.0, 1e-46]],
              [[float("inf"), 0.0, 0.0]], [[0.0, 0.0, -float("inf")]], [[1.0, 2.0, 3.0], [3.4028236e38, 0.0, 0.0]],
              [[3.4028235677973366e38, 3.4028235677973362e38, -3.4028235677973366e38]], [[5e-324, -5e-324, 1.4e-45]],
              [[0.1, 0.2]], [[0.1, 0.2, 0.3], [0.1]], [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]],
              [[float(np.nextafter(np.float32(1), np.float32(2))), 1.0000000596046448, 1.0000000596046449]]]
floats = st.one_of(st.floats(allow_nan=False, allow_infinity=False), st.floats(-1e39, 1e39), st.integers(-5, 5))
values = st.one_of(floats.map(float), st.none())


FIXED_ROWS += [[[None, 0.5, None]], [[None, None, None], [1.0, None, 1e39]], [[0.1, None, 0.3], [0.1, 0.2]]]


@pytest.mark.parametrize("rows", FIXED_ROWS)
def test_rows_match_np_array_on_fixed_rows(rows: list[list[float]]) -> None:
    got, want = rows_verdict(rows, 3), finite_rows_twin(rows, 3)
    assert type(got) is type(want) and (isinstance(got, str) or (got.tobytes() == want.tobytes()))
    if any(v is None for r in rows for v in r) and not isinstance(got, str):
        assert np.isnan(got).sum() == sum(v is None for r in rows for v in r)


@settings(max_examples=300, deadline=None)
@given(rows=st.lists(st.lists(values, min_size=3, max_size=4), min_size=1, max_size=6))
def test_rows_match_np_array_on_random_rows(rows: list[list[float]]) -> None:
    got, want = rows_verdict(rows, 3), finite_rows_twin(rows, 3)
    assert type(got) is type(want)
    if not isinstance(got, str):
        assert isinstance(want, np.ndarray) and got.tobytes() == want.tobytes() and got.shape == (len(rows), 3)


# ---------------------------------------------------------------------------- the collector
def test_the_collector_is_paused_until_the_parsed_request_is_freed(client: Any,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """/rank decodes, checks and stacks with Python's cyclic collector off, and the parsed request
    (its lists of features) is freed before it is on again: a collection started by those
    allocations would walk every value of every list (``tunemix.service.routers.rank``). A 1,000-document
    body makes more containers than start a collection, and none starts while it is parsed."""
    import gc

    seen: list[tuple[bool, int, list[int]]] = []
    real = rank.json_lists

    def spy(*args: Any, **kwargs: Any) -> Any:
        started: list[int] = []

        def count(phase: str, info: dict[str, Any]) -> None:
            if phase == "start":
                started.append(info["generation"])

        before = gc.get_count()[0]
        gc.callbacks.append(count)
        try:
            out = real(*args, **kwargs)
        finally:
            gc.callbacks.remove(count)
        seen.append((gc.isenabled(), gc.get_count()[0] - before, started))
        return out

    monkeypatch.setattr(rank, "json_lists", spy)
    rows = np.random.default_rng(0).random((1000, N_FEATURES)).round(6).tolist()
    body = {"queries": [{"qid": "q", "documents": [{"id": f"d{j}", "features": r} for j, r in enumerate(rows)]}]}
    assert gc.isenabled()
    got = client.post("/rank", json=body)
    assert got.status_code == 200 and len(got.json()["results"][0]["ranking"]) == 1000
    [(enabled, made, started)] = seen
    assert enabled is False and started == []  # off while the body was parsed and its rows stacked
    assert made > gc.get_threshold()[0]  # though the parse made more containers than start a collection
    assert gc.isenabled()  # on again once the request was freed
