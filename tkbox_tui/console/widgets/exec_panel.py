"""``ExecPanel``: run a command in the selected box; its output streams in, Ctrl-C interrupts it.

What it shows arrives escaped (``terminal_text``): the App decodes the command's output with a
``SafeStreamDecoder``, and the ``Log`` it writes to reads no markup.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import Input, Label, Log

from ...terminal_text import safe_text
from ..keymap import bindings_for


class ExecPanel(Vertical):
    """Hidden until opened for a box; ``RunRequested`` / ``InterruptRequested`` / ``Closed`` go up to the App."""

    BINDINGS = bindings_for("exec")
    KEY_SCOPE = "exec"
    """The key catalogue's scope of this pane (help lists its keys while it is open and another has the focus)."""
    HELP_PANE = "exec panel"
    DEFAULT_CSS = """
    ExecPanel { display: none; height: 14; border: round $primary; }
    ExecPanel.-open { display: block; }
    ExecPanel #exec-title { height: 1; padding: 0 1; }
    ExecPanel #exec-output { height: 1fr; }
    ExecPanel #exec-argv { border: none; height: 1; }
    """

    @dataclass
    class RunRequested(Message):
        box_id: str
        argv: list[str]

    @dataclass
    class InterruptRequested(Message):
        box_id: str

    @dataclass
    class Closed(Message):
        box_id: str

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.box_id = ""
        self.running = False

    def compose(self) -> ComposeResult:
        yield Label("", id="exec-title")
        yield Log(id="exec-output", max_lines=2_000)
        yield Input(placeholder="command to run, e.g. ls -la  (Enter runs, Esc closes)", id="exec-argv")

    def open_for(self, box_id: str, box_name: str) -> None:
        self.box_id = box_id
        self.query_one("#exec-title", Label).update(Text(f"exec in {safe_text(box_name)}"))
        self.add_class("-open")
        self.query_one("#exec-argv", Input).focus()

    def write(self, text: str) -> None:
        """Append ``text``, which the caller has escaped (``safe_lines`` or ``SafeStreamDecoder``)."""
        self.query_one("#exec-output", Log).write(text)

    def set_running(self, running: bool) -> None:
        self.running = running
        self.query_one("#exec-argv", Input).disabled = running
        # Keep focus inside the panel so Ctrl-C reaches it while the command runs.
        self.query_one("#exec-output" if running else "#exec-argv").focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        try:
            argv = shlex.split(event.value)
        except ValueError as exc:
            self.write(f"! {safe_text(exc)}\n")
            return
        if argv and not self.running:
            event.input.value = ""
            self.write(f"$ {safe_text(shlex.join(argv))}\n")
            self.post_message(self.RunRequested(self.box_id, argv))

    def action_interrupt(self) -> None:
        if self.running:
            self.post_message(self.InterruptRequested(self.box_id))

    def action_close_panel(self) -> None:
        self.remove_class("-open")
        self.post_message(self.Closed(self.box_id))
