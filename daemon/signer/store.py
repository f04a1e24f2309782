"""The signer's append-only store: records in ``log.jsonl``, made durable by group commit.

A record is acknowledged only after the batch it is in has been written and
fsynced.  On start the log is read back: the chains must link, a torn or corrupt
tail is moved aside into ``torn-*.bin`` and reported (never dropped silently), and a
bad record before the tail stops the signer.  Once a write fails the store is
*failed*: every later append raises ``StoreUnavailable`` until the signer restarts.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import strictjson
from ..evidence import merkle, note
from ..evidence.chain import LogWriter
from ..evidence.records import Record, RecordError, parse_record, verify_record
from ..fsutil import write_atomically
from ..tasks import spawn
from .keys import SignerKeys

LOG_NAME = "log.jsonl"
CHECKPOINT_DIR = "checkpoints"
POLICY_DIR = "policies"
CHECKPOINTS_KEPT = 8
SIGNATURES_CHECKED_AT_START = 1000
READ_CHUNK = 1 << 20
INDEX_STRIDE = 256  # the file offset of every 256th record is kept: reading one back scans at most 255 before it
INLINE_BATCH = 4
"""A batch of at most this many records is written and fsynced on the event loop itself: handing it to a thread and
back cost ~0.4 ms here (two thread wake-ups on a VM: an fsync of ~0.3 ms took ~0.7 ms through ``to_thread``), which
a lone decision waits for in full. A larger batch goes to a thread, so that the next requests are decided meanwhile."""


class StoreUnavailable(RuntimeError):
    """The store cannot take records; decisions must be refused."""


class StoreCorrupt(RuntimeError):
    """A record before the log's tail is damaged; the signer must not start on it."""


@dataclass(frozen=True)
class Recovery:
    records: int
    torn_bytes: int = 0
    torn_file: str | None = None


