"""Names in git's patch notation, read strictly: C-quoted names, the ``diff --git`` line, ``---``/``+++`` labels.

Git quotes a name that holds a control character, ``"``, ``\\`` or (with ``core.quotePath``, the default) a byte of
0x80 or more: ``"a/t\\303\\251st"``. Inside quotes, ``\\a \\b \\f \\n \\r \\t \\v \\\\ \\"`` and three octal digits
(the first 0-3) are the only escapes (quote.c ``unquote_c_style``). A name git would have left bare is read bare.

Each reader raises ``ValueError`` with a sentence when the text is not exactly one of the forms git writes.
"""

from __future__ import annotations

_ESCAPES = {ord("a"): 7, ord("b"): 8, ord("f"): 12, ord("n"): 10, ord("r"): 13, ord("t"): 9, ord("v"): 11,
            ord("\\"): 92, ord('"'): 34}
DEV_NULL = b"/dev/null"


def unquote_c(text: bytes, start: int = 0) -> tuple[bytes, int]:
    """The name C-quoted at ``text[start]`` (a ``"``), and the index just past its closing quote."""
    if text[start:start + 1] != b'"':
        raise ValueError("a quoted name must start with '\"'")
    out = bytearray()
    index = start + 1
    while index < len(text):
        byte = text[index]
        if byte == ord('"'):
            return bytes(out), index + 1
        if byte != ord("\\"):
            out.append(byte)
            index += 1
            continue
        escape = text[index + 1:index + 2]
        if not escape:
            break
        if escape[0] in _ESCAPES:
            out.append(_ESCAPES[escape[0]])
            index += 2
            continue
        digits = text[index + 1:index + 4]
        if len(digits) == 3 and digits[0] in b"0123" and all(0x30 <= digit <= 0x37 for digit in digits):
            out.append(int(digits, 8))
            index += 4
            continue
        raise ValueError(f"a quoted name has the unknown escape '\\{escape.decode('latin-1')}'")
    raise ValueError("a quoted name has no closing '\"'")


def _whole_quoted(text: bytes) -> bytes:
    name, end = unquote_c(text)
    if end != len(text):
        raise ValueError("text follows a quoted name")
    return name


def plain_name(text: bytes) -> bytes:
    """A name on a ``rename from``/``rename to``/``copy from``/``copy to`` line: quoted, or bare to the end."""
    if text.startswith(b'"'):
        return _whole_quoted(text)
    return text


def _strip_prefix(name: bytes, prefix: bytes, what: str) -> bytes:
    if not name.startswith(prefix):
        raise ValueError(f"the {what} name does not start with '{prefix.decode()}'")
    return name[len(prefix):]


def label_name(label: bytes, prefix: bytes) -> bytes | None:
    """The path on a ``---`` (``prefix`` ``a/``) or ``+++`` (``b/``) line, None for ``/dev/null``.

    Git puts a tab after a label holding a space, so that the name's end is clear; a label is read only in that
    form: ``a/x``, ``a/x y<TAB>``, ``"a/q\\"x"``, ``"a/q x"<TAB>``, and nothing after it.
    """
    if label == DEV_NULL:
        return None
    body = label[:-1] if label.endswith(b"\t") else label
    if (b" " in body) != label.endswith(b"\t"):
        raise ValueError("a label holding a space must end with one tab, and only such a label")
    name = _whole_quoted(body) if body.startswith(b'"') else body
    return _strip_prefix(name, prefix, "label's")


def header_names(rest: bytes) -> list[tuple[bytes, bytes]]:
    """Every way to read the names of a ``diff --git`` line (``rest`` is what follows ``diff --git ``, without the
    newline), each as (old path, new path) without the ``a/``/``b/`` prefixes.

    Quoted names are read in one way only. Two bare names are ambiguous when they hold spaces (``a/x b/y b/z``), so
    every split at a `` b/`` is returned; the caller keeps the one its other header lines name.
    """
    if rest.startswith(b'"'):
        first, end = unquote_c(rest)
        if rest[end:end + 1] != b" ":
            raise ValueError("the two names of the diff --git line must be separated by one space")
        second_text = rest[end + 1:]
        second = _whole_quoted(second_text) if second_text.startswith(b'"') else second_text
        return [(_strip_prefix(first, b"a/", "first"), _strip_prefix(second, b"b/", "second"))]
    quote = rest.find(b'"')
    if quote >= 0:
        if quote == 0 or rest[quote - 1:quote] != b" ":
            raise ValueError("a quote inside a bare name on the diff --git line")
        second = _whole_quoted(rest[quote:])
        return [(_strip_prefix(rest[:quote - 1], b"a/", "first"), _strip_prefix(second, b"b/", "second"))]
    _strip_prefix(rest, b"a/", "first")
    splits: list[tuple[bytes, bytes]] = []
    at = rest.find(b" b/")
    while at >= 0:
        splits.append((rest[2:at], rest[at + 3:]))
        at = rest.find(b" b/", at + 1)
    if not splits:
        raise ValueError("the diff --git line does not name a/OLD and b/NEW")
    return splits
