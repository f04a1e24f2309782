"""verify: the report and its text and JSON output, the CLI's exit codes, robustness, and the parallel path."""

from __future__ import annotations

import base64
import json
import random
from pathlib import Path

import pytest
from evidence_factory import FakeLog, fixed_keys, standard_log, with_manifest_repaired
from hypothesis import given, settings
from hypothesis import strategies as st

from tkbox_daemon.evidence import bundle, merkle, verify
from tkbox_daemon.evidence.trust import write_trust
from tkbox_daemon.evidence.verify import verify_bundle, verify_main
from tkbox_daemon.evidence.verify_inclusion import InclusionChecker
from tkbox_daemon.evidence.verify_report import CHECK_NAMES

LOG, RUN_ID = standard_log()
GOOD = LOG.bundle_entries(RUN_ID)
DASH = "\u2014"


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    """The good bundle and its trust file on disk."""
    path, trust = tmp_path / "run.tkb", tmp_path / "run.trust.json"
    path.write_bytes(bundle.zip_bytes(GOOD))
    write_trust(trust, LOG.keys.trust_document())
    return path, trust


def tampered(tmp_path: Path, entries: dict[str, bytes]) -> Path:
    path = tmp_path / "tampered.tkb"
    path.write_bytes(bundle.zip_bytes(with_manifest_repaired(entries)))
    return path


def test_a_good_bundle_verifies_with_every_check_passing(files: tuple[Path, Path]) -> None:
    report = verify_bundle(*files)
    assert [check.name for check in report.checks] == list(CHECK_NAMES)
    assert all(check.status == "PASS" for check in report.checks)
    assert (report.integrity, report.exit_code, report.first_failure) == ("VERIFIED", 0, None)
    assert report.assurance == f"dev; records ed25519; checkpoint ed25519 ({LOG.keys.origin}); signer same-user"


def test_text_output_format(files: tuple[Path, Path]) -> None:
    lines = verify_bundle(*files).render_text().splitlines()
    count = len(CHECK_NAMES)
    assert [line.split(f" {DASH} ")[0] for line in lines[:count]] == [f"[PASS] {name}" for name in CHECK_NAMES]
    assert lines[count:] == ["", "Integrity: VERIFIED.",
                          f"Assurance: dev; records ed25519; checkpoint ed25519 ({LOG.keys.origin}); signer same-user",
                          "Counts: 8 decisions (8 allow); 0 approvals; 8 execs; 0 writes"]


def test_a_separate_user_signer_gives_local_assurance(tmp_path: Path) -> None:
    log = FakeLog(fixed_keys("main"))
    log.add_run("run-a", isolation="separate-user")
    path = tmp_path / "run.tkb"
    path.write_bytes(log.bundle_bytes("run-a"))
    report = verify_bundle(path, log.keys.trust())
    assert report.assurance == f"local; records ed25519; checkpoint ed25519 ({log.keys.origin}); signer separate-user"


def test_failure_output_names_the_check_and_the_record(tmp_path: Path) -> None:
    lines = GOOD[bundle.RUN_RECORDS].splitlines(keepends=True)
    lines[4], lines[5] = lines[5], lines[4]
    report = verify_bundle(tampered(tmp_path, {**GOOD, bundle.RUN_RECORDS: b"".join(lines)}), LOG.keys.trust())
    failure = report.first_failure
    assert failure is not None and (failure.check, failure.run_seq) == ("run chain", 5)
    text = report.render_text()
    assert f"[FAIL] run chain {DASH} record seq {failure.seq}, run_seq 5: run_seq is 5, not 4" in text
    assert "Integrity: FAILED.\n" in text
    assert f"First failure: run chain {DASH} record seq {failure.seq}, run_seq 5: " in text
    assert "Assurance: none" in text
    assert "Counts: none (integrity not verified)" in text and report.counts is None
    assert report.exit_code == 1


def test_checks_that_cannot_run_are_skipped(tmp_path: Path) -> None:
    entries = {**GOOD, bundle.CHECKPOINT: LOG.checkpoint(key=fixed_keys("attacker").log_key)}
    report = verify_bundle(tampered(tmp_path, entries), LOG.keys.trust())
    statuses = {check.name: check.status for check in report.checks}
    assert statuses["checkpoint"] == "FAIL"
    assert statuses["inclusion"] == statuses["run closed"] == "SKIP"
    assert statuses["signatures"] == statuses["run chain"] == "PASS"
    assert "[SKIP] inclusion" in report.render_text()


