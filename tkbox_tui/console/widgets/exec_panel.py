"""``ExecPanel``: run a command in the selected box; its output streams in and scrolls, Ctrl-C interrupts it.

What it runs is said on the panel: the typed line is split like a shell would split words, but no shell runs it —
the argv goes to the box as it is (``ls -la``, not ``ls *.py | wc``).  A line that starts with ``!`` runs the rest
through ``sh -c`` as one decided command (the policy sees ``sh -c '…'``).  ↑/↓ walk the commands run in this box.
The panel belongs to one box at a time: opened for another box it starts empty, and it will not change box while a
command runs.

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

HINT = "argv, no shell: ls -la   ·   !CMD runs CMD through sh -c   ·   ↑/↓ history   ·   Enter runs   ·   Esc closes"
OUTPUT_LINES = 10_000
"""Lines the panel's output keeps (it scrolls; the box's page has each exec's last 256 KiB)."""
HISTORY_SIZE = 200
"""Commands remembered per box (for this run of the console)."""


def argv_of(line: str) -> list[str]:
    """The argv a typed line runs: ``!CMD`` is ``["sh", "-c", "CMD"]``; anything else is split into words as a
    shell would (quotes, backslashes) and run without one.  Raises ``ValueError`` for an unclosed quote."""
    stripped = line.strip()
    if stripped.startswith("!"):
        command = stripped[1:].strip()
        return ["sh", "-c", command] if command else []
    return shlex.split(line)


class ExecPanel(Vertical):
    """Hidden until opened for a box; ``RunRequested`` / ``InterruptRequested`` / ``Closed`` go up to the App."""

    BINDINGS = bindings_for("exec")
    KEY_SCOPE = "exec"
    """The key catalogue's scope of this pane (help lists its keys while it is open and another has the focus)."""
    HELP_PANE = "exec panel"
    DEFAULT_CSS = """
    ExecPanel { display: none; height: 50%; min-height: 10; border: round $primary; }
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
        self.box_name = ""
        self.running = False
        self.histories: dict[str, list[str]] = {}
        """Lines run in each box (by box id), oldest first."""
        self._history_index: int | None = None
        self._draft = ""

    def compose(self) -> ComposeResult:
        yield Label("", id="exec-title")
        yield Log(id="exec-output", max_lines=OUTPUT_LINES)
        yield Input(placeholder=HINT, id="exec-argv")

    def open_for(self, box_id: str, box_name: str) -> bool:
        """Open the panel on ``box_id``; False (and a warning) while a command of another box still runs here.
        Another box's panel starts empty: output is never shown under a title it does not belong to."""
        if self.running and box_id != self.box_id:
            self.notify(f"a command is still running in {safe_text(self.box_name)}: Ctrl+C ends it, or wait",
                        severity="warning", markup=False)
            return False
        if box_id != self.box_id:
            self.query_one("#exec-output", Log).clear()
            self.query_one("#exec-argv", Input).value = ""
        self.box_id, self.box_name = box_id, box_name
        self._history_index = None
        self.query_one("#exec-title", Label).update(Text(f"exec in {safe_text(box_name)}  —  runs argv, no shell; "
                                                         "!CMD runs through sh -c"))
        self.add_class("-open")
        # At once, not as ``focus()`` does (after the messages already queued): keys typed right after ``e`` are
        # already queued and would otherwise reach the screen behind (``x`` opened "Stop box?").
        self.screen.set_focus(self.query_one("#exec-output" if self.running else "#exec-argv"))
        return True

    def write(self, text: str, box_id: str | None = None) -> None:
        """Append ``text``, which the caller has escaped (``safe_lines`` or ``SafeStreamDecoder``); text of another
        box than the panel's (``box_id``) is not shown here."""
        if box_id is None or box_id == self.box_id:
            self.query_one("#exec-output", Log).write(text)

    def set_running(self, running: bool) -> None:
        self.running = running
        self.query_one("#exec-argv", Input).disabled = running
        # Keep focus inside the open panel so Ctrl-C reaches it while the command runs; a closed panel takes none
        # (a command that ends after Esc closed it must not pull the keys into a hidden input).
        if self.has_class("-open"):
            self.query_one("#exec-output" if running else "#exec-argv").focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        if self.submit(event.value):
            event.input.value = ""

    def submit(self, line: str) -> bool:
        """Run ``line`` (as typed: ``argv_of`` says how); returns whether it was sent."""
        try:
            argv = argv_of(line)
        except ValueError as exc:
            self.write(f"! {safe_text(exc)}: close the quote, or start the line with ! to run it through sh -c\n")
            return False
        if not argv or self.running:
            return False
        self._remember(line.strip())
        shown = f"sh -c {shlex.quote(argv[2])}" if line.strip().startswith("!") else shlex.join(argv)
        self.write(f"$ {safe_text(shown)}\n")
        self.post_message(self.RunRequested(self.box_id, argv))
        return True

    # -- history --------------------------------------------------------------------------------------------

    def _remember(self, line: str) -> None:
        history = self.histories.setdefault(self.box_id, [])
        if not history or history[-1] != line:
            history.append(line)
            del history[:-HISTORY_SIZE]
        self._history_index = None

    def action_history_previous(self) -> None:
        history = self.histories.get(self.box_id, [])
        if not history or self.running:
            return
        argv_input = self.query_one("#exec-argv", Input)
        if self._history_index is None:
            self._draft = argv_input.value
            self._history_index = len(history) - 1
        else:
            self._history_index = max(0, self._history_index - 1)
        self._show_line(history[self._history_index])

    def action_history_next(self) -> None:
        history = self.histories.get(self.box_id, [])
        if self._history_index is None or self.running:
            return
        if self._history_index + 1 < len(history):
            self._history_index += 1
            self._show_line(history[self._history_index])
        else:
            self._history_index = None
            self._show_line(self._draft)

    def _show_line(self, line: str) -> None:
        argv_input = self.query_one("#exec-argv", Input)
        argv_input.value = line
        argv_input.cursor_position = len(line)

    # -- keys ---------------------------------------------------------------------------------------------

    def action_interrupt(self) -> None:
        if self.running:
            self.post_message(self.InterruptRequested(self.box_id))

    def action_close_panel(self) -> None:
        self.remove_class("-open")
        self.post_message(self.Closed(self.box_id))
