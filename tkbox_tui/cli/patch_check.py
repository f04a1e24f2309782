"""``tkbox patch check FILE``: a patch file checked as ``tkbox apply`` would check it, with no box and no daemon.

It runs the strict parser (``tkbox_daemon.patch.gitparse``, reading ``git format-patch`` mail text too), git's own
reading of the patch in a clean room (``gitread``), and the sensitive-path rule, and prints one line per file:
``accept``, ``needs --allow-sensitive`` (with the reason), or, when the patch is refused, the refusal with the
section and rule it names (a refused patch is refused as a whole). Every path is escaped for the terminal.

Exit status: 0 every file accepted; 3 accepted but for ``--allow-sensitive``; 1 refused; 2 the command could not
run (a usage mistake, an unreadable file, no git). With ``--json``, one object on stdout, the same statuses.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

from ..terminal_text import safe_text
from .report import CliError, CliParser

EXIT_REFUSED = 1
EXIT_NEEDS_ALLOW_SENSITIVE = 3
DESCRIPTION = ("Check a git-format patch file as tkbox apply would, with no box and no daemon: the strict parser, "
               "git's own reading of the patch (in an empty repository, with no config of yours), and the "
               "sensitive-path rule. Prints per file: accept, needs --allow-sensitive, or the refusal. Exit status: "
               "0 all accepted, 3 only --allow-sensitive missing, 1 refused, 2 the check could not run.")


def patch_main(argv: list[str]) -> int:
    if not argv:
        raise CliError("usage", "name a patch command (the one there is: check)", "see: tkbox patch --help")
    if argv[0] in ("-h", "--help"):
        print(f"usage: tkbox patch check FILE [--allow-sensitive] [--json]\n\n{DESCRIPTION}")
        return 0
    if argv[0] != "check":
        raise CliError("usage", f"unknown patch command '{argv[0]}'; the only one is: check",
                       "see: tkbox patch --help")
    return check_main(argv[1:])


def _read(name: str, limit: int) -> bytes:
    """At most ``limit`` + 1 bytes of the file (``-``: stdin), so an oversized one is seen as such."""
    try:
        if name == "-":
            return sys.stdin.buffer.read(limit + 1)
        with open(name, "rb") as handle:
            return handle.read(limit + 1)
    except OSError as exc:
        raise CliError("not_found" if isinstance(exc, FileNotFoundError) else "failed",
                       f"cannot read {name}: {exc.strerror}", "name a patch file, or - for stdin") from None


def _sensitive_rule() -> Callable[[str], str | None]:
    try:
        from tkbox_daemon.patch.sensitive import sensitive_reason
    except ImportError:
        raise CliError("failed", "the sensitive-path list (tkbox_daemon.patch.sensitive) is not installed",
                       "reinstall tkbox") from None
    return sensitive_reason


def _path(value: bytes | None) -> str | None:
    return None if value is None else value.decode("utf-8", "backslashreplace")


def _mode(value: int | None) -> str | None:
    return None if value is None else f"{value:o}"


def _file_json(file: Any) -> dict[str, Any]:
    op = file.operation
    return {"path": _path(op.path), "old_path": _path(op.old_path), "new_path": _path(op.new_path),
            "action": op.action.value, "old_mode": _mode(op.old_mode), "new_mode": _mode(op.new_mode),
            "old_size": op.old_size, "new_size": op.new_size, "similarity": op.similarity,
            "binary": op.binary is not None, "added": op.added, "removed": op.removed,
            "abbreviated_oids": op.abbreviated_oids, "sensitive": file.sensitive,
            "verdict": "accept" if file.allowed else "needs_allow_sensitive"}


def _refusal_json(refusal: Any) -> dict[str, Any]:
    return {"rule": refusal.rule, "line": refusal.line, "path": _path(refusal.path), "message": refusal.detail}


def _shown_path(op: Any) -> str:
    if op.old_path is not None and op.new_path is not None and op.old_path != op.new_path:
        return f"{safe_text(op.old_path)} -> {safe_text(op.new_path)}"
    return safe_text(op.path)


def _print_text(result: Any, allow_sensitive: bool) -> None:
    if result.refusal is not None:
        refusal = result.refusal
        where = f"line {refusal.line}" if refusal.line is not None else "the patch"
        path = f"{safe_text(refusal.path)}: " if refusal.path is not None else ""
        print(f"refuse  {path}{where}: {safe_text(refusal.detail)} [{safe_text(refusal.rule)}]")
        print("the patch is refused as a whole: no file of it would be applied")
        return
    for file in result.files:
        op = file.operation
        if file.sensitive is None:
            verdict = "accept"
        elif allow_sensitive:
            verdict = f"accept (sensitive: {safe_text(file.sensitive)}; --allow-sensitive given)"
        else:
            verdict = f"needs --allow-sensitive ({safe_text(file.sensitive)})"
        print(f"{op.action.value:<14} {_shown_path(op)}  {verdict}")
    for note in result.notes:
        print(f"note: {safe_text(note)}")
    waiting = sum(not file.allowed for file in result.files)
    summary = f"{len(result.files)} file{'s' if len(result.files) != 1 else ''}: "
    if waiting:
        summary += f"{waiting} need{'s' if waiting == 1 else ''} --allow-sensitive; run again with it to accept them"
    else:
        summary += "all accepted"
    print(summary)


def check_main(argv: list[str]) -> int:
    parser = CliParser(prog="tkbox patch check", description=DESCRIPTION)
    parser.add_argument("file", metavar="FILE", help="the patch file (git diff or git format-patch output; - for "
                                                     "stdin)")
    parser.add_argument("--allow-sensitive", action="store_true",
                        help="accept files that steer the next run or host automation (CI, hooks, credentials…)")
    parser.add_json("print one JSON object: {verdict, files: [...], refusal, notes}")
    args = parser.parse_args(argv)

    from tkbox_daemon import limits
    from tkbox_daemon.patch.check import ACCEPTED, REFUSED, check_patch
    from tkbox_daemon.patch.gitread import GitUnavailable

    data = _read(args.file, limits.PATCH_SIZE.default)
    sensitive = _sensitive_rule()
    try:
        result = check_patch(data, sensitive=sensitive, allow_sensitive=args.allow_sensitive, allow_mail_text=True)
    except GitUnavailable as exc:
        raise CliError("failed", str(exc), "tkbox patch check needs git for its cross-check") from None
    if args.json:
        print(json.dumps({"verdict": result.verdict, "files": [_file_json(file) for file in result.files],
                          "refusal": None if result.refusal is None else _refusal_json(result.refusal),
                          "notes": list(result.notes)}, indent=2, sort_keys=True))
    else:
        _print_text(result, args.allow_sensitive)
    if result.verdict == REFUSED:
        return EXIT_REFUSED
    return 0 if result.verdict == ACCEPTED else EXIT_NEEDS_ALLOW_SENSITIVE
