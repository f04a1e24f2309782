"""Builds signed logs, runs, checkpoints and bundles in memory for tests, with ``LogWriter`` and no signer process.

Everything is deterministic: keys come from fixed seeds, event ids from the log id and
seq, timestamps from a fixed clock, so the same calls always give the same bytes.

    log = FakeLog(fixed_keys("main"))
    run_id = log.add_run("run-a", decisions=8)   # interleaved with a second run
    entries = log.bundle_entries(run_id)          # {name: bytes}, manifest first
    zip_data = zip_bytes(entries)
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from tkbox_daemon import strictjson
from tkbox_daemon.evidence import bundle, note
from tkbox_daemon.evidence.chain import LogWriter, utc_timestamp
from tkbox_daemon.evidence.records import SIGNER_RUN_ID, Record, public_raw, sign_event
from tkbox_daemon.evidence.trust import Trust, build_trust, parse_trust_document

BASE_TIME = datetime(2026, 1, 1, tzinfo=UTC)


def seeded_key(label: str) -> Ed25519PrivateKey:
    return Ed25519PrivateKey.from_private_bytes(hashlib.sha256(f"tkbox-test-key:{label}".encode()).digest())


@dataclass(frozen=True)
class LogKeys:
    """A log's identity and keys: record key, log (checkpoint) key and log id."""

    label: str
    record_key: Ed25519PrivateKey
    log_key: Ed25519PrivateKey
    log_id: str

    @property
    def origin(self) -> str:
        return f"tkbox.local/{self.log_id}"

    @property
    def vkey(self) -> str:
        return note.vkey_for(self.origin, self.log_key.public_key())

    def trust_document(self) -> dict[str, Any]:
        return build_trust(record_key=self.record_key.public_key(), log_vkey=self.vkey)

    def trust(self) -> Trust:
        return parse_trust_document(self.trust_document())


def fixed_keys(label: str = "main", *, record_label: str | None = None) -> LogKeys:
    """Keys from fixed seeds; ``record_label`` lets two logs share a record key."""
    log_id = hashlib.sha256(f"tkbox-test-log:{label}".encode()).hexdigest()[:32]
    return LogKeys(label, seeded_key(f"record:{record_label or label}"), seeded_key(f"log:{label}"), log_id)


def policy_snapshot(name: str = "default") -> bytes:
    return strictjson.canonical({"name": name, "rules": [{"id": "r1", "tool": "bash", "verdict": "allow"}]})


def policy_hash(snapshot: bytes) -> str:
    return "sha256:" + hashlib.sha256(snapshot).hexdigest()


@dataclass
class FakeLog:
    """One log: every record in seq order, signed by the log's record key."""

    keys: LogKeys
    records: list[Record] = field(default_factory=list)
    policies: dict[str, bytes] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.writer = LogWriter(self.keys.log_id, self.keys.record_key)
        public = base64.b64encode(public_raw(self.keys.record_key.public_key())).decode()
        self.append(SIGNER_RUN_ID, "signer.epoch", {
            "keys": [{"purpose": "record", "alg": "ed25519", "kid": self.writer.kid, "public_key": public}],
            "log_vkey": self.keys.vkey,
            "origin": self.keys.origin,
        }, identity="signer")
        self.append(SIGNER_RUN_ID, "signer.started", {"pid": 1, "version": "test", "records": 0}, identity="signer")

    def append(self, run_id: str, event_type: str, data: dict[str, Any], *, identity: str = "uid:1000") -> Record:
        """Sign the next record with a deterministic id and timestamp."""
        seq = self.writer.next_seq
        ts = utc_timestamp(BASE_TIME + timedelta(seconds=seq))
        draft = self.writer.build(run_id, event_type, data, identity=identity, ts=ts)
        event = dict(draft.event, id=hashlib.sha256(f"{self.keys.log_id}:{seq}".encode()).hexdigest()[:32])
        record = sign_event(event, self.keys.record_key, self.writer.kid)
        self.writer.advance(record)
        self.records.append(record)
        return record

    def register(self, run_id: str, *, isolation: str = "same-user", policy: str = "default",
                 **extra: Any) -> Record:
        snapshot = policy_snapshot(policy)
        self.policies[hashlib.sha256(snapshot).hexdigest()] = snapshot
        return self.append(run_id, "run.registered", {
            "agent": {"name": "test-agent"}, "policy_name": policy, "policy_hash": policy_hash(snapshot),
            "signer_isolation": isolation, "token_expires": 1_800_000_000, **extra,
        })

    def decide(self, run_id: str, number: int) -> None:
        decision_id = f"dec-{number:032x}"
        self.append(run_id, "policy.decision", {
            "decision_id": decision_id, "tool": "bash", "tool_class": "exec", "verdict": "allow",
            "rule_ids": ["r1"], "reason": "allowed by r1", "args": {"hash": "hmac-sha256:" + "ab" * 32, "size": 42},
        })
        self.append(run_id, "tool.result", {"decision_id": decision_id, "status": "ok", "exit_code": 0})

    def close(self, run_id: str, reason: str = "done", **extra: Any) -> Record:
        count = sum(1 for record in self.records if record.run_id == run_id)
        return self.append(run_id, "run.closed", {"reason": reason, "records": count + 1, **extra})

    def add_run(self, run_id: str, *, decisions: int = 8, other: str | None = "run-other",
                isolation: str = "same-user", close: bool = True) -> str:
        """A run of ``2 * decisions + 2`` records (+1 observation), interleaved with records of ``other``."""
        self.register(run_id, isolation=isolation)
        if other:
            self.register(other)
        for number in range(decisions):
            self.decide(run_id, number)
            if other and number % 3 == 0:
                self.decide(other, 1000 + number)
        self.append(run_id, "input.observed", {
            "source": "web", "trust": "untrusted", "must_keep": False, "salt_id": "0" * 32,
            "output": {"hash": "hmac-sha256:" + "cd" * 32, "size": 7},
        })
        if close:
            self.close(run_id)
        return run_id

    def run_records(self, run_id: str) -> list[Record]:
        return [record for record in self.records if record.run_id == run_id]

    def key_records(self) -> list[Record]:
        return [r for r in self.records if r.run_id == SIGNER_RUN_ID and r.type == "signer.epoch"]

    def leaves(self, size: int | None = None) -> list[bytes]:
        return [record.leaf() for record in self.records[: size or len(self.records)]]

    def checkpoint(self, size: int | None = None, *, key: Ed25519PrivateKey | None = None,
                   origin: str | None = None) -> bytes:
        from tkbox_daemon.evidence import merkle

        leaves = self.leaves(size)
        body = note.Checkpoint(origin or self.keys.origin, len(leaves), merkle.root(leaves))
        return note.sign_checkpoint(body, origin or self.keys.origin, key or self.keys.log_key)

    def bundle_entries(self, run_id: str, *, size: int | None = None) -> dict[str, bytes]:
        run_records = self.run_records(run_id)
        size = size or len(self.records)
        wanted = {r.event["data"]["policy_hash"].removeprefix("sha256:") for r in run_records if r.type == "run.registered"}
        return bundle.bundle_entries(
            run_id=run_id, run_records=run_records, key_records=self.key_records(),
            checkpoint_note=self.checkpoint(size), tree_leaves=self.leaves(size),
            policies={digest: self.policies[digest] for digest in wanted},
        )

    def bundle_bytes(self, run_id: str) -> bytes:
        return bundle.zip_bytes(self.bundle_entries(run_id))