class LogStore:
    """Owns ``log.jsonl`` and the chain state; see the module docstring."""

    def __init__(self, store_dir: Path, keys: SignerKeys, *, durable: bool = True) -> None:
        self.store_dir = store_dir
        self.keys = keys
        self.durable = durable
        self.writer = LogWriter(keys.log_id, keys.record_key)
        self.durable_tree = merkle.CompactRange()
        self.error: str | None = None
        self._fd: int | None = None
        self._offset = 0
        self._next_offset = 0
        self.marks: list[int] = []  # file offset of record seq i * INDEX_STRIDE (not one entry per record)
        self._pending: list[tuple[Record, asyncio.Future[None]]] = []
        self._flushing = False
        self._idle = asyncio.Event()
        self._idle.set()

    # ---- start -------------------------------------------------------------------------
    def open(self, on_record: Callable[[Record], None]) -> Recovery:
        """Read the log back, replaying each record to ``on_record``; repair only a torn tail."""
        path = self.store_dir / LOG_NAME
        try:
            self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            # Fail closed but keep the past readable: replay read-only, refuse every append.
            self.error = f"cannot open {path} for writing: {exc.strerror}"
            try:
                self._fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            except OSError:
                return Recovery(records=0)
        size = os.fstat(self._fd).st_size
        records, good_offset = self._replay(self._count_complete_lines(), on_record)
        recovery = Recovery(records=records)
        if good_offset < size and self.error is None:
            recovery = self._set_aside_tail(os.pread(self._fd, size - good_offset, good_offset), good_offset, records)
        self._offset = self._next_offset = good_offset
        os.lseek(self._fd, good_offset, os.SEEK_SET)
        return recovery

    def _count_complete_lines(self) -> int:
        """Newline-ended lines in the log (the part after the last newline is empty or torn), read in chunks."""
        assert self._fd is not None
        count = offset = 0
        while chunk := os.pread(self._fd, READ_CHUNK, offset):
            count += chunk.count(b"\n")
            offset += len(chunk)
        return count

    def _complete_lines(self, count: int) -> Iterator[bytes]:
        """The first ``count`` lines of the log without their newlines, read in chunks (memory: one chunk + a line)."""
        assert self._fd is not None
        offset, buffer = 0, b""
        while count and (chunk := os.pread(self._fd, READ_CHUNK, offset)):
            offset += len(chunk)
            lines = (buffer + chunk).split(b"\n")
            buffer = lines.pop()
            yield from lines[:count]
            count -= min(count, len(lines))

    def _replay(self, complete: int, on_record: Callable[[Record], None]) -> tuple[int, int]:
        """Replay the log's ``complete`` lines, streaming; (records replayed, offset of the first one not replayed)."""
        offset = 0
        verify_from = max(0, complete - SIGNATURES_CHECKED_AT_START)
        public = self.keys.record_key.public_key()
        for index, line in enumerate(self._complete_lines(complete)):
            try:
                record = parse_record(line)
                if index >= verify_from:
                    verify_record(record, public, self.writer.kid)
                self.writer.advance(record)
            except (RecordError, ValueError) as exc:
                if index == complete - 1:
                    return index, offset  # a damaged last line is a torn tail
                raise StoreCorrupt(
                    f"record {index} of {self.store_dir / LOG_NAME} is damaged ({exc}); "
                    "the log cannot be extended safely: move the store aside and export what verifies"
                ) from None
            self.durable_tree.append(record.leaf())
            if index % INDEX_STRIDE == 0:
                self.marks.append(offset)
            on_record(record)
            offset += len(line) + 1
        return complete, offset

    def _set_aside_tail(self, tail: bytes, offset: int, records: int) -> Recovery:
        assert self._fd is not None
        torn = self.store_dir / f"torn-{offset}-{time.time_ns()}.bin"
        fd = os.open(torn, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, tail)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.ftruncate(self._fd, offset)
        os.fsync(self._fd)
        return Recovery(records=records, torn_bytes=len(tail), torn_file=torn.name)

    # ---- append ------------------------------------------------------------------------
    @property
    def size(self) -> int:
        """Records signed so far (durable or about to be)."""
        return self.writer.next_seq

    def submit(
        self, run_id: str, event_type: str, data: dict[str, Any], *, identity: str = "signer",
        request_id: str | None = None,
    ) -> tuple[Record, asyncio.Future[None]]:
        """Sign the next record now (fixing its place) and return a future that resolves once it is durable."""
        if self.error is not None or self._fd is None:
            raise StoreUnavailable(self.error or "store is not open")
        record = self.writer.build(run_id, event_type, data, identity=identity, request_id=request_id)
        if record.seq % INDEX_STRIDE == 0:
            self.marks.append(self._next_offset)
        self.writer.advance(record)
        self._next_offset += len(record.line)
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pending.append((record, future))
        if not self._flushing:
            self._flushing = True
            self._idle.clear()
            spawn(self._flush_loop(), name="signer-store-flush")
        return record, future

    async def append(self, run_id: str, event_type: str, data: dict[str, Any], **kwargs: Any) -> Record:
        record, future = self.submit(run_id, event_type, data, **kwargs)
        await future
        return record

    async def _flush_loop(self) -> None:
        try:
            while self._pending:
                batch, self._pending = self._pending, []
                payload = b"".join(record.line for record, _ in batch)
                try:
                    if len(batch) <= INLINE_BATCH:
                        self._write_durably(payload)
                    else:
                        await asyncio.to_thread(self._write_durably, payload)
                except OSError as exc:
                    self._fail(f"writing the log failed: {exc.strerror or exc}", batch)
                    return
                for record, future in batch:
                    self.durable_tree.append(record.leaf())
                    if not future.done():
                        future.set_result(None)
        finally:
            self._flushing = False
            self._idle.set()

    def _write_durably(self, payload: bytes) -> None:
        assert self._fd is not None
        start = self._offset
        try:
            view = memoryview(payload)
            while view:
                written = os.write(self._fd, view)
                view = view[written:]
            if self.durable:
                os.fsync(self._fd)
        except OSError:
            try:
                os.ftruncate(self._fd, start)
                os.lseek(self._fd, start, os.SEEK_SET)
            except OSError:
                pass  # the torn tail is found and set aside at the next start
            raise
        self._offset = start + len(payload)

    def _fail(self, reason: str, batch: list[tuple[Record, asyncio.Future[None]]]) -> None:
        self.error = reason
        failed = batch + self._pending
        self._pending = []
        for _, future in failed:
            if not future.done():
                future.set_exception(StoreUnavailable(reason))

    def read_record(self, seq: int) -> Record:
        """Read back one durable record by its position in the log."""
        if seq >= self.durable_tree.size:
            raise StoreUnavailable(f"record {seq} is not durable yet")
        for line_seq, line in self.durable_lines(seq):
            if line_seq == seq:
                return parse_record(line)
        raise StoreUnavailable(f"record {seq} is missing from the log")

    def durable_lines(self, first_seq: int) -> Iterator[tuple[int, bytes]]:
        """(seq, line) of the durable records from the nearest index mark at or before ``first_seq`` on."""
        assert self._fd is not None
        seq = first_seq - first_seq % INDEX_STRIDE
        offset, end_seq = self.marks[seq // INDEX_STRIDE], self.durable_tree.size
        buffer = b""
        while seq < end_seq:
            chunk = os.pread(self._fd, READ_CHUNK // 16, offset)
            if not chunk:
                return
            offset += len(chunk)
            buffer += chunk
            start = 0
            while seq < end_seq and (newline := buffer.find(b"\n", start)) >= 0:
                if seq >= first_seq:
                    yield seq, buffer[start:newline + 1]
                seq += 1
                start = newline + 1
            buffer = buffer[start:]

    async def drain(self) -> None:
        """Wait until every submitted record is durable (or the store failed)."""
        await self._idle.wait()

    # ---- checkpoints and policy snapshots ----------------------------------------------
    def checkpoint(self) -> tuple[int, bytes]:
        """Sign a checkpoint over the durable records and keep it as ``checkpoints/<size>.note``."""
        size = self.durable_tree.size
        body = note.Checkpoint(self.keys.origin, size, self.durable_tree.root())
        signed = note.sign_checkpoint(body, self.keys.origin, self.keys.log_key)
        directory = self.store_dir / CHECKPOINT_DIR
        directory.mkdir(mode=0o700, exist_ok=True)
        write_atomically(directory / f"{size}.note", signed)
        kept = sorted((int(p.stem) for p in directory.glob("*.note") if p.stem.isdigit()), reverse=True)
        for old in kept[CHECKPOINTS_KEPT:]:
            (directory / f"{old}.note").unlink(missing_ok=True)
        return size, signed

    def save_policy(self, snapshot: dict[str, Any]) -> str:
        """Keep a policy snapshot under its hash; returns the hex digest."""
        body = strictjson.canonical(snapshot)
        digest = hashlib.sha256(body).hexdigest()
        directory = self.store_dir / POLICY_DIR
        directory.mkdir(mode=0o700, exist_ok=True)
        target = directory / f"{digest}.json"
        if not target.exists():
            write_atomically(target, body)
        return digest

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
