"""Box-controlled text made safe to show: every control character, escape sequence and invisible format character
becomes a visible escape, so nothing from a box can move the cursor, erase, recolour, set the clipboard, open a
link, reorder or hide text on the operator's terminal or in the console.

Everything the CLI and the console show that a box can influence (box names and reasons, event data, command
lines, error messages quoting guest text, patches, exec output in the console) goes through ``safe_text`` (one
line) or ``safe_lines`` (text whose newlines and tabs stay, such as a patch).  The one exception is the raw
stdout/stderr of ``tkbox exec``, which the operator asked for, as with ``docker exec``.

The notation, unambiguous and inverted by ``unescape``:

- ``\\\\`` is one backslash: every backslash of the input is doubled, so a literal ``\\x1b`` in the input reads
  ``\\\\x1b`` and cannot pass for an escape;
- ``\\n``, ``\\r``, ``\\t`` are newline, carriage return and tab (``safe_lines`` keeps newline and tab as they are);
- ``\\xNN`` (two lowercase hex digits) is the code point U+00NN when NN < 80, and the byte NN that is not valid
  UTF-8 when NN >= 80 (only bytes input has such bytes; C1 controls U+0080..U+009F are written ``\\u0080``);
- ``\\uNNNN`` and ``\\UNNNNNNNN`` are any other hidden code point (``\\u202e``, ``\\U000e0041``).

What is hidden (``HIDDEN_RANGES``), and why:

- C0 controls U+0000..U+001F, DEL U+007F and C1 controls U+0080..U+009F (category Cc): ESC starts CSI, OSC
  (hyperlinks, clipboard writes, titles), DCS and the rest; U+009B is an 8-bit CSI; CR and backspace overwrite
  what was printed; BEL ends an OSC.  Escaping the introducer disarms every sequence that follows it.
- Every format character (category Cf): the bidirectional embeddings, overrides, isolates and marks of Trojan
  Source (U+202A..U+202E, U+2066..U+2069, U+200E/F, U+061C), zero-width spaces and joiners (U+200B..U+200D),
  word joiner and invisible operators (U+2060..U+2064), the byte order mark, interlinear annotations, soft hyphen,
  and the tag characters U+E0001/U+E0020..U+E007F that smuggle invisible ASCII (e.g. prompt text) past a reader.
- Unicode's Default_Ignorable_Code_Point set on top of that (it is what renderers draw as nothing): the combining
  grapheme joiner, Hangul fillers, Khmer inherent vowels, Mongolian and other variation selectors (so an emoji's
  U+FE0F shows as ``\\ufe0f``: a small cost for seeing data hidden in selectors), U+E0000..U+E0FFF.
- Line and paragraph separators U+2028/U+2029: some renderers and Python's ``str.splitlines`` break lines there,
  which would let one line pose as two.
- Surrogates U+D800..U+DFFF: a lone one arrives through JSON's ``\\ud800`` and cannot be encoded for a terminal.

Not hidden: ordinary spaces of other widths (U+00A0, U+3000 …), private-use and unassigned code points, and
combining marks outside the set above (they are letters of many scripts); they draw as themselves or as a box.
The ranges are a superset of those categories as of Unicode 15.1; a test checks them against the running
Python's ``unicodedata``.

Standard library only, so the CLI imports it without Rich or Textual.
"""

from __future__ import annotations

import codecs
import re
from functools import lru_cache

# (first, last) code points, inclusive.  Category Cc, Cf, Cs, Zl, Zp and Default_Ignorable_Code_Point.
HIDDEN_RANGES: tuple[tuple[int, int], ...] = (
    (0x0000, 0x001F),  # C0 controls (newline and tab are kept by safe_lines only)
    (0x007F, 0x009F),  # DEL and C1 controls
    (0x00AD, 0x00AD),  # soft hyphen
    (0x034F, 0x034F),  # combining grapheme joiner
    (0x0600, 0x0605),  # Arabic number signs (prepended format characters)
    (0x061C, 0x061C),  # Arabic letter mark (bidi)
    (0x06DD, 0x06DD),  # Arabic end of ayah
    (0x070F, 0x070F),  # Syriac abbreviation mark
    (0x0890, 0x0891),  # Arabic pound and piastre marks above
    (0x08E2, 0x08E2),  # Arabic disputed end of ayah
    (0x115F, 0x1160),  # Hangul choseong and jungseong fillers
    (0x17B4, 0x17B5),  # Khmer inherent vowels
    (0x180B, 0x180F),  # Mongolian free variation selectors and vowel separator
    (0x200B, 0x200F),  # zero width space, non-joiner, joiner; left-to-right and right-to-left marks
    (0x2028, 0x2029),  # line and paragraph separators
    (0x202A, 0x202E),  # bidi embeddings, pop, overrides
    (0x2060, 0x206F),  # word joiner, invisible operators, bidi isolates, deprecated format characters
    (0x3164, 0x3164),  # Hangul filler
    (0xD800, 0xDFFF),  # surrogates
    (0xFE00, 0xFE0F),  # variation selectors 1-16
    (0xFEFF, 0xFEFF),  # zero width no-break space (byte order mark)
    (0xFFA0, 0xFFA0),  # halfwidth Hangul filler
    (0xFFF0, 0xFFFB),  # reserved ignorables; interlinear annotation anchor, separator, terminator
    (0x110BD, 0x110BD),  # Kaithi number sign
    (0x110CD, 0x110CD),  # Kaithi number sign above
    (0x13430, 0x1343F),  # Egyptian hieroglyph format controls
    (0x1BCA0, 0x1BCA3),  # shorthand format controls
    (0x1D173, 0x1D17A),  # musical symbol beam and phrase controls
    (0xE0000, 0xE0FFF),  # tags (invisible ASCII), variation selectors 17-256, reserved ignorables
)

