"""The strict patch parser's reading, field by field, and its bounds (the corpus covers the refusals one by one)."""

from __future__ import annotations

import dataclasses

import pytest

from tests.patch_trees import entry, guest_patch
from tkbox_daemon import limits
from tkbox_daemon.patch import gitparse
from tkbox_daemon.patch.gitparse import parse_patch
from tkbox_daemon.patch.operations import MODE_EXEC, MODE_FILE, MODE_LINK, Action, PatchRefused


def refused(data: bytes, **options) -> PatchRefused:
    with pytest.raises(PatchRefused) as caught:
        parse_patch(data, **options)
    return caught.value


def test_a_modification_reads_as_hunks_of_exact_lines():
    patch = guest_patch({b"f": entry("a\r\nb\nc")}, {b"f": entry("a\r\nB\nc")})
    (op,) = parse_patch(patch).operations
    assert (op.action, op.old_path, op.new_path, op.old_mode, op.new_mode) == (Action.MODIFY, b"f", b"f", MODE_FILE,
                                                                             MODE_FILE)
    assert len(op.old_oid) == 40 and len(op.new_oid) == 40 and not op.abbreviated_oids
    (hunk,) = op.hunks
    assert hunk.lines == ((" ", b"a\r\n"), ("-", b"b\n"), ("+", b"B\n"), (" ", b"c"))
    assert (op.added, op.removed, op.old_size, op.new_size) == (1, 1, None, None)


def test_additions_deletions_and_symlinks_carry_their_sizes_and_targets():
    patch = guest_patch({b"gone": entry("12345"), b"l": entry("x", MODE_LINK)},
                        {b"new": entry("abc\n", MODE_EXEC), b"l": entry("sub/y", MODE_LINK)})
    ops = {op.path: op for op in parse_patch(patch).operations}
    assert (ops[b"gone"].action, ops[b"gone"].old_size, ops[b"gone"].new_path) == (Action.DELETE, 5, None)
    assert (ops[b"new"].action, ops[b"new"].new_size, ops[b"new"].new_mode) == (Action.ADD, 4, MODE_EXEC)
    assert (ops[b"l"].action, ops[b"l"].symlink_target, ops[b"l"].old_size) == (Action.SYMLINK_MODIFY, b"sub/y", 1)


def test_a_type_change_is_the_one_path_two_sections_may_share():
    patch = guest_patch({b"t": entry("text\n")}, {b"t": entry("target", MODE_LINK)})
    assert [op.action for op in parse_patch(patch).operations] == [Action.DELETE, Action.SYMLINK_ADD]
    two_files = guest_patch({b"t": entry("a\n")}, {}) + guest_patch({}, {b"t": entry("b\n")})
    assert refused(two_files).rule == "path-twice"  # a deletion and an addition of the same kind is not one


def test_a_bare_empty_line_in_a_hunk_is_an_empty_context_line_as_git_reads_it():
    patch = guest_patch({b"f": entry("a\n\nb\n")}, {b"f": entry("a\n\nc\n")}).replace(b"\n \n", b"\n\n")
    (op,) = parse_patch(patch).operations
    assert (" ", b"\n") in op.hunks[0].lines


def test_a_refusal_names_line_path_and_rule():
    error = refused(b"diff --git a/x b/x\nnew file mode 104755\n")
    assert (error.rule, error.line, error.path) == ("mode-setuid", 2, b"x")
    assert str(error) == "line 2, x: the mode 104755 has the setuid bit [mode-setuid]"


def test_a_renames_source_must_be_in_the_base_when_there_is_one():
    patch = b"diff --git a/a b/b\nsimilarity index 100%\nrename from a\nrename to b\n"
    assert parse_patch(patch, base=lambda path: path == b"a").operations[0].action == Action.RENAME
    assert "only checked to be a path inside the tree" in parse_patch(patch).notes[0]
    assert refused(patch, base=lambda path: MODE_LINK if path == b"a" else None).rule == "symlink-rename"
    assert refused(patch, base=lambda path: None).rule == "source-not-in-base"


def test_mail_text_is_only_read_when_asked_and_never_after_the_signature():
    body = guest_patch({b"x": entry("a\n")}, {b"x": entry("b\n")})
    mail = b"Subject: [PATCH] x\n\n---\n x | 2 +-\n\n" + body + b"-- \n2.39.5\n\n"
    assert len(parse_patch(mail, allow_mail_text=True).operations) == 1
    assert refused(mail).rule == "text-outside-section"
    assert refused(mail + b"more\n", allow_mail_text=True).rule == "text-outside-section"
    assert refused(b"Subject: x\n\n", allow_mail_text=True).rule == "no-sections"


def test_an_empty_patch_has_no_operations():
    assert parse_patch(b"").operations == ()


def _small(monkeypatch: pytest.MonkeyPatch, name: str, value: int) -> None:
    monkeypatch.setattr(limits, name, dataclasses.replace(getattr(limits, name), default=value))


@pytest.mark.parametrize(("name", "value", "rule"), [("PATCH_SECTIONS", 2, "limit:patch_sections"),
                                                      ("PATCH_HUNKS", 2, "limit:patch_hunks"),
                                                      ("PATCH_HUNK_LINES", 1, "limit:patch_hunk_lines"),
                                                      ("PATCH_SIZE", 100, "limit:patch_size"),
                                                      ("PATCH_LITERALS_TOTAL", 5, "limit:patch_literals_total")])
def test_every_bound_refuses_past_its_limit(monkeypatch, name, value, rule):
    patch = guest_patch({}, {b"a": entry("1\n2\n"), b"b": entry("1\n"), b"c": entry("1\n"), b"d": entry(b"\0" * 8)})
    parse_patch(patch)
    _small(monkeypatch, name, value)
    error = refused(patch)
    assert error.rule == rule and name.lower() in str(error)


def test_a_hunk_header_claiming_huge_counts_is_refused_before_reading_on():
    error = refused(b"diff --git a/x b/x\nindex 1111111..2222222 100644\n--- a/x\n+++ b/x\n@@ -1,99999999 +1 @@\n")
    assert error.rule == "limit:patch_hunk_lines"


def test_the_mode_table_is_the_one_the_guest_writes():
    assert gitparse.ALLOWED_MODES == (MODE_FILE, MODE_EXEC, MODE_LINK)
