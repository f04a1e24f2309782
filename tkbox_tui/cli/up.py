"""``tkbox up``, ``tkbox down`` and ``tkbox console``: the embedded default in one command, and its undoing.

``tkbox up`` starts a dev signer and the daemon in the background if none is running (reusing them if they are),
creates a demo box on the current directory if there is no box, and opens the console.  Closing the console leaves
the daemon and its boxes running; ``tkbox down`` stops them.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from tkbox_daemon.config import DaemonPaths
from tkbox_daemon.daemon_control import DaemonControlError
from tkbox_daemon.daemon_control import down as daemon_down
from tkbox_daemon.daemon_control import up as daemon_up
from tkbox_daemon.signer.control import ControlError
from tkbox_daemon.signer.control import down as signer_down
from tkbox_daemon.signer.control import up as signer_up
from tkbox_daemon.signer.paths import PathError, SignerPaths

from ..client import DaemonClient, DaemonError
from ..terminal_text import safe_text
from .daemon_refusals import daemon_client, from_daemon
from .report import CliError, CliParser

DEMO_BOX = "demo"
UP_DESCRIPTION = ("Start a dev signer and the daemon in the background if none is running (reusing them if they "
                  "are), create a demo box on the current directory if there is no box, and open the console. "
                  "Closing the console leaves the daemon and its boxes running; tkbox down stops them.")
CONSOLE_DESCRIPTION = ("Open the console on a running daemon. Closing it (q) leaves the daemon and its boxes "
                       "running; if the daemon restarts while the console is open, the console reconnects.")


async def _ensure_demo_box(workspace: Path) -> tuple[str | None, str]:
    """The demo box's name if it was created now (None when a box exists), and the daemon's one-line host
    summary (``tkbox doctor``)."""
    async with daemon_client() as client:
        summary = (await client.host_report()).summary
        boxes = await client.boxes()
        if boxes:
            return None, summary
        info = await client.create_box({"name": DEMO_BOX, "workspace": str(workspace),
                                        "task": "tkbox up: a demo box on this directory"})
        return info.name, summary


def _require_terminal(hint: str) -> None:
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise CliError("no_terminal", "the console draws on a terminal, and stdin or stdout is not one", hint)


def up_main(argv: list[str]) -> int:
    parser = CliParser(prog="tkbox up", description=UP_DESCRIPTION)
    parser.add_argument("--no-console", action="store_true", help="start everything but do not open the console")
    parser.add_argument("--backend", default="auto", choices=("auto", "bwrap", "ns"), help="how boxes are isolated")
    parser.add_json("print what was started as JSON (implies --no-console)")
    args = parser.parse_args(argv)
    if not (args.no_console or args.json):  # refused before anything starts, not after
        _require_terminal("add --no-console to start the signer, the daemon and the demo box without it")
    try:
        signer = signer_up(SignerPaths.from_env())
        daemon = daemon_up(DaemonPaths.from_env(), backend=args.backend)
    except (ControlError, DaemonControlError, PathError) as exc:
        raise CliError("start_failed", str(exc)) from None
    try:
        demo, host = asyncio.run(_ensure_demo_box(Path.cwd()))
    except CliError as error:
        raise CliError(error.code, f"the demo box could not be created: {error.message}", error.hint,
                       field=error.field) from None
    summary = {"signer": {"pid": signer["pid"], "started": signer["started"]},
               "daemon": {"started": daemon["started"], "backend": daemon.get("backend")}, "demo_box": demo,
               "host": host}
    if args.json:
        print(json.dumps(summary, indent=2, sort_keys=True))
        return 0
    print(safe_text(host), flush=True)  # kept above the console, and in the terminal after it closes
    if args.no_console:
        print(f"signer {'started' if signer['started'] else 'running'}, daemon "
              f"{'started' if daemon['started'] else 'running'}" + (f", box {safe_text(demo)} created" if demo else ""))
        return 0
    return console_main([])


async def _check_daemon(socket: Path) -> None:
    async with DaemonClient(socket) as client:
        try:
            await client.health()
        except DaemonError as error:
            raise from_daemon(error) from None


def console_main(argv: list[str]) -> int:
    parser = CliParser(prog="tkbox console", description=CONSOLE_DESCRIPTION)
    parser.parse_args(argv)
    socket = DaemonPaths.from_env().api_socket
    asyncio.run(_check_daemon(socket))  # no daemon: the same words as every command, not an empty console
    _require_terminal("run it in a terminal; a script reads the same with tkbox ls --json and tkbox events --json")
    from ..console.app import run_console

    return run_console(socket)


def down_main(argv: list[str]) -> int:
    parser = CliParser(prog="tkbox down", description="Stop the daemon (every box stopped, every run closed) and "
                                                      "the signer.")
    parser.add_json()
    args = parser.parse_args(argv)
    try:
        daemon = daemon_down(DaemonPaths.from_env())
        signer = signer_down(SignerPaths.from_env())
    except (ControlError, DaemonControlError, PathError) as exc:
        raise CliError("stop_failed", str(exc)) from None
    if args.json:
        print(json.dumps({"daemon": daemon, "signer": signer}, indent=2, sort_keys=True))
    else:
        print(f"daemon {'stopped' if daemon['stopped'] else 'was not running'}; "
              f"signer {'stopped' if signer['stopped'] else 'was not running'}")
    return 0
