"""Pure presentation of approvals for the inbox, the prompt and notifications: cells, details, countdowns and marks
(no widgets).

What an approval asks is box-controlled (the command line, its working directory, the box's name), and so may be
the reasons that quote it: every piece leaves here through ``safe_text``, and widgets show it as ``Text``.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

from tkbox_daemon.wire import ApprovalInfo, RememberedRule

from ..terminal_text import clip, safe_text
from .present import parse_time

INBOX_COLUMNS = ("state", "box", "kind", "asks", "held", "expires", "rule", "reason")
"""The inbox's columns: what matters first, so that a narrow terminal cuts the reason (whole in the details)."""
ASKS_CELL = 40
"""Characters of what is asked in the inbox's table (the details below it, and the prompt, show it whole)."""
REASON_CELL = 30
RULES_CELL = 16
BOX_CELL = 20
SUMMARY_LIMIT = 160
"""Characters of what is asked in a notification."""


def _time(value: str) -> datetime | None:
    parsed = parse_time(value)
    return parsed.replace(tzinfo=UTC) if parsed is not None and parsed.tzinfo is None else parsed


def format_countdown(seconds: float) -> str:
    """``45s``, ``1m52s``, ``2h05m``: a countdown that moves every second."""
    whole = int(max(0, seconds))
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"


def seconds_left(info: ApprovalInfo, now: datetime) -> float | None:
    """Seconds until a pending approval expires (negative once past), or None when its expiry is unknown."""
    expires = _time(info.expires_at)
    return None if expires is None else (expires - now).total_seconds()


def expires_text(info: ApprovalInfo, now: datetime) -> str:
    """The inbox's countdown: ``1m52s`` for a pending approval, ``due`` once its time is up (the daemon's
    ``approval.expired`` follows), ``-`` for a settled one."""
    if not info.pending:
        return "-"
    left = seconds_left(info, now)
    if left is None:
        return "?"
    return format_countdown(left) if left > 0 else "due"


def held_text(info: ApprovalInfo, now: datetime) -> str:
    """How long it has been (pending) or was (settled) held."""
    created = _time(info.created_at)
    if created is None:
        return "?"
    until = now if info.pending else (_time(info.answered_at) or now)
    return format_countdown((until - created).total_seconds())


HOST_BECAUSE = {"off_list": "not on the box's allowlist", "policy": "the policy asks about it"}
"""Why a host was held (``asked["because"]`` of a ``host`` approval), in words."""
EXECS_NAMED = 10
"""Execs named in a host approval's details (the rest are counted)."""


def host_target(asked: dict[str, object]) -> str | None:
    """A ``host`` approval's ``host:port`` (IPv6 in brackets, as the daemon writes it), escaped; None without
    both."""
    host, port = asked.get("host"), asked.get("port")
    if not isinstance(host, str) or type(port) is not int:
        return None
    return f"{safe_text(host)}:{port}"


def asked_text(info: ApprovalInfo) -> str:
    """What is asked, escaped and whole: an exec's command line; a write's action and path (``modify src/a.py``,
    ``rename old → new``); a host's url (``https://host:443``, the full url of plain HTTP), else its ``host:port``;
    for a kind this console does not know, its ``asked`` as JSON."""
    if info.kind == "exec" and isinstance(info.asked.get("command"), str):
        return safe_text(info.asked["command"])
    asked = info.asked
    if info.kind == "host":
        url = asked.get("url")
        target = host_target(asked)
        if isinstance(url, str) and url:
            return safe_text(url)
        if target is not None:
            return target
    if info.kind == "write" and isinstance(asked.get("path"), str) and isinstance(asked.get("action"), str):
        old = asked.get("old_path")
        source = f"{safe_text(old)} → " if isinstance(old, str) and old else ""
        return f"{safe_text(asked['action'])} {source}{safe_text(asked['path'])}"
    return safe_text(json.dumps(info.asked, ensure_ascii=False, sort_keys=True))


def rules_text(info: ApprovalInfo) -> str:
    return ", ".join(safe_text(rule) for rule in info.rule_ids) or "-"


def state_text(info: ApprovalInfo) -> str:
    """The mark of an approval: ``PENDING``, or how it ended and by whose word."""
    by = safe_text(info.answered_by) or "?"
    why = f": {safe_text(info.answer_reason)}" if info.answer_reason else ""
    if info.state == "pending":
        return "PENDING"
    if info.state == "approved":
        if info.remembered_by:
            return f"approved by remembered rule {safe_text(info.remembered_by)}"
        return f"approved by {by}" + (" (and remembered)" if info.remember else "")
    if info.state == "rejected":
        return f"rejected by {by}{why}"
    return safe_text(info.state) + why  # expired, withdrawn, lost: the reason says why


