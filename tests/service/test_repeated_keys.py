"""The repeated-key check (``tunemix.service.json_body.check_repeated_keys``: jiter's ``catch_duplicate_keys``,
then the standard library's pass to name a repeat) against its slow, exact twin
(``name_repeated_key``: every object's pairs in order), on fixed and generated bodies: the same
verdict and the same message, keys compared as decoded text, and one pass for a clean body."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tunemix.service import json_body
from tunemix.service.errors import ServiceError
from tunemix.service.json_body import check_repeated_keys, name_repeated_key


def verdict(check: Any, body: bytes) -> str | None:
    """The 422's message, or None when ``check`` takes the body."""
    try:
        check(body)
    except ServiceError as exc:
        assert exc.status == 422
        return exc.message
    return None


FIXED = [
    (b'{"a":1,"b":2}', None),
    (b'{"a":{"k":1},"b":{"k":1},"c":[{"k":1},{"k":2}]}', None),  # the same key in different objects
    (b'{"a":1,"a":2}', "body: key 'a' appears twice"),
    (b'{"a":1,"\\u0061":2}', "body: key 'a' appears twice"),  # one key, escaped once
    (b'{"\\/":1,"/":2}', "body: key '/' appears twice"),
    (b'{"\\ud83d\\ude00":1,"\xf0\x9f\x98\x80":2}', "appears twice"),  # a surrogate pair and its UTF-8
    (b'{"a":1,"A":2,"a ":3,"\\u00e9":4,"e\\u0301":5}', None),  # text compared as it is, not normalised
    (b'{"":1,"":2}', "body: key '' appears twice"),
    (b'{"x":[[{"y":{"z":1,"z":2}}]]}', "x[0][0].y: key 'z' appears twice"),
    (b'{"queries":[{"qid":"q"},{"qid":"r","ids":[1],"ids":[2]}]}', "query 'r' (queries[1]): the query: key 'ids'"),
    (b'{"a":{"b":1,"b":2},"c":[{"d":1,"d":2}]}', "a: key 'b' appears twice"),  # the first in document order
    (b'{"a":{"b":1,"b":2},"c":1,"c":2}', "body: key 'c' appears twice"),  # an object before those inside it
    (b'{"\\ud800":1,"\\udc00":2}', None),  # two different lone surrogates: two keys for Python
]


@pytest.mark.parametrize(("body", "words"), FIXED)
def test_fixed_bodies_match_the_slow_twin(body: bytes, words: str | None) -> None:
    got, want = verdict(check_repeated_keys, body), verdict(name_repeated_key, body)
    assert got == want
    if words is None:
        assert got is None
    else:
        assert got is not None and words in got, got


def test_a_clean_body_takes_one_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    """jiter's verdict is final for a body without repeats: the naming pass never runs."""
    def never(body: bytes) -> None:
        raise AssertionError("the naming pass ran on a clean body")

    monkeypatch.setattr(json_body, "name_repeated_key", never)
    body = json.dumps({"queries": [{"qid": f"q{i}", "ids": list(range(50)), "features": [[0.5] * 46] * 50}
                                   for i in range(20)], "top_k": 3}).encode()
    check_repeated_keys(body)
    with pytest.raises(AssertionError, match="naming pass"):
        check_repeated_keys(body[:-1] + b',"top_k":4}')


# ---------------------------------------------------------------------------- generated bodies
#: few distinct key texts, so that repeats are common; each written plainly or escaped
KEY_TEXTS = ["a", "b", "A", "id", "qid", "é", "😀", "", "a b", "/"]


def write_key(text: str, how: int) -> str:
    """``text`` as a JSON string: plain UTF-8, every character ``\\u``-escaped, or json.dumps' ASCII."""
    if how == 0:
        return json.dumps(text, ensure_ascii=False)
    if how == 1:
        units = text.encode("utf-16-be")
        return '"' + "".join(f"\\u{units[i]:02x}{units[i + 1]:02x}" for i in range(0, len(units), 2)) + '"'
    return json.dumps(text)


def write(node: Any, rng: random.Random) -> str:
    """A generated tree as JSON text; an object is a list of (key, value) pairs, repeats kept."""
    if isinstance(node, tuple):
        return "{" + ",".join(f"{write_key(k, rng.randrange(3))}:{write(v, rng)}" for k, v in node[0]) + "}"
    if isinstance(node, list):
        return "[" + ",".join(write(v, rng) for v in node) + "]"
    return json.dumps(node)


leaves = st.one_of(st.integers(-(10**20), 10**20), st.floats(allow_nan=False, allow_infinity=False),
                   st.text(max_size=4), st.booleans(), st.none())
trees = st.recursive(
    leaves,
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.lists(st.tuples(st.sampled_from(KEY_TEXTS), inner), max_size=5).map(lambda p: (p,))),
    max_leaves=30,
)


@settings(max_examples=400, deadline=None)
@given(tree=trees, seed=st.integers(0, 2**32 - 1))
def test_generated_bodies_match_the_slow_twin(tree: Any, seed: int) -> None:
    body = write(tree, random.Random(seed)).encode()
    assert verdict(check_repeated_keys, body) == verdict(name_repeated_key, body)
