"""``tkbox run | exec | ls | stop | rm | diff | events``: boxes from the command line, through the daemon's API."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import select
import signal
import sys
import termios
import tty
from pathlib import Path
from typing import Any

from tkbox_daemon.tasks import spawn
from tkbox_daemon.wire import BoxInfo, Event

from ..client import DaemonClient, DaemonError
from ..terminal_text import safe_lines, safe_text

EXIT_DENIED = 126


def _fail(error: DaemonError, command: str) -> int:
    """Report a refused call; the daemon's message may quote box or guest text, so it is shown escaped."""
    field = error.extra.get("field")
    detail = f" (field {safe_text(field)})" if field is not None and str(field) not in error.message else ""
    print(f"tkbox {command}: {safe_text(error.message)}{detail}", file=sys.stderr)
    return 2


def _print_box(info: BoxInfo, as_json: bool) -> None:
    if as_json:
        print(json.dumps(info.to_json(), indent=2, sort_keys=True))
        return
    reason = f" ({safe_text(info.reason)})" if info.reason else ""
    print(f"{safe_text(info.name)}  id {safe_text(info.id)}  {safe_text(info.state)}{reason}\n"
          f"  run {safe_text(info.run_id or 'UNRECORDED')}  backend {safe_text(info.backend)}  "
          f"workspace {safe_text(info.workspace)}")


def _run_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tkbox run", description="Create and start a box on a workspace.")
    parser.add_argument("--name", help="the box's name (default: from tkbox.yaml or generated)")
    parser.add_argument("--workspace", help="the checkout to work on (default: tkbox.yaml's, else .)")
    parser.add_argument("--image", help="host (default) or dir:PATH, a prepared root directory")
    parser.add_argument("--allow", action="append", default=None, help="allow egress to HOST (repeatable)")
    parser.add_argument("--secret", action="append", default=None,
                        help="NAME=env:VARIABLE@host[,host] (repeatable); the box sees only a placeholder")
    parser.add_argument("--task", help="the operator's task for this box (recorded as tkbox.task)")
    parser.add_argument("--config", type=Path, help="settings file (default: ./tkbox.yaml when present)")
    for key, text in (("memory", "memory, e.g. 2G"), ("cpus", "CPUs"), ("pids", "processes"),
                      ("lifetime", "lifetime in seconds"), ("exec-timeout", "per-command timeout in seconds")):
        parser.add_argument(f"--{key}", help=f"limit: {text}")
    parser.add_argument("--json", action="store_true", help="print JSON")
    return parser


def build_settings(args: argparse.Namespace) -> dict[str, Any]:
    """tkbox.yaml first, then flags over it (flags win)."""
    from tkbox_daemon.boxes.settings import SettingsError, load_tkbox_yaml

    settings: dict[str, Any] = {}
    config = args.config or (Path("tkbox.yaml") if Path("tkbox.yaml").exists() else None)
    if config is not None:
        try:
            settings = load_tkbox_yaml(config)
        except (SettingsError, OSError) as exc:
            raise SystemExit(f"tkbox run: {exc}") from None
        if "workspace" in settings and not os.path.isabs(str(settings["workspace"])):
            settings["workspace"] = str((config.parent / str(settings["workspace"])).resolve())
    for key in ("name", "image", "task"):
        if getattr(args, key):
            settings[key] = getattr(args, key)
    settings["workspace"] = str(Path(args.workspace or settings.get("workspace") or ".").resolve())
    if args.allow:
        settings["allow"] = args.allow
    if args.secret:
        settings["secrets"] = args.secret
    box_limits = dict(settings.get("limits") or {})
    for flag, key in (("memory", "memory"), ("cpus", "cpus"), ("pids", "pids"), ("lifetime", "lifetime"),
                      ("exec_timeout", "exec_timeout")):
        value = getattr(args, flag)
        if value is not None:
            box_limits[key] = int(value) if value.isdigit() else value
    if box_limits:
        settings["limits"] = box_limits
    return settings


async def _run(argv: list[str]) -> int:
    args = _run_parser().parse_args(argv)
    async with DaemonClient() as client:
        try:
            info = await client.create_box(build_settings(args))
        except DaemonError as error:
            return _fail(error, "run")
    _print_box(info, args.json)
    return 0