ELLIPSIS = "…"

_SHORT = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_LONG = {value: key for key, value in _SHORT.items()}


def _class_item(first: int, last: int) -> str:
    def one(code: int) -> str:
        return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"

    return one(first) if first == last else f"{one(first)}-{one(last)}"


def _pattern(kept: str) -> re.Pattern[str]:
    """A character class of the backslash and every hidden code point, less those in ``kept``."""
    items = ["\\\\"]
    for first, last in HIDDEN_RANGES:
        start = first
        # Only the kept characters in the range, not every code point of it: this runs when every command starts.
        for code in sorted({ord(char) for char in kept if first <= ord(char) <= last}):
            if start < code:
                items.append(_class_item(start, code - 1))
            start = code + 1
        if start <= last:
            items.append(_class_item(start, last))
    return re.compile("[" + "".join(items) + "]")


_ONE_LINE = _pattern("")
_LINES = _pattern("\n\t")


@lru_cache(maxsize=512)
def _escape_char(char: str, from_bytes: bool) -> str:
    short = _SHORT.get(char)
    if short is not None:
        return short
    code = ord(char)
    if from_bytes and 0xDC80 <= code <= 0xDCFF:  # a byte that is not UTF-8, as surrogateescape decodes it
        return f"\\x{code - 0xDC00:02x}"
    if code < 0x80:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def _escape(text: str, pattern: re.Pattern[str], from_bytes: bool) -> str:
    return pattern.sub(lambda match: _escape_char(match.group(), from_bytes), text)


def _decode(value: str | bytes | object) -> tuple[str, bool]:
    if isinstance(value, str):
        return value, False
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8", "surrogateescape"), True
    return str(value), False


def safe_text(value: str | bytes | object) -> str:
    """``value`` as one line with every hidden character, newline, tab and backslash escaped.

    Bytes are read as UTF-8, a byte that is not shown as ``\\xNN``; any other object as its ``str``.
    """
    text, from_bytes = _decode(value)
    return _escape(text, _ONE_LINE, from_bytes)


def safe_lines(value: str | bytes | object) -> str:
    """As ``safe_text``, but newlines and tabs stay as they are (a patch, command output): nothing else does,
    so a carriage return or a line separator cannot make one line pass for another."""
    text, from_bytes = _decode(value)
    return _escape(text, _LINES, from_bytes)


class SafeStreamDecoder:
    """Output bytes arriving in chunks → ``safe_lines`` text, chunk by chunk.

    A UTF-8 sequence split between two chunks is held back until its end arrives, so it shows as its character
    rather than as ``\\xNN`` bytes; ``feed(b"", final=True)`` flushes what is held (an incomplete sequence at the
    very end shows as bytes).
    """

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")("surrogateescape")

    def feed(self, data: bytes, final: bool = False) -> str:
        return _escape(self._decoder.decode(data, final), _LINES, True)


_TOKEN = re.compile(r"\\(?:x[0-9a-f]{2}|u[0-9a-f]{4}|U[0-9a-f]{8}|[\\nrt])|[^\\]|\\", re.S)
_ESCAPE = re.compile(r"\\(?:x([0-9a-f]{2})|u([0-9a-f]{4})|U([0-9a-f]{8})|([\\nrt])|(.|$))", re.S)


def clip(escaped: str, limit: int) -> str:
    """``escaped`` (output of ``safe_text``) cut to at most ``limit`` characters with ``…`` at the end, never in
    the middle of an escape."""
    if len(escaped) <= limit:
        return escaped
    end = 0
    for token in _TOKEN.finditer(escaped):
        if token.end() > limit - len(ELLIPSIS):
            break
        end = token.end()
    return escaped[:end] + ELLIPSIS


def unescape(escaped: str) -> str:
    """The inverse of ``safe_text`` and ``safe_lines``: ``unescape(safe_text(s)) == s`` for every string ``s``.

    For bytes ``b``, ``unescape(safe_text(b)).encode("utf-8", "surrogateescape") == b`` (a ``\\xNN`` of 80 or
    more is the byte NN, returned as surrogateescape does).  Raises ``ValueError`` on a backslash that starts no
    escape, or a code point beyond U+10FFFF.
    """

    def one(match: re.Match[str]) -> str:
        low, bmp, astral, short, bad = match.groups()
        if bad is not None:
            raise ValueError(f"not an escape at {match.start()}: {match.group()!r}")
        if short is not None:
            return _LONG["\\" + short]
        if low is not None:
            code = int(low, 16)
            return chr(code if code < 0x80 else 0xDC00 + code)
        code = int(bmp or astral, 16)
        if code > 0x10FFFF:
            raise ValueError(f"not a code point at {match.start()}: {match.group()!r}")
        return chr(code)

    return _ESCAPE.sub(one, escaped)
