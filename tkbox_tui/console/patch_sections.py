"""A box's patch (git format; box-controlled bytes) cut into one section per file, for the review's diff view.

The review lists the files as the daemon's strict parser read them (``ApplyReport``); this module only finds the
text to show beside each. A section starts at each line that begins ``diff --git `` and runs to the next one; the
bytes before the first are the preamble. Cutting loses nothing: the preamble and the sections, joined, are the patch.

A section names its paths in git's notation (``a/``/``b/`` prefixes, C-quoted when they hold special bytes):
``rename to``/``copy to`` and the ``+++`` label give the new path, ``rename from``/``copy from`` and the ``---``
label the old one, and only when none of those is there (a mode change, a binary patch) the ``diff --git`` line.
Every path a section names finds it (``PatchSections.for_path``), so a path named by two sections shows both, and
the view says so. This is a view: what is applied is what the daemon parsed, never what this module read.
"""

from __future__ import annotations

from dataclasses import dataclass, field

DIFF_GIT = b"diff --git "
_NAMED_ESCAPES = {ord("a"): 0x07, ord("b"): 0x08, ord("t"): 0x09, ord("n"): 0x0A, ord("v"): 0x0B, ord("f"): 0x0C,
                  ord("r"): 0x0D, ord('"'): 0x22, ord("\\"): 0x5C}
_HEADER_ENDS = (b"@@", b"GIT binary patch", b"Binary files ")
"""Lines after which a section's header is over: what follows is content, never a path."""


@dataclass(frozen=True)
class PatchSection:
    """One file's part of the patch: its bytes, and the paths it names (the new path first)."""

    data: bytes
    paths: tuple[str, ...]


@dataclass
class PatchSections:
    """The patch cut per file: ``preamble`` (the bytes before the first section) and ``sections`` in patch order."""

    preamble: bytes = b""
    sections: list[PatchSection] = field(default_factory=list)

    def for_path(self, *paths: str) -> list[PatchSection]:
        """The sections that name any of ``paths`` (a file's path, then its old path), in patch order."""
        wanted = {path for path in paths if path}
        return [section for section in self.sections if wanted.intersection(section.paths)]


def split_patch(patch: bytes) -> PatchSections:
    """Cut ``patch`` at every line that starts ``diff --git ``; never raises."""
    lines = patch_lines(patch)
    starts = [index for index, line in enumerate(lines) if line.startswith(DIFF_GIT)]
    if not starts:
        return PatchSections(patch, [])
    cut = PatchSections(b"".join(lines[:starts[0]]))
    for first, end in zip(starts, [*starts[1:], len(lines)], strict=True):
        section_lines = lines[first:end]
        cut.sections.append(PatchSection(b"".join(section_lines), section_paths(section_lines)))
    return cut


def patch_lines(data: bytes) -> list[bytes]:
    """``data``'s lines, each with its ``\n``: lines end at a newline only, as git reads a patch (a carriage
    return is part of a line, not the end of one)."""
    parts = data.split(b"\n")
    lines = [part + b"\n" for part in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def section_paths(lines: list[bytes]) -> tuple[str, ...]:
    """The paths a section names, the new one first, each once; () when it names none this module can read."""
    new = old = None
    header_new = header_old = None
    for index, raw in enumerate(lines):
        line = raw.rstrip(b"\n")
        if index == 0:
            header_old, header_new = _diff_git_names(line[len(DIFF_GIT):])
            continue
        if line.startswith(_HEADER_ENDS):
            break
        for prefix, is_new in ((b"rename to ", True), (b"copy to ", True), (b"rename from ", False),
                               (b"copy from ", False)):
            if line.startswith(prefix):
                name = _name(line[len(prefix):])
                new, old = (name or new, old) if is_new else (new, name or old)
        if line.startswith(b"+++ ") and new is None:
            new = _label(line[4:], b"b/")
        elif line.startswith(b"--- ") and old is None:
            old = _label(line[4:], b"a/")
    found = [new or header_new, old or header_old]
    return tuple(dict.fromkeys(_decoded(name) for name in found if name))


def unquote_c(text: bytes) -> bytes | None:
    """A C-quoted name as git writes one (``"a/na\\303\\257ve"``) without its quotes and escapes; None when
    ``text`` is not exactly one such quoted name."""
    if len(text) < 2 or text[:1] != b'"' or text[-1:] != b'"':
        return None
    name, end = _quoted_prefix(text)
    return name if end == len(text) else None


def _quoted_prefix(text: bytes) -> tuple[bytes | None, int]:
    """The quoted name at the start of ``text`` and the index just past its closing quote ((None, 0) if none)."""
    out = bytearray()
    index = 1
    while index < len(text):
        byte = text[index]
        if byte == 0x22:
            return bytes(out), index + 1
        if byte != 0x5C:
            out.append(byte)
            index += 1
            continue
        escape = text[index + 1:index + 2]
        if escape and escape[0] in _NAMED_ESCAPES:
            out.append(_NAMED_ESCAPES[escape[0]])
            index += 2
        elif len(text) >= index + 4 and all(0x30 <= b <= 0x37 for b in text[index + 1:index + 4]):
            value = int(text[index + 1:index + 4], 8)
            if value > 0xFF:
                return None, 0
            out.append(value)
            index += 4
        else:
            return None, 0
    return None, 0


def _name(text: bytes) -> bytes | None:
    """A name as git writes it after ``rename to`` and the like: C-quoted, or the rest of the line."""
    if text.startswith(b'"'):
        return unquote_c(text)
    return text or None


def _label(text: bytes, prefix: bytes) -> bytes | None:
    """The path of a ``---``/``+++`` label (``a/path``, ``"b/qu\\"oted"``, ``/dev/null``), without its prefix; a
    plain name ends at a tab (git adds one after a name with a space)."""
    if text.startswith(b'"'):
        name, end = _quoted_prefix(text)
        if name is None or text[end:].strip(b"\t") != b"":
            return None
    else:
        name = text.split(b"\t", 1)[0]
    if name == b"/dev/null" or not name.startswith(prefix):
        return None
    return name[len(prefix):] or None


def _diff_git_names(rest: bytes) -> tuple[bytes | None, bytes | None]:
    """(old, new) from ``a/OLD b/NEW`` of a ``diff --git`` line, where that can be read: either name quoted, or
    both plain and the same (a plain name may hold spaces, so two different plain names are ambiguous)."""
    if rest.startswith(b'"'):
        old, end = _quoted_prefix(rest)
        if old is None or rest[end:end + 1] != b" ":
            return None, None
        new = _name(rest[end + 1:])
    elif b' "' in rest and rest.endswith(b'"'):
        at = rest.index(b' "')
        old, new = rest[:at], unquote_c(rest[at + 1:])
    else:
        if (len(rest) - 1) % 2:
            return None, None
        half = (len(rest) - 1) // 2
        old, new = rest[:half], rest[half + 1:]
        if rest[half:half + 1] != b" " or old[2:] != new[2:]:
            return None, None
    return _strip(old, b"a/"), _strip(new, b"b/")


def _strip(name: bytes | None, prefix: bytes) -> bytes | None:
    return name[len(prefix):] or None if name is not None and name.startswith(prefix) else None


def _decoded(name: bytes) -> str:
    """A path as the daemon's report spells it: UTF-8 text (a name that is not UTF-8 keeps its bytes escaped, and
    so matches no file of the report, which refuses such names)."""
    return name.decode("utf-8", "surrogateescape")
