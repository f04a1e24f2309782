"""A box's run exported through the daemon: when a box may be exported, closing its run for it, reading the bundle
from the signer over its socket with every byte checked, and what the box keeps of its last export.

- A live box (``creating``, ``running``, ``held``, ``stopping``) is refused: export closes the run, and a live box
  keeps deciding. An unrecorded box has no run. A run left open by an earlier daemon (``orphaned``: its token died
  with that daemon) is refused at once with the reason: this daemon cannot close it, nor vouch that nothing was
  lost with the token.
- An open run whose token this daemon holds is closed first, once nothing is in flight in it (waiting at most
  ``EXPORT_CLOSE_WAIT``, then refusing rather than closing under a decision); a box with an approval waiting for a
  person is refused.
- ``SignerExport.chunks`` yields the bundle as the signer sends it, checking offsets, the announced size and the
  announced SHA-256; it holds the last chunk back until the whole digest matched, so a reader never gets a complete
  bundle that differs from the signer's.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import limits, strictjson
from ..api.errors import ApiError
from ..fsutil import write_atomically
from ..signer_link import AsyncSignerClient, SignerCallError
from ..wire import RunExport
from .recorder import RunBusy

if TYPE_CHECKING:
    from .box import Box

RUN_EXPORT_FILE = "run-export.json"
MAX_RUN_EXPORT_FILE = 4096
LIVE_STATES = ("creating", "running", "held", "stopping")
EXPORT_ID = re.compile(r"exp-[0-9a-f]{32}", re.ASCII)
SHA256 = re.compile(r"sha256:[0-9a-f]{64}", re.ASCII)
MAX_BUNDLE_BYTES = 0xFFFFFFFF  # a bundle is a zip without zip64


class ExportBroken(RuntimeError):
    """The signer's bundle did not arrive as announced (offset, size or SHA-256); nothing complete was sent on."""


def _refusal(status: int, code: str, message: str, hint: str) -> ApiError:
    return ApiError(status, code, message, hint=hint)


async def close_for_export(box: Box) -> str:
    """The id of ``box``'s run, closed now if it was open and this daemon holds its token; else an ApiError that says
    why it cannot be exported and what the operator can do."""
    name = box.settings.name
    if box.state in LIVE_STATES:
        raise _refusal(409, "box_running", f"box {name} is {box.state}: export closes its run, and a live box keeps "
                                           "deciding", f"stop it first: tkbox stop {name}")
    run_id = box.recorder.run_id if box.recorder is not None else box.earlier_run.id if box.earlier_run else None
    if box.recorder is None and box.earlier_run is None:
        raise _refusal(409, "unrecorded", f"box {name} was never recorded (the daemon ran --unrecorded): it has no "
                                          "run to export", "run boxes under a signer to have their runs exported")
    if run_id is None:
        raise _refusal(409, "no_run", f"box {name} has no run: the signer did not register one when the box was "
                                      f"created ({box.reason or box.state})", f"remove it with: tkbox rm {name}")
    if box.run_state() == "orphaned":
        raise _refusal(409, "run_orphaned",
                       f"box {name}'s run {run_id} is still open in the signer, and its token was in the memory of "
                       "the daemon that ended (it died, so it could not close the run): this daemon cannot close the "
                       "run, nor vouch that nothing was lost with that daemon, so it exports no bundle of it",
                       f"the records the signer kept stay in its log (tkbox signer status); remove the box with: "
                       f"tkbox rm {name}")
    if box.earlier_run is not None and not box.earlier_run.closed and box.recorder is not None:
        raise _refusal(409, "run_orphaned",
                       f"box {name}'s first run {box.earlier_run.id} is still open in the signer, and its token was in "
                       "the memory of the daemon that ended: this daemon cannot vouch that nothing was lost with it, "
                       f"so it exports no bundle of the box (its apply was recorded in run {run_id}, which names the "
                       "first one)", f"tkbox rm {name} closes run {run_id}; the signer's operator can then export it "
                                     f"with: tkbox signer export --run {run_id} -o FILE")
    if box.recorder is not None and not box.recorder.closed:
        await _close_open_run(box)
    return run_id


