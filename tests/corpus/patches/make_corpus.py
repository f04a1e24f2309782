"""Generates the committed corpus of hostile and tricky patches, and ``expected.json`` with each one's outcome.

Run by hand from the repository root; the output is committed and the tests never regenerate it:

    .venv/bin/python tests/corpus/patches/make_corpus.py

Benign patches are written by the guest's own code (``tests/patch_trees.py``), or by git where the guest writes no
such thing (renames, copies, abbreviated ids, ``git format-patch`` mail); hostile ones are written by hand.
``expected.json`` maps each file to:

- ``outcome``: ``accept`` or ``refuse``; ``rule``: the refusal's rule id; ``why``: what the case is about;
- ``git_reads`` (true on some refused cases): git's own ``git apply --numstat`` reads the patch without complaint,
  which is the point of the case (a naive reader that trusts git, or reads as loosely, would take it);
- ``base`` (optional): the tree the patch was made against (path: {mode, text} or {mode, base64}); with it the
  parser gets a base to check rename and copy sources, and an accepted patch is applied by ``hunks`` and by git in
  a scratch tree, which must agree;
- ``mail`` (optional): read with ``allow_mail_text`` (a user's ``git format-patch`` file).
"""

from __future__ import annotations

import base64
import hashlib
import json
import sys
import zlib
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))

from tests.patch_trees import entry, guest_patch  # noqa: E402
from tkbox_guest import gitpatch  # noqa: E402

CASES: dict[str, dict] = {}
FILES: dict[str, bytes] = {}


def oid(data: bytes) -> bytes:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest().encode()


def case(name: str, data: bytes, outcome: str, why: str, rule: str | None = None, **extra: object) -> None:
    assert name not in CASES, name
    FILES[f"{name}.patch"] = data
    CASES[f"{name}.patch"] = {"outcome": outcome, "rule": rule, "why": why, **extra}


def accept(name: str, data: bytes, why: str, **extra: object) -> None:
    case(name, data, "accept", why, **extra)


def refuse(name: str, data: bytes, rule: str, why: str, **extra: object) -> None:
    case(name, data, "refuse", why, rule, **extra)


def base_json(tree: dict[bytes, object]) -> dict[str, dict[str, str]]:
    out = {}
    for path, item in tree.items():
        mode = f"{item.mode:o}"
        try:
            out[path.decode()] = {"mode": mode, "text": item.data.decode()}
        except UnicodeDecodeError:
            out[path.decode()] = {"mode": mode, "base64": base64.b64encode(item.data).decode()}
    return out


def guest(name: str, old: dict, new: dict, why: str) -> bytes:
    """A benign case the guest writes; the base goes along so the apply is checked too."""
    data = guest_patch(old, new)
    accept(name, data, why, base=base_json(old))
    return data


def add_section(path: bytes, text: bytes, mode: bytes = b"100644") -> bytes:
    """A new-file section by hand (the guest's header notation), with a correct full index line."""
    diff_line, minus, plus = gitpatch.file_header(path, blank_label="a")
    lines = gitpatch.split_lines(text)
    body = b"".join(b"+" + line if line.endswith(b"\n") else b"+" + line + b"\n" + gitpatch.NO_NEWLINE
                    for line in lines)
    return (diff_line + b"new file mode %s\nindex %s..%s\n" % (mode, b"0" * 40, oid(text)) + minus + plus
            + b"@@ -0,0 +1,%d @@\n" % len(lines) + body)


def modify_x(extra_after: bytes = b"", *, minus: bytes = b"--- a/x\n", plus: bytes = b"+++ b/x\n") -> bytes:
    """``x``: a\\nb\\n -> a\\nc\\n, by hand, with an optional tail after the hunk."""
    return (b"diff --git a/x b/x\nindex %s..%s 100644\n%s%s@@ -1,2 +1,2 @@\n a\n-b\n+c\n%s"
            % (oid(b"a\nb\n"), oid(b"a\nc\n"), minus, plus, extra_after))


X_BASE = {"x": {"mode": "100644", "text": "a\nb\n"}}


