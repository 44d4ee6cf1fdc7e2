"""Measure values: canonical strings, parsing, bad input."""

from __future__ import annotations

import pytest

from tunemix.core.evaluation import Measure, parse_measures

CANONICAL = ["ndcg@10", "dcg@5", "ndcg", "dcg", "err", "err@20", "err@10:top=2", "err:top=3",
             "p@5", "map", "meanndcg", "ndcg@10:gain=exp", "dcg:gain=linear", "ndcg@5:empty=0",
             "ndcg@5:gain=linear:empty=1", "meanndcg:gain=exp:empty=0"]


@pytest.mark.parametrize("text", CANONICAL)
def test_round_trip(text: str) -> None:
    m = Measure.parse(text)
    assert str(m) == text
    assert Measure.parse(str(m)) == m


def test_fields_and_loose_spelling() -> None:
    assert Measure.parse("err@10:top=2") == Measure("err", 10, 2)
    assert Measure.parse(" NDCG@10 ") == Measure("ndcg", 10)
    assert Measure.parse("ERR @ 10 : top = 2") == Measure("err", 10, 2)
    assert Measure.parse("map").cutoff is None
    assert hash(Measure.parse("ndcg@3")) == hash(Measure("ndcg", 3))


@pytest.mark.parametrize(
    "bad",
    ["", "ndcg@", "ndcg@0", "ndcg@-1", "ndcg@1.5", "foo@3", "p", "map@10", "meanndcg@5",
     "ndcg@10:top=2", "err:top=0", "err@10:top=", "ndcg10", "err@10:top=2:top=3"],
)
def test_bad_strings_raise_value_error(bad: str) -> None:
    with pytest.raises(ValueError):
        Measure.parse(bad)


def test_tool_spellings_of_the_variants() -> None:
    assert Measure.parse("ndcg_burges@10") == Measure("ndcg", 10, gain="exp")
    assert Measure.parse("dcg_burges") == Measure("dcg", gain="exp")
    assert Measure.parse("ndcg@10-") == Measure("ndcg", 10, empty=0)
    assert Measure.parse("NDCG-") == Measure("ndcg", empty=0)
    assert str(Measure.parse("ndcg_burges@3")) == "ndcg@3:gain=exp"


@pytest.mark.parametrize(
    "bad",
    ["p@5:gain=exp", "err:empty=0", "map-", "ndcg:gain=cubic", "ndcg:empty=2", "dcg@3:empty=0",
     "ndcg@5-:empty=1", "ndcg_burges@5:gain=linear", "ndcg@5:empty=0:gain=exp", "burges@5"],
)
def test_bad_variants_raise_value_error(bad: str) -> None:
    with pytest.raises(ValueError):
        Measure.parse(bad)


def test_error_message_lists_examples() -> None:
    with pytest.raises(ValueError, match="ndcg@10"):
        Measure.parse("bogus!")


def test_type_errors() -> None:
    with pytest.raises(TypeError):
        Measure.parse(10)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Measure("ndcg", 2.5)  # type: ignore[arg-type]


def test_parse_measures_list_and_csv() -> None:
    assert parse_measures("ndcg@10,err") == [Measure("ndcg", 10), Measure("err")]
    assert parse_measures(["map", Measure("p", 5)]) == [Measure("map"), Measure("p", 5)]
    with pytest.raises(ValueError):
        parse_measures(" , ")


@pytest.mark.parametrize("text", ["ndcg@" + "9" * 5000, "err@5:top=" + "1" * 5000, "ndcg@10:empty=" + "0" * 5000])
def test_an_integer_of_thousands_of_digits_is_our_own_value_error(text: str) -> None:
    """Python's ``int`` refuses more than 4,300 digits with a message of its own (and a hint to raise
    the interpreter's limit): a measure's integer is bounded in digits before it is read."""
    with pytest.raises(ValueError, match=r"has 5000 digits; at most 100") as info:
        Measure.parse(text)
    assert "int_max_str_digits" not in str(info.value) and len(str(info.value)) < 200
