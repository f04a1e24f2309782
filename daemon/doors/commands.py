"""The command door's rules, without I/O: check an exec request and build the exact ``Bash`` decision for it.

The command line the signer reads must name the program that runs: every word is
shell-quoted, and a first word a shell would not read as a program (an assignment,
a reserved word) is quoted so it is; a first word starting with ``%`` (a job spec)
is refused.  A per-exec environment appears as a leading ``env K=V``.  Stdin known up
front is decided as its SHA-256 and size, plus its text when it is UTF-8 of at most
4 KiB.  An exec on a pseudo-terminal says ``"tty": true``.

Exit statuses follow the shell's: a command refused before it ran (by these rules, or denied by the signer) ends
with 126, and so does one whose program exists but cannot be executed; one whose program is not found ends with
127.  Whether a program was found is the box's guest's word (``start_refusal``), and the message says so.
"""

from __future__ import annotations

import hashlib
import re
import shlex
from dataclasses import dataclass, field
from typing import Any

from tkbox_guest.protocol import EXEC_CWD_ERROR_PREFIX

from ..limits import STDIN_TEXT_IN_DECISION, STDIN_UPFRONT
from ..rules import refused_env_reason, refused_env_value_reason

SHELL_RESERVED_WORDS = frozenset(
    {"!", "case", "coproc", "do", "done", "elif", "else", "esac", "fi", "for", "function", "if", "in", "select",
     "then", "time", "until", "while", "{", "}", "[[", "]]"}
)
MAX_ARGV_ITEMS = 4096
MAX_ARG_BYTES = 128 * 1024
MAX_ENV_ITEMS = 256
MAX_ENV_VALUE_BYTES = 32 * 1024
MAX_CWD_BYTES = 4096
_SAFE_UNQUOTED = re.compile(r"^[A-Za-z0-9@%+:,./_-]+\Z", re.ASCII)  # shlex's safe set without '='

EXIT_REFUSED = 126  # refused or denied before it ran; also a program that cannot be executed (the shell's 126)
EXIT_NOT_FOUND = 127  # the program is not found (the shell's 127)
# The guest's start errors (errno names) for a program that exists but cannot be executed, as the shell says 126:
# not executable or a directory (EACCES, EISDIR), not a format the kernel runs (ENOEXEC), a path through a file
# (ENOTDIR), open for writing (ETXTBSY), a symlink loop or an over-long name, arguments over the kernel's limit.
CANNOT_EXECUTE_CODES = frozenset({"EACCES", "EPERM", "EISDIR", "ENOEXEC", "ENOTDIR", "ETXTBSY", "ELOOP",
                                  "ENAMETOOLONG", "E2BIG", "ELIBBAD"})
SHOWN_PROGRAM_CHARS = 200


class ExecRefused(ValueError):
    """An exec the door refuses before it runs; the message names what and how to fix it.

    ``code`` is the API's error code (``exec_refused``; ``program_not_found``, ``cannot_execute`` for a program the
    guest could not start), ``exit_code`` the status the command ends with (126, or 127 when not found)."""

    def __init__(self, rule: str, message: str, *, reported_by: str = "host", code: str = "exec_refused",
                 exit_code: int = EXIT_REFUSED) -> None:
        super().__init__(message)
        self.rule = rule
        self.reported_by = reported_by  # whose word the refusal is: the host's, or the guest's ("could not start")
        self.code = code
        self.exit_code = exit_code


@dataclass(frozen=True)
class ExecRequest:
    argv: tuple[str, ...]
    cwd: str = "/workspace"
    env: dict[str, str] = field(default_factory=dict)
    stdin: bytes | None = None  # known up front; None means streamed (or none)
    stdin_streamed: bool = False
    tty: bool = False  # on a pseudo-terminal (interactive); the decision says so


def quote_word(word: str, *, first: bool) -> str:
    """Shell-quote one word; a first word that a shell would read as an assignment or keyword is quoted."""
    if first and (word in SHELL_RESERVED_WORDS or "=" in word):
        return "'" + word.replace("'", "'\"'\"'") + "'"
    if word and _SAFE_UNQUOTED.match(word):
        return word
    return shlex.quote(word) if word else "''"


def command_line(argv: tuple[str, ...] | list[str], env: dict[str, str] | None = None) -> str:
    """The decided command line: what a shell would run, with the environment as a leading ``env K=V``."""
    words = [quote_word(word, first=index == 0) for index, word in enumerate(argv)]
    if env:
        assignments = [f"{name}={shlex.quote(value) if value else chr(39) * 2}" for name, value in sorted(env.items())]
        return " ".join(["env", *assignments, *words])
    return " ".join(words)