def literal(data: bytes, declared: int | None = None) -> bytes:
    return b"".join(gitpatch.binary_literal(len(data) if declared is None else declared, [data]))


def benign() -> None:
    f = entry
    guest("add_text", {}, {b"new.txt": f("hello\nworld\n")}, "a new text file")
    guest("modify_text", {b"m.txt": f("one\ntwo\nthree\n")}, {b"m.txt": f("one\n2\nthree\n")}, "a line changed")
    guest("delete_text", {b"gone.txt": f("bye\n")}, {}, "a file deleted")
    many_old = {b"long.txt": f("".join(f"line {i}\n" for i in range(40)))}
    many_new = {b"long.txt": f("".join(f"line {i}\n" if i % 13 else f"LINE {i}\n" for i in range(40)))}
    guest("modify_several_hunks", many_old, many_new, "several hunks in one file")
    guest("mode_executable", {b"run.sh": f("#!/bin/sh\n")}, {b"run.sh": f("#!/bin/sh\n", 0o100755)},
          "chmod +x only")
    guest("add_executable", {}, {b"bin/tool": f("#!/bin/sh\necho hi\n", 0o100755)}, "a new executable")
    guest("modify_and_mode", {b"s": f("a\n")}, {b"s": f("b\n", 0o100755)}, "content and mode change together")
    guest("names_with_spaces", {b"dir with space/file x": f("a\n")}, {b"dir with space/file x": f("b\n")},
          "names with spaces (git ends the ---/+++ label with a tab)")
    guest("names_non_ascii", {"données/naïve.txt".encode(): f("a\n")}, {"données/naïve.txt".encode(): f("é\n")},
          "non-ASCII names, C-quoted with octal escapes")
    guest("names_quote_backslash", {}, {b'q"t': f("q\n"), b"back\\s": f("b\n")}, "names holding \" and \\")
    guest("content_like_headers", {b"h.txt": f("plain\n")},
          {b"h.txt": f("plain\n+++ b/x\n--- a/x\ndiff --git a/y b/y\n@@ -1 +1 @@\nindex 0000000..1111111\n"
                       "\\ No newline at end of file\nGIT binary patch\n")},
          "content lines that look like headers inside a hunk")
    guest("crlf_content", {b"w.txt": f("a\r\nb\r\n")}, {b"w.txt": f("a\r\nB\r\nc\r\n")}, "CRLF content kept")
    guest("no_newline_both", {b"n.txt": f("a\nb")}, {b"n.txt": f("a\nc")}, "no newline at the end, before and after")
    guest("no_newline_added", {b"n.txt": f("a\n")}, {b"n.txt": f("a\nb")}, "the new last line has no newline")
    guest("no_newline_removed", {b"n.txt": f("a")}, {b"n.txt": f("a\n")}, "a newline added at the end")
    guest("add_empty", {}, {b"empty": f("")}, "an empty file added (no hunk)")
    guest("delete_empty", {b"empty": f("")}, {}, "an empty file deleted (no hunk)")
    guest("binary_add", {}, {b"img.bin": f(b"\x89PNG\0\x01\x02" * 30)}, "a binary literal")
    guest("binary_modify", {b"b.bin": f(b"\0\1\2")}, {b"b.bin": f(b"\0\1\3\4")}, "binary literals both ways")
    guest("binary_delete", {b"b.bin": f(b"\0old")}, {}, "a binary file deleted")
    guest("symlink_add", {b"lib/real.txt": f("r\n")}, {b"lib/real.txt": f("r\n"), b"lib/link": f("real.txt", 0o120000)},
          "a symlink inside the tree")
    guest("symlink_dotdot_inside", {}, {b"a/b/l": f("../c/t", 0o120000)}, "a symlink with .. that stays inside")
    guest("symlink_modify", {b"l": f("one", 0o120000)}, {b"l": f("two", 0o120000)}, "a symlink's target changed")
    guest("symlink_delete", {b"l": f("/etc/passwd", 0o120000)}, {}, "a symlink deleted (its target is not written)")
    guest("type_change_file_to_symlink", {b"t": f("text\n")}, {b"t": f("other", 0o120000)},
          "a file becomes a symlink: deletion then addition of one path")
    guest("type_change_symlink_to_file", {b"t": f("other", 0o120000)}, {b"t": f("text\n")},
          "a symlink becomes a file")
    guest("file_replaced_by_directory", {b"a": f("file\n")}, {b"a/b": f("inside\n")},
          "a file deleted and a directory of the same name made")
    guest("dotfiles_not_git", {}, {b".gitignore": f("*.o\n"), b".gitfoo": f("x\n"), b"x.git/y": f("y\n"),
                                   b"git~2": f("z\n"), b".github/workflows/ci.yml": f("on: push\n")},
          "names that only look like .git (sensitive ones are another check's)")
    guest("many_files", {}, {b"f%02d" % i: f(f"{i}\n") for i in range(40)}, "forty sections")
    accept("empty_patch", b"", "an empty patch: no changes")
    rename = (b"diff --git a/old name.txt b/new name.txt\nsimilarity index 60%\nrename from old name.txt\n"
              b"rename to new name.txt\nindex " + oid(b"a\nb\nc\n") + b".." + oid(b"a\nB\nc\n") + b" 100644\n"
              b"--- a/old name.txt\t\n+++ b/new name.txt\t\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n")
    accept("rename_with_edit", rename, "a rename with an edit (as git diff -M writes it)",
           base={"old name.txt": {"mode": "100644", "text": "a\nb\nc\n"}})
    accept("rename_pure", b"diff --git a/d/one b/d/two\nsimilarity index 100%\nrename from d/one\nrename to d/two\n",
           "a pure rename", base={"d/one": {"mode": "100644", "text": "same\n"}})
    accept("copy_with_mode", b"diff --git a/src b/dst\nold mode 100644\nnew mode 100755\nsimilarity index 100%\n"
           b"copy from src\ncopy to dst\n", "a copy whose mode changes", base={"src": {"mode": "100644", "text": "s\n"}})
    abbreviated = modify_x().replace(oid(b"a\nb\n"), oid(b"a\nb\n")[:7]).replace(oid(b"a\nc\n"), oid(b"a\nc\n")[:7])
    accept("index_abbreviated", abbreviated, "abbreviated blob ids (a user's patch): accepted, with a note",
           base=X_BASE, note="abbreviated")
    mail = (b"From 1111111111111111111111111111111111111111 Mon Sep 17 00:00:00 2001\nFrom: A <a@example.org>\n"
            b"Subject: [PATCH] change x\n\nWhy it changes.\n---\n x | 2 +-\n 1 file changed, 1 insertion(+), "
            b"1 deletion(-)\n\n" + modify_x() + b"-- \n2.39.5\n\n")
    accept("format_patch_mail", mail, "git format-patch output, read with its mail text", base=X_BASE, mail=True)


