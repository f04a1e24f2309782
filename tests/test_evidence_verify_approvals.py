"""verify and approvals: the shape of ``tkbox.approval`` records (signatures) and the approvals check — an ask decision
runs after an approve record of it, or its run says it ran against policy."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from evidence_factory import FakeLog, fixed_keys

from tkbox_daemon.evidence import bundle
from tkbox_daemon.evidence.signature_check import RecordKey
from tkbox_daemon.evidence.verify import verify_bundle
from tkbox_daemon.evidence.verify_lines import check_chunk
from tkbox_daemon.evidence.verify_records import check_line
from tkbox_daemon.evidence.verify_report import VerifyReport

RUN = "run-a"


class Run:
    """One run of a fake log, built step by step; ``decide`` returns the decision id."""

    def __init__(self) -> None:
        self.log = FakeLog(fixed_keys("approvals"))
        self.log.register(RUN)
        self.decisions = 0
        self.approvals = 0

    def decide(self, verdict: str = "ask") -> str:
        decision_id = f"dec-{self.decisions:032x}"
        self.decisions += 1
        self.log.append(RUN, "policy.decision", {
            "decision_id": decision_id, "tool": "Bash", "tool_class": "shell", "verdict": verdict,
            "rule_ids": ["TK-A001"], "reason": "privilege escalation", "args": {"hash": "hmac-sha256:" + "ab" * 32,
                                                                               "size": 30},
        })
        return decision_id

    def answer(self, decision_id: str, answer: str = "approve", *, approval_id: str | None = None,
               changes: dict[str, Any] | None = None) -> str:
        """A tkbox.approval observation as the signer records it, with ``changes`` to its data (None: left out)."""
        approval_id = approval_id or f"apr-{self.approvals:016x}"
        self.approvals += 1
        data = {"source": "tkbox.approval", "trust": "trusted", "must_keep": True, "salt_id": "1" * 32,
                "output": {"hash": "hmac-sha256:" + "cd" * 32, "size": 120}, "approval_id": approval_id,
                "decision_id": decision_id, "answer": answer, "request_mac": "2" * 32, **(changes or {})}
        self.log.append(RUN, "input.observed", {name: value for name, value in data.items() if value is not None})
        return approval_id

    def result(self, decision_id: str) -> None:
        self.log.append(RUN, "tool.result", {"decision_id": decision_id, "status": "ok", "exit_code": 0})

    def gap(self, decision_id: str) -> None:
        self.log.append(RUN, "capture.gap", {"kind": "executed_against_policy", "decision_id": decision_id},
                        identity="signer")

    def verify(self, tmp_path: Path, **kwargs: Any) -> VerifyReport:
        """Close the run (once), export it and verify the bundle."""
        path = tmp_path / "run.tkb"
        if not path.exists():
            self.log.close(RUN)
            path.write_bytes(self.log.bundle_bytes(RUN))
        return verify_bundle(path, self.log.keys.trust(), **kwargs)

    def run_seq_of(self, kind: str, index: int = 0) -> int:
        return [r.run_seq for r in self.log.run_records(RUN) if r.type == kind][index]


def failure(report: VerifyReport) -> tuple[str, int | None, str]:
    first = report.first_failure
    assert first is not None, report.render_text()
    return first.check, first.run_seq, first.reason


# ---- the order check, both directions ---------------------------------------------------------------------------
def test_an_ask_that_runs_after_its_approve_record_verifies(tmp_path: Path) -> None:
    run = Run()
    asked = run.decide()
    run.answer(asked)
    run.result(asked)
    report = run.verify(tmp_path)
    assert report.verified, report.render_text()
    assert "1 ran after an approve record, 0 ran against policy" in report.check("approvals").detail  # type: ignore[union-attr]


def test_a_result_before_its_approve_record_fails_approvals_at_the_result(tmp_path: Path) -> None:
    run = Run()
    asked = run.decide()
    run.result(asked)
    run.answer(asked)
    check, run_seq, reason = failure(run.verify(tmp_path))
    assert (check, run_seq) == ("approvals", run.run_seq_of("tool.result"))
    assert f"the tool.result for ask decision {asked} comes before its approval answer 'approve'" in reason


@pytest.mark.parametrize("answer", ["approve", "reject"])
def test_an_answer_after_a_flagged_result_still_fails_approvals_at_the_result(tmp_path: Path, answer: str) -> None:
    run = Run()
    asked = run.decide()
    run.result(asked)
    run.gap(asked)
    run.answer(asked, answer)
    check, run_seq, reason = failure(run.verify(tmp_path))
    assert (check, run_seq) == ("approvals", run.run_seq_of("tool.result"))
    assert f"comes before its approval answer {answer!r} (run_seq {run.run_seq_of('input.observed')})" in reason


@pytest.mark.parametrize(("answer", "said"), [(None, "no approval answered it"), ("reject", "its answer was 'reject'"),
                                             ("expire", "its answer was 'expire'")])
def test_an_ask_that_ran_without_an_approve_and_without_a_gap_fails(tmp_path: Path, answer: str | None,
                                                                     said: str) -> None:
    run = Run()
    asked = run.decide()
    if answer:
        run.answer(asked, answer)
    run.result(asked)
    check, run_seq, reason = failure(run.verify(tmp_path))
    assert (check, run_seq) == ("approvals", run.run_seq_of("tool.result"))
    assert f"has no approve record before it ({said}) and no capture.gap executed_against_policy" in reason


@pytest.mark.parametrize("answer", [None, "reject", "lost"])
def test_an_ask_that_ran_without_an_approve_verifies_when_the_run_says_so(tmp_path: Path, answer: str | None) -> None:
    run = Run()
    asked = run.decide()
    if answer:
        run.answer(asked, answer)
    run.result(asked)
    run.gap(asked)
    report = run.verify(tmp_path)
    assert report.verified, report.render_text()
    assert "0 ran after an approve record, 1 ran against policy" in report.check("approvals").detail  # type: ignore[union-attr]


def test_asks_never_run_and_runs_without_asks_pass(tmp_path: Path) -> None:
    run = Run()
    run.answer(run.decide(), "expire")
    run.result(run.decide("allow"))
    report = run.verify(tmp_path)
    assert report.verified and report.check("approvals").detail.startswith("1 ask decision, 1 answered")  # type: ignore[union-attr]


# ---- what an answer may answer ----------------------------------------------------------------------------------
def _allow_answered(run: Run) -> str:
    allowed = run.decide("allow")
    run.answer(allowed)
    return f"answers {allowed}, which is not an earlier ask decision"


def _answered_before_decided(run: Run) -> str:
    run.answer(f"dec-{1:032x}")
    run.decide()
    return "which is not an earlier ask decision"


def _answered_twice(run: Run) -> str:
    asked = run.decide()
    run.answer(asked, "reject")
    run.answer(asked)
    return f"answers decision {asked} again (answered reject at run_seq"


def _approval_id_reused(run: Run) -> str:
    first, second = run.decide(), run.decide()
    used = run.answer(first, "reject")
    run.answer(second, approval_id=used)
    return f"approval {used} is answered twice"


@pytest.mark.parametrize("build", [_allow_answered, _answered_before_decided, _answered_twice, _approval_id_reused])
def test_an_answer_to_anything_but_one_earlier_unanswered_ask_fails_approvals(tmp_path: Path, build) -> None:  # type: ignore[no-untyped-def]
    run = Run()
    expected = build(run)
    check, run_seq, reason = failure(run.verify(tmp_path))
    assert (check, run_seq) == ("approvals", run.run_seq_of("input.observed", -1))
    assert expected in reason


# ---- the shape of approval records (signatures) -----------------------------------------------------------------
@pytest.mark.parametrize(("changes", "words"), [
    ({"decision_id": None}, "fields are not"),
    ({"answer": None}, "fields are not"),
    ({"by": "uid 0 (root)"}, "fields are not"),  # by and reason are committed, never plain
    ({"decision_id": 7}, "decision_id must be"),
    ({"decision_id": "dec-" + "A" * 32}, "decision_id must be"),
    ({"approval_id": "apr-1"}, "approval_id must be"),
    ({"answer": "maybe"}, "answer must be one of"),
    ({"trust": "untrusted"}, "is not trusted"),
    ({"must_keep": 1}, "must_keep not a boolean"),
    ({"output": {"hash": "sha256:" + "0" * 64, "size": 1}}, "output is not"),
    ({"source": "web"}, "belong to tkbox.approval observations only"),
])
def test_a_malformed_approval_record_fails_signatures(tmp_path: Path, changes: dict[str, Any], words: str) -> None:
    run = Run()
    asked = run.decide()
    run.answer(asked, changes=changes)
    report = run.verify(tmp_path)
    check, run_seq, reason = failure(report)
    assert (check, run_seq) == ("signatures", run.run_seq_of("input.observed"))
    assert "input.observed data" in reason and words in reason
    assert report.check("approvals").status == "SKIP"  # type: ignore[union-attr]


def test_the_pool_and_the_fast_path_give_the_same_verdict(tmp_path: Path) -> None:
    run = Run()
    asked = run.decide()
    run.result(asked)
    run.answer(asked)
    here = run.verify(tmp_path)
    pooled = run.verify(tmp_path, parallel_min=1, workers=2)
    assert pooled.to_json() == here.to_json() and pooled.first_failure.check == "approvals"  # type: ignore[union-attr]
    lines = run.log.bundle_entries(RUN)[bundle.RUN_RECORDS]
    keys = {key.kid: RecordKey(key.public_key) for key in run.log.keys.trust().record_keys}
    pinned = {key.kid: key.public_key for key in run.log.keys.trust().record_keys}
    fast = check_chunk(lines, 1, pinned)
    assert fast == [check_line(line, number, keys) for number, line in enumerate(lines.splitlines(), 1)]
