"""What the daemon page shows, as escaped text: the daemon's health (``GET /v1/health``) and what its host gives a
box (``GET /v1/host``, the report of ``tkbox doctor``), one row per check with its fix when it is not ok.

Every value that came from the daemon is escaped here (``safe_text``), so the page shows it as text, never as
markup or terminal control.
"""

from __future__ import annotations

from typing import Any

from tkbox_daemon.wire_host import HostReport

from ..terminal_text import safe_text

HEALTH_FIELDS = (("version", "version"), ("backend", "backend"), ("recorded", "recorded by a signer"),
                 ("boxes", "live boxes"), ("max_boxes", "most boxes"), ("last_seq", "last event"))
STATUS_WORDS = {"ok": "ok", "degraded": "degraded", "missing": "MISSING"}


def health_rows(health: dict[str, Any]) -> list[tuple[str, str]]:
    """(label, value) for each health field the daemon gave, in a fixed order; booleans as yes/no."""
    rows = []
    for key, label in HEALTH_FIELDS:
        if key in health:
            value = health[key]
            rows.append((label, "yes" if value is True else "no" if value is False else safe_text(value)))
    ahead = health.get("started_ahead")
    if isinstance(ahead, dict):  # boxes started ahead (docs/boxes.md)
        text = f"{safe_text(ahead.get('ready'))} of {safe_text(ahead.get('size'))} ready"
        if ahead.get("failure"):
            text += f"; {safe_text(ahead['failure'])}"
        rows.append(("boxes started ahead", text))
    return rows


def check_rows(report: HostReport) -> list[tuple[str, str, str, str]]:
    """(status word, check name, what was found, fix) of each check, escaped; the fix only when not ok."""
    return [(STATUS_WORDS.get(check.status, safe_text(check.status)), safe_text(check.name), safe_text(check.found),
             safe_text(check.fix) if check.status != "ok" else "") for check in report.checks]


def copy_text(health: dict[str, Any], report: HostReport | None) -> str:
    """The page as plain lines (``y``), escaped as shown."""
    lines = [f"{label}: {value}" for label, value in health_rows(health)]
    if report is not None:
        lines += [f"host: {safe_text(report.host)}", safe_text(report.summary)]
        for status, name, found, fix in check_rows(report):
            lines.append(f"{status}  {name}  {found}" + (f"  (fix: {fix})" if fix else ""))
    return "\n".join(lines)
