"""Generates the committed tampered-bundle corpus: one good bundle, its trust file, and one bundle per fault class.

Run once, by hand, from the repository root (as a user who may start a signer); the output is committed and the
tests never regenerate it (they verify the committed files against ``expected.json``, through the API and the CLI):

    .venv/bin/python tests/corpus/make_corpus.py

The runs are recorded by the real signer process (``real_signer_log``): ``good.tkb`` is what ``tkbox signer
export`` wrote and ``good.trust.json`` what ``tkbox signer trust`` wrote. The signer's keys come from fixed seeds,
so the trust file is the same on every run; the records carry the signer's own ids and timestamps, so a rerun
writes other bundle bytes, with the same verdicts and reasons (a reason names a seq, a key id or the policy pack's
hash, which change only when the recorded calls, the seeds or the pack do). Each fault changes the good
bundle as an attacker would; unless a fault is about the manifest, the attacker repairs it (recomputes the hashes)
so that the deeper check is the one that fires. ``expected.json`` records each file's verdict and the first
failure's check, record and reason, checked against the verifier before anything is written.
"""

from __future__ import annotations

import base64
import hashlib
import json
import stat
import sys
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from evidence_factory import RawMember, policy_snapshot, raw_zip, seeded_key, with_manifest_repaired  # noqa: E402
from real_signer_log import ALLOWED_COMMANDS, RealSigner, SignerLog  # noqa: E402

from tkbox_daemon import strictjson  # noqa: E402
from tkbox_daemon.evidence import bundle  # noqa: E402
from tkbox_daemon.evidence.records import Record, sign_event  # noqa: E402
from tkbox_daemon.evidence.verify import verify_bundle  # noqa: E402
from tkbox_daemon.evidence.zipread import DEFAULT_LIMITS, read_zip  # noqa: E402

RUN = bundle.RUN_RECORDS
Entries = dict[str, bytes]


def lines_of(entries: Entries, name: str = RUN) -> list[bytes]:
    return entries[name].splitlines(keepends=True)


def with_lines(entries: Entries, lines: list[bytes], name: str = RUN) -> Entries:
    return with_manifest_repaired({**entries, name: b"".join(lines)})


def proofs_of(entries: Entries) -> dict:
    return strictjson.loads_object(entries[bundle.PROOFS], max_bytes=1 << 26)


def with_proofs(entries: Entries, document: dict) -> Entries:
    return {**entries, bundle.PROOFS: strictjson.canonical(document)}


def restamped(record: Record, key_label: str = "record:main", **event_changes: object) -> bytes:
    """The record with changed event fields, hashed and signed again by a key from a seed."""
    return sign_event({**record.event, **event_changes}, seeded_key(key_label), record.kid).line


# ---- the faults ----------------------------------------------------------------------------------------
def edited_record_field(log: SignerLog, entries: Entries) -> Entries:
    lines = lines_of(entries)
    body = json.loads(lines[3])
    body["event"]["data"]["verdict"] = "deny"  # the hash and the signature are left as they were
    lines[3] = strictjson.compact(body) + b"\n"
    return with_lines(entries, lines)


def edited_record_rehashed(log: SignerLog, entries: Entries) -> Entries:
    lines = lines_of(entries)
    record = log.run_records("run-a")[3]
    event = {**record.event, "data": {**record.event["data"], "verdict": "deny"}}
    event_hash = "sha256:" + hashlib.sha256(strictjson.canonical(event)).hexdigest()
    body = {"v": 1, "event": event, "hash": event_hash, "alg": "ed25519", "kid": record.kid, "sig": record.sig}
    lines[3] = strictjson.compact(body) + b"\n"
    return with_lines(entries, lines)


def bad_signature(log: SignerLog, entries: Entries) -> Entries:
    lines = lines_of(entries)
    body = json.loads(lines[5])
    signature = bytearray(base64.b64decode(body["sig"]))
    signature[7] ^= 0x40
    body["sig"] = base64.b64encode(bytes(signature)).decode()
    lines[5] = strictjson.compact(body) + b"\n"
    return with_lines(entries, lines)


def noncanonical_sig_base64(log: SignerLog, entries: Entries) -> Entries:
    lines = lines_of(entries)
    body = json.loads(lines[5])
    sig = body["sig"]  # 64 bytes: "xx==" at the end, 4 spare bits in the last data character
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    body["sig"] = sig[:-3] + alphabet[alphabet.index(sig[-3]) ^ 1] + "=="
    assert base64.b64decode(body["sig"]) == base64.b64decode(sig)
    lines[5] = strictjson.compact(body) + b"\n"
    return with_lines(entries, lines)


