"""One closed run of the signer's log as a ``.tkb`` bundle (``tkbox.bundle.v2``), written while the log's prefix
up to a tree size is read once from disk: memory does not grow with the log or the run.

Shared by ``tkbox signer export`` (which reads the store directly and uses the newest stored checkpoint) and the
signer's ``export_open`` RPC (which signs the checkpoint at the run's own end, ``seq`` of its ``run.closed`` plus
one, so that exporting the same run again gives the same bytes: Ed25519 signatures are deterministic).
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from ..evidence import note
from ..evidence.bundle_stream import RunBundleWriter
from ..evidence.records import MAX_RECORD_BYTES, SIGNER_RUN_ID, RecordError, parse_record
from . import store as store_module


class ExportError(RuntimeError):
    """The run cannot be exported; the message says why and what to do."""


@dataclass(frozen=True)
class BundleSummary:
    run_id: str
    records: int  # the run's
    tree_size: int
    size: int  # bytes of the bundle


# A stored line ends with the record's envelope; the event's own run_id is the last one before its run_prev_hash
# (its data, which could hold such text, comes first in the sorted event).
_TAIL = re.compile(rb'"hash":"sha256:([0-9a-f]{64})","kid":"sha256:[0-9a-f]{64}","sig":"[A-Za-z0-9+/]{85}[AQgw]==",'
                   rb'"v":1\}\n\Z', re.ASCII)
_RUN_PREV = b'","run_prev_hash":"'
_RUN_ID = b',"run_id":"'
_TAIL_SEARCH = 300  # the envelope after the event is 249 bytes


def _run_id_of(line: bytes) -> bytes | None:
    end = line.rfind(_RUN_PREV)
    start = line.rfind(_RUN_ID, 0, end) if end > 0 else -1
    return line[start + len(_RUN_ID):end] if start >= 0 else None


def _hash_of(line: bytes) -> bytes:
    match = _TAIL.search(line, max(0, len(line) - _TAIL_SEARCH))
    if match is not None:
        return binascii.unhexlify(match.group(1))
    return binascii.unhexlify(parse_record(line.rstrip(b"\n")).hash[7:])  # the strict parser says what is wrong


def write_run(store_dir: Path, run_id: str, tree_size: int, handle: BinaryIO,
              checkpoint: bytes | Callable[[int, bytes], bytes]) -> BundleSummary:
    """Write the bundle of ``run_id`` over the log's first ``tree_size`` records to ``handle`` (seekable, empty).

    ``checkpoint`` is the signed note over exactly those records, or a function signing one from (size, root).
    """
    writer = RunBundleWriter(handle, run_id, scratch_dir=store_dir)
    try:
        wanted = run_id.encode("utf-8")
        first_line = last_line = b""
        with open(store_dir / store_module.LOG_NAME, "rb") as log:
            for _ in range(tree_size):
                line = log.readline(MAX_RECORD_BYTES + 2)
                if not line.endswith(b"\n"):
                    raise ExportError("the log is shorter than its checkpoint; check the store with: tkbox signer status")
                try:
                    owner = _run_id_of(line)
                    role = None
                    if owner == wanted:
                        role = "run"
                        first_line = first_line or line
                        last_line = line
                    elif owner == SIGNER_RUN_ID.encode("ascii") and parse_record(line[:-1]).type == "signer.epoch":
                        role = "key"
                    writer.add(line, _hash_of(line), role)
                except (RecordError, ValueError) as exc:
                    raise ExportError(f"record {writer.tree_size} of the log is damaged ({exc}); check the store "
                                      "with: tkbox signer status") from None
        if not first_line:
            raise ExportError(f"no run {run_id!r} in the checkpointed log; list runs with: tkbox signer status")
        if parse_record(last_line[:-1]).type != "run.closed":
            raise ExportError(f"run {run_id!r} is still open; close it first (tkbox rm closes a box's run)")
        root = writer.root()
        note_bytes = checkpoint(tree_size, root) if callable(checkpoint) else checkpoint
        if not callable(checkpoint) and _note_root(note_bytes) != root:
            raise ExportError("the newest checkpoint does not match the log it covers; check the store with: "
                              "tkbox signer status")
        policies = policy_snapshots(store_dir, parse_record(first_line[:-1]).event["data"].get("policy_hash", ""))
        size = writer.finish(note_bytes, policies)
        return BundleSummary(run_id, writer.run_records, tree_size, size)
    finally:
        writer.close()


def _note_root(note_bytes: bytes) -> bytes | None:
    lines = note_bytes.split(b"\n", 3)
    try:
        return base64.b64decode(lines[2], validate=True) if len(lines) > 3 else None
    except binascii.Error:
        return None


def policy_snapshots(store_dir: Path, policy_hash: str) -> dict[str, bytes]:
    """The policy snapshot the run was registered with, by its hash."""
    digest = str(policy_hash).removeprefix("sha256:")
    path = store_dir / store_module.POLICY_DIR / f"{digest}.json"
    try:
        return {digest: path.read_bytes()}
    except OSError:
        raise ExportError(f"the policy snapshot {policy_hash} is missing from {path.parent}") from None


def signer_of(origin: str, log_key: Ed25519PrivateKey) -> Callable[[int, bytes], bytes]:
    """Signs a checkpoint at (size, root): deterministic, so the same prefix gives the same note."""
    return lambda size, root: note.sign_checkpoint(note.Checkpoint(origin, size, root), origin, log_key)


def write_closed_run(store_dir: Path, run_id: str, closed_seq: int, origin: str, log_key: Ed25519PrivateKey,
                     handle: BinaryIO) -> BundleSummary:
    """The bundle of a run closed by the record at ``closed_seq``, under a checkpoint at ``closed_seq + 1``."""
    return write_run(store_dir, run_id, closed_seq + 1, handle, signer_of(origin, log_key))
