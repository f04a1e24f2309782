"""A large signed run written straight to a v2 bundle, fast and in bounded memory, without a signer process.

Records are built from templates in their stored form (compact JSON, sorted keys) and signed with libsodium, the
same bytes ``LogWriter`` would make; one record in ``other_every`` belongs to another run, so the bundle's tree has
gaps.  Used by the memory test and the large-run bench to make runs of hundreds of thousands of records.
"""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

import nacl.signing

from tkbox_daemon.evidence import note
from tkbox_daemon.evidence.bundle_stream import RunBundleWriter
from tkbox_daemon.evidence.records import EVENT_SCHEMA, SIGNER_RUN_ID, ZERO_HASH, key_id, public_raw
from tkbox_daemon.evidence.trust import Trust
from tkbox_daemon.evidence.verify_records import header_bytes

try:
    from evidence_factory import LogKeys, fixed_keys, policy_snapshot
except ImportError:  # imported as tests.large_run_factory
    from tests.evidence_factory import LogKeys, fixed_keys, policy_snapshot

LARGE_KEYS = fixed_keys("large")
_ENCODE = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), sort_keys=True).encode


class _Log:
    def __init__(self, keys: LogKeys, writer: RunBundleWriter, run_id: str) -> None:
        self.keys, self.writer, self.run_id = keys, writer, run_id
        self.signing = nacl.signing.SigningKey(keys.record_key.private_bytes_raw())
        self.kid = key_id(keys.record_key.public_key())
        self.seq = 0
        self.prev_hash = ZERO_HASH
        self.runs: dict[str, tuple[int, str]] = {}  # run id -> (next run_seq, its last hash)

    def append(self, run_id: str, kind: str, data: dict[str, object], role: str | None) -> None:
        run_seq, run_prev = self.runs.get(run_id, (0, ZERO_HASH))
        event = {"data": data, "id": f"{self.seq:032x}", "identity": "signer" if run_id == SIGNER_RUN_ID else "uid:1000",
                 "log_id": self.keys.log_id, "prev_hash": self.prev_hash, "run_id": run_id, "run_prev_hash": run_prev,
                 "run_seq": run_seq, "schema": EVENT_SCHEMA, "seq": self.seq,
                 "ts": f"2026-01-01T00:00:00.{self.seq % 1000000:06d}Z", "type": kind}
        event_text = _ENCODE(event)
        event_hash = hashlib.sha256(event_text.encode()).digest()
        hash_text = "sha256:" + event_hash.hex()
        header = header_bytes(hash_text, self.kid, self.keys.log_id, self.prev_hash, run_id, run_prev, run_seq, self.seq)
        sig = base64.b64encode(self.signing.sign(header).signature).decode()
        line = (f'{{"alg":"ed25519","event":{event_text},"hash":"{hash_text}","kid":"{self.kid}","sig":"{sig}",'
                f'"v":1}}\n').encode()
        self.writer.add(line, event_hash, role)
        self.seq += 1
        self.prev_hash = hash_text
        self.runs[run_id] = (run_seq + 1, hash_text)


def write_large_run(path: Path, records: int, *, run_id: str = "run-large", other_every: int = 4) -> Trust:
    """A v2 bundle at ``path`` of a closed run of ``records`` records (one in ``other_every`` of the log is
    another run's); returns the trust that pins its keys."""
    keys = LARGE_KEYS
    snapshot = policy_snapshot()
    digest = hashlib.sha256(snapshot).hexdigest()
    with open(path, "w+b") as handle:
        writer = RunBundleWriter(handle, run_id, scratch_dir=path.parent)
        log = _Log(keys, writer, run_id)
        public = base64.b64encode(public_raw(keys.record_key.public_key())).decode()
        log.append(SIGNER_RUN_ID, "signer.epoch", {"keys": [{"alg": "ed25519", "kid": log.kid, "public_key": public,
                                                             "purpose": "record"}],
                                                   "log_vkey": keys.vkey, "origin": keys.origin}, "key")
        log.append(run_id, "run.registered", {"agent": {"name": "bench"}, "policy_hash": "sha256:" + digest,
                                              "policy_name": "default", "signer_isolation": "same-user",
                                              "token_expires": 1_800_000_000}, "run")
        written = 1
        number = 0
        while written < records - 1:
            if other_every and log.seq % other_every == 0:
                log.append("run-other", "capture.gap", {"kind": "noise"}, None)
                continue
            decision_id = f"dec-{number:032x}"
            if number % 2 == 0:
                log.append(run_id, "policy.decision", {
                    "args": {"hash": "hmac-sha256:" + "ab" * 32, "size": 42}, "decision_id": decision_id,
                    "reason": "allowed by r1", "rule_ids": ["r1"], "tool": "Bash", "tool_class": "exec",
                    "verdict": "allow"}, "run")
            else:
                log.append(run_id, "tool.result", {"decision_id": f"dec-{number - 1:032x}", "exit_code": 0,
                                                   "status": "ok"}, "run")
            number += 1
            written += 1
        log.append(run_id, "run.closed", {"reason": "done", "records": records}, "run")
        note_bytes = note.sign_checkpoint(note.Checkpoint(keys.origin, writer.tree_size, writer.root()), keys.origin,
                                          keys.log_key)
        writer.finish(note_bytes, {digest: snapshot})
    return keys.trust()