def deleted_record(log: SignerLog, entries: Entries) -> Entries:
    lines = lines_of(entries)
    removed = log.run_records("run-a")[6]
    proofs = proofs_of(entries)
    del proofs["proofs"][str(removed.seq)]
    return with_lines(with_proofs(entries, proofs), lines[:6] + lines[7:])


def swapped_records(log: SignerLog, entries: Entries) -> Entries:
    lines = lines_of(entries)
    lines[4], lines[5] = lines[5], lines[4]
    return with_lines(entries, lines)


def duplicated_record(log: SignerLog, entries: Entries) -> Entries:
    lines = lines_of(entries)
    return with_lines(entries, lines[:5] + [lines[4]] + lines[5:])


def spliced_other_run(log: SignerLog, entries: Entries) -> Entries:
    """A genuine record of another run of the same log, with its genuine proof."""
    lines = lines_of(entries)
    other = log.run_records("run-other")[1]
    proofs = proofs_of(entries)
    full = proofs_of({bundle.PROOFS: strictjson.canonical(bundle.proofs_document(log.leaves(), [other.seq]))})
    proofs["proofs"][str(other.seq)] = full["proofs"][str(other.seq)]
    return with_lines(with_proofs(entries, proofs), lines[:8] + [other.line] + lines[8:])


def record_from_another_log(log: SignerLog, entries: Entries) -> Entries:
    """A record of a run with the same id in another signer's log, signed by that signer's (unpinned) key."""
    other_log = log.siblings["other"]
    lines = lines_of(entries)
    lines[4] = other_log.run_records("run-a")[4].line
    return with_lines(entries, lines)


def record_from_another_log_same_key(log: SignerLog, entries: Entries) -> Entries:
    """Another signer's log with the same record key: the signature is by a pinned key, the log_id is not ours."""
    other_log = log.siblings["sibling"]
    lines = lines_of(entries)
    lines[4] = other_log.run_records("run-a")[4].line
    return with_lines(entries, lines)


def truncated_run(log: SignerLog, entries: Entries) -> Entries:
    lines = lines_of(entries)
    closed = log.run_records("run-a")[-1]
    proofs = proofs_of(entries)
    del proofs["proofs"][str(closed.seq)]
    return with_lines(with_proofs(entries, proofs), lines[:-1])


def forged_checkpoint(log: SignerLog, entries: Entries) -> Entries:
    text = entries[bundle.CHECKPOINT]
    origin, size, root, rest = text.split(b"\n", 3)
    fake_root = base64.b64encode(bytes(32)).decode().encode()
    return with_manifest_repaired({**entries, bundle.CHECKPOINT: b"\n".join([origin, size, fake_root, rest])})


def checkpoint_other_key(log: SignerLog, entries: Entries) -> Entries:
    note = log.checkpoint(key=seeded_key("log:attacker"))
    return with_manifest_repaired({**entries, bundle.CHECKPOINT: note})


def wrong_tree_size(log: SignerLog, entries: Entries) -> Entries:
    """A genuine checkpoint the signer made earlier (when run-a closed, before run-other did)."""
    earlier = max(size for size in log.stored_checkpoint_sizes() if size < len(log.records))
    return with_manifest_repaired({**entries, bundle.CHECKPOINT: log.checkpoint(earlier)})


def missing_proof(log: SignerLog, entries: Entries) -> Entries:
    proofs = proofs_of(entries)
    del proofs["proofs"][str(log.run_records("run-a")[2].seq)]
    return with_manifest_repaired(with_proofs(entries, proofs))


def bad_proof(log: SignerLog, entries: Entries) -> Entries:
    proofs = proofs_of(entries)
    nodes = proofs["proofs"][str(log.run_records("run-a")[9].seq)]
    nodes[1] = base64.b64encode(bytes(range(32))).decode()
    return with_manifest_repaired(with_proofs(entries, proofs))


def manifest_lies(log: SignerLog, entries: Entries) -> Entries:
    lines = lines_of(entries)
    return {**entries, RUN: b"".join(lines[:-1])}  # the manifest is not repaired


def policy_snapshot_swapped(log: SignerLog, entries: Entries) -> Entries:
    kept = {name: data for name, data in entries.items() if not name.startswith(bundle.POLICY_DIR)}
    swapped = policy_snapshot("permissive")
    return with_manifest_repaired({**kept, bundle.policy_entry_name(swapped): swapped})


