"""The filter and the themes as a person meets them: ``tkbox up`` in a real terminal (tmux), real execs in a real
box, the filter typed key by key, a theme chosen with ``:theme`` and found again after a restart."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from e2e.daemon_process import events, make_checkout
from e2e.signer_process import TKBOX, tkbox
from tkbox_daemon.config import DaemonPaths

pytestmark = pytest.mark.e2e
TERMINAL_SAMPLE_SECONDS = 0.05  # a terminal's content can only be sampled: no event says it changed
EXECS = 12  # every third exits 3; the matches of either filter fit on a 50-line screen
TMUX = ["tmux", "-L", f"tkbox-e2e-{uuid.uuid4().hex[:8]}"]  # a server of its own: no other session's options


def _capture(session: str, colours: bool = False) -> str:
    return subprocess.run([*TMUX, "capture-pane", "-t", session, "-p", *(["-e"] if colours else [])],
                          capture_output=True, text=True, check=True).stdout


def _wait_for(session: str, found, timeout: float = 60, colours: bool = False) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        screen = _capture(session, colours)
        if found(screen):
            return screen
        time.sleep(TERMINAL_SAMPLE_SECONDS)
    size = subprocess.run([*TMUX, "display", "-p", "-t", session, "#{window_width}x#{window_height}"],
                          capture_output=True, text=True).stdout.strip()
    raise AssertionError(f"the terminal ({size}) never showed what was awaited:\n{_capture(session)}")


def _keys(session: str, *keys: str, literal: str | None = None) -> None:
    if keys:
        subprocess.run([*TMUX, "send-keys", "-t", session, *keys], check=True)
    if literal is not None:
        subprocess.run([*TMUX, "send-keys", "-t", session, "-l", literal], check=True)


def _start(session: str, checkout: Path, command: str) -> str:
    done = f"{session}-done"
    env_words = " ".join(f"{k}={v}" for k, v in os.environ.items()
                         if k in ("HOME", "XDG_RUNTIME_DIR", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CONFIG_HOME"))
    # COLUMNS/LINES left out: a stale 80x24 in the server's environment would win over the real window's size
    line = (f"cd {checkout} && env -u COLUMNS -u LINES {env_words} TERM=xterm-256color {TKBOX} {command}; "
            f"{' '.join(TMUX)} wait-for -S {done}")
    subprocess.run([*TMUX, "new-session", "-d", "-s", session, "-x", "200", "-y", "50", line], check=True)
    return done


def _bar_line(screen: str) -> str:
    return screen.rstrip().splitlines()[-2]  # the one-line input sits right above the footer


def _open_bar(session: str, key: str) -> None:
    """Press ``/`` or ``:`` and wait until the line for the text has the focus, which the footer shows by listing
    that line's keys instead of the pane's (keys typed before the focus moves reach the pane: ``x`` is Stop)."""
    footer = _capture(session).rstrip().splitlines()[-1]
    _keys(session, key)
    _wait_for(session, lambda screen: screen.rstrip().splitlines()[-1] != footer)


def _type(session: str, text: str) -> None:
    """Type ``text`` key by key as a person does, each key once the one before it shows on the line."""
    for end in range(1, len(text) + 1):
        _keys(session, literal=text[end - 1])
        _wait_for(session, lambda screen, end=end: _bar_line(screen).rstrip().endswith(text[:end].rstrip()))


def _log_has_focus(screen: str) -> bool:
    """Whether the footer lists the event log's keys: a filter gives it the focus (keys pressed before that lands
    would go to the pane that had it)."""
    return "Next match" in screen.rstrip().splitlines()[-1]


def _log_lines(screen: str, kind: str) -> list[str]:
    return [line for line in screen.splitlines() if f" {kind} " in line and "#" in line]


def test_the_filter_finds_past_the_cut_and_the_chosen_theme_survives_a_restart(tmp_path):
    if not shutil.which("tmux"):
        pytest.fail("tmux is not installed: run scripts/setup.sh")
    checkout = make_checkout(tmp_path)
    session = f"tkbox-{uuid.uuid4().hex[:8]}"
    config = Path(os.environ["XDG_CONFIG_HOME"]) / "tkbox"
    try:
        done = _start(session, checkout, "up")
        _wait_for(session, lambda screen: "box.started" in screen)
        # the demo box took the box the daemon started ahead; the next one is started a second later
        _wait_for(session, lambda screen: len(_log_lines(screen, "daemon.pool")) == 2)
        workers = [subprocess.Popen([TKBOX, "exec", "demo", "--", "sh", "-c",
                                     f"echo job {n} of the console filter check runs here and says so; "
                                     f"exit {3 if n % 3 == 0 else 0}"],
                                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                   for n in range(1, EXECS + 1)]
        assert [worker.wait(timeout=120) for worker in workers] == [3 if n % 3 == 0 else 0
                                                                    for n in range(1, EXECS + 1)]
        # all on the console: every event the daemon has (daemon.started, two daemon.pool, box.created, box.started,
        # egress.allowlist, two per exec, and whatever the daemon said of earlier runs' leftovers)
        kinds = [event["kind"] for event in events()]
        assert kinds.count("exec.started") == kinds.count("exec.finished") == EXECS
        screen = _wait_for(session, lambda screen: f"({len(kinds)} received)" in screen)
        finished = _log_lines(screen, "exec.finished")
        assert finished and not any("exit_code=" in line for line in finished)  # the drawn lines are cut before it

        _open_bar(session, "/")
        _type(session, "exit_code=0")  # what is typed shows on the line, key by key
        _keys(session, "Enter")
        screen = _wait_for(session, lambda screen: "filter: exit_code=0" in screen and _log_has_focus(screen)
                           and len(_log_lines(screen, "exec.finished")) == EXECS - EXECS // 3)
        assert all("exit 0'" in line for line in _log_lines(screen, "exec.finished"))
        _open_bar(session, ":")  # :filter does what / does; / would open with the filter in force
        _type(session, "filter exit_code=[1-9]")
        _keys(session, "Enter")
        screen = _wait_for(session, lambda screen: "filter: exit_code=[1-9]" in screen and _log_has_focus(screen)
                           and len(_log_lines(screen, "exec.finished")) == EXECS // 3)
        assert all("exit 3'" in line for line in _log_lines(screen, "exec.finished"))

        _open_bar(session, ":")
        _type(session, "theme high-contrast")
        _keys(session, "Enter")
        _wait_for(session, lambda _: (config / "console.json").exists())
        assert json.loads((config / "console.json").read_text()) == {"theme": "tkbox-high-contrast"}
        _keys(session, "q")
        subprocess.run([*TMUX, "wait-for", done], check=True, timeout=60)
        subprocess.run([*TMUX, "kill-session", "-t", session], check=False)

        done = _start(session, checkout, "console")
        yellow = ("38;2;255;255;0", "38;5;226")  # high-contrast's primary, #ffff00, on a focused pane's border
        screen = _wait_for(session, lambda screen: "Boxes" in screen and any(c in screen for c in yellow),
                           colours=True)
        assert "not available" not in _capture(session)
        _keys(session, "q")
        subprocess.run([*TMUX, "wait-for", done], check=True, timeout=60)
    finally:
        subprocess.run([*TMUX, "kill-server"], check=False)  # this test's own server, nobody else's
        tkbox("down", check=False)
        paths = DaemonPaths.from_env()
        for directory in (paths.layers_root, paths.channels_root):
            shutil.rmtree(directory, ignore_errors=True)
