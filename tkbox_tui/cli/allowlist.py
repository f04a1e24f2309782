"""``tkbox allow | block | allowlist``: a running box's egress allowlist, shown and changed from the command line
through the daemon's API (the daemon takes the operator's identity from the socket's peer credentials and records
each change in the box's run).

They run as the box commands do (``boxes.box_command``): a failure is one line on stderr, or an ``{"error": …}``
object with ``--json``. Every text that came from the daemon is printed escaped.
"""

from __future__ import annotations

import json
import re

from tkbox_daemon.wire import BoxInfo
from tkbox_daemon.wire_egress import AllowlistChangeInfo, AllowlistInfo

from ..terminal_text import safe_text
from .daemon_refusals import daemon_client
from .report import CliError, CliParser

ENTRY_PORT = re.compile(r"(.+):([0-9]+)\Z")
KILL_SWITCH = "nothing is allowed: every connection waits for a person (the kill switch)"
ENTRY_HELP = ("host (HTTPS on 443, HTTP on 80), host:port (that port only), *.host (the names under host), an IP "
              "address (93.184.216.34, [2606:2800:220:1::1]), or preset:NAME (docs/egress.md lists the presets)")


def _print_json(value: object) -> None:
    print(json.dumps(value, indent=2, sort_keys=True))  # ensure_ascii: daemon text arrives as \uXXXX, never raw


def entry_meaning(text: str) -> str:
    """What one entry lets through, in words: ``HTTPS on 443, HTTP on 80``, ``port 8443 only``, ``blocked``…"""
    block = text.startswith("!")
    rest = text[1:] if block else text
    found = ENTRY_PORT.match(rest)
    host, port = (found.group(1), found.group(2)) if found else (rest, None)
    names = f"every name under {host[2:]}" if host.startswith("*.") else ""
    if block:
        what = f"blocked on port {port}" if port else "blocked on every port"
    else:
        what = f"port {port} only (HTTPS, HTTP or a tunnel that is not TLS)" if port else "HTTPS on 443, HTTP on 80"
    return f"{names}: {what}" if names else what


def allowlist_lines(info: AllowlistInfo) -> list[str]:
    """``tkbox allowlist BOX``: one line per entry with what it lets through, then the presets and pinned names."""
    head = f"box {safe_text(info.box_name)} ({safe_text(info.state)})"
    if not info.entries:
        lines = [f"{head}: {KILL_SWITCH}"]
    else:
        lines = [f"{head}: {len(info.entries)} entr{'y' if len(info.entries) == 1 else 'ies'}"]
        width = min(40, max(len(safe_text(entry)) for entry in info.entries))
        lines += [f"  {safe_text(entry):<{width}}  {safe_text(entry_meaning(entry))}" for entry in info.entries]
    if info.presets:
        lines.append(f"presets named when it started: {', '.join(safe_text(name) for name in info.presets)}")
    lines += _pin_lines(info.resolve)
    return lines


def _pin_lines(resolve: dict[str, list[str]]) -> list[str]:
    return [f"pinned: {safe_text(name)} -> {', '.join(safe_text(address) for address in addresses)}"
            for name, addresses in resolve.items()]


def start_lines(info: BoxInfo) -> list[str]:
    """What ``tkbox run`` prints of a new box's allowlist: its entries (presets expanded), each preset named with
    its entries and warning, and the pinned names."""
    from tkbox_daemon.egress.presets import PRESETS, warnings

    empty = KILL_SWITCH if info.inspect == "bound" else "nothing is allowed: every connection is refused"
    lines = [f"  allow: {', '.join(safe_text(entry) for entry in info.allow)}" if info.allow else f"  allow: {empty}"]
    for name in info.allow_presets:
        preset = PRESETS.get(name)
        if preset is not None:
            lines.append(f"    preset:{safe_text(name)} = {', '.join(preset.entries)}")
    lines += [f"  {line}" for line in warnings(info.allow_presets)]
    lines += [f"  {line}" for line in _pin_lines(info.resolve)]
    if info.inspect != "bound":
        lines.append(f"  inspect: {safe_text(info.inspect)} (a host off the list is refused at once, never held for "
                     "a person)")
    return lines


