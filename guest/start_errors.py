"""Why a program could not start, as the guest tells the host (the ``exec`` op's ``ok: false`` answer).

The code is the errno name of the failure, which the host maps to the shell's exit status (127 for ``ENOENT``,
126 otherwise; docs/box-contract.md), except that a working directory that cannot be entered is ``CWD_`` + its
errno name: the program was never tried there.  The message names the file and, where the errno alone misleads,
what the guest found: ``ENOENT`` for a file that exists means its interpreter (``#!`` line) or loader is missing,
``EACCES`` for a directory means it is one.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Mapping

from .protocol import EXEC_CWD_ERROR_PREFIX

MAX_PATH_DIRS = 256  # PATH entries looked at when saying whether a program exists


class StartError(Exception):
    """The process could not be started; ``code`` is an errno name such as ENOENT (``CWD_`` + one for the cwd)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def errno_name(number: int | None, default: str = "EIO") -> str:
    return errno.errorcode.get(number or 0, default)


def popen_failure(exc: OSError, argv0: str, cwd: str, env: Mapping[str, str]) -> StartError:
    """The StartError for ``subprocess.Popen``'s OSError: it names the cwd when the child could not enter it
    (Popen's ``filename`` is then the cwd), else the program."""
    name = errno_name(exc.errno)
    words = exc.strerror or str(exc)
    if exc.filename is not None and exc.filename == cwd and argv0 != cwd:
        return StartError(EXEC_CWD_ERROR_PREFIX + name, f"{words}: cannot enter the working directory {cwd}")
    found = _found_detail(exc.errno, argv0, cwd, env)
    return StartError(name, f"{words}: {argv0}" + (f" ({found})" if found else ""))


def _found_detail(number: int | None, argv0: str, cwd: str, env: Mapping[str, str]) -> str:
    """What the guest sees of the program, when it explains the error better than the errno's words."""
    if number == errno.ENOENT:
        path = _locate(argv0, cwd, env)
        if path is None:
            return "" if "/" in argv0 else "in no directory of the PATH"
        if os.path.islink(path) and not os.path.exists(path):
            return f"{path} is a symbolic link to a file that does not exist"
        return f"{path} exists: the interpreter on its #! line, or its loader, is missing"
    if number == errno.EACCES:
        path = _locate(argv0, cwd, env)
        if path is not None and os.path.isdir(path):
            return f"{path} is a directory"
        return "not executable, or a directory on its path cannot be searched"
    if number == errno.ENOEXEC:
        return "not a program this system runs, and no #! line names an interpreter"
    if number == errno.ETXTBSY:
        return "the file is open for writing"
    return ""


def _locate(argv0: str, cwd: str, env: Mapping[str, str]) -> str | None:
    """The file ``argv0`` names (a path, or the first PATH entry that has it), as execvp looks; None if none."""
    if "/" in argv0:
        path = os.path.join(cwd, argv0)
        return path if os.path.lexists(path) else None
    for directory in env.get("PATH", os.defpath).split(":")[:MAX_PATH_DIRS]:
        path = os.path.join(os.path.join(cwd, directory or "."), argv0)
        if os.path.lexists(path):
            return path
    return None
