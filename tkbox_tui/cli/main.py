"""``tkbox``: the one console script.  Each command group lives in its own module and is imported only when used.

``main`` is also where the CLI keeps its promises to a shell, for every command alike:

- a failure is one line on stderr, or with ``--json`` one ``{"error": …}`` object on stdout (``report``);
- a reader that goes away (``tkbox events | head -1``) ends the command quietly with status 141, what a shell
  reports for a command whose pipe closed (128 + SIGPIPE), so ``set -o pipefail`` scripts see what they see of
  ``yes | head -1``; Python's own SIGPIPE handling is kept (it turns a closed socket into an error, not a death);
- Ctrl+C ends any command with one line and status 130;
- no traceback: anything unforeseen is one line too, exit status 70 (``TKBOX_TRACEBACK=1`` shows the traceback).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

from .report import EXIT_BROKEN_PIPE, CliError, interrupted, report, wants_json

EXIT_INTERNAL = 70  # EX_SOFTWARE: a bug in tkbox, not a refusal
FAST_EXIT = ("exec", "ls", "events", "approvals", "approve", "reject", "--version")  # see _end_loop_command

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
  apply BOX            write a stopped box's patch to its checkout, every file decided first (--dry-run shows it)
  export BOX -o FILE   export a stopped box's run as a .tkb bundle and its trust file (closes the run)
  events [BOX]         print the daemon's events (--follow to keep printing)
  approvals            list the approvals waiting for a person (--follow to keep printing)
  approve | reject ID  answer one (approve --remember; reject --reason TEXT)
  forget BOX RULE_ID   remove a rule approve --remember added to a box
  allow | block BOX HOST…  change a running box's egress allowlist (block --all: the kill switch)
  allowlist BOX        show a box's egress allowlist
  signer …             serve | up | down | status | trust | export   (tkbox signer --help)
  verify BUNDLE        verify a .tkb bundle offline against a trust file (tkbox verify --help)
  policy check …       evaluate tool calls against a policy pack, recording nothing (tkbox policy check --help)
  patch check FILE     check a patch file as tkbox apply would, with no box (tkbox patch check --help)
  doctor               say what this host gives a box and what is missing, with the fix (--daemon: the daemon's view)

Every command takes --help; every command that prints a result takes --json, and then an error is
{"error": {"code", "message", "hint"}} on stdout.  tkbox --version prints the version.
"""


def _demo(argv: list[str]) -> int:
    from .demo import demo_main

    return demo_main(argv)


def _doctor(argv: list[str]) -> int:
    from .doctor import doctor_main

    return doctor_main(argv)


def _patch(argv: list[str]) -> int:
    from .patch_check import patch_main

    return patch_main(argv)


def _daemon_side(name: str) -> Callable[[list[str]], int]:
    def run(argv: list[str]) -> int:
        from . import daemon_side

        command: Callable[[list[str]], int] = getattr(daemon_side, name)
        return command(argv)

    return run


def _signer_subcommands() -> list[str]:
    from .daemon_side import signer_subcommands

    return signer_subcommands()


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
    "daemon": _daemon_side("daemon"),
    **{name: _box(name) for name in ("run", "exec", "ls", "stop", "rm", "diff", "apply", "export", "events",
                                                "approvals", "approve", "reject", "forget", "allow", "block",
                                                "allowlist")},
    "signer": _daemon_side("signer"),
    "verify": _daemon_side("verify"),
    "policy": _daemon_side("policy"),
    "patch": _patch,
    "doctor": _doctor,
}
SUBCOMMANDS: dict[str, Callable[[], list[str]]] = {
    "signer": _signer_subcommands,
    "policy": lambda: ["check"],
    "patch": lambda: ["check"],
}


def command_lines() -> list[list[str]]:
    """Every command as the words that name it (``["ls"]``, ``["signer", "up"]``, …), groups included, read from
    the dispatch tables and the groups' own parsers: what the tests run for every command."""
    lines: list[list[str]] = []
    for name in COMMANDS:
        lines.append([name])
        lines.extend([name, sub] for sub in SUBCOMMANDS.get(name, lambda: [])())
    return lines


