"""``tkbox doctor [--json] [--daemon]``: what this host gives a box (backends, user namespaces, seccomp, cgroups
and the limits they enforce, the disk quota, overlayfs), and the fix for what is missing.

By default the checks run here, in this process, as whoever runs the command: no daemon is needed, so it answers
"can tkbox run on this machine?" before anything is started. ``--daemon`` asks the running daemon instead (its
view, as the user it runs as). Exit status 0 when boxes can run here (a check that is not ``ok`` is printed with
its fix), 1 when no backend works. Every text is printed escaped.
"""

from __future__ import annotations

import asyncio
import json

from tkbox_daemon.wire_host import HostReport

from ..client import DaemonError
from ..terminal_text import safe_text
from .daemon_refusals import daemon_client, from_daemon
from .report import CliError, CliParser, report, wants_json

EXIT_NO_BACKEND = 1
MARKS = {"ok": "ok", "degraded": "degraded", "missing": "MISSING"}


def _parser() -> CliParser:
    parser = CliParser(prog="tkbox doctor", description="Say what this host gives a box and what is missing, with "
                                                        "the fix for each. Exit status 1 when no backend works.")
    parser.add_argument("--daemon", action="store_true",
                        help="ask the running daemon (its view, as the user it runs as) instead of checking here")
    parser.add_json()
    return parser


def report_lines(host_report: HostReport) -> list[str]:
    """The report as ``tkbox doctor`` prints it: a heading, one line per check (its fix under it), the summary."""
    lines = [f"tkbox doctor: {safe_text(host_report.host)}" if host_report.host else "tkbox doctor"]
    width = max(len(check.name) for check in host_report.checks) if host_report.checks else 0
    for check in host_report.checks:
        mark = MARKS.get(check.status, safe_text(check.status))
        lines.append(f"  {mark:<8}  {safe_text(check.name):<{width}}  {safe_text(check.found)}")
        if check.fix and check.status != "ok":
            lines.append(f"  {'':<8}  {'':<{width}}  fix: {safe_text(check.fix)}")
    lines.append(safe_text(host_report.summary))
    return lines


async def _daemon_report() -> HostReport:
    async with daemon_client() as client:
        return await client.host_report(refresh=True)


def doctor_main(argv: list[str]) -> int:
    try:
        args = _parser().parse_args(argv)
        if args.daemon:
            host_report = asyncio.run(_daemon_report())
        else:
            from tkbox_daemon.host_checks import host_report as check_here

            host_report = check_here()
    except CliError as error:
        return report(error, "doctor", wants_json(argv))
    except DaemonError as error:
        return report(from_daemon(error), "doctor", wants_json(argv))
    if args.json:
        print(json.dumps(host_report.to_json(), indent=2, sort_keys=True))
    else:
        print("\n".join(report_lines(host_report)))
    return 0 if host_report.boxes_can_run else EXIT_NO_BACKEND
