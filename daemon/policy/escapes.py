"""Backslash escapes as the shell expands them: $'...' (ANSI-C), ``echo -e`` and ``printf``; and back.

Byte escapes (``\\x72``, ``\\162``) produce bytes and literal text is UTF-8, so ``$'\\xc3\\xa9'`` reads
as "é" as it would in a UTF-8 terminal; bytes that are not UTF-8 become U+FFFD. Never raises.
``escape_unprintable`` goes the other way, for text shown in a reason: control characters as escapes.
"""

from __future__ import annotations

import re

_SIMPLE = {"a": "\a", "b": "\b", "e": "\x1b", "E": "\x1b", "f": "\f", "n": "\n", "r": "\r", "t": "\t",
           "v": "\v", "\\": "\\", "'": "'", '"': '"', "?": "?"}
_HEX = re.compile(r"[0-9a-fA-F]{1,2}")
_OCT3 = re.compile(r"[0-7]{1,3}")
_UNI4 = re.compile(r"[0-9a-fA-F]{1,4}")
_UNI8 = re.compile(r"[0-9a-fA-F]{1,8}")


def _code_point(value: int) -> str:
    return chr(value) if 0 <= value <= 0x10FFFF else "\ufffd"


class _Out:
    """Collects text and raw bytes in order, decoding the bytes as UTF-8 at the end."""

    def __init__(self) -> None:
        self.buffer = bytearray()

    def text(self, text: str) -> None:
        self.buffer += text.encode("utf-8", "surrogatepass")

    def byte(self, value: int) -> None:
        self.buffer.append(value & 0xFF)

    def result(self) -> str:
        return self.buffer.decode("utf-8", "replace")


def _expand(text: str, *, octal: re.Pattern[str], octal_needs_zero: bool, c_stops: bool,
            simple: dict[str, str]) -> tuple[str, bool]:
    """Shared escape loop; returns (text, stopped) where stopped means a \\c ended the output."""
    out = _Out()
    i, n = 0, len(text)
    while i < n:
        j = text.find("\\", i)
        if j < 0:
            out.text(text[i:])
            break
        out.text(text[i:j])
        if j + 1 >= n:
            out.text("\\")
            break
        c = text[j + 1]
        i = j + 2
        if c in simple:
            out.text(simple[c])
        elif c == "x" and (m := _HEX.match(text, i)):
            out.byte(int(m.group(), 16))
            i = m.end()
        elif c == "u" and (m := _UNI4.match(text, i)):
            out.text(_code_point(int(m.group(), 16)))
            i = m.end()
        elif c == "U" and (m := _UNI8.match(text, i)):
            out.text(_code_point(int(m.group(), 16)))
            i = m.end()
        elif octal_needs_zero and c == "0":
            m = octal.match(text, i)
            out.byte(int(m.group(), 8) if m else 0)
            i = m.end() if m else i
        elif not octal_needs_zero and c in "01234567":
            m = octal.match(text, j + 1)
            out.byte(int(m.group(), 8))
            i = m.end()
        elif c == "c" and c_stops:
            return out.result(), True
        elif c == "c" and not c_stops and i < n:
            out.text(chr(ord(text[i]) & 0x1F))  # $'\cX': control character
            i += 1
        else:
            out.text("\\" + c)
    return out.result(), False


def escape_unprintable(text: str, limit: int, also: str = "") -> str:
    """``text`` cut to ``limit`` characters (then "…"), with unprintable characters and those in ``also`` as
    ``\\xNN``/``\\uNNNN``/``\\UNNNNNNNN`` escapes (no control, format or line-breaking character is left)."""
    out = []
    for char in text[:limit]:
        if char in also or not char.isprintable():
            code = ord(char)
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")
        else:
            out.append(char)
    return "".join(out) + ("…" if len(text) > limit else "")


def decode_ansi_c(text: str) -> str:
    """The value of $'text' (the part between the quotes)."""
    return _expand(text, octal=_OCT3, octal_needs_zero=False, c_stops=False, simple=_SIMPLE)[0]


_ECHO_SIMPLE = {k: v for k, v in _SIMPLE.items() if k not in "'\"?"}
_OCT0 = re.compile(r"[0-7]{1,3}")


def decode_echo(text: str) -> tuple[str, bool]:
    """``echo -e`` / printf ``%b``: escapes, \\0nnn octal; (text, stopped at \\c)."""
    return _expand(text, octal=_OCT0, octal_needs_zero=True, c_stops=True, simple=_ECHO_SIMPLE)


def decode_printf_format(text: str) -> str:
    """Escapes in a printf format string (\\NNN octal without a leading zero)."""
    return _expand(text, octal=_OCT3, octal_needs_zero=False, c_stops=False,
                   simple={k: v for k, v in _SIMPLE.items() if k != "?"})[0]
