"""``tkbox signer …``: serve, up, down, status, trust, export."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from .client import SignerError
from .control import ControlError, down, status, up
from .paths import PathError, SignerPaths


def _print(data: dict[str, Any], as_json: bool, text: str) -> None:
    print(json.dumps(data, indent=2, sort_keys=True) if as_json else text)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tkbox signer", description="The signer: decides every door and signs it.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    serve = commands.add_parser("serve", help="run the signer in the foreground")
    serve.add_argument("--pack", default="default", help="policy pack name or path (default: default)")
    start = commands.add_parser("up", help="start a dev signer in the background (reuse a running one)")
    start.add_argument("--pack", default="default", help="policy pack name or path (default: default)")
    start.add_argument("--json", action="store_true", help="print JSON")
    stop = commands.add_parser("down", help="stop the running signer")
    stop.add_argument("--json", action="store_true", help="print JSON")
    state = commands.add_parser("status", help="who the signer is, its keys, runs and assurance")
    state.add_argument("--json", action="store_true", help="print JSON")
    trust = commands.add_parser("trust", help="write the trust file that pins this signer's keys")
    trust.add_argument("-o", "--output", required=True, type=Path, help="where to write (e.g. run.trust.json)")
    trust.add_argument("--json", action="store_true", help="print JSON")
    export = commands.add_parser("export", help="write a closed run as a .tkb bundle")
    export.add_argument("--run", required=True, help="the run id")
    export.add_argument("-o", "--output", required=True, type=Path, help="where to write (e.g. run.tkb)")
    export.add_argument("--json", action="store_true", help="print JSON")
    return parser


def signer_main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    try:
        paths = SignerPaths.from_env()
        if args.command == "serve":
            from .process import serve_main

            return serve_main(args.pack)
        if args.command == "up":
            info = up(paths, pack=args.pack)
            verb = "started" if info["started"] else "already running"
            _print(info, args.json, f"signer {verb}: pid {info['pid']}, socket {paths.socket}")
            return 0
        if args.command == "down":
            info = down(paths)
            _print(info, args.json, f"signer stopped (pid {info['pid']})" if info["stopped"] else info["reason"])
            return 0
        if args.command == "status":
            return _status(paths, args.json)
        if args.command == "trust":
            from .export import write_trust

            info = write_trust(paths, args.output)
            _print(info, args.json, f"wrote {args.output} (log key {info['log_vkeys'][0].split('+')[0]})")
            return 0
        if args.command == "export":
            from .export import ExportError, export_run

            try:
                info = export_run(paths, args.run, args.output)
            except ExportError as exc:
                print(f"tkbox signer export: {exc}", file=sys.stderr)
                return 2
            _print(info, args.json, f"wrote {args.output}: run {args.run}, {info['records']} records, "
                                    f"checkpoint at tree size {info['tree_size']}")
            return 0
    except (ControlError, PathError) as exc:
        print(f"tkbox signer: {exc}", file=sys.stderr)
        return 2
    except SignerError as exc:
        print(f"tkbox signer: {exc.message}", file=sys.stderr)
        return 2
    return 2


def _status(paths: SignerPaths, as_json: bool) -> int:
    info = status(paths)
    store = info["store"]
    text = "\n".join(
        [
            f"signer     pid {info['pid']}, version {info['version']}, uid {info['signer_uid']}",
            f"you        {info['identity']} ({info['isolation']})",
            f"log        {info['origin']}, {info['records']} records",
            f"keys       record {info['keys']['record_kid']}",
            f"           log    {info['keys']['log_vkey']}",
            f"policy     {info['policy']['name']} {info['policy']['policy_hash']}",
            f"runs       {info['runs']['open']} open, {info['runs']['closed']} closed",
            f"store      {store['state']}" + (f": {store['error']}" if store["error"] else ""),
            f"assurance  {info['assurance']}",
        ]
    )
    _print(info, as_json, text)
    return 0 if store["state"] == "ok" else 1
