"""The review's diff of one file, coloured, unified or side by side (pure: Rich renderables, no widgets).

Every byte of a patch is box-controlled: each line leaves here through ``safe_lines`` (tabs kept, every control
and invisible character escaped, a carriage return shown as ``\\r``), and is drawn as ``Text``, never as markup.
The base85 lines of a ``GIT binary patch`` are not drawn (they mean nothing to a reader): a line says how many
there are. At most ``LINES_SHOWN`` lines of a file are drawn; a last line says how many more the patch holds.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from ..terminal_text import safe_lines
from .patch_sections import PatchSection, patch_lines

LINES_SHOWN = 10_000
"""Lines of one file's diff the view draws (``tkbox diff BOX`` prints the whole patch)."""
_HUNK = re.compile(rb"^@@ -(\d+)(?:,\d+)? \+(\d+)(?:,\d+)? @@")
_BINARY_STARTS = (b"GIT binary patch",)


@dataclass(frozen=True)
class DiffColours:
    """Colours of the diff view, from the theme: added and removed lines, hunk headers."""

    added: str
    removed: str
    hunk: str


@dataclass(frozen=True)
class DiffLine:
    """One drawn line: its kind (``header``, ``hunk``, ``context``, ``added``, ``removed``, ``note``) and text."""

    kind: str
    text: str


def diff_lines(sections: list[PatchSection], limit: int = LINES_SHOWN) -> list[DiffLine]:
    """The lines of ``sections`` as the view draws them: escaped, classified, binary data summed up, capped."""
    out: list[DiffLine] = []
    total = 0
    for section in sections:
        for line in _classified(patch_lines(section.data)):
            total += 1
            if len(out) < limit:
                out.append(line)
    if total > limit:
        out.append(DiffLine("note", f"… {total - limit:,} more lines not shown: tkbox diff BOX prints them all"))
    return out


def _classified(lines: list[bytes]) -> Iterator[DiffLine]:
    """One section's lines, classified; everything after ``GIT binary patch`` is summed up in one note."""
    in_header = True
    binary: int | None = None
    for raw in lines:
        body = raw[:-1] if raw.endswith(b"\n") else raw
        if binary is not None:
            binary += bool(body)
            continue
        text = safe_lines(body)
        if body.startswith(_BINARY_STARTS):
            yield DiffLine("header", text)
            binary = 0
        elif body.startswith(b"@@"):
            in_header = False
            yield DiffLine("hunk", text)
        elif in_header:
            yield DiffLine("header", text)
        elif body.startswith(b"+"):
            yield DiffLine("added", text)
        elif body.startswith(b"-"):
            yield DiffLine("removed", text)
        elif body.startswith(b"\\"):
            yield DiffLine("note", text)
        else:
            yield DiffLine("context", text)
    if binary is not None:
        yield DiffLine("note", f"(binary data: {binary} lines, not shown)")


def _style(kind: str, colours: DiffColours) -> str:
    return {"header": "bold", "hunk": colours.hunk, "added": colours.added, "removed": colours.removed,
            "note": "dim italic"}.get(kind, "")


def unified(lines: list[DiffLine], colours: DiffColours) -> Text:
    """The diff as git prints it, coloured: one ``Text``, a line per line (no wrapping: the view scrolls)."""
    text = Text(no_wrap=True, overflow="ignore", end="")
    for index, line in enumerate(lines):
        if index:
            text.append("\n")
        text.append(line.text, style=_style(line.kind, colours))
    return text


def side_by_side(lines: list[DiffLine], colours: DiffColours) -> RenderableType:
    """The diff in two columns, old | new, with line numbers: removed lines beside the added lines that replace
    them, context on both sides, headers above; long lines wrap."""
    table = Table(box=None, expand=True, show_header=False, padding=(0, 1), show_edge=False)
    table.add_column(justify="right", no_wrap=True, style="dim")
    table.add_column(ratio=1, overflow="fold")
    table.add_column(justify="right", no_wrap=True, style="dim")
    table.add_column(ratio=1, overflow="fold")
    removed: list[tuple[int | None, DiffLine]] = []
    added: list[tuple[int | None, DiffLine]] = []
    old_no: int | None = None
    new_no: int | None = None

    def flush() -> None:
        for index in range(max(len(removed), len(added))):
            left = removed[index] if index < len(removed) else (None, None)
            right = added[index] if index < len(added) else (None, None)
            table.add_row(*_cells(left, colours), *_cells(right, colours))
        removed.clear()
        added.clear()

    for line in lines:
        if line.kind == "removed":
            removed.append((old_no, _without_marker(line)))
            old_no = old_no + 1 if old_no is not None else None
            continue
        if line.kind == "added":
            added.append((new_no, _without_marker(line)))
            new_no = new_no + 1 if new_no is not None else None
            continue
        flush()
        if line.kind == "context":
            body = _without_marker(line)
            table.add_row(*_cells((old_no, body), colours), *_cells((new_no, body), colours))
            old_no = old_no + 1 if old_no is not None else None
            new_no = new_no + 1 if new_no is not None else None
        else:
            if line.kind == "hunk":
                numbers = _HUNK.match(line.text.encode("utf-8", "replace"))
                old_no, new_no = (int(numbers[1]), int(numbers[2])) if numbers else (None, None)
            table.add_row("", Text(line.text, style=_style(line.kind, colours)), "", "")
    flush()
    return Group(table)


def _without_marker(line: DiffLine) -> DiffLine:
    return DiffLine(line.kind, line.text[1:])


def _cells(entry: tuple[int | None, DiffLine | None], colours: DiffColours) -> tuple[Text, Text]:
    number, line = entry
    if line is None:
        return Text(""), Text("")
    return Text("" if number is None else str(number)), Text(line.text, style=_style(line.kind, colours))
