"""The approvals check of verify: an ``ask`` decision runs only after an ``approve``, or the run says it did not.

The signer records a person's answer to an ``ask`` decision as a trusted ``tkbox.approval``
observation carrying ``approval_id``, ``decision_id`` and ``answer`` in plain
(``approval_record``), and refuses an answer after the decision's ``tool.result``.  A
``tool.result`` of an ask decision without an ``approve`` before it is followed by a
``capture.gap {kind: executed_against_policy}``.  This check reads the run's records in
order and fails on the first record that breaks that: an answer to something that is not
an earlier ask decision of the run, a second answer to a decision or an approval id used
twice, a result of an ask decision that comes before the decision's answer, or one with
neither an approve before it nor an executed_against_policy gap.
"""

from __future__ import annotations

from dataclasses import dataclass

from .verify_checks import Evidence
from .verify_records import RecordFacts
from .verify_report import CheckResult, failed, passed, skipped

NAME = "approvals"


@dataclass
class _Problem:
    fact: RecordFacts
    reason: str


def check_approvals(evidence: Evidence) -> CheckResult:
    """Every result of an ask decision follows an approve record of that decision, or is flagged as run against
    policy; every approval answers one earlier, unfinished ask decision of the run, once."""
    if not evidence.all_parsed():
        return skipped(NAME, "not every record parsed (see signatures)")
    facts = evidence.run_facts or []
    if any(fact.error is not None for fact in facts):
        return skipped(NAME, "not every run record verified (see signatures)")
    asks: set[str] = set()
    answers: dict[str, tuple[str, RecordFacts]] = {}  # decision id -> (answer, its record)
    approval_ids: set[str] = set()
    results: dict[str, RecordFacts] = {}  # ask decision id -> its tool.result
    flagged: set[str] = set()  # decision ids with an executed_against_policy gap
    problems: list[_Problem] = []
    for fact in facts:
        data = fact.data
        if data is None:
            continue
        if fact.type == "policy.decision":
            if data["verdict"] == "ask":
                asks.add(data["decision_id"])
        elif fact.type == "tool.result" and data["decision_id"] in asks:
            results.setdefault(data["decision_id"], fact)
        elif fact.type == "capture.gap":
            flagged.add(data["decision_id"])
        elif fact.type == "input.observed":
            problem = _answer_problem(data, asks, answers, approval_ids)
            if problem:
                problems.append(_Problem(fact, problem))
            answers.setdefault(data["decision_id"], (data["answer"], fact))
            approval_ids.add(data["approval_id"])
    approved_runs = 0
    for decision_id, result in results.items():
        answer, answered = answers.get(decision_id, (None, None))
        if answered is not None and (answered.run_seq or 0) > (result.run_seq or 0):
            problems.append(_Problem(result, f"the tool.result for ask decision {decision_id} comes before its "
                                             f"approval answer {answer!r} (run_seq {answered.run_seq})"))
        elif answer == "approve":
            approved_runs += 1
        elif decision_id not in flagged:
            said = f"its answer was {answer!r}" if answer else "no approval answered it"
            problems.append(_Problem(result, f"the tool.result for ask decision {decision_id} has no approve record "
                                             f"before it ({said}) and no capture.gap executed_against_policy"))
    if problems:
        first = min(problems, key=lambda problem: problem.fact.run_seq or 0)
        return failed(NAME, first.reason, seq=first.fact.seq, run_seq=first.fact.run_seq)
    against = len(results) - approved_runs
    return passed(NAME, f"{len(asks)} ask decision{'s' * (len(asks) != 1)}, {len(answers)} answered: "
                  f"{approved_runs} ran after an approve record, {against} ran against policy and say so "
                  "(executed_against_policy)")


def _answer_problem(data: dict[str, str], asks: set[str], answers: dict[str, tuple[str, RecordFacts]],
                    approval_ids: set[str]) -> str | None:
    decision_id, approval_id = data["decision_id"], data["approval_id"]
    if decision_id not in asks:
        return f"approval {approval_id} answers {decision_id}, which is not an earlier ask decision of this run"
    if decision_id in answers:
        first, where = answers[decision_id]
        return (f"approval {approval_id} answers decision {decision_id} again "
                f"(answered {first} at run_seq {where.run_seq})")
    if approval_id in approval_ids:
        return f"approval {approval_id} is answered twice"
    return None  # an answer after its decision's result is blamed on the result, below
