"""The signer's checks on a ``tkbox.approval`` observation, before it is recorded.

An answer is recorded only when it is trusted, its value has its one shape
(``evidence.approval_record``), it names an ``ask`` decision of the same run that has not
been completed nor answered, its approval id is new in the run, and — for ``approve`` — the
run is not held or quarantined.  Anything else is refused with a code and nothing is
recorded.  The state read here is rebuilt from the log (``state.RunBook``), so the checks
hold across a signer restart.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..evidence.approval_record import SOURCE, ApprovalAnswer, ApprovalValueError, parse_value
from .state import RunState


class ApprovalRefused(Exception):
    """The observation is refused with ``code`` (an ``rpc_schema.ERROR_CODES`` member)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def check_approval(run: RunState, trust: str, value: Any,
                   completed_verdict: Callable[[str], str | None]) -> ApprovalAnswer:
    """The answer in ``value`` if the run may record it now; raises ``ApprovalRefused`` otherwise.

    Only decisions not completed yet are in memory (``run.pending``); ``completed_verdict`` reads any other decision
    of the run back from the log (its verdict; None if the run has no such decision)."""
    if trust != "trusted":
        raise ApprovalRefused("invalid_request", f"a {SOURCE} observation must be trusted (it is the daemon's own "
                                                 "record of an operator's answer); send trust: trusted")
    try:
        answer = parse_value(value)
    except ApprovalValueError as exc:
        raise ApprovalRefused("invalid_request", str(exc)) from None
    decision = run.pending.get(answer.decision_id)
    verdict = decision.verdict if decision is not None else completed_verdict(answer.decision_id)
    if verdict is None:
        raise ApprovalRefused("unknown_decision", f"no decision {answer.decision_id} in run {run.run_id}; an approval "
                                                  "answers a decision of its own run")
    if verdict != "ask":
        raise ApprovalRefused("decision_not_ask", f"decision {answer.decision_id} was decided {verdict}, not "
                                                  "ask; only an ask decision is answered by an approval")
    if decision is None:
        raise ApprovalRefused("decision_consumed", f"decision {answer.decision_id} was completed already; an approval "
                                                   "must be recorded before its action runs")
    if decision.answer is not None:
        raise ApprovalRefused("approval_answered", f"decision {answer.decision_id} was answered {decision.answer} "
                                                   "already; a decision has one answer")
    if answer.approval_id in run.approval_ids:
        raise ApprovalRefused("approval_answered", f"approval {answer.approval_id} was answered already in run "
                                                   f"{run.run_id}; an approval has one answer")
    if answer.answer == "approve" and run.containment != "active":
        raise ApprovalRefused("run_contained", f"run {run.run_id} is {run.containment} by the operator; nothing is "
                                               "approved until it is released")
    return answer
