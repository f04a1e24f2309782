"""Git's patch notation, byte for byte: quoted names, blob ids, unified hunks and ``GIT binary patch`` literals.

Pure functions over bytes. ``diff.py`` decides *what* changed; this module writes it the way ``git diff --binary
--full-index`` does, so that ``git apply`` (and a strict host-side parser) reads exactly what was meant.
"""

from __future__ import annotations

import base64
import difflib
import hashlib
import zlib
from collections.abc import Iterable, Iterator

ZERO_OID = b"0" * 40
MODE_FILE = 0o100644
MODE_EXEC = 0o100755
MODE_LINK = 0o120000
CONTEXT = 3
# Above this many lines in the changed middle of a file, the middle is written as one replacement, not searched.
MAX_MATCH_LINES = 10_000
BINARY_LINE = 52  # bytes of deflated data per base85 line
ZLIB_LEVEL = 1  # git's default (core.compression unset: Z_BEST_SPEED)
NO_NEWLINE = b"\\ No newline at end of file\n"

# git's quote.c: control characters, '"', '\\', DEL and every byte >= 0x80 (core.quotePath=true) are quoted.
_NAMED = {0x07: b"\\a", 0x08: b"\\b", 0x09: b"\\t", 0x0A: b"\\n", 0x0B: b"\\v", 0x0C: b"\\f", 0x0D: b"\\r",
          0x22: b'\\"', 0x5C: b"\\\\"}
_MUST_QUOTE = frozenset(range(0x20)) | {0x22, 0x5C} | frozenset(range(0x7F, 0x100))


def mode_text(mode: int) -> bytes:
    return b"%o" % mode


def quote_name(name: bytes) -> bytes:
    """``name`` as git writes it in a patch header: as is, or C-quoted in double quotes."""
    if not any(byte in _MUST_QUOTE for byte in name):
        return name
    out = bytearray(b'"')
    for byte in name:
        if byte in _NAMED:
            out += _NAMED[byte]
        elif byte in _MUST_QUOTE:
            out += b"\\%03o" % byte
        else:
            out.append(byte)
    out += b'"'
    return bytes(out)


def blob_oid(data: bytes) -> bytes:
    """The hex git blob id of ``data``."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest().encode()


def blob_oid_stream(size: int, chunks: Iterable[bytes]) -> bytes:
    digest = hashlib.sha1(b"blob %d\0" % size, usedforsecurity=False)
    for chunk in chunks:
        digest.update(chunk)
    return digest.hexdigest().encode()


def is_binary(data: bytes) -> bool:
    """Binary for the patch: a NUL byte anywhere, or not valid UTF-8."""
    if b"\0" in data:
        return True
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


def split_lines(data: bytes) -> list[bytes]:
    """Lines as git counts them: split after each ``\\n``; a last line without one stays as it is."""
    parts = data.split(b"\n")
    lines = [part + b"\n" for part in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


Opcode = tuple[str, int, int, int, int]


def _opcodes(old: list[bytes], new: list[bytes]) -> list[Opcode]:
    limit = min(len(old), len(new))
    head = 0
    while head < limit and old[head] == new[head]:
        head += 1
    tail = 0
    while tail < limit - head and old[-1 - tail] == new[-1 - tail]:
        tail += 1
    old_end, new_end = len(old) - tail, len(new) - tail
    codes: list[Opcode] = []
    if head:
        codes.append(("equal", 0, head, 0, head))
    old_mid, new_mid = old[head:old_end], new[head:new_end]
    if old_mid and new_mid and len(old_mid) + len(new_mid) <= MAX_MATCH_LINES:
        matcher = difflib.SequenceMatcher(None, old_mid, new_mid)
        for tag, i1, i2, j1, j2 in matcher.get_opcodes():
            codes.append((tag, i1 + head, i2 + head, j1 + head, j2 + head))
    elif old_mid or new_mid:
        codes.append(("replace", head, old_end, head, new_end))
    if tail:
        codes.append(("equal", old_end, len(old), new_end, len(new)))
    return codes


def _grouped(codes: list[Opcode], context: int) -> Iterator[list[Opcode]]:
    """difflib's hunk grouping: changes with ``context`` equal lines around them, split at long equal runs."""
    if not codes:
        return
    if codes[0][0] == "equal":
        tag, i1, i2, j1, j2 = codes[0]
        codes[0] = tag, max(i1, i2 - context), i2, max(j1, j2 - context), j2
    if codes[-1][0] == "equal":
        tag, i1, i2, j1, j2 = codes[-1]
        codes[-1] = tag, i1, min(i2, i1 + context), j1, min(j2, j1 + context)
    group: list[Opcode] = []
    for tag, i1, i2, j1, j2 in codes:
        if tag == "equal" and i2 - i1 > 2 * context:
            group.append((tag, i1, min(i2, i1 + context), j1, min(j2, j1 + context)))
            yield group
            group = []
            i1, j1 = max(i1, i2 - context), max(j1, j2 - context)
        group.append((tag, i1, i2, j1, j2))
    if group and not (len(group) == 1 and group[0][0] == "equal"):
        yield group