def paths() -> None:
    def named(name: str, path: bytes, rule: str, why: str, mode: bytes = b"100644") -> None:
        refuse(name, add_section(path, b"x\n", mode), rule, why)

    named("path_absolute", b"/etc/cron.d/x", "path-absolute", "an absolute path (a//etc/... on the diff line)")
    refuse("path_absolute_quoted", b'diff --git "a//etc/x" "b//etc/x"\nnew file mode 100644\nindex '
           + b"0" * 40 + b".." + oid(b"x\n") + b'\n--- /dev/null\n+++ "b//etc/x"\n@@ -0,0 +1 @@\n+x\n',
           "path-absolute", "an absolute path, quoted")
    named("path_dotdot", b"../../etc/x", "path-dot-component", "a path leaving the tree through ..")
    named("path_dot", b"./x", "path-dot-component", "a '.' component")
    named("path_empty_component", b"a//b", "path-empty-component", "a double slash")
    named("path_dotgit", b".git/hooks/pre-commit", "path-dotgit", "a hook written into .git")
    named("path_dotgit_upper", b".GIT/config", "path-dotgit", ".git in upper case")
    named("path_dotgit_nested", b"sub/.git/config", "path-dotgit", ".git of a nested directory")
    named("path_dotgit_ntfs_short", b"GIT~1/config", "path-dotgit", "the NTFS short name of .git")
    named("path_dotgit_trailing_dots", b".git../config", "path-dotgit", ".git with trailing dots (NTFS drops them)")
    named("path_dotgit_trailing_space", b".git /config", "path-dotgit", ".git with a trailing space (NTFS drops it)")
    named("path_dotgit_ads", b".git::$INDEX_ALLOCATION/config", "path-dotgit", "an NTFS alternate data stream of .git")
    named("path_dotgit_backslash", b"sub\\.git\\config", "path-dotgit", "a backslash as NTFS's separator before .git")
    named("path_dotgit_hfs_zwnj", ".g\u200cit/config".encode(), "path-dotgit", "an HFS+ ignorable (U+200C) in .git")
    named("path_dotgit_hfs_bom", "\ufeff.git/config".encode(), "path-dotgit", "an HFS+ ignorable (U+FEFF) before .git")
    refuse("path_dotgit_octal", b'diff --git "a/.gi\\164/config" "b/.gi\\164/config"\nnew file mode 100644\nindex '
           + b"0" * 40 + b".." + oid(b"x\n") + b'\n--- /dev/null\n+++ "b/.gi\\164/config"\n@@ -0,0 +1 @@\n+x\n',
           "path-dotgit", ".git spelled with an octal escape in a quoted name")
    named("path_escape_sequence", b"x\x1b[2Jy", "path-control-character", "a terminal escape in a name")
    named("path_newline", b"a\nb", "path-control-character", "a newline in a name")
    named("path_nul", b"a\0b", "path-control-character", "a NUL in a quoted name (git's C string ends there)")
    named("path_c1_control", "a\u009bb".encode(), "path-control-character", "an 8-bit CSI in a name")
    named("path_not_utf8", b"bad\xffname", "path-not-utf8", "a name that is not UTF-8")
    named("path_too_long", b"d/" * 2100 + b"f", "path-too-long", "a path over 4096 bytes")
    named("symlink_named_gitmodules", b".gitmodules", "path-protected-symlink", "a symlinked .gitmodules", b"120000")


