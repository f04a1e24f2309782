"""Pure presentation: box and event → table cells, log lines, labels and hyphen state classes (no widgets)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from rich.text import Text

from tkbox_daemon.wire import BoxInfo, Event

BOX_COLUMNS = ("name", "state", "image", "age", "left", "execs", "conns", "approvals", "last event")
# Kinds whose log lines stand out: the daemon refused or could not record something.
ALERT_KINDS = frozenset({"exec.denied", "exec.refused", "box.failed", "gap", "signer.unavailable",
                         "daemon.unrecorded", "guest.protocol_error"})


def parse_time(value: str) -> datetime | None:
    """An ISO-8601 time from the daemon, or None when absent or malformed."""
    if not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def format_duration(seconds: float) -> str:
    """``42s``, ``3m``, ``2h05m``, ``4d`` — short enough for a table cell."""
    seconds = int(max(0, seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m"
    if seconds < 86400:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 86400}d"


def box_age(box: BoxInfo, now: datetime) -> str:
    created = parse_time(box.created_at)
    return format_duration((now - created).total_seconds()) if created else "-"


def box_time_left(box: BoxInfo, now: datetime) -> str:
    expires = parse_time(box.expires_at)
    if expires is None or box.state in ("stopped", "failed", "removed"):
        return "-"
    return format_duration((expires - now).total_seconds())


def state_class(state: str) -> str:
    """The hyphen class for a box state (``-running``); the stylesheet colours it with ``$box-running``."""
    return f"-{state}" if state else "-unknown"


def state_cell(state: str, theme_variables: dict[str, str]) -> Text:
    """The state cell, coloured with the theme's ``box-<state>`` token."""
    return Text(state or "?", style=theme_variables.get(f"box-{state}", ""))


def box_cells(box: BoxInfo, now: datetime) -> tuple[str, ...]:
    """The row for one box, in ``BOX_COLUMNS`` order (state as plain text; the table colours it)."""
    return (
        box.name,
        box.state,
        box.image,
        box_age(box, now),
        box_time_left(box, now),
        f"{box.execs_running}/{box.execs_total}",
        str(box.connections_open),
        str(box.approvals_pending),
        box.last_event or "-",
    )


def describe_data(data: dict[str, Any], limit: int = 120) -> str:
    """An event payload as ``key=value`` pairs, truncated (full text is in the daemon's history)."""
    text = " ".join(f"{key}={value}" for key, value in data.items())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def event_line(event: Event, box_name: str | None) -> str:
    """One log line: time, sequence number, box, kind and payload, as plain text."""
    clock = event.time[11:19] if len(event.time) >= 19 else event.time
    who = box_name or event.box_id or "daemon"
    return f"{clock} #{event.seq:<6} {who:<16} {event.kind:<20} {describe_data(event.data)}".rstrip()


def box_detail_lines(box: BoxInfo) -> list[tuple[str, str]]:
    """The detail pane as (label, value) pairs; secrets show names and bound hosts, never values."""
    secrets = ", ".join(f"{s.get('name', '?')} → {','.join(s.get('hosts', []))}" for s in box.secrets) or "none"
    limits = ", ".join(f"{key}={value}" for key, value in sorted(box.limits.items())) or "defaults"
    return [
        ("name", box.name),
        ("id", box.id),
        ("state", box.state + (f" ({box.reason})" if box.reason else "")),
        ("image", box.image),
        ("backend", box.backend or "-"),
        ("workspace", box.workspace),
        ("run id", box.run_id or "UNRECORDED"),
        ("allow", ", ".join(box.allow) or "nothing"),
        ("secrets", secrets),
        ("limits", limits),
        ("created", box.created_at or "-"),
        ("expires", box.expires_at or "-"),
    ]


def connection_label(connected: bool, reason: str, following: bool, new_count: int, filter_text: str,
                     filter_inverted: bool = False) -> str:
    """The status line under the log: connection, follow state and filter (``!`` included), in words."""
    link = "connected" if connected else f"DISCONNECTED from the daemon — retrying ({reason or 'no answer'})"
    follow = "FOLLOWING" if following else f"PAUSED  +{new_count} new  (f or G to follow)"
    inverted = "  (inverted: showing events that do not match)" if filter_inverted else ""
    return f"{link}  │  {follow}" + (f"  │  filter: {filter_text}{inverted}" if filter_text else "")
