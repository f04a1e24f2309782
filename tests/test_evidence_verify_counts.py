"""verify's counts: decisions by verdict, approvals by answer, execs (Bash decisions) and writes (Write decisions),
in the report's text and JSON, only for a VERIFIED bundle, and the same whichever path checked the records."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from evidence_factory import FakeLog, fixed_keys, with_manifest_repaired
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tkbox_daemon.evidence import bundle
from tkbox_daemon.evidence.verify import verify_bundle, verify_main
from tkbox_daemon.evidence.verify_counts import RunCounts

RUN = "run-c"
TOOLS = ["Bash", "bash", "Write", "WRITE", "Read", "WebFetch"]
VERDICTS = ["allow", "flag", "ask", "deny"]
ANSWERS = ["approve", "reject", "expire", "withdraw", "lost"]


def build(tmp_path: Path, decisions: list[tuple[str, str, str | None]], name: str = "run.tkb",
          tamper: Callable[[dict[str, bytes]], dict[str, bytes]] | None = None) -> Path:
    """A closed run of ``decisions`` (tool, verdict, the answer to an ask or None), exported to ``name`` (its
    entries changed by ``tamper`` first, the manifest repaired) with its trust file: an approved ask runs after its
    approve record, an ask answered otherwise does not run."""
    log = FakeLog(fixed_keys("counts"))
    log.register(RUN)
    for number, (tool, verdict, answer) in enumerate(decisions):
        decision_id = f"dec-{number:032x}"
        log.append(RUN, "policy.decision", {
            "decision_id": decision_id, "tool": tool, "tool_class": "shell", "verdict": verdict, "rule_ids": ["r1"],
            "reason": "a rule", "args": {"hash": "hmac-sha256:" + "ab" * 32, "size": 10}})
        if verdict == "ask" and answer is not None:
            log.append(RUN, "input.observed", {
                "source": "tkbox.approval", "trust": "trusted", "must_keep": True, "salt_id": "1" * 32,
                "output": {"hash": "hmac-sha256:" + "cd" * 32, "size": 100}, "approval_id": f"apr-{number:016x}",
                "decision_id": decision_id, "answer": answer})
        if verdict != "ask" or answer == "approve":
            log.append(RUN, "tool.result", {"decision_id": decision_id, "status": "ok", "exit_code": 0})
    log.close(RUN)
    path = tmp_path / name
    entries = log.bundle_entries(RUN)
    path.write_bytes(bundle.zip_bytes(with_manifest_repaired(tamper(entries)) if tamper else entries))
    (tmp_path / "run.trust.json").write_text(json.dumps(log.keys.trust_document()))
    return path


def expected(decisions: list[tuple[str, str, str | None]]) -> dict[str, Any]:
    by_verdict: dict[str, int] = {}
    by_answer: dict[str, int] = {}
    for _tool, verdict, answer in decisions:
        by_verdict[verdict] = by_verdict.get(verdict, 0) + 1
        if verdict == "ask" and answer is not None:
            by_answer[answer] = by_answer.get(answer, 0) + 1
    return {"decisions": by_verdict, "approvals": by_answer,
            "execs": sum(tool.lower() == "bash" for tool, _, _ in decisions),
            "writes": sum(tool.lower() == "write" for tool, _, _ in decisions)}


def test_counts_in_text_and_json(tmp_path: Path, capsys: Any) -> None:
    decisions = [("Bash", "allow", None), ("Bash", "allow", None), ("Write", "ask", "approve"),
                 ("Write", "deny", None), ("Bash", "ask", "reject"), ("Read", "flag", None)]
    path = build(tmp_path, decisions)
    report = verify_bundle(path, tmp_path / "run.trust.json")
    assert report.verified, report.render_text()
    assert report.counts == RunCounts({"allow": 2, "ask": 2, "deny": 1, "flag": 1}, {"approve": 1, "reject": 1}, 3, 2)
    assert report.render_text().splitlines()[-1] == (
        "Counts: 6 decisions (2 allow, 1 flag, 2 ask, 1 deny); 2 approvals (1 approve, 1 reject); 3 execs; 2 writes")
    assert verify_main([str(path), "--trust", str(tmp_path / "run.trust.json"), "--json"]) == 0
    counts = json.loads(capsys.readouterr().out)["counts"]
    assert counts == {"decisions": {"allow": 2, "flag": 1, "ask": 2, "deny": 1},
                      "approvals": {"approve": 1, "reject": 1}, "execs": 3, "writes": 2}
    assert list(counts["decisions"]) == ["allow", "flag", "ask", "deny"]  # in the order of the verdicts


def test_a_run_without_decisions_counts_zero_in_words(tmp_path: Path) -> None:
    report = verify_bundle(build(tmp_path, []), tmp_path / "run.trust.json")
    assert report.render_text().splitlines()[-1] == "Counts: 0 decisions; 0 approvals; 0 execs; 0 writes"
    assert report.to_json()["counts"] == {"decisions": {}, "approvals": {}, "execs": 0, "writes": 0}


def test_a_tampered_bundle_has_no_counts(tmp_path: Path) -> None:
    def edit(entries: dict[str, bytes]) -> dict[str, bytes]:
        run = entries[bundle.RUN_RECORDS].replace(b'"verdict":"allow"', b'"verdict":"deny"', 1)
        return {**entries, bundle.RUN_RECORDS: run}

    path = build(tmp_path, [("Bash", "allow", None), ("Write", "allow", None)], tamper=edit)
    report = verify_bundle(path, tmp_path / "run.trust.json")
    assert not report.verified and report.counts is None and report.to_json()["counts"] is None
    assert "Counts: none (integrity not verified)" in report.render_text()


decision_lists = st.lists(st.tuples(st.sampled_from(TOOLS), st.sampled_from(VERDICTS),
                                    st.none() | st.sampled_from(ANSWERS)), max_size=12)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(decision_lists)
def test_the_counts_are_the_tally_of_what_the_run_recorded(tmp_path: Path, decisions: list[Any]) -> None:
    path = build(tmp_path, decisions, name=f"run-{abs(hash(tuple(decisions)))}.tkb")
    report = verify_bundle(path, tmp_path / "run.trust.json")
    assert report.verified, report.render_text()
    assert report.to_json()["counts"] == expected(decisions)
    # The pool path (every record checked in worker processes) counts the same.
    assert verify_bundle(path, tmp_path / "run.trust.json", parallel_min=1, workers=2).counts == report.counts
