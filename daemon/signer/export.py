"""``tkbox signer export`` and ``tkbox signer trust``: a closed run as a bundle, and the file that pins the keys.

Export reads the store directly (the signer may be running or not): only records
covered by the newest checkpoint are read, so a concurrent writer cannot tear them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..evidence import trust as trust_file
from ..evidence.bundle import write_bundle
from ..evidence.records import SIGNER_RUN_ID, Record, parse_record
from . import store as store_module
from .keys import load_or_create
from .paths import SignerPaths


class ExportError(RuntimeError):
    """The run cannot be exported; the message says why and what to do."""


def _newest_checkpoint(store_dir: Path) -> tuple[int, bytes]:
    directory = store_dir / store_module.CHECKPOINT_DIR
    sizes = sorted((int(p.stem) for p in directory.glob("*.note") if p.stem.isdigit()), reverse=True)
    if not sizes:
        raise ExportError("the signer has no checkpoint yet; close the run (close_run makes one)")
    return sizes[0], (directory / f"{sizes[0]}.note").read_bytes()


def export_run(paths: SignerPaths, run_id: str, output: Path) -> dict[str, Any]:
    store_dir = paths.store_dir
    tree_size, note_bytes = _newest_checkpoint(store_dir)
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
    policy_hash = run_records[0].event["data"].get("policy_hash", "")
    policy_path = store_dir / store_module.POLICY_DIR / f"{policy_hash.removeprefix('sha256:')}.json"
    try:
        policies = {policy_hash.removeprefix("sha256:"): policy_path.read_bytes()}
    except OSError:
        raise ExportError(f"the policy snapshot {policy_hash} is missing from {policy_path.parent}") from None
    write_bundle(
        output, run_id=run_id, run_records=run_records, key_records=key_records, checkpoint_note=note_bytes,
        tree_leaves=leaves, policies=policies,
    )
    return {"run_id": run_id, "records": len(run_records), "tree_size": tree_size, "bundle": str(output)}


def write_trust(paths: SignerPaths, output: Path) -> dict[str, Any]:
    paths.ensure()
    keys = load_or_create(paths.keys_dir)
    document = trust_file.build_trust(record_key=keys.record_key.public_key(), log_vkey=keys.log_vkey)
    trust_file.write_trust(output, document)
    return document
