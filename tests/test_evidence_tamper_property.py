"""Property: no tampering with a good bundle verifies, and no byte flip crashes the verifier.

A good bundle (about 20 run records, built by ``evidence_factory``) is changed once —
a byte changed or deleted, a line deleted, moved, duplicated, or a line spliced in
from another run or another log — in ``records/run.jsonl``, ``proofs.json``,
``checkpoint.note`` or ``records/keys.jsonl``, with the manifest repaired by the
attacker or not.  The verdict must be FAILED or UNUSABLE, never VERIFIED.  Separately,
raw byte flips and truncations anywhere in the zip must never verify and never raise.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from evidence_factory import FakeLog, fixed_keys, standard_log, with_manifest_repaired
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tkbox_daemon import strictjson
from tkbox_daemon.evidence import bundle
from tkbox_daemon.evidence.verify import verify_bundle

LOG, RUN_ID = standard_log()
GOOD = LOG.bundle_entries(RUN_ID)
GOOD_ZIP = bundle.zip_bytes(GOOD)
TRUST = LOG.keys.trust()


def _foreign_logs() -> tuple[FakeLog, FakeLog]:
    other = FakeLog(fixed_keys("other"))
    other.add_run(RUN_ID, decisions=8)
    sibling = FakeLog(fixed_keys("sibling", record_label="main"))  # shares our record key
    sibling.add_run(RUN_ID, decisions=8)
    return other, sibling


OTHER, SIBLING = _foreign_logs()
FOREIGN_RUN_LINES = (
    [record.line for record in LOG.run_records("run-other")]
    + [record.line for record in OTHER.run_records(RUN_ID)]
    + [record.line for record in SIBLING.run_records(RUN_ID)]
)
FOREIGN_KEY_LINES = [OTHER.key_records()[0].line, SIBLING.key_records()[0].line]
FOREIGN_NOTES = [OTHER.checkpoint(), SIBLING.checkpoint(), LOG.checkpoint(len(LOG.records) - 1)]
FOREIGN_PROOFS = strictjson.loads_object(OTHER.bundle_entries(RUN_ID)[bundle.PROOFS], max_bytes=1 << 24)["proofs"]
TARGETS = [bundle.RUN_RECORDS, bundle.PROOFS, bundle.CHECKPOINT, bundle.KEY_RECORDS]


def verdict(tmp_path: Path, data: bytes) -> str:
    path = tmp_path / "tampered.tkb"
    path.write_bytes(data)
    report = verify_bundle(path, TRUST)
    assert report.exit_code in (0, 1, 2)
    assert (report.exit_code == 0) == (report.integrity == "VERIFIED")
    return report.integrity


@st.composite
def line_tampering(draw: st.DrawFn, content: bytes, foreign: list[bytes]) -> bytes:
    """Delete, move, duplicate or splice whole lines."""
    lines = content.splitlines(keepends=True)
    operation = draw(st.sampled_from(["delete", "move", "duplicate", "splice_replace", "splice_insert"]))
    index = draw(st.integers(0, len(lines) - 1))
    if operation == "delete":
        del lines[index]
    elif operation == "move":
        line = lines.pop(index)
        lines.insert(draw(st.integers(0, len(lines))), line)
    elif operation == "duplicate":
        lines.insert(draw(st.integers(0, len(lines))), lines[index])
    elif operation == "splice_replace":
        lines[index] = draw(st.sampled_from(foreign))
    else:
        lines.insert(draw(st.integers(0, len(lines))), draw(st.sampled_from(foreign)))
    return b"".join(lines)


@st.composite
def byte_tampering(draw: st.DrawFn, content: bytes) -> bytes:
    """Change or delete one byte."""
    index = draw(st.integers(0, len(content) - 1))
    if draw(st.booleans()):
        return content[:index] + content[index + 1:]
    value = draw(st.integers(0, 255).filter(lambda byte: byte != content[index]))
    return content[:index] + bytes([value]) + content[index + 1:]


@st.composite
def proofs_tampering(draw: st.DrawFn, content: bytes) -> bytes:
    """Delete, swap, duplicate (textually) or splice in proofs, written back canonically."""
    document = strictjson.loads_object(content, max_bytes=1 << 24)
    proofs: dict[str, list[str]] = document["proofs"]
    keys = sorted(proofs)
    key = draw(st.sampled_from(keys))
    operation = draw(st.sampled_from(["delete", "swap", "duplicate", "splice", "reorder_nodes", "tree_size"]))
    if operation == "delete":
        del proofs[key]
    elif operation == "swap":
        other = draw(st.sampled_from([k for k in keys if k != key]))
        proofs[key], proofs[other] = proofs[other], proofs[key]
    elif operation == "duplicate":  # the same key twice, as raw text (a dict cannot hold it)
        entry = strictjson.canonical({key: proofs[key]})[1:-1]
        return content.replace(b'"proofs":{', b'"proofs":{' + entry + b",", 1)
    elif operation == "splice":
        foreign_key = draw(st.sampled_from(sorted(FOREIGN_PROOFS)))
        proofs[draw(st.sampled_from([key, foreign_key]))] = FOREIGN_PROOFS[foreign_key]
    elif operation == "reorder_nodes":
        assume(len(proofs[key]) > 1)
        proofs[key] = list(reversed(proofs[key]))
    else:
        document["tree_size"] += draw(st.sampled_from([-1, 1]))
    return strictjson.canonical(document)


@st.composite
def tampered_bundle(draw: st.DrawFn) -> bytes:
    target = draw(st.sampled_from(TARGETS))
    content = GOOD[target]
    kinds = ["bytes"]
    if target in (bundle.RUN_RECORDS, bundle.KEY_RECORDS, bundle.CHECKPOINT):
        kinds.append("lines")
    if target == bundle.PROOFS:
        kinds.append("proofs")
    if target == bundle.CHECKPOINT:
        kinds.append("replace")
    kind = draw(st.sampled_from(kinds))
    if kind == "bytes":
        changed = draw(byte_tampering(content))
    elif kind == "proofs":
        changed = draw(proofs_tampering(content))
    elif kind == "replace":
        changed = draw(st.sampled_from(FOREIGN_NOTES))
    else:
        foreign = FOREIGN_KEY_LINES if target == bundle.KEY_RECORDS else FOREIGN_RUN_LINES
        if target == bundle.CHECKPOINT:
            foreign = [line for note in FOREIGN_NOTES for line in note.splitlines(keepends=True)]
        changed = draw(line_tampering(content, foreign))
    assume(changed != content)
    entries = {**GOOD, target: changed}
    if draw(st.booleans()):
        entries = with_manifest_repaired(entries)
    return bundle.zip_bytes(entries)


def test_the_untouched_bundle_verifies(tmp_path: Path) -> None:
    assert verdict(tmp_path, GOOD_ZIP) == "VERIFIED"
    assert verdict(tmp_path, bundle.zip_bytes(with_manifest_repaired(dict(GOOD)))) == "VERIFIED"


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=tampered_bundle())
def test_no_single_tampering_verifies(tmp_path: Path, data: bytes) -> None:
    assert verdict(tmp_path, data) in ("FAILED", "UNUSABLE BUNDLE")


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(index=st.integers(0, len(GOOD_ZIP) - 1), value=st.integers(1, 255))
def test_no_raw_byte_flip_in_the_zip_verifies_or_crashes(tmp_path: Path, index: int, value: int) -> None:
    """A flip verifies only if every entry still inflates to exactly the original bytes (a deflate stream can
    encode the same content in more than one way); anything that changes content never verifies."""
    flipped = bytearray(GOOD_ZIP)
    flipped[index] ^= value
    outcome = verdict(tmp_path, bytes(flipped))
    if outcome == "VERIFIED":
        from tkbox_daemon.evidence.zipread import ZipLimits, read_zip

        path = tmp_path / "flipped-verified.tkb"
        path.write_bytes(bytes(flipped))
        assert read_zip(path, ZipLimits()) == GOOD, "a bundle whose content changed was VERIFIED"
    else:
        assert outcome in ("FAILED", "UNUSABLE BUNDLE")


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cut=st.integers(1, len(GOOD_ZIP)), from_start=st.booleans())
def test_no_truncation_verifies_or_crashes(tmp_path: Path, cut: int, from_start: bool) -> None:
    data = GOOD_ZIP[cut:] if from_start else GOOD_ZIP[:-cut]
    assert verdict(tmp_path, data) in ("FAILED", "UNUSABLE BUNDLE")


@pytest.mark.parametrize("target", TARGETS)
def test_byte_positions_across_each_target(tmp_path: Path, target: str) -> None:
    """Every byte of the small files, and 300 evenly spread bytes of the large ones, changed; manifest repaired."""
    content = GOOD[target]
    for index in range(0, len(content), max(1, len(content) // 300)):
        changed = content[:index] + bytes([content[index] ^ 0x01]) + content[index + 1:]
        entries = with_manifest_repaired({**GOOD, target: changed})
        assert verdict(tmp_path, bundle.zip_bytes(entries)) != "VERIFIED", (target, index)
