"""The filter and the themes as a person meets them: ``tkbox up`` in a real terminal (tmux), real execs in a real
box, the filter typed key by key, a theme chosen with ``:theme`` and found again after a restart."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from e2e import terminal
from e2e.daemon_process import events, make_checkout
from e2e.signer_process import TKBOX, tkbox
from tkbox_daemon.config import DaemonPaths

pytestmark = pytest.mark.e2e
SIZE = (200, 50)
EXECS = 12  # every third exits 3; the matches of either filter fit on a 50-line screen


def _bar_line(screen: str) -> str:
    return screen.rstrip().splitlines()[-2]  # the one-line input sits right above the footer


def _open_bar(session: str, key: str) -> None:
    """Press ``/`` or ``:`` and wait until the line for the text has the focus, which the footer shows by listing
    that line's keys instead of the pane's (keys typed before the focus moves reach the pane: ``x`` is Stop)."""
    footer = terminal.capture(session).rstrip().splitlines()[-1]
    terminal.send(session, key)
    terminal.wait_for(session, lambda screen: screen.rstrip().splitlines()[-1] != footer)


def _type(session: str, text: str) -> None:
    """Type ``text`` key by key as a person does, each key once the one before it shows on the line."""
    for end in range(1, len(text) + 1):
        terminal.send(session, literal=text[end - 1])
        terminal.wait_for(session, lambda screen, end=end: _bar_line(screen).rstrip().endswith(text[:end].rstrip()))


def _log_has_focus(screen: str) -> bool:
    """Whether the footer lists the event log's keys: a filter gives it the focus (keys pressed before that lands
    would go to the pane that had it)."""
    return "Next match" in screen.rstrip().splitlines()[-1]


def _log_lines(screen: str, kind: str) -> list[str]:
    return [line for line in screen.splitlines() if f" {kind} " in line and "#" in line]


def test_the_filter_finds_past_the_cut_and_the_chosen_theme_survives_a_restart(tmp_path):
    checkout = make_checkout(tmp_path)
    sessions: list[str] = []
    config = Path(os.environ["XDG_CONFIG_HOME"]) / "tkbox"
    try:
        session, done = terminal.start(checkout, SIZE)
        sessions.append(session)
        terminal.wait_for(session, lambda screen: "box.started" in screen)
        # the demo box took the box the daemon started ahead; the next one is started a second later
        terminal.wait_for(session, lambda screen: len(_log_lines(screen, "daemon.pool")) == 2)
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
        screen = terminal.wait_for(session, lambda screen: f"({len(kinds)} received)" in screen)
        finished = _log_lines(screen, "exec.finished")
        assert finished and not any("exit_code=" in line for line in finished)  # the drawn lines are cut before it

        _open_bar(session, "/")
        _type(session, "exit_code=0")  # what is typed shows on the line, key by key
        terminal.send(session, "Enter")
        screen = terminal.wait_for(session, lambda screen: "filter: exit_code=0" in screen and _log_has_focus(screen)
                           and len(_log_lines(screen, "exec.finished")) == EXECS - EXECS // 3)
        assert all("exit 0'" in line for line in _log_lines(screen, "exec.finished"))
        _open_bar(session, ":")  # :filter does what / does; / would open with the filter in force
        _type(session, "filter exit_code=[1-9]")
        terminal.send(session, "Enter")
        screen = terminal.wait_for(session, lambda screen: "filter: exit_code=[1-9]" in screen and _log_has_focus(screen)
                           and len(_log_lines(screen, "exec.finished")) == EXECS // 3)
        assert all("exit 3'" in line for line in _log_lines(screen, "exec.finished"))

        _open_bar(session, ":")
        _type(session, "theme high-contrast")
        terminal.send(session, "Enter")
        terminal.wait_for(session, lambda _: (config / "console.json").exists())
        assert json.loads((config / "console.json").read_text()) == {"theme": "tkbox-high-contrast"}
        terminal.send(session, "q")
        terminal.wait_done(done)
        terminal.kill(session)

        session, done = terminal.start(checkout, SIZE, "console")
        sessions.append(session)
        yellow = ("38;2;255;255;0", "38;5;226")  # high-contrast's primary, #ffff00, on a focused pane's border
        screen = terminal.wait_for(session, lambda screen: "Boxes" in screen and any(c in screen for c in yellow),
                           colours=True)
        assert "not available" not in terminal.capture(session)
        terminal.send(session, "q")
        terminal.wait_done(done)
    finally:
        for session in sessions:
            terminal.kill(session)
        tkbox("down", check=False)
        paths = DaemonPaths.from_env()
        for directory in (paths.layers_root, paths.channels_root):
            shutil.rmtree(directory, ignore_errors=True)
