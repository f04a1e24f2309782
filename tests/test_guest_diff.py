"""The workspace patch: git's notation byte for byte, and how each kind of overlay change is read."""

from __future__ import annotations

import base64
import os
import shutil
import stat
import subprocess
import zlib
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.git_worktree import apply_patch, git_env, tree
from tkbox_guest import diff, gitpatch

HAS_GIT = shutil.which("git") is not None
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (whiteouts, trusted xattrs, mounts)")
needs_git = pytest.mark.skipif(not HAS_GIT, reason="needs git")


# -- notation ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "quoted"), [
    (b"a/plain.txt", b"a/plain.txt"),
    (b"a/with space", b"a/with space"),
    (b'a/q"uote', b'"a/q\\"uote"'),
    (b"a/back\\slash", b'"a/back\\\\slash"'),
    ("a/tést".encode(), b'"a/t\\303\\251st"'),
    (b"a/tab\there", b'"a/tab\\there"'),
    (b"a/nl\nx", b'"a/nl\\nx"'),
    (b"a/bell\x07\x01\x7f", b'"a/bell\\a\\001\\177"'),
])
def test_names_are_quoted_like_git(name, quoted):
    assert gitpatch.quote_name(name) == quoted


def test_headers_put_a_tab_after_names_with_spaces():
    diff_line, minus, plus = gitpatch.file_header(b"x y", blank_label="a")
    assert diff_line == b"diff --git a/x y b/x y\n"
    assert minus == b"--- /dev/null\n" and plus == b"+++ b/x y\t\n"


def test_blob_ids_match_git():
    assert gitpatch.blob_oid(b"") == b"e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"
    assert gitpatch.blob_oid(b"hello\n") == b"ce013625030ba8dba906f756967f9e9ca394464a"
    assert gitpatch.blob_oid_stream(6, [b"hel", b"lo\n"]) == gitpatch.blob_oid(b"hello\n")


def _decode_literal(lines: list[bytes]) -> bytes:
    assert lines[0].startswith(b"literal ") and lines[-1] == b"\n"
    raw = bytearray()
    for line in lines[1:-1]:
        count = line[0] - 64 if line[0] <= ord("Z") else line[0] - 96 + 26
        raw += base64.b85decode(line[1:-1])[:count]
    data = zlib.decompress(bytes(raw))
    assert len(data) == int(lines[0].split()[1])
    return data


@given(st.binary(max_size=5000), st.integers(1, 700), st.sampled_from([52, 104, 52 * 1260]))
def test_binary_literals_decode_back_whatever_the_chunking(data, step, batch):
    with mock.patch.object(gitpatch, "LITERAL_BATCH", batch):
        pieces = list(gitpatch.binary_literal(len(data), [data[i:i + step] for i in range(0, len(data), step)]))
    lines = b"".join(pieces).splitlines(keepends=True)
    assert all(len(line) <= 67 for line in lines)
    assert _decode_literal(lines) == data
    assert b"".join(pieces) == b"".join(gitpatch.binary_literal(len(data), [data]))  # the same bytes however the data arrives


def test_empty_literal_is_gits():
    assert b"".join(gitpatch.binary_literal(0, [])) == b"literal 0\nHcmV?d00001\n\n"


def _apply_hunks(old: bytes, hunks: bytes) -> bytes:
    """A strict unified-diff applier: every context and removed line must match at the stated position."""
    a = gitpatch.split_lines(old)
    out: list[bytes] = []
    pos = 0
    lines = hunks.splitlines(keepends=True)
    i = 0
    while i < len(lines):
        header = lines[i]
        assert header.startswith(b"@@ -")
        old_range = header.split()[1][1:].split(b",")
        start = int(old_range[0])
        length = int(old_range[1]) if len(old_range) > 1 else 1
        begin = start - 1 if length else start
        assert begin >= pos
        out.extend(a[pos:begin])
        pos = begin
        i += 1
        while i < len(lines) and not lines[i].startswith(b"@@"):
            marker, text = lines[i][:1], lines[i][1:]
            if i + 1 < len(lines) and lines[i + 1] == gitpatch.NO_NEWLINE:
                text = text[:-1]
                i += 1
            if marker in (b" ", b"-"):
                assert a[pos] == text
                pos += 1
            if marker in (b" ", b"+"):
                out.append(text)
            i += 1
    out.extend(a[pos:])
    return b"".join(out)


_lines = st.lists(st.sampled_from([b"a\n", b"b\n", b"c\n", b"d", b"\n", b"e\r\n"]), max_size=60).map(b"".join)


@given(_lines, _lines)
def test_text_hunks_turn_old_into_new(old, new):
    hunks = b"".join(gitpatch.text_hunks(old, new))
    assert (hunks == b"") == (old == new)
    assert _apply_hunks(old, hunks) == new


