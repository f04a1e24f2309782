"""The zip and entry layout of a ``tkbox.bundle.v2`` bundle, checked from the central directory before any record
is read, and its entries read one at a time (each at most ``STREAM_LIMITS.max_entry_bytes``).

Strict, as for v1: the names, their order, each entry's compression method and size rules are exactly those of
``docs/format.md``; anything else makes the bundle unusable, with the reason.  The manifest check (every other
entry listed with its SHA-256) is decided once every entry has been read and hashed (``manifest_result``).
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO

from .. import strictjson
from .bundle import CHECKPOINT, KEY_RECORDS, MANIFEST, split_policy_name
from .bundle_stream import (
    BUNDLE_FORMAT_V2,
    NODE_ENTRY,
    NODE_ENTRY_BYTES,
    NODE_SIZE,
    RUN_ENTRY,
    RUN_ENTRY_BYTES,
)
from .verify_checks import MAX_MANIFEST_BYTES, manifest_schema_error
from .verify_records import canonical_json
from .verify_report import CheckResult, failed, passed
from .zipread import (
    DEFLATED,
    LOCAL_HEADER,
    STORED,
    ZipLimits,
    ZipRefused,
    _Entry,
    _read_directory,
    _read_entry,
)

MiB = 1 << 20
GiB = 1 << 30
STREAM_LIMITS = ZipLimits(max_entries=10_000, max_entry_bytes=RUN_ENTRY_BYTES, max_total_bytes=16 * GiB)
MAX_FILE_BYTES = 4 * GiB  # offsets are 32 bits without zip64
MAX_SMALL_ENTRY_BYTES = 1 * MiB  # keys.jsonl, checkpoint.note, manifest.json


class LayoutError(ValueError):
    """The bundle's layout is not v2's; the message names the entry and the rule."""


class ZipIndex:
    """The checked central directory of a zip, and its entries read on demand (close it)."""

    def __init__(self, path: str | os.PathLike[str], limits: ZipLimits = STREAM_LIMITS) -> None:
        self.limits = limits
        try:
            self._handle: BinaryIO = open(path, "rb")  # noqa: SIM115 (closed by close)
        except OSError as exc:
            raise ZipRefused(f"cannot read {os.fspath(path)!r}: {exc.strerror or exc}") from None
        try:
            file_size = os.fstat(self._handle.fileno()).st_size
            if file_size >= MAX_FILE_BYTES:
                raise ZipRefused(f"the file is {file_size} bytes, over the limit of a zip without zip64 (4 GiB)")
            entries, directory_offset = _read_directory(self._handle, file_size, limits)
            expected = 0
            for entry in entries:  # the entries follow each other with no gap, as the directory says
                if entry.offset != expected:
                    raise ZipRefused(f"entry {entry.name!r}: starts at byte {entry.offset}, not {expected} "
                                     "(gap or overlap)")
                expected = entry.offset + LOCAL_HEADER.size + len(entry.raw_name) + entry.compressed_size
            if expected != directory_offset:
                raise ZipRefused(f"{directory_offset - expected} unexplained bytes before the central directory")
        except BaseException:
            self._handle.close()
            raise
        self.entries: dict[str, _Entry] = {entry.name: entry for entry in entries}

    def read(self, name: str, *, copy: bool = True) -> bytes:
        """The entry's bytes: local header, size, CRC and deflate padding checked (``ZipRefused`` if not).

        ``copy=False`` may answer the bytearray it inflated into, saving a copy of a big entry."""
        return _read_entry(self._handle, self.entries[name], self.limits, copy=copy)

    def size(self, name: str) -> int:
        return self.entries[name].size

    def close(self) -> None:
        self._handle.close()


def peek_format(path: str | os.PathLike[str]) -> str | None:
    """The manifest's ``format`` if the file is a zip with a readable ``manifest.json``, else None."""
    try:
        index = ZipIndex(path)
    except ZipRefused:
        return None
    try:
        if MANIFEST not in index.entries or index.size(MANIFEST) > MAX_SMALL_ENTRY_BYTES:
            return None
        manifest = strictjson.loads_object(index.read(MANIFEST), max_bytes=MAX_MANIFEST_BYTES, max_depth=3)
        return manifest.get("format") if isinstance(manifest.get("format"), str) else None
    except (ZipRefused, strictjson.StrictJSONError):
        return None
    finally:
        index.close()


@dataclass(frozen=True)
class Layout:
    run_entries: list[str]
    node_entries: list[str]
    policy_entries: list[str]
    node_count: int


def check_layout(index: ZipIndex) -> tuple[CheckResult, Layout | None, dict[str, Any] | None]:
    """The v2 names in order, methods and sizes, and a strict manifest of format v2 (else a failed ``bundle``)."""
    try:
        layout = _layout(index)
    except LayoutError as exc:
        return failed("bundle", str(exc)), None, None
    try:
        manifest = strictjson.loads_object(index.read(MANIFEST), max_bytes=MAX_MANIFEST_BYTES, max_depth=3)
    except strictjson.StrictJSONError as exc:
        return failed("bundle", f"manifest.json is not strict JSON: {exc}"), None, None
    if manifest.get("format") != BUNDLE_FORMAT_V2:
        shown = str(manifest.get("format"))[:40]
        return failed("bundle", f"format {shown!r} is not {BUNDLE_FORMAT_V2}"), None, None
    problem = manifest_schema_error(manifest)
    if problem:
        return failed("bundle", f"manifest.json: {problem}"), None, None
    total = sum(entry.size for entry in index.entries.values())
    detail = (f"{len(index.entries)} entries ({len(layout.run_entries)} of run records, {len(layout.node_entries)} "
              f"of tree nodes), {total} bytes, format {BUNDLE_FORMAT_V2}, run {manifest['run_id']}")
    return passed("bundle", detail), layout, manifest