def test_json_output(files: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path, trust = files
    assert verify_main([str(path), "--trust", str(trust), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert list(document) == ["exit_code", "integrity", "assurance", "checks", "first_failure", "counts"]
    assert document["exit_code"] == 0 and document["integrity"] == "VERIFIED" and document["first_failure"] is None
    assert document["counts"] == {"decisions": {"allow": 8}, "approvals": {}, "execs": 8, "writes": 0}
    assert [check["name"] for check in document["checks"]] == list(CHECK_NAMES)
    assert set(document["checks"][0]) == {"name", "status", "detail"}

    bad = GOOD[bundle.RUN_RECORDS].replace(b'"verdict":"allow"', b'"verdict":"deny"', 1)
    bad_path = tampered(tmp_path, {**GOOD, bundle.RUN_RECORDS: bad})
    assert verify_main([str(bad_path), "--trust", str(trust), "--json"]) == 1
    document = json.loads(capsys.readouterr().out)
    assert document["integrity"] == "FAILED" and document["assurance"] is None and document["counts"] is None
    assert set(document["first_failure"]) == {"check", "seq", "run_seq", "reason"}
    assert document["first_failure"]["check"] == "signatures"
    assert document["first_failure"]["reason"].endswith("event hash does not match the event")


def test_cli_exit_codes(files: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path, trust = files
    assert verify_main([str(path), "--trust", str(trust)]) == 0
    assert "Integrity: VERIFIED." in capsys.readouterr().out
    garbage = tmp_path / "garbage.json"
    garbage.write_bytes(b"\x00garbage")
    assert verify_main([str(path), "--trust", str(garbage)]) == 2
    assert "Integrity: UNUSABLE TRUST FILE." in capsys.readouterr().out
    not_zip = tmp_path / "notes.txt"
    not_zip.write_text("hello")
    assert verify_main([str(not_zip), "--trust", str(trust)]) == 2
    assert "Integrity: UNUSABLE BUNDLE." in capsys.readouterr().out
    assert verify_main([str(tmp_path / "absent.tkb"), "--trust", str(trust)]) == 2


def test_cli_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert verify_main([]) == 2
    assert verify_main(["run.tkb"]) == 2  # --trust is required
    assert verify_main(["run.tkb", "--trust", "t.json", "--frobnicate"]) == 2
    assert "usage: tkbox verify" in capsys.readouterr().err


@pytest.mark.parametrize("content", [b"", b"PK\x05\x06" + bytes(18), b"PK" * 1000])
def test_odd_files_are_unusable_not_crashes(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "odd.tkb"
    path.write_bytes(content)
    assert verify_bundle(path, LOG.keys.trust()).integrity == "UNUSABLE BUNDLE"


def test_a_directory_or_a_huge_sparse_file_is_unusable(tmp_path: Path) -> None:
    assert verify_bundle(tmp_path, LOG.keys.trust()).exit_code == 2
    sparse = tmp_path / "sparse.tkb"
    with open(sparse, "wb") as handle:
        handle.truncate(4 << 30)
    report = verify_bundle(sparse, LOG.keys.trust())
    assert report.exit_code == 2 and "limit" in report.render_text()


def test_an_unexpected_error_is_unusable_with_its_message(files: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    def explode(evidence: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(verify, "check_manifest", explode)
    report = verify_bundle(*files)
    assert report.integrity == "UNUSABLE BUNDLE" and report.exit_code == 2
    assert report.first_failure is not None and "RuntimeError: boom" in report.first_failure.reason


def test_the_trust_may_be_given_parsed_or_as_a_path(files: tuple[Path, Path]) -> None:
    path, trust = files
    assert verify_bundle(path, trust).to_json() == verify_bundle(path, LOG.keys.trust()).to_json()


# ---- the parallel path gives the same verdicts as the sequential one ---------------------------------------
BIG_LOG = FakeLog(fixed_keys("big"))
BIG_LOG.add_run("run-big", decisions=150)
BIG = BIG_LOG.bundle_entries("run-big")


def _line_edit(entries: dict[str, bytes]) -> dict[str, bytes]:
    lines = entries[bundle.RUN_RECORDS].splitlines(keepends=True)
    lines[200] = lines[200].replace(b'"status":"ok"', b'"status":"no"')
    return {**entries, bundle.RUN_RECORDS: b"".join(lines)}


def _proof_edit(entries: dict[str, bytes]) -> dict[str, bytes]:
    data = entries[bundle.PROOFS]
    at = data.index(b'"250":["') + 8
    return {**entries, bundle.PROOFS: data[:at] + (b"B" if data[at:at + 1] == b"A" else b"A") + data[at + 1:]}


@pytest.mark.parametrize("edit", [None, _line_edit, _proof_edit])
def test_parallel_and_sequential_reports_are_identical(tmp_path: Path, edit, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    entries = with_manifest_repaired(edit(dict(BIG))) if edit else BIG
    path = tmp_path / "big.tkb"
    path.write_bytes(bundle.zip_bytes(entries))
    trust = BIG_LOG.keys.trust()
    sequential = verify_bundle(path, trust, parallel_min=10**9)
    pools: list[bool] = []

    class Watched(verify.RecordCheck):
        def chunks(self):  # type: ignore[no-untyped-def]
            pools.append(self.parallel)
            return super().chunks()

    monkeypatch.setattr(verify, "RecordCheck", Watched)
    parallel = verify_bundle(path, trust, parallel_min=0, workers=2)
    assert pools == [True]
    assert parallel.to_json() == sequential.to_json()
    assert (sequential.integrity == "VERIFIED") == (edit is None)


def test_a_broken_pool_falls_back_to_checking_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tkbox_daemon.evidence import verify_pool

    class Broken(verify_pool.ProcessPoolExecutor):
        def submit(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            future = super().submit(*args, **kwargs)
            if args[2] > 100:  # chunks after the first few fail, as if a worker had died
                failing: verify_pool.Future = verify_pool.Future()
                failing.set_exception(RuntimeError("worker died"))
                return failing
            return future

    monkeypatch.setattr(verify_pool, "ProcessPoolExecutor", Broken)
    path = tmp_path / "big.tkb"
    path.write_bytes(bundle.zip_bytes(BIG))
    report = verify_bundle(path, BIG_LOG.keys.trust(), parallel_min=0, workers=2)
    assert report.integrity == "VERIFIED", report.render_text()


# ---- the inclusion checker's cache agrees with a plain RFC 9162 verifier ------------------------------------
@settings(max_examples=150, deadline=None)
@given(size=st.integers(1, 300), seed=st.integers(0, 2**32), tamper=st.sampled_from(
    ["none", "node", "short", "long", "index", "leaf"]))
def test_cached_inclusion_agrees_with_plain_verification(size: int, seed: int, tamper: str) -> None:
    rng = random.Random(seed)
    leaves = [merkle.leaf_hash(rng.randbytes(4)) for _ in range(size)]
    levels = merkle.tree_levels(leaves)
    root = merkle.root_from_levels(levels)
    checker = InclusionChecker(size, root)
    indexes = rng.sample(range(size), k=min(size, rng.randint(1, 40)))
    for position, index in enumerate(indexes):
        proof = merkle.inclusion_proof(levels, index)
        leaf, claimed = leaves[index], index
        if position == len(indexes) - 1 and tamper != "none":  # tamper with the last proof only
            if tamper == "node" and proof:
                proof[rng.randrange(len(proof))] = rng.randbytes(32)
            elif tamper == "short" and proof:
                proof = proof[:-1]
            elif tamper == "long":
                proof = [*proof, rng.randbytes(32)]
            elif tamper == "index" and size > 1:
                claimed = (index + 1) % size
            elif tamper == "leaf":
                leaf = rng.randbytes(32)
        texts = [base64.b64encode(node).decode() for node in proof]
        expected = merkle.verify_inclusion(leaf, claimed, size, proof, root)
        assert (checker.check(claimed, leaf, texts) is None) == expected
