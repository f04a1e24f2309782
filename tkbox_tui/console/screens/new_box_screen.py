"""``NewBoxScreen``: the form for a new box, checked field by field; dismisses with the ``create_box`` settings."""

from __future__ import annotations

from typing import Any

from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label

from ..box_form import FIELDS, check_field, check_form, settings_from_form
from ..keymap import bindings_for

LABELS = {
    "name": ("Name", "empty: a generated name"),
    "workspace": ("Workspace", "the directory to work on"),
    "image": ("Image", "host, or dir:PATH"),
    "memory": ("Memory limit", "e.g. 2G (empty: default)"),
    "cpus": ("CPUs", "e.g. 2 (empty: default)"),
    "lifetime": ("Lifetime (s)", "e.g. 3600 (empty: default)"),
}


class NewBoxScreen(ModalScreen[dict[str, Any] | None]):
    """Each field is checked when it changes; Create (Ctrl+S) submits only a form without problems."""

    BINDINGS = bindings_for("form")
    AUTO_FOCUS = "#field-name"
    """The first field has the focus when the form opens (Textual's default focuses the scrolling container, and
    the first keys typed were lost)."""
    DEFAULT_CSS = """
    NewBoxScreen { align: center middle; }
    NewBoxScreen > VerticalScroll { width: 84; height: auto; max-height: 95%; border: round $primary;
                                    background: $surface; padding: 0 1; }
    NewBoxScreen .field-row { height: 1; margin-top: 1; }
    NewBoxScreen .field-label { width: 16; }
    NewBoxScreen Input { width: 1fr; border: none; height: 1; }
    NewBoxScreen .field-problem { height: auto; padding-left: 16; }
    NewBoxScreen #form-buttons { height: auto; align-horizontal: right; margin-top: 1; }
    NewBoxScreen #form-buttons Button { margin-left: 2; }
    """

    def __init__(self, defaults: dict[str, str] | None = None, *,
                 cursor_blink: bool = True) -> None:
        super().__init__()
        self.defaults = defaults or {}
        self.cursor_blink = cursor_blink

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Label("New box", id="form-title")
            for field in FIELDS:
                label, hint = LABELS[field]
                with Horizontal(classes="field-row"):
                    yield Label(label, classes="field-label")
                    field_input = Input(self.defaults.get(field, ""), placeholder=hint, id=f"field-{field}")
                    field_input.cursor_blink = self.cursor_blink
                    yield field_input
                yield Label("", id=f"problem-{field}", classes="field-problem")
            with Horizontal(id="form-buttons"):
                yield Button("Cancel (Esc)", id="form-cancel")
                yield Button("Create (Ctrl+S)", variant="primary", id="form-create")

    def values(self) -> dict[str, str]:
        return {field: self.query_one(f"#field-{field}", Input).value for field in FIELDS}

    def show_problem(self, field: str, problem: str) -> None:
        label = self.query_one(f"#problem-{field}", Label)
        label.update(problem)
        label.set_class(bool(problem), "-invalid")
        self.query_one(f"#field-{field}", Input).set_class(bool(problem), "-invalid")

    @on(Input.Changed)
    def check_changed_field(self, event: Input.Changed) -> None:
        field = (event.input.id or "").removeprefix("field-")
        if field in FIELDS:
            self.show_problem(field, check_field(field, event.value))

    @on(Input.Submitted)
    @on(Button.Pressed, "#form-create")
    def action_submit(self) -> None:
        values = self.values()
        problems = check_form(values)
        for field in FIELDS:
            self.show_problem(field, problems.get(field, ""))
        if problems:
            first = next(field for field in FIELDS if field in problems)
            self.query_one(f"#field-{first}", Input).focus()
            self.notify(f"{len(problems)} field(s) to fix: {', '.join(problems)}", severity="warning")
            return
        self.dismiss(settings_from_form(values))

    @on(Button.Pressed, "#form-cancel")
    def action_cancel(self) -> None:
        self.dismiss(None)
