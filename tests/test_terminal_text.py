"""``tkbox_tui.terminal_text``: box text shown with every control, escape sequence and invisible format character
escaped, in a notation that ``unescape`` inverts.

The committed corpus ``tests/hostile_terminal_text.json`` holds hostile sequences (CSI, OSC 8/52, DCS, C1, CR,
backspace, DEL, NUL, bidi overrides, tags, bytes that are not UTF-8), each with the output expected of
``safe_text`` and ``safe_lines``; the properties state what holds for any input.
"""

from __future__ import annotations

import json
import unicodedata
from pathlib import Path

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from tkbox_tui.terminal_text import (
    ELLIPSIS,
    HIDDEN_RANGES,
    SafeStreamDecoder,
    clip,
    safe_lines,
    safe_text,
    unescape,
)

CORPUS = json.loads((Path(__file__).parent / "hostile_terminal_text.json").read_text())
HIDDEN = frozenset(chr(code) for first, last in HIDDEN_RANGES for code in range(first, last + 1))
ESC_SEQUENCE_STARTERS = {"\x1b", "\x9b", "\x9d", "\x90", "\x9c", "\x07", "\r", "\x08"}

# Text that leans on the dangerous parts: controls, C1, format characters, backslashes and escape look-alikes.
nasty_chars = st.sampled_from(sorted(HIDDEN)[:200] + ["\\", "x", "u", "U", "1", "b", "[", "\n", "\t", "\r",
                                                      "\u202e", "\u2066", "\U000e0041", "\ud800", "\udc80"])
texts = st.one_of(st.text(), st.text(nasty_chars), st.lists(st.one_of(st.text(max_size=3), nasty_chars))
                  .map("".join))
byte_strings = st.one_of(st.binary(), st.lists(st.sampled_from([b"\x1b", b"\xc2\x9b", b"\x9b", b"\xff", b"\\",
                                                                 b"\xe2\x80\xae", b"\xe2\x80", b"a", b"\n"]))
                         .map(b"".join))


def _input(row: dict) -> str | bytes:
    return bytes.fromhex(row["input_hex"]) if "input_hex" in row else row["input"]


@pytest.mark.parametrize("row", CORPUS, ids=[row["name"] for row in CORPUS])
def test_each_hostile_sequence_in_the_corpus_is_shown_as_expected(row):
    value = _input(row)
    assert safe_text(value) == row["safe_text"]
    assert safe_lines(value) == row["safe_lines"]


def test_the_corpus_covers_the_sequences_that_drive_a_terminal():
    names = {row["name"] for row in CORPUS}
    for needed in ("csi_colour", "csi_cursor_up", "csi_erase_line", "csi_erase_display", "osc8_hyperlink",
                   "osc52_clipboard_bel", "osc52_clipboard_st", "dcs_request", "c1_csi", "bare_cr_overwrite",
                   "backspaces", "delete", "nul", "trojan_source_rlo", "invalid_utf8"):
        assert needed in names
    every_input = "".join(row["input"] for row in CORPUS if "input" in row)
    assert ESC_SEQUENCE_STARTERS <= set(every_input)


@pytest.mark.parametrize("row", CORPUS, ids=[row["name"] for row in CORPUS])
def test_each_corpus_output_is_read_back_to_its_input(row):
    value = _input(row)
    for shown in (row["safe_text"], row["safe_lines"]):
        back = unescape(shown)
        assert (back.encode("utf-8", "surrogateescape") if isinstance(value, bytes) else back) == value


# -- properties ------------------------------------------------------------------------------------------------


@given(texts)
def test_one_line_output_holds_no_control_no_newline_and_no_hidden_character(text):
    shown = safe_text(text)
    assert not set(shown) & HIDDEN  # HIDDEN holds every C0 (newline and tab too), DEL, C1 and format character


@given(texts)
def test_lines_output_holds_nothing_hidden_but_newlines_and_tabs(text):
    shown = safe_lines(text)
    assert not set(shown) & (HIDDEN - {"\n", "\t"})
    assert shown.count("\n") == text.count("\n")  # every line is a line of the input, and only those