async def _exec(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="tkbox exec", description="Run a command in a box (decided first).",
                                     usage="tkbox exec [options] BOX -- PROGRAM [ARGS…]")
    parser.add_argument("box")
    parser.add_argument("--cwd", default="/workspace", help="working directory in the box (default /workspace)")
    parser.add_argument("-e", "--env", action="append", default=[], help="K=V for this command (repeatable)")
    parser.add_argument("--stdin", choices=("auto", "none", "stream"), default="auto",
                        help="auto: stream when stdin is not a terminal; none: no stdin")
    parser.add_argument("--timeout", type=int, help="seconds before the command is killed")
    parser.add_argument("-t", "--tty", action="store_true",
                        help="run on a terminal in the box (interactive: keys go raw to the command); needs a "
                             "terminal on stdin")
    if "--" not in argv:
        if "-h" in argv or "--help" in argv:
            parser.parse_args(["--help"])
        parser.print_usage(sys.stderr)
        print("tkbox exec: put -- before the command, e.g. tkbox exec mybox -- make test", file=sys.stderr)
        return 2
    split = argv.index("--")
    args = parser.parse_args(argv[:split])
    command = argv[split + 1:]
    env = {}
    for item in args.env:
        name, sep, value = item.partition("=")
        if not sep:
            print(f"tkbox exec: --env takes K=V, not {item!r}", file=sys.stderr)
            return 2
        env[name] = value
    terminal = None
    if args.tty:
        if not sys.stdin.isatty():
            print("tkbox exec: --tty needs a terminal on stdin, and stdin is not one; drop --tty to stream stdin "
                  "to the command instead", file=sys.stderr)
            return 2
        if args.stdin != "auto":
            print("tkbox exec: --tty reads the terminal; it does not combine with --stdin", file=sys.stderr)
            return 2
        terminal = RawTerminal(sys.stdin.fileno())
    stream = args.tty or args.stdin == "stream" or (args.stdin == "auto" and not sys.stdin.isatty())
    size = terminal.size() if terminal is not None else None
    async with DaemonClient() as client:
        call = client.exec(args.box)
        try:
            await call.start(command, cwd=args.cwd, env=env, stream_stdin=stream, timeout=args.timeout,
                             tty=args.tty, rows=size[0] if size else None, cols=size[1] if size else None)
        except DaemonError as error:
            return _fail(error, "exec")
        return await _drive_exec(call, stream, terminal)


