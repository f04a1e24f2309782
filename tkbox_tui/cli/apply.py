"""``tkbox apply BOX``: a stopped box's patch into its checkout, file by file, each file decided by the signer.

Prints one line per file (what the patch does, the outcome, the policy's verdict and rule ids) and a summary; with
``--dry-run`` what would happen, recording and writing nothing; with ``--json`` the daemon's report as one object.
Files held for a person are said on stderr as they wait (answer them with ``tkbox approve``, or in the console).
Every path comes from the box and is shown escaped.

Exit status: 0 applied (or a dry run shown), 1 refused (nothing written), 3 refused only because sensitive files
need ``--allow-sensitive`` (nothing written), 4 partial (a write failed midway: the lines say which files were
written, rolled back or not), 2 a wrong command line, 130 Ctrl+C (what was held is withdrawn, nothing written).
"""

from __future__ import annotations

import json
import sys
from typing import Any

from tkbox_daemon.wire import ApprovalInfo
from tkbox_daemon.wire_apply import ApplyFile, ApplyReport

from ..terminal_text import safe_text
from .daemon_refusals import daemon_client
from .report import CliParser

EXIT_APPLIED = 0
EXIT_REFUSED = 1
EXIT_NEEDS_SENSITIVE = 3
EXIT_PARTIAL = 4


def exit_status(report: ApplyReport) -> int:
    if report.status in ("applied", "dry_run"):
        return EXIT_APPLIED
    if report.status == "partial":
        return EXIT_PARTIAL
    only_sensitive = all(file.outcome != "refused" or file.outcome_reason.startswith("sensitive")
                         for file in report.files)
    needs_sensitive = any(file.sensitive and file.included for file in report.files)
    return EXIT_NEEDS_SENSITIVE if needs_sensitive and only_sensitive else EXIT_REFUSED


def _size(value: int | None) -> str:
    return "-" if value is None else f"{value:,} B"


def _verdict(file: ApplyFile) -> str:
    if not file.verdict:
        return ""
    rules = f" {', '.join(file.rule_ids)}" if file.rule_ids else ""
    return f"{file.verdict}{rules}"


def file_line(file: ApplyFile, dry_run: bool) -> str:
    """One file, escaped: outcome (or, in a dry run, included/declined), action, path, size, verdict, notes."""
    path = safe_text(file.path)
    if file.old_path:
        path = f"{safe_text(file.old_path)} -> {path}"
    state = ("apply" if file.included else "declined") if dry_run else file.outcome or "-"
    notes = []
    if file.sensitive:
        notes.append(f"sensitive: {safe_text(file.sensitive)}")
    if file.checkout != "matches":
        notes.append(f"checkout: {safe_text(file.checkout)}")
    if file.outcome_reason and not dry_run:
        notes.append(safe_text(file.outcome_reason))
    tail = f"  ({'; '.join(notes)})" if notes else ""
    return (f"  {state:<15} {file.action:<8} {path}  {_size(file.new_size if file.action != 'delete' else file.old_size)}"
            f"  {safe_text(_verdict(file))}{tail}")


def report_text(report: ApplyReport) -> str:
    dry_run = report.status == "dry_run"
    lines = [file_line(file, dry_run) for file in report.files]
    name = safe_text(report.box_name)
    if dry_run:
        included = sum(file.included for file in report.files)
        head = f"dry run of box {name}: {included} of {len(report.files)} file(s) would be decided and written; " \
               "nothing was recorded or written"
    elif report.status == "applied":
        head = f"applied box {name}: {len(report.written)} file(s) written, " \
               f"{sum(f.outcome == 'declined' for f in report.files)} declined (run {safe_text(report.run_id)})"
    elif report.status == "partial":
        head = f"apply of box {name} stopped midway: {safe_text(report.reason)}"
    else:
        head = f"apply of box {name} refused, nothing written: {safe_text(report.reason)}"
    if report.hint and report.status != "applied":
        head += f"\n  {safe_text(report.hint)}"
    return "\n".join([head, *lines]) + "\n"


def held_line(path: str, approval: ApprovalInfo) -> str:
    return (f"tkbox apply: held: writing {safe_text(path)} waits for a person ({safe_text(approval.id)}, until "
            f"{safe_text(approval.expires_at)}; asked because: {safe_text(approval.reason)}); answer with: tkbox "
            f"approve {safe_text(approval.id)} (or tkbox reject), or in the console")


async def apply_main(argv: list[str]) -> int:
    parser = CliParser(prog="tkbox apply", description="Apply a stopped box's patch to its checkout, file by file: "
                                                       "every file decided by the signer first, nothing written "
                                                       "unless every included file is allowed.")
    parser.add_argument("box", help="the box's name or id (stopped)")
    parser.add_argument("--dry-run", action="store_true",
                        help="show per file what would happen (action, size, sensitive, policy verdict); records "
                             "and writes nothing")
    parser.add_argument("--only", action="append", metavar="PATH", default=None,
                        help="apply only this path of the patch (repeat it); the other files are recorded as "
                             "declined")
    parser.add_argument("--allow-sensitive", action="store_true",
                        help="also write files that steer the next run or host automation (CI, hooks, "
                             "credentials, build files…: docs/apply.md)")
    parser.add_json()
    args = parser.parse_args(argv)
    report: ApplyReport | None = None
    async with daemon_client(args.box) as client:
        async for item in client.apply(args.box, dry_run=args.dry_run, only=args.only,
                                       allow_sensitive=args.allow_sensitive):
            if isinstance(item, ApplyReport):
                report = item
            else:
                print(held_line(*item), file=sys.stderr, flush=True)
    assert report is not None  # the client raises when the stream ends without one
    if args.json:
        out: dict[str, Any] = report.to_json()
        print(json.dumps(out, indent=2, sort_keys=True))  # ensure_ascii: no box byte reaches the terminal raw
    else:
        sys.stdout.write(report_text(report))
    return exit_status(report)


COMMANDS = {"apply": apply_main}
