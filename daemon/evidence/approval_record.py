"""The ``tkbox.approval`` observation: the value the daemon sends, and the plain fields its record carries.

A person's (or the daemon's) answer to an ``ask`` decision is observed as a trusted
``input.observed`` with source ``tkbox.approval``.  Its value
``{approval_id, decision_id, answer, by, reason}`` is committed like any observed value
(``by`` and ``reason`` are an operator's words and stay out of the record); the record also
carries ``approval_id``, ``decision_id`` and ``answer`` in plain, so that a reader of the run
sees which decision was answered, how, and where in the run's order.  The signer parses the
value with ``parse_value``; the verifier checks the plain fields with ``plain_fields_error``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

SOURCE = "tkbox.approval"
ANSWERS = ("approve", "reject", "expire", "withdraw", "lost")
VALUE_FIELDS = ("approval_id", "decision_id", "answer", "by", "reason")
PLAIN_FIELDS = ("approval_id", "decision_id", "answer")
MAX_BY = 256
MAX_REASON = 1024
APPROVAL_ID = re.compile(r"apr-[0-9a-f]{16}", re.ASCII)
DECISION_ID = re.compile(r"dec-[0-9a-f]{32}", re.ASCII)


class ApprovalValueError(ValueError):
    """A ``tkbox.approval`` value is not of its one shape; the message names the field and what it must be."""


@dataclass(frozen=True)
class ApprovalAnswer:
    approval_id: str
    decision_id: str
    answer: str
    by: str
    reason: str

    def plain(self) -> dict[str, str]:
        """The fields the record carries in plain, beside the committed value."""
        return {"approval_id": self.approval_id, "decision_id": self.decision_id, "answer": self.answer}


def parse_value(value: Any) -> ApprovalAnswer:
    """The answer in ``value``, which must be exactly ``{approval_id, decision_id, answer, by, reason}``."""
    if not isinstance(value, dict):
        raise ApprovalValueError(f"the {SOURCE} value must be an object with the fields {', '.join(VALUE_FIELDS)}")
    missing = [name for name in VALUE_FIELDS if name not in value]
    if missing:
        raise ApprovalValueError(f"the {SOURCE} value lacks {', '.join(missing)}; it needs all of "
                                 f"{', '.join(VALUE_FIELDS)}")
    unknown = sorted(str(name)[:40] for name in value if name not in VALUE_FIELDS)
    if unknown:
        raise ApprovalValueError(f"the {SOURCE} value has unknown field(s) {', '.join(map(repr, unknown))}; it holds "
                                 f"exactly {', '.join(VALUE_FIELDS)}")
    problem = plain_fields_error(value)
    if problem:
        raise ApprovalValueError(f"the {SOURCE} value's {problem}")
    for name, limit in (("by", MAX_BY), ("reason", MAX_REASON)):
        text = value[name]
        if not isinstance(text, str) or len(text) > limit:
            raise ApprovalValueError(f"the {SOURCE} value's {name} must be a string of at most {limit} characters")
    return ApprovalAnswer(value["approval_id"], value["decision_id"], value["answer"], value["by"], value["reason"])


def plain_fields_error(fields: dict[str, Any]) -> str | None:
    """What is wrong with the ``approval_id``, ``decision_id`` and ``answer`` in ``fields`` (present), or None."""
    approval_id, decision_id, answer = (fields[name] for name in PLAIN_FIELDS)
    if not isinstance(approval_id, str) or not APPROVAL_ID.fullmatch(approval_id):
        return "approval_id must be 'apr-' and 16 lowercase hex digits"
    if not isinstance(decision_id, str) or not DECISION_ID.fullmatch(decision_id):
        return "decision_id must be 'dec-' and 32 lowercase hex digits"
    if not isinstance(answer, str) or answer not in ANSWERS:
        return f"answer must be one of {', '.join(ANSWERS)}"
    return None
