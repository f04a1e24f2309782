"""When the approval prompt may open, and which keys it may take: the rules that keep it from taking keys the
operator is typing (pure; the App feeds it times and the focus).

The rule, precisely (docs/console.md, "The prompt"):

- While a text input has the focus (the ``:``/``/`` line, the exec panel's command line, a field of the New box
  form, the reject-reason line), the prompt does not open until ``typing_pause`` seconds (2 by default) have passed
  since the later of the last key typed while that input had the focus and the moment it took the focus; or until
  the focus leaves it (to anything that is not a text input).  Whatever else has the focus, it opens at once.
- Once open, the prompt ignores every key but Esc that was pressed less than ``arm_delay`` seconds (0.5 by default)
  after it showed the approval it shows (``armed``): a key meant for the screen behind, typed just as the prompt
  appeared, answers nothing.  The same holds after it moves on to the next approval of its queue, so a key pressed
  twice never answers one the operator has not seen.
"""

from __future__ import annotations

from dataclasses import dataclass

TYPING_PAUSE = 2.0
ARM_DELAY = 0.5


@dataclass
class PromptGate:
    """Times are seconds on one monotonic clock (the App's ``monotonic``)."""

    typing_pause: float = TYPING_PAUSE
    arm_delay: float = ARM_DELAY
    last_typing: float = float("-inf")
    """When a key last went to a focused text input, or a text input last took the focus."""

    def note_typing(self, at: float) -> None:
        """A key was typed while a text input had the focus, or a text input took the focus."""
        self.last_typing = max(self.last_typing, at)

    def may_open(self, input_focused: bool, now: float) -> bool:
        """Whether the prompt may open now."""
        return not input_focused or now - self.last_typing >= self.typing_pause

    def wait_left(self, input_focused: bool, now: float) -> float:
        """Seconds until ``may_open`` turns true if nothing else is typed (0 when it is)."""
        return 0.0 if self.may_open(input_focused, now) else self.typing_pause - (now - self.last_typing)

    def armed(self, shown_at: float, key_time: float) -> bool:
        """Whether a key pressed at ``key_time`` may answer what the prompt showed at ``shown_at``."""
        return key_time - shown_at >= self.arm_delay
