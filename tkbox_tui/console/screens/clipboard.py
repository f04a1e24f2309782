"""``y`` on the box and event pages: copy what the page shows, escaped, and say how it travels."""

from __future__ import annotations

from typing import Any

from textual.screen import Screen


def copy_escaped(screen: Screen[Any], text: str, what: str) -> None:
    """Copy ``text`` (already escaped: what is copied is what was shown) and tell the operator how it travels.

    Textual sends the text to the terminal as an OSC 52 sequence (``App.copy_to_clipboard``); a terminal without
    OSC 52, or tmux without ``set -g set-clipboard on``, ignores it silently, and nothing tells the console so: the
    notification says so, and that selecting with the mouse (Shift+drag in most terminals) works everywhere.  The
    escaped form is copied, never the box's raw bytes: pasted into a shell or another terminal, raw bytes could
    carry escape sequences, or newlines that run commands.
    """
    screen.app.copy_to_clipboard(text)
    screen.notify(f"Copied {what}: {len(text):,} characters, escaped as shown, sent to the terminal's clipboard "
                  "(OSC 52). A terminal without OSC 52, or tmux without set-clipboard on, ignores it: select "
                  "with the mouse (Shift+drag) instead.", title="copied", timeout=8, markup=False)
