"""A patch checked without a box: the strict parser, git's own reading, and the sensitive-path rule, per file.

``check_patch`` is what ``tkbox patch check`` runs (and what a dry run can reuse): it never raises for a bad patch;
the result says, for the whole patch, ``accepted``, ``needs_allow_sensitive`` or ``refused``, and per file whether
it may be applied and why not. A refusal is about the whole patch (the parser stops at the first problem, and no
part of a patch it refuses may be applied); it names the section it was found in.

``sensitive`` is ``tkbox_daemon.patch.sensitive.sensitive_reason`` in production (a path, as text, to a short
reason such as "CI workflow", or None), asked about every path a file operation reads or writes: a rename's or
copy's source as well as its destination.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from . import gitread
from .gitparse import parse_patch
from .gitsection import BaseLookup
from .operations import FileOperation, PatchRefused

ACCEPTED = "accepted"
NEEDS_ALLOW_SENSITIVE = "needs_allow_sensitive"
REFUSED = "refused"


@dataclass(frozen=True, slots=True)
class FileCheck:
    """One file of an accepted patch: ``sensitive`` is the reason a path of it is sensitive, or None;
    ``allowed`` says whether it may be applied as things stand (not sensitive, or ``--allow-sensitive`` given)."""

    operation: FileOperation
    sensitive: str | None
    allowed: bool


@dataclass(frozen=True, slots=True)
class PatchCheck:
    """The outcome for a whole patch: ``files`` (empty when refused), the ``refusal`` if any, the parser's notes."""

    files: tuple[FileCheck, ...]
    refusal: PatchRefused | None
    notes: tuple[str, ...]

    @property
    def verdict(self) -> str:
        if self.refusal is not None:
            return REFUSED
        return ACCEPTED if all(file.allowed for file in self.files) else NEEDS_ALLOW_SENSITIVE


def sensitive_reason_of(operation: FileOperation, sensitive: Callable[[str], str | None]) -> str | None:
    """The first sensitive reason among the paths the operation touches (they are valid UTF-8 once parsed)."""
    for path in operation.paths:
        reason = sensitive(path.decode("utf-8"))
        if reason:
            return reason
    return None


def check_patch(data: bytes, *, sensitive: Callable[[str], str | None], allow_sensitive: bool = False,
                base: BaseLookup | None = None, allow_mail_text: bool = False, cross_check: bool = True) -> PatchCheck:
    """Parse ``data`` strictly, have git read it (``cross_check``), and mark each file sensitive or not.

    Raises only ``gitread.GitUnavailable`` (git could not be run: nothing was checked).
    """
    try:
        parsed = parse_patch(data, base=base, allow_mail_text=allow_mail_text)
        if cross_check:
            gitread.cross_check(data, parsed)
    except PatchRefused as refusal:
        return PatchCheck(files=(), refusal=refusal, notes=())
    files = []
    for operation in parsed.operations:
        reason = sensitive_reason_of(operation, sensitive)
        files.append(FileCheck(operation, reason, allowed=reason is None or allow_sensitive))
    return PatchCheck(files=tuple(files), refusal=None, notes=parsed.notes)
