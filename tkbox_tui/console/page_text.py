"""Pure presentation for the box page and the event page: exec rows, an exec's details and output, an event's every
field, and the text ``y`` copies (no widgets).

Everything here is box-controlled or may be (commands, reasons, errors, output, event data) and leaves through
``safe_text``/``safe_lines``: what is shown, and what is copied, is the escaped form.
"""

from __future__ import annotations

import json
import re
from typing import Any

from tkbox_daemon.wire import Event, ExecInfo, ExecOutput, OutputTail

from ..terminal_text import clip, safe_lines, safe_text

EXEC_COLUMNS = ("#", "started", "command", "verdict", "rules", "end", "by", "took", "stdout", "stderr")
COMMAND_CELL = 60  # characters of a command in the table (the detail shows it whole)
RULES_CELL = 24
FIELD_SHOWN = 64 * 1024  # characters of one event field the event page shows (the daemon's history has it all)
_SEQ = re.compile(r"(?:^|\s)#(\d{1,16})\b")


def format_bytes(size: int) -> str:
    """``0 B``, ``512 B``, ``1.5 KiB``, ``16.0 MiB``."""
    if size < 1024:
        return f"{size} B"
    value = float(size)
    for unit in ("KiB", "MiB"):
        value /= 1024
        if value < 1024:
            return f"{value:.1f} {unit}"
    return f"{value / 1024:.1f} GiB"


def format_millis(millis: int | None) -> str:
    """``850ms``, ``3.4s``, ``2m05s``, ``1h02m``; ``-`` when unknown."""
    if millis is None:
        return "-"
    if millis < 1000:
        return f"{millis}ms"
    seconds = millis / 1000
    if seconds < 60:
        return f"{seconds:.1f}s"
    whole = int(seconds)
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"


def exec_end(info: ExecInfo) -> str:
    """How an exec ended, in a few words: ``exit 0``, ``signal 9``, ``timed out``, ``running``, ``denied``…"""
    if info.state in ("running", "denied", "lost"):
        return info.state
    if info.timed_out:
        return "timed out"
    if info.state == "failed":
        return "ended by host" if info.reported_by == "host" else "did not start"
    if info.signal is not None and (info.exit_code is None or info.exit_code == 128 + info.signal):
        return f"signal {info.signal}"
    return f"exit {info.exit_code}"


def tail_cell(tail: OutputTail, dropped: bool) -> str:
    if dropped and tail.total:
        return f"dropped ({format_bytes(tail.total)})"
    if tail.truncated:
        return f"{format_bytes(tail.kept)} of {format_bytes(tail.total)}"
    return format_bytes(tail.total)


def exec_cells(info: ExecInfo) -> tuple[str, ...]:
    """One row of the box page's exec table, in ``EXEC_COLUMNS`` order, escaped."""
    started = info.started_at[11:19] if len(info.started_at) >= 19 else info.started_at
    return (
        str(info.id),
        safe_text(started),
        clip(safe_text(info.command), COMMAND_CELL),
        safe_text(info.verdict or "-"),
        clip(", ".join(safe_text(rule) for rule in info.rule_ids) or "-", RULES_CELL),
        exec_end(info),
        safe_text(info.reported_by or "-"),
        "…" if info.state == "running" else format_millis(info.duration_ms),
        tail_cell(info.stdout, info.output_dropped),
        tail_cell(info.stderr, info.output_dropped),
    )


def whose_word(info: ExecInfo) -> str:
    """What the end means and whose word it is."""
    if info.state == "running":
        return "still running"
    if info.state == "denied":
        return "never ran: the decision was not allow"
    if info.state == "lost":
        return safe_text(info.error or "lost with the daemon that ran it")
    if info.reported_by == "guest" and info.state == "finished":
        return f"{exec_end(info)}, as the box's guest agent reported it (the box's word)"
    who = "the host (the daemon)" if info.reported_by == "host" else "the box's guest agent"
    return f"{exec_end(info)}, said by {who}: {safe_text(info.error or 'no reason given')}"