class RawTerminal:
    """The operator's terminal for ``--tty``: raw while the command runs, restored (idempotently) after."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.saved: list[Any] | None = None

    def size(self) -> tuple[int, int] | None:
        """(rows, cols) of the terminal, or None when it reports none (0 x 0) or an absurd one."""
        try:
            cols, rows = os.get_terminal_size(self.fd)
        except OSError:
            return None
        return (rows, cols) if 1 <= rows <= 1000 and 1 <= cols <= 1000 else None

    def enter(self) -> None:
        self.saved = termios.tcgetattr(self.fd)
        tty.setraw(self.fd, termios.TCSANOW)  # TCSANOW: keys typed ahead are kept, not flushed

    def restore(self) -> None:
        if self.saved is not None:
            saved, self.saved = self.saved, None
            termios.tcsetattr(self.fd, termios.TCSADRAIN, saved)


async def _drive_exec(call: Any, stream: bool, terminal: RawTerminal | None = None) -> int:
    loop = asyncio.get_running_loop()
    interrupts = 0
    stopped_by: int | None = None
    main = asyncio.current_task()

    def on_interrupt() -> None:
        nonlocal interrupts
        interrupts += 1
        spawn(call.signal("INT" if interrupts == 1 else "KILL"), name="exec-interrupt")

    def on_winch() -> None:
        size = terminal.size() if terminal is not None else None
        if size is not None:
            spawn(call.resize(*size), name="exec-resize")

    def on_stop(signum: int) -> None:  # SIGTERM/SIGHUP while the terminal is raw: end here and restore it
        nonlocal stopped_by
        stopped_by = signum
        if main is not None:
            main.cancel()

    loop.add_signal_handler(signal.SIGINT, on_interrupt)
    if terminal is not None:
        for signum in (signal.SIGTERM, signal.SIGHUP):
            loop.add_signal_handler(signum, on_stop, signum)
    feeder = None
    try:
        async for message in call.messages():
            if isinstance(message, tuple):
                stream_no, data = message
                target = sys.stdout.buffer if stream_no == 1 else sys.stderr.buffer
                target.write(data)
                target.flush()
                continue
            kind = message.get("type")
            if kind != "started" and terminal is not None:
                terminal.restore()  # anything but output is printed on a sane terminal
            if kind == "decision" and message.get("verdict") == "flag":
                print(f"tkbox: flagged by {_rules(message)}: {safe_text(message.get('reason', ''))}",
                      file=sys.stderr)
            elif kind == "decision" and "TK-UNRECORDED" in message.get("rule_ids", []):
                print("tkbox: WARNING: UNRECORDED — this daemon has no signer; nothing is decided or recorded",
                      file=sys.stderr)
            elif kind == "started" and terminal is not None:
                terminal.enter()
                loop.add_signal_handler(signal.SIGWINCH, on_winch)
                feeder = spawn(_feed_keys(call, terminal.fd), name="exec-keys")
            elif kind == "started" and stream:
                feeder = spawn(_feed_stdin(call), name="exec-stdin")
            elif kind == "denied":
                hint = f"\n  hint: {safe_text(message['hint'])}" if message.get("hint") else ""
                print(f"tkbox: denied by {_rules(message)}: {safe_text(message.get('reason', ''))}{hint}",
                      file=sys.stderr)
                return EXIT_DENIED
            elif kind == "error":
                print(f"tkbox exec: {safe_text(message.get('message', ''))}", file=sys.stderr)
                return EXIT_DENIED if message.get("code") == "exec_refused" else 2
            elif kind == "exit":
                if message.get("error"):
                    print(f"tkbox exec: {safe_text(message['error'])}", file=sys.stderr)
                    return 2
                return int(message["exit_code"])
        if terminal is not None:
            terminal.restore()
        print("tkbox exec: the daemon closed the connection before the command ended", file=sys.stderr)
        return 2
    except asyncio.CancelledError:
        if stopped_by is None:
            raise
        return 128 + stopped_by  # the command is stopped by closing the connection (the daemon kills it)
    finally:
        if terminal is not None:
            terminal.restore()
        for signum in (signal.SIGINT, signal.SIGWINCH, signal.SIGTERM, signal.SIGHUP):
            loop.remove_signal_handler(signum)
        if feeder is not None:
            feeder.cancel()
        await call.close()


def _rules(message: dict[str, Any]) -> str:
    """The rule ids of a decision, escaped (they name policy rules, but arrive with the rest of the message)."""
    rule_ids = message.get("rule_ids")
    return ", ".join(safe_text(rule) for rule in rule_ids) if isinstance(rule_ids, list) else safe_text(rule_ids)


async def _feed_keys(call: Any, fd: int) -> None:
    """Forward what is typed, as it is typed, within the daemon's stdin credit.

    The descriptor stays blocking (O_NONBLOCK would be shared with the operator's shell and console), so each
    read is preceded by a zero-timeout ``select``.
    """
    loop = asyncio.get_running_loop()
    ready = asyncio.Event()
    loop.add_reader(fd, ready.set)
    try:
        while True:
            await ready.wait()
            ready.clear()
            # The reader callback may have fired again before the last read: check, since the fd blocks.
            if not select.select([fd], [], [], 0)[0]:
                continue
            try:
                data = os.read(fd, 4096)
            except OSError:
                data = b""
            if not data:  # the terminal hung up; on a pty, STDIN_EOF would change nothing
                return
            await call.send_stdin(data)
    finally:
        loop.remove_reader(fd)


async def _feed_stdin(call: Any) -> None:
    """Forward our stdin (a pipe, a file or /dev/null: read in a thread, which works for all of them)."""
    source = sys.stdin.buffer
    while chunk := await asyncio.to_thread(source.read1, 64 * 1024):
        await call.send_stdin(chunk)
    await call.close_stdin()


async def _ls(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="tkbox ls", description="List boxes.")
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args(argv)
    async with DaemonClient() as client:
        try:
            boxes = await client.boxes()
        except DaemonError as error:
            return _fail(error, "ls")
    if args.json:
        print(json.dumps([b.to_json() for b in boxes], indent=2, sort_keys=True))
        return 0
    print(f"{'NAME':<20} {'ID':<13} {'STATE':<9} {'EXECS':>7}  {'RUN':<28} WORKSPACE")
    for box in boxes:
        print(f"{safe_text(box.name):<20} {safe_text(box.id):<13} {safe_text(box.state):<9} "
              f"{safe_text(box.execs_running):>3}/{safe_text(box.execs_total):<3}  "
              f"{safe_text(box.run_id or 'UNRECORDED'):<28} {safe_text(box.workspace)}")
    return 0


async def _one_box(argv: list[str], command: str, description: str) -> int:
    parser = argparse.ArgumentParser(prog=f"tkbox {command}", description=description)
    parser.add_argument("box")
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args(argv)
    async with DaemonClient() as client:
        try:
            info = await (client.stop_box(args.box) if command == "stop" else client.remove_box(args.box))
        except DaemonError as error:
            return _fail(error, command)
    _print_box(info, args.json)
    return 0


async def _diff(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="tkbox diff", description="Print a box's changes as a git-format patch "
                                                                   "(live while running, saved once stopped).")
    parser.add_argument("box")
    output = parser.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", help="print JSON with the file summary")
    output.add_argument("--raw", action="store_true",
                        help="write the patch byte for byte, for a file or git apply; refused when stdout is a "
                             "terminal (without it, control characters in the patch are shown escaped)")
    args = parser.parse_args(argv)
    if args.raw and sys.stdout.isatty():
        print("tkbox diff: --raw writes the box's bytes as they are and stdout is a terminal, which they could "
              "drive; redirect it (tkbox diff BOX --raw > box.patch) or drop --raw to see the patch escaped",
              file=sys.stderr)
        return 2
    async with DaemonClient() as client:
        try:
            reply = await client.diff(args.box) if args.json else await client.diff_patch(args.box)
        except DaemonError as error:
            return _fail(error, "diff")
    if args.json:
        print(json.dumps(reply, indent=2, sort_keys=True))  # ensure_ascii: every control and non-ASCII is \uXXXX
    elif args.raw:
        sys.stdout.buffer.write(reply)
        sys.stdout.buffer.flush()
    else:
        sys.stdout.write(safe_lines(reply))  # lines and tabs kept; ESC, CR, bidi controls… shown as escapes
    return 0


async def _events(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="tkbox events", description="Print the daemon's events.")
    parser.add_argument("box", nargs="?", help="only this box's events")
    parser.add_argument("--follow", "-f", action="store_true", help="keep printing new events")
    parser.add_argument("--after", type=int, default=0, help="only events after this sequence number")
    parser.add_argument("--json", action="store_true", help="one JSON object per line")
    args = parser.parse_args(argv)

    def show(event: Any) -> None:
        if args.json:
            print(json.dumps(event.to_json(), sort_keys=True), flush=True)  # ensure_ascii: ASCII only, no control
        else:
            print(event_text_line(event), flush=True)

    async with DaemonClient() as client:
        try:
            if not args.follow:
                for event in await client.stored_events(args.after, args.box):
                    show(event)
                return 0
            async for event in client.events(args.after, args.box):
                show(event)
        except DaemonError as error:
            return _fail(error, "events")
    return 0


def event_text_line(event: Event) -> str:
    """One event as ``tkbox events`` prints it: every field escaped, each value as ASCII-only JSON (which escapes
    control characters and non-ASCII as ``\\uXXXX``), so no box text reaches the terminal raw."""
    data = " ".join(f"{safe_text(key)}={json.dumps(value)}" for key, value in event.data.items())
    return (f"{event.seq:>6} {safe_text(event.time)} {safe_text(event.box_id or '-'):<12} "
            f"{safe_text(event.kind):<20} {data}")


COMMANDS = {
    "run": _run,
    "exec": _exec,
    "ls": _ls,
    "stop": lambda argv: _one_box(argv, "stop", "Stop a box: save its patch; its run stays open."),
    "rm": lambda argv: _one_box(argv, "rm", "Remove a box: stop it if needed and close its run."),
    "diff": _diff,
    "events": _events,
}


def box_command(name: str, argv: list[str]) -> int:
    return asyncio.run(COMMANDS[name](argv))
