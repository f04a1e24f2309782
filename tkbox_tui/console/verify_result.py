"""The verifier's report as the console reads it: ``tkbox verify … --json`` parsed strictly (no widgets).

The console runs the verifier as a separate process (``verify_run``) and believes only what this parser accepts:
one JSON object of exactly the verifier's fields (docs/verify.md), no duplicate keys, no floats or NaN, every
value of its type and within its bounds, its ``exit_code`` the process's exit status and its integrity the one
that status means, ``assurance`` and ``counts`` present only for a VERIFIED bundle. Anything else is a
``VerifyOutputError`` that says what was wrong: the console shows that, never a guess at what the verifier meant.
Strings here may quote a bundle's bytes (a record's reason): they are shown escaped.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

MAX_OUTPUT = 1 << 20
"""Bytes of the verifier's output read at most (a report is a few KiB)."""
MAX_TEXT = 64 * 1024
MAX_CHECKS = 64
MAX_COUNT_KEYS = 64
MAX_INT = (1 << 53) - 1
TOP_FIELDS = ("exit_code", "integrity", "assurance", "checks", "first_failure", "counts")
INTEGRITY_BY_EXIT = {0: ("VERIFIED",), 1: ("FAILED",), 2: ("UNUSABLE BUNDLE", "UNUSABLE TRUST FILE")}
STATUSES = ("PASS", "FAIL", "SKIP")


class VerifyOutputError(ValueError):
    """The verifier's output is not a report this console can read; the message says what is wrong."""


@dataclass(frozen=True)
class VerifyCheck:
    name: str
    status: str
    detail: str


@dataclass(frozen=True)
class VerifyFailure:
    check: str
    seq: int | None
    run_seq: int | None
    reason: str


@dataclass(frozen=True)
class VerifyCounts:
    """Decisions by verdict and approvals by answer, in the verifier's order; execs and writes."""

    decisions: tuple[tuple[str, int], ...]
    approvals: tuple[tuple[str, int], ...]
    execs: int
    writes: int


@dataclass(frozen=True)
class VerifyResult:
    exit_code: int
    integrity: str
    assurance: str | None
    checks: tuple[VerifyCheck, ...]
    first_failure: VerifyFailure | None
    counts: VerifyCounts | None

    @property
    def verified(self) -> bool:
        return self.integrity == "VERIFIED"


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [key for key, _ in pairs]
    if len(keys) != len(set(keys)):
        duplicated = sorted({key for key in keys if keys.count(key) > 1})
        raise VerifyOutputError(f"a key appears twice in one object: {duplicated[0]!r}")
    return dict(pairs)


def _no_float(text: str) -> Any:
    raise VerifyOutputError(f"a number is not an integer: {text[:40]}")


def parse_verify_output(stdout: bytes, exit_status: int) -> VerifyResult:
    """The report in ``stdout`` of a verifier that exited with ``exit_status``, or ``VerifyOutputError``."""
    if len(stdout) > MAX_OUTPUT:
        raise VerifyOutputError(f"the verifier printed more than {MAX_OUTPUT} bytes")
    try:
        document = json.loads(stdout.decode("utf-8"), object_pairs_hook=_no_duplicates, parse_float=_no_float,
                              parse_constant=_no_float)
    except UnicodeDecodeError as exc:
        raise VerifyOutputError(f"the verifier's output is not UTF-8 (byte {exc.start})") from None
    except RecursionError:
        raise VerifyOutputError("the verifier's output nests too deep") from None
    except json.JSONDecodeError as exc:
        raise VerifyOutputError(f"the verifier's output is not JSON: {exc.msg} at character {exc.pos}") from None
    if not isinstance(document, dict) or tuple(document) != TOP_FIELDS:
        shown = list(document)[:10] if isinstance(document, dict) else type(document).__name__
        raise VerifyOutputError(f"the report's fields are {shown}, not {list(TOP_FIELDS)}")
    exit_code = _int(document["exit_code"], "exit_code")
    if exit_code != exit_status:
        raise VerifyOutputError(f"the report says exit code {exit_code}, the verifier exited with {exit_status}")
    integrity = _text(document["integrity"], "integrity")
    if integrity not in INTEGRITY_BY_EXIT.get(exit_code, ()):
        raise VerifyOutputError(f"integrity {integrity[:40]!r} does not go with exit code {exit_code}")
    verified = integrity == "VERIFIED"
    assurance = document["assurance"]
    if verified != (assurance is not None):
        raise VerifyOutputError("assurance is given exactly when integrity is VERIFIED")
    checks = _checks(document["checks"])
    failure = _failure(document["first_failure"])
    if verified != (failure is None):
        raise VerifyOutputError("first_failure is given exactly when integrity is FAILED or unusable")
    counts = _counts(document["counts"])
    if verified != (counts is not None):
        raise VerifyOutputError("counts are given exactly when integrity is VERIFIED")
    return VerifyResult(exit_code, integrity, None if assurance is None else _text(assurance, "assurance"), checks,
                        failure, counts)


def _int(value: Any, where: str, nullable: bool = False) -> Any:
    if value is None and nullable:
        return None
    if type(value) is not int or not 0 <= value <= MAX_INT:
        raise VerifyOutputError(f"{where} is not a non-negative integer")
    return value


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str) or len(value) > MAX_TEXT:
        raise VerifyOutputError(f"{where} is not a string of at most {MAX_TEXT} characters")
    return value


def _object(value: Any, fields: tuple[str, ...], where: str) -> dict[str, Any]:
    if not isinstance(value, dict) or set(value) != set(fields):
        raise VerifyOutputError(f"{where} does not have exactly the fields {', '.join(fields)}")
    return value


def _checks(value: Any) -> tuple[VerifyCheck, ...]:
    if not isinstance(value, list) or not 0 < len(value) <= MAX_CHECKS:
        raise VerifyOutputError(f"checks is not a list of 1 to {MAX_CHECKS} checks")
    checks = []
    for index, item in enumerate(value):
        check = _object(item, ("name", "status", "detail"), f"check {index}")
        status = _text(check["status"], f"check {index}'s status")
        if status not in STATUSES:
            raise VerifyOutputError(f"check {index}'s status is not one of {', '.join(STATUSES)}")
        checks.append(VerifyCheck(_text(check["name"], f"check {index}'s name"), status,
                                  _text(check["detail"], f"check {index}'s detail")))
    return tuple(checks)


def _failure(value: Any) -> VerifyFailure | None:
    if value is None:
        return None
    failure = _object(value, ("check", "seq", "run_seq", "reason"), "first_failure")
    return VerifyFailure(_text(failure["check"], "first_failure.check"),
                         _int(failure["seq"], "first_failure.seq", nullable=True),
                         _int(failure["run_seq"], "first_failure.run_seq", nullable=True),
                         _text(failure["reason"], "first_failure.reason"))


def _tally(value: Any, where: str) -> tuple[tuple[str, int], ...]:
    if not isinstance(value, dict) or len(value) > MAX_COUNT_KEYS:
        raise VerifyOutputError(f"{where} is not an object of at most {MAX_COUNT_KEYS} counts")
    return tuple((_text(key, f"a key of {where}"), _int(count, f"{where}.{key[:40]}"))
                 for key, count in value.items())


def _counts(value: Any) -> VerifyCounts | None:
    if value is None:
        return None
    counts = _object(value, ("decisions", "approvals", "execs", "writes"), "counts")
    return VerifyCounts(_tally(counts["decisions"], "counts.decisions"), _tally(counts["approvals"], "counts.approvals"),
                        _int(counts["execs"], "counts.execs"), _int(counts["writes"], "counts.writes"))
