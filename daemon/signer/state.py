"""What the signer knows about runs, rebuilt from the log at start: owners, decisions, containment, replies.

Everything here is derived from records, so a restart loses nothing: ``RunBook.apply``
is called for every record replayed from disk and for every record appended.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..evidence import approval_record
from ..evidence.records import SIGNER_RUN_ID, Record

CONTAINMENT_STATES = ("active", "held", "quarantined")


@dataclass
class DecisionState:
    args_commitment: str
    verdict: str
    consumed: bool = False
    answer: str | None = None  # the tkbox.approval answer to an ask decision, once recorded


@dataclass
class RunState:
    run_id: str
    owner: str
    token_expires: int
    closed: bool = False
    closed_seq: int | None = None  # the log seq of its run.closed record (an export's tree ends right after it)
    containment: str = "active"
    containment_reason: str = ""
    containment_seq: int | None = None
    records: int = 0
    seqs: list[int] = field(default_factory=list)
    decisions: dict[str, DecisionState] = field(default_factory=dict)
    pending_decisions: int = 0  # decided but not completed
    approval_ids: set[str] = field(default_factory=set)  # every approval id answered in this run


@dataclass
class StoredReply:
    method: str
    request_mac: str
    reply: dict[str, Any]


TYPE_TO_METHOD = {
    "run.registered": "register_run",
    "policy.decision": "decide",
    "tool.result": "complete",
    "input.observed": "observe",
    "run.closed": "close_run",
}


class RunBook:
    """Runs by id plus the idempotency table, kept current record by record."""

    def __init__(self) -> None:
        self.runs: dict[str, RunState] = {}
        self.replies: dict[tuple[str, str], StoredReply] = {}

    def apply(self, record: Record) -> None:
        event = record.event
        data = event["data"]
        if record.run_id == SIGNER_RUN_ID:
            return
        kind = event["type"]
        if kind == "run.registered":
            self.runs[record.run_id] = RunState(record.run_id, event["identity"], data.get("token_expires", 0))
        run = self.runs.get(record.run_id)
        if run is None:
            return
        run.records += 1
        run.seqs.append(record.seq)
        if kind == "policy.decision":
            run.decisions[data["decision_id"]] = DecisionState(data["args"]["hash"], data["verdict"])
            run.pending_decisions += 1
        elif kind == "tool.result":
            decision = run.decisions.get(data["decision_id"])
            if decision is not None and not decision.consumed:
                decision.consumed = True
                run.pending_decisions -= 1
        elif kind == "input.observed" and data.get("source") == approval_record.SOURCE and "answer" in data:
            # an answer to an ask (one without the plain fields, which the signer never records, answers nothing)
            run.approval_ids.add(data["approval_id"])
            answered = run.decisions.get(data["decision_id"])
            if answered is not None:
                answered.answer = data["answer"]
        elif kind == "containment.changed":
            run.containment = data["state"]
            run.containment_reason = data.get("reason", "")
            run.containment_seq = record.seq
        elif kind == "run.closed":
            run.closed = True
            run.closed_seq = record.seq
        request_id = event.get("request_id")
        method = TYPE_TO_METHOD.get(kind) or (data.get("method") if kind == "containment.changed" else None)
        if request_id and method:
            self.replies[(event["identity"], request_id)] = StoredReply(
                method, data.get("request_mac", ""), reply_from_record(record)
            )

    def open_runs_of(self, identity: str) -> int:
        return sum(1 for run in self.runs.values() if run.owner == identity and not run.closed)


def reply_from_record(record: Record) -> dict[str, Any]:
    """The reply a request produced, rebuilt from its record (for retries, also after a restart)."""
    event, data = record.event, record.event["data"]
    kind = event["type"]
    if kind == "policy.decision":
        verdict = data["verdict"]
        reply: dict[str, Any] = {
            "decision": "allow" if verdict in ("allow", "flag") else verdict,
            "verdict": verdict,
            "decision_id": data["decision_id"],
            "rule_ids": data["rule_ids"],
            "reason": data["reason"],
            "run_seq": event["run_seq"],
            "incident": data.get("incident", False),
        }
        if data.get("hint"):
            reply["hint"] = data["hint"]
        return reply
    if kind == "run.registered":
        return {"run_id": record.run_id, "run_seq": event["run_seq"], "token_expires": data["token_expires"]}
    if kind == "containment.changed":
        return {"run_id": record.run_id, "state": data["state"], "run_seq": event["run_seq"]}
    if kind == "run.closed":
        return {"run_id": record.run_id, "state": "closed", "run_seq": event["run_seq"]}
    return {"run_seq": event["run_seq"]}
