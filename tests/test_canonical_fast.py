"""``strictjson.canonical`` takes a fast path for ASCII integer-only values; it must equal RFC 8785 everywhere."""

from __future__ import annotations

import pytest
import rfc8785
from hypothesis import given
from hypothesis import strategies as st

from tests.json_strategies import json_values as json_values_of
from tkbox_daemon import strictjson

json_values = json_values_of(max_size=5, max_leaves=30)


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
