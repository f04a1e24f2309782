"""A canonical zip written entry by entry to a seekable file, each entry streamed: memory does not grow with it.

The layout is the one ``zipread`` accepts (fixed versions, timestamps and attributes; no extra fields, comments,
data descriptors or zip64): a local header is written with zero CRC and sizes, the entry's bytes follow (raw
deflate at ``COMPRESSION_LEVEL`` or stored, as the caller says), and the header is patched in place once they are
known.  The central directory and end record follow the last entry.
"""

from __future__ import annotations

import hashlib
import zlib
from dataclasses import dataclass
from typing import BinaryIO

from .zipread import (
    CENTRAL_HEADER,
    CENTRAL_SIGNATURE,
    DEFLATED,
    DOS_DATE,
    DOS_TIME,
    END_RECORD,
    END_SIGNATURE,
    EXTERNAL_ATTR,
    LOCAL_HEADER,
    LOCAL_SIGNATURE,
    STORED,
    VERSION_MADE_BY,
    VERSION_NEEDED,
    check_name,
)

COMPRESSION_LEVEL = 6  # level 9 takes twice the time for about 1% on record lines
ZIP32_LIMIT = 0xFFFFFFFF  # offsets and sizes without zip64
MAX_ZIP_ENTRIES = 0xFFFF - 1


@dataclass(frozen=True)
class WrittenEntry:
    name: str
    method: int
    crc: int
    compressed_size: int
    size: int
    offset: int
    sha256: str  # "sha256:<hex>" of the uncompressed bytes


class ZipStreamWriter:
    """Writes a canonical zip to ``handle`` (seekable, empty, positioned at 0): ``begin``, ``write``… ``end`` per
    entry, then ``finish``."""

    def __init__(self, handle: BinaryIO, level: int = COMPRESSION_LEVEL) -> None:
        self._handle = handle
        self._level = level
        self._offset = 0
        self.entries: list[WrittenEntry] = []
        self._current: tuple[str, bytes, int, int] | None = None  # name, raw name, method, offset
        self._compressor: zlib._Compress | None = None
        self._crc = 0
        self._size = 0
        self._written = 0
        self._digest = hashlib.sha256()

    def begin(self, name: str, method: int = DEFLATED) -> None:
        if self._current is not None:
            raise ValueError("end() the current entry first")
        if len(self.entries) >= MAX_ZIP_ENTRIES:
            raise ValueError("the bundle has too many entries for a zip without zip64")
        raw_name = check_name(name.encode("ascii")).encode("ascii")
        self._current = (name, raw_name, method, self._offset)
        self._compressor = zlib.compressobj(self._level, zlib.DEFLATED, -15) if method == DEFLATED else None
        self._crc, self._size, self._written, self._digest = 0, 0, 0, hashlib.sha256()
        self._put(LOCAL_HEADER.pack(LOCAL_SIGNATURE, VERSION_NEEDED, 0, method, DOS_TIME, DOS_DATE, 0, 0, 0,
                                    len(raw_name), 0) + raw_name)

    def write(self, data: bytes) -> None:
        if self._current is None:
            raise ValueError("begin() an entry first")
        self._crc = zlib.crc32(data, self._crc)
        self._size += len(data)
        self._digest.update(data)
        out = self._compressor.compress(data) if self._compressor is not None else data
        self._written += len(out)
        self._put(out)

    def end(self) -> WrittenEntry:
        if self._current is None:
            raise ValueError("no entry is open")
        if self._compressor is not None:
            tail = self._compressor.flush()
            self._written += len(tail)
            self._put(tail)
        name, raw_name, method, offset = self._current
        if self._size > ZIP32_LIMIT or self._written > ZIP32_LIMIT:
            raise ValueError(f"entry {name} is too large for a zip without zip64")
        self._handle.seek(offset)
        self._handle.write(LOCAL_HEADER.pack(LOCAL_SIGNATURE, VERSION_NEEDED, 0, method, DOS_TIME, DOS_DATE,
                                             self._crc, self._written, self._size, len(raw_name), 0))
        self._handle.seek(self._offset)
        entry = WrittenEntry(name, method, self._crc, self._written, self._size, offset,
                             "sha256:" + self._digest.hexdigest())
        self.entries.append(entry)
        self._current, self._compressor = None, None
        return entry

    def add(self, name: str, content: bytes, method: int = DEFLATED) -> WrittenEntry:
        self.begin(name, method)
        self.write(content)
        return self.end()

    def finish(self) -> int:
        """Write the central directory and the end record; returns the zip's size."""
        if self._current is not None:
            raise ValueError("end() the current entry first")
        directory = bytearray()
        for entry in self.entries:
            raw_name = entry.name.encode("ascii")
            directory += CENTRAL_HEADER.pack(CENTRAL_SIGNATURE, VERSION_MADE_BY, VERSION_NEEDED, 0, entry.method,
                                             DOS_TIME, DOS_DATE, entry.crc, entry.compressed_size, entry.size,
                                             len(raw_name), 0, 0, 0, 0, EXTERNAL_ATTR, entry.offset)
            directory += raw_name
        directory_offset = self._offset
        if directory_offset + len(directory) >= ZIP32_LIMIT:
            raise ValueError("the bundle is too large for a zip without zip64 (4 GiB)")
        self._put(bytes(directory))
        self._put(END_RECORD.pack(END_SIGNATURE, 0, 0, len(self.entries), len(self.entries), len(directory),
                                  directory_offset, 0))
        return self._offset

    def _put(self, data: bytes) -> None:
        if data:
            self._handle.write(data)
            self._offset += len(data)
            if self._offset >= ZIP32_LIMIT:
                raise ValueError("the bundle is too large for a zip without zip64 (4 GiB)")


__all__ = ["DEFLATED", "STORED", "WrittenEntry", "ZipStreamWriter"]
