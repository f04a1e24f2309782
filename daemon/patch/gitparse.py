"""A strict, sans-IO parser of git-format patches: bytes in, ``ParsedPatch`` out, or ``PatchRefused``.

It reads exactly what ``git diff --binary --full-index`` writes (and so what the box's ``tkbox_guest.gitpatch``
writes), and refuses everything else, naming the line and the rule. Each section is, in this order:

    diff --git a/OLD b/NEW
    [old mode M / new mode M | new file mode M | deleted file mode M]
    [similarity index N% / rename from OLD / rename to NEW (or copy from / copy to)]
    [index OLD_ID..NEW_ID[ M]]
    [--- a/OLD / +++ b/NEW / hunks | GIT binary patch / literal / [literal]]

Refused, among others (``gitsection`` and ``pathrules`` hold the rest): a ``---``/``+++`` ``/dev/null`` without its
``new file mode``/``deleted file mode`` line (git would read a file named ``dev/null``: finding F1); a carriage
return in any header line; a header line out of this order or unknown to it (``dissimilarity index``, ``Binary
files … differ``, a second ``index``); a hunk whose lines do not match its counts, or any line after a hunk that
is neither a new hunk nor a new section (git ignores such lines: a naive reader would apply them); a traditional
``---``/``+++`` patch anywhere; ``delta`` binary hunks; modes other than 100644, 100755 and 120000 (setuid,
setgid and sticky bits and gitlinks named as such); one path in two sections (but a type change, written as a
deletion then an addition); a path that is both a file and a directory's parent after the patch.

``allow_mail_text`` (for a user's patch file, as ``git format-patch`` writes it) also accepts text before the
first section, as long as no line of it could be read as part of a patch, and the ``-- `` signature at the end.
Every size is bounded (``limits.PATCH_*``); the whole input is in memory, as bytes, and so is every literal.
"""

from __future__ import annotations

import re

from .. import limits
from . import gitbinary
from .gitcheck import check_across
from .gitnames import header_names, label_name, plain_name
from .gitsection import BaseLookup, RawSection, build_operation
from .operations import (
    MODE_EXEC,
    MODE_FILE,
    MODE_LINK,
    Action,
    BinaryLiteral,
    FileOperation,
    Hunk,
    ParsedPatch,
    PatchRefused,
)

NO_NEWLINE = b"\\ No newline at end of file\n"
DIFF_GIT = b"diff --git "
_HUNK = re.compile(rb"@@ -(0|[1-9][0-9]{0,9})(?:,(0|[1-9][0-9]{0,9}))? \+(0|[1-9][0-9]{0,9})(?:,(0|[1-9][0-9]{0,9}))?"
                   rb" @@(?: [^\r\n]*)?\n")
_MODE = re.compile(rb"[0-7]{6}")
_OID = re.compile(rb"([0-9a-f]{7,40})\.\.([0-9a-f]{7,40})(?: ([0-7]{6}))?")
_SIMILARITY = re.compile(rb"(100|[1-9]?[0-9])%")
_LITERAL = re.compile(rb"literal (0|[1-9][0-9]{0,11})\n")
# Lines of mail text that git could read as part of a patch, or that would make it stop reading.
_PATCH_LIKE = (b"--- ", b"+++ ", b"@@ ", b"diff ", b"GIT binary patch", b"Binary files ", b"literal ", b"delta ",
               b"Index: ", b"*** ")
_LATER_HEADERS = (b"old mode ", b"new mode ", b"new file mode ", b"deleted file mode ", b"similarity index ",
                  b"dissimilarity index ", b"rename ", b"copy ", b"index ", b"--- ", b"+++ ", b"GIT binary patch",
                  b"Binary files ")
ALLOWED_MODES = (MODE_FILE, MODE_EXEC, MODE_LINK)


