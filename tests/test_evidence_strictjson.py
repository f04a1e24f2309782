"""Strict JSON: what is refused (duplicates, NaN, floats, big integers, lone surrogates, bad UTF-8, depth, size),
that canonical bytes round-trip, and that verify's fast parse and canonicaliser agree with strictjson."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tkbox_daemon import strictjson
from tkbox_daemon.evidence.verify_records import canonical_json, loads_canonical


@pytest.mark.parametrize(("text", "reason"), [
    ('{"a":1,"a":2}', "duplicate key"),
    ('{"a":{"b":1,"b":1}}', "duplicate key"),
    ("[NaN]", "NaN"),
    ("[Infinity]", "Infinity"),
    ("[-Infinity]", "Infinity"),
    ("[1.5]", "fractional"),
    ("[1e3]", "fractional"),
    ("[1.0]", "fractional"),
    ("[9007199254740992]", "beyond"),
    ("[-9007199254740992]", "beyond"),
    ("[12345678901234567]", "digits"),
    ('["\\ud800"]', "surrogate"),
    ('{"\\udfff":1}', "surrogate"),
    ("[" * 33 + "]" * 33, "deeper"),
    ('{"a":' * 33 + "1" + "}" * 33, "deeper"),
    ("[1,]", "malformed"),
    ("[1] [2]", "malformed"),
    ("", "malformed"),
])
def test_refused(text: str, reason: str) -> None:
    with pytest.raises(strictjson.StrictJSONError, match=reason):
        strictjson.loads(text.encode(), max_bytes=1 << 20)


def test_invalid_utf8_is_refused() -> None:
    for data in (b'["\xff"]', b'["\xed\xa0\x80"]', b'["\xc0\xaf"]'):  # bad byte, encoded surrogate, overlong
        with pytest.raises(strictjson.StrictJSONError, match="UTF-8"):
            strictjson.loads(data, max_bytes=100)


def test_size_limit() -> None:
    with pytest.raises(strictjson.StrictJSONError, match="exceeds"):
        strictjson.loads(b"[" + b"1," * 100 + b"1]", max_bytes=100)


def test_depth_limit_ignores_brackets_inside_strings() -> None:
    text = '["' + "[" * 100 + '", {"k": "' + "{" * 100 + '\\"["}]'
    assert strictjson.loads(text, max_bytes=1000, max_depth=2)[0] == "[" * 100


def test_deep_nesting_within_the_limit_parses() -> None:
    value = strictjson.loads("[" * 32 + "]" * 32, max_bytes=100)
    for _ in range(31):
        value = value[0]
    assert value == []


def test_the_depth_precheck_is_linear_on_hostile_strings() -> None:
    """An unterminated string full of escaped quotes must not make the precheck quadratic."""
    text = "[" * 40 + '"\\"' * 200_000
    with pytest.raises(strictjson.StrictJSONError):
        strictjson.loads(text, max_bytes=1 << 22)


def test_loads_object_requires_an_object() -> None:
    with pytest.raises(strictjson.StrictJSONError, match="object"):
        strictjson.loads_object(b"[1]", max_bytes=10)


def test_safe_integers_at_the_edge_are_accepted() -> None:
    assert strictjson.loads("[9007199254740991,-9007199254740991]", max_bytes=100) == [2**53 - 1, -(2**53 - 1)]


# ---- properties ------------------------------------------------------------------------------------------
SAFE_INTS = st.integers(min_value=-(2**53 - 1), max_value=2**53 - 1)
TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=12)  # any code point but lone surrogates
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | SAFE_INTS | TEXT,
    lambda children: st.lists(children, max_size=5) | st.dictionaries(TEXT, children, max_size=5),
    max_leaves=25,
)


@settings(max_examples=300, deadline=None)
@given(JSON_VALUES)
def test_canonical_round_trips_and_is_idempotent(value: object) -> None:
    data = strictjson.canonical(value)
    assert strictjson.loads(data, max_bytes=1 << 20, max_depth=64) == value
    assert strictjson.canonical(strictjson.loads(data, max_bytes=1 << 20, max_depth=64)) == data


@settings(max_examples=300, deadline=None)
@given(JSON_VALUES)
def test_verify_fast_canonical_equals_rfc8785(value: object) -> None:
    assert canonical_json(value) == strictjson.canonical(value)


@settings(max_examples=300, deadline=None)
@given(JSON_VALUES)
def test_verify_fast_parse_agrees_with_strictjson_on_canonical_text(value: object) -> None:
    data = strictjson.canonical(value)
    assert loads_canonical(data, max_bytes=1 << 20, max_depth=64) == value


@pytest.mark.parametrize("text", [
    b'{"a":1,"a":2}', b"[NaN]", b"[1.5]", b"[1e3]", b'["\\ud800"]', b"[9007199254740992]",
    b'{"k":[-12345678901234567]}', b'["\xff"]', b"[" * 40 + b"]" * 40, b"[1,]",
])
def test_verify_fast_parse_refuses_or_the_canonical_check_catches(text: bytes) -> None:
    """Each of these is refused by the fast parse, or parses to a value whose canonical form differs."""
    try:
        value = loads_canonical(text, max_bytes=1 << 20)
    except strictjson.StrictJSONError:
        return
    assert canonical_json(value) != text


def test_compact_storage_form_sorts_and_keeps_unicode() -> None:
    assert strictjson.compact({"b": "é", "a": 1}) == '{"a":1,"b":"é"}'.encode()
    assert json.loads(strictjson.compact({"x": [1, 2]})) == {"x": [1, 2]}
