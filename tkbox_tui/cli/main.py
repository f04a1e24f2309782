"""``tkbox``: the one console script. Each command group lives in its own module and is imported only when used."""

from __future__ import annotations

import sys
from collections.abc import Callable

USAGE = """usage: tkbox COMMAND [ARGS…]

commands:
  up                   start the dev signer and the daemon if needed, a demo box if there is none, open the console
  console              open the console on a running daemon
  down                 stop the daemon (its boxes, their runs closed) and the signer
  demo                 start a dev signer, record a few decisions in a run, export it and verify it
  daemon               run the daemon in the foreground (tkbox daemon --help)
  run                  create and start a box on a workspace
  exec BOX -- ARGV     run a command in a box, decided by the signer first
  ls | stop | rm       list boxes; stop one (saves its patch); remove one (closes its run)
  diff BOX             print a box's changes as a git-format patch
  events [BOX]         print the daemon's events (--follow to keep printing)
  signer …             serve | up | down | status | trust | export   (tkbox signer --help)
  verify BUNDLE        verify a .tkb bundle offline against a trust file (tkbox verify --help)
  policy check …       evaluate tool calls against a policy pack, recording nothing (tkbox policy check --help)

Every command takes --help; every command that prints data takes --json.
"""


def _signer(argv: list[str]) -> int:
    from tkbox_daemon.signer.cli import signer_main

    return signer_main(argv)


def _verify(argv: list[str]) -> int:
    from tkbox_daemon.evidence.verify import verify_main

    return verify_main(argv)


def _policy(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: tkbox policy check [--tool TOOL --args ARGS | --file CALLS.json] [--pack PACK] [--json]")
        return 0 if argv else 2
    if argv[0] != "check":
        print(f"tkbox policy: unknown command {argv[0]!r}; the only one is: check", file=sys.stderr)
        return 2
    from tkbox_daemon.policy import check_main

    return check_main(argv[1:])


def _demo(argv: list[str]) -> int:
    from .demo import demo_main

    return demo_main(argv)


def _daemon(argv: list[str]) -> int:
    from tkbox_daemon.daemon_process import daemon_main

    return daemon_main(argv)


def _box(name: str) -> Callable[[list[str]], int]:
    def run(argv: list[str]) -> int:
        from .boxes import box_command

        return box_command(name, argv)

    return run


def _up_group(name: str) -> Callable[[list[str]], int]:
    def run(argv: list[str]) -> int:
        from . import up

        return {"up": up.up_main, "down": up.down_main, "console": up.console_main}[name](argv)

    return run


COMMANDS: dict[str, Callable[[list[str]], int]] = {
    "up": _up_group("up"),
    "down": _up_group("down"),
    "console": _up_group("console"),
    "demo": _demo,
    "daemon": _daemon,
    **{name: _box(name) for name in ("run", "exec", "ls", "stop", "rm", "diff", "events")},
    "signer": _signer,
    "verify": _verify,
    "policy": _policy,
}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0 if args else 2
    command = COMMANDS.get(args[0])
    if command is None:
        print(f"tkbox: unknown command {args[0]!r}\n\n{USAGE}", file=sys.stderr)
        return 2
    return command(args[1:])


if __name__ == "__main__":
    raise SystemExit(main())
