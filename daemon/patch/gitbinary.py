"""``GIT binary patch`` literals, decoded strictly: base85 lines, then zlib, bounded before anything is inflated.

A literal is ``literal SIZE`` and lines of ``L`` + base85 text + newline, ended by an empty line. ``L`` is the
count of bytes the line decodes to: ``A``..``Z`` for 1..26, ``a``..``z`` for 27..52. As in git's
``parse_binary_hunk``, a line's text is a multiple of 5 characters and its count may leave at most 3 bytes of
padding. The decoded bytes are one zlib stream that inflates to exactly SIZE bytes, with nothing after its end.
``delta`` hunks (git's binary deltas) are not supported and are refused by the parser.
"""

from __future__ import annotations

import base64
import zlib
from collections.abc import Iterable

MAX_LINE_BYTES = 52


def line_length(line: bytes) -> int:
    """The byte count a data line (with its newline) says it holds, after checking the line's shape."""
    if len(line) < 7 or (len(line) - 2) % 5 or not line.endswith(b"\n"):
        raise ValueError("a binary data line must be a length letter, a multiple of 5 base85 characters and a newline")
    letter = line[0]
    if 0x41 <= letter <= 0x5A:
        count = letter - 0x41 + 1
    elif 0x61 <= letter <= 0x7A:
        count = letter - 0x61 + 27
    else:
        raise ValueError("a binary data line must start with a length letter A-Z or a-z")
    room = (len(line) - 2) // 5 * 4
    if count > room or count <= room - 4:
        raise ValueError("a binary data line's length letter does not match its text")
    return count


def decode_line(line: bytes) -> bytes:
    """The bytes one data line holds."""
    count = line_length(line)
    try:
        return base64.b85decode(line[1:-1])[:count]
    except ValueError:
        raise ValueError("a binary data line is not valid base85") from None


def inflate(lines: Iterable[bytes], size: int) -> bytes:
    """The literal's content: its data lines decoded and inflated; exactly ``size`` bytes or ``ValueError``.

    ``size`` must already be within the caller's bound: at most ``size`` + 1 bytes are ever inflated.
    """
    deflated = b"".join(decode_line(line) for line in lines)
    inflater = zlib.decompressobj()
    try:
        data = inflater.decompress(deflated, size + 1)
    except zlib.error:
        raise ValueError("the binary literal is not a valid zlib stream") from None
    if len(data) != size:
        raise ValueError(f"the binary literal inflates to {'more' if len(data) > size else 'fewer'} bytes than the "
                         f"{size} it declares")
    if not inflater.eof or inflater.unconsumed_tail or inflater.unused_data:
        raise ValueError("the binary literal's zlib stream does not end exactly where its data does")
    return data