def with_manifest_repaired(entries: dict[str, bytes]) -> dict[str, bytes]:
    """What an attacker does after editing entries: recompute the manifest's hashes (and keep its fields)."""
    manifest = strictjson.loads_object(entries[bundle.MANIFEST], max_bytes=1 << 20)
    files = {name: data for name, data in entries.items() if name != bundle.MANIFEST}
    repaired = bundle.manifest_document(manifest["run_id"], manifest["tree_size"], files)
    return {bundle.MANIFEST: strictjson.canonical(repaired), **files}


def standard_log(decisions: int = 8) -> tuple[FakeLog, str]:
    """The usual test log: keys "main", run ``run-a`` (~20 records) interleaved with ``run-other``."""
    log = FakeLog(fixed_keys("main"))
    run_id = log.add_run("run-a", decisions=decisions)
    log.close("run-other")
    return log, run_id


# ---- hostile zips ----------------------------------------------------------------------------------------
@dataclass
class RawMember:
    """One entry of a hand-built zip: canonical fields unless overridden."""

    name: bytes
    data: bytes
    method: int = 8
    size: int | None = None  # the declared uncompressed size (default: the real one)
    external_attr: int | None = None
    flags: int = 0
    crc: int | None = None
    local_name: bytes | None = None  # a name for the local header that differs from the directory's
    payload: bytes | None = None  # the stored bytes (default: raw deflate of data, or data if stored)
    time: int = 0


def raw_zip(members: list[RawMember], *, comment: bytes = b"", prefix: bytes = b"") -> bytes:
    """A zip built field by field, for the reader's refusal tests and the corpus."""
    import zlib

    from tkbox_daemon.evidence import zipread as z

    body = bytearray(prefix)
    directory = bytearray()
    for member in members:
        if member.payload is not None:
            payload = member.payload
        elif member.method == 8:
            compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
            payload = compressor.compress(member.data) + compressor.flush()
        else:
            payload = member.data
        crc = zlib.crc32(member.data) if member.crc is None else member.crc
        size = len(member.data) if member.size is None else member.size
        attr = z.EXTERNAL_ATTR if member.external_attr is None else member.external_attr
        local_name = member.name if member.local_name is None else member.local_name
        offset = len(body)
        body += z.LOCAL_HEADER.pack(z.LOCAL_SIGNATURE, z.VERSION_NEEDED, member.flags, member.method, member.time,
                                    z.DOS_DATE, crc, len(payload), size, len(local_name), 0)
        body += local_name + payload
        directory += z.CENTRAL_HEADER.pack(z.CENTRAL_SIGNATURE, z.VERSION_MADE_BY, z.VERSION_NEEDED, member.flags,
                                           member.method, member.time, z.DOS_DATE, crc, len(payload), size,
                                           len(member.name), 0, 0, 0, 0, attr, offset)
        directory += member.name
    end = z.END_RECORD.pack(z.END_SIGNATURE, 0, 0, len(members), len(members), len(directory), len(body),
                            len(comment))
    return bytes(body + directory + end + comment)
