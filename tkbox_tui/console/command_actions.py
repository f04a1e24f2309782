"""``CommandActionsMixin``: the App's side of the ``:`` line — run a command from the one table
(``command_mode.COMMANDS``) by calling the action its key would, and answer Tab with completions.

Each command's handler is ``_command_<name>``; a test checks that every command in the table has one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..terminal_text import safe_text
from .command_mode import CommandError, completions, parse_command
from .widgets import BoxTable, CommandBar, EventLog, ExecPanel

BUNDLES_COMPLETED = 50
"""Bundles in the working directory that Tab offers after ``:verify`` (the newest first)."""


def bundles_here() -> list[str]:
    """``./NAME.tkb`` for the newest ``BUNDLES_COMPLETED`` bundles in the console's working directory."""
    try:
        found = sorted(Path.cwd().glob("*.tkb"), key=lambda path: path.stat().st_mtime, reverse=True)
    except OSError:
        return []
    return [f"./{path.name}" for path in found[:BUNDLES_COMPLETED]]


class CommandActionsMixin:
    """Mixed into ``ConsoleApp`` (which provides ``state``, ``main_screen``, ``notify``, the box, exec, theme and
    filter actions).  Handlers are named for their messages (``on_command_bar_completion_requested``): Textual
    collects ``@on`` only from classes built by its metaclass."""

    def run_command(self, text: str) -> None:
        app: Any = self
        try:
            name, argument = parse_command(text)
        except CommandError as exc:
            app.notify(str(exc), severity="warning", markup=False)
            return
        getattr(self, f"_command_{name}")(argument)

    def on_command_bar_completion_requested(self, message: CommandBar.CompletionRequested) -> None:
        app: Any = self
        names = {"box": [box.name for box in app.state.boxes.values()], "theme": list(app.console_theme_names),
                 "bundle": bundles_here()}
        message.bar.complete_with(completions(message.text, names))

    # -- one handler per command ----------------------------------------------------------------------------

    def _select_named(self, name: str) -> bool:
        """Select the box ``name`` (id or name) when given; False (and a warning) when there is no such box."""
        app: Any = self
        if not name:
            return True
        box = app.state.find_box(name)
        if box is None or not app.main_screen.query_one(BoxTable).select_box(box.id):
            app.notify(f"no box named {safe_text(name)}", severity="warning", markup=False)
            return False
        app.state.selected_box_id = box.id  # now: the table's highlight message comes later
        return True

    def _command_quit(self, _argument: str) -> None:
        app: Any = self
        app.exit(0)

    def _command_boxes(self, _argument: str) -> None:
        app: Any = self
        app.main_screen.query_one(BoxTable).focus()

    def _command_events(self, _argument: str) -> None:
        app: Any = self
        app.main_screen.query_one(EventLog).focus()

    def _command_box(self, argument: str) -> None:
        app: Any = self
        if self._select_named(argument):
            app.main_screen.query_one(BoxTable).focus()

    def _command_theme(self, argument: str) -> None:
        app: Any = self
        app.switch_theme(argument)

    def _command_new(self, _argument: str) -> None:
        app: Any = self
        app.action_new_box()

    def _command_filter(self, argument: str) -> None:
        app: Any = self
        app.set_event_filter(argument)

    def _command_help(self, _argument: str) -> None:
        app: Any = self
        app.action_help()

    def _command_exec(self, argument: str) -> None:
        """Open the exec panel on the selected box and run ``argument`` there, as if typed into it."""
        app: Any = self
        box = app._selected_or_warn()
        if box is None:
            return
        panel = app.main_screen.query_one(ExecPanel)
        if panel.open_for(box.id, box.name):
            panel.submit(argument)

    def _command_shell(self, argument: str) -> None:
        app: Any = self
        if self._select_named(argument):
            app.action_open_shell()

    def _command_stop(self, argument: str) -> None:
        app: Any = self
        if self._select_named(argument):
            app.action_stop_box()

    def _command_rm(self, argument: str) -> None:
        app: Any = self
        if self._select_named(argument):
            app.action_remove_box()

    def _command_approvals(self, _argument: str) -> None:
        app: Any = self
        app.action_open_approvals()

    def _command_daemon(self, _argument: str) -> None:
        app: Any = self
        app.open_daemon_page()

    def _command_review(self, argument: str) -> None:
        app: Any = self
        if self._select_named(argument):
            app.action_review_box()

    def _command_export(self, argument: str) -> None:
        app: Any = self
        if self._select_named(argument):
            app.action_export_box()

    def _command_verify(self, argument: str) -> None:
        app: Any = self
        app.verify_bundle_at(argument)

    def _command_open(self, argument: str) -> None:
        app: Any = self
        if self._select_named(argument):
            box = app._selected_or_warn()
            if box is not None:
                app.open_box_page(box.id)
