"""An HTTP/1.1 reply read strictly from bytes, without I/O: the status line and headers, then the body as its
framing says (``Content-Length``, ``chunked``, or up to the connection's close).  Standard library only.

The client sends one request per connection and the daemon is aiohttp, so only what a reply to that can be is read:
``HTTP/1.1`` or ``HTTP/1.0``, CRLF line ends, header names that are tokens, no folded lines, one framing (a
``Transfer-Encoding`` other than ``chunked``, or together with a ``Content-Length``, or two different lengths, are
refused), interim ``1xx`` replies skipped (except ``101``, which is the reply to an upgrade).  The head is at most
``head_cap`` bytes, a chunk's size line and the trailers too.  Anything else is ``ReplyBroken`` (the client's
``daemon_lost``) or ``HeadTooLarge``; nothing here raises anything but those two.
"""

from __future__ import annotations

TOKEN = frozenset(b"!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
HEX = frozenset(b"0123456789abcdefABCDEF")
DIGITS = frozenset(b"0123456789")
CHUNK_LINE_CAP = 1024  # a chunk's size line: hex digits and extensions the daemon never sends
MAX_LENGTH_DIGITS = 18  # a Content-Length or chunk size below 10**18 (hex: 16**15) bytes
INTERIM_CAP = 8  # interim (1xx) replies skipped before the reply; the daemon sends none


class ReplyBroken(Exception):
    """The bytes are not an HTTP/1.1 reply (or it was cut short)."""


class HeadTooLarge(Exception):
    """The reply's head (or a chunk line, or the trailers) is over its cap."""


class ReplyHead:
    """A reply's status and headers (names lower-case, values latin-1 text; the last of a repeated name)."""

    __slots__ = ("status", "headers")

    def __init__(self, status: int, headers: dict[str, str]) -> None:
        self.status = status
        self.headers = headers


class ReplyReader:
    """``feed`` each read (``b""`` at the end of the connection) and get what it completes, in order: the
    ``ReplyHead``, body chunks (``bytes``), and ``None`` once the body is whole.  After ``None`` nothing more is
    read (bytes past the end of a reply with a length are the next reply's, which never comes: they are ignored).
    ``upgrade=True``: a ``101`` reply ends at its head (what follows is the upgraded protocol's, in ``rest``)."""

    def __init__(self, head_cap: int, *, upgrade: bool = False) -> None:
        self.head_cap = head_cap
        self.upgrade = upgrade
        self.finished = False
        self.rest = b""  # bytes after a 101's head (upgrade=True)
        self._buffer = bytearray()
        self._state = "head"
        self._left = 0  # bytes left of the body (length) or of the current chunk
        self._closed = False
        self._interim = 0

    def feed(self, data: bytes) -> list[ReplyHead | bytes | None]:
        if self._closed:
            raise ReplyBroken("data after the end of the connection")
        if not data:
            self._closed = True
        out: list[ReplyHead | bytes | None] = []
        self._buffer += data
        while not self.finished and self._step(out):
            pass
        if self._closed and not self.finished:
            if self._state == "until_close":
                self.finished = True
                out.append(None)
            else:
                raise ReplyBroken("the connection closed before the reply's end")
        return out

    def _step(self, out: list[ReplyHead | bytes | None]) -> bool:
        """Move on by what is buffered; False when more bytes are needed."""
        state = self._state
        if state == "head":
            return self._head(out)
        if state in ("length", "chunk_data", "until_close"):
            if not self._buffer:
                return False
            if state == "until_close":
                out.append(bytes(self._buffer))
                self._buffer.clear()
                return False
            taken = bytes(self._buffer[: self._left])
            del self._buffer[: len(taken)]
            self._left -= len(taken)
            out.append(taken)
            if self._left:
                return False
            if state == "length":
                return self._finish(out)
            self._state = "chunk_end"
            return True
        if state == "chunk_end":
            if len(self._buffer) < 2:
                return False
            if self._buffer[:2] != b"\r\n":
                raise ReplyBroken("a chunk does not end with CRLF")
            del self._buffer[:2]
            self._state = "chunk_size"
            return True
        if state == "chunk_size":
            line = self._line(CHUNK_LINE_CAP)
            if line is None:
                return False
            size = line.split(b";", 1)[0].rstrip(b" \t")
            if not size or len(size) > MAX_LENGTH_DIGITS - 3 or not set(size) <= HEX:
                raise ReplyBroken("a chunk size is not hexadecimal")
            self._left = int(size, 16)
            self._state = "chunk_data" if self._left else "trailers"
            return True
        # trailers: header lines up to an empty one, read and dropped (the daemon sends none)
        line = self._line(self.head_cap)
        if line is None:
            return False
        return self._finish(out) if not line else True

    def _line(self, cap: int) -> bytes | None:
        end = self._buffer.find(b"\r\n", 0, cap + 2)
        if end < 0:
            if len(self._buffer) > cap:
                raise HeadTooLarge("a line of the reply is over its cap")
            return None
        line = bytes(self._buffer[:end])
        del self._buffer[: end + 2]
        return line

    def _finish(self, out: list[ReplyHead | bytes | None]) -> bool:
        self.finished = True
        self._buffer.clear()
        out.append(None)
        return False

    def _head(self, out: list[ReplyHead | bytes | None]) -> bool:
        end = self._buffer.find(b"\r\n\r\n", 0, self.head_cap + 4)
        if end < 0:
            if len(self._buffer) > self.head_cap:
                raise HeadTooLarge("the reply's head is over its cap")
            return False
        raw = bytes(self._buffer[:end])
        del self._buffer[: end + 4]
        status, headers, lengths, chunked = _parse_head(raw)
        if 100 <= status < 200 and not (status == 101 and self.upgrade):
            if status == 101:
                raise ReplyBroken("a 101 reply to a request that asked for no upgrade")
            self._interim += 1
            if self._interim > INTERIM_CAP:
                raise ReplyBroken("interim replies without end")
            return True  # an interim reply: the real one follows
        out.append(ReplyHead(status, headers))
        if status == 101:
            self.rest = bytes(self._buffer)
            return self._finish(out)
        if status in (204, 304):
            return self._finish(out)
        if chunked:
            self._state = "chunk_size"
        elif lengths:
            self._left = lengths[0]
            if not self._left:
                return self._finish(out)
            self._state = "length"
        else:
            self._state = "until_close"
        return True


def _parse_head(raw: bytes) -> tuple[int, dict[str, str], list[int], bool]:
    lines = raw.split(b"\r\n")
    version, _, rest = lines[0].partition(b" ")
    code, _, reason = rest.partition(b" ")
    if version not in (b"HTTP/1.1", b"HTTP/1.0") or len(code) != 3 or not set(code) <= DIGITS or code[:1] == b"0":
        raise ReplyBroken("the status line is not HTTP/1.1's")
    if any(byte < 0x20 and byte != 0x09 or byte == 0x7F for byte in reason):
        raise ReplyBroken("the status line has a control character")
    headers: dict[str, str] = {}
    lengths: list[int] = []
    encodings: list[bytes] = []
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        if not colon or not name or not set(name) <= TOKEN:
            raise ReplyBroken("a header line is not NAME: VALUE (or is folded)")
        value = value.strip(b" \t")
        if any(byte < 0x20 and byte != 0x09 or byte == 0x7F for byte in value):
            raise ReplyBroken("a header value has a control character")
        key = name.decode("ascii").lower()
        if key == "content-length":
            if not value or len(value) > MAX_LENGTH_DIGITS or not set(value) <= DIGITS:
                raise ReplyBroken("a Content-Length is not a number")
            lengths.append(int(value))
        elif key == "transfer-encoding":
            encodings.append(value.lower())
        headers[key] = value.decode("latin-1")
    if len(set(lengths)) > 1:
        raise ReplyBroken("two different Content-Lengths")
    if encodings and (encodings != [b"chunked"] or lengths):
        raise ReplyBroken("a Transfer-Encoding other than chunked, or with a Content-Length")
    return int(code), headers, lengths, bool(encodings)
