"""A real terminal for the console's end-to-end tests: ``tkbox …`` in a session of a tmux server of this test
process's own, and the screen read back as text.

Never the default tmux server: a person's running server keeps the environment it was started with (a
``TKBOX_DAEMON_RUNTIME_DIR`` of theirs would point the test's console at their daemon) and their options; the
private server starts from this process's environment and no configuration file, and is killed when the process
ends. A terminal's content can only be sampled (no event says it changed), so waits poll it.
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from e2e.signer_process import TKBOX

SAMPLE_SECONDS = 0.05
SERVER = f"tkbox-e2e-{os.getpid()}-{uuid.uuid4().hex[:6]}"
TMUX = ["tmux", "-L", SERVER, "-f", "/dev/null"]
PASSED_ENV = ("HOME", "XDG_RUNTIME_DIR", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CONFIG_HOME")


def tmux(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*TMUX, *args], capture_output=True, text=True, check=check)


@atexit.register
def _kill_server() -> None:
    """The server and its socket file (tmux leaves the file behind)."""
    if shutil.which("tmux"):
        subprocess.run([*TMUX, "kill-server"], capture_output=True, check=False)
    socket_file = Path(os.environ.get("TMUX_TMPDIR", "/tmp")) / f"tmux-{os.getuid()}" / SERVER
    socket_file.unlink(missing_ok=True)


def start(checkout: os.PathLike[str] | Path, size: tuple[int, int], tkbox_args: str = "up") -> tuple[str, str]:
    """``tkbox TKBOX_ARGS`` in ``checkout``, in a new session of ``size``; returns (session, done), where ``done``
    is the tmux channel signalled once the command has exited (``wait_done``)."""
    if not shutil.which("tmux"):
        pytest.fail("tmux is not installed: run scripts/setup.sh")
    session = f"tkbox-{uuid.uuid4().hex[:8]}"
    done = f"{session}-done"
    env_words = " ".join(f"{key}={value}" for key, value in os.environ.items() if key in PASSED_ENV)
    # -u COLUMNS -u LINES: a tmux server started from a test process can hand its panes COLUMNS=80 LINES=24, which
    # Textual would take over the terminal's real size
    command = (f"cd {checkout} && env -u COLUMNS -u LINES {env_words} TERM=xterm-256color {TKBOX} {tkbox_args}; "
               f"{' '.join(TMUX)} wait-for -S {done}")
    tmux("new-session", "-d", "-s", session, "-x", str(size[0]), "-y", str(size[1]), command)
    return session, done


def capture(session: str, colours: bool = False) -> str:
    return tmux("capture-pane", "-t", session, "-p", *(["-e"] if colours else [])).stdout


def wait_for(session: str, found: Callable[[str], bool], timeout: float = 60, colours: bool = False) -> str:
    """The screen once ``found(screen)``; fails with the screen and the window's size after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        screen = capture(session, colours)
        if found(screen):
            return screen
        time.sleep(SAMPLE_SECONDS)
    size = tmux("display", "-p", "-t", session, "#{window_width}x#{window_height}", check=False).stdout.strip()
    raise AssertionError(f"the terminal ({size}) never showed what was awaited:\n{capture(session)}")


def wait_for_screen(session: str, text: str, timeout: float = 60, absent: str | None = None) -> str:
    """The screen once it shows ``text`` (and not ``absent``)."""
    try:
        return wait_for(session, lambda screen: text in screen and (absent is None or absent not in screen), timeout)
    except AssertionError as missing:
        raise AssertionError(f"{text!r} never appeared on the terminal: {missing}") from None


def send(session: str, *keys: str, literal: str | None = None) -> None:
    """Key names (``Escape``, ``Tab``, ``q``), then ``literal`` typed as text."""
    if keys:
        tmux("send-keys", "-t", session, *keys)
    if literal is not None:
        tmux("send-keys", "-t", session, "-l", literal)


def wait_done(done: str, timeout: float = 60) -> None:
    """Until the session's command has exited (``start``'s ``done`` channel)."""
    subprocess.run([*TMUX, "wait-for", done], check=True, timeout=timeout)


def kill(session: str) -> None:
    tmux("kill-session", "-t", session, check=False)