def wrong_format(log: SignerLog, entries: Entries) -> Entries:
    manifest = strictjson.loads_object(entries[bundle.MANIFEST], max_bytes=1 << 20)
    manifest["format"] = "tkbox.bundle.v9"
    return {**entries, bundle.MANIFEST: strictjson.canonical(manifest)}


def keys_file_emptied(log: SignerLog, entries: Entries) -> Entries:
    proofs = proofs_of(entries)
    del proofs["proofs"]["0"]
    return with_manifest_repaired(with_proofs({**entries, bundle.KEY_RECORDS: b""}, proofs))


# name: (what the attacker did, how, the check that must fail first)
FAULTS: dict[str, tuple[str, Callable[[SignerLog, Entries], Entries], str]] = {
    "edited_record_field": ("a record's data edited; hash and signature kept", edited_record_field, "signatures"),
    "edited_record_rehashed": ("a record's data edited and its hash recomputed; signature kept",
                               edited_record_rehashed, "signatures"),
    "bad_signature": ("a bit of a record's signature flipped", bad_signature, "signatures"),
    "noncanonical_sig_base64": ("a signature's spare base64 bits set (same bytes)", noncanonical_sig_base64,
                                "signatures"),
    "deleted_record": ("a record and its proof deleted", deleted_record, "run chain"),
    "swapped_records": ("two records swapped", swapped_records, "run chain"),
    "duplicated_record": ("a record duplicated", duplicated_record, "run chain"),
    "spliced_other_run": ("a genuine record of another run spliced in, with its proof", spliced_other_run,
                          "run chain"),
    "record_from_another_log": ("a record from another log (unpinned key)", record_from_another_log, "signatures"),
    "record_from_another_log_same_key": ("a record from another log sharing the record key",
                                         record_from_another_log_same_key, "run chain"),
    "truncated_run": ("run.closed and its proof cut off", truncated_run, "run closed"),
    "forged_checkpoint": ("the checkpoint's root replaced, signature kept", forged_checkpoint, "checkpoint"),
    "checkpoint_other_key": ("the checkpoint signed by another log key", checkpoint_other_key, "checkpoint"),
    "wrong_tree_size": ("a genuine earlier checkpoint that does not match the bundle's tree size",
                        wrong_tree_size, "checkpoint"),
    "missing_proof": ("one record's inclusion proof removed", missing_proof, "inclusion"),
    "bad_proof": ("one node of one inclusion proof replaced", bad_proof, "inclusion"),
    "manifest_lies": ("a record removed without updating the manifest", manifest_lies, "manifest"),
    "policy_snapshot_swapped": ("the policy snapshot replaced by another (correctly named)",
                                policy_snapshot_swapped, "policy snapshot"),
    "wrong_format": ("the manifest names another bundle format", wrong_format, "bundle"),
    "keys_file_emptied": ("records/keys.jsonl emptied, its proof removed", keys_file_emptied, "keys"),
}


def record_after_close_bundle(signer: RealSigner) -> bytes:
    """A run with a genuine record after its run.closed: an exec completed once its run was closed (the signer
    records such a completion), under the signer's own checkpoint."""
    run = signer.register("run-late")
    decisions = [signer.decide(run, command) for command in ALLOWED_COMMANDS[:4]]
    for decision_id in decisions[:3]:
        signer.call("complete", **run, decision_id=decision_id, status="ok", exit_code=0)
    signer.call("close_run", **run, reason="done")
    signer.call("complete", **run, decision_id=decisions[3], status="ok", exit_code=0)
    size = signer.call("checkpoint")["size"]
    return signer.log().prefix(size).bundle_bytes("run-late")


def open_run_bundle(signer: RealSigner) -> bytes:
    """An honest bundle of a run that was never closed, under the signer's own checkpoint."""
    run = signer.register("run-open")
    for command in ALLOWED_COMMANDS[:4]:
        signer.exec_(run, command)
    size = signer.call("checkpoint")["size"]
    return signer.log().prefix(size).bundle_bytes("run-open")


