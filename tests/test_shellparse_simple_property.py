"""The shell parser's shortcut for a line of plain words must build exactly the tree the general parser builds."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tkbox_daemon.policy import shellparse

# Plain word characters, and every character the general parser treats specially (quotes,
# expansions, operators, comments, blanks and other whitespace, braces and '=').
SHELL_CHARS = "ab9=/-.,{}#~!*?[]:%+@ \t\r\n\x0b\x0c\x1c\u00a0\u2028'\"\\$`;&|<>()é"
plain_words = st.text(alphabet="abz09=/-.,{}#~!*?[]:%+@é", min_size=1, max_size=12)
BLANKS = " \t"
WHITESPACE = " \t\r\n\x0b\x0c\x1c\u00a0\u2028"  # what str.split() or a regex's \\s would also split on


@st.composite
def plain_lines(draw, separators=BLANKS):
    """Plain words, each pair separated by a run of one separator character; blanks around the line."""
    words = draw(st.lists(plain_words, max_size=8))
    gaps = [draw(st.sampled_from(separators)) * draw(st.integers(1, 2)) for _ in words[1:]]
    line = words[0] if words else ""
    for gap, word in zip(gaps, words[1:], strict=True):
        line += gap + word
    return draw(st.text(alphabet=BLANKS, max_size=2)) + line + draw(st.text(alphabet=BLANKS, max_size=2))


@given(st.one_of(st.text(alphabet=SHELL_CHARS, max_size=40), plain_lines(), plain_lines(WHITESPACE)))
def test_parse_equals_the_general_parser(text):
    assert shellparse.parse(text) == shellparse._parse_general(text)


@given(plain_lines())
def test_a_line_of_plain_words_takes_the_shortcut_unless_a_word_starts_a_comment(text):
    starts_comment = any(word.startswith("#") for word in text.split())
    assert (shellparse._parse_simple(text) is None) == starts_comment


def test_a_long_plain_line_is_left_to_the_general_parser():
    text = "x " * (shellparse._SIMPLE_MAX // 2 + 1)
    assert shellparse._parse_simple(text) is None
    assert shellparse.parse(text) == shellparse._parse_general(text)
