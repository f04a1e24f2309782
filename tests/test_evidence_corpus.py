"""The committed tampered-bundle corpus (tests/corpus/): every file gets the verdict ``expected.json`` records — the
exit status, the integrity, the first failing check and why it failed (the record to blame and the reason) — from
the verifier's API and from the ``tkbox verify`` command, in text and in JSON.

The corpus is generated once by ``tests/corpus/make_corpus.py`` from runs the real signer recorded, and committed;
these tests only read it, so a change in the verifier's verdicts shows up here instead of being regenerated away.
"""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tkbox_daemon import strictjson
from tkbox_daemon.evidence.bundle import RUN_RECORDS
from tkbox_daemon.evidence.verify import verify_bundle, verify_main
from tkbox_daemon.evidence.verify_report import Failure
from tkbox_daemon.evidence.zipread import DEFAULT_LIMITS, read_zip

CORPUS = Path(__file__).parent / "corpus"
EXPECTED: dict[str, dict[str, object]] = json.loads((CORPUS / "expected.json").read_text())
TKBOX = str(Path(sys.executable).parent / "tkbox")


@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_corpus_case_gets_its_expected_verdict_and_reason(case: str) -> None:
    row = EXPECTED[case]
    report = verify_bundle(CORPUS / str(row["bundle"]), CORPUS / str(row["trust"]))
    failure = report.first_failure
    assert (report.exit_code, report.integrity, failure.check if failure else None) == (
        row["exit_code"], row["integrity"], row["first_failure"]
    ), report.render_text()
    assert (failure.to_json() if failure else None) == row["failure"], report.render_text()


@pytest.fixture(scope="module")
def cli_runs() -> dict[tuple[str, bool], subprocess.CompletedProcess[str]]:
    """``tkbox verify BUNDLE --trust TRUST`` and the same with ``--json``, for every case (a few at a time)."""
    def run(case: str, as_json: bool) -> subprocess.CompletedProcess[str]:
        row = EXPECTED[case]
        argv = [TKBOX, "verify", str(row["bundle"]), "--trust", str(row["trust"]), *(["--json"] * as_json)]
        return subprocess.run(argv, capture_output=True, text=True, cwd=CORPUS, timeout=120)

    jobs = [(case, as_json) for case in sorted(EXPECTED) for as_json in (False, True)]
    with ThreadPoolExecutor(max_workers=4) as pool:
        return dict(zip(jobs, pool.map(lambda job: run(*job), jobs), strict=True))


@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_the_cli_gives_each_case_its_exit_status_verdict_and_reason(case: str, cli_runs) -> None:
    row = EXPECTED[case]
    text, as_json = cli_runs[(case, False)], cli_runs[(case, True)]
    assert text.returncode == as_json.returncode == row["exit_code"], (text.stdout, text.stderr)
    assert text.stderr == as_json.stderr == ""
    lines = text.stdout.splitlines()
    assert f"Integrity: {row['integrity']}." in lines
    failure_lines = [line for line in lines if line.startswith("First failure: ")]
    if row["failure"] is None:
        assert failure_lines == []
    else:
        assert failure_lines == [f"First failure: {Failure(**row['failure']).describe()}"]  # type: ignore[arg-type]
    shown = json.loads(as_json.stdout)
    assert (shown["exit_code"], shown["integrity"], shown["first_failure"]) == (
        row["exit_code"], row["integrity"], row["failure"])


def test_the_good_bundle_in_the_corpus_verifies() -> None:
    report = verify_bundle(CORPUS / "good.tkb", CORPUS / "good.trust.json")
    assert report.integrity == "VERIFIED" and report.exit_code == 0
    assert all(check.status == "PASS" for check in report.checks)
    assert report.assurance is not None and report.assurance.startswith("dev; records ed25519; checkpoint ed25519 (")
    assert report.assurance.endswith("); signer same-user")


def test_the_good_bundle_was_recorded_by_the_real_signer() -> None:
    """What only the signer writes: a request MAC on every record a caller asked for, salted commitments of each
    decision's arguments and each result's output, and the real policy pack's snapshot named at registration."""
    entries = read_zip(CORPUS / "good.tkb", DEFAULT_LIMITS)
    events = [strictjson.loads_object(line, max_bytes=1 << 20)["event"] for line in entries[RUN_RECORDS].splitlines()]
    assert [e["type"] for e in events] == ["run.registered", *["policy.decision", "tool.result"] * 8,
                                            "input.observed", "run.closed"]
    assert all(len(e["data"]["request_mac"]) == 32 and e["request_id"].startswith("req-") for e in events)
    decisions = [e["data"] for e in events if e["type"] == "policy.decision"]
    assert all(d["tool"] == "Bash" and d["verdict"] == "allow" and d["args"]["hash"].startswith("hmac-sha256:")
               for d in decisions)
    results = [e["data"] for e in events if e["type"] == "tool.result"]
    assert all(r["output"]["hash"].startswith("hmac-sha256:") and r["reported_by"] == "guest" for r in results)
    registered = events[0]["data"]
    assert registered["policy_name"] == "default"
    policy = entries[f"policies/{registered['policy_hash'].removeprefix('sha256:')}.json"]
    assert strictjson.loads_object(policy, max_bytes=1 << 22)["name"] == "default"


def test_the_corpus_covers_enough_fault_classes() -> None:
    faults = [case for case, row in EXPECTED.items() if row["first_failure"] is not None]
    assert len(faults) >= 13
    assert {row["first_failure"] for row in EXPECTED.values()} >= {
        "trust", "bundle", "manifest", "checkpoint", "keys", "signatures", "run chain", "inclusion", "run closed",
        "policy snapshot",
    }
    assert all((CORPUS / str(row["bundle"])).is_file() for row in EXPECTED.values())
    reasons = [row["failure"]["reason"] for row in EXPECTED.values() if row["failure"]]  # type: ignore[index]
    assert len(set(reasons)) >= 20  # the reasons tell the faults apart, not only the checks


def test_every_corpus_file_is_listed() -> None:
    listed = {str(row["bundle"]) for row in EXPECTED.values()}
    assert {path.name for path in CORPUS.glob("*.tkb")} == listed


@pytest.mark.parametrize(("case", "code"), [("good", 0), ("bad_signature", 1), ("zip_traversal", 2)])
def test_verify_main_exit_codes_on_corpus_files(case: str, code: int, capsys: pytest.CaptureFixture[str]) -> None:
    assert verify_main([str(CORPUS / f"{case}.tkb"), "--trust", str(CORPUS / "good.trust.json")]) == code
    assert "Integrity: " in capsys.readouterr().out
