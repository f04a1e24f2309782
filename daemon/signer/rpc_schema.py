"""The signer RPC contract: methods, their closed request schemas, limits and error codes.

One place for the wire rules; the server and the clients both read from here.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

RPC_VERSION = 1
MAX_LINE_BYTES = 1 << 20
MAX_RUN_TOKEN = 1024
MAX_REASON = 1024
READ_LIMIT_MAX = 1000

ERROR_CODES = frozenset(
    {
        "invalid_request",   # malformed line or fields; the connection stays open
        "unauthenticated",   # caller's uid is not allowed; the connection is closed
        "quota_exceeded",    # a line or a count over its limit
        "unavailable",       # the store cannot take records: nothing is allowed
        "run_token_invalid",
        "unknown_run",
        "run_exists",
        "run_closed",
        "conflict",          # request_id reused with another payload
        "request_expired",   # request_id older than the idempotency window: cannot be told from a forgotten retry
        "unknown_decision",
        "decision_consumed",
        "args_mismatch",
        "unknown_method",
        "decision_not_ask",   # a tkbox.approval answer for a decision whose verdict is not ask
        "approval_answered",  # a second answer for one decision, or an approval id used before
        "run_contained",      # an approve for a run that is held or quarantined
        "run_open",           # export_open of a run that is not closed yet
        "not_owner",          # export_open of a run another identity registered
        "unknown_export",     # export_read/export_done of an export that is not (or no longer) open for the caller
    }
)

_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}\Z", re.ASCII)
REQUEST_ID_PATTERN = re.compile(r"^req-[0-9a-f]{32}\Z", re.ASCII)  # 12 hex digits of Unix ms, then 20 random
_RUN_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}\Z", re.ASCII)
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}\Z", re.ASCII)
_DECISION_ID = re.compile(r"^dec-[0-9a-f]{32}\Z", re.ASCII)
_SOURCE = re.compile(r"^[a-z][a-z0-9_.-]{0,63}\Z", re.ASCII)
_TOOL = re.compile(r"^[A-Za-z0-9_.:*/-]{1,128}\Z", re.ASCII)
_EXPORT_ID = re.compile(r"^exp-[0-9a-f]{32}\Z", re.ASCII)


class SchemaError(ValueError):
    """A request does not match its method's schema; the message names the field."""


Check = Callable[[Any], bool]


def _text(pattern: re.Pattern[str]) -> Check:
    return lambda value: isinstance(value, str) and bool(pattern.match(value))


def _bounded_text(limit: int) -> Check:
    return lambda value: isinstance(value, str) and len(value) <= limit


def _int_range(low: int, high: int) -> Check:
    return lambda value: type(value) is int and low <= value <= high


def _one_of(*choices: str) -> Check:
    return lambda value: value in choices


def _is_object(value: Any) -> bool:
    return isinstance(value, dict)


def _is_bool(value: Any) -> bool:
    return isinstance(value, bool)


def _agent(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and set(value) <= {"name", "version"}
        and isinstance(value.get("name"), str)
        and 1 <= len(value["name"]) <= 128
        and isinstance(value.get("version", ""), str)
        and len(value.get("version", "")) <= 64
    )


def _stdin(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and set(value) == {"sha256", "size"}
        and _DIGEST.match(str(value["sha256"])) is not None
        and type(value["size"]) is int
        and 0 <= value["size"] <= 2**53 - 1
    )


def _any_json(value: Any) -> bool:
    return True


# What the host itself saw of an exec's end (the exit status is the guest's word; this is the host's):
# ``reported`` the guest reported the end within the host's deadline; ``host_time_limit`` the deadline
# passed without it and the host ended the box; ``box_ended`` the box stopped or failed first;
# ``start_failed`` the guest said the command could not start.
HOST_OUTCOMES = ("reported", "host_time_limit", "box_ended", "start_failed")


def _host_observation(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and set(value) <= {"outcome", "time_limit_ms", "reason"}
        and value.get("outcome") in HOST_OUTCOMES
        and (type(value.get("time_limit_ms", 0)) is int and 0 <= value.get("time_limit_ms", 0) <= 2**31 - 1)
        and isinstance(value.get("reason", ""), str)
        and len(value.get("reason", "")) <= MAX_REASON
    )


RUN_FIELDS: dict[str, Check] = {"run_id": _text(_RUN_ID), "run_token": _bounded_text(MAX_RUN_TOKEN)}
REQUEST_ID: dict[str, Check] = {"request_id": _text(REQUEST_ID_PATTERN)}


