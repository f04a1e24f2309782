"""The verify report: one result per check, the integrity verdict, assurance, exit code, text and JSON output.

Text output, one line per check, then the verdict::

    [PASS] trust — 1 log key, 1 record key, algs ed25519
    …
    Integrity: VERIFIED.
    Assurance: dev; records ed25519; checkpoint ed25519 (tkbox.local/…); signer same-user
    Counts: 9 decisions (8 allow, 1 ask); 1 approval (1 approve); 8 execs; 1 write

A failed verdict names the first failing check and, when a record is to blame, its
``seq`` and ``run_seq``; it has no counts (``verify_counts``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .verify_counts import RunCounts

PASS, FAIL, SKIP = "PASS", "FAIL", "SKIP"

CHECK_NAMES = (
    "trust",
    "bundle",
    "manifest",
    "checkpoint",
    "keys",
    "signatures",
    "run chain",
    "inclusion",
    "run closed",
    "policy snapshot",
    "approvals",
)

VERIFIED = "VERIFIED"
FAILED = "FAILED"
UNUSABLE_BUNDLE = "UNUSABLE BUNDLE"
UNUSABLE_TRUST = "UNUSABLE TRUST FILE"
EXIT_VERIFIED, EXIT_FAILED, EXIT_UNUSABLE = 0, 1, 2
DASH = "\u2014"


@dataclass(frozen=True)
class Failure:
    """Why a check failed, and the record to blame when there is one."""

    check: str
    reason: str
    seq: int | None = None
    run_seq: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"check": self.check, "seq": self.seq, "run_seq": self.run_seq, "reason": self.reason}

    def detail(self) -> str:
        """The reason, preceded by the record to blame when there is one."""
        where = []
        if self.seq is not None:
            where.append(f"seq {self.seq}")
        if self.run_seq is not None:
            where.append(f"run_seq {self.run_seq}")
        return f"record {', '.join(where)}: {self.reason}" if where else self.reason

    def describe(self) -> str:
        return f"{self.check} {DASH} {self.detail()}"


@dataclass(frozen=True)
class CheckResult:
    name: str
    status: str
    detail: str
    failure: Failure | None = None

    def line(self) -> str:
        return f"[{self.status}] {self.name} {DASH} {self.detail}"

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status, "detail": self.detail}


def passed(name: str, detail: str) -> CheckResult:
    return CheckResult(name, PASS, detail)


def failed(name: str, reason: str, *, seq: int | None = None, run_seq: int | None = None) -> CheckResult:
    failure = Failure(name, reason, seq, run_seq)
    return CheckResult(name, FAIL, failure.detail(), failure)


def skipped(name: str, why: str) -> CheckResult:
    return CheckResult(name, SKIP, why)


@dataclass(frozen=True)
class VerifyReport:
    """The outcome of verifying one bundle against one trust file."""

    checks: tuple[CheckResult, ...]
    integrity: str
    exit_code: int
    assurance: str | None = None
    counts: RunCounts | None = None
    """What the run holds, counted; only for a VERIFIED bundle."""

    @property
    def first_failure(self) -> Failure | None:
        for check in self.checks:
            if check.failure is not None:
                return check.failure
        return None

    @property
    def verified(self) -> bool:
        return self.exit_code == EXIT_VERIFIED

    def check(self, name: str) -> CheckResult | None:
        return next((check for check in self.checks if check.name == name), None)

    def to_json(self) -> dict[str, Any]:
        failure = self.first_failure
        return {
            "exit_code": self.exit_code,
            "integrity": self.integrity,
            "assurance": self.assurance,
            "checks": [check.to_json() for check in self.checks],
            "first_failure": failure.to_json() if failure else None,
            "counts": self.counts.to_json() if self.counts else None,
        }

    def render_text(self) -> str:
        lines = [check.line() for check in self.checks]
        lines.append("")
        lines.append(f"Integrity: {self.integrity}.")
        failure = self.first_failure
        if failure is not None:
            lines.append(f"First failure: {failure.describe()}")
        lines.append(f"Assurance: {self.assurance}" if self.assurance else "Assurance: none (integrity not verified)")
        lines.append(self.counts.line() if self.counts else "Counts: none (integrity not verified)")
        return "\n".join(lines) + "\n"


def conclude(checks: list[CheckResult], assurance: str | None, counts: RunCounts | None = None) -> VerifyReport:
    """Integrity and exit code from the check results (every check listed, in order); ``counts`` are kept only
    when integrity is VERIFIED."""
    by_name = {check.name: check for check in checks}
    ordered = tuple(by_name.get(name) or skipped(name, "not run") for name in CHECK_NAMES)
    if ordered[0].status != PASS:
        return VerifyReport(ordered, UNUSABLE_TRUST, EXIT_UNUSABLE)
    if ordered[1].status != PASS:
        return VerifyReport(ordered, UNUSABLE_BUNDLE, EXIT_UNUSABLE)
    if all(check.status == PASS for check in ordered) and assurance:
        return VerifyReport(ordered, VERIFIED, EXIT_VERIFIED, assurance, counts)
    if not any(check.status == FAIL for check in ordered):
        # A check that did not pass without any failure would be a verifier bug: never call it verified.
        first = next((i for i, check in enumerate(ordered) if check.status != PASS), len(ordered) - 1)
        broken = failed(ordered[first].name, "internal error: the check did not complete")
        ordered = (*ordered[:first], broken, *ordered[first + 1:])
    return VerifyReport(ordered, FAILED, EXIT_FAILED)


def unusable(checks: list[CheckResult], name: str, reason: str) -> VerifyReport:
    """A report for a trust or bundle failure (or an unexpected error): every later check is skipped."""
    done = [check for check in checks if check.name != name]
    results = [*done, failed(name, reason)]
    names_done = {check.name for check in results}
    for later in CHECK_NAMES:
        if later not in names_done:
            results.append(skipped(later, f"the {name} check failed"))
    return conclude(results, None)