def structure() -> None:
    dev_null = (b"diff --git a/x b/x\nindex " + b"0" * 40 + b".." + oid(b"n\n") + b"\n--- /dev/null\n+++ b/x\n"
                b"@@ -0,0 +1 @@\n+n\n")
    refuse("dev_null_without_new_file_mode", dev_null, "dev-null-without-mode",
           "F1: --- /dev/null without new file mode; git reads a file named dev/null, not a creation",
           git_reads=True)
    refuse("dev_null_without_deleted_mode", b"diff --git a/x b/x\nindex " + oid(b"a\nb\n") + b".." + b"0" * 40
           + b"\n--- a/x\n+++ /dev/null\n@@ -1,2 +0,0 @@\n-a\n-b\n", "dev-null-without-mode",
           "+++ /dev/null without deleted file mode", git_reads=True)
    refuse("cr_in_label", modify_x(minus=b"--- a/x\r\n", plus=b"+++ b/x\r\n"), "cr-in-header",
           "a carriage return ending the ---/+++ lines", git_reads=True)
    refuse("cr_in_mode_line", add_section(b"n", b"n\n").replace(b"new file mode 100644\n", b"new file mode 100644\r\n"),
           "cr-in-header", "a carriage return after the mode (git's strtoul stops before it)", git_reads=True)
    refuse("cr_in_diff_git_line", modify_x().replace(b"a/x b/x\n", b"a/x b/x\r\n", 1), "cr-in-header",
           "a carriage return in the diff --git line")
    refuse("cr_in_hunk_header", modify_x().replace(b"+1,2 @@\n", b"+1,2 @@\r\n"), "cr-in-header",
           "a carriage return in a hunk header")
    refuse("line_past_hunk_count", modify_x(b"+evil()\n"), "line-past-hunk",
           "an added line past the hunk's count: git ignores it, a naive reader applies it", git_reads=True)
    refuse("hunk_count_short", modify_x().replace(b"@@ -1,2 +1,2 @@", b"@@ -1,3 +1,3 @@"), "hunk-count-mismatch",
           "a hunk with fewer lines than its counts")
    refuse("hunk_count_next_section", modify_x().replace(b"@@ -1,2 +1,2 @@", b"@@ -1,3 +1,3 @@")
           + add_section(b"y", b"y\n"), "hunk-count-mismatch", "a hunk whose counts swallow the next diff --git line")
    smuggled = modify_x(b"Some commentary.\n--- a/y\n+++ b/y\n@@ -0,0 +1 @@\n+smuggled\n")
    refuse("smuggled_traditional_after_text", smuggled, "line-past-hunk",
           "text then a traditional ---/+++ patch between sections: git applies the hidden section too",
           git_reads=True)
    refuse("smuggled_traditional_direct", modify_x(b"--- a/y\n+++ b/y\n@@ -0,0 +1 @@\n+smuggled\n"),
           "traditional-patch", "a traditional patch right after a section's hunk", git_reads=True)
    refuse("traditional_only", b"--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n a\n-b\n+c\n", "traditional-patch",
           "a traditional patch with no diff --git line", git_reads=True)
    refuse("text_before_section", b"Please apply.\n" + modify_x(), "text-outside-section",
           "text before the first section of a box's patch")
    refuse("mail_hides_traditional", b"Subject: x\n\n--- a/y\n+++ b/y\n@@ -0,0 +1 @@\n+hidden\n" + modify_x(),
           "traditional-patch", "mail text that git would read as a patch", mail=True, git_reads=True)
    refuse("no_final_newline", modify_x()[:-1], "no-final-newline", "the last line has no newline")
    refuse("two_sections_one_path", modify_x() + modify_x(), "path-twice", "the same file changed by two sections")
    refuse("added_twice", add_section(b"n", b"1\n") + add_section(b"n", b"2\n"), "path-twice",
           "one file added twice (git would apply the second to the first's result)")
    refuse("rename_then_modify_source", b"diff --git a/x b/y\nsimilarity index 100%\nrename from x\nrename to y\n"
           + modify_x(), "path-twice", "a rename's source changed by another section")
    refuse("file_and_directory", add_section(b"a", b"f\n") + add_section(b"a/b", b"g\n"),
           "path-file-and-directory", "a path both a file and a directory afterwards")
    refuse("empty_section", b"diff --git a/x b/x\n", "empty-section", "a section that says nothing")
    refuse("unknown_header_line", b"diff --git a/x b/x\nfrobnicate yes\n" + modify_x()[19:], "unknown-header-line",
           "a header line git diff never writes")
    refuse("header_out_of_order", b"diff --git a/n b/n\nindex " + b"0" * 40 + b".." + oid(b"n\n")
           + b"\nnew file mode 100644\n--- /dev/null\n+++ b/n\n@@ -0,0 +1 @@\n+n\n", "header-order",
           "new file mode after the index line")
    refuse("dissimilarity_index", modify_x().replace(b"index ", b"dissimilarity index 80%\nindex "),
           "header-order", "a rewrite's dissimilarity index (not supported)")
    refuse("names_disagree", modify_x(minus=b"--- a/y\n", plus=b"+++ b/y\n"), "names-disagree",
           "the ---/+++ names are not the diff --git line's")
    refuse("bad_hunk_header_zeros", modify_x().replace(b"@@ -1,2 +1,2 @@", b"@@ -01,2 +01,2 @@"),
           "bad-hunk-header", "leading zeros in a hunk header")
    refuse("hunk_without_change", modify_x().replace(b"@@ -1,2 +1,2 @@\n a\n-b\n+c\n", b"@@ -1,2 +1,2 @@\n a\n b\n"),
           "hunk-without-change", "a hunk of context only")
    refuse("bad_marker_line", modify_x(b"\\ Kein Zeilenumbruch am Dateiende.\n"), "bad-marker-line",
           "a localized no-newline marker (only git's English one is read)")
    refuse("marker_not_last", modify_x().replace(b" a\n-b\n", b" a\n\\ No newline at end of file\n-b\n"),
           "no-newline-not-last", "a no-newline marker before more lines of its side")
    overlapping = (b"diff --git a/x b/x\nindex 1111111..2222222 100644\n--- a/x\n+++ b/x\n@@ -2,2 +2,2 @@\n a\n-b\n"
                   b"+c\n@@ -1,2 +1,2 @@\n-a\n+z\n b\n")
    refuse("hunks_out_of_order", overlapping, "hunk-position", "hunks out of order")
    refuse("mode_unknown", modify_x().replace(b" 100644\n", b"\n"), "mode-unknown",
           "a content change whose mode the patch does not state")
    refuse("mode_change_index_mode", modify_x().replace(b" 100644\n", b" 100755\n").replace(
           b"diff --git a/x b/x\n", b"diff --git a/x b/x\nold mode 100644\nnew mode 100755\n"), "index-mode",
           "a mode change whose index line states a mode too: git takes that as the old mode and sees no change",
           git_reads=True)