def check_request(request: ExecRequest) -> None:
    """Refuse what the door must never pass on; the message says what was wrong and what to do."""
    argv = request.argv
    if not argv:
        raise ExecRefused("argv", "an exec needs a program: tkbox exec BOX -- PROGRAM [ARGS…]")
    if len(argv) > MAX_ARGV_ITEMS:
        raise ExecRefused("argv", f"{len(argv)} arguments is more than {MAX_ARGV_ITEMS}; pass a file instead")
    for word in argv:
        if "\0" in word:
            raise ExecRefused("argv", "an argument contains a NUL byte, which no program can receive")
        if len(word.encode("utf-8", "surrogatepass")) > MAX_ARG_BYTES:
            raise ExecRefused("argv", f"an argument is over {MAX_ARG_BYTES} bytes; pass a file instead")
    if argv[0].startswith("%"):
        raise ExecRefused("argv", f"the program {argv[0]!r} starts with '%', a job spec to a shell; name a program")
    if argv[0] == "":
        raise ExecRefused("argv", "the program name is empty")
    if request.env and "=" in argv[0]:
        raise ExecRefused("argv", "a program name containing '=' cannot follow an environment: env would read it "
                                  "as a variable; drop the environment or rename the program")
    if not request.cwd.startswith("/") or "\0" in request.cwd or len(request.cwd) > MAX_CWD_BYTES:
        raise ExecRefused("cwd", f"the working directory {request.cwd!r} must be an absolute path inside the box")
    if len(request.env) > MAX_ENV_ITEMS:
        raise ExecRefused("env", f"{len(request.env)} environment variables is more than {MAX_ENV_ITEMS}")
    for name, value in request.env.items():
        reason = refused_env_reason(name)
        if reason:
            raise ExecRefused("env", reason)
        if "\0" in value or len(value.encode("utf-8", "surrogatepass")) > MAX_ENV_VALUE_BYTES:
            raise ExecRefused("env", f"the value of {name} has a NUL byte or is over {MAX_ENV_VALUE_BYTES} bytes")
        reason = refused_env_value_reason(name, value)
        if reason:
            raise ExecRefused("env", reason)
    if request.stdin is not None and len(request.stdin) > STDIN_UPFRONT.default:
        raise ExecRefused("stdin", STDIN_UPFRONT.refusal(f"{len(request.stdin)} bytes given up front"))


def stdin_fields(data: bytes) -> dict[str, Any]:
    """What the decision says about stdin known up front."""
    fields: dict[str, Any] = {"stdin_sha256": "sha256:" + hashlib.sha256(data).hexdigest(), "stdin_bytes": len(data)}
    if len(data) <= STDIN_TEXT_IN_DECISION.default:
        try:
            fields["stdin_text"] = data.decode("utf-8")
        except UnicodeDecodeError:
            pass
    return fields


def decision_args(request: ExecRequest) -> dict[str, Any]:
    """The ``Bash`` decision's args for an exec request that passed ``check_request``."""
    args: dict[str, Any] = {"command": command_line(request.argv, request.env), "cwd": request.cwd}
    if request.env:
        args["env"] = dict(sorted(request.env.items()))
    if request.stdin is not None:
        args.update(stdin_fields(request.stdin))
    elif request.stdin_streamed:
        args["stdin"] = "streamed"
    if request.tty:
        args["tty"] = True
    return args


def start_refusal(program: str, code: str, guest_message: str) -> ExecRefused:
    """The refusal for an allowed command whose program the box's guest could not start, with the shell's status:
    127 when the program is not found (``ENOENT``), 126 when it exists but cannot be executed, 126 for anything
    else (the working directory, the box's limits).  ``code`` and ``guest_message`` are the guest's word, which the
    host cannot check: the message says whose word it is."""
    shown = program if len(program) <= SHOWN_PROGRAM_CHARS else program[:SHOWN_PROGRAM_CHARS] + "…"
    said = f"the box's guest reports {code}: {guest_message}"
    if code == "ENOENT":
        return ExecRefused("not_found", f"program not found: {shown!r} ({said}); check its name and the box's "
                                        "PATH, or give its full path", reported_by="guest",
                           code="program_not_found", exit_code=EXIT_NOT_FOUND)
    if code in CANNOT_EXECUTE_CODES:
        return ExecRefused("not_executable", f"cannot execute {shown!r} ({said}); run a program file that is "
                                             "executable (chmod +x), or a script through its interpreter "
                                             "(sh FILE, python3 FILE)", reported_by="guest",
                           code="cannot_execute", exit_code=EXIT_REFUSED)
    if code.startswith(EXEC_CWD_ERROR_PREFIX):
        return ExecRefused("cwd", f"the command could not start in its working directory ({said}); give a "
                                  "directory that exists in the box with --cwd", reported_by="guest")
    return ExecRefused("start", f"the command could not start ({said})", reported_by="guest")