def _layout(index: ZipIndex) -> Layout:
    names = list(index.entries)
    position = 0

    def numbered(pattern: re.Pattern[str]) -> list[str]:
        nonlocal position
        found = []
        while position < len(names) and (match := pattern.fullmatch(names[position])):
            if int(match.group(1)) != len(found):
                raise LayoutError(f"entry {names[position]!r} is out of sequence (expected number {len(found):06d})")
            found.append(names[position])
            position += 1
        return found

    def single(name: str) -> None:
        nonlocal position
        if position >= len(names) or names[position] != name:
            shown = names[position] if position < len(names) else "the end of the zip"
            if name not in index.entries:
                raise LayoutError(f"required entry {name} is missing (not a tkbox bundle?)")
            raise LayoutError(f"entry {shown!r} is where {name} belongs (entries out of order, or an unexpected one)")
        position += 1

    runs = numbered(RUN_ENTRY)
    if not runs:
        if any(RUN_ENTRY.fullmatch(name) for name in names):
            raise LayoutError(f"entry {names[0]!r} is where records/run-000000.jsonl belongs (entries out of order)")
        raise LayoutError("the bundle has no records/run-000000.jsonl (not a tkbox.bundle.v2 bundle?)")
    single(KEY_RECORDS)
    nodes = numbered(NODE_ENTRY)
    single(CHECKPOINT)
    policies = []
    while position < len(names) and split_policy_name(names[position]) is not None:
        if policies and names[position] <= policies[-1]:
            raise LayoutError(f"entry {names[position]!r}: policy snapshots are not in sorted order")
        policies.append(names[position])
        position += 1
    single(MANIFEST)
    if position != len(names):
        raise LayoutError(f"unexpected entry {names[position]!r} after manifest.json")
    for name in names:
        entry = index.entries[name]
        method = STORED if name in nodes else DEFLATED
        if entry.method != method:
            raise LayoutError(f"entry {name!r}: compression method {entry.method}, not {method} (v2 stores tree "
                              "nodes and deflates everything else)")
    for name in (KEY_RECORDS, CHECKPOINT, MANIFEST):
        if index.size(name) > MAX_SMALL_ENTRY_BYTES:
            raise LayoutError(f"entry {name!r} is over {MAX_SMALL_ENTRY_BYTES} bytes")
    for name in runs:
        if not 0 < index.size(name) <= RUN_ENTRY_BYTES:
            raise LayoutError(f"entry {name!r}: {index.size(name)} bytes, not 1 to {RUN_ENTRY_BYTES}")
    for number, name in enumerate(nodes):
        size = index.size(name)
        last = number == len(nodes) - 1
        if size % NODE_SIZE or not size or (size != NODE_ENTRY_BYTES and not last) or size > NODE_ENTRY_BYTES:
            raise LayoutError(f"entry {name!r}: {size} bytes; a node entry holds whole {NODE_SIZE}-byte nodes, "
                              f"exactly {NODE_ENTRY_BYTES} bytes unless it is the last")
    node_count = sum(index.size(name) for name in nodes) // NODE_SIZE
    return Layout(runs, nodes, policies, node_count)


def entry_digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def manifest_result(manifest: dict[str, Any], names: list[str], digests: dict[str, str],
                    manifest_bytes: bytes) -> CheckResult:
    """The manifest lists exactly the other entries, each with its SHA-256 (``digests``), in canonical form."""
    listed: dict[str, str] = manifest["files"]
    present = [name for name in names if name != MANIFEST]
    for name in present:
        if name not in listed:
            return failed("manifest", f"{name} is in the bundle but not in the manifest")
    for name in listed:
        if name not in names or name == MANIFEST:
            return failed("manifest", f"the manifest lists {name!r}, which is not another entry of the bundle")
    for name in present:
        if digests.get(name) != listed[name]:
            return failed("manifest", f"the SHA-256 of {name} does not match the manifest")
    if canonical_json(manifest) != manifest_bytes:
        return failed("manifest", "manifest.json is not in canonical form (RFC 8785)")
    return passed("manifest", f"lists exactly the {len(present)} other entries, each with a matching SHA-256")


def run_record_lines(path: str | os.PathLike[str]) -> Iterator[bytes]:
    """The run's record lines of a v2 bundle, one entry in memory at a time (the bundle's layout checked first)."""
    index = ZipIndex(path)
    try:
        _, layout, _ = check_layout(index)
        if layout is None:
            raise ZipRefused("not a tkbox.bundle.v2 bundle")
        for name in layout.run_entries:
            yield from index.read(name).splitlines()
    finally:
        index.close()
