"""Hypothesis strategies for JSON values as the canonical encoders meet them: integers inside and outside the
safe range, ASCII and any text, finite floats, nested lists and objects."""

from __future__ import annotations

from hypothesis import strategies as st

json_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**53) + 1, max_value=2**53 - 1), st.integers(),
    st.text(), st.text(alphabet=st.characters(max_codepoint=0x7F)),
    st.floats(allow_nan=False, allow_infinity=False),
)


def json_values(max_size: int, max_leaves: int) -> st.SearchStrategy[object]:
    """Values nested up to ``max_leaves`` leaves, each list or object of at most ``max_size`` members."""
    return st.recursive(
        json_scalars,
        lambda children: st.lists(children, max_size=max_size)
        | st.dictionaries(st.text(max_size=8), children, max_size=max_size),
        max_leaves=max_leaves,
    )
