"""``ExportFormModal``: where to write a box's exported run — the bundle's path (a default is filled in), the trust
file beside it (shown as the path changes), and whether files that exist may be replaced. Enter exports.

The form refuses what would fail (``export_files.target_problem``: a missing directory, an existing file without
"replace"), saying so under the path, and stays open. Paths are shown as ``Text``: a box's name is no markup.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Checkbox, Input, Label

from ...terminal_text import safe_text
from ..export_files import target_problem
from ..keymap import bindings_for
from ..verify_run import default_trust_path


@dataclass(frozen=True)
class ExportTarget:
    """Where the operator chose to write the bundle and its trust file."""

    bundle: Path
    trust: Path
    replace: bool


class ExportFormModal(ModalScreen[ExportTarget | None]):
    """Dismisses an ``ExportTarget`` on Enter (or Ctrl+S) when the paths can be written, None on Esc."""

    AUTO_FOCUS = "#export-path"
    BINDINGS = bindings_for("export_form")
    DEFAULT_CSS = """
    ExportFormModal { align: center middle; }
    ExportFormModal > Vertical { width: 90%; max-width: 100; height: auto; border: round $primary;
                                 background: $surface; padding: 0 1; }
    ExportFormModal #export-title { text-style: bold; margin-bottom: 1; }
    ExportFormModal Input { width: 1fr; }
    ExportFormModal #export-problem { color: $error; height: auto; }
    ExportFormModal #export-trust { color: $text-muted; height: auto; }
    ExportFormModal Horizontal { height: auto; align-horizontal: right; }
    ExportFormModal Button { margin-left: 2; }
    """

    def __init__(self, box_name: str, default: str, *, cursor_blink: bool = True) -> None:
        super().__init__()
        self.box_name = box_name
        self.default = default
        self.cursor_blink = cursor_blink

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(Text(f"Export the run of {safe_text(self.box_name)}, then verify it"), id="export-title")
            path = Input(self.default, placeholder="the bundle to write, e.g. ./run.tkb", id="export-path")
            path.cursor_blink = self.cursor_blink
            yield path
            yield Label(Text(self._trust_line(self.default)), id="export-trust")
            yield Checkbox("replace files that exist", id="export-replace")
            yield Label("", id="export-problem")
            with Horizontal():
                yield Button("Cancel (Esc)", id="export-cancel")
                yield Button("Export and verify (Enter)", variant="primary", id="export-go")

    def target(self) -> ExportTarget:
        bundle = Path(self.query_one("#export-path", Input).value.strip()).expanduser()
        return ExportTarget(bundle.absolute(), default_trust_path(bundle).absolute(),
                            self.query_one("#export-replace", Checkbox).value)

    @staticmethod
    def _trust_line(value: str) -> str:
        if not value.strip():
            return "trust file: beside the bundle"
        return f"trust file: {safe_text(str(default_trust_path(Path(value.strip()).expanduser()).absolute()))}"

    @on(Input.Changed, "#export-path")
    def _path_changed(self, event: Input.Changed) -> None:
        self.query_one("#export-trust", Label).update(Text(self._trust_line(event.value)))
        self.query_one("#export-problem", Label).update("")

    @on(Input.Submitted, "#export-path")
    @on(Button.Pressed, "#export-go")
    def action_submit(self) -> None:
        if not self.query_one("#export-path", Input).value.strip():
            self.query_one("#export-problem", Label).update("name the bundle to write, e.g. ./run.tkb")
            return
        target = self.target()
        problem = target_problem(target.bundle, target.trust, target.replace)
        if problem:
            self.query_one("#export-problem", Label).update(Text(safe_text(problem)))
            return
        self.dismiss(target)

    @on(Button.Pressed, "#export-cancel")
    def action_cancel(self) -> None:
        self.dismiss(None)
