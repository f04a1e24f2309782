"""Pure presentation of a verifier's report for the verify screen and its copy (no widgets): each check, Integrity,
the first failure, Assurance and the counts, every string escaped (a check's detail can quote a bundle's bytes)."""

from __future__ import annotations

import shlex
from pathlib import Path

from ..terminal_text import safe_text
from .verify_result import VerifyCounts, VerifyResult

DASH = "\u2014"


def shown_path(path: Path, cwd: Path | None = None) -> str:
    """``path`` as the screen shows it: relative to the console's working directory when it is under it (shorter,
    and what the operator typed), else whole; escaped (a box's name can be part of it)."""
    base = cwd or Path.cwd()
    try:
        return safe_text(str(path.relative_to(base)))
    except ValueError:
        return safe_text(str(path))


def _tally(pairs: tuple[tuple[str, int], ...], noun: str) -> str:
    total = sum(count for _, count in pairs)
    parts = ", ".join(f"{count} {safe_text(name)}" for name, count in pairs)
    return f"{total} {noun}{'s' * (total != 1)}" + (f" ({parts})" if parts else "")


def counts_lines(counts: VerifyCounts | None) -> list[tuple[str, str]]:
    """(label, value) for the counts: decisions by verdict, approvals by answer, execs, writes."""
    if counts is None:
        return [("counts", "none (integrity not verified)")]
    return [("decisions", _tally(counts.decisions, "decision")), ("approvals", _tally(counts.approvals, "approval")),
            ("execs", f"{counts.execs} (Bash decisions)"), ("writes", f"{counts.writes} (Write decisions)")]


def check_lines(result: VerifyResult) -> list[tuple[str, str, str]]:
    """(status, name, detail) per check, escaped."""
    return [(check.status, safe_text(check.name), safe_text(check.detail)) for check in result.checks]


def verdict_lines(result: VerifyResult) -> list[tuple[str, str]]:
    """(label, value): Integrity, the first failure when there is one, Assurance, then the counts."""
    lines = [("integrity", safe_text(result.integrity))]
    failure = result.first_failure
    if failure is not None:
        where = ", ".join(f"{name} {value}" for name, value in (("seq", failure.seq), ("run_seq", failure.run_seq))
                          if value is not None)
        lines.append(("first failure", f"{safe_text(failure.check)} {DASH} "
                      + (f"record {where}: " if where else "") + safe_text(failure.reason)))
    lines.append(("assurance", safe_text(result.assurance) if result.assurance else
                  "none (integrity not verified)"))
    return lines + counts_lines(result.counts)


def report_copy_text(result: VerifyResult, bundle: Path, trust: Path) -> str:
    """What ``y`` copies: the command, each check, the verdict and the counts, as shown (escaped)."""
    lines = [f"tkbox verify {safe_text(shlex.quote(str(bundle)))} --trust {safe_text(shlex.quote(str(trust)))}"]
    lines += [f"[{status}] {name} {DASH} {detail}" for status, name, detail in check_lines(result)]
    lines += [""] + [f"{label.capitalize()}: {value}" for label, value in verdict_lines(result)]
    return "\n".join(lines) + "\n"
