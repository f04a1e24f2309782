"""A safe reader for the canonical zip layout of ``.tkb`` bundles: every limit enforced here, nothing trusted.

The reader parses the end record and the central directory itself (it never asks
``zipfile`` to), checks every entry before reading a byte of it, and inflates with a
streaming cap, so a hostile file costs at most the limits below.  Refused, each with
a ``ZipRefused`` naming the entry and the limit: path traversal (``..``, absolute
names, backslashes, NUL, drive letters), symlinks and other non-regular entries
(external attributes), directories, duplicate names, encryption, compression other
than stored or deflate, entries over 64 MiB, more than 10,000 entries, more than
512 MiB in all, ratio bombs, and a central directory that disagrees with the local
headers.

A bundle is also *canonical*: the layout ``bundle.write_bundle`` produces and nothing
else (no comments, extra fields, data descriptors, gaps or trailing bytes; fixed
timestamps, versions and attributes).  So a flipped byte anywhere in the zip either
changes an entry's content (caught by its CRC and the manifest) or is refused here.
"""

from __future__ import annotations

import os
import re
import stat
import struct
import zlib
from dataclasses import dataclass
from typing import BinaryIO

MiB = 1 << 20

# The canonical field values (``bundle.py`` writes exactly these).
VERSION_NEEDED = 20
VERSION_MADE_BY = (3 << 8) | 20  # Unix, zip 2.0
DOS_TIME = 0  # 00:00:00
DOS_DATE = (0 << 9) | (1 << 5) | 1  # 1980-01-01
EXTERNAL_ATTR = (stat.S_IFREG | 0o644) << 16
STORED, DEFLATED = 0, 8

LOCAL_SIGNATURE = 0x04034B50
CENTRAL_SIGNATURE = 0x02014B50
END_SIGNATURE = 0x06054B50
LOCAL_HEADER = struct.Struct("<IHHHHHIIIHH")  # 30 bytes
CENTRAL_HEADER = struct.Struct("<IHHHHHHIIIHHHHHII")  # 46 bytes
END_RECORD = struct.Struct("<IHHHHIIH")  # 22 bytes

FLAG_ENCRYPTED = 0x0001
FLAG_STRONG_ENCRYPTION = 0x0040
FLAG_MASKED_DIRECTORY = 0x2000
MAX_NAME_BYTES = 255
_NAME_PART = re.compile(r"[A-Za-z0-9._-]+", re.ASCII)
_READ_CHUNK = 64 * 1024


class ZipRefused(ValueError):
    """The file is not a zip this reader accepts; the message names the entry and the limit."""


@dataclass(frozen=True)
class ZipLimits:
    max_entries: int = 10_000
    max_entry_bytes: int = 64 * MiB
    max_total_bytes: int = 512 * MiB
    max_ratio: int = 100  # uncompressed / compressed, for entries larger than ratio_floor
    ratio_floor: int = 1 * MiB


DEFAULT_LIMITS = ZipLimits()


@dataclass(frozen=True)
class _Entry:
    name: str
    raw_name: bytes
    version_made_by: int
    version_needed: int
    flags: int
    method: int
    time: int
    date: int
    crc: int
    compressed_size: int
    size: int
    extra_len: int
    comment_len: int
    disk: int
    internal_attr: int
    external_attr: int
    offset: int


def read_zip(path: str | os.PathLike[str], limits: ZipLimits = DEFAULT_LIMITS) -> dict[str, bytes]:
    """All entries of a canonical zip as ``{name: bytes}`` in directory order, or ``ZipRefused``."""
    try:
        with open(path, "rb") as handle:
            return _read(handle, limits)
    except OSError as exc:
        raise ZipRefused(f"cannot read {os.fspath(path)!r}: {exc.strerror or exc}") from None


def _read(handle: BinaryIO, limits: ZipLimits) -> dict[str, bytes]:
    file_size = os.fstat(handle.fileno()).st_size
    entries, directory_offset = _read_directory(handle, file_size, limits)
    contents: dict[str, bytes] = {}
    total = 0
    expected_offset = 0
    for entry in entries:
        if entry.offset != expected_offset:
            raise ZipRefused(f"entry {entry.name!r}: starts at byte {entry.offset}, not {expected_offset} (gap or overlap)")
        data = _read_entry(handle, entry, limits)
        total += len(data)
        if total > limits.max_total_bytes:
            raise ZipRefused(f"entry {entry.name!r}: the entries exceed the {_size(limits.max_total_bytes)} total limit")
        contents[entry.name] = data
        expected_offset = entry.offset + LOCAL_HEADER.size + len(entry.raw_name) + entry.compressed_size
    if expected_offset != directory_offset:
        raise ZipRefused(f"{directory_offset - expected_offset} unexplained bytes before the central directory")
    return contents