def test_huge_middles_become_one_replacement():
    old = b"".join(b"%d\n" % i for i in range(30_000))
    new = b"".join(b"%d\n" % (i * 7) for i in range(30_000))
    with mock.patch.object(gitpatch, "MAX_MATCH_LINES", 100):
        hunks = b"".join(gitpatch.text_hunks(old, new))
    assert hunks.startswith(b"@@ -1,30000 +1,30000 @@\n")
    assert _apply_hunks(old, hunks) == new


# -- synthetic layers (no mount) --------------------------------------------------------------------------------


def _whiteout(path: Path) -> None:
    os.mknod(path, stat.S_IFCHR | 0o000, os.makedev(0, 0))


@pytest.fixture
def layers(tmp_path):
    lower, upper = tmp_path / "lower", tmp_path / "upper"
    lower.mkdir()
    upper.mkdir()
    return lower, upper


def test_unchanged_copy_ups_give_no_patch(layers):
    lower, upper = layers
    (lower / "f").write_text("same\n")
    (upper / "f").write_text("same\n")
    (lower / "rw").write_text("x\n")
    (lower / "rw").chmod(0o644)
    (upper / "rw").write_text("x\n")
    (upper / "rw").chmod(0o664)  # git records only the owner's execute bit
    (upper / "empty-dir").mkdir()
    assert diff.make_patch(upper, lower) == b""


def test_summaries_describe_each_section(layers):
    lower, upper = layers
    (lower / "m").write_text("a\n")
    (upper / "m").write_text("b\n")
    (lower / "x").write_text("x\n")
    (upper / "x").write_text("x\n")
    (upper / "x").chmod(0o755)
    (upper / "bin").write_bytes(b"\0\1")
    summaries: list[dict] = []
    b"".join(diff.iter_patch(upper, lower, summaries=summaries))
    assert summaries == [
        {"path": "bin", "change": "added", "binary": True, "old_mode": None, "new_mode": "100644"},
        {"path": "m", "change": "modified", "binary": False, "old_mode": "100644", "new_mode": "100644"},
        {"path": "x", "change": "mode", "binary": False, "old_mode": "100644", "new_mode": "100755"},
    ]


@needs_root
def test_whiteouts_delete_files_and_whole_directories(layers):
    lower, upper = layers
    (lower / "d" / "sub").mkdir(parents=True)
    (lower / "d" / "sub" / "f").write_text("f\n")
    (lower / "d" / "g").write_text("g\n")
    (lower / "keep").write_text("k\n")
    _whiteout(upper / "d")
    _whiteout(upper / "never-existed")
    patch = diff.make_patch(upper, lower)
    assert patch.count(b"deleted file mode") == 2 and b"keep" not in patch and b"never-existed" not in patch


@needs_root
@pytest.mark.parametrize("xattr", ["trusted.overlay.opaque", "user.overlay.opaque"])
def test_opaque_directories_hide_the_lower_entries_via_either_xattr(layers, xattr):
    lower, upper = layers
    (lower / "d" / "deep").mkdir(parents=True)
    (lower / "d" / "deep" / "x").write_text("x\n")
    (lower / "d" / "old").write_text("old\n")
    (lower / "d" / "same").write_text("same\n")
    (upper / "d" / "deep").mkdir(parents=True)  # not opaque itself: inherits its parent's opacity
    (upper / "d" / "same").write_text("same\n")
    os.setxattr(upper / "d", xattr, b"y")
    patch = diff.make_patch(upper, lower)
    assert b"a/d/old" in patch and b"a/d/deep/x" in patch and b"d/same" not in patch
    os.setxattr(upper / "d", xattr, b"x")  # "x" marks a directory holding xattr whiteouts, not an opaque one
    assert diff.make_patch(upper, lower) == b""


def test_the_merged_view_finds_opaque_directories_without_xattrs(layers, tmp_path):
    lower, upper = layers
    merged = tmp_path / "merged"
    (lower / "d").mkdir()
    (lower / "d" / "old").write_text("old\n")
    (lower / "d" / "kept").write_text("kept\n")
    (upper / "d").mkdir()
    (upper / "d" / "new").write_text("new\n")
    (merged / "d").mkdir(parents=True)  # what /workspace shows: "old" is gone, "kept" shows through
    (merged / "d" / "kept").write_text("kept\n")
    (merged / "d" / "new").write_text("new\n")
    patch = diff.make_patch(upper, lower, merged)
    assert b"deleted file mode 100644\n" in patch and b"a/d/old" in patch and b"kept" not in patch


