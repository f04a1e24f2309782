"""PolicyError: the one exception the policy package raises, always naming where and what to do.

A pack error reads like ``packs/mine.yaml:12: deny[3].pattern: bad regex (missing ), unterminated
subpattern at position 4): fix the regular expression (Python re syntax)``, so whoever wrote the
pack can go straight to the line. Errors that have no file (a bad PolicyContext) name the field.
"""

from __future__ import annotations


class PolicyError(Exception):
    """A pack (or the context it is compiled with) is wrong; ``str()`` says where and what to do."""

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None,
                 key: str | None = None, action: str | None = None) -> None:
        self.path = path
        self.line = line
        self.key = key
        self.message = message
        self.action = action
        super().__init__(self._render())

    def _render(self) -> str:
        where = ""
        if self.path is not None:
            where = self.path if self.line is None else f"{self.path}:{self.line}"
        head = ": ".join(part for part in (where, self.key or "") if part)
        text = f"{head}: {self.message}" if head else self.message
        return f"{text}: {self.action}" if self.action else text