async def _close_open_run(box: Box) -> None:
    assert box.recorder is not None
    name = box.settings.name
    if box.applying:
        raise _refusal(409, "run_busy", f"box {name}'s patch is being applied: its run is not closed under the apply",
                       "wait for tkbox apply to end, then export again")
    if box.approvals.pending_count():
        raise _refusal(409, "run_busy", f"box {name} has {box.approvals.pending_count()} approval(s) waiting for a "
                                        "person: its run is not closed under them",
                       "answer them (tkbox approvals), then export again")
    wait = limits.EXPORT_CLOSE_WAIT.default
    try:
        await box.recorder.close_if_idle("exported by the operator", within=wait)
    except RunBusy as busy:
        raise _refusal(409, "run_busy", f"box {name}'s run was not closed: {busy}",
                       limits.EXPORT_CLOSE_WAIT.refusal("decisions still in flight")) from None
    except SignerCallError as exc:
        raise _refusal(503, "signer_unavailable", f"the signer did not close box {name}'s run: {exc.message}",
                       "check the signer with: tkbox signer status") from None
    box.save_record()


@dataclass(frozen=True)
class SignerExport:
    """One export the signer opened: what it announced, and the reading of its bytes."""

    signer: AsyncSignerClient
    export_id: str
    run_id: str
    size: int
    sha256: str

    @classmethod
    async def open(cls, signer: AsyncSignerClient, run_id: str) -> SignerExport:
        reply = await signer.call("export_open", run_id=run_id)
        export_id, size, digest = reply.get("export_id"), reply.get("size"), reply.get("sha256")
        if not (isinstance(export_id, str) and EXPORT_ID.fullmatch(export_id) and type(size) is int
                and 0 <= size <= MAX_BUNDLE_BYTES and isinstance(digest, str) and SHA256.fullmatch(digest)):
            raise ExportBroken("the signer's export_open answer is not {export_id, size, sha256}")
        return cls(signer, export_id, run_id, size, digest)

    async def chunks(self) -> AsyncIterator[bytes]:
        """The bundle's bytes in order, each chunk checked; the last one only once the whole SHA-256 matched."""
        digest = hashlib.sha256()
        received = 0
        held = b""
        while True:
            reply = await self.signer.call("export_read", export_id=self.export_id, offset=received)
            data, eof = _chunk(reply, received)
            received += len(data)
            if received > self.size:
                raise ExportBroken(f"the signer sent more than the {self.size} bytes it announced")
            if not data and not eof:
                raise ExportBroken(f"the signer sent no bytes at offset {received} of {self.size}, and no end")
            digest.update(data)
            if data:
                if held:
                    yield held
                held = data
            if eof:
                break
        found = "sha256:" + digest.hexdigest()
        if received != self.size or found != self.sha256:
            raise ExportBroken(f"the bundle the signer sent ({received} bytes, {found}) is not the one it announced "
                               f"({self.size} bytes, {self.sha256})")
        if held:
            yield held

    async def finish(self) -> None:
        """Let the signer delete its copy (an unfinished one expires on its own)."""
        try:
            await self.signer.call("export_done", export_id=self.export_id)
        except SignerCallError:
            pass


def _chunk(reply: dict[str, Any], offset: int) -> tuple[bytes, bool]:
    if reply.get("offset") != offset or not isinstance(reply.get("eof"), bool) or not isinstance(reply.get("data"),
                                                                                                    str):
        raise ExportBroken(f"the signer's export_read answer at offset {offset} is not {{offset, data, eof}}")
    try:
        return base64.b64decode(reply["data"], validate=True), reply["eof"]
    except (binascii.Error, ValueError):
        raise ExportBroken(f"the signer's chunk at offset {offset} is not base64") from None


def now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def save_run_export(state_dir: Path, export: RunExport) -> None:
    write_atomically(state_dir / RUN_EXPORT_FILE, strictjson.canonical(export.to_json()))


def load_run_export(state_dir: Path) -> RunExport | None:
    """The box's last export as the daemon wrote it, or None (none yet, or a file this daemon did not write)."""
    try:
        with open(state_dir / RUN_EXPORT_FILE, "rb") as handle:
            data = handle.read(MAX_RUN_EXPORT_FILE + 1)
        return RunExport.from_json(strictjson.loads_object(data, max_bytes=MAX_RUN_EXPORT_FILE))
    except (OSError, ValueError):
        return None


def remember_export(box: Box, export: SignerExport) -> RunExport:
    """Keep what was exported on the box (its page and ``tkbox ls --json`` show it, also after a restart) and say so."""
    done = RunExport(export.run_id, export.sha256, export.size, now_iso())
    box.run_export = done
    try:
        save_run_export(box.state_dir, done)
    except OSError as exc:
        box.emit("gap", {"kind": "export_note", "reason": f"the export could not be noted on disk: {exc}"})
    box.emit("box.exported", done.to_json())
    return done
