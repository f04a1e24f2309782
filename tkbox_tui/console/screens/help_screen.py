"""``HelpScreen``: every binding of the screen it was opened from, with its key, id and what it does, then the keys
of its other panes (which work once that pane has the focus), then Textual's own keys.

Each binding is listed once with all its keys, and each key once: a key that means something else in another
pane (``n``: New box here, Next match in the event log) is one row that says both.  Keys are written as
``key_names.key_label`` writes them (``Ctrl+P``, ``PgUp``, ``Esc``), the convention of docs/keys.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Label, Static

from ..command_mode import help_rows
from ..key_names import key_label
from ..keymap import bindings_for

BUILT_IN_DESCRIPTIONS = {"command_palette": "Command palette: every command, themes"}
"""Better words for Textual's own bindings whose description is terse (Ctrl+P's is ``palette``)."""


def describe_key(key: str) -> str:
    """A key as ``?`` shows it (``key_names.key_label``)."""
    return key_label(key)


@dataclass
class HelpRow:
    """One row of help: keys, the binding ids behind them and what they do."""

    keys: list[str] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)
    does: str = ""

    def add_key(self, key: str) -> None:
        if key not in self.keys:
            self.keys.append(key)


def _built_in_description(binding: Binding) -> str:
    """Textual's description in sentence case (``Page Left`` → ``Page left``), or better words."""
    text = BUILT_IN_DESCRIPTIONS.get(binding.action) or binding.description or binding.action
    return text[:1].upper() + text[1:].lower()


class HelpScreen(ModalScreen[None]):
    """Opened with the bindings to list (from ``Screen.active_bindings`` of the screen underneath) and, as
    ``elsewhere``, (pane, key, binding) for the keys of the screen's panes that do not have the focus."""

    BINDINGS = bindings_for("help")
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll { width: 80; max-height: 90%; height: auto; border: round $primary;
                                  background: $surface; padding: 0 1; }
    HelpScreen #help-title { text-style: bold; margin-bottom: 1; }
    HelpScreen #help-commands-title { text-style: bold; margin: 1 0; }
    """

    def __init__(self, title: str, bindings: list[tuple[str, Binding]],
                 elsewhere: Sequence[tuple[str, str, Binding]] = ()) -> None:
        super().__init__()
        self.title_text = title
        self.listed = bindings
        self.elsewhere = list(elsewhere)

    def rows(self) -> list[tuple[str, str, str]]:
        """(keys, ids, description): each binding once with all its keys, each key once; tkbox's bindings of this
        screen first, then its other panes', then Textual's own."""
        own: dict[str, HelpRow] = {}
        built_in: dict[str, HelpRow] = {}
        for key, binding in self.listed:
            if binding.id:
                row = own.setdefault(binding.id, HelpRow(ids=[binding.id], does=binding.description))
            else:
                row = built_in.setdefault(binding.action, HelpRow(does=_built_in_description(binding)))
            row.add_key(key)
        row_of_key = {key: row for row in [*own.values(), *built_in.values()] for key in row.keys}
        panes: dict[str, HelpRow] = {}
        for pane, key, binding in self.elsewhere:
            name = binding.id or binding.action
            shared = row_of_key.get(key)
            if shared is not None and shared.ids != [name]:  # the key means something else here: one row
                if name not in shared.ids:
                    shared.ids.append(name)
                    shared.does += f"; in the {pane}: {binding.description}"
                continue
            if shared is None:
                row = panes.setdefault(name, HelpRow(ids=[name], does=f"{binding.description} (in the {pane})"))
                row.add_key(key)
                row_of_key[key] = row
        return [(", ".join(describe_key(key) for key in row.keys), ", ".join(row.ids), row.does)
                for row in [*own.values(), *panes.values(), *built_in.values()]]

    def compose(self) -> ComposeResult:
        table = Table(box=None, expand=True, show_edge=False)
        table.add_column("Key", no_wrap=True, style="bold")
        table.add_column("Does")
        table.add_column("Id", style="dim")
        for keys, binding_ids, text in self.rows():  # Text: a remapped key such as [ is no markup
            table.add_row(Text(keys), Text(text), Text(binding_ids.replace(", ", "\n")))  # an id a line
        commands = Table(box=None, expand=True, show_edge=False)
        commands.add_column("Command", no_wrap=True, style="bold")
        commands.add_column("Does")
        for usage, does in help_rows():  # the one table of : commands (command_mode.COMMANDS)
            commands.add_row(Text(usage), Text(does))
        with VerticalScroll():
            yield Label(f"Keys: {self.title_text}   (Esc closes; Ctrl+P for all commands)", id="help-title")
            yield Static(table)
            yield Label("Commands: : on the main screen, Tab completes", id="help-commands-title")
            yield Static(commands, id="help-commands")

    def action_close(self) -> None:
        self.dismiss(None)
