"""verify, check by check: each tampering is caught by the check meant for it, with the record and a reason."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from evidence_factory import FakeLog, fixed_keys, policy_snapshot, standard_log, with_manifest_repaired

from tkbox_daemon import strictjson
from tkbox_daemon.evidence import bundle
from tkbox_daemon.evidence.records import sign_event
from tkbox_daemon.evidence.trust import build_trust, parse_trust_document
from tkbox_daemon.evidence.verify import verify_bundle
from tkbox_daemon.evidence.verify_report import VerifyReport

LOG, RUN_ID = standard_log()
GOOD = LOG.bundle_entries(RUN_ID)
RUN = bundle.RUN_RECORDS


def run(tmp_path: Path, entries: dict[str, bytes], *, repair: bool = True, trust=None) -> VerifyReport:  # type: ignore[no-untyped-def]
    path = tmp_path / "case.tkb"
    path.write_bytes(bundle.zip_bytes(with_manifest_repaired(entries) if repair else entries))
    return verify_bundle(path, trust or LOG.keys.trust())


def first(report: VerifyReport) -> tuple[str, str]:
    failure = report.first_failure
    assert failure is not None, report.render_text()
    return failure.check, failure.reason


def edit_line(index: int, change) -> dict[str, bytes]:  # type: ignore[no-untyped-def]
    lines = GOOD[RUN].splitlines(keepends=True)
    body = json.loads(lines[index])
    change(body)
    lines[index] = strictjson.compact(body) + b"\n"
    return {**GOOD, RUN: b"".join(lines)}


def resigned(index: int, **data_changes: object) -> dict[str, bytes]:
    """A run record whose data changed and was signed again by the real key (a signer that signed something odd)."""
    record = LOG.run_records(RUN_ID)[index]
    event = {**record.event, "data": {**record.event["data"], **data_changes}}
    lines = GOOD[RUN].splitlines(keepends=True)
    lines[index] = sign_event(event, LOG.keys.record_key, record.kid).line
    return {**GOOD, RUN: b"".join(lines)}


# ---- signatures ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("entries", "reason"), [
    (edit_line(3, lambda body: body["event"].update(ts="2026-01-01T00:00:00.000001Z")), "event hash does not match"),
    (edit_line(3, lambda body: body.update(v=True)), "record version is not 1"),
    (edit_line(3, lambda body: body.update(alg="ed448")), "record alg"),
    (edit_line(3, lambda body: body.update(extra=1)), "record keys are not exactly"),
    (edit_line(3, lambda body: body["event"].update(extra=1)), "closed set"),
    (edit_line(3, lambda body: body["event"].update(seq="3")), "'seq' is invalid"),
    (edit_line(3, lambda body: body["event"].update(run_id="run-a\n")), "'run_id' is invalid"),
    (edit_line(3, lambda body: body.update(kid="sha256:" + "0" * 64)), "not pinned"),
    (edit_line(3, lambda body: body.update(sig="!!")), "not base64"),
    (edit_line(3, lambda body: body.update(sig="AAAA")), "canonical base64 of 64 bytes"),
    (resigned(0, signer_isolation="root"), "signer_isolation"),
    (resigned(0, policy_hash="md5:1234"), "policy_hash"),
    (resigned(0, extra=True), "fields are not agent"),
    (resigned(0, request_mac="xyz"), "request_mac is not 32 hex"),
    (resigned(18, records="19"), "run.closed data"),
])
def test_record_level_problems_fail_signatures(tmp_path: Path, entries: dict[str, bytes], reason: str) -> None:
    check, why = first(run(tmp_path, entries))
    assert check == "signatures" and reason in why


@pytest.mark.parametrize("raw", [
    lambda line: line.replace(b'"v":1}', b'"v":1 }'),  # whitespace
    lambda line: line.replace(b'{"alg":"ed25519",', b'{"alg":"ed25519","alg":"ed25519",'),  # duplicate key
    lambda line: line.replace(b'"size":42', b'"size":42.0'),  # a float
    lambda line: line.replace(b'"size":42', b'"size":12345678901234567'),  # a big integer
    lambda line: line.replace(b'"reason":"allowed by r1"', b'"reason":"\\ud800"'),  # a lone surrogate
    lambda line: line.replace(b'"reason":"allowed by r1"', b'"reason":"\xff"'),  # invalid UTF-8
    lambda line: line.replace(b'"tool":"bash"', b'"tool":"\\u0062ash"'),  # a needless escape
])
def test_lines_not_in_strict_stored_form_fail_signatures(tmp_path: Path, raw) -> None:  # type: ignore[no-untyped-def]
    lines = GOOD[RUN].splitlines(keepends=True)
    changed = raw(lines[1])
    assert changed != lines[1]
    lines[1] = changed
    check, _ = first(run(tmp_path, {**GOOD, RUN: b"".join(lines)}))
    assert check == "signatures"


@pytest.mark.parametrize(("content", "reason"), [
    (GOOD[RUN].rstrip(b"\n"), "does not end with a newline"),
    (GOOD[RUN].replace(b"\n", b"\n\n", 1), "is empty"),
    (b"", "is empty"),
])
def test_jsonl_framing(tmp_path: Path, content: bytes, reason: str) -> None:
    check, why = first(run(tmp_path, {**GOOD, RUN: content}))
    assert check == "signatures" and reason in why


def test_millions_of_tiny_lines_are_refused_before_splitting(tmp_path: Path) -> None:
    check, why = first(run(tmp_path, {**GOOD, RUN: b"{}\n" * 250_001}))
    assert check == "signatures" and "more than 250000 lines" in why


def test_millions_of_tiny_proof_strings_are_refused_before_parsing(tmp_path: Path) -> None:
    proofs = b'{"proofs":{"0":[' + b",".join([b'""'] * 100_000) + b']},"tree_size":29}'
    check, why = first(run(tmp_path, {**GOOD, bundle.PROOFS: proofs}))
    assert check == "inclusion" and "implausibly many" in why


def test_request_macs_are_accepted(tmp_path: Path) -> None:
    log = FakeLog(fixed_keys("main"))
    log.register("run-a", request_mac="ab" * 16)
    log.decide("run-a", 1)
    log.close("run-a", request_mac="cd" * 16)
    path = tmp_path / "run.tkb"
    path.write_bytes(log.bundle_bytes("run-a"))
    assert verify_bundle(path, log.keys.trust()).integrity == "VERIFIED"


def test_an_unknown_record_type_fails_signatures(tmp_path: Path) -> None:
    log = FakeLog(fixed_keys("main"))
    log.register("run-a")
    log.append("run-a", "approval.granted", {"who": "me"})
    log.close("run-a")
    path = tmp_path / "run.tkb"
    path.write_bytes(log.bundle_bytes("run-a"))
    check, why = first(verify_bundle(path, log.keys.trust()))
    assert check == "signatures" and "unknown record type 'approval.granted'" in why


# ---- keys ---------------------------------------------------------------------------------------------------
def test_a_pinned_record_key_missing_from_the_epoch_fails_keys(tmp_path: Path) -> None:
    document = build_trust(record_key=LOG.keys.record_key.public_key(), log_vkey=LOG.keys.vkey,
                           record_keys=[fixed_keys("extra").record_key.public_key()])
    check, why = first(run(tmp_path, GOOD, trust=parse_trust_document(document)))
    assert check == "keys" and "not exactly the pinned ones (0 unpinned, 1 missing)" in why


def test_an_epoch_record_in_the_run_file_position_of_keys_fails_keys(tmp_path: Path) -> None:
    keys_line = LOG.run_records(RUN_ID)[0].line  # a run record where the epoch should be
    check, why = first(run(tmp_path, {**GOOD, bundle.KEY_RECORDS: keys_line}))
    assert check == "keys" and "not a signer.epoch record" in why


def test_another_logs_epoch_fails_keys(tmp_path: Path) -> None:
    sibling = FakeLog(fixed_keys("sibling", record_label="main"))  # same record key, another log
    check, why = first(run(tmp_path, {**GOOD, bundle.KEY_RECORDS: sibling.key_records()[0].line}))
    assert check == "keys" and "log_vkey is not a pinned log key" in why


# ---- manifest, bundle, checkpoint -----------------------------------------------------------------------------
def test_a_pretty_printed_manifest_fails_manifest(tmp_path: Path) -> None:
    manifest = json.loads(GOOD[bundle.MANIFEST])
    report = run(tmp_path, {**GOOD, bundle.MANIFEST: json.dumps(manifest, indent=1).encode()}, repair=False)
    assert first(report) == ("manifest", "manifest.json is not in canonical form (RFC 8785)")


def test_a_manifest_missing_an_entry_fails_manifest(tmp_path: Path) -> None:
    manifest = json.loads(GOOD[bundle.MANIFEST])
    del manifest["files"][bundle.PROOFS]
    check, why = first(run(tmp_path, {**GOOD, bundle.MANIFEST: strictjson.canonical(manifest)}, repair=False))
    assert check == "manifest" and "proofs.json is in the bundle but not in the manifest" in why


@pytest.mark.parametrize(("change", "reason"), [
    (lambda e: {**e, "notes.txt": b"hi"}, "unexpected entry 'notes.txt'"),
    (lambda e: {k: v for k, v in e.items() if k != bundle.PROOFS}, "required entry proofs.json is missing"),
    (lambda e: {**e, bundle.MANIFEST: b"{"}, "manifest.json is not strict JSON"),
    (lambda e: {**e, bundle.MANIFEST: b'{"format":"tkbox.bundle.v1"}'}, "fields are not exactly"),
])
def test_bundle_layout_problems_are_unusable(tmp_path: Path, change, reason: str) -> None:  # type: ignore[no-untyped-def]
    report = run(tmp_path, change(dict(GOOD)), repair=False)
    assert report.integrity == "UNUSABLE BUNDLE" and report.exit_code == 2
    check, why = first(report)
    assert check == "bundle" and reason in why
    assert all(c.status == "SKIP" for c in report.checks[2:])


def test_an_unknown_extra_signature_line_fails_checkpoint(tmp_path: Path) -> None:
    witness = LOG.checkpoint(key=fixed_keys("witness").log_key, origin="witness.example/w")
    note = GOOD[bundle.CHECKPOINT] + witness.split(b"\n\n")[1]
    check, why = first(run(tmp_path, {**GOOD, bundle.CHECKPOINT: note}))
    assert check == "checkpoint" and "signature lines besides the log key's" in why


def test_a_note_for_an_unpinned_origin_fails_checkpoint(tmp_path: Path) -> None:
    other = FakeLog(fixed_keys("other"))
    check, why = first(run(tmp_path, {**GOOD, bundle.CHECKPOINT: other.checkpoint()}))
    assert check == "checkpoint" and "no pinned log key is named" in why


def test_proofs_for_another_tree_size_fail_checkpoint(tmp_path: Path) -> None:
    proofs = json.loads(GOOD[bundle.PROOFS])
    proofs["tree_size"] += 1
    check, why = first(run(tmp_path, {**GOOD, bundle.PROOFS: strictjson.canonical(proofs)}))
    assert check == "checkpoint" and "proofs.json's tree_size" in why


# ---- run chain, inclusion, run closed, policy ----------------------------------------------------------------
def test_a_manifest_naming_another_run_fails_run_chain(tmp_path: Path) -> None:
    manifest = json.loads(GOOD[bundle.MANIFEST])
    manifest["run_id"] = "run-other"
    check, why = first(run(tmp_path, {**GOOD, bundle.MANIFEST: strictjson.canonical(manifest)}))
    assert check == "run chain" and "is not the bundle's run 'run-other'" in why


def test_a_run_starting_without_run_registered_fails_run_chain(tmp_path: Path) -> None:
    log = FakeLog(fixed_keys("main"))
    log.append("run-a", "capture.gap", {"kind": "client_seq_gap"})
    log.register("run-a")
    log.close("run-a")
    path = tmp_path / "run.tkb"
    path.write_bytes(log.bundle_bytes("run-a"))
    check, why = first(verify_bundle(path, log.keys.trust()))
    assert check == "run chain" and "must be run.registered" in why


def test_an_extra_proof_fails_inclusion(tmp_path: Path) -> None:
    proofs = json.loads(GOOD[bundle.PROOFS])
    proofs["proofs"]["1"] = proofs["proofs"]["0"]
    check, why = first(run(tmp_path, {**GOOD, bundle.PROOFS: strictjson.canonical(proofs)}))
    assert check == "inclusion" and "proof for seq 1, which is in neither records file" in why


@pytest.mark.parametrize(("mutate", "reason"), [
    (lambda data: data.replace(b'{"proofs":', b'{ "proofs":'), "canonical form"),
    (lambda data: data.replace(b'"tree_size":', b'"tree_size":1,"tree_size":'), "not strict canonical JSON"),
    (lambda data: data.replace(b'"0":[', b'"00":[', 1), "not a decimal seq"),
])
def test_malformed_proofs_fail_inclusion(tmp_path: Path, mutate, reason: str) -> None:  # type: ignore[no-untyped-def]
    check, why = first(run(tmp_path, {**GOOD, bundle.PROOFS: mutate(GOOD[bundle.PROOFS])}))
    assert check == "inclusion" and reason in why


def test_an_extra_policy_snapshot_fails_policy(tmp_path: Path) -> None:
    extra = policy_snapshot("extra")
    check, why = first(run(tmp_path, {**GOOD, bundle.policy_entry_name(extra): extra}))
    assert check == "policy snapshot" and "is not the snapshot run.registered names" in why


def test_a_snapshot_not_named_by_its_hash_fails_policy(tmp_path: Path) -> None:
    name = next(name for name in GOOD if name.startswith("policies/"))
    check, why = first(run(tmp_path, {**GOOD, name: GOOD[name] + b" "}))
    assert check == "policy snapshot" and "not named by the SHA-256 of its bytes" in why


def test_a_checkpoint_that_does_not_cover_the_run_fails(tmp_path: Path) -> None:
    """An honest export of a checkpoint before run.closed: the last record has no place in the tree."""
    size = LOG.run_records(RUN_ID)[-1].seq  # covers everything before run.closed
    entries = bundle.bundle_entries(run_id=RUN_ID, run_records=LOG.run_records(RUN_ID)[:-1],
                                    key_records=LOG.key_records(), checkpoint_note=LOG.checkpoint(size),
                                    tree_leaves=LOG.leaves(size), policies=LOG.policies)
    check, why = first(run(tmp_path, entries, repair=False))
    assert check == "run closed" and "no run.closed" in why
