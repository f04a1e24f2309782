"""What the normaliser knows about programs: wrappers, shells, interpreters and option spellings.

Given the words of one simple command (already unquoted and expanded), these functions answer:
which program really runs (``/bin/rm`` is ``rm``; ``sudo``, ``env``, ``nice``, ``timeout 5``,
``xargs``, ``command`` and friends only run the program after them), whether a shell is given a
command string (``bash -c "..."``) or runs its standard input, whether an interpreter runs code
from stdin or embeds shell commands (``python -c "os.system('...')"``), and the short spelling of
long options (``rm --recursive --force`` is ``rm -r -f``).
"""

from __future__ import annotations

import re
from fnmatch import fnmatchcase
from functools import lru_cache

# Reserved words that may start a command line but are not the program.
RESERVED = frozenset({"!", "{", "}", "then", "do", "else", "elif", "if", "while", "until", "time", "coproc",
                      "function"})

# Wrapper -> (short options that take a value, long options that take a value, operands before the program).
WRAPPERS: dict[str, tuple[str, tuple[str, ...], int]] = {
    "command": ("", (), 0),
    "builtin": ("", (), 0),
    "exec": ("a", (), 0),
    "nohup": ("", (), 0),
    "setsid": ("", (), 0),
    "nice": ("n", ("--adjustment",), 0),
    "ionice": ("cnp", ("--class", "--classdata", "--pid"), 0),
    "chrt": ("", (), 1),
    "taskset": ("", (), 1),
    "stdbuf": ("ioe", ("--input", "--output", "--error"), 0),
    "unbuffer": ("", (), 0),
    "timeout": ("sk", ("--signal", "--kill-after"), 1),
    "env": ("uCS", ("--unset", "--chdir", "--split-string"), 0),
    "sudo": ("ugpCDhrtTUR", ("--user", "--group", "--prompt", "--close-from", "--chdir", "--host", "--role",
                             "--type", "--command-timeout", "--other-user", "--chroot"), 0),
    "doas": ("uC", (), 0),
    "pkexec": ("", ("--user",), 0),
    "xargs": ("IdEeLlnPsa", ("--delimiter", "--eof", "--replace", "--max-lines", "--max-args", "--max-procs",
                             "--max-chars", "--arg-file", "--process-slot-var"), 0),
    "busybox": ("", (), 0),
    "strace": ("oeEpsuaIbXP", (), 0),
    "ltrace": ("oeEpsuaI", (), 0),
    "proxychains": ("f", (), 0),
    "proxychains4": ("f", (), 0),
    "torsocks": ("", (), 0),
    "fakeroot": ("", (), 0),
    "chroot": ("", (), 1),
    "flock": ("wE", ("--timeout", "--conflict-exit-code"), 1),
    "watch": ("nd", ("--interval",), 0),
    "time": ("fo", ("--format", "--output"), 0),    # /usr/bin/time; the bare word is the shell's reserved word
    "unshare": ("", (), 0),
    "firejail": ("", (), 0),
}

SHELLS = frozenset({"sh", "bash", "zsh", "dash", "ksh", "mksh", "ash", "yash", "rbash", "fish", "csh", "tcsh"})
# Interpreter family -> options whose value is program text.
_INTERPRETER_CODE_FLAGS = {"python": ("-c",), "perl": ("-e", "-E"), "ruby": ("-e",), "node": ("-e", "--eval", "-p",
                           "--print"), "php": ("-r",), "lua": ("-e",)}
_PYTHON = re.compile(r"python[0-9.]*|pypy[0-9.]*")

# Programs a globbed name (/???/r? or /bin/c?t) is taken to mean, most dangerous first.
KNOWN_PROGRAMS = ("rm", "sh", "bash", "curl", "wget", "cat", "kill", "pkill", "killall", "chmod", "chown", "dd",
                  "mkfs", "nc", "ncat", "socat", "python3", "python", "perl", "base64", "sudo", "su", "systemctl",
                  "git", "tee", "cp", "mv", "scp", "rsync", "zsh", "dash", "ksh", "less", "more", "head", "tail",
                  "xxd", "printf", "echo", "env", "eval", "find", "xargs", "tar", "zip", "ssh", "shred")

LONG_OPTIONS: dict[str, dict[str, str]] = {
    "rm": {"--recursive": "-r", "--force": "-f", "--dir": "-d"},
    "cp": {"--recursive": "-r", "--force": "-f"},
    "chmod": {"--recursive": "-R"},
    "chown": {"--recursive": "-R"},
    "chgrp": {"--recursive": "-R"},
    "git": {"--force": "-f"},
    "base64": {"--decode": "-d"},
    "base32": {"--decode": "-d"},
    "xxd": {"-revert": "-r", "--revert": "-r", "-plain": "-p", "-postscript": "-p", "-ps": "-p"},
    "curl": {"--output": "-o", "--remote-name": "-O", "--silent": "-s", "--location": "-L", "--data": "-d",
             "--form": "-F", "--upload-file": "-T", "--fail": "-f"},
    "wget": {"--output-document": "-O", "--quiet": "-q"},
    "kill": {"--signal": "-s"},
    "pkill": {"--full": "-f"},
    "sed": {"--in-place": "-i"},
    "tee": {"--append": "-a"},
}