@dataclass(frozen=True)
class MethodSchema:
    required: dict[str, Check]
    optional: dict[str, Check]
    state_changing: bool

    # derived once, not per request: the names a request must have, the names it may have, each name's check
    required_names: frozenset[str] = field(init=False, repr=False, compare=False)
    allowed_names: frozenset[str] = field(init=False, repr=False, compare=False)
    checks: dict[str, Check] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "required_names", frozenset(self.required))
        object.__setattr__(self, "allowed_names", frozenset({*self.required, *self.optional, "method"}))
        object.__setattr__(self, "checks", {**self.optional, **self.required})


METHODS: dict[str, MethodSchema] = {
    "hello": MethodSchema({}, {"proto": _int_range(0, 1000)}, False),
    "status": MethodSchema({}, {}, False),
    "register_run": MethodSchema(
        {**REQUEST_ID, "agent": _agent}, {"run_id": _text(_RUN_ID)}, True
    ),
    "decide": MethodSchema(
        {**REQUEST_ID, **RUN_FIELDS, "tool": _text(_TOOL), "args": _is_object},
        {"tool_call_id": _text(_ID)},
        True,
    ),
    "complete": MethodSchema(
        {**REQUEST_ID, **RUN_FIELDS, "decision_id": _text(_DECISION_ID), "status": _one_of("ok", "error")},
        {
            "args_digest": _text(_DIGEST),
            "exit_code": _int_range(-255, 255),
            "reported_by": _one_of("guest", "host"),  # whose word status and exit_code are
            "host": _host_observation,
            "stdin": _stdin,
            "output": _any_json,
            "error": _bounded_text(MAX_REASON),
        },
        True,
    ),
    "observe": MethodSchema(
        {**REQUEST_ID, **RUN_FIELDS, "source": _text(_SOURCE), "trust": _one_of("trusted", "untrusted"),
         "value": _any_json},
        {"must_keep": _is_bool},
        True,
    ),
    "close_run": MethodSchema({**REQUEST_ID, **RUN_FIELDS}, {"reason": _bounded_text(MAX_REASON)}, True),
    "hold": MethodSchema({**REQUEST_ID, "run_id": _text(_RUN_ID)}, {"reason": _bounded_text(MAX_REASON)}, True),
    "quarantine": MethodSchema({**REQUEST_ID, "run_id": _text(_RUN_ID)}, {"reason": _bounded_text(MAX_REASON)}, True),
    "release": MethodSchema({**REQUEST_ID, "run_id": _text(_RUN_ID)}, {"reason": _bounded_text(MAX_REASON)}, True),
    "containment": MethodSchema({"run_id": _text(_RUN_ID)}, {"run_token": _bounded_text(MAX_RUN_TOKEN)}, False),
    "read": MethodSchema(
        dict(RUN_FIELDS), {"from_seq": _int_range(0, 2**53 - 1), "limit": _int_range(1, READ_LIMIT_MAX)}, False
    ),
    "checkpoint": MethodSchema({}, {}, False),
    "export_open": MethodSchema({"run_id": _text(_RUN_ID)}, {}, False),
    "export_read": MethodSchema({"export_id": _text(_EXPORT_ID), "offset": _int_range(0, 2**53 - 1)}, {}, False),
    "export_done": MethodSchema({"export_id": _text(_EXPORT_ID)}, {}, False),
    "trust": MethodSchema({}, {}, False),
    "preview": MethodSchema({"tool": _text(_TOOL), "args": _is_object}, {}, False),
}


def validate(request: dict[str, Any]) -> tuple[str, MethodSchema]:
    """Check ``request`` against its method's closed schema; return the method name and schema."""
    method = request.get("method")
    if not isinstance(method, str):
        raise SchemaError("request has no string field 'method'")
    schema = METHODS.get(method)
    if schema is None:
        raise SchemaError(f"unknown method {method!r}; known: {', '.join(sorted(METHODS))}")
    fields = request.keys()
    if not schema.required_names <= fields:
        raise SchemaError(f"{method}: missing field(s) {', '.join(sorted(schema.required_names - fields))}")
    if not fields <= schema.allowed_names:
        raise SchemaError(f"{method}: unknown field(s) {', '.join(sorted(fields - schema.allowed_names))}")
    checks = schema.checks
    for name, value in request.items():
        if name == "method":
            continue
        if not checks[name](value):
            if name == "request_id":
                raise SchemaError(f"{method}: field 'request_id' is invalid: it is 'req-' and 32 lowercase hex "
                                  "digits, the first 12 the Unix time in milliseconds (new_request_id() makes one)")
            raise SchemaError(f"{method}: field {name!r} is invalid")
    return method, schema


def error(code: str, message: str, **extra: Any) -> dict[str, Any]:
    """The one error shape: ``{"error": {"code", "message", …}}``."""
    assert code in ERROR_CODES, code
    return {"error": {"code": code, "message": message, **extra}}
