"""``tkbox run | exec | ls | stop | rm | diff | events``: boxes from the command line, through the daemon's API.

``tkbox exec`` has its own module (``exec_command``), and so have the approvals (``approvals``: ``approvals``,
``approve``, ``reject``, ``forget``) and the egress allowlist (``allowlist``: ``allow``, ``block``, ``allowlist``);
the rest are here.  Every command reports a failure through
``report`` (one line on stderr, or a JSON error object on stdout with ``--json``).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from tkbox_daemon.wire import BoxInfo, Event

from ..client import DaemonError
from ..terminal_text import safe_lines, safe_text
from .daemon_refusals import daemon_client, from_daemon
from .loopless import InterruptPoints, finish
from .report import CliError, CliParser, interrupted, report, wants_json

EXEC_NAMES = ("EXIT_DENIED", "RawTerminal", "drive_exec", "exec_main")  # tests drive these here


def __getattr__(name: str) -> Any:
    """``tkbox exec``'s names, imported from its module only when asked for (``ls`` needs none of them)."""
    if name in EXEC_NAMES:
        return getattr(importlib.import_module(".exec_command", __package__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _fail(error: DaemonError | CliError, command: str, as_json: bool = False) -> int:
    """Report a failed box command; the daemon's message may quote box or guest text, so it is shown escaped."""
    return report(error if isinstance(error, CliError) else from_daemon(error), command, as_json)


def _print_box(info: BoxInfo, as_json: bool) -> None:
    if as_json:
        print(json.dumps(info.to_json(), indent=2, sort_keys=True))
        return
    reason = f" ({safe_text(info.reason)})" if info.reason else ""
    print(f"{safe_text(info.name)}  id {safe_text(info.id)}  {safe_text(info.state)}{reason}\n"
          f"  run {safe_text(info.run_id or 'UNRECORDED')}  backend {safe_text(info.backend)}  "
          f"workspace {safe_text(info.workspace)}")


def _run_parser() -> CliParser:
    parser = CliParser(prog="tkbox run", description="Create and start a box on a workspace. Settings come from "
                                                     "tkbox.yaml when there is one; flags override it.")
    parser.add_argument("--name", help="the box's name (default: from tkbox.yaml or generated)")
    parser.add_argument("--workspace", help="the checkout to work on (default: tkbox.yaml's, else .)")
    parser.add_argument("--image", help="host (default) or dir:PATH, a prepared root directory")
    from .allowlist import ENTRY_HELP

    parser.add_argument("--allow", action="append", default=None, metavar="HOST",
                        help="let the box reach HOST through its egress proxy (repeat it): " + ENTRY_HELP
                             + ". Without it nothing is allowed: every connection waits for a person")
    parser.add_argument("--resolve", action="append", default=None, metavar="NAME=ADDR",
                        help="pin NAME to ADDR (repeat it, or NAME=ADDR,ADDR) instead of the host's resolver, for "
                             "air-gapped hosts and tests; a pinned address passes the same checks")
    parser.add_argument("--inspect", metavar="MODE",
                        help="bound (default): a host off the allowlist is held for a person; all: it is refused at "
                             "once")
    parser.add_argument("--secret", action="append", default=None, metavar="NAME=env:VAR@HOST",
                        help="a secret for the secret door, which is not built yet: refused. Once built, VAR is "
                             "read from the environment of whoever runs tkbox run, and the box sees only a "
                             "placeholder")
    parser.add_argument("--task", help="the operator's task for this box (recorded as tkbox.task)")
    parser.add_argument("--config", type=Path, help="settings file (default: ./tkbox.yaml when present)")
    for key, text in (("memory", "memory, e.g. 2G"), ("cpus", "CPUs"), ("pids", "processes"),
                      ("disk", "what the box may write to its workspace, e.g. 4G (reserved on the host)"),
                      ("lifetime", "lifetime in seconds"), ("exec-timeout", "per-command timeout in seconds")):
        parser.add_argument(f"--{key}", help=f"limit: {text}")
    parser.add_json()
    return parser


def build_settings(args: argparse.Namespace) -> dict[str, Any]:
    """tkbox.yaml first, then flags over it (flags win).  The daemon checks the result: it is the one place that
    refuses a setting (doors not built yet included), so the CLI, tkbox.yaml and the console all get its words."""
    from tkbox_daemon.boxes.settings import SettingsError, load_tkbox_yaml

    settings: dict[str, Any] = {}
    config = args.config or (Path("tkbox.yaml") if Path("tkbox.yaml").exists() else None)
    if config is not None:
        try:
            settings = load_tkbox_yaml(config)
        except SettingsError as exc:
            raise CliError("invalid_settings", str(exc)) from None
        except OSError as exc:
            raise CliError("invalid_settings", f"cannot read {config}: {exc.strerror}") from None
        if "workspace" in settings and not os.path.isabs(str(settings["workspace"])):
            settings["workspace"] = str((config.parent / str(settings["workspace"])).resolve())
    for key in ("name", "image", "task", "inspect"):
        if getattr(args, key):
            settings[key] = getattr(args, key)
    settings["workspace"] = str(Path(args.workspace or settings.get("workspace") or ".").resolve())
    if args.allow:
        settings["allow"] = args.allow
    if args.resolve:
        settings["resolve"] = args.resolve
    if args.secret:
        settings["secrets"] = args.secret
    box_limits = settings.get("limits") or {}
    if not isinstance(box_limits, dict):  # sent as it is: the daemon refuses it and names the field
        return settings
    box_limits = dict(box_limits)
    for flag, key in (("memory", "memory"), ("cpus", "cpus"), ("pids", "pids"), ("disk", "disk"),
                      ("lifetime", "lifetime"), ("exec_timeout", "exec_timeout")):
        value = getattr(args, flag)
        if value is not None:
            box_limits[key] = int(value) if value.isdigit() else value
    if box_limits:
        settings["limits"] = box_limits
    return settings


async def _run(argv: list[str]) -> int:
    args = _run_parser().parse_args(argv)
    settings = build_settings(args)
    async with daemon_client() as client:
        info = await client.create_box(settings)
    _print_box(info, args.json)
    if not args.json:
        from .allowlist import start_lines

        print("\n".join(start_lines(info)))
    return 0


async def _ls(argv: list[str]) -> int:
    parser = CliParser(prog="tkbox ls", description="List boxes, with their state, their execs (running/total) "
                                                    "and their approvals waiting for a person.")
    parser.add_json()
    args = parser.parse_args(argv)
    async with daemon_client() as client:
        boxes = await client.boxes()
    if args.json:
        print(json.dumps([b.to_json() for b in boxes], indent=2, sort_keys=True))
        return 0
    print(f"{'NAME':<20} {'ID':<13} {'STATE':<9} {'EXECS':>7} {'APPROVALS':>9}  {'RUN':<37} WORKSPACE")
    for box in boxes:
        print(f"{safe_text(box.name):<20} {safe_text(box.id):<13} {safe_text(box.state):<9} "
              f"{safe_text(box.execs_running):>3}/{safe_text(box.execs_total):<3} "
              f"{safe_text(box.approvals_pending):>9}  "
              f"{safe_text(run_text(box)):<37} {safe_text(box.workspace)}")
    return 0


def run_text(box: BoxInfo) -> str:
    """The RUN column of ``tkbox ls``: the run id and what became of it (open, closed, exported, orphaned)."""
    if not box.run_id:
        return "UNRECORDED"
    return f"{box.run_id} {'exported' if box.exported else box.run_state}".rstrip()


async def _one_box(argv: list[str], command: str, description: str) -> int:
    parser = CliParser(prog=f"tkbox {command}", description=description)
    parser.add_argument("box", help="the box's name or id")
    parser.add_json()
    args = parser.parse_args(argv)
    async with daemon_client(args.box) as client:
        info = await (client.stop_box(args.box) if command == "stop" else client.remove_box(args.box))
    _print_box(info, args.json)
    return 0


async def _diff(argv: list[str]) -> int:
    parser = CliParser(prog="tkbox diff", description="Print a box's changes as a git-format patch (live while "
                                                      "running, saved once stopped).")
    parser.add_argument("box", help="the box's name or id")
    output = parser.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", help="print JSON with the file summary")
    output.add_argument("--raw", action="store_true",
                        help="write the patch byte for byte, for a file or git apply; refused when stdout is a "
                             "terminal (without it, control characters in the patch are shown escaped)")
    args = parser.parse_args(argv)
    if args.raw and sys.stdout.isatty():
        raise CliError("usage", "--raw writes the box's bytes as they are and stdout is a terminal, which they "
                                "could drive", "redirect it (tkbox diff BOX --raw > box.patch) or drop --raw to see "
                                               "the patch escaped")
    async with daemon_client(args.box) as client:
        reply = await client.diff(args.box) if args.json else await client.diff_patch(args.box)
    if args.json:
        print(json.dumps(reply, indent=2, sort_keys=True))  # ensure_ascii: every control and non-ASCII is \uXXXX
    elif args.raw:
        sys.stdout.buffer.write(reply)
        sys.stdout.buffer.flush()
    else:
        sys.stdout.write(safe_lines(reply))  # lines and tabs kept; ESC, CR, bidi controls… shown as escapes
    return 0


async def _events(argv: list[str]) -> int:
    parser = CliParser(prog="tkbox events", description="Print the daemon's events, oldest first.")
    parser.add_argument("box", nargs="?", help="only this box's events")
    parser.add_argument("--follow", "-f", action="store_true",
                        help="keep printing new events (Ctrl+C stops, exit status 130)")
    parser.add_argument("--after", type=int, default=0, help="only events after this sequence number")
    parser.add_argument("--tail", type=int, metavar="N",
                        help="only the last N events (up to 10,000: docs/limits.md events_page), then with --follow "
                             "the new ones")
    parser.add_json("one JSON object per line")
    args = parser.parse_args(argv)
    if args.tail is not None and args.after:
        parser.error("--tail and --after each say where to start: give one of them")
    last_seq = args.after

    def show(event: Any) -> None:
        nonlocal last_seq
        if args.json:
            print(json.dumps(event.to_json(), sort_keys=True), flush=True)  # ensure_ascii: ASCII only, no control
        else:
            print(event_text_line(event), flush=True)
        last_seq = event.seq

    async with daemon_client(args.box) as client:
        if args.tail is not None:
            page = await client.event_page(limit=args.tail, box=args.box)
            for event in page.events:
                show(event)
            last_seq = args.after = page.last_seq  # every event up to it is printed (or not the box's)
            if not args.follow:
                return 0
        if not args.follow:
            for event in await client.stored_events(args.after, args.box):
                show(event)
            return 0
        try:
            with InterruptPoints() as interrupts:  # Ctrl+C never between printing an event and counting it
                stream = client.events(args.after, args.box)
                while True:
                    with interrupts.waiting():
                        event = await anext(stream, None)
                    if event is None:
                        break
                    show(event)
                    interrupts.check()
        except KeyboardInterrupt:  # Ctrl+C: say where to pick up
            box = f" {args.box}" if args.box else ""
            raise interrupted(f"resume with: tkbox events{box} --follow --after {last_seq}") from None
    return 0


def event_text_line(event: Event) -> str:
    """One event as ``tkbox events`` prints it: every field escaped, each value as ASCII-only JSON (which escapes
    control characters and non-ASCII as ``\\uXXXX``), so no box text reaches the terminal raw."""
    data = " ".join(f"{safe_text(key)}={json.dumps(value)}" for key, value in event.data.items())
    return (f"{event.seq:>6} {safe_text(event.time)} {safe_text(event.box_id or '-'):<12} "
            f"{safe_text(event.kind):<20} {data}")


# Every command that talks to the daemon, and the module that holds it (imported only when the command runs), in
# that module's ``COMMANDS`` (this module's own are ``BOX_COMMANDS``).
COMMANDS: dict[str, str] = {
    "run": "boxes", "exec": "exec_command", "ls": "boxes", "stop": "boxes", "rm": "boxes", "diff": "boxes",
    "export": "export_command", "apply": "apply", "events": "boxes", "approvals": "approvals",
    "approve": "approvals", "reject": "approvals", "forget": "approvals", "allow": "allowlist",
    "block": "allowlist", "allowlist": "allowlist",
}


async def _stop(argv: list[str]) -> int:
    return await _one_box(argv, "stop", "Stop a box: save its patch; its run stays open.")


async def _rm(argv: list[str]) -> int:
    return await _one_box(argv, "rm", "Remove a box: stop it if needed and close its run.")


BOX_COMMANDS = {"run": _run, "ls": _ls, "stop": _stop, "rm": _rm, "diff": _diff, "events": _events}


def box_command(name: str, argv: list[str]) -> int:
    """Run one daemon command; returns its exit status, its failure reported (as JSON when ``--json`` was asked)."""
    module = COMMANDS[name]
    table = BOX_COMMANDS if module == "boxes" else importlib.import_module(f".{module}", __package__).COMMANDS
    command: Callable[[list[str]], Coroutine[Any, Any, int]] = table[name]
    try:
        return finish(command(argv))  # every command runs without an event loop (``loopless``)
    except (CliError, DaemonError) as error:
        return _fail(error, name, wants_json(argv))
