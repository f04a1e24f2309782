"""The host's subordinate id ranges (``/etc/subuid``, ``/etc/subgid``): a strict parser, merged ranges, and a reader
that reads a file again only when it changed.

A line is ``NAME_OR_UID:START:COUNT``: an owner (non-empty, printable UTF-8, no white space), then START and COUNT
as plain decimal numbers (no sign, no leading zero, no ``0x``: shadow reads them with ``strtoul(…, 0)``, which takes
``0100`` for octal, so a form the two could read differently is refused), with ``START + COUNT`` at most 2**32.
Blank lines and lines starting with ``#`` are skipped. Any other line is a problem, reported with its number and
what is wrong; the caller decides what a problem means (the uid allocator claims nothing while there is one: it
cannot tell which ids such a line was meant to give away).
"""

from __future__ import annotations

import bisect
import os
import re
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

MAX_SUBID_FILE_BYTES = 1024 * 1024  # a host with a million bytes of sub-id lines is not one we understand
ID_LIMIT = 2**32  # ids are 32 bits; START + COUNT may reach it, not pass it
_DECIMAL = re.compile(rb"(?:0|[1-9][0-9]{0,9})\Z")
_OWNER_TEXT = 64  # characters of a bad line's text quoted in its problem


@dataclass(frozen=True)
class SubidRange:
    """Ids ``start`` … ``start + count - 1`` given to ``owner`` on line ``line``."""

    owner: str
    start: int
    count: int
    line: int

    @property
    def end(self) -> int:
        return self.start + self.count


@dataclass(frozen=True)
class SubidProblem:
    """A line that is not ``NAME_OR_UID:START:COUNT``: its number, its text (escaped, shortened) and why."""

    line: int
    text: str
    reason: str


@dataclass(frozen=True)
class SubidFile:
    """What one file lists: its ranges and its problems."""

    path: str
    ranges: tuple[SubidRange, ...]
    problems: tuple[SubidProblem, ...]

    def describe_problems(self) -> str:
        return "; ".join(f"{self.path} line {p.line} ({p.text}): {p.reason}" for p in self.problems)


class SubidFileError(OSError):
    """The file cannot be read as a whole (too large, not a regular file, unreadable); the message says which."""


def _escaped(raw: bytes) -> str:
    text = raw[:_OWNER_TEXT].decode("utf-8", "backslashreplace")
    text = "".join(ch if ch.isprintable() else f"\\x{ord(ch):02x}" for ch in text)
    return text + ("…" if len(raw) > _OWNER_TEXT else "")


def _number(field: bytes, name: str) -> int:
    if not _DECIMAL.match(field):
        raise ValueError(f"{name} {_escaped(field)!r} is not a plain decimal number")
    return int(field)


def parse_line(raw: bytes, number: int) -> SubidRange:
    """One range from one line (without its newline); raises ``ValueError`` saying what is wrong."""
    fields = raw.split(b":")
    if len(fields) != 3:
        raise ValueError(f"{len(fields)} fields instead of 3 (NAME_OR_UID:START:COUNT)")
    owner_bytes, start_field, count_field = fields
    try:
        owner = owner_bytes.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError("the owner is not UTF-8") from None
    if not owner or not owner.isprintable() or any(ch.isspace() for ch in owner):
        raise ValueError("the owner must be a name or uid without white space or control characters")
    start, count = _number(start_field, "start"), _number(count_field, "count")
    if start + count > ID_LIMIT or start >= ID_LIMIT:
        raise ValueError(f"the range {start}+{count} passes the last id ({ID_LIMIT - 1})")
    return SubidRange(owner, start, count, number)


def parse_subids(data: bytes, *, path: str = "/etc/subuid") -> SubidFile:
    """Every range and every problem of a sub-id file's bytes (see the module docstring)."""
    ranges: list[SubidRange] = []
    problems: list[SubidProblem] = []
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()  # the final newline ends the last line; it does not start another
    for number, raw in enumerate(lines, start=1):
        if not raw.strip(b" \t") or raw.startswith(b"#"):
            continue
        try:
            ranges.append(parse_line(raw, number))
        except ValueError as exc:
            problems.append(SubidProblem(number, _escaped(raw), str(exc)))
    return SubidFile(path, tuple(ranges), tuple(problems))


class IdRanges:
    """Ranges merged into sorted, disjoint half-open intervals, for membership and for skipping past them."""

    def __init__(self, ranges: Iterable[SubidRange] = ()) -> None:
        merged: list[list[int]] = []
        for start, end in sorted((r.start, r.end) for r in ranges if r.count):
            if merged and start <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], end)
            else:
                merged.append([start, end])
        self._starts = [start for start, _ in merged]
        self._ends = [end for _, end in merged]

    def _containing(self, ident: int) -> int | None:
        index = bisect.bisect_right(self._starts, ident) - 1
        return index if index >= 0 and ident < self._ends[index] else None

    def __contains__(self, ident: object) -> bool:
        return isinstance(ident, int) and self._containing(ident) is not None

    def end_of(self, ident: int) -> int:
        """The first id at or after ``ident`` that no range holds."""
        index = self._containing(ident)
        return ident if index is None else self._ends[index]


class SubidReader:
    """One sub-id file, read again whenever its inode, size, mtime or ctime changed (a missing file lists nothing)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._seen: tuple[int, ...] | None = None
        self._parsed = SubidFile(str(self.path), (), ())

    def read(self) -> SubidFile:
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOCTTY | os.O_NONBLOCK)
        except FileNotFoundError:
            self._seen, self._parsed = None, SubidFile(str(self.path), (), ())
            return self._parsed
        except OSError as exc:
            raise SubidFileError(f"{self.path} cannot be read: {exc.strerror}") from None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise SubidFileError(f"{self.path} is not a regular file")
            seen = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
            if seen == self._seen:
                return self._parsed
            data = os.read(fd, MAX_SUBID_FILE_BYTES + 1)
            while len(data) <= MAX_SUBID_FILE_BYTES and (more := os.read(fd, MAX_SUBID_FILE_BYTES + 1 - len(data))):
                data += more
        except OSError as exc:
            if isinstance(exc, SubidFileError):
                raise
            raise SubidFileError(f"{self.path} cannot be read: {exc.strerror}") from None
        finally:
            os.close(fd)
        if len(data) > MAX_SUBID_FILE_BYTES:
            raise SubidFileError(f"{self.path} is larger than {MAX_SUBID_FILE_BYTES} bytes")
        self._seen, self._parsed = seen, parse_subids(data, path=str(self.path))
        return self._parsed