_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\[[^\]]*\])?\+?=")
_NUMERIC_OPTION = re.compile(r"--?\d+")
_NOT_A_PATH = re.compile(r"[\s`]|\$\(")
_GLOB = re.compile(r"[*?\[]")


def is_assignment(word: str) -> bool:
    return _ASSIGNMENT.match(word) is not None


def program_name(word: str) -> str:
    """The name a command word runs: its basename; a glob like r? or c?t is taken as the known program it fits."""
    return _recent_program_name(word) if len(word) <= 256 else _program_name(word)


@lru_cache(maxsize=1024)  # a line asks for its program's name several times, and agents repeat programs
def _recent_program_name(word: str) -> str:
    return _program_name(word)


def _program_name(word: str) -> str:
    if _NOT_A_PATH.search(word):
        return word  # not a plain program path
    base = word.rsplit("/", 1)[-1] if "/" in word else word
    if not base:
        return word
    if _GLOB.search(base):
        for known in KNOWN_PROGRAMS:
            if fnmatchcase(known, base):
                return known
    return base


def _skip_options(args: list[str], short_values: str, long_values: tuple[str, ...]) -> int:
    """Index of the first operand after a wrapper's options."""
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            return i + 1
        if arg.startswith("--"):
            i += 2 if (arg in long_values and "=" not in arg) else 1
        elif _NUMERIC_OPTION.fullmatch(arg):
            i += 1
        elif arg.startswith("-") and len(arg) > 1:
            cluster = arg[1:]
            takes = next((k for k, c in enumerate(cluster) if c in short_values), None)
            i += 2 if takes is not None and takes == len(cluster) - 1 else 1
        else:
            return i
    return i


def strip_wrappers(argv: list[str], limit: int = 16, *, keep_path: bool = False,
                   removed: list[str] | None = None) -> list[str]:
    """The words of the program that really runs: reserved words, assignments and wrappers removed.

    Its first word is reduced to the program's name (``/bin/rm`` -> ``rm``) unless ``keep_path``. Each wrapper
    word removed is appended to ``removed``, as written: one written as a path (``/tmp/timeout``) runs the file
    at that path, whatever the file is."""
    argv = list(argv)
    for _ in range(limit):
        if not argv:
            return argv
        head = program_name(argv[0])
        if argv[0] in RESERVED:  # only the bare word is reserved: /tmp/if is a program (/usr/bin/time a wrapper)
            argv = argv[1:] if not (head == "time" and argv[1:2] == ["-p"]) else argv[2:]
            continue
        if is_assignment(argv[0]):
            argv = argv[1:]
            continue
        spec = WRAPPERS.get(head)
        if spec is None or (head == "command" and any(a in ("-v", "-V") for a in argv[1:2])):
            return [argv[0] if keep_path else head, *argv[1:]]
        short_values, long_values, operands = spec
        if removed is not None:
            removed.append(argv[0])
        rest = argv[1:]
        if head == "env":
            split = [i for i, a in enumerate(rest) if a in ("-S", "--split-string") or a.startswith("-S")]
            if split:
                i = split[0]
                value = rest[i][2:] if rest[i].startswith("-S") and len(rest[i]) > 2 else (
                    rest[i + 1] if i + 1 < len(rest) else "")
                rest = value.split() + rest[i + (1 if len(rest[i]) > 2 and rest[i].startswith("-S") else 2):]
        start = _skip_options(rest, short_values, long_values)
        rest = rest[start + operands:]
        while head == "env" and rest and is_assignment(rest[0]):
            rest = rest[1:]
        argv = rest
    return argv


def _shell_words(argv: list[str]) -> tuple[bool, bool, list[str], list[str]]:
    """A shell's (-c given, -s given, operands, files named by --rcfile/--init-file)."""
    i, has_c, has_s, rcfiles = 1, False, False, []
    while i < len(argv):
        arg = argv[i]
        if arg in ("--", "-"):
            i += 1 if arg == "--" else 0
            break
        if arg in ("-o", "+o", "-O", "+O", "--rcfile", "--init-file"):
            if arg.startswith("--") and i + 1 < len(argv):
                rcfiles.append(argv[i + 1])
            i += 2
            continue
        if arg.startswith("--"):
            i += 1
            continue
        if arg[:1] in ("-", "+") and len(arg) > 1:
            if arg[0] == "-" and "c" in arg[1:]:
                has_c = True
            if "s" in arg[1:]:
                has_s = True
            i += 1
            continue
        break
    return has_c, has_s, argv[i:], rcfiles


