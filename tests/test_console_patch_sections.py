"""The review's per-file cut of a patch (``patch_sections``) and its drawing (``diff_render``): cutting loses
nothing and never raises; every path a section names, in git's notation (quoted, with spaces, renamed, mode-only,
binary), finds that section, as the guest writes patches and as git itself does; every drawn line is escaped."""

from __future__ import annotations

import subprocess
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from tkbox_guest import gitpatch
from tkbox_tui.console.diff_render import DiffColours, diff_lines, side_by_side, unified
from tkbox_tui.console.patch_sections import DIFF_GIT, patch_lines, split_patch, unquote_c
from tkbox_tui.terminal_text import HIDDEN_RANGES

COLOURS = DiffColours("green", "red", "blue")
# A path component as a box may name one: any bytes but "/" and NUL, not "." or "..".
components = st.binary(min_size=1, max_size=12).filter(lambda b: b"/" not in b and b"\0" not in b
                                                       and b not in (b".", b".."))
paths = st.lists(components, min_size=1, max_size=3).map(b"/".join)
utf8_components = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="/\0"), min_size=1,
                          max_size=10).filter(lambda t: t not in (".", "..")).map(lambda t: t.encode())
utf8_paths = st.lists(utf8_components, min_size=1, max_size=3).map(b"/".join)


@given(st.binary(max_size=2000) | st.lists(st.sampled_from([b"diff --git a/x b/x\n", b"+x\r", b"@@ -1 +1 @@\n",
                                                              b"-y\n", b"\n", b"diff --git "]),
                                          max_size=30).map(b"".join))
def test_cutting_loses_nothing_and_each_section_starts_at_a_diff_git_line(patch: bytes) -> None:
    cut = split_patch(patch)
    assert cut.preamble + b"".join(section.data for section in cut.sections) == patch
    assert not any(line.startswith(DIFF_GIT) for line in patch_lines(cut.preamble))
    for section in cut.sections:
        lines = patch_lines(section.data)
        assert lines[0].startswith(DIFF_GIT) and not any(line.startswith(DIFF_GIT) for line in lines[1:])


def test_a_carriage_return_does_not_end_a_line() -> None:
    patch = b"diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n+ok\rdiff --git a/evil b/evil\n"
    cut = split_patch(patch)
    assert len(cut.sections) == 1 and cut.for_path("evil") == []


@given(st.binary(max_size=40))
def test_unquote_inverts_gits_quoting(name: bytes) -> None:
    quoted = gitpatch.quote_name(name)
    assert (unquote_c(quoted) if quoted.startswith(b'"') else quoted) == name


@given(st.binary(max_size=60))
def test_unquote_never_raises_and_takes_only_one_whole_quoted_name(text: bytes) -> None:
    name = unquote_c(text)
    assert name is None or (text.startswith(b'"') and text.endswith(b'"'))


def _section(kind: str, path: bytes, old: bytes) -> bytes:
    """A section as the guest (git's notation) writes it: ``kind`` modify, add, delete, mode, binary or rename."""
    if kind == "mode":
        head = gitpatch.file_header(path)[0]
        return head + b"old mode 100644\nnew mode 100755\n"
    if kind == "binary":
        head = gitpatch.file_header(path)[0]
        return head + b"index 1..2 100644\nGIT binary patch\n" + b"".join(gitpatch.binary_literal(3, [b"\0\1\2"])) \
            + b"literal 0\nHcmV?d00001\n\n"
    if kind == "rename":
        a_name, b_name = gitpatch.quote_name(b"a/" + old), gitpatch.quote_name(b"b/" + path)
        return (b"diff --git %s %s\nsimilarity index 100%%\nrename from %s\nrename to %s\n"
                % (a_name, b_name, gitpatch.quote_name(old), gitpatch.quote_name(path)))
    blank = {"add": "a", "delete": "b"}.get(kind)
    head, minus, plus = gitpatch.file_header(path, blank_label=blank)
    before, after = (b"", b"new\n") if kind == "add" else (b"old\n", b"") if kind == "delete" else (b"a\n", b"b\n")
    return head + minus + plus + b"".join(gitpatch.text_hunks(before, after))


@settings(max_examples=150)
@given(st.lists(st.tuples(st.sampled_from(["modify", "add", "delete", "mode", "binary", "rename"]), utf8_paths,
                          utf8_paths), min_size=1, max_size=6, unique_by=lambda item: item[1]))
