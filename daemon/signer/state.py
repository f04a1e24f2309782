"""What the signer knows about runs, rebuilt from the log at start: owners, pending decisions, containment.

Everything here is derived from records, so a restart loses nothing: ``RunBook.apply``
is called for every record replayed from disk and for every record appended.  Only
what deciding needs stays in memory, so it does not grow with the number of records:
per run its owner and state, its decisions not completed yet (at most
``MAX_PENDING_DECISIONS_PER_RUN``), the approval ids it answered and a sparse index of
where its records are; plus the bounded idempotency window (``idempotency.py``).  What
is needed later (a completed decision, a retry's reply, ``read``) is read back from the
log on disk.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..evidence import approval_record
from ..evidence.records import SIGNER_RUN_ID, Record
from .idempotency import ReplyWindow

CONTAINMENT_STATES = ("active", "held", "quarantined")
RUN_INDEX_STRIDE = 256  # a run keeps the log seq of every 256th of its records, for ``read``


@dataclass(slots=True)
class DecisionState:
    """A decision not completed yet: what its completion and its approval are checked against."""

    args_commitment: str
    verdict: str
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
    seq_marks: list[int] = field(default_factory=list)  # log seq of run record i * RUN_INDEX_STRIDE
    pending: dict[str, DecisionState] = field(default_factory=dict)  # decided, not completed
    approval_ids: set[str] = field(default_factory=set)  # every approval id answered in this run
    checked_token: tuple[str, str, int] | None = None  # the last run token verified: (token, caller, its expiry)

    @property
    def pending_decisions(self) -> int:
        return len(self.pending)


TYPE_TO_METHOD = {
    "run.registered": "register_run",
    "policy.decision": "decide",
    "tool.result": "complete",
    "input.observed": "observe",
    "run.closed": "close_run",
}


def method_of(record: Record) -> str | None:
    """The state-changing method that made ``record`` (None for the signer's own records)."""
    kind = record.event["type"]
    if kind == "containment.changed":
        return record.event["data"].get("method")
    return TYPE_TO_METHOD.get(kind)


class RunBook:
    """Runs by id plus the idempotency window, kept current record by record."""

    def __init__(self, clock_ms: Any = None) -> None:
        self.runs: dict[str, RunState] = {}
        self.window = ReplyWindow()
        self.clock_ms = clock_ms

    def apply(self, record: Record) -> None:
        event = record.event
        if record.run_id == SIGNER_RUN_ID:
            return
        data = event["data"]
        kind = event["type"]
        if kind == "run.registered":
            self.runs[record.run_id] = RunState(record.run_id, event["identity"], data.get("token_expires", 0))
        run = self.runs.get(record.run_id)
        if run is None:
            return
        if run.records % RUN_INDEX_STRIDE == 0:
            run.seq_marks.append(record.seq)
        run.records += 1
        if kind == "policy.decision":
            run.pending[data["decision_id"]] = DecisionState(data["args"]["hash"], data["verdict"])
        elif kind == "tool.result":
            run.pending.pop(data["decision_id"], None)
        elif kind == "input.observed" and data.get("source") == approval_record.SOURCE and "answer" in data:
            # an answer to an ask (one without the plain fields, which the signer never records, answers nothing)
            run.approval_ids.add(data["approval_id"])
            answered = run.pending.get(data["decision_id"])
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
        if request_id and method_of(record):
            now_ms = self.clock_ms() if self.clock_ms is not None else 0
            self.window.remember(ReplyWindow.key(event["identity"], request_id), request_id, record.seq, now_ms)

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