def modes_and_links() -> None:
    def mode_case(name: str, mode: bytes, rule: str, why: str) -> None:
        refuse(name, add_section(b"m", b"m\n", mode), rule, why)

    mode_case("mode_setuid", b"104755", "mode-setuid", "a setuid file")
    mode_case("mode_setgid", b"102755", "mode-setgid", "a setgid file")
    mode_case("mode_sticky", b"101644", "mode-sticky", "a sticky file")
    mode_case("mode_group_writable", b"100664", "bad-mode", "a mode git would canonicalise; refused, not rewritten")
    mode_case("mode_short", b"644", "bad-mode", "a mode that is not six octal digits")
    refuse("gitlink", b"diff --git a/sub b/sub\nnew file mode 160000\nindex " + b"0" * 40 + b".." + b"1" * 40
           + b"\n--- /dev/null\n+++ b/sub\n@@ -0,0 +1 @@\n+Subproject commit " + b"1" * 40 + b"\n", "gitlink",
           "a submodule (gitlink)")
    refuse("symlink_absolute", add_section(b"l", b"/etc/passwd", b"120000"), "symlink-target-absolute",
           "a symlink to an absolute path")
    refuse("symlink_escapes", add_section(b"l", b"../outside", b"120000"), "symlink-target-escapes",
           "a symlink leaving the tree")
    refuse("symlink_escapes_from_subdir", add_section(b"a/l", b"../../x", b"120000"), "symlink-target-escapes",
           "a symlink leaving the tree from a subdirectory")
    refuse("symlink_into_dotgit", add_section(b"hooks", b".git/hooks", b"120000"), "symlink-target-dotgit",
           "a symlink into .git")
    refuse("symlink_with_newline_target", add_section(b"l", b"a\nb", b"120000"), "symlink-target-control-character",
           "a symlink target of two lines")
    refuse("symlink_rename", b"diff --git a/l b/m\nsimilarity index 90%\nrename from l\nrename to m\nindex "
           + oid(b"t") + b".." + oid(b"u") + b" 120000\n--- a/l\n+++ b/m\n@@ -1 +1 @@\n-t\n\\ No newline at end "
           b"of file\n+u\n\\ No newline at end of file\n", "symlink-rename",
           "a renamed symlink (its target would be read from another directory)")
    refuse("type_change_in_section", b"diff --git a/t b/t\nold mode 100644\nnew mode 120000\n", "type-change-in-section",
           "a file turned into a symlink by mode lines alone")
    refuse("copy_outside_tree", b"diff --git a/../../etc/passwd b/leak\nsimilarity index 100%\ncopy from "
           b"../../etc/passwd\ncopy to leak\n", "path-dot-component", "a copy whose source is outside the tree")
    refuse("copy_absolute_source", b'diff --git a//etc/shadow b/leak\nsimilarity index 100%\ncopy from /etc/shadow\n'
           b"copy to leak\n", "path-absolute", "a copy from an absolute path")
    refuse("copy_not_in_base", b"diff --git a/.env b/leak.txt\nsimilarity index 100%\ncopy from .env\ncopy to "
           b"leak.txt\n", "source-not-in-base", "a copy from a file the base does not have (an untracked .env): "
           "git copies whatever is in the work tree", base={"x": {"mode": "100644", "text": "a\nb\n"}},
           git_reads=True)
    refuse("rename_not_in_base", b"diff --git a/secret b/public\nsimilarity index 100%\nrename from secret\n"
           b"rename to public\n", "source-not-in-base", "a rename of a file the base does not have",
           base=X_BASE, git_reads=True)


