"""``HelpScreen``: every binding of the screen it was opened from, with its key, id and what it does, then the keys
of its other panes (which work once that pane has the focus)."""

from __future__ import annotations

from collections.abc import Sequence

from rich.table import Table
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Label, Static

from ..keymap import bindings_for


def describe_key(key: str) -> str:
    names = {"question_mark": "?", "colon": ":", "slash": "/", "escape": "Esc", "tab": "Tab",
             "shift+tab": "Shift+Tab", "ctrl+p": "Ctrl+P"}
    return names.get(key, key.replace("ctrl+", "Ctrl+"))


class HelpScreen(ModalScreen[None]):
    """Opened with the bindings to list (from ``Screen.active_bindings`` of the screen underneath) and, as
    ``elsewhere``, (pane, key, binding) for the keys of the screen's panes that do not have the focus."""

    BINDINGS = bindings_for("help")
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll { width: 80; max-height: 90%; height: auto; border: round $primary;
                                  background: $surface; padding: 0 1; }
    HelpScreen #help-title { text-style: bold; margin-bottom: 1; }
    """

    def __init__(self, title: str, bindings: list[tuple[str, Binding]],
                 elsewhere: Sequence[tuple[str, str, Binding]] = ()) -> None:
        super().__init__()
        self.title_text = title
        self.listed = bindings
        self.elsewhere = list(elsewhere)

    def rows(self) -> list[tuple[str, str, str]]:
        """(keys, id, description), one per binding, in the order they apply."""
        seen: dict[str, tuple[list[str], str, str]] = {}
        for key, binding in self.listed:
            name = binding.id or binding.action
            entry = seen.setdefault(name, ([], binding.id or "", binding.description or binding.action))
            entry[0].append(describe_key(key))
        rows = [(", ".join(keys), binding_id, text) for keys, binding_id, text in seen.values()]
        pane_keys: dict[str, tuple[list[str], str, str]] = {}
        for pane, key, binding in self.elsewhere:
            entry = pane_keys.setdefault(binding.id or binding.action,
                                         ([], binding.id or "", f"{binding.description} (in the {pane})"))
            entry[0].append(describe_key(key))
        rows += [(", ".join(keys), binding_id, text) for keys, binding_id, text in pane_keys.values()]
        # tkbox's own bindings (with ids; other panes' after this one's) first, then the focused widget's built-ins.
        return sorted(rows, key=lambda row: not row[1])

    def compose(self) -> ComposeResult:
        table = Table(box=None, expand=True, show_edge=False)
        table.add_column("Key", no_wrap=True, style="bold")
        table.add_column("Does")
        table.add_column("Id", style="dim")
        for keys, binding_id, text in self.rows():
            table.add_row(keys, text, binding_id)
        with VerticalScroll():
            yield Label(f"Keys: {self.title_text}   (Esc closes; Ctrl+P for all commands)", id="help-title")
            yield Static(table)

    def action_close(self) -> None:
        self.dismiss(None)
