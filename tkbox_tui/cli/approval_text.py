"""How approvals read on the command line: ``tkbox approvals`` (a block per approval), ``--follow`` (a line per
event), ``tkbox approve``/``reject`` (what was answered) and the times they show.

What is asked is the box's command line, so every field goes through ``safe_text``: nothing an approval carries
reaches the terminal raw.  Times are shown in UTC (``12:34:56 UTC``), as the daemon keeps them; durations are
relative to a ``now`` the caller passes (so the text is a function of its inputs).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from tkbox_daemon.wire import ApprovalInfo, Event

from ..terminal_text import safe_text

EVENT_KINDS = ("approval.pending", "approval.answered", "approval.expired")
"""The events ``tkbox approvals --follow`` prints (each carries ``data["approval"]``)."""


def parse_time(text: str) -> datetime | None:
    """An RFC 3339 time as an aware UTC datetime, or None when it is not one."""
    try:
        moment = datetime.fromisoformat(text)
    except (TypeError, ValueError):
        return None
    return moment.astimezone(UTC) if moment.tzinfo is not None else None


def clock(text: str) -> str:
    """``HH:MM:SS UTC`` for an RFC 3339 time; anything else shown escaped as it came (``?`` when empty)."""
    moment = parse_time(text)
    if moment is None:
        return safe_text(text) if text else "?"
    return moment.strftime("%H:%M:%S UTC")


def duration(seconds: float) -> str:
    """``12s``, ``1m48s``, ``2h05m``; a negative span (a clock just past a deadline) is ``0s``."""
    whole = max(0, int(seconds))
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"


def _since(text: str, now: datetime) -> str:
    moment = parse_time(text)
    return "?" if moment is None else duration((now - moment).total_seconds())


def _until(text: str, now: datetime) -> str:
    moment = parse_time(text)
    return "?" if moment is None else duration((moment - now).total_seconds())


def _field(value: Any) -> str:
    """One value of ``asked``: a string escaped, anything else in JSON's spelling (ASCII only)."""
    return safe_text(value) if isinstance(value, str) else json.dumps(value)


HOST_BECAUSE = {"off_list": "not on the allowlist", "policy": "the policy asks"}
"""Why a host was held (``asked["because"]`` of a ``host`` approval), in words."""
EXECS_NAMED = 10


def asked_text(info: ApprovalInfo) -> str:
    """What is asked, escaped: for an exec its command line; for a host its url (``https://host:443``, the full
    url of plain HTTP)."""
    command = info.asked.get("command")
    if command is not None:
        return _field(command)
    url = info.asked.get("url")
    if info.kind == "host" and isinstance(url, str) and url:
        return safe_text(url)
    return " ".join(f"{safe_text(key)}={_field(value)}" for key, value in info.asked.items()) or "?"


def rules_text(info: ApprovalInfo) -> str:
    rules = ", ".join(safe_text(rule) for rule in info.rule_ids) or "no rule"
    return f"{rules} {safe_text(info.reason)}".rstrip()


def box_text(info: ApprovalInfo) -> str:
    return safe_text(info.box_name or info.box_id or "?")


def _host_where(info: ApprovalInfo) -> str:
    """A host approval's ``(host H port P, not on the allowlist; execs running then: #3, #5)``."""
    asked, parts = info.asked, []
    if "host" in asked and "port" in asked:
        parts.append(f"host {_field(asked['host'])} port {_field(asked['port'])}")
    because = asked.get("because")
    if isinstance(because, str):
        parts.append(HOST_BECAUSE.get(because, safe_text(because)))
    running = info.context.get("execs_running")
    if isinstance(running, list):
        ids = [f"#{item}" for item in running if type(item) is int]
        more = f" and {len(ids) - EXECS_NAMED} more" if len(ids) > EXECS_NAMED else ""
        parts.append(f"execs running then: {', '.join(ids[:EXECS_NAMED])}{more}" if ids else "no exec running then")
    return f"  ({'; '.join(parts)})" if parts else ""


def _where(info: ApprovalInfo) -> str:
    if info.kind == "host":
        return _host_where(info)
    parts = []
    if "cwd" in info.asked:
        parts.append(f"cwd {_field(info.asked['cwd'])}")
    if info.asked.get("tty") is True:
        parts.append("on a terminal")
    return f"  ({', '.join(parts)})" if parts else ""


def _answer(info: ApprovalInfo) -> str:
    """Who answered and when: ``by uid 0 (root) at 12:33:20 UTC``."""
    if info.remembered_by:
        who = f"by remembered rule {safe_text(info.remembered_by)}"
    elif info.answered_by:
        who = f"by {safe_text(info.answered_by)}"
    else:
        who = ""
    when = f"at {clock(info.answered_at or info.expires_at)}"
    remembered = ", and remembered for the box" if info.remember else ""
    return " ".join(part for part in (who, when) if part) + remembered


def approval_lines(info: ApprovalInfo, now: datetime) -> list[str]:
    """One approval as ``tkbox approvals`` prints it: a head line, what is asked, the policy's reason and, once
    answered, the answer's reason."""
    if info.pending:
        timing = (f"held {_since(info.created_at, now)}, expires in {_until(info.expires_at, now)} "
                  f"(at {clock(info.expires_at)})")
    elif info.state == "expired":
        timing = f"at {clock(info.expires_at)}, nobody answered"
    else:
        timing = _answer(info)
    lines = [f"{safe_text(info.id)}  {safe_text(info.state):<9} {box_text(info)}  {safe_text(info.kind)}  {timing}",
             f"  asks:   {asked_text(info)}{_where(info)}",
             f"  policy: {rules_text(info)}"]
    if info.answer_reason:
        lines.append(f"  reason: {safe_text(info.answer_reason)}")
    return lines


def event_approval(event: Event) -> ApprovalInfo | None:
    """The approval an approval event carries, or None when the event is another kind or carries none."""
    if event.kind not in EVENT_KINDS:
        return None
    try:
        return ApprovalInfo.from_json(event.data.get("approval"))
    except ValueError:
        return None


def event_line(event: Event, info: ApprovalInfo) -> str:
    """One approval event as ``tkbox approvals --follow`` prints it, on one line."""
    if info.pending:
        detail = (f"{rules_text(info)}; expires at {clock(info.expires_at)}; "
                  f"approve with: tkbox approve {safe_text(info.id)}")
    elif info.state in ("approved", "rejected"):
        reason = f": {safe_text(info.answer_reason)}" if info.answer_reason else ""
        detail = _answer(info) + reason
    else:
        detail = safe_text(info.answer_reason) or ("nobody answered in time" if info.state == "expired" else "")
    return (f"{clock(event.time)}  {safe_text(info.state):<9} {safe_text(info.id)}  {box_text(info)}  "
            f"{asked_text(info)}  — {detail}").rstrip(" —")


def answered_line(info: ApprovalInfo) -> str:
    """What ``tkbox approve``/``reject`` did: ``approved apr-… (sudo true in box web) as uid 0 (root)``."""
    who = f" as {safe_text(info.answered_by)}" if info.answered_by else ""
    reason = f": {safe_text(info.answer_reason)}" if info.answer_reason else ""
    return f"{safe_text(info.state)} {safe_text(info.id)} ({asked_text(info)} in box {box_text(info)}){who}{reason}"
