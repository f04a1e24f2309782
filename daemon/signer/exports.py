"""Exports over the signer's socket: a closed run's bundle built into a signer-private file, read back in chunks
that fit a reply line, then deleted — so a caller that cannot read the signer's files (another user) can export.

- ``export_open`` (only the identity that registered the run, and only once the run is closed: a closed run cannot
  change, so no run token is needed) builds the bundle under a checkpoint at the run's end (``run_bundle.py``) into
  ``store/exports/<export id>.tkb`` (0600) and answers its id, size and SHA-256;
- ``export_read`` answers ``EXPORT_CHUNK`` bytes from an offset, base64 (well inside the 1 MiB line);
- ``export_done`` deletes it; so does ``EXPORT_IDLE_SECONDS`` without a read (swept at every export call), a
  restart of the signer, or its clean stop.

A caller holds at most ``MAX_EXPORTS_PER_CALLER`` exports at once. Nothing here writes to the log.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
import secrets
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .keys import SignerKeys
from .run_bundle import ExportError, write_closed_run
from .state import RunState
from .store import LogStore

EXPORTS_DIR = "exports"
EXPORT_CHUNK = 512 * 1024  # base64 of it is 699,052 bytes: a reply line stays well under MAX_LINE_BYTES
MAX_EXPORTS_PER_CALLER = 4
EXPORT_IDLE_SECONDS = 300


class ExportRefused(Exception):
    """An export call is refused; ``code`` is one of rpc_schema.ERROR_CODES."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass
class OpenExport:
    export_id: str
    owner: str
    run_id: str
    path: Path
    size: int
    sha256: str
    last_used: float


class RunExports:
    """The open exports of one signer, by export id."""

    def __init__(self, store: LogStore, keys: SignerKeys, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.store = store
        self.keys = keys
        self.clock = clock
        self.directory = store.store_dir / EXPORTS_DIR
        self._open: dict[str, OpenExport] = {}
        self._building: dict[str, int] = {}  # exports being built, per caller (they count toward the bound)

    def discard_all(self) -> None:
        """Delete every export file (at start: a signer that died left them; at a clean stop)."""
        self._open.clear()
        shutil.rmtree(self.directory, ignore_errors=True)

    def _sweep(self) -> None:
        now = self.clock()
        for export in [e for e in self._open.values() if now - e.last_used > EXPORT_IDLE_SECONDS]:
            self._delete(export)

    def _delete(self, export: OpenExport) -> None:
        self._open.pop(export.export_id, None)
        export.path.unlink(missing_ok=True)

    def _held_by(self, identity: str) -> int:
        return sum(1 for e in self._open.values() if e.owner == identity) + self._building.get(identity, 0)

    async def open(self, identity: str, run_id: str, run: RunState | None) -> dict[str, Any]:
        self._sweep()
        if run is None:
            raise ExportRefused("unknown_run", f"no run {run_id!r} in this signer")
        if run.owner != identity:
            raise ExportRefused("not_owner", f"run {run_id!r} was registered by {run.owner}, not {identity}; only "
                                             "its owner exports it over the socket (the signer's own user can use: "
                                             f"tkbox signer export --run {run_id})")
        if not run.closed or run.closed_seq is None:
            raise ExportRefused("run_open", f"run {run_id!r} is still open: an open run can still change, so it "
                                            "is exported once closed (its owner closes it with close_run)")
        if self._held_by(identity) >= MAX_EXPORTS_PER_CALLER:
            raise ExportRefused("quota_exceeded", f"{MAX_EXPORTS_PER_CALLER} exports are open for {identity}; "
                                                  "finish one with export_done (an unread one expires after "
                                                  f"{EXPORT_IDLE_SECONDS} s)")
        self._building[identity] = self._building.get(identity, 0) + 1
        try:
            await self.store.drain()  # the run.closed record (and all before it) durable in the log
            export_id = f"exp-{secrets.token_hex(16)}"
            path = self.directory / f"{export_id}.tkb"
            try:
                size, digest, records = await asyncio.to_thread(self._build, run_id, run.closed_seq, path)
            except ExportError as exc:
                raise ExportRefused("unavailable", str(exc)) from None
            except OSError as exc:
                path.unlink(missing_ok=True)
                raise ExportRefused("unavailable", f"the bundle could not be written in {self.directory}: "
                                                   f"{exc.strerror or exc}") from None
        finally:
            self._building[identity] -= 1
        self._open[export_id] = OpenExport(export_id, identity, run_id, path, size, digest, self.clock())
        return {"export_id": export_id, "run_id": run_id, "size": size, "sha256": digest, "records": records,
                "tree_size": run.closed_seq + 1, "chunk": EXPORT_CHUNK, "idle_expiry": EXPORT_IDLE_SECONDS}

    def _build(self, run_id: str, closed_seq: int, path: Path) -> tuple[int, str, int]:
        self.directory.mkdir(mode=0o700, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            with os.fdopen(fd, "w+b") as handle:  # written as the log is read, then hashed: bounded memory
                summary = write_closed_run(self.store.store_dir, run_id, closed_seq, self.keys.origin,
                                           self.keys.log_key, handle)
                handle.flush()
                handle.seek(0)
                digest = hashlib.file_digest(handle, "sha256").hexdigest()  # type: ignore[arg-type]
        except BaseException:
            path.unlink(missing_ok=True)
            raise
        return summary.size, "sha256:" + digest, summary.records

    def _owned(self, identity: str, export_id: str) -> OpenExport:
        self._sweep()
        export = self._open.get(export_id)
        if export is None or export.owner != identity:
            raise ExportRefused("unknown_export", f"no export {export_id!r} open for {identity} (finished, or "
                                                  f"unread for {EXPORT_IDLE_SECONDS} s); open one with export_open")
        return export

    def read(self, identity: str, export_id: str, offset: int) -> dict[str, Any]:
        export = self._owned(identity, export_id)
        if offset > export.size:
            raise ExportRefused("invalid_request", f"offset {offset} is past the end of export {export_id} "
                                                   f"({export.size} bytes)")
        fd = os.open(export.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            data = os.pread(fd, min(EXPORT_CHUNK, export.size - offset), offset)
        finally:
            os.close(fd)
        export.last_used = self.clock()
        return {"export_id": export_id, "offset": offset, "data": base64.b64encode(data).decode("ascii"),
                "eof": offset + len(data) >= export.size}

    def done(self, identity: str, export_id: str) -> dict[str, Any]:
        self._delete(self._owned(identity, export_id))
        return {"export_id": export_id, "done": True}