def shell_call(argv: list[str]) -> tuple[str | None, bool, list[str]] | None:
    """For a shell: (command string given with -c, reads its program from stdin, positional args); else None."""
    if not argv or program_name(argv[0]) not in SHELLS:
        return None
    has_c, has_s, operands, _rcfiles = _shell_words(argv)
    if has_c:
        return (operands[0] if operands else None, False, operands[1:])
    if has_s or not operands or operands[0] in ("-", "/dev/stdin"):
        return (None, True, operands[1:] if operands else [])
    return (None, False, operands[1:])


def shell_script_files(argv: list[str]) -> list[str]:
    """For a shell: the files it runs (its script operand, --rcfile/--init-file); [] for -c, stdin or no shell."""
    if not argv or program_name(argv[0]) not in SHELLS:
        return []
    has_c, has_s, operands, rcfiles = _shell_words(argv)
    if has_c or has_s or not operands or operands[0] in ("-", "/dev/stdin"):
        return rcfiles
    return [operands[0], *rcfiles]


def interpreter_family(name: str) -> str | None:
    """python/perl/ruby/node/php/lua for a program name of that interpreter (python3.11, nodejs...); else None."""
    family = "python" if _PYTHON.fullmatch(name) else "node" if name == "nodejs" else name
    return family if family in _INTERPRETER_CODE_FLAGS else None


def interpreter_call(argv: list[str]) -> tuple[str | None, bool] | None:
    """For python/perl/ruby/node/php/lua: (code given on the command line, reads code from stdin); else None."""
    if not argv:
        return None
    family = interpreter_family(program_name(argv[0]))
    if family is None:
        return None
    flags = _INTERPRETER_CODE_FLAGS[family]
    i = 1
    while i < len(argv):
        arg = argv[i]
        if arg in flags or (arg.startswith("-") and not arg.startswith("--") and len(arg) > 2
                            and f"-{arg[-1]}" in flags):
            return (argv[i + 1] if i + 1 < len(argv) else "", False)
        if family == "python" and arg.startswith("-m"):
            return (None, False)
        if arg == "-":
            return (None, True)
        if arg.startswith("-"):
            i += 1
            continue
        return (None, False)  # a script file
    return (None, True)


def command_string(argv: list[str]) -> str | None:
    """The shell command that su/runuser/script/flock/watch/trap run, if they are given one."""
    if not argv:
        return None
    head = program_name(argv[0])
    if head in ("su", "runuser", "script", "flock", "sg"):
        for i, arg in enumerate(argv[1:-1], start=1):
            if arg in ("-c", "--command") or (arg.startswith("-") and not arg.startswith("--") and arg.endswith("c")):
                return argv[i + 1]
        return None
    if head == "trap" and len(argv) >= 3:
        return argv[1]
    if head == "watch":
        rest = argv[1 + _skip_options(argv[1:], *WRAPPERS["watch"][:2]):]
        return " ".join(rest) or None
    return None


def canonical_options(argv: list[str]) -> list[str]:
    """Long options of known programs in their short spelling (--recursive -> -r, --output=x -> -o x)."""
    if not argv:
        return argv
    table = LONG_OPTIONS.get(argv[0])
    if table is None:
        return argv
    out = [argv[0]]
    for arg in argv[1:]:
        if arg.startswith("-") and "=" in arg:
            name, _, value = arg.partition("=")
            if name in table:
                out.extend((table[name], value))
                continue
        out.append(table.get(arg, arg))
    return out


_CALL_STRING = re.compile(
    r"""(?:system|popen|spawn|spawnSync|exec|execSync|execFile|execFileSync|check_output|check_call|call|run|Popen|"""
    r"""getoutput|getstatusoutput|passthru|shell_exec|proc_open|execvp?|execlp?)\s*\(\s*(\[)?\s*[rbuf]{0,2}"""
    r"""(["'])((?:\\.|(?!\2).){0,4096})\2""", re.S)
_LIST_STRINGS = re.compile(r"""(["'])((?:\\.|(?!\1).){0,4096})\1""", re.S)
_BACKTICKS = re.compile(r"`([^`]{1,4096})`|%x\{([^}]{1,4096})\}|qx[{(]([^})]{1,4096})[})]")


def embedded_shell_commands(code: str, limit: int = 8) -> list[str]:
    """Shell commands a snippet of Python/Perl/Ruby/Node/PHP code passes to system(), subprocess, backticks..."""
    found: list[str] = []
    for m in _CALL_STRING.finditer(code):
        if m.group(1):  # a list of words: ["rm", "-rf", "/"]
            close = code.find("]", m.start(2))
            segment = code[m.start(2): close if close >= 0 else len(code)]
            found.append(" ".join(s.group(2) for s in _LIST_STRINGS.finditer(segment)))
        else:
            found.append(m.group(3))
        if len(found) >= limit:
            return found
    for m in _BACKTICKS.finditer(code):
        found.append(next(g for g in m.groups() if g is not None))
        if len(found) >= limit:
            break
    return found
