"""``strictjson.canonical`` takes a fast path for ASCII integer-only values; it must equal RFC 8785 everywhere."""

from __future__ import annotations

import pytest
import rfc8785
from hypothesis import given
from hypothesis import strategies as st

from tkbox_daemon import strictjson

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**53) + 1, max_value=2**53 - 1), st.integers(),
    st.text(), st.text(alphabet=st.characters(max_codepoint=0x7F)),
    st.floats(allow_nan=False, allow_infinity=False),
)
json_values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=8), children, max_size=5),
    max_leaves=30,
)


@given(json_values)
def test_canonical_bytes_are_exactly_rfc8785(value):
    try:
        expected = rfc8785.dumps(value)
    except (rfc8785.CanonicalizationError, ValueError, TypeError):
        with pytest.raises(strictjson.StrictJSONError):
            strictjson.canonical(value)  # whatever the reference refuses, canonical() refuses
        return
    assert strictjson.canonical(value) == expected


@given(st.dictionaries(st.sampled_from(["\ue000", "\U0001f600", "a", "\u00e9"]), st.integers(-1000, 1000), min_size=2))
def test_key_order_follows_utf16_code_units_not_code_points(value):
    assert strictjson.canonical(value) == rfc8785.dumps(value)


def test_a_lone_surrogate_is_refused():
    with pytest.raises(strictjson.StrictJSONError):
        strictjson.canonical({"a": "\ud800"})
