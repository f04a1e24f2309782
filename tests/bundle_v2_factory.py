"""Builds ``tkbox.bundle.v2`` bundles in memory for tests, from a ``FakeLog`` or any list of records, and takes
them apart into ``{name: bytes}`` entries and back, so a test can tamper with any entry (and repair the manifest,
as an attacker would) while the zip stays canonical."""

from __future__ import annotations

import io
import zipfile
from collections.abc import Mapping, Sequence

from tkbox_daemon import strictjson
from tkbox_daemon.evidence.bundle import MANIFEST
from tkbox_daemon.evidence.bundle_stream import NODE_ENTRY, RUN_ENTRY_BYTES, RunBundleWriter, run_entry_name
from tkbox_daemon.evidence.records import SIGNER_RUN_ID, Record
from tkbox_daemon.evidence.verify_stream_layout import entry_digest
from tkbox_daemon.evidence.zipwrite import DEFLATED, STORED, ZipStreamWriter


def v2_bytes(records: Sequence[Record], run_id: str, checkpoint_note: bytes, policies: Mapping[str, bytes]) -> bytes:
    """The v2 bundle of ``run_id`` over exactly ``records`` (the log's prefix), as the exporter writes it."""
    handle = io.BytesIO()
    writer = RunBundleWriter(handle, run_id)
    for record in records:
        role = "run" if record.run_id == run_id else (
            "key" if record.run_id == SIGNER_RUN_ID and record.type == "signer.epoch" else None)
        writer.add(record.line, bytes.fromhex(record.hash[7:]), role)
    writer.finish(checkpoint_note, policies)
    return handle.getvalue()


def fake_log_v2(log: object, run_id: str, size: int | None = None) -> bytes:
    """``v2_bytes`` for a ``tests.evidence_factory.FakeLog`` (its whole log, or its first ``size`` records)."""
    records = log.records[: size or len(log.records)]  # type: ignore[attr-defined]
    wanted = {r.event["data"]["policy_hash"].removeprefix("sha256:") for r in records
              if r.run_id == run_id and r.type == "run.registered"}
    return v2_bytes(records, run_id, log.checkpoint(len(records)),  # type: ignore[attr-defined]
                    {digest: log.policies[digest] for digest in wanted})  # type: ignore[attr-defined]


def entries_of(data: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        return {info.filename: archive.read(info) for info in archive.infolist()}


def zip_of(entries: Mapping[str, bytes]) -> bytes:
    """A canonical v2 zip of ``entries`` in the given order (tree nodes stored, the rest deflated)."""
    handle = io.BytesIO()
    writer = ZipStreamWriter(handle)
    for name, content in entries.items():
        writer.add(name, content, STORED if NODE_ENTRY.fullmatch(name) else DEFLATED)
    writer.finish()
    return handle.getvalue()


def with_manifest_repaired(entries: Mapping[str, bytes]) -> dict[str, bytes]:
    """What an attacker does after editing entries: the manifest's hashes recomputed, its other fields kept."""
    manifest = strictjson.loads_object(entries[MANIFEST], max_bytes=1 << 20)
    files = {name: data for name, data in entries.items() if name != MANIFEST}
    manifest["files"] = {name: entry_digest(data) for name, data in files.items()}
    return {**files, MANIFEST: strictjson.canonical(manifest)}


def with_run_lines(entries: Mapping[str, bytes], lines: Sequence[bytes]) -> dict[str, bytes]:
    """``entries`` with the run's records replaced by ``lines`` (each ending in a newline), split as the writer
    splits them, in the run entries' place."""
    split: list[bytes] = []
    current = b""
    for line in lines:
        if current and len(current) + len(line) > RUN_ENTRY_BYTES:
            split.append(current)
            current = b""
        current += line
    split.append(current)
    others = {name: data for name, data in entries.items() if not name.startswith("records/run-")}
    return {**{run_entry_name(number): data for number, data in enumerate(split)}, **others}


def run_lines(entries: Mapping[str, bytes]) -> list[bytes]:
    """The run's record lines, from every run entry in order."""
    joined = b"".join(data for name, data in entries.items() if name.startswith("records/run-"))
    return joined.splitlines(keepends=True)
