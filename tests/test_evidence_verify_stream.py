"""The streaming verifier of ``tkbox.bundle.v2`` bundles against the in-memory verifier of v1 bundles, and its
strictness.

- Property: the same run, tampered the same way (its records, keys or checkpoint; the manifest repaired by the
  attacker or not), gets the same verdict from both: exit code, integrity, the first failing check and the record
  it blames, and the reason (inclusion's reasons differ by design: v2 has no per-record proofs).
- Property: the tree a v2 bundle carries (records plus canonical blocks) folds to the tree's root, and the writer's
  blocks are the canonical ones.
- Property: in a run split over many entries (entry sizes made small), tampering with any entry — a record, a
  tree node, the checkpoint, the order or the set of entries — never verifies.
- The layout rules refuse, with a reason: an unknown entry, entries out of order, a wrong compression method, a run
  entry not filled before the next, a node entry of a wrong size.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from pathlib import Path

import bundle_v2_factory as v2
import pytest
from evidence_factory import FakeLog, fixed_keys, standard_log
from evidence_factory import with_manifest_repaired as v1_repaired
from hypothesis import assume, given
from hypothesis import strategies as st
from test_evidence_tamper_property import FOREIGN_KEY_LINES, FOREIGN_NOTES, FOREIGN_RUN_LINES, byte_tampering
from test_evidence_tamper_property import line_tampering as lines_changed

from tkbox_daemon.evidence import (
    bundle,
    bundle_stream,
    merkle,
    tree_gaps,
    verify_stream,
    verify_stream_layout,
)
from tkbox_daemon.evidence.verify import verify_bundle
from tkbox_daemon.evidence.verify_report import VerifyReport

LOG, RUN_ID = standard_log()
TRUST = LOG.keys.trust()
V1 = LOG.bundle_entries(RUN_ID)
V2 = v2.entries_of(v2.fake_log_v2(LOG, RUN_ID))


def _verify(tmp_path: Path, data: bytes, name: str) -> VerifyReport:
    path = tmp_path / name
    path.write_bytes(data)
    report = verify_bundle(path, TRUST)
    assert report.exit_code in (0, 1, 2) and (report.exit_code == 0) == (report.integrity == "VERIFIED")
    return report


def _same_verdict(old: VerifyReport, new: VerifyReport) -> None:
    assert (new.exit_code, new.integrity) == (old.exit_code, old.integrity), (old.render_text(), new.render_text())
    before, after = old.first_failure, new.first_failure
    assert (before is None) == (after is None)
    if before is not None and after is not None:
        assert (after.check, after.seq, after.run_seq) == (before.check, before.seq, before.run_seq) or (
            before.check == after.check == "inclusion"), (old.render_text(), new.render_text())
        if before.check != "inclusion":
            assert re.sub(r"records/run-\d{6}\.jsonl", "records/run.jsonl", after.reason) == before.reason
    failed_chain = old.check("run chain").status == "FAIL"  # type: ignore[union-attr]
    for check_old, check_new in zip(old.checks, new.checks, strict=True):
        if check_old.name not in ("bundle", "inclusion") or (check_old.name == "inclusion" and not failed_chain):
            assert check_new.status == check_old.status, (check_old, check_new)
    assert (new.counts.to_json() if new.counts else None) == (old.counts.to_json() if old.counts else None)


TARGETS = [bundle.RUN_RECORDS, bundle.KEY_RECORDS, bundle.CHECKPOINT]


@given(data=st.data())
def test_a_tampered_run_gets_the_same_verdict_streamed_as_in_memory(tmp_path_factory, data) -> None:
    target = data.draw(st.sampled_from([*TARGETS, None]))
    content = V1[target] if target else b""
    changed = content
    if target is not None:
        kind = data.draw(st.sampled_from(["bytes", "lines", "replace"] if target == bundle.CHECKPOINT
                                         else ["bytes", "lines"]))
        if kind == "bytes":
            changed = data.draw(byte_tampering(content))
        elif kind == "replace":
            changed = data.draw(st.sampled_from(FOREIGN_NOTES))
        else:
            foreign = FOREIGN_KEY_LINES if target == bundle.KEY_RECORDS else FOREIGN_RUN_LINES
            if target == bundle.CHECKPOINT:
                foreign = [line for note in FOREIGN_NOTES for line in note.splitlines(keepends=True)]
            changed = data.draw(lines_changed(content, foreign))
        assume(changed != content)
        assume(target != bundle.RUN_RECORDS or changed)  # v2 has no empty run entry: its layout refuses one
    old_entries = {**V1, target: changed} if target else dict(V1)
    if target == bundle.RUN_RECORDS:
        new_entries = v2.with_run_lines(V2, changed.splitlines(keepends=True))
    else:
        new_entries = {**V2, target: changed} if target else dict(V2)
    if target and data.draw(st.booleans()):
        old_entries, new_entries = v1_repaired(old_entries), v2.with_manifest_repaired(new_entries)
    tmp_path = tmp_path_factory.mktemp("same")
    old = _verify(tmp_path, bundle.zip_bytes(old_entries), "v1.tkb")
    new = _verify(tmp_path, v2.zip_of(new_entries), "v2.tkb")
    _same_verdict(old, new)


@given(st.integers(1, 300), st.lists(st.integers(0, 299), max_size=12, unique=True))
def test_records_and_canonical_blocks_fold_to_the_root(size: int, carried: list[int]) -> None:
    leaves = [bytes([index % 256, index // 256]) * 16 for index in range(size)]
    carried_set = {index for index in carried if index < size}
    frontier, folder = tree_gaps.Frontier(), tree_gaps.StretchFolder()
    for index, leaf in enumerate(leaves):
        if index in carried_set:
            start = folder.start
            blocks = folder.take()
            assert [height for _, height in tree_gaps.canonical_blocks(start, index)] == [h for h, _ in blocks]
            for height, node in blocks:
                frontier.add(node, height)
            frontier.add(leaf)
            folder.skip()
        else:
            folder.append(leaf)
    for height, node in folder.take():
        frontier.add(node, height)
    assert frontier.size == size and frontier.root() == merkle.root(leaves)


def test_canonical_blocks_are_aligned_maximal_and_cover_the_stretch() -> None:
    for start in range(0, 70):
        for end in range(start, 140):
            blocks = list(tree_gaps.canonical_blocks(start, end))
            position = start
            for first, height in blocks:
                assert first == position and first % (1 << height) == 0 and first + (1 << height) <= end
                position += 1 << height
            assert position == end and len(blocks) <= 2 * max(end - start, 1).bit_length()


# ---- a run over many entries ------------------------------------------------------------------------------------
SMALL_RUN_ENTRY, SMALL_NODE_ENTRY = 16 << 10, 64


@contextlib.contextmanager
def small_entries() -> Iterator[None]:
    """Run entries of 16 KiB and node entries of two nodes, so a few hundred records span many entries."""
    saved = []
    for module, name, value in ((bundle_stream, "RUN_ENTRY_BYTES", SMALL_RUN_ENTRY),
                                (verify_stream, "RUN_ENTRY_BYTES", SMALL_RUN_ENTRY),
                                (verify_stream_layout, "RUN_ENTRY_BYTES", SMALL_RUN_ENTRY),
                                (v2, "RUN_ENTRY_BYTES", SMALL_RUN_ENTRY),
                                (bundle_stream, "NODE_ENTRY_BYTES", SMALL_NODE_ENTRY),
                                (verify_stream_layout, "NODE_ENTRY_BYTES", SMALL_NODE_ENTRY)):
        saved.append((module, name, getattr(module, name)))
        setattr(module, name, value)
    try:
        yield
    finally:
        for module, name, value in saved:
            setattr(module, name, value)


def _big_log() -> tuple[FakeLog, str]:
    log = FakeLog(fixed_keys("main"))
    log.add_run("run-big", decisions=150)
    log.close("run-other")
    return log, "run-big"


BIG_LOG, BIG_RUN = _big_log()
with small_entries():
    BIG = v2.entries_of(v2.fake_log_v2(BIG_LOG, BIG_RUN))


def _verify_big(tmp_path: Path, entries: dict[str, bytes]) -> VerifyReport:
    with small_entries():
        path = tmp_path / "big.tkb"
        path.write_bytes(v2.zip_of(entries))
        report = verify_bundle(path, BIG_LOG.keys.trust(), parallel_min=50, workers=2)
    assert report.exit_code in (0, 1, 2) and (report.exit_code == 0) == (report.integrity == "VERIFIED")
    return report


def test_the_big_run_spans_many_entries_and_verifies(tmp_path) -> None:
    runs = [name for name in BIG if name.startswith("records/run-")]
    nodes = [name for name in BIG if name.startswith("tree/")]
    assert len(runs) > 5 and len(nodes) > 3
    report = _verify_big(tmp_path, BIG)
    assert report.verified, report.render_text()
    assert report.counts is not None and report.counts.execs == 150


@st.composite
def big_tampering(draw: st.DrawFn) -> dict[str, bytes]:
    entries = dict(BIG)
    names = list(entries)
    runs = [name for name in names if name.startswith("records/run-")]
    nodes = [name for name in names if name.startswith("tree/")]
    kind = draw(st.sampled_from(["record byte", "record line", "node byte", "drop node entry", "swap entries",
                                 "swap contents", "checkpoint"]))
    if kind == "record byte":
        name = draw(st.sampled_from(runs))
        entries[name] = draw(byte_tampering(entries[name]))
    elif kind == "record line":
        lines = v2.run_lines(entries)
        entries = v2.with_run_lines(entries, draw(lines_changed(b"".join(lines), FOREIGN_RUN_LINES)).splitlines(
            keepends=True))
    elif kind == "node byte":
        name = draw(st.sampled_from(nodes))
        at = draw(st.integers(0, len(entries[name]) - 1))
        entries[name] = entries[name][:at] + bytes([entries[name][at] ^ 1]) + entries[name][at + 1:]
    elif kind == "drop node entry":
        del entries[draw(st.sampled_from(nodes))]
    elif kind == "swap entries":  # two entries of one kind change places in the zip
        group = draw(st.sampled_from([runs, nodes]))
        first, second = draw(st.lists(st.sampled_from(group), min_size=2, max_size=2, unique=True))
        order = list(entries)
        i, j = order.index(first), order.index(second)
        order[i], order[j] = order[j], order[i]
        entries = {name: entries[name] for name in order}
    elif kind == "swap contents":  # two entries of one kind swap their bytes, names in order
        group = draw(st.sampled_from([runs, nodes]))
        first, second = draw(st.lists(st.sampled_from(group), min_size=2, max_size=2, unique=True))
        assume(entries[first] != entries[second])
        entries[first], entries[second] = entries[second], entries[first]
    else:
        entries[bundle.CHECKPOINT] = BIG_LOG.checkpoint(len(BIG_LOG.records) - 1)
    assume(entries != BIG)
    if kind != "drop node entry" and draw(st.booleans()):
        entries = v2.with_manifest_repaired(entries)
    return entries


@given(big_tampering())
def test_tampering_anywhere_in_a_run_over_many_entries_never_verifies(tmp_path_factory, entries) -> None:
    report = _verify_big(tmp_path_factory.mktemp("big"), entries)
    assert not report.verified, report.render_text()


def _refusal(tmp_path: Path, entries: dict[str, bytes], *, repaired: bool = True) -> str:
    report = _verify(tmp_path, v2.zip_of(v2.with_manifest_repaired(entries) if repaired else entries), "bad.tkb")
    assert report.integrity == "UNUSABLE BUNDLE", report.render_text()
    failure = report.first_failure
    assert failure is not None and failure.check == "bundle"
    return failure.reason


def test_layout_refusals_name_the_rule(tmp_path) -> None:
    assert "unexpected entry 'extra.txt'" in _refusal(tmp_path, {**V2, "extra.txt": b"x"}, repaired=False)
    order = list(V2)
    swapped = {name: V2[name] for name in [order[1], order[0], *order[2:]]}
    assert "where records/keys.jsonl belongs" in _refusal(tmp_path, swapped) or "out of" in _refusal(tmp_path, swapped)
    renamed = {("records/run-000001.jsonl" if name.startswith("records/run-") else name): data
               for name, data in V2.items()}
    assert "out of sequence" in _refusal(tmp_path, renamed)
    nodes = next(name for name in V2 if name.startswith("tree/"))
    assert "whole 32-byte nodes" in _refusal(tmp_path, {**V2, nodes: V2[nodes] + b"x"})
    with small_entries():
        runs = [name for name in BIG if name.startswith("records/run-")]
        first = BIG[runs[0]]
        cut = first.rindex(b"\n", 0, len(first) - 1) + 1  # the first entry without its last line: not full
        report = _verify_big(tmp_path, v2.with_manifest_repaired({**BIG, runs[0]: first[:cut]}))
    assert report.integrity == "UNUSABLE BUNDLE" and "ends before it is full" in report.first_failure.reason


def test_a_v2_bundle_with_a_wrong_compression_method_is_refused(tmp_path) -> None:
    import io

    from tkbox_daemon.evidence.zipwrite import STORED, ZipStreamWriter

    handle = io.BytesIO()
    writer = ZipStreamWriter(handle)
    for name, content in v2.with_manifest_repaired(V2).items():
        writer.add(name, content, STORED)  # records stored instead of deflated
    writer.finish()
    report = _verify(tmp_path, handle.getvalue(), "stored.tkb")
    assert report.integrity == "UNUSABLE BUNDLE" and "compression method 0, not 8" in report.first_failure.reason


def test_a_v2_run_record_line_is_named_by_its_entry(tmp_path) -> None:
    with small_entries():
        runs = [name for name in BIG if name.startswith("records/run-")]
        entry = BIG[runs[2]]
        at = entry.index(b'"sig":"') + 10
        broken = {**BIG, runs[2]: entry[:at] + (b"A" if entry[at:at + 1] != b"A" else b"B") + entry[at + 1:]}
    report = _verify_big(tmp_path, v2.with_manifest_repaired(broken))
    assert report.first_failure is not None and report.first_failure.check == "signatures"
    assert report.first_failure.reason.startswith(f"{runs[2]} line 1: ")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs processes")
def test_a_v2_bundle_verifies_the_same_with_and_without_the_pool(tmp_path) -> None:
    with small_entries():
        path = tmp_path / "big.tkb"
        path.write_bytes(v2.zip_of(BIG))
        alone = verify_bundle(path, BIG_LOG.keys.trust(), parallel_min=10**9)
        pooled = verify_bundle(path, BIG_LOG.keys.trust(), parallel_min=1, workers=3)
    assert alone.to_json() == pooled.to_json() and alone.verified


def test_the_approvals_check_refuses_to_remember_more_than_its_limit(monkeypatch) -> None:
    from tkbox_daemon.evidence import verify_stream_run
    from tkbox_daemon.evidence.verify_records import RecordFacts

    monkeypatch.setattr(verify_stream_run, "MAX_APPROVAL_IDS", 2)
    checks = verify_stream_run.StreamChecks("run-a", [], lambda line: f"line {line}", None, lambda: None)
    checks.add([RecordFacts(n + 1, seq=n, run_seq=n, run_id="run-a", log_id="l", prev_hash="p", run_prev_hash="p",
                            hash="sha256:" + "0" * 64, type="policy.decision",
                            data={"decision_id": f"dec-{n:032x}", "verdict": "ask", "tool": "Bash"})
                for n in range(3)])
    result = checks.approvals()
    assert result.status == "FAIL" and "more than 2 ask decisions" in result.detail