def _range(start: int, stop: int) -> bytes:
    length = stop - start
    if length == 1:
        return b"%d" % (start + 1)
    return b"%d,%d" % (start + 1 if length else start, length)


def _line(marker: bytes, line: bytes) -> bytes:
    if line.endswith(b"\n"):
        return marker + line
    return marker + line + b"\n" + NO_NEWLINE


_FUNC_START = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_$")


def _funcname(line: bytes) -> bytes | None:
    """git's default hunk-header context (xdiff ``def_ff``): a line starting with a letter, '_' or '$'; unlike git,
    none when what it would show holds a carriage return (the host refuses one in any header line: tools read it
    differently)."""
    if line and line[0] in _FUNC_START:
        shown = line[:80].rstrip(b" \t\n\v\f\r")
        return None if b"\r" in shown else shown
    return None


def text_hunks(old: bytes, new: bytes, context: int = CONTEXT) -> Iterator[bytes]:
    """The ``@@`` hunks turning ``old`` into ``new``, each header with git's function context."""
    a, b = split_lines(old), split_lines(new)
    func, searched_to = b"", -1
    for group in _grouped(_opcodes(a, b), context):
        first, last = group[0], group[-1]
        # Like xdiff: look back from the line before the hunk to where the previous search started; when nothing
        # matches, the previous hunk's context carries over.
        for index in range(first[1] - 1, searched_to, -1):
            found = _funcname(a[index])
            if found is not None:
                func = found
                break
        searched_to = first[1] - 1
        header = b"@@ -%s +%s @@" % (_range(first[1], last[2]), _range(first[3], last[4]))
        if func:
            header = (header + b" " + func)[:127]
        yield header + b"\n"
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                for line in a[i1:i2]:
                    yield _line(b" ", line)
                continue
            for line in a[i1:i2]:
                yield _line(b"-", line)
            for line in b[j1:j2]:
                yield _line(b"+", line)


def _encode_line(chunk: bytes) -> bytes:
    count = len(chunk)
    prefix = count + 64 if count <= 26 else count - 26 + 96  # 'A'..'Z' for 1..26, 'a'..'z' for 27..52
    return bytes([prefix]) + base64.b85encode(chunk, pad=True) + b"\n"


def _encode_full_lines(data: bytes) -> bytes:
    """Lines of exactly 52 bytes each ('z' lines), encoded in one b85 call: 52 is a multiple of 4, so the
    encoding of the whole is the concatenation of the lines' encodings (65 characters each)."""
    encoded = base64.b85encode(data)
    return b"".join([b"z" + encoded[start:start + 65] + b"\n" for start in range(0, len(encoded), 65)])


LITERAL_BATCH = BINARY_LINE * 1260  # about 64 KiB of deflated data per piece


def binary_literal(size: int, chunks: Iterable[bytes]) -> Iterator[bytes]:
    """One ``literal`` block: the deflated data in base85 lines, then the blank line that ends it."""
    yield b"literal %d\n" % size
    deflate = zlib.compressobj(ZLIB_LEVEL)
    pending = bytearray()
    for chunk in chunks:
        pending += deflate.compress(chunk)
        if len(pending) >= LITERAL_BATCH:
            whole = len(pending) - len(pending) % BINARY_LINE
            yield _encode_full_lines(bytes(pending[:whole]))
            del pending[:whole]
    pending += deflate.flush()
    whole = len(pending) - len(pending) % BINARY_LINE
    if whole:
        yield _encode_full_lines(bytes(pending[:whole]))
    if whole < len(pending):
        yield _encode_line(bytes(pending[whole:]))
    yield b"\n"


def file_header(path: bytes, *, blank_label: str | None = None) -> tuple[bytes, bytes, bytes]:
    """(``diff --git`` line, ``---`` label, ``+++`` label) for ``path``; ``blank_label`` 'a' or 'b' is /dev/null."""
    a_name, b_name = quote_name(b"a/" + path), quote_name(b"b/" + path)
    a_label = b"/dev/null" if blank_label == "a" else a_name
    b_label = b"/dev/null" if blank_label == "b" else b_name
    return b"diff --git %s %s\n" % (a_name, b_name), _label(b"---", a_label), _label(b"+++", b_label)


def _label(marker: bytes, name: bytes) -> bytes:
    # git appends a tab to a ---/+++ name that holds a space, so the name's end is unambiguous.
    return marker + b" " + name + (b"\t" if b" " in name else b"") + b"\n"
