"""``ApprovalsBadge``: the pending approvals count, first in every screen's footer, so that no pending approval is
ever off screen; a click (or ``i``) opens the inbox.

The App sets it (``show_count``) whenever its ``approvals_pending`` (the count across every box) changes, on every
screen's footer; a badge composed anew reads the count when it mounts.  (It does not ``watch`` the App: the footer
is composed again at every move of the focus, and each removed badge would stay on the App's list of watchers.)
"""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.widgets import Static


def badge_text(count: int) -> str:
    """``i approvals 0``; ``i ▲ 3 approvals pending``: the key, then the count in words."""
    if count <= 0:
        return "i approvals 0"
    return f"i ▲ {count} approval{'s' if count != 1 else ''} pending"


class ApprovalsBadge(Static):
    """Shown at the left of the footer, which cuts keys from the right on a narrow terminal: never cut."""

    DEFAULT_CSS = """
    ApprovalsBadge { width: auto; height: 1; padding: 0 1; color: $text-muted; background: $panel; }
    ApprovalsBadge.-pending { background: $verdict-ask; color: $background; text-style: bold; }
    """

    def __init__(self) -> None:
        super().__init__(Text(badge_text(0)))
        self.count = 0

    def on_mount(self) -> None:
        self.show_count(getattr(self.app, "approvals_pending", 0))

    def show_count(self, count: int) -> None:
        self.count = count
        self.update(Text(badge_text(count)))
        self.set_class(count > 0, "-pending")

    def on_click(self) -> None:
        app: Any = self.app
        app.action_open_approvals()
