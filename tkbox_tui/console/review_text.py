"""Pure presentation for the patch review: a file's row, its details, the apply plan the confirm shows, and how an
apply ended (no widgets).

Paths, reasons and the daemon's words may come from the box (a path is the agent's choice): each leaves here
through ``safe_text``, and widgets show it as ``Text``. A file's row says, left to right and what decides an apply
first (a narrow terminal cuts the rest, which the details under the table show whole): whether it is included, its
path, the policy's verdict with its rules, whether it is sensitive, whether the checkout still holds what the patch
was made against, what became of it once an apply ran (or while it waits), what the patch does, and its size.
"""

from __future__ import annotations

from dataclasses import dataclass

from tkbox_daemon.wire_apply import ApplyFile, ApplyReport

from ..terminal_text import clip, safe_text
from .page_text import format_bytes

REVIEW_COLUMNS = ("in", "file", "verdict", "sensitive", "checkout", "result", "action", "size")
PATH_CELL = 48
"""Characters of a path in the table (the details under it show it whole)."""
RULES_CELL = 28
OUTCOME_WORDS = {"written": "written", "declined": "declined", "refused": "refused", "not_written": "not written",
                 "rolled_back": "rolled back", "rollback_failed": "ROLLBACK FAILED"}
VERDICTS_THAT_WRITE = ("allow", "flag")
"""Preview verdicts under which the signer lets a file be written without a person."""


def size_text(file: ApplyFile) -> str:
    """``+1.2 KiB`` (added), ``-300 B`` (deleted), ``1.0 KiB → 1.2 KiB``; ``binary`` is said too."""
    old, new = file.old_size, file.new_size
    if old is None and new is not None:
        text = f"+{format_bytes(new)}"
    elif new is None and old is not None:
        text = f"-{format_bytes(old)}"
    elif old is not None and new is not None:
        text = format_bytes(new) if old == new else f"{format_bytes(old)} → {format_bytes(new)}"
    else:
        text = "-"
    return f"{text} binary" if file.binary else text


def action_text(file: ApplyFile) -> str:
    """What the patch does: ``add``, ``modify``, ``mode 100644 → 100755``, ``rename from OLD`` …"""
    if file.action in ("rename", "copy") and file.old_path:
        return f"{file.action} from {clip(safe_text(file.old_path), PATH_CELL // 2)}"
    if file.action == "mode" and (file.old_mode or file.new_mode):
        return f"mode {safe_text(file.old_mode or '?')} → {safe_text(file.new_mode or '?')}"
    return safe_text(file.action)


def verdict_text(file: ApplyFile) -> str:
    """``allow``, ``ask TK-W010``, ``deny TK-F008, TK-F001``; ``-`` when the file was not asked about."""
    if not file.verdict:
        return "-"
    rules = ", ".join(safe_text(rule) for rule in file.rule_ids)
    return clip(f"{safe_text(file.verdict)} {rules}".strip(), RULES_CELL)


def checkout_text(file: ApplyFile) -> str:
    """``ok`` when the checkout still holds the file's pre-image, else what differs, as the daemon says it."""
    return "ok" if file.checkout == "matches" else safe_text(file.checkout)


def result_text(file: ApplyFile, included: bool, held: str = "") -> str:
    """What became of the file in the last apply, or ``held: apr-…`` while it waits for a person, or
    ``excluded`` for a file left out before an apply; ``""`` before any."""
    if held:
        return f"held: {safe_text(held)}"
    if file.outcome:
        word = OUTCOME_WORDS.get(file.outcome, safe_text(file.outcome))
        if file.outcome == "refused" and file.rule_ids:
            return clip(f"{word} {', '.join(safe_text(rule) for rule in file.rule_ids)}", RULES_CELL)
        return word
    return "" if included else "excluded"


def file_cells(file: ApplyFile, included: bool, held: str = "") -> tuple[str, ...]:
    """One row of the review's table, in ``REVIEW_COLUMNS`` order, escaped."""
    return ("[x]" if included else "[ ]", clip(safe_text(file.path), PATH_CELL), verdict_text(file),
            "sensitive" if file.sensitive else "", checkout_text(file), result_text(file, included, held),
            action_text(file), size_text(file))


