"""The console across ``tkbox down`` and ``tkbox up`` in a real terminal (tmux, 180x48 and 200x50): the real
signer, daemon and boxes. After the restart the table holds exactly the boxes the daemon knows — no ghost row for a
removed box or for a box of an earlier daemon — both in a console that stayed open (it reconnects) and in the one
``tkbox up`` opens, and the stopped box's saved diff still opens.
"""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from e2e import terminal
from e2e.daemon_process import events, make_checkout
from e2e.signer_process import TKBOX, tkbox, tkbox_json
from tkbox_daemon.config import DaemonPaths

pytestmark = pytest.mark.e2e
ROW = re.compile(r"^\W*(?P<name>[a-z0-9-]+)\s+(?P<state>creating|running|held|stopping|stopped|failed|lost|removed)"
                 r"\s+host\s", re.MULTILINE)


def _table_rows(screen: str) -> list[tuple[str, str]]:
    """(name, state) of every row the boxes table draws (event log lines start with a time, not a name)."""
    return [(match["name"], match["state"]) for match in ROW.finditer(screen)]


@pytest.mark.parametrize("size", [(180, 48)], ids=["180x48"])  # the other sizes: test_console_tmux_e2e.py
def test_after_down_and_up_no_ghost_rows_and_the_stopped_box_diff_opens(tmp_path, size):
    checkout = make_checkout(tmp_path)
    sessions: list[str] = []
    try:
        stayed, _ = terminal.start(checkout, size)
        sessions.append(stayed)
        terminal.wait_for_screen(stayed, "box.started")
        wrote = subprocess.run([TKBOX, "exec", "demo", "--", "sh", "-c", "echo kept > /workspace/kept.txt"],
                               capture_output=True, timeout=60)
        assert wrote.returncode == 0, wrote.stderr
        tkbox("stop", "demo")
        tkbox("run", "--name", "gone", "--workspace", str(checkout))
        tkbox("rm", "gone")
        screen = terminal.wait_for_screen(stayed, "box.removed")
        assert _table_rows(screen) == [("demo", "stopped")], screen

        tkbox("down")
        terminal.wait_for_screen(stayed, "DISCONNECTED")
        fresh, _ = terminal.start(checkout, size)  # `tkbox up` again: signer, daemon, and a new console
        sessions.append(fresh)
        terminal.wait_for_screen(fresh, "daemon.started")
        newest = f"#{events()[-1]['seq']} "  # the new daemon's start: both consoles have caught up with it
        fresh_screen = terminal.wait_for_screen(fresh, newest)
        stayed_screen = terminal.wait_for_screen(stayed, newest, absent="DISCONNECTED")
        assert max(len(line) for line in fresh_screen.splitlines()) == size[0]  # drawn at the terminal's size
        for screen in (fresh_screen, stayed_screen):
            assert _table_rows(screen) == [("demo", "stopped")], screen  # no ghost of gone, no second demo
        assert "gone" in fresh_screen  # the removed box's events still show its name
        diff = tkbox("diff", "demo").stdout
        assert "kept.txt" in diff and "+kept" in diff
        assert [box["name"] for box in tkbox_json("ls")] == ["demo"]
    finally:
        for session in sessions:
            terminal.kill(session)
        tkbox("down", check=False)
        paths = DaemonPaths.from_env()
        for directory in (paths.layers_root, paths.channels_root):
            shutil.rmtree(directory, ignore_errors=True)