def test_fifos_are_not_files(layers):
    lower, upper = layers
    (lower / "was-file").write_text("x\n")
    os.mkfifo(upper / "was-file")
    os.mkfifo(upper / "new-fifo")
    os.mkfifo(lower / "old-fifo")
    (upper / "old-fifo").write_text("now a file\n")
    patch = diff.make_patch(upper, lower)
    assert b"deleted file mode 100644" in patch and b"new-fifo" not in patch
    assert b"new file mode 100644" in patch and b"b/old-fifo" in patch


@needs_git
def test_big_files_are_streamed_as_binary_literals_that_git_applies(layers, tmp_path):
    lower, upper = layers
    (lower / "big.txt").write_bytes(b"line\n" * 5000)
    (upper / "big.txt").write_bytes(b"line\n" * 4000 + b"changed\n" * 1000)
    (upper / "big.txt").chmod(0o755)
    (upper / "new.txt").write_bytes(b"text\n" * 3000)
    with mock.patch.object(diff, "TEXT_LIMIT", 1000), mock.patch.object(diff, "READ_CHUNK", 777):
        patch = diff.make_patch(upper, lower)
    assert patch.count(b"GIT binary patch") == 2 and b"old mode 100644\nnew mode 100755\n" in patch
    expected = tree(lower) | tree(upper)
    apply_patch(lower, patch, tmp_path / "applied")
    assert tree(tmp_path / "applied") == expected


def test_a_file_that_changes_size_while_read_is_an_error(layers):
    lower, upper = layers
    (upper / "f").write_text("abc")
    side = diff.Side(gitpatch.MODE_FILE, os.fsencode(upper / "f"), 10)
    with pytest.raises(diff.DiffError, match="changed size"):
        diff._content(side)


# -- against git itself, on a real overlay ----------------------------------------------------------------------


@needs_root
@needs_git
def test_the_patch_is_byte_for_byte_what_git_diff_writes(tmp_path):
    lower, upper, work, merged = (tmp_path / n for n in ("lower", "upper", "work", "merged"))
    for d in (lower, upper, work, merged):
        d.mkdir()
    (lower / "d").mkdir()
    (lower / "e").mkdir()
    (lower / "sp ace").mkdir()
    (lower / "d" / "f").write_text("a\n")
    (lower / "e" / "g").write_text("b\n")
    (lower / "x").write_bytes(b"c\nd\ne\nf\ng\nh\ni\nj\nk\nl\nm\nn\no\np\n")
    (lower / "bin").write_bytes(b"a\0c")
    (lower / "lnk").symlink_to("target")
    (lower / "sp ace" / 'f"q').write_text("q\n")
    (lower / "modeonly").write_text("m\n")
    (lower / "tést").write_bytes(b"x")
    (lower / "tolink").write_text("1\n")
    (lower / "gone-bin").write_bytes(b"\0\0\1")
    opts = f"lowerdir={lower},upperdir={upper},workdir={work},redirect_dir=off,metacopy=off"
    subprocess.run(["mount", "-t", "overlay", "overlay", "-o", opts, str(merged)], check=True)
    try:
        script = (
            "set -e; rm -r d; mkdir d; echo new > d/n; rm e/g; printf 'c\\nd\\nE\\nf\\ng\\nh\\ni\\nj\\nk\\nl\\nm\\nn\\no\\nP' > x;"
            "printf 'a\\000d' > bin; ln -sfn other lnk; echo qq >> 'sp ace/f\"q'; chmod +x modeonly;"
            "printf y > tést; rm tolink; ln -s x tolink; : > empty; printf 'nb\\000' > newbin; rm gone-bin;"
            "mkdir -p nd/sub; echo deep > nd/sub/f"
        )
        subprocess.run(["sh", "-c", script], cwd=merged, check=True)
        ours = diff.make_patch(upper, lower, merged)
        repo = tmp_path / "repo"
        env = git_env(tmp_path / "home")
        shutil.copytree(lower, repo, symlinks=True)
        subprocess.run(["git", "init", "-q"], cwd=repo, check=True, env=env)
        subprocess.run(["git", "add", "-A"], cwd=repo, check=True, env=env)
        subprocess.run(["git", "commit", "-qm", "base"], cwd=repo, check=True, env=env)
        for entry in os.listdir(repo):
            if entry != ".git":
                path = repo / entry
                shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
        shutil.copytree(merged, repo, symlinks=True, dirs_exist_ok=True)
        subprocess.run(["git", "add", "-A"], cwd=repo, check=True, env=env)
        theirs = subprocess.run(["git", "diff", "--cached", "--binary", "--full-index", "--no-renames"], cwd=repo,
                                check=True, env=env, capture_output=True).stdout
    finally:
        subprocess.run(["umount", str(merged)], check=False)
    assert ours == theirs