class _Lines:
    """The patch as lines (each with its ``\\n``; the parser checks first that the data ends with one), with the
    number of the last line taken."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0
        self.number = 0
        self._next: bytes | None = None

    def peek(self) -> bytes | None:
        if self._next is None and self.pos < len(self.data):
            self._next = self.data[self.pos:self.data.index(b"\n", self.pos) + 1]
        return self._next

    def take(self) -> bytes | None:
        line = self.peek()
        if line is not None:
            self.pos += len(line)
            self.number += 1
            self._next = None
        return line


class _Parser:
    def __init__(self, data: bytes, base: BaseLookup | None, allow_mail_text: bool) -> None:
        self.lines = _Lines(data)
        self.base = base
        self.allow_mail_text = allow_mail_text
        self.hunk_count = 0
        self.literal_bytes = 0
        self.path: bytes | None = None  # the section's path once known, for messages

    def refuse(self, rule: str, detail: str, line: int | None = None) -> PatchRefused:
        return PatchRefused(rule, detail, line=self.lines.number if line is None else line, path=self.path)

    def refuse_next(self, rule: str, detail: str) -> PatchRefused:
        """A refusal about the line after the last one taken (one that should have come and did not)."""
        return self.refuse(rule, detail, self.lines.number + 1)

    def header(self, prefix: bytes = b"") -> bytes:
        """Take the next line as a header line: no carriage return in it; returns what follows ``prefix``."""
        line = self.lines.take()
        assert line is not None and line.startswith(prefix)
        if b"\r" in line:
            raise self.refuse("cr-in-header", "a header line holds a carriage return")
        return line[len(prefix):-1]

    def next_is(self, *prefixes: bytes) -> bool:
        line = self.lines.peek()
        return line is not None and line.startswith(prefixes)

    def mode(self, text: bytes) -> int:
        if not _MODE.fullmatch(text):
            raise self.refuse("bad-mode", "a mode must be six octal digits")
        mode = int(text, 8)
        if mode == 0o160000:
            raise self.refuse("gitlink", "a gitlink (submodule, mode 160000) is refused")
        for bit, name in ((0o4000, "setuid"), (0o2000, "setgid"), (0o1000, "sticky")):
            if mode & bit:
                raise self.refuse(f"mode-{name}", f"the mode {text.decode()} has the {name} bit")
        if mode not in ALLOWED_MODES:
            raise self.refuse("bad-mode", f"the mode {text.decode()} is none of 100644, 100755 and 120000")
        return mode

    # -- the patch ------------------------------------------------------------------------------------------------

    def run(self) -> ParsedPatch:
        data = self.lines.data
        if len(data) > limits.PATCH_SIZE.default:
            raise PatchRefused(f"limit:{limits.PATCH_SIZE.name}",
                               limits.PATCH_SIZE.refusal(f"the patch is {len(data)} bytes"))
        if data and not data.endswith(b"\n"):
            raise PatchRefused("no-final-newline", "the patch's last line has no newline",
                               line=data.count(b"\n") + 1)
        self.mail_text()
        operations = []
        while self.lines.peek() is not None:
            if len(operations) >= limits.PATCH_SECTIONS.default:
                raise self.refuse(f"limit:{limits.PATCH_SECTIONS.name}", limits.PATCH_SECTIONS.refusal())
            operations.append(self.section())
            if self.allow_mail_text and self.lines.peek() == b"-- \n":
                self.signature()
        if data and not operations:
            raise PatchRefused("no-sections", "the file holds no diff --git section")
        check_across(operations)
        notes = []
        if any(operation.abbreviated_oids for operation in operations):
            notes.append("abbreviated blob ids: contents are checked against them as prefixes only")
        if self.base is None and any(op.action in (Action.RENAME, Action.COPY) for op in operations):
            notes.append("renames or copies read a source the patch does not show; with no base it is only "
                         "checked to be a path inside the tree")
        return ParsedPatch(operations=tuple(operations), size=len(data), notes=tuple(notes))

    def mail_text(self) -> None:
        """Text before the first section: none, or (``allow_mail_text``) lines git cannot read as a patch."""
        while (line := self.lines.peek()) is not None and not line.startswith(DIFF_GIT):
            self.lines.take()
            if line.startswith(_PATCH_LIKE):
                raise self.refuse("traditional-patch", "a line outside any diff --git section that git could read as "
                                  "part of a patch (---, +++, @@, another diff or a binary hunk)")
            if not self.allow_mail_text:
                raise self.refuse("text-outside-section", "the patch must start with a diff --git line")
            if b"\r" in line:
                raise self.refuse("cr-in-header", "a line of the mail text holds a carriage return")

    def signature(self) -> None:
        """``git format-patch``'s ending: ``-- ``, a version line, then empty lines only."""
        self.lines.take()
        version = self.lines.take()
        if version is None or version.startswith((b" ", b"+", b"-", b"@", b"\\", b"diff ")) or b"\r" in version:
            raise self.refuse("text-outside-section", "the '-- ' signature must be followed by one version line")
        while (line := self.lines.take()) is not None:
            if line != b"\n":
                raise self.refuse("text-outside-section", "text after the patch's signature")

    # -- one section ----------------------------------------------------------------------------------------------

    def section(self) -> FileOperation:
        self.path = None
        start = self.lines.number + 1
        rest = self.header(DIFF_GIT)
        try:
            raw = RawSection(line=start, header_names=header_names(rest))
        except ValueError as exc:
            raise self.refuse("bad-diff-git-line", str(exc)) from None
        self.path = raw.header_names[0][1]
        self.mode_lines(raw)
        self.move_lines(raw)
        if self.next_is(b"index "):
            self.index_line(raw)
        if self.next_is(b"--- ", b"+++ "):
            self.text_body(raw)
        elif self.next_is(b"GIT binary patch"):
            self.binary_body(raw)
        self.section_end(raw)
        return build_operation(raw, self.base)

    def mode_lines(self, raw: RawSection) -> None:
        if self.next_is(b"old mode "):
            raw.old_mode = self.mode(self.header(b"old mode "))
            if not self.next_is(b"new mode "):
                raise self.refuse_next("header-order", "an old mode line must be followed by its new mode line")
            raw.new_mode = self.mode(self.header(b"new mode "))
            raw.mode_lines = True
        elif self.next_is(b"new file mode "):
            raw.kind, raw.new_mode = "add", self.mode(self.header(b"new file mode "))
        elif self.next_is(b"deleted file mode "):
            raw.kind, raw.old_mode = "delete", self.mode(self.header(b"deleted file mode "))

    def move_lines(self, raw: RawSection) -> None:
        if not self.next_is(b"similarity index "):
            return
        found = _SIMILARITY.fullmatch(self.header(b"similarity index "))
        if not found:
            raise self.refuse("bad-similarity", "a similarity index must be a percentage from 0 to 100")
        raw.similarity = int(found.group(1))
        for move in ("rename", "copy"):
            if self.next_is(f"{move} from ".encode()):
                raw.move = move
                raw.move_from = self.name_line(f"{move} from ".encode())
                if not self.next_is(f"{move} to ".encode()):
                    raise self.refuse_next("header-order", f"a {move} from line must be followed by its {move} to line")
                raw.move_to = self.name_line(f"{move} to ".encode())
                return
        raise self.refuse_next("header-order", "a similarity index must be followed by rename or copy lines")

    def name_line(self, prefix: bytes) -> bytes:
        try:
            return plain_name(self.header(prefix))
        except ValueError as exc:
            raise self.refuse("bad-name", str(exc)) from None

    def index_line(self, raw: RawSection) -> None:
        found = _OID.fullmatch(self.header(b"index "))
        if not found:
            raise self.refuse("bad-index-line", "an index line must be OLD..NEW (7 to 40 lowercase hex digits "
                              "each) and an optional mode")
        raw.index = (found.group(1).decode(), found.group(2).decode())
        if found.group(3) is not None:
            raw.index_mode = self.mode(found.group(3))

    def label(self, prefix: bytes, name_prefix: bytes, raw: RawSection) -> bytes | None:
        if not self.next_is(prefix):
            raise self.refuse_next("header-order", "a --- line must be followed by its +++ line")
        text = self.header(prefix)
        if text == b"/dev/null" and raw.kind != ("add" if prefix == b"--- " else "delete"):
            mode_line = "new file mode" if prefix == b"--- " else "deleted file mode"
            raise self.refuse("dev-null-without-mode", f"{prefix.decode()}/dev/null without a {mode_line} line: git "
                              "would read it as a file named dev/null")
        try:
            return label_name(text, name_prefix)
        except ValueError as exc:
            raise self.refuse("bad-name", str(exc)) from None

    def text_body(self, raw: RawSection) -> None:
        raw.minus = self.label(b"--- ", b"a/", raw)
        raw.plus = self.label(b"+++ ", b"b/", raw)
        raw.labels = True
        if not self.next_is(b"@@ "):
            raise self.refuse_next("hunk-missing", "---/+++ lines must be followed by a hunk")
        while self.next_is(b"@@ "):
            raw.hunks.append(self.hunk())

    def hunk(self) -> Hunk:
        self.hunk_count += 1
        if self.hunk_count > limits.PATCH_HUNKS.default:
            raise self.refuse_next(f"limit:{limits.PATCH_HUNKS.name}", limits.PATCH_HUNKS.refusal())
        start = self.lines.number + 1
        line = self.lines.take()
        assert line is not None
        if b"\r" in line:
            raise self.refuse("cr-in-header", "a hunk header holds a carriage return")
        found = _HUNK.fullmatch(line)
        if not found:
            raise self.refuse("bad-hunk-header", "a hunk header must be '@@ -START[,COUNT] +START[,COUNT] @@'")
        old_start, new_start = int(found.group(1)), int(found.group(3))
        old_count = 1 if found.group(2) is None else int(found.group(2))
        new_count = 1 if found.group(4) is None else int(found.group(4))
        if old_count + new_count > limits.PATCH_HUNK_LINES.default:
            raise self.refuse(f"limit:{limits.PATCH_HUNK_LINES.name}", limits.PATCH_HUNK_LINES.refusal())
        lines = self.hunk_lines(old_count, new_count)
        if not any(kind != " " for kind, _ in lines):
            raise self.refuse("hunk-without-change", "a hunk holds no added or removed line", start)
        return Hunk(old_start, old_count, new_start, new_count, tuple(lines), start)

    def hunk_lines(self, old_left: int, new_left: int) -> list[tuple[str, bytes]]:
        lines: list[tuple[str, bytes]] = []
        old_ended = new_ended = False  # a side's last line came (marked with no newline)
        while old_left or new_left:
            line = self.lines.take()
            if line is None:
                raise self.refuse("hunk-count-mismatch", "the patch ends inside a hunk")
            kind = " " if line == b"\n" else chr(line[0])
            needs_old, needs_new = kind in " -", kind in " +"
            if kind not in " -+" or (needs_old and not old_left) or (needs_new and not new_left):
                raise self.refuse("hunk-count-mismatch", "a hunk's lines do not match the counts of its header")
            if (needs_old and old_ended) or (needs_new and new_ended):
                raise self.refuse("no-newline-not-last", "a line follows one marked '\\ No newline at end of file'")
            content = b"\n" if line == b"\n" else line[1:]
            if self.next_is(b"\\"):
                if self.lines.take() != NO_NEWLINE or line == b"\n":
                    raise self.refuse("bad-marker-line", "a '\\' line must be exactly '\\ No newline at end of "
                                      "file', after a line with content")
                content = content[:-1]
                old_ended, new_ended = old_ended or needs_old, new_ended or needs_new
            lines.append((kind, content))
            old_left -= needs_old
            new_left -= needs_new
        return lines

    def binary_body(self, raw: RawSection) -> None:
        if self.header() != b"GIT binary patch":
            raise self.refuse("bad-binary", "the binary patch line must be exactly 'GIT binary patch'")
        data = self.literal()
        old_data = self.literal() if self.next_is(b"literal ", b"delta ") else None
        raw.binary = BinaryLiteral(data=data, old_data=old_data)

    def literal(self) -> bytes:
        if self.next_is(b"delta "):
            self.lines.take()
            raise self.refuse("binary-delta", "binary delta hunks are not supported; write the patch with literals "
                              "(the box's patches always are)")
        line = self.lines.take()
        found = _LITERAL.fullmatch(line or b"")
        if not found:
            raise self.refuse("bad-binary", "a binary hunk must start 'literal SIZE'")
        size = int(found.group(1))
        self.literal_bytes += size
        if size > limits.PATCH_LITERAL_SIZE.default:
            raise self.refuse(f"limit:{limits.PATCH_LITERAL_SIZE.name}",
                              limits.PATCH_LITERAL_SIZE.refusal(f"a literal of {size} bytes"))
        if self.literal_bytes > limits.PATCH_LITERALS_TOTAL.default:
            raise self.refuse(f"limit:{limits.PATCH_LITERALS_TOTAL.name}", limits.PATCH_LITERALS_TOTAL.refusal())
        encoded = []
        while (line := self.lines.take()) != b"\n":
            if line is None:
                raise self.refuse("bad-binary", "the patch ends inside a binary literal")
            try:
                gitbinary.line_length(line)
            except ValueError as exc:
                raise self.refuse("bad-binary", str(exc)) from None
            encoded.append(line)
        try:
            return gitbinary.inflate(encoded, size)
        except ValueError as exc:
            raise self.refuse("bad-binary", str(exc)) from None

    def section_end(self, raw: RawSection) -> None:
        line = self.lines.peek()
        if line is None or line.startswith(DIFF_GIT) or (self.allow_mail_text and line == b"-- \n"):
            if not raw.hunks and raw.binary is None and raw.kind == "change" and not raw.mode_lines \
                    and raw.move is None:
                raise self.refuse("empty-section", "the section changes nothing", raw.line)
            return
        self.lines.take()
        if line.startswith((b"--- ", b"+++ ")) and (raw.hunks or raw.binary is not None):
            raise self.refuse("traditional-patch", "a ---/+++ line after a section's content: git would read a "
                              "traditional patch here, outside any diff --git section")
        if raw.hunks:
            raise self.refuse("line-past-hunk", "a line after the hunk's counts that is neither a new hunk nor a new "
                              "section (git would ignore it; its counts must cover every line)")
        if raw.binary is not None:
            raise self.refuse("line-past-hunk", "a line after the binary patch that starts no new section")
        if line.startswith(_LATER_HEADERS):
            raise self.refuse("header-order", "a header line that is out of order, repeated or not supported "
                              "(dissimilarity index, Binary files … differ)")
        raise self.refuse("unknown-header-line", "a line that is not a header line git diff writes")


def parse_patch(data: bytes, *, base: BaseLookup | None = None, allow_mail_text: bool = False) -> ParsedPatch:
    """Read ``data`` as a git-format patch, strictly; raises ``PatchRefused``.

    ``base``: for a patch made against a known tree, the mode of a path in it (or just True) when the path is
    there, None (or False) when it is not; every rename or copy source must be there, and must not be a symlink.
    Without it a source is only checked to be a valid path in the tree (``ParsedPatch.notes`` says so).
    ``allow_mail_text``: accept ``git format-patch``'s mail text before the first section and its signature.
    """
    return _Parser(data, base, allow_mail_text).run()