def version() -> str:
    """The installed distribution's version: read from its ``METADATA`` where ``sys.path`` has it (what
    ``importlib.metadata`` finds, without its ~15 ms of imports), else asked of ``importlib.metadata``."""
    for entry in sys.path:
        try:
            names = [name for name in os.listdir(entry or ".") if name.startswith("tkbox-")
                     and name.endswith(".dist-info")]
        except OSError:
            continue
        for name in names:
            try:
                with open(os.path.join(entry or ".", name, "METADATA"), encoding="utf-8") as metadata:
                    for line in metadata:
                        if line.startswith("Version: "):
                            return line[len("Version: "):].strip()
                        if not line.strip():
                            break  # the headers end: no version here
            except OSError:
                continue
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed_version

    try:
        return installed_version("tkbox")
    except PackageNotFoundError:
        return "unknown (not installed)"


def _dispatch(args: list[str]) -> int:
    if not args:
        print(USAGE, file=sys.stderr)
        return 2
    if args[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0
    if args[0] == "--version":
        print(f"tkbox {version()}")
        return 0
    command = COMMANDS.get(args[0])
    if command is None:
        raise CliError("usage", f"unknown command '{args[0]}'", "the commands are listed by: tkbox --help")
    return command(args[1:])


def main(argv: list[str] | None = None) -> int:
    status = _main(argv)
    if argv is None:  # the console script: this process ends here
        _end_loop_command(sys.argv[1:2], status)
    return status


def _end_loop_command(command: list[str], status: int) -> None:
    """End a command an agent calls in a loop at once, without the interpreter's teardown (freeing every module's
    objects: ~8 ms, a sixth of a bare ``python -c pass``), once its output is out: stdout and stderr flushed, no
    ``atexit`` callback registered, no other thread.  Anything else returns, and the process ends as usual."""
    if command[:1] not in ([name] for name in FAST_EXIT):
        return
    import atexit

    threading = sys.modules.get("threading")
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        return
    if getattr(atexit, "_ncallbacks", lambda: 1)() or (threading is not None and threading.active_count() > 1):
        return
    os._exit(status)


def _main(argv: list[str] | None) -> int:
    args = sys.argv[1:] if argv is None else argv
    name = args[0] if args and args[0] in COMMANDS else ""
    as_json = wants_json(args)
    try:
        try:
            status = _dispatch(args)
        except CliError as error:
            status = report(error, name, as_json)
        except KeyboardInterrupt:
            status = report(interrupted(), name, as_json)
        except SystemExit as exit:  # argparse's --help in a command (0); a message given as the exit's code
            if isinstance(exit.code, str):
                status = report(CliError("failed", exit.code), name, as_json)
            else:
                status = 0 if exit.code is None else exit.code
        except BrokenPipeError:
            raise
        except Exception as exc:  # a bug: one line, not a traceback
            if os.environ.get("TKBOX_TRACEBACK"):
                raise
            status = report(CliError("internal", f"{type(exc).__name__}: {exc}",
                                     "a bug in tkbox: TKBOX_TRACEBACK=1 shows where; please report it",
                                     status=EXIT_INTERNAL), name, as_json)
        sys.stdout.flush()  # here, not at exit: a closed pipe must be seen while it can be handled
        return status
    except BrokenPipeError:
        return _quiet_after_broken_pipe()
    except KeyboardInterrupt:  # a second Ctrl+C while the first was being reported
        return interrupted().status


def _quiet_after_broken_pipe() -> int:
    """The reader went away: say nothing, and point the closed stream at /dev/null so that the interpreter's own
    flush at exit has nowhere to fail (it would print "Exception ignored … BrokenPipeError")."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except OSError:
            os.dup2(devnull, stream.fileno())
    os.close(devnull)
    return EXIT_BROKEN_PIPE


if __name__ == "__main__":
    raise SystemExit(main())