def test_every_path_finds_its_section_as_the_guest_writes_it(files: list[tuple[str, bytes, bytes]]) -> None:
    olds = {old for kind, _, old in files if kind == "rename"}
    files = [item for item in files if item[1] not in olds]
    patch = b"".join(_section(kind, path, old) for kind, path, old in files)
    cut = split_patch(patch)
    assert len(cut.sections) == len(files)
    for (kind, path, old), section in zip(files, cut.sections, strict=True):
        assert section.paths[0] == path.decode()
        assert section in cut.for_path(path.decode())
        if kind == "rename":
            assert section.paths == tuple(dict.fromkeys([path.decode(), old.decode()]))


@given(paths)
def test_any_path_bytes_are_found_with_their_bytes_kept(path: bytes) -> None:
    section = split_patch(_section("modify", path, b""))
    assert section.sections[0].paths[0].encode("utf-8", "surrogateescape") == path


def test_paths_as_git_itself_writes_them(tmp_path: Path) -> None:
    def git(*args: str) -> bytes:
        return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "core.quotePath=true",
                               *args], cwd=tmp_path, check=True, capture_output=True, env={"HOME": str(tmp_path),
                                                                                            "PATH": "/usr/bin:/bin"}
                              ).stdout

    names = {"moved": "a b.txt", "renamed": "c d.txt", "mode": 'naïve "q".sh', "edit": "tab\there.txt",
             "gone": "gone.txt", "bin": "blob.bin"}
    git("init", "-q", ".")
    for key in ("moved", "mode", "edit", "gone"):
        (tmp_path / names[key]).write_text(f"{key}\n" * 20)
    (tmp_path / names["bin"]).write_bytes(bytes(range(256)))
    git("add", "-A")
    git("commit", "-qm", "base")
    (tmp_path / names["moved"]).rename(tmp_path / names["renamed"])
    (tmp_path / names["mode"]).chmod(0o755)
    (tmp_path / names["edit"]).write_text("edited\n" * 20)
    (tmp_path / names["gone"]).unlink()
    (tmp_path / names["bin"]).write_bytes(bytes(range(255, -1, -1)))
    git("add", "-A")
    cut = split_patch(git("diff", "--cached", "-M", "--binary", "--full-index", "HEAD"))
    found = {name: cut.for_path(name) for name in names.values()}
    assert all(len(sections) == 1 for sections in found.values()), {k: len(v) for k, v in found.items()}
    assert found[names["moved"]] == found[names["renamed"]]
    binary = diff_lines(found[names["bin"]])
    assert binary[-1].kind == "note" and "binary data" in binary[-1].text
    assert not any("literal" in line.text for line in binary)


@given(st.binary(max_size=3000))
def test_every_drawn_line_is_escaped(data: bytes) -> None:
    sections = split_patch(b"diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n" + data).sections
    lines = diff_lines(sections)
    hidden = [char for line in lines for char in line.text
              if char != "\t" and any(first <= ord(char) <= last for first, last in HIDDEN_RANGES)]
    assert hidden == []
    unified(lines, COLOURS)
    side_by_side(lines, COLOURS)


def test_only_so_many_lines_are_drawn() -> None:
    patch = b"diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -0,0 +1,50 @@\n" + b"+line\n" * 50
    lines = diff_lines(split_patch(patch).sections, limit=10)
    assert len(lines) == 11 and lines[-1].text.startswith("… 44 more lines not shown")


def test_side_by_side_pairs_a_replacement_and_numbers_the_lines() -> None:
    patch = b"diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -10,3 +10,3 @@\n same\n-old\n+new\n same\n"
    lines = diff_lines(split_patch(patch).sections)
    table = side_by_side(lines, COLOURS).renderables[0]
    numbers_old = [str(cell) for cell in table.columns[0]._cells]
    numbers_new = [str(cell) for cell in table.columns[2]._cells]
    text_old = [str(cell) for cell in table.columns[1]._cells]
    text_new = [str(cell) for cell in table.columns[3]._cells]
    assert numbers_old[-3:] == ["10", "11", "12"] and numbers_new[-3:] == ["10", "11", "12"]
    assert text_old[-2] == "old" and text_new[-2] == "new"
