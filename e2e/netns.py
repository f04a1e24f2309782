"""Named network namespaces for end-to-end tests: create and delete them (``ip netns``), run a command inside
one (``nsenter --net``), and remove the ones a killed test run left behind.

Every name starts with ``PREFIX`` followed by the creating process's pid, so parallel test processes (pytest-xdist
workers) never collide and ``cleanup_stale`` can tell a dead run's namespaces from a live one's.  ``nsenter
--net`` switches only the network namespace: a process started this way shares the test's files, mounts and
Unix sockets (the daemon's API socket, the signer's), and ``nsenter`` execs the command, so its pid is the
command's own.
"""

from __future__ import annotations

import itertools
import os
import re
import subprocess
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path

PREFIX = "tkbox-netlab-"
NETNS_DIR = Path("/run/netns")
IP_BOUND_S = 30  # how long one ``ip`` command may take before the test fails

_BASE_NAME = re.compile(re.escape(PREFIX) + r"(?P<pid>[0-9]+)-[0-9]+-")
_STALE_NAME = re.compile(_BASE_NAME.pattern + r"[a-z0-9-]+")
_counter = itertools.count()
_counter_lock = threading.Lock()


def new_base_name() -> str:
    """A name prefix no other namespace of this machine has: ``PREFIX<pid>-<n>``."""
    with _counter_lock:
        number = next(_counter)
    return f"{PREFIX}{os.getpid()}-{number}"


def netns_command(namespace: str, argv: Sequence[str]) -> list[str]:
    """``argv`` run inside the named network namespace (and nothing else changed)."""
    return ["nsenter", f"--net={NETNS_DIR / namespace}", "--", *argv]


def run_in(namespace: str, *argv: str, input: str | None = None, timeout: float = 60,
           env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` inside ``namespace`` to completion, capturing its output as text."""
    return subprocess.run(netns_command(namespace, argv), input=input, capture_output=True, text=True,
                          timeout=timeout, env=env)


def ip(*argv: str, namespace: str | None = None, batch: Iterable[str] = ()) -> str:
    """Run ``ip [-n NAMESPACE] ARGV`` (or ``ip … -batch -`` fed ``batch`` lines); fail naming the command."""
    lines = list(batch)
    command = ["ip", *(["-n", namespace] if namespace else []), *argv, *(["-batch", "-"] if lines else [])]
    result = subprocess.run(command, input="".join(f"{line}\n" for line in lines), capture_output=True, text=True,
                            timeout=IP_BOUND_S)
    if result.returncode != 0:
        shown = " ".join(command) + "".join(f"\n  {line}" for line in lines)
        raise RuntimeError(f"`{shown}` exited {result.returncode}: {result.stderr.strip()}")
    return result.stdout


def create_namespaces(names: Sequence[str]) -> None:
    ip(batch=[f"netns add {name}" for name in _ours(names)])


def delete_namespaces(names: Iterable[str]) -> None:
    """Delete those of ``names`` that exist (each must carry ``PREFIX``); a process still inside one keeps the
    namespace alive, unnamed, until it exits."""
    for name in _ours(names):
        if (NETNS_DIR / name).exists():
            ip("netns", "delete", name)


def lab_namespaces() -> list[str]:
    """The names under ``/run/netns`` that carry ``PREFIX``, from any process."""
    if not NETNS_DIR.is_dir():
        return []
    return sorted(entry.name for entry in NETNS_DIR.iterdir() if entry.name.startswith(PREFIX))


def cleanup_stale() -> list[str]:
    """Delete the lab namespaces whose creating process no longer exists (a killed test run); return their names.
    Namespaces of live processes, and every name without ``PREFIX``, are left alone."""
    stale = [name for name in lab_namespaces() if _STALE_NAME.fullmatch(name) and is_stale(name)]
    delete_namespaces(stale)
    return stale


def is_stale(name: str) -> bool:
    """Whether ``name`` starts with a ``new_base_name()`` of a process that no longer exists."""
    match = _BASE_NAME.match(name)
    return bool(match) and not _process_exists(int(match.group("pid")))


def _ours(names: Iterable[str]) -> list[str]:
    names = list(names)
    for name in names:
        if not _STALE_NAME.fullmatch(name):
            raise ValueError(f"{name!r} is not a lab namespace name ({PREFIX}<pid>-<n>-<role>)")
    return names


def _process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