def box_label(info: ApprovalInfo) -> str:
    return safe_text(info.box_name or info.box_id)


def inbox_cells(info: ApprovalInfo, now: datetime) -> tuple[str, ...]:
    """One row of the inbox, in ``INBOX_COLUMNS`` order, escaped and cut to fit (the details have it whole): the
    state as one word (``PENDING``, ``approved``…; who answered and why are in the details)."""
    return (
        "PENDING" if info.pending else safe_text(info.state),
        clip(box_label(info), BOX_CELL),
        safe_text(info.kind),
        clip(asked_text(info), ASKS_CELL),
        held_text(info, now),
        expires_text(info, now),
        clip(rules_text(info), RULES_CELL),
        clip(safe_text(info.reason) or "-", REASON_CELL),
    )


def detail_lines(info: ApprovalInfo, now: datetime) -> list[tuple[str, str]]:
    """Every field that matters, as (label, escaped value), whole: the inbox's details and the prompt's body."""
    lines = [("box", f"{box_label(info)} ({safe_text(info.box_id)})"),
             ("asks", f"{safe_text(info.kind)}: {asked_text(info)}")]
    if info.kind == "exec":
        where = safe_text(info.asked.get("cwd") or "-")
        lines.append(("in", where + ("   (on a terminal: tty)" if info.asked.get("tty") else "")))
    if info.kind == "host":
        lines += host_lines(info)
    lines += [("rule", f"{rules_text(info)}: {safe_text(info.reason) or 'no reason given'}")]
    if info.hint:
        lines.append(("hint", safe_text(info.hint)))
    if isinstance(info.context.get("exec_id"), int):
        lines.append(("exec", f"#{info.context['exec_id']} on the box's page"))
    left = seconds_left(info, now)
    timing = f"held for {held_text(info, now)}"
    if info.pending:
        timing += "   expires in " + (format_countdown(left) if left is not None and left > 0 else "a moment (due)")
    lines += [("time", timing), ("state", state_text(info)), ("id", safe_text(info.id))]
    return lines


def host_lines(info: ApprovalInfo) -> list[tuple[str, str]]:
    """A ``host`` approval's own details: the host and port and why it was held, and the execs that were running
    when it was asked (any of them may have opened the connection)."""
    target = host_target(info.asked)
    because = info.asked.get("because")
    why = HOST_BECAUSE.get(because, safe_text(because)) if isinstance(because, str) else ""
    lines = [("host", (target or "?") + (f"   ({why})" if why else ""))]
    running = info.context.get("execs_running")
    if isinstance(running, list):
        ids = [f"#{item}" for item in running if type(item) is int]
        more = f" and {len(ids) - EXECS_NAMED} more" if len(ids) > EXECS_NAMED else ""
        lines.append(("execs", ", ".join(ids[:EXECS_NAMED]) + more + " running then (on the box's page)" if ids
                      else "none was running then"))
    return lines


def summary(info: ApprovalInfo) -> str:
    """One line for a notification: ``web-api: sudo true (TK-A010)``, ``web-api: host https://h:443 (TK-A008)``."""
    what = f"host {asked_text(info)}" if info.kind == "host" else asked_text(info)
    return clip(f"{box_label(info)}: {what} ({rules_text(info)})", SUMMARY_LIMIT)


def answered_elsewhere(info: ApprovalInfo) -> str:
    """What the prompt says when the approval it showed was settled by someone else (or ran out)."""
    return f"{safe_text(info.id)} ({summary(info)}) is no longer pending: {state_text(info)}; nothing to answer."


def remembered_rules(box_remembered: list[dict[str, object]]) -> list[RememberedRule]:
    """A box's remembered rules (``BoxInfo.remembered``), leaving out any entry that is not one."""
    rules = []
    for item in box_remembered:
        try:
            rules.append(RememberedRule.from_json(item))
        except ValueError:
            continue
    return rules


REMEMBERED_COLUMNS = ("rule", "program", "policy rule", "by", "since", "from")


def remembered_cells(rule: RememberedRule) -> tuple[str, ...]:
    """One row of the box page's remembered rules, escaped."""
    since = rule.created_at[11:19] if len(rule.created_at) >= 19 else rule.created_at
    return (safe_text(rule.id), safe_text(rule.program), safe_text(rule.rule_id), safe_text(rule.by),
            safe_text(since), safe_text(rule.approval_id))
