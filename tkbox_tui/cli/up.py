"""``tkbox up``, ``tkbox down`` and ``tkbox console``: the embedded default in one command, and its undoing.

``tkbox up`` starts a dev signer and the daemon in the background if none is running (reusing them if they are),
creates a demo box on the current directory if there is no box, and opens the console.  Closing the console leaves
the daemon and its boxes running; ``tkbox down`` stops them.
"""

from __future__ import annotations

import argparse
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

DEMO_BOX = "demo"


async def _ensure_demo_box(workspace: Path) -> str | None:
    async with DaemonClient() as client:
        boxes = await client.boxes()
        if boxes:
            return None
        info = await client.create_box({"name": DEMO_BOX, "workspace": str(workspace),
                                        "task": "tkbox up: a demo box on this directory"})
        return info.name


def up_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="tkbox up", description=__doc__.splitlines()[2].strip())
    parser.add_argument("--no-console", action="store_true", help="start everything but do not open the console")
    parser.add_argument("--backend", default="auto", choices=("auto", "bwrap", "ns"), help="how boxes are isolated")
    parser.add_argument("--json", action="store_true", help="print what was started as JSON (implies --no-console)")
    args = parser.parse_args(argv)
    try:
        signer = signer_up(SignerPaths.from_env())
        daemon = daemon_up(DaemonPaths.from_env(), backend=args.backend)
        demo = asyncio.run(_ensure_demo_box(Path.cwd()))
    except (ControlError, DaemonControlError, PathError) as exc:
        print(f"tkbox up: {exc}", file=sys.stderr)
        return 2
    except DaemonError as exc:
        print(f"tkbox up: the demo box could not be created: {safe_text(exc.message)}", file=sys.stderr)
        return 2
    summary = {"signer": {"pid": signer["pid"], "started": signer["started"]},
               "daemon": {"started": daemon["started"], "backend": daemon.get("backend")}, "demo_box": demo}
    if args.json:
        print(json.dumps(summary, indent=2, sort_keys=True))
        return 0
    if args.no_console:
        print(f"signer {'started' if signer['started'] else 'running'}, daemon "
              f"{'started' if daemon['started'] else 'running'}" + (f", box {safe_text(demo)} created" if demo else ""))
        return 0
    return console_main([])


def console_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="tkbox console", description="Open the console on a running daemon.")
    parser.parse_args(argv)
    from ..console.app import run_console

    return run_console(DaemonPaths.from_env().api_socket)


def down_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="tkbox down", description="Stop the daemon (and its boxes) and the signer.")
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args(argv)
    try:
        daemon = daemon_down(DaemonPaths.from_env())
        signer = signer_down(SignerPaths.from_env())
    except (ControlError, DaemonControlError) as exc:
        print(f"tkbox down: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({"daemon": daemon, "signer": signer}, indent=2, sort_keys=True))
    else:
        print(f"daemon {'stopped' if daemon['stopped'] else 'was not running'}; "
              f"signer {'stopped' if signer['stopped'] else 'was not running'}")
    return 0
