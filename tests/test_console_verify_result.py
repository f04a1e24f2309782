"""The console's strict reading of ``tkbox verify --json`` (``verify_result``) and how it runs the verifier
(``verify_run``): every report the verifier can print reads back to the same values; any change to its shape, or
a report that disagrees with the exit status, is refused with a reason; no input makes the parser raise anything
else; the verifier is stopped at its time limit."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tkbox_daemon.evidence.verify_counts import RunCounts
from tkbox_daemon.evidence.verify_report import CHECK_NAMES, conclude, failed, passed, skipped
from tkbox_tui.cli.export_command import default_trust_path as cli_default_trust_path
from tkbox_tui.console.verify_result import VerifyOutputError, parse_verify_output
from tkbox_tui.console.verify_run import VerifierFailed, default_trust_path, run_verifier

CORPUS = Path(__file__).parent / "corpus"
texts = st.text(max_size=60)
counts = st.dictionaries(st.sampled_from(["allow", "flag", "ask", "deny", "odd verdict"]),
                         st.integers(0, 10**6), max_size=5)


@st.composite
def reports(draw: Any) -> Any:
    """A report as the verifier builds one: each check passed, failed or skipped (trust and bundle pass or fail:
    the verifier never skips them), then ``conclude``."""
    checks = []
    for name in CHECK_NAMES:
        kind = draw(st.sampled_from(["pass", "pass", "fail"] + ["skip"] * (name not in CHECK_NAMES[:2])))
        if kind == "pass":
            checks.append(passed(name, draw(texts)))
        elif kind == "fail":
            checks.append(failed(name, draw(texts), seq=draw(st.none() | st.integers(0, 2**40)),
                                 run_seq=draw(st.none() | st.integers(0, 2**40))))
        else:
            checks.append(skipped(name, draw(texts)))
    run_counts = RunCounts(draw(counts), draw(st.dictionaries(st.sampled_from(["approve", "reject"]),
                                                              st.integers(0, 99))),
                           draw(st.integers(0, 10**6)), draw(st.integers(0, 10**6)))
    return conclude(checks, draw(st.none() | texts.filter(bool)), run_counts)


def _printed(report: Any) -> bytes:
    return (json.dumps(report.to_json(), ensure_ascii=False, indent=2) + "\n").encode()


@given(reports())
def test_every_report_the_verifier_prints_reads_back_to_its_values(report: Any) -> None:
    result = parse_verify_output(_printed(report), report.exit_code)
    assert (result.exit_code, result.integrity, result.assurance) == (report.exit_code, report.integrity,
                                                                      report.assurance)
    assert [(c.name, c.status, c.detail) for c in result.checks] == [(c.name, c.status, c.detail)
                                                                      for c in report.checks]
    failure = report.first_failure
    assert (result.first_failure is None) == (failure is None)
    if failure is not None:
        assert result.first_failure == type(result.first_failure)(failure.check, failure.seq, failure.run_seq,
                                                                   failure.reason)
    if report.counts is None:
        assert result.counts is None
    else:
        assert result.counts is not None
        assert dict(result.counts.decisions) == report.counts.to_json()["decisions"]
        assert dict(result.counts.approvals) == report.counts.to_json()["approvals"]
        assert (result.counts.execs, result.counts.writes) == (report.counts.execs, report.counts.writes)


MUTATIONS = ["drop", "add", "exit", "integrity", "float", "duplicate", "status", "counts", "check-field", "assurance"]


def _mutated(document: dict[str, Any], mutation: str) -> bytes:
    doc = json.loads(json.dumps(document))
    if mutation == "drop":
        del doc["checks"]
    elif mutation == "add":
        doc["extra"] = 1
    elif mutation == "exit":
        doc["exit_code"] = (doc["exit_code"] + 1) % 3
    elif mutation == "integrity":
        doc["integrity"] = "VERIFIED" if doc["integrity"] != "VERIFIED" else "FAILED"
    elif mutation == "float":
        code = doc["exit_code"]
        return json.dumps(doc).replace(f'"exit_code": {code}', f'"exit_code": {code}.0').encode()
    elif mutation == "duplicate":
        return json.dumps(doc).replace("{", '{"exit_code": 0, ', 1).encode()
    elif mutation == "status":
        doc["checks"][0]["status"] = "OK"
    elif mutation == "counts":
        doc["counts"] = None if doc["counts"] else {"decisions": {}, "approvals": {}, "execs": 0, "writes": 0}
    elif mutation == "check-field":
        doc["checks"][0] = {"name": "trust", "status": "PASS"}
    elif mutation == "assurance":
        doc["assurance"] = None if doc["assurance"] else "dev"
    return json.dumps(doc).encode()


@given(reports(), st.sampled_from(MUTATIONS))
def test_a_changed_report_is_refused_with_a_reason(report: Any, mutation: str) -> None:
    with pytest.raises(VerifyOutputError) as refused:
        parse_verify_output(_mutated(report.to_json(), mutation), report.exit_code)
    assert str(refused.value)


@given(st.binary(max_size=300) | st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                                              lambda inner: st.lists(inner, max_size=4)
                                              | st.dictionaries(st.text(max_size=8), inner, max_size=4)
                                              ).map(lambda value: json.dumps(value).encode()),
       st.integers(-1, 3))
def test_any_output_is_a_report_or_a_refusal(data: bytes, status: int) -> None:
    try:
        parse_verify_output(data, status)
    except VerifyOutputError:
        pass


def test_deep_nesting_and_huge_output_are_refused() -> None:
    with pytest.raises(VerifyOutputError, match="nests too deep|not JSON"):
        parse_verify_output(b"[" * 100_000, 0)
    with pytest.raises(VerifyOutputError, match="more than"):
        parse_verify_output(b" " * ((1 << 20) + 1), 0)


@pytest.mark.parametrize("name", ["run.tkb", "a.b.tkb", ".tkb", "bundle", "x.TKB", "dir/run.tkb"])
def test_the_trust_file_beside_a_bundle_is_named_as_tkbox_export_names_it(name: str) -> None:
    assert default_trust_path(Path(name)) == cli_default_trust_path(Path(name))


async def test_the_verifier_runs_as_tkbox_verify_and_is_stopped_at_its_time_limit() -> None:
    result = await run_verifier(CORPUS / "good.tkb", CORPUS / "good.trust.json")
    assert result.verified and result.counts is not None and result.counts.execs == 8
    with pytest.raises(VerifierFailed, match="took more than"):
        await run_verifier(CORPUS / "good.tkb", CORPUS / "good.trust.json", timeout=0.001)


def test_verify_arguments_are_a_path_and_an_optional_trust_file(tmp_path: Path) -> None:
    from tkbox_tui.console.export_actions import VerifyArgumentsError, parse_verify_arguments

    assert parse_verify_arguments("run.tkb", tmp_path) == (tmp_path / "run.tkb", tmp_path / "run.trust.json")
    assert parse_verify_arguments("'a b.tkb' --trust /t/k.json", tmp_path) == (tmp_path / "a b.tkb",
                                                                               Path("/t/k.json"))
    assert parse_verify_arguments("--trust t.json x.tkb", tmp_path) == (tmp_path / "x.tkb", tmp_path / "t.json")
    for bad in ("", "a.tkb b.tkb", "a.tkb --trust", "'unclosed", "--json"):
        with pytest.raises(VerifyArgumentsError):
            parse_verify_arguments(bad, tmp_path)