@given(byte_strings)
def test_bytes_output_holds_no_control_and_no_hidden_character(data):
    assert not set(safe_text(data)) & HIDDEN
    assert not set(safe_lines(data)) & (HIDDEN - {"\n", "\t"})


@given(texts)
def test_unescape_inverts_both_forms_so_the_escaping_is_injective(text):
    assert unescape(safe_text(text)) == text
    assert unescape(safe_lines(text)) == text


@given(byte_strings)
def test_unescape_gives_back_the_exact_bytes(data):
    assert unescape(safe_text(data)).encode("utf-8", "surrogateescape") == data
    assert unescape(safe_lines(data)).encode("utf-8", "surrogateescape") == data


@given(texts, texts)
def test_two_different_strings_are_never_shown_alike(first, second):
    assume(first != second)
    assert safe_text(first) != safe_text(second)
    assert safe_lines(first) != safe_lines(second)


@given(byte_strings, byte_strings)
def test_two_different_byte_strings_are_never_shown_alike(first, second):
    assume(first != second)
    assert safe_text(first) != safe_text(second)


@given(st.text(st.characters(blacklist_characters=sorted(HIDDEN | {"\\"}))))
def test_printable_text_without_backslashes_is_unchanged(text):
    assert safe_text(text) == text
    assert safe_lines(text) == text
    assert safe_text(text.encode()) == text


@given(texts)
def test_a_backslash_in_the_input_never_reads_as_an_escape(text):
    shown = safe_text("\\" + text)
    assert shown.startswith("\\\\")


@given(byte_strings, st.lists(st.integers(0, 64), max_size=8))
def test_streamed_output_shows_as_the_whole_does_however_it_is_chunked(data, cuts):
    points = sorted({min(cut, len(data)) for cut in cuts})
    chunks = [data[start:end] for start, end in zip([0, *points], [*points, len(data)], strict=True)]
    decoder = SafeStreamDecoder()
    shown = "".join(decoder.feed(chunk) for chunk in chunks) + decoder.feed(b"", final=True)
    assert shown == safe_lines(data)


@given(texts, st.integers(2, 40))
def test_clip_never_cuts_an_escape_and_keeps_a_prefix(text, limit):
    shown = safe_text(text)
    clipped = clip(shown, limit)
    assert len(clipped) <= max(limit, 0) or clipped == shown
    if clipped == shown:
        return
    assert clipped.endswith(ELLIPSIS)
    head = unescape(clipped[: -len(ELLIPSIS)])  # no half escape: it reads back
    assert text.startswith(head)


# -- the chosen set, against the running Python's Unicode database -------------------------------------------


def test_every_control_format_surrogate_and_separator_code_point_is_hidden():
    missing = [f"U+{code:04X}" for code in range(0x110000)
               if unicodedata.category(chr(code)) in ("Cc", "Cf", "Cs", "Zl", "Zp") and chr(code) not in HIDDEN]
    assert missing == []


@pytest.mark.parametrize("char", ["\u034f", "\u115f", "\u17b4", "\u180b", "\u3164", "\ufe00", "\ufe0f", "\uffa0",
                                  "\U000e0100", "\U000e0000"])
def test_default_ignorable_code_points_that_are_letters_or_marks_are_hidden_too(char):
    assert safe_text(char) != char and safe_text(char).startswith("\\u" if ord(char) < 0x10000 else "\\U")


@pytest.mark.parametrize("char", ["a", " ", "\u00a0", "\u00e9", "\u0301", "\u05d0", "\u4e00", "\ue000", "\U0001f600"])
def test_ordinary_letters_marks_spaces_and_private_use_stay(char):
    assert safe_text(char) == char


@pytest.mark.parametrize("bad", ["\\", "a\\", "\\q", "\\x1", "\\xZZ", "\\u12", "\\U00110000", "\\X41"])
def test_unescape_refuses_what_no_escape_produces(bad):
    with pytest.raises(ValueError):
        unescape(bad)


def test_any_object_is_shown_as_its_escaped_str():
    assert safe_text(3) == "3"
    assert safe_text(None) == "None"
    assert safe_text(["\x1b[2J"]) == "['\\\\x1b[2J']"  # the list's repr escapes ESC; its backslash is doubled
    assert safe_text(bytearray(b"\x1b")) == "\\x1b"