def hostile_zips(good: Entries) -> dict[str, tuple[str, bytes]]:
    canonical = [RawMember(name.encode(), data) for name, data in good.items()]
    symlink = RawMember(b"records/run.jsonl", b"/etc/passwd", method=0, external_attr=(stat.S_IFLNK | 0o777) << 16)
    without_run = [member for member in canonical if member.name != b"records/run.jsonl"]
    return {
        "zip_traversal": ("an entry named ../../evil.sh",
                          raw_zip([*canonical, RawMember(b"../../evil.sh", b"#!/bin/sh\n")])),
        "symlink_entry": ("records/run.jsonl is a symlink", raw_zip([*without_run, symlink])),
        "duplicate_entry_names": ("records/run.jsonl twice",
                                  raw_zip([*canonical, RawMember(b"records/run.jsonl", b"x\n")])),
        "zip_bomb": ("an entry declaring 1000 bytes that inflates to 48 MiB",
                     raw_zip([*canonical, RawMember(b"policies/bomb.json", bytes(48 << 20), size=1000)])),
        "oversize_entry": ("an entry declaring 64 MiB + 1 byte",
                           raw_zip([*canonical, RawMember(b"records/big.jsonl", b"", size=(64 << 20) + 1,
                                                          payload=b"\x03\x00")])),
        "not_a_zip": ("a text file", b"this is not a zip file, it is a note about one\n" * 4),
    }


def recorded_logs() -> tuple[SignerLog, dict[str, bytes]]:
    """The good bundle and trust file written by the real signer, its log under the bundle's checkpoint (with the
    logs of two other signers for the faults that need them), and the bundles of its later runs."""
    with RealSigner("main") as signer:
        signer.standard_runs()
        signer.tkbox("signer", "export", "--run", "run-a", "-o", str(HERE / "good.tkb"))
        signer.tkbox("signer", "trust", "-o", str(HERE / "good.trust.json"))
        manifest = strictjson.loads_object(read_zip(HERE / "good.tkb", DEFAULT_LIMITS)[bundle.MANIFEST],
                                           max_bytes=1 << 20)
        log = signer.log().prefix(manifest["tree_size"])
        later = {"record_after_close": record_after_close_bundle(signer), "open_run": open_run_bundle(signer)}
    for label, record_label in (("other", None), ("sibling", "main")):
        with RealSigner(label, record_label=record_label) as other:
            other.standard_runs()
            log.siblings[label] = other.log()
    if log.bundle_bytes("run-a") != (HERE / "good.tkb").read_bytes():
        raise SystemExit("the log read back does not rebuild the bundle tkbox signer export wrote")
    return log, later


def main() -> None:
    log, later = recorded_logs()
    good = log.bundle_entries("run-a")
    cases: dict[str, tuple[str, bytes, str | None]] = {"good": ("the untouched bundle", bundle.zip_bytes(good), None)}
    for name, (fault, build, check) in FAULTS.items():
        cases[name] = (fault, bundle.zip_bytes(build(log, dict(good))), check)
    cases["record_after_close"] = ("a signed record after run.closed", later["record_after_close"], "run closed")
    cases["open_run"] = ("an honest export of a run that was never closed", later["open_run"], "run closed")
    for name, (fault, data) in hostile_zips(good).items():
        cases[name] = (fault, data, "bundle")

    (HERE / "garbage.trust.json").write_bytes(b'{"format":"tkbox.trust.v1","log_vkeys":["nope"]}\n')
    expected: dict[str, dict[str, object]] = {}
    for name, (fault, data, check) in cases.items():
        (HERE / f"{name}.tkb").write_bytes(data)
        expected[name] = _expectation(f"{name}.tkb", "good.trust.json", fault, check)
    expected["garbage_trust"] = _expectation("good.tkb", "garbage.trust.json", "a trust file that does not parse",
                                             "trust")
    (HERE / "expected.json").write_text(json.dumps(expected, indent=2) + "\n")


def _expectation(bundle_name: str, trust_name: str, fault: str, check: str | None) -> dict[str, object]:
    """The intended verdict, checked against the verifier before anything is written."""
    if check is None:
        exit_code, integrity = 0, "VERIFIED"
    elif check in ("trust", "bundle"):
        exit_code, integrity = 2, "UNUSABLE TRUST FILE" if check == "trust" else "UNUSABLE BUNDLE"
    else:
        exit_code, integrity = 1, "FAILED"
    report = verify_bundle(HERE / bundle_name, HERE / trust_name)
    failure = report.first_failure
    actual = (report.exit_code, report.integrity, failure.check if failure else None)
    print(f"{bundle_name:40s} {trust_name:20s} {actual}  {failure.describe() if failure else ''}")
    if actual != (exit_code, integrity, check):
        raise SystemExit(f"{bundle_name}: expected {(exit_code, integrity, check)}, the verifier says {actual}")
    return {"bundle": bundle_name, "trust": trust_name, "fault": fault, "exit_code": exit_code,
            "integrity": integrity, "first_failure": check,
            "failure": failure.to_json() if failure else None}


if __name__ == "__main__":
    main()