def binaries() -> None:
    data = b"\0binary\1" * 4
    head = b"diff --git a/b.bin b/b.bin\nnew file mode 100644\nindex " + b"0" * 40 + b".." + oid(data) + b"\n"
    good = head + b"GIT binary patch\n" + literal(data) + literal(b"")
    refuse("binary_delta", head + b"GIT binary patch\ndelta 12\nHcmV?d00001\n\n", "binary-delta",
           "a binary delta (not supported)")
    refuse("binary_size_lies", head + b"GIT binary patch\n" + literal(data, len(data) - 1) + literal(b""),
           "bad-binary", "a literal that inflates to more than it declares")
    refuse("binary_over_limit", head + b"GIT binary patch\nliteral 300000000\nHcmV?d00001\n\n",
           "limit:patch_literal_size", "a literal declaring more than the bound: refused before inflating")
    bomb = zlib.compress(b"\0" * (8 << 20), 9)
    lines = b"".join(bytes([len(bomb[i:i + 52]) + (64 if len(bomb[i:i + 52]) <= 26 else 70)])
                     + base64.b85encode(bomb[i:i + 52], pad=True) + b"\n" for i in range(0, len(bomb), 52))
    refuse("binary_zip_bomb", head + b"GIT binary patch\nliteral 1000\n" + lines + b"\n" + literal(b""), "bad-binary",
           "8 MiB of zeros declared as 1000 bytes: inflating stops at the declared size")
    refuse("binary_abbreviated_index", good.replace(b"0" * 40, b"0" * 7).replace(oid(data), oid(data)[:7]),
           "binary-abbreviated-index", "a binary patch with abbreviated ids (git will not apply it either)")
    refuse("binary_oid_mismatch", good.replace(oid(data), oid(b"other")), "oid-mismatch",
           "a literal that is not the blob its index line names")
    trailing = literal(data).replace(b"\n\n", b"\n", 1)
    extra = b"".join(gitpatch.binary_literal(1, [b"x"])).split(b"\n")[1] + b"\n"
    refuse("binary_trailing_data", head + b"GIT binary patch\n" + trailing + extra + b"\n" + literal(b""),
           "bad-binary", "data after the zlib stream's end")
    refuse("binary_without_data", b"diff --git a/b.bin b/b.bin\nindex " + oid(b"\0a") + b".." + oid(b"\0b")
           + b" 100644\nBinary files a/b.bin and b/b.bin differ\n", "header-order",
           "a binary change without its data (git diff without --binary)")
    refuse("oid_mismatch_text", add_section(b"n", b"n\n").replace(oid(b"n\n"), oid(b"m\n")), "oid-mismatch",
           "a new file whose content is not the blob its index line names")
    refuse("add_with_old_oid", add_section(b"n", b"n\n").replace(b"0" * 40, b"1" * 40), "oid-zero",
           "an addition whose old id is not all zeros")


def main() -> None:
    benign()
    paths()
    structure()
    modes_and_links()
    binaries()
    for old in HERE.glob("*.patch"):
        old.unlink()
    for name, data in FILES.items():
        (HERE / name).write_bytes(data)
    (HERE / "expected.json").write_text(json.dumps(CASES, indent=2, sort_keys=True) + "\n")
    print(f"{len(CASES)} cases: {sum(c['outcome'] == 'accept' for c in CASES.values())} accepted, "
          f"{sum(c['outcome'] == 'refuse' for c in CASES.values())} refused")


if __name__ == "__main__":
    main()