def stream_summary(name: str, tail: OutputTail, dropped: bool, tail_bytes: int) -> str:
    if dropped:
        return (f"{name}: {format_bytes(tail.total)} written, dropped (the box's output budget needed the room; "
                "the oldest execs' output goes first)")
    if tail.truncated:
        return (f"{name}: the last {format_bytes(tail.kept)} of {format_bytes(tail.total)} "
                f"(the daemon keeps the last {format_bytes(tail_bytes)} of each stream)")
    return f"{name}: {format_bytes(tail.total)}"


def exec_detail_lines(info: ExecInfo, tail_bytes: int = 256 * 1024) -> list[tuple[str, str]]:
    """The selected exec as (label, value) pairs, every value escaped and whole."""
    rules = ", ".join(safe_text(rule) for rule in info.rule_ids) or "none"
    lines = [
        ("command", safe_text(info.command) + ("  (cut by the daemon at 4 KiB)" if info.command_cut else "")
         + ("  (on a pseudo-terminal)" if info.tty else "")),
        ("decision", f"{safe_text(info.verdict or '-')}  rules: {rules}"),
        ("reason", safe_text(info.reason or "-")),
    ]
    if info.hint:
        lines.append(("hint", safe_text(info.hint)))
    lines += [
        ("end", whose_word(info)),
        ("started", f"{safe_text(info.started_at)}   took {format_millis(info.duration_ms)}"
         if info.state != "running" else f"{safe_text(info.started_at)}   (running)"),
        ("output", "   ".join(stream_summary(name, getattr(info, name), info.output_dropped, tail_bytes)
                              for name in ("stdout", "stderr"))),
    ]
    return lines


def output_lines(output: ExecOutput) -> list[str]:
    """The kept output for a ``Log``: a heading per stream, then its text escaped (newlines and tabs kept)."""
    lines: list[str] = []
    for name, data, tail in (("stdout", output.stdout, output.exec.stdout),
                             ("stderr", output.stderr, output.exec.stderr)):
        if output.exec.output_dropped:
            heading = f"── {name}: dropped ──"
        elif tail.truncated:
            heading = f"── {name}: the last {format_bytes(tail.kept)} of {format_bytes(tail.total)} ──"
        else:
            heading = f"── {name}: {format_bytes(tail.total)} ──"
        lines.append(heading)
        if data:
            lines += safe_lines(data).split("\n")
            if lines[-1] == "":
                lines.pop()
            if not data.endswith(b"\n"):
                lines.append("⏎ (no newline at the end)")
    return lines


def exec_copy_text(output: ExecOutput, tail_bytes: int = 256 * 1024) -> str:
    """What ``y`` copies on the box page: the exec's details and its kept output, as shown (escaped)."""
    details = [f"{label}: {value}" for label, value in exec_detail_lines(output.exec, tail_bytes)]
    return "\n".join([f"exec #{output.exec.id}", *details, *output_lines(output)]) + "\n"


# -- the event page --------------------------------------------------------------------------------------------------

def seq_of_line(line: str) -> int | None:
    """The sequence number of the event a log line shows (its first ``#N``: the box name comes after it)."""
    match = _SEQ.search(line)
    return int(match.group(1)) if match else None


def field_text(value: Any) -> str:
    """One event field, whole (up to ``FIELD_SHOWN`` characters, then a note), escaped: a string as its text, any
    other value as JSON (``null``, ``false``, ``{"a": 1}``)."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)
    if len(text) > FIELD_SHOWN:
        rest = len(text) - FIELD_SHOWN
        return safe_text(text[:FIELD_SHOWN]) + f" … ({rest:,} more characters: tkbox events --json has them all)"
    return safe_text(text)


def event_fields(event: Event, box_name: str | None) -> list[tuple[str, str]]:
    """Every field of the event as (label, value), escaped: the envelope, then each data field in full."""
    box = f"{safe_text(box_name)} ({safe_text(event.box_id)})" if box_name else safe_text(event.box_id or "daemon")
    fields = [("seq", str(event.seq)), ("time", safe_text(event.time)), ("box", box), ("kind", safe_text(event.kind))]
    fields += [(f"data.{safe_text(key)}", field_text(value)) for key, value in event.data.items()]
    if not event.data:
        fields.append(("data", "{}"))
    return fields


def event_copy_text(event: Event, box_name: str | None) -> str:
    """What ``y`` copies on the event page: every field, one per line, as shown (escaped)."""
    return "\n".join(f"{label}: {value}" for label, value in event_fields(event, box_name)) + "\n"
