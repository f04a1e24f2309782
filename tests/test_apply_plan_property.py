"""Apply's plan, from the guest's own patches between random trees: what is written to the checkout is git's
result in its scratch copy and the tree the box ended with; a checkout that differs anywhere the patch reads is
named and planned to write nothing there."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tests.patch_trees import guest_patch, write_tree
from tests.test_patch_parse_property import SETTINGS, tree_pairs
from tkbox_daemon.patch.apply_plan import MATCHES
from tkbox_daemon.patch.apply_read import check_scratch_result, read_box_patch
from tkbox_daemon.patch.checkout import write_checkout
from tkbox_daemon.patch.operations import MODE_EXEC, MODE_LINK, TreeEntry

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def read_tree(root: Path) -> dict[bytes, TreeEntry]:
    out = {}
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root).as_posix().encode()
        if path.is_symlink():
            out[relative] = TreeEntry(MODE_LINK, bytes(path.readlink().as_posix().encode()))
        elif path.is_file():
            out[relative] = TreeEntry(0o100755 if path.stat().st_mode & 0o100 else 0o100644, path.read_bytes())
    return out


def _utf8(tree: dict[bytes, TreeEntry]) -> bool:
    try:
        for path in tree:
            path.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _git_applies(patch: bytes, tree: dict[bytes, TreeEntry]) -> bool:
    """Whether git itself applies ``patch`` to ``tree`` in a plain work tree (no config, no attributes)."""
    with tempfile.TemporaryDirectory() as tmp:
        write_tree(Path(tmp), tree)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": tmp, "GIT_CONFIG_NOSYSTEM": "1",
               "GIT_CONFIG_GLOBAL": os.devnull}
        subprocess.run(["git", "init", "-q", tmp], check=True, env=env)
        return subprocess.run(["git", "-C", tmp, "apply", "--check", "-"], input=patch, env=env,
                              capture_output=True).returncode == 0


LOOP = TreeEntry(MODE_LINK, b'q"t')
EMPTY = TreeEntry(0o100644, b"")


@settings(SETTINGS, max_examples=30)
@given(tree_pairs())
@example(({b"-d": EMPTY, b'q"t': LOOP, b"a/a/a": EMPTY}, {b"-d": EMPTY, b"a/a/a": EMPTY, b'q"t/a': EMPTY}))
def test_the_checkout_ends_as_the_box_did_and_as_git_does_in_scratch(pair):
    old, new = pair
    patch = guest_patch(old, new)
    if not patch or not _utf8(old) or not _utf8(new):
        return
    with tempfile.TemporaryDirectory() as tmp:
        base, checkout = Path(tmp, "base"), Path(tmp, "checkout")
        base.mkdir()
        checkout.mkdir()
        write_tree(base, old)
        write_tree(checkout, old)
        reading = read_box_patch(patch, base, checkout)
        assert all(plan.checkout == MATCHES for plan in reading.plans), [plan.checkout for plan in reading.plans]
        refusal = check_scratch_result(reading, reading.plans)
        if refusal:
            # The one refusal allowed: git's own, for a patch git cannot apply even to the tree it was made from
            # (a symlink looping on itself replaced by a directory: git reads attributes through the loop and
            # fails). Apply then writes nothing and says git refused.
            assert "[git-apply-refuses]" in refusal and not _git_applies(patch, old), refusal
            return
        report = write_checkout(checkout, [change for plan in reading.plans for change in plan.changes])
        assert report.ok, report.message()
        written = read_tree(checkout)
        assert written == {path: TreeEntry(entry.mode if entry.mode != MODE_EXEC else MODE_EXEC, entry.data)
                           for path, entry in new.items()}


@settings(SETTINGS, max_examples=30)
@given(tree_pairs(), st.data())
def test_a_checkout_that_differs_where_the_patch_reads_plans_nothing_there(pair, data):
    old, new = pair
    patch = guest_patch(old, new)
    if not patch or not _utf8(old) or not _utf8(new):
        return
    changed = [path for path in sorted(set(old) | set(new)) if old.get(path) != new.get(path)]
    victim = data.draw(st.sampled_from(changed))
    drifted = dict(old)
    if victim in old and old[victim].mode != MODE_LINK:
        drifted[victim] = TreeEntry(old[victim].mode, old[victim].data + b"someone else's edit\n")
    elif victim in old:
        del drifted[victim]
    else:
        drifted[victim] = TreeEntry(0o100644, b"already here\n")
    with tempfile.TemporaryDirectory() as tmp:
        base, checkout = Path(tmp, "base"), Path(tmp, "checkout")
        base.mkdir()
        checkout.mkdir()
        write_tree(base, old)
        try:
            write_tree(checkout, drifted)
        except (FileExistsError, NotADirectoryError, IsADirectoryError):
            return  # the drift itself cannot exist beside the rest of the tree
        reading = read_box_patch(patch, base, checkout)
        blocked = [plan for plan in reading.plans if victim in {p for op in plan.operations for p in op.paths}]
        assert blocked and all(plan.checkout != MATCHES and plan.changes == () for plan in blocked)
