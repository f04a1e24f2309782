"""``CommandBar``: the one-line input for ``:`` commands and ``/`` filters, hidden until asked for."""

from __future__ import annotations

from dataclasses import dataclass

from textual import events
from textual.message import Message
from textual.widgets import Input

PROMPTS = {"command": ":", "filter": "/"}


class CommandBar(Input):
    """Opens in a mode (``command`` or ``filter``); Enter posts ``Entered``, Escape closes without effect."""

    DEFAULT_CSS = """
    CommandBar { dock: bottom; display: none; border: none; height: 1; padding: 0 1; }
    CommandBar.-open { display: block; }
    """

    @dataclass
    class Entered(Message):
        """The operator entered a command or a filter."""

        mode: str
        text: str

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.mode = "command"

    def open(self, mode: str, text: str = "") -> None:
        self.mode = mode
        self.placeholder = {"command": "boxes | events | box NAME | theme NAME | new | q",
                            "filter": "box:NAME kind:PREFIX regex; ! first inverts; empty clears"}[mode]
        self.value = text
        self.add_class("-open")
        self.focus()

    def close(self) -> None:
        self.remove_class("-open")
        self.value = ""
        self.screen.focus_next()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        mode = self.mode
        # A filter keeps its spacing: EventFilter.parse trims it, except a trailing space escaped with a backslash.
        text = self.value if mode == "filter" else self.value.strip()
        self.close()
        self.post_message(self.Entered(mode, text))

    def on_key(self, event: events.Key) -> None:
        if event.key == "escape":
            event.stop()
            self.close()
