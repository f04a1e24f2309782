"""What a verified run holds, counted: decisions by verdict, approvals by answer, execs and writes.

Counted from the run's records as verify read them (``RecordFacts.data``, which keeps a decision's verdict and tool
and an approval record's plain answer): a ``policy.decision`` counts once under its ``verdict``, and also as an
exec when its tool is ``Bash`` or a write when it is ``Write`` (either in any case: the daemon records ``Bash`` for
a command run in a box and ``Write`` for a file of ``tkbox apply``); a ``tkbox.approval`` observation counts once
under its ``answer``. The report carries the counts only when integrity is VERIFIED (``verify_report.conclude``):
counts of records that did not all verify would describe a run nobody can vouch for.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .verify_records import RecordFacts

EXEC_TOOL = "bash"
"""The tool of a decision that is an exec, compared without case."""
WRITE_TOOL = "write"
"""The tool of a decision that is a file write, compared without case."""
VERDICT_ORDER = ("allow", "flag", "ask", "deny")
"""The verdicts in the order the text names them (any other verdict a record holds follows, sorted)."""
ANSWER_ORDER = ("approve", "reject", "expire", "withdraw", "lost")


@dataclass(frozen=True)
class RunCounts:
    """The run's decisions by verdict, approval answers by answer, and its exec and write decisions."""

    decisions: dict[str, int] = field(default_factory=dict)
    approvals: dict[str, int] = field(default_factory=dict)
    execs: int = 0
    writes: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"decisions": _ordered(self.decisions, VERDICT_ORDER),
                "approvals": _ordered(self.approvals, ANSWER_ORDER), "execs": self.execs, "writes": self.writes}

    def line(self) -> str:
        """``Counts: 9 decisions (8 allow, 1 ask); 1 approval (1 approve); 8 execs; 1 write``."""
        return (f"Counts: {_tally(self.decisions, VERDICT_ORDER, 'decision')}; "
                f"{_tally(self.approvals, ANSWER_ORDER, 'approval')}; "
                f"{self.execs} exec{'s' * (self.execs != 1)}; {self.writes} write{'s' * (self.writes != 1)}")


def count_run(run_facts: list[RecordFacts] | None) -> RunCounts | None:
    """The counts of the run's records (None when the run's records could not be read)."""
    if run_facts is None:
        return None
    decisions: dict[str, int] = {}
    approvals: dict[str, int] = {}
    execs = writes = 0
    for fact in run_facts:
        data = fact.data
        if data is None:
            continue
        if fact.type == "policy.decision":
            verdict = str(data.get("verdict", ""))
            decisions[verdict] = decisions.get(verdict, 0) + 1
            tool = str(data.get("tool", "")).lower()
            execs += tool == EXEC_TOOL
            writes += tool == WRITE_TOOL
        elif fact.type == "input.observed" and "answer" in data:
            answer = str(data["answer"])
            approvals[answer] = approvals.get(answer, 0) + 1
    return RunCounts(decisions, approvals, execs, writes)


def _ordered(counts: dict[str, int], order: tuple[str, ...]) -> dict[str, int]:
    known = [name for name in order if name in counts]
    return {name: counts[name] for name in [*known, *sorted(set(counts) - set(known))]}


def _tally(counts: dict[str, int], order: tuple[str, ...], noun: str) -> str:
    total = sum(counts.values())
    parts = ", ".join(f"{count} {name}" for name, count in _ordered(counts, order).items())
    return f"{total} {noun}{'s' * (total != 1)}" + (f" ({parts})" if parts else "")