def _read_directory(handle: BinaryIO, file_size: int, limits: ZipLimits) -> tuple[list[_Entry], int]:
    if file_size < END_RECORD.size:
        raise ZipRefused("not a zip file: too short for an end-of-central-directory record")
    max_file = limits.max_total_bytes + limits.max_entries * (2 * (CENTRAL_HEADER.size + MAX_NAME_BYTES)) + MiB
    if file_size > max_file:
        raise ZipRefused(f"the file is {_size(file_size)}, over the {_size(max_file)} limit")
    end_offset = file_size - END_RECORD.size
    handle.seek(end_offset)
    (signature, disk, directory_disk, disk_entries, count, directory_size, directory_offset,
     comment_len) = END_RECORD.unpack(handle.read(END_RECORD.size))
    if signature != END_SIGNATURE:
        raise ZipRefused("not a zip file: no end-of-central-directory record at the end (comments are not allowed)")
    if disk or directory_disk or disk_entries != count:
        raise ZipRefused("multi-disk zip files are not supported")
    if comment_len:
        raise ZipRefused("the zip has an archive comment; a bundle has none")
    if directory_offset == 0xFFFFFFFF or count == 0xFFFF:
        raise ZipRefused("zip64 archives are not supported")
    if count > limits.max_entries:
        raise ZipRefused(f"the zip has {count} entries, over the limit of {limits.max_entries}")
    if directory_offset + directory_size != end_offset:
        raise ZipRefused("the central directory does not end where the end record starts")
    handle.seek(directory_offset)
    directory = handle.read(directory_size)
    entries = _parse_directory(directory, count, limits)
    return entries, directory_offset


def _parse_directory(directory: bytes, count: int, limits: ZipLimits) -> list[_Entry]:
    entries: list[_Entry] = []
    seen: set[str] = set()
    declared_total = 0
    position = 0
    for index in range(count):
        if position + CENTRAL_HEADER.size > len(directory):
            raise ZipRefused(f"central directory entry {index} is truncated")
        fields = CENTRAL_HEADER.unpack_from(directory, position)
        name_len, extra_len, comment_len = fields[10], fields[11], fields[12]
        start = position + CENTRAL_HEADER.size
        raw_name = directory[start:start + name_len]
        position = start + name_len + extra_len + comment_len
        if fields[0] != CENTRAL_SIGNATURE or position > len(directory):
            raise ZipRefused(f"central directory entry {index} is malformed")
        name = check_name(raw_name, fields[3])
        entry = _Entry(name, raw_name, fields[1], fields[2], fields[3], fields[4], fields[5], fields[6], fields[7],
                       fields[8], fields[9], extra_len, comment_len, fields[13], fields[14], fields[15], fields[16])
        folded = name.casefold()
        if folded in seen:
            raise ZipRefused(f"entry {name!r}: duplicate name")
        seen.add(folded)
        _check_entry_kind(entry)
        _check_entry_limits(entry, limits)
        declared_total += entry.size
        if declared_total > limits.max_total_bytes:
            raise ZipRefused(f"entry {name!r}: declared sizes exceed the {_size(limits.max_total_bytes)} total limit")
        _check_canonical(entry)
        entries.append(entry)
    if position != len(directory):
        raise ZipRefused("the central directory has bytes after its last entry")
    return entries


def check_name(raw_name: bytes, flags: int = 0) -> str:
    """The entry name if it is a safe relative path of ``[A-Za-z0-9._-]`` parts, else ZipRefused."""
    shown = raw_name[:80].decode("ascii", "backslashreplace")
    if not raw_name:
        raise ZipRefused("an entry has an empty name")
    if len(raw_name) > MAX_NAME_BYTES:
        raise ZipRefused(f"entry {shown!r}: name longer than {MAX_NAME_BYTES} bytes")
    if b"\x00" in raw_name:
        raise ZipRefused(f"entry {shown!r}: NUL byte in the name")
    if b"\\" in raw_name:
        raise ZipRefused(f"entry {shown!r}: backslash in the name (path traversal)")
    if raw_name.startswith(b"/") or re.match(rb"[A-Za-z]:", raw_name):
        raise ZipRefused(f"entry {shown!r}: absolute path")
    if raw_name.endswith(b"/"):
        raise ZipRefused(f"entry {shown!r}: directory entries are not allowed")
    if not raw_name.isascii():
        raise ZipRefused(f"entry {shown!r}: name is not ASCII")
    name = raw_name.decode("ascii")
    for part in name.split("/"):
        if part in ("..", "."):
            raise ZipRefused(f"entry {shown!r}: {part!r} component (path traversal)")
        if not _NAME_PART.fullmatch(part):
            raise ZipRefused(f"entry {shown!r}: name part {part!r} is empty or has characters other than A-Z a-z 0-9 . _ -")
    return name


