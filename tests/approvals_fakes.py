"""Fakes behind the approvals' interfaces for unit tests: a box's side (``ApprovalHost``), a run recorder with
``record_approval``, and a clock the test moves by hand."""

from __future__ import annotations

import asyncio
from typing import Any

from tkbox_daemon.approvals.registry import RecordRefused
from tkbox_daemon.boxes.recorder import GapCounter
from tkbox_daemon.signer_link import SignerCallError
from tkbox_daemon.wire import ApprovalInfo

DECISION_ID = "dec-" + "d" * 32


class FakeClock:
    """Monotonic seconds that move only when the test says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class FakeHost:
    """An ``ApprovalHost``: what it was asked to record, lose and remember, and the events it emitted.  ``refuse``
    makes every record refused; ``gate`` (when set) holds each record until the test opens it."""

    def __init__(self, box_id: str = "box-1", name: str = "b1") -> None:
        self.id = box_id
        self.name = name
        self.records: list[dict[str, str]] = []
        self.refuse: str | None = None
        self.gate: asyncio.Event | None = None
        self.recording = asyncio.Event()  # set once a record has begun
        self.lost: list[str] = []
        self.remembered: list[tuple[str, str]] = []
        self.events: list[tuple[str, dict[str, Any]]] = []

    async def record(self, info: ApprovalInfo, answer: str, by: str, reason: str) -> None:
        self.recording.set()
        if self.gate is not None:
            await self.gate.wait()
        if self.refuse is not None:
            raise RecordRefused(self.refuse)
        self.records.append({"approval_id": info.id, "state_when_recorded": info.state, "answer": answer, "by": by,
                             "reason": reason})

    async def lose(self, reason: str) -> None:
        self.lost.append(reason)

    def remember(self, info: ApprovalInfo, by: str) -> None:
        self.remembered.append((info.id, by))

    def emit(self, kind: str, data: dict[str, Any]) -> None:
        self.events.append((kind, data))

    def kinds(self) -> list[str]:
        return [kind for kind, _ in self.events]


def asked(**overrides: Any) -> dict[str, Any]:
    """The fields of an exec's approval as the command door gives them."""
    fields: dict[str, Any] = {"kind": "exec", "asked": {"command": "sudo true", "cwd": "/workspace", "tty": False},
                              "program": "sudo", "decision_id": DECISION_ID, "rule_ids": ("TK-A001",),
                              "reason": "privilege escalation", "hint": "run as yourself", "context": {"exec_id": 1}}
    fields.update(overrides)
    return fields


class FakeRecorder:
    """A ``RunRecorder`` as the approvals use it: ``record_approval`` (refused with ``refuse``), must-keep
    observations, the gap counts."""

    def __init__(self) -> None:
        self.approvals: list[dict[str, str]] = []
        self.observed: list[tuple[str, str, Any]] = []
        self.gaps = GapCounter()
        self.closed = False
        self.refuse: str | None = None
        self.order: list[str] = []  # "approval:<answer>" and whatever else the test appends, in order

    async def record_approval(self, *, approval_id: str, decision_id: str, answer: str, by: str, reason: str) -> None:
        if self.refuse is not None:
            raise SignerCallError("run_contained", self.refuse)
        self.approvals.append({"approval_id": approval_id, "decision_id": decision_id, "answer": answer, "by": by,
                               "reason": reason})
        self.order.append(f"approval:{answer}")

    def observe_must_keep(self, source: str, value: Any, trust: str = "untrusted") -> None:
        self.observed.append((source, trust, value))
