"""The committed tampered-bundle corpus (tests/corpus/): every file gets the verdict ``expected.json`` records.

The corpus is generated once by ``tests/corpus/make_corpus.py`` and committed; these tests
only read it, so a change in the verifier's verdicts shows up here instead of being
regenerated away.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tkbox_daemon.evidence.verify import verify_bundle, verify_main

CORPUS = Path(__file__).parent / "corpus"
EXPECTED: dict[str, dict[str, object]] = json.loads((CORPUS / "expected.json").read_text())


@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_corpus_case_gets_its_expected_verdict(case: str) -> None:
    row = EXPECTED[case]
    report = verify_bundle(CORPUS / str(row["bundle"]), CORPUS / str(row["trust"]))
    failure = report.first_failure
    assert (report.exit_code, report.integrity, failure.check if failure else None) == (
        row["exit_code"], row["integrity"], row["first_failure"]
    ), report.render_text()


def test_the_good_bundle_in_the_corpus_verifies() -> None:
    report = verify_bundle(CORPUS / "good.tkb", CORPUS / "good.trust.json")
    assert report.integrity == "VERIFIED" and report.exit_code == 0
    assert all(check.status == "PASS" for check in report.checks)
    assert report.assurance is not None and report.assurance.startswith("dev; records ed25519; checkpoint ed25519 (")
    assert report.assurance.endswith("); signer same-user")


def test_the_corpus_covers_enough_fault_classes() -> None:
    faults = [case for case, row in EXPECTED.items() if row["first_failure"] is not None]
    assert len(faults) >= 13
    assert {row["first_failure"] for row in EXPECTED.values()} >= {
        "trust", "bundle", "manifest", "checkpoint", "keys", "signatures", "run chain", "inclusion", "run closed",
        "policy snapshot",
    }
    assert all((CORPUS / str(row["bundle"])).is_file() for row in EXPECTED.values())


def test_every_corpus_file_is_listed() -> None:
    listed = {str(row["bundle"]) for row in EXPECTED.values()}
    assert {path.name for path in CORPUS.glob("*.tkb")} == listed


@pytest.mark.parametrize(("case", "code"), [("good", 0), ("bad_signature", 1), ("zip_traversal", 2)])
def test_cli_exit_codes_on_corpus_files(case: str, code: int, capsys: pytest.CaptureFixture[str]) -> None:
    assert verify_main([str(CORPUS / f"{case}.tkb"), "--trust", str(CORPUS / "good.trust.json")]) == code
    assert "Integrity: " in capsys.readouterr().out