def _check_entry_kind(entry: _Entry) -> None:
    mode = entry.external_attr >> 16
    kind = stat.S_IFMT(mode)
    if kind == stat.S_IFLNK:
        raise ZipRefused(f"entry {entry.name!r}: symlink (external attributes {entry.external_attr:#010x})")
    if kind == stat.S_IFDIR or entry.external_attr & 0x10:
        raise ZipRefused(f"entry {entry.name!r}: directory entries are not allowed")
    if kind not in (0, stat.S_IFREG):
        raise ZipRefused(f"entry {entry.name!r}: not a regular file (mode {mode:#o})")
    if entry.flags & (FLAG_ENCRYPTED | FLAG_STRONG_ENCRYPTION | FLAG_MASKED_DIRECTORY):
        raise ZipRefused(f"entry {entry.name!r}: encrypted entries are not allowed")
    if entry.method not in (STORED, DEFLATED):
        raise ZipRefused(f"entry {entry.name!r}: compression method {entry.method} (only stored and deflate)")


def _check_entry_limits(entry: _Entry, limits: ZipLimits) -> None:
    if entry.size > limits.max_entry_bytes:
        raise ZipRefused(f"entry {entry.name!r}: declares {_size(entry.size)}, over the {_size(limits.max_entry_bytes)} entry limit")
    if entry.compressed_size > limits.max_entry_bytes:
        raise ZipRefused(f"entry {entry.name!r}: {_size(entry.compressed_size)} compressed, over the {_size(limits.max_entry_bytes)} entry limit")
    if entry.method == STORED and entry.compressed_size != entry.size:
        raise ZipRefused(f"entry {entry.name!r}: stored entry whose sizes differ")
    if entry.size > limits.ratio_floor and entry.size > limits.max_ratio * max(entry.compressed_size, 1):
        raise ZipRefused(
            f"entry {entry.name!r}: compression ratio {entry.size // max(entry.compressed_size, 1)}:1 "
            f"is over the {limits.max_ratio}:1 limit (zip bomb)"
        )


def _check_canonical(entry: _Entry) -> None:
    wanted = {
        "version made by": (entry.version_made_by, VERSION_MADE_BY),
        "version needed": (entry.version_needed, VERSION_NEEDED),
        "flags": (entry.flags, 0),
        "time": (entry.time, DOS_TIME),
        "date": (entry.date, DOS_DATE),
        "extra field length": (entry.extra_len, 0),
        "comment length": (entry.comment_len, 0),
        "disk": (entry.disk, 0),
        "internal attributes": (entry.internal_attr, 0),
        "external attributes": (entry.external_attr, EXTERNAL_ATTR),
    }
    for field, (actual, expected) in wanted.items():
        if actual != expected:
            raise ZipRefused(f"entry {entry.name!r}: {field} is {actual:#x}, not the canonical {expected:#x}")


def _read_entry(handle: BinaryIO, entry: _Entry, limits: ZipLimits, *, copy: bool = True) -> bytes:
    handle.seek(entry.offset)
    header = handle.read(LOCAL_HEADER.size + len(entry.raw_name))
    if len(header) != LOCAL_HEADER.size + len(entry.raw_name):
        raise ZipRefused(f"entry {entry.name!r}: local header is truncated")
    (signature, version, flags, method, time, date, crc, compressed_size, size, name_len,
     extra_len) = LOCAL_HEADER.unpack_from(header)
    local = {
        "signature": (signature, LOCAL_SIGNATURE),
        "version needed": (version, entry.version_needed),
        "flags": (flags, entry.flags),
        "compression method": (method, entry.method),
        "time": (time, entry.time),
        "date": (date, entry.date),
        "crc-32": (crc, entry.crc),
        "compressed size": (compressed_size, entry.compressed_size),
        "size": (size, entry.size),
        "name length": (name_len, len(entry.raw_name)),
        "extra field length": (extra_len, 0),
    }
    for field, (actual, expected) in local.items():
        if actual != expected:
            raise ZipRefused(f"entry {entry.name!r}: the central directory disagrees with the local header ({field})")
    if header[LOCAL_HEADER.size:] != entry.raw_name:
        raise ZipRefused(f"entry {entry.name!r}: the central directory disagrees with the local header (name)")
    data = _inflate(handle, entry, limits, copy=copy) if entry.method == DEFLATED else _read_exact(handle, entry)
    if zlib.crc32(data) != entry.crc:
        raise ZipRefused(f"entry {entry.name!r}: CRC-32 does not match its content")
    return data