def file_details(file: ApplyFile, included: bool) -> list[tuple[str, str]]:
    """The selected file as (label, value), every value escaped and whole."""
    left_out = "" if included or file.outcome else "   (excluded: it will be recorded as declined)"
    lines = [("file", safe_text(file.path) + left_out)]
    if file.old_path:
        lines.append(("from", safe_text(file.old_path)))
    lines.append(("change", f"{action_text(file)}   {size_text(file)}"))
    if file.sensitive:
        lines.append(("sensitive", safe_text(file.sensitive) + " (applying it needs its own confirm)"))
    if file.verdict:
        rules = ", ".join(safe_text(rule) for rule in file.rule_ids) or "no rule"
        lines.append(("policy", f"{safe_text(file.verdict)} ({rules}): {safe_text(file.reason or '-')}"))
        if file.hint:
            lines.append(("hint", safe_text(file.hint)))
    lines.append(("checkout", "holds what the patch was made against" if file.checkout == "matches"
                  else safe_text(file.checkout)))
    if file.outcome:
        why = f": {safe_text(file.outcome_reason)}" if file.outcome_reason else ""
        lines.append(("result", OUTCOME_WORDS.get(file.outcome, safe_text(file.outcome)) + why))
    for label, value in (("decision", file.decision_id), ("approval", file.approval_id)):
        if value:
            lines.append((label, safe_text(value)))
    return lines


@dataclass(frozen=True)
class ApplyPlan:
    """What an apply of the included files would do, as the confirm says it."""

    written: list[ApplyFile]
    sensitive: list[ApplyFile]
    excluded: list[ApplyFile]
    asked: list[ApplyFile]
    denied: list[ApplyFile]
    stale: list[ApplyFile]

    @property
    def only(self) -> list[str] | None:
        """The ``only`` of the apply: the included paths when a file is excluded, else None (the whole patch)."""
        return [file.path for file in self.written] if self.excluded else None


def apply_plan(files: tuple[ApplyFile, ...], excluded: set[str]) -> ApplyPlan:
    written = [file for file in files if file.path not in excluded]
    return ApplyPlan(
        written=written,
        sensitive=[file for file in written if file.sensitive],
        excluded=[file for file in files if file.path in excluded],
        asked=[file for file in written if file.verdict == "ask"],
        denied=[file for file in written if file.verdict and file.verdict not in (*VERDICTS_THAT_WRITE, "ask")],
        stale=[file for file in written if file.checkout != "matches"])


def _listed(files: list[ApplyFile], shown: int = 8, why: bool = False) -> list[str]:
    lines = [f"  {clip(safe_text(file.path), 70)}" + (f"  ({clip(safe_text(file.sensitive), 50)})" if why else "")
             for file in files[:shown]]
    if len(files) > shown:
        lines.append(f"  … and {len(files) - shown} more")
    return lines


def plan_text(plan: ApplyPlan, box_name: str, checkout: str) -> str:
    """The confirm's first step: what will be written where, what asks a person, what the policy or the checkout
    will refuse (then nothing is written), and what is excluded."""
    count = len(plan.written)
    lines = [f"Apply {count} file{'s' * (count != 1)} of {safe_text(box_name)}'s patch to {safe_text(checkout)}:",
             *_listed(plan.written)]
    if plan.asked:
        lines += ["", f"{len(plan.asked)} ask a person first (the approval prompt opens for each):",
                  *_listed(plan.asked, 4)]
    if plan.denied:
        lines += ["", f"The policy's preview refuses {len(plan.denied)}: the signer will refuse the apply and "
                  "write nothing. Exclude them (space) to apply the rest:", *_listed(plan.denied, 4)]
    if plan.stale:
        lines += ["", f"{len(plan.stale)} changed in the checkout since the box started: the apply will be refused "
                  "and write nothing:", *_listed(plan.stale, 4)]
    if plan.sensitive:
        lines += ["", f"{len(plan.sensitive)} sensitive: the next step asks about them on their own."]
    if plan.excluded:
        lines += ["", f"Excluded, recorded as declined ({len(plan.excluded)}):", *_listed(plan.excluded, 4)]
    return "\n".join(lines)


def sensitive_text(plan: ApplyPlan) -> str:
    """The confirm's second step, for sensitive files only."""
    count = len(plan.sensitive)
    return "\n".join([
        f"{count} of the files steer the next run or the host's automation, or hold credentials:",
        *_listed(plan.sensitive, 10, why=True), "",
        "Write them too (allow sensitive)? n applies nothing; exclude them (space) to apply the rest."])


def report_summary(report: ApplyReport) -> str:
    """One line on how an apply (or its preview) ended: ``applied: 3 written, 1 declined`` …"""
    counts: dict[str, int] = {}
    for file in report.files:
        if file.outcome:
            counts[file.outcome] = counts.get(file.outcome, 0) + 1
    parts = ", ".join(f"{count} {OUTCOME_WORDS.get(outcome, safe_text(outcome))}" for outcome, count in counts.items())
    status = {"dry_run": "preview", "applied": "applied", "refused": "refused, nothing written",
              "partial": "PARTIAL: a write failed midway"}.get(report.status, safe_text(report.status))
    line = f"{status}: {parts}" if parts else status
    if report.reason:
        line += f" — {safe_text(report.reason)}"
    if report.hint:
        line += f" ({safe_text(report.hint)})"
    return line
