"""The console as a person meets it: ``tkbox up`` in a real terminal (tmux, 180x48 and 200x50), driven with
``send-keys`` and read with ``capture-pane``, against the real signer, daemon and demo box.

What a headless Pilot test cannot vouch for, checked on the terminal itself: Tab moves the focus (the footer then
shows the event log's keys); text typed in the ``/`` line is on screen; and with 200 events streaming while the
exec panel is open, the newest event's sequence number is on screen and the status says FOLLOWING.

The console across ``tkbox down`` and ``tkbox up`` (no ghost rows, a stopped box's diff still opens) is
``test_console_restart_tmux_e2e.py``; further checks of a running console belong in ``TestConsoleInTmux`` below.
"""

from __future__ import annotations

import asyncio
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from e2e import terminal
from e2e.daemon_process import events, make_checkout
from e2e.signer_process import tkbox
from tkbox_daemon.config import DaemonPaths
from tkbox_tui.client import DaemonClient

pytestmark = pytest.mark.e2e
SIZES = [(180, 48), (200, 50)]
EVENTS_WHILE_OPEN = 200
SCREENFUL = 60  # more events than the log has rows at 200x50
EXECS_AT_ONCE = 8


@contextmanager
def console_in_tmux(checkout: Path, size: tuple[int, int]) -> Iterator[str]:
    """``tkbox up`` in the checkout, in a new tmux session of ``size``; yields the session name once the demo box
    has started on screen, and afterwards stops the console, the daemon and the signer."""
    session, _ = terminal.start(checkout, size)
    try:
        terminal.wait_for_screen(session, "box.started")
        yield session
    finally:
        terminal.kill(session)
        tkbox("down", check=False)
        paths = DaemonPaths.from_env()
        for directory in (paths.layers_root, paths.channels_root):
            shutil.rmtree(directory, ignore_errors=True)


async def _run_execs_until(box: str, seq: int) -> None:
    """Run ``true`` in ``box``, a few at a time, until the daemon's events reach sequence number ``seq`` (each exec
    makes events whatever the policy decides)."""
    async with DaemonClient(DaemonPaths.from_env().api_socket) as client:

        async def one() -> None:
            call = client.exec(box)
            try:
                await call.start(["true"])
                async for item in call.messages():
                    if isinstance(item, dict) and item.get("type") in ("exit", "denied"):
                        break
            finally:
                await call.close()

        while (await client.health()).get("last_seq", 0) < seq:
            await asyncio.gather(*(one() for _ in range(EXECS_AT_ONCE)))


def _footer(screen: str) -> str:
    return screen.rstrip("\n").splitlines()[-1]


@pytest.mark.parametrize("size", SIZES, ids=[f"{w}x{h}" for w, h in SIZES])
class TestConsoleInTmux:
    def test_tab_moves_the_focus_and_typed_filter_text_is_on_screen(self, tmp_path, size):
        with console_in_tmux(make_checkout(tmp_path), size) as session:
            # the boxes have the focus: n is New box (waited for: a loaded terminal may draw the footer a frame later)
            assert " n New " in _footer(terminal.wait_for_screen(session, " n New "))
            terminal.send(session, "Tab")
            terminal.wait_for_screen(session, " n Next match ")  # the event log has it: n is Next match
            terminal.send(session, "BTab")
            terminal.wait_for_screen(session, " n New ")
            terminal.send(session, "/")
            terminal.wait_for_screen(session, "box:NAME kind:PREFIX")  # the line is open (its placeholder): type, as a person
            terminal.send(session, literal="demo-typed-filter")
            screen = terminal.wait_for_screen(session, "demo-typed-filter")
            line = next(line for line in screen.splitlines() if "demo-typed-filter" in line)
            assert line.strip() == "demo-typed-filter"  # the / line, one row, shows what was typed
            terminal.send(session, "Escape")
            terminal.wait_for_screen(session, " n New ", absent="demo-typed-filter")

    def test_following_shows_the_newest_event_while_the_exec_panel_is_open(self, tmp_path, size):
        with console_in_tmux(make_checkout(tmp_path), size) as session:
            asyncio.run(_run_execs_until("demo", events()[-1]["seq"] + SCREENFUL))  # the log scrolls to follow
            terminal.wait_for_screen(session, f"#{events()[-1]['seq']} ")
            terminal.send(session, "e")  # the panel takes rows from the log, which must still show its newest line
            terminal.wait_for_screen(session, "exec in demo")
            asyncio.run(_run_execs_until("demo", events()[-1]["seq"] + EVENTS_WHILE_OPEN))
            newest = events()[-1]["seq"]
            screen = terminal.wait_for_screen(session, f"#{newest} ")
            assert re.search(rf"#{newest}\b", screen) and "exec in demo" in screen  # the panel is still open
            assert "FOLLOWING" in screen and "PAUSED" not in screen