def change_lines(box: str, change: AllowlistChangeInfo) -> list[str]:
    """``tkbox allow`` and ``tkbox block``: what changed (or would, with ``--dry-run``), the notes, what earlier
    attempts it lets through, and where the list now stands."""
    name = safe_text(change.allowlist.box_name or box)
    dry_run = not change.applied and bool(change.added or change.removed)
    verb = {"added": "would add" if dry_run else "added", "removed": "would remove" if dry_run else "removed"}
    lines = [f"box {name}: {verb[key]} {', '.join(safe_text(entry) for entry in getattr(change, key))}"
             for key in ("added", "removed") if getattr(change, key)]
    if not change.added and not change.removed:
        lines.append(f"box {name}: nothing changed")
    if change.presets:
        lines.append(f"presets: {', '.join('preset:' + safe_text(preset) for preset in change.presets)}")
    lines += [safe_text(note) if note.startswith("WARNING") else f"note: {safe_text(note)}" for note in change.notes]
    if change.would_let_through:
        shown = [f"{safe_text(item.get('kind'))}://{safe_text(item.get('host'))}:{safe_text(item.get('port'))} "
                 f"({safe_text(item.get('outcome'))})" for item in change.would_let_through]
        lines.append(f"would have let through {len(shown)} earlier attempt(s) of this box: "
                     f"{', '.join(shown[:20])}{' …' if len(shown) > 20 else ''}")
    if dry_run:
        lines.append("dry run: nothing changed; run it again without --dry-run to make the change")
    elif change.applied:
        count = len(change.allowlist.entries)
        lines.append(f"box {name} now has {count} entr{'y' if count == 1 else 'ies'}"
                     + ("" if count else f": {KILL_SWITCH}") + f"; see them with: tkbox allowlist {safe_text(box)}")
    return lines


async def _change(argv: list[str], command: str) -> int:
    allow = command == "allow"
    parser = CliParser(
        prog=f"tkbox {command}",
        description=("Allow a running box to reach more hosts: each entry is added to its egress allowlist and "
                     "takes effect on its next connection. A block on exactly that host is lifted.") if allow else
                    ("Stop a running box from reaching hosts: entries that allow them are removed, and where a "
                     "wider entry (*.host) still covers a host, a block (!host) that wins over it is added. Takes "
                     "effect on the box's next connection; connections already open go on."))
    parser.add_argument("box", metavar="BOX", help="the box's name or id")
    parser.add_argument("hosts", metavar="HOST", nargs="+" if allow else "*", help=ENTRY_HELP)
    if not allow:
        parser.add_argument("--all", action="store_true",
                            help="empty the allowlist (the kill switch): every connection then waits for a person")
    parser.add_argument("--dry-run", action="store_true",
                        help="show the change, and which earlier attempts of the box it would let through, "
                             "without making it")
    parser.add_json("print the change as JSON (added, removed, notes, the list after it, would_let_through)")
    args = parser.parse_args(argv)
    everything = bool(getattr(args, "all", False))
    if everything == bool(args.hosts):
        raise CliError("usage", "name the hosts to block, or --all to empty the list (not both)",
                       f"see: tkbox {command} --help")
    action, items = ("set", []) if everything else (command, list(args.hosts))
    async with daemon_client(args.box) as client:
        change = await client.change_allowlist(args.box, action, items, dry_run=args.dry_run)
    if args.json:
        _print_json(change.to_json())
    else:
        print("\n".join(change_lines(args.box, change)))
    return 0


async def allowlist_main(argv: list[str]) -> int:
    parser = CliParser(prog="tkbox allowlist",
                       description="Show a box's egress allowlist as it is now: each entry and what it lets "
                                   "through, the presets its settings named, and its pinned names (--resolve).")
    parser.add_argument("box", metavar="BOX", help="the box's name or id")
    parser.add_json("print the allowlist as JSON (box_id, box_name, state, entries, presets, resolve)")
    args = parser.parse_args(argv)
    async with daemon_client(args.box) as client:
        info = await client.allowlist(args.box)
    if args.json:
        _print_json(info.to_json())
    else:
        print("\n".join(allowlist_lines(info)))
    return 0


COMMANDS = {
    "allow": lambda argv: _change(argv, "allow"),
    "block": lambda argv: _change(argv, "block"),
    "allowlist": allowlist_main,
}
