"""``hunks``: a pre-image becomes its post-image only where the patch fits it exactly, byte for byte."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.patch_trees import entry, guest_patch
from tkbox_daemon.patch import hunks
from tkbox_daemon.patch.gitparse import parse_patch
from tkbox_daemon.patch.hunks import HunkMismatch, apply_to_tree, post_image
from tkbox_daemon.patch.operations import MODE_EXEC, MODE_FILE, MODE_LINK


def one_op(old: bytes, new: bytes):
    (op,) = parse_patch(guest_patch({b"f": entry(old)}, {b"f": entry(new)})).operations
    return op


_LINES = st.lists(st.sampled_from([b"a\n", b"b\n", b"c\r\n", b"d", b"\n", b"\r", b"e\r"]), max_size=30).map(b"".join)


@given(_LINES, _LINES)
def test_text_hunks_turn_the_pre_image_into_the_post_image_byte_for_byte(old, new):
    patch = guest_patch({b"f": entry(old)}, {b"f": entry(new)})
    operations = parse_patch(patch).operations
    assert apply_to_tree(operations, {b"f": entry(old)}) == {b"f": entry(new)}


def test_context_must_match_at_the_stated_line_not_elsewhere():
    op = one_op(b"1\n2\n3\n4\n5\n6\n7\n8\n", b"1\n2\n3\n4\nFIVE\n6\n7\n8\n")
    assert post_image(op, b"1\n2\n3\n4\n5\n6\n7\n8\n") == b"1\n2\n3\n4\nFIVE\n6\n7\n8\n"
    unchecked = dataclasses.replace(op, old_oid=None, new_oid=None)  # only the positions decide here
    shifted = b"0\n1\n2\n3\n4\n5\n6\n7\n8\n"  # git would apply it one line lower; the host does not
    with pytest.raises(HunkMismatch, match="line 2 of the pre-image"):
        post_image(unchecked, shifted)


def test_a_pre_image_that_is_not_the_named_blob_is_refused_even_when_the_hunk_fits():
    op = one_op(b"a\nb\nc\nd\ne\nf\ng\nh\n", b"a\nb\nc\nd\nE\nf\ng\nh\n")
    with pytest.raises(HunkMismatch, match="is not the blob"):
        post_image(op, b"a\nb\nc\nd\ne\nf\ng\nh\nextra line far below\n")


def test_crlf_and_a_missing_final_newline_are_kept():
    op = one_op(b"x\r\ny\r\nz", b"x\r\nY\r\nz")
    assert post_image(op, b"x\r\ny\r\nz") == b"x\r\nY\r\nz"
    with pytest.raises(HunkMismatch):
        post_image(op, b"x\ny\nz")


def test_additions_deletions_and_moves_need_the_right_pre_image():
    add = parse_patch(guest_patch({}, {b"n": entry("n\n")})).operations[0]
    assert post_image(add, None) == b"n\n"
    with pytest.raises(HunkMismatch, match="already there"):
        post_image(add, b"")
    delete = parse_patch(guest_patch({b"d": entry("d\n")}, {})).operations[0]
    assert post_image(delete, b"d\n") is None
    with pytest.raises(HunkMismatch):
        post_image(delete, b"d\nmore\n")


def test_a_tree_must_hold_the_patch_s_modes_and_kinds():
    patch = guest_patch({b"s": entry("a\n"), b"l": entry("t", MODE_LINK)},
                        {b"s": entry("b\n", MODE_EXEC), b"l": entry("u", MODE_LINK)})
    operations = parse_patch(patch).operations
    before = {b"s": entry("a\n"), b"l": entry("t", MODE_LINK), b"other": entry("o\n")}
    assert apply_to_tree(operations, before) == {b"s": entry("b\n", MODE_EXEC), b"l": entry("u", MODE_LINK),
                                                 b"other": entry("o\n")}
    with pytest.raises(HunkMismatch, match="mode"):
        apply_to_tree(operations, {**before, b"s": entry("a\n", MODE_EXEC)})
    with pytest.raises(HunkMismatch, match="symlink"):
        apply_to_tree(operations, {**before, b"l": entry("t", MODE_FILE)})
    with pytest.raises(HunkMismatch, match="not there"):
        apply_to_tree(operations, {b"l": entry("t", MODE_LINK)})


def test_a_rename_keeps_the_source_s_mode_when_the_patch_states_none():
    operations = parse_patch(b"diff --git a/a b/b\nsimilarity index 100%\nrename from a\nrename to b\n").operations
    assert apply_to_tree(operations, {b"a": entry("x\n", MODE_EXEC)}) == {b"b": entry("x\n", MODE_EXEC)}
    with pytest.raises(HunkMismatch, match="already there"):
        apply_to_tree(operations, {b"a": entry("x\n"), b"b": entry("y\n")})


def test_split_lines_is_gits():
    assert hunks.split_lines(b"a\r\nb\rc\n\nd") == [b"a\r\n", b"b\rc\n", b"\n", b"d"]


def test_a_context_line_with_a_carriage_return_is_left_out_of_the_hunk_header():
    old, new = b"a\na\na\na\ne\ra\na\ne\ra\na\n", b"a\na\na\na\ne\ra\na\ne\ra\na\na\n"  # found by Hypothesis
    patch = guest_patch({b"f": entry(old)}, {b"f": entry(new)})
    assert all(b"\r" not in line for line in patch.split(b"\n") if line.startswith(b"@@"))
    assert apply_to_tree(parse_patch(patch).operations, {b"f": entry(old)}) == {b"f": entry(new)}
