"""One closed run of the signer's log as ``.tkb`` bundle bytes: the log's prefix up to a tree size, the run's
records, the epoch (key) records, the policy snapshot, a checkpoint and the proofs.

Shared by ``tkbox signer export`` (which reads the store directly and uses the newest stored checkpoint) and the
signer's ``export_open`` RPC (which signs the checkpoint at the run's own end, ``seq`` of its ``run.closed`` plus
one, so that exporting the same run again gives the same bytes: Ed25519 signatures are deterministic).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from ..evidence import merkle, note
from ..evidence.bundle import bundle_entries, zip_bytes
from ..evidence.records import SIGNER_RUN_ID, Record, parse_record
from . import store as store_module


class ExportError(RuntimeError):
    """The run cannot be exported; the message says why and what to do."""


@dataclass(frozen=True)
class RunSlice:
    """What a bundle of one run needs from the log's first ``len(leaves)`` records."""

    run_id: str
    leaves: list[bytes]
    run_records: list[Record]
    key_records: list[Record]

    @property
    def tree_size(self) -> int:
        return len(self.leaves)


def read_run(store_dir: Path, run_id: str, tree_size: int) -> RunSlice:
    """Read the log's first ``tree_size`` records; the run must be among them, closed by its last one."""
    leaves: list[bytes] = []
    run_records: list[Record] = []
    key_records: list[Record] = []
    with open(store_dir / store_module.LOG_NAME, "rb") as log:
        for _ in range(tree_size):
            line = log.readline()
            if not line.endswith(b"\n"):
                raise ExportError("the log is shorter than its checkpoint; check the store with: tkbox signer status")
            record = parse_record(line)
            leaves.append(record.leaf())
            if record.run_id == run_id:
                run_records.append(record)
            elif record.run_id == SIGNER_RUN_ID and record.type == "signer.epoch":
                key_records.append(record)
    if not run_records:
        raise ExportError(f"no run {run_id!r} in the checkpointed log; list runs with: tkbox signer status")
    if run_records[-1].type != "run.closed":
        raise ExportError(f"run {run_id!r} is still open; close it first (tkbox rm closes a box's run)")
    return RunSlice(run_id, leaves, run_records, key_records)


def policy_snapshots(store_dir: Path, run: RunSlice) -> dict[str, bytes]:
    """The policy snapshot the run was registered with, by its hash."""
    policy_hash = run.run_records[0].event["data"].get("policy_hash", "")
    digest = policy_hash.removeprefix("sha256:")
    path = store_dir / store_module.POLICY_DIR / f"{digest}.json"
    try:
        return {digest: path.read_bytes()}
    except OSError:
        raise ExportError(f"the policy snapshot {policy_hash} is missing from {path.parent}") from None


def bundle_bytes(store_dir: Path, run: RunSlice, checkpoint_note: bytes) -> bytes:
    """The canonical zip of ``run`` under ``checkpoint_note`` (a note over exactly ``run.tree_size`` leaves)."""
    entries = bundle_entries(run_id=run.run_id, run_records=run.run_records, key_records=run.key_records,
                             checkpoint_note=checkpoint_note, tree_leaves=run.leaves,
                             policies=policy_snapshots(store_dir, run))
    return zip_bytes(entries)


def checkpoint_at(run: RunSlice, origin: str, log_key: Ed25519PrivateKey) -> bytes:
    """A signed checkpoint over exactly the run's prefix of the log (deterministic: same prefix, same bytes)."""
    return note.sign_checkpoint(note.Checkpoint(origin, run.tree_size, merkle.root(run.leaves)), origin, log_key)


def closed_run_bundle(store_dir: Path, run_id: str, closed_seq: int, origin: str,
                      log_key: Ed25519PrivateKey) -> tuple[bytes, RunSlice]:
    """The bundle of a run closed by the record at ``closed_seq``, under a checkpoint at ``closed_seq + 1``."""
    run = read_run(store_dir, run_id, closed_seq + 1)
    return bundle_bytes(store_dir, run, checkpoint_at(run, origin, log_key)), run
