"""The body of ``POST /v1/approvals/{id}``: a person's answer, parsed strictly at the API's boundary.

``{"answer": "approve"|"reject", "reason": str (optional, at most 1024 characters), "remember": bool (optional,
only with approve)}`` as one strict JSON object (no other key, no duplicate, at most ``MAX_BODY_BYTES``).
Anything else is refused with ``InvalidAnswer``, whose message says what was wrong and what to send.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import strictjson

MAX_BODY_BYTES = 16 * 1024
MAX_REASON_CHARS = 1024
ANSWERS = ("approve", "reject")
KEYS = ("answer", "reason", "remember")
EXAMPLE = 'e.g. {"answer": "reject", "reason": "not in this job"}'


class InvalidAnswer(ValueError):
    """The body is not an answer; the message says why and what to send."""


@dataclass(frozen=True)
class AnswerRequest:
    answer: str
    reason: str = ""
    remember: bool = False


def parse_answer(body: bytes) -> AnswerRequest:
    if len(body) > MAX_BODY_BYTES:
        raise InvalidAnswer(f"an answer is at most {MAX_BODY_BYTES} bytes; {EXAMPLE}")
    try:
        value = strictjson.loads_object(body, max_bytes=MAX_BODY_BYTES, max_depth=2)
    except strictjson.StrictJSONError as exc:
        raise InvalidAnswer(f"the answer is not one strict JSON object ({exc}); {EXAMPLE}") from None
    unknown = sorted(key for key in value if key not in KEYS)
    if unknown:
        shown = ", ".join(repr(key[:40]) for key in unknown[:5])
        raise InvalidAnswer(f"unknown field(s) {shown}; an answer has only {', '.join(KEYS)}")
    answer = value.get("answer")
    if answer not in ANSWERS:
        raise InvalidAnswer(f"answer must be \"approve\" or \"reject\"; {EXAMPLE}")
    reason = value.get("reason", "")
    if not isinstance(reason, str) or len(reason) > MAX_REASON_CHARS:
        raise InvalidAnswer(f"reason must be a string of at most {MAX_REASON_CHARS} characters")
    remember = value.get("remember", False)
    if type(remember) is not bool:
        raise InvalidAnswer("remember must be true or false")
    if remember and answer != "approve":
        raise InvalidAnswer("remember goes only with approve (a rejection is never remembered)")
    return AnswerRequest(answer, reason, remember)
