"""The committed corpus of hostile and tricky patches (tests/corpus/patches/): each gets the outcome expected.json
records, through the strict parser and git's own reading; accepted ones with a base are applied by ``hunks`` and by
git in a scratch tree, which must agree; the cases about git's loose reading show that git does read them.

The corpus is generated once by ``tests/corpus/patches/make_corpus.py`` and committed.
"""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path

import pytest

from tkbox_daemon.patch import gitread, hunks
from tkbox_daemon.patch.gitparse import parse_patch
from tkbox_daemon.patch.operations import PatchRefused, TreeEntry

CORPUS = Path(__file__).parent / "corpus" / "patches"
EXPECTED: dict[str, dict] = json.loads((CORPUS / "expected.json").read_text())
pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")

# Every refusal the parser makes for the reasons issue 11 lists; the corpus must show each.
REQUIRED_RULES = {
    "dev-null-without-mode", "path-absolute", "path-dot-component", "path-dotgit", "path-control-character",
    "path-not-utf8", "path-empty-component", "path-too-long", "path-protected-symlink", "cr-in-header",
    "hunk-count-mismatch", "line-past-hunk", "path-twice", "traditional-patch", "text-outside-section",
    "source-not-in-base", "binary-delta", "bad-binary", "oid-mismatch", "limit:patch_literal_size",
    "symlink-target-absolute", "symlink-target-escapes", "symlink-target-dotgit", "mode-setuid", "mode-setgid",
    "mode-sticky", "bad-mode", "gitlink", "symlink-rename", "type-change-in-section", "header-order",
    "unknown-header-line", "no-newline-not-last", "bad-marker-line", "path-file-and-directory",
}


def _tree(case: dict) -> dict[bytes, TreeEntry] | None:
    if "base" not in case:
        return None
    return {path.encode(): TreeEntry(int(item["mode"], 8), item["text"].encode() if "text" in item
                                     else base64.b64decode(item["base64"])) for path, item in case["base"].items()}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_patch_gets_its_expected_outcome(name: str) -> None:
    case = EXPECTED[name]
    data = (CORPUS / name).read_bytes()
    tree = _tree(case)
    base = None if tree is None else (lambda path: tree[path].mode if path in tree else None)
    if case["outcome"] == "refuse":
        with pytest.raises(PatchRefused) as refused:
            parse_patch(data, base=base, allow_mail_text=case.get("mail", False))
        assert refused.value.rule == case["rule"], str(refused.value)
        return
    parsed = parse_patch(data, base=base, allow_mail_text=case.get("mail", False))
    gitread.cross_check(data, parsed)
    assert ("abbreviated" in " ".join(parsed.notes)) == (case.get("note") == "abbreviated")
    if tree is not None:
        assert hunks.apply_to_tree(parsed.operations, tree) == gitread.apply_with_git(data, tree)


@pytest.mark.parametrize("name", sorted(name for name, case in EXPECTED.items() if case.get("git_reads")))
def test_git_itself_reads_the_patches_that_fool_a_loose_reader(name: str) -> None:
    gitread.read_with_git((CORPUS / name).read_bytes())  # no PatchRefused: git takes it


def test_the_corpus_covers_every_refusal_and_is_big_enough() -> None:
    rules = {case["rule"] for case in EXPECTED.values() if case["outcome"] == "refuse"}
    assert REQUIRED_RULES <= rules, REQUIRED_RULES - rules
    assert len(EXPECTED) >= 60
    assert sum(case["outcome"] == "accept" for case in EXPECTED.values()) >= 20


def test_every_corpus_file_is_listed() -> None:
    assert {path.name for path in CORPUS.glob("*.patch")} == set(EXPECTED)
