"""The log's chain state: assigns positions in both hash chains and signs the next record.

``LogWriter`` is pure (no I/O): the signer's store feeds it events and persists
the records it returns; tests use it to build logs without a signer.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from . import merkle
from .records import EVENT_SCHEMA, ZERO_HASH, Record, key_id, sign_event

_second_text: tuple[int, str] = (-1, "")  # the clock's last whole second and its text, reused within that second


def utc_timestamp(now: datetime | None = None) -> str:
    """Microsecond UTC time in the event format, e.g. ``2026-11-30T00:00:00.000000Z``."""
    global _second_text
    if now is None:  # the clock, floored to the microsecond as datetime.now() does
        second, micro = divmod(time.time_ns() // 1000, 1_000_000)
        cached = _second_text  # read once: another thread may replace it
        if second != cached[0]:
            cached = _second_text = (second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second)))
        return f"{cached[1]}.{micro:06d}Z"
    moment = now.astimezone(UTC)
    if moment.year >= 1000:  # isoformat pads the year to four digits where strftime does not
        return moment.isoformat(timespec="microseconds")[:26] + "Z"  # drops "+00:00"; faster than strftime
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass
class RunHead:
    """Where a run's chain stands: the next run_seq and the hash it must link to."""

    next_run_seq: int = 0
    prev_hash: str = ZERO_HASH


@dataclass
class LogWriter:
    """Chains and signs events in log order; also keeps the Merkle tree's compact range."""

    log_id: str
    record_key: Ed25519PrivateKey
    next_seq: int = 0
    prev_hash: str = ZERO_HASH
    runs: dict[str, RunHead] = field(default_factory=dict)
    tree: merkle.CompactRange = field(default_factory=merkle.CompactRange)

    def __post_init__(self) -> None:
        self.kid = key_id(self.record_key.public_key())

    def build(
        self,
        run_id: str,
        event_type: str,
        data: dict[str, Any],
        *,
        identity: str = "signer",
        request_id: str | None = None,
        ts: str | None = None,
    ) -> Record:
        """Sign the next record without advancing the chain; call ``commit`` once it is durable."""
        head = self.runs.get(run_id, RunHead())
        event: dict[str, Any] = {
            "schema": EVENT_SCHEMA,
            "id": os.urandom(16).hex(),
            "log_id": self.log_id,
            "seq": self.next_seq,
            "prev_hash": self.prev_hash,
            "run_id": run_id,
            "run_seq": head.next_run_seq,
            "run_prev_hash": head.prev_hash,
            "ts": ts or utc_timestamp(),
            "type": event_type,
            "identity": identity,
            "data": data,
        }
        if request_id is not None:
            event["request_id"] = request_id
        return sign_event(event, self.record_key, self.kid)

    def advance(self, record: Record) -> None:
        """Move both chains and the tree past ``record`` (which must be the next one)."""
        event = record.event
        head = self.runs.setdefault(record.run_id, RunHead())
        if event["seq"] != self.next_seq or event["prev_hash"] != self.prev_hash:
            raise ValueError(f"record seq {event['seq']} does not continue the log at {self.next_seq}")
        if event["run_seq"] != head.next_run_seq or event["run_prev_hash"] != head.prev_hash:
            raise ValueError(f"record does not continue run {record.run_id!r}")
        self.next_seq += 1
        self.prev_hash = record.hash
        head.next_run_seq += 1
        head.prev_hash = record.hash
        self.tree.append(record.leaf())

    def append(self, run_id: str, event_type: str, data: dict[str, Any], **kwargs: Any) -> Record:
        """Build and advance in one step (for callers without a durability barrier)."""
        record = self.build(run_id, event_type, data, **kwargs)
        self.advance(record)
        return record