def _read_exact(handle: BinaryIO, entry: _Entry) -> bytes:
    data = handle.read(entry.compressed_size)
    if len(data) != entry.compressed_size:
        raise ZipRefused(f"entry {entry.name!r}: data is truncated")
    return data


def _inflate(handle: BinaryIO, entry: _Entry, limits: ZipLimits, *, copy: bool = True) -> bytes:
    """Inflate with a cap of the declared size (itself capped): output never exceeds it by more than one byte.

    The last compressed byte is fed separately so that its padding bits can be checked.  ``copy=False`` returns
    the bytearray inflated into (no second copy of a big entry).
    """
    cap = min(entry.size, limits.max_entry_bytes)
    inflater = zlib.decompressobj(-15)
    output = bytearray()
    remaining = entry.compressed_size - 1  # the last byte is fed after the loop
    if remaining < 0:
        raise ZipRefused(f"entry {entry.name!r}: empty deflate stream")
    try:
        while remaining and not inflater.eof:
            chunk = handle.read(min(_READ_CHUNK, remaining))
            if not chunk:
                raise ZipRefused(f"entry {entry.name!r}: data is truncated")
            remaining -= len(chunk)
            _feed(inflater, chunk, output, cap, entry, limits)
        last = handle.read(1)
        if inflater.eof or remaining or len(last) != 1:
            raise ZipRefused(f"entry {entry.name!r}: deflate stream does not end where its compressed size says")
        before_last = inflater.copy()
        produced = len(output)
        _feed(inflater, last, output, cap, entry, limits)
        if not inflater.eof:
            raise ZipRefused(f"entry {entry.name!r}: deflate stream does not end where its compressed size says")
        _check_padding(before_last, last[0], bytes(output[produced:]), cap + 1 - produced, entry)
    except zlib.error as exc:
        raise ZipRefused(f"entry {entry.name!r}: corrupt deflate data ({exc})") from None
    if len(output) != entry.size:
        raise ZipRefused(f"entry {entry.name!r}: inflates to {len(output)} bytes, not the declared {entry.size}")
    return bytes(output) if copy else output  # type: ignore[return-value]


def _feed(inflater: zlib._Decompress, chunk: bytes, output: bytearray, cap: int, entry: _Entry,
          limits: ZipLimits) -> None:
    pending = chunk
    while pending and not inflater.eof:
        output += inflater.decompress(pending, cap + 1 - len(output))
        if len(output) > cap:
            raise ZipRefused(
                f"entry {entry.name!r}: inflates beyond its declared {_size(entry.size)} "
                f"(entry limit {_size(limits.max_entry_bytes)}; zip bomb)"
            )
        pending = inflater.unconsumed_tail
    if inflater.unused_data:
        raise ZipRefused(f"entry {entry.name!r}: bytes after the end of its deflate stream")


def _check_padding(before_last: zlib._Decompress, last: int, last_output: bytes, room: int, entry: _Entry) -> None:
    """Refuse set padding bits after the final block: they are ignored, so flipping one would go unnoticed.

    zlib writes them as zero.  If clearing some high bits of the last byte inflates to the
    same output and end, those bits were padding; any of them set means the stream was altered.
    """
    for kept in range(7, -1, -1):
        candidate = last & ((1 << kept) - 1)
        if candidate == last:
            continue
        trial = before_last.copy()
        try:
            same = trial.decompress(bytes([candidate]), room) == last_output and trial.eof and not trial.unused_data
        except zlib.error:
            same = False
        if same:
            raise ZipRefused(f"entry {entry.name!r}: deflate padding bits are set (the stream was altered)")


def _size(count: int) -> str:
    if count >= MiB and count % MiB == 0:
        return f"{count // MiB} MiB"
    return f"{count} bytes"
