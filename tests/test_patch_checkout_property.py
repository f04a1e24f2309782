"""Properties of the checkout writer over random small trees and random plans:

- a plan made from the true pre-images is written exactly: afterwards the tree is the expected one (files,
  bytes, modes, symlinks, directories), with nothing else in it;
- a plan with one wrong pre-image is refused and the tree is untouched;
- with a failure injected at any call (one, or two so a rollback can fail too), every path is either as it was
  or as planned, exactly as the report says (``written``/``rollback_failed``: as planned; ``not_written``/
  ``rolled_back``: as it was), nothing else changed, and when everything was rolled back the directories are
  as they were too.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.checkout_trees import InjectingFs, build, dirs_of, image, snapshot
from tkbox_daemon.patch.checkout import write_checkout
from tkbox_daemon.patch.checkout_fs import CheckoutError
from tkbox_daemon.patch.checkout_plan import Delete, FileImage, WriteFile, WriteSymlink

NAMES = [b"a", b"b", b"c"]
_path = st.lists(st.sampled_from(NAMES), min_size=1, max_size=3).map(b"/".join)
_leaf = st.one_of(
    st.tuples(st.just("file"), st.binary(max_size=24), st.sampled_from([0o644, 0o755])),
    st.tuples(st.just("link"), st.sampled_from([b"a", b"b", b"c/a", b"x"])),
)


def _put(tree: dict[bytes, tuple], path: bytes, leaf: tuple) -> None:
    """Set ``path`` to ``leaf``, dropping whatever would make the tree impossible (a file above or below it)."""
    for other in list(tree):
        if other.startswith(path + b"/") or path.startswith(other + b"/"):
            del tree[other]
    tree[path] = leaf


@st.composite
def trees_and_edits(draw):
    tree: dict[bytes, tuple] = {}
    for path, leaf in draw(st.lists(st.tuples(_path, _leaf), max_size=8)):
        _put(tree, path, leaf)
    final = dict(tree)
    for path, leaf in draw(st.lists(st.tuples(_path, st.one_of(st.none(), _leaf)), max_size=6)):
        if leaf is None:
            final.pop(path, None)
        else:
            _put(final, path, leaf)
    return tree, final


def _plan(before: dict[bytes, tuple], after: dict[bytes, tuple]) -> list:
    changes = []
    for path in sorted(set(before) | set(after)):
        old, new = before.get(path), after.get(path)
        if old == new:
            continue
        if new is None:
            changes.append(Delete(path, image(old)))
        elif new[0] == "file":
            changes.append(WriteFile(path, new[1], new[2], image(old)))
        else:
            changes.append(WriteSymlink(path, new[1], image(old)))
    return changes


def _place() -> tempfile.TemporaryDirectory:
    """A scratch directory, on tmpfs when there is one: the properties do not depend on the file system, and
    fsync there costs nothing, so many examples fit in a test run."""
    shm = "/dev/shm"
    return tempfile.TemporaryDirectory(dir=shm if os.access(shm, os.W_OK) else None)


def _checkout(place: str, tree: dict[bytes, tuple]) -> Path:
    root = Path(place) / "checkout"
    root.mkdir()
    build(root, tree)
    return root


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trees_and_edits())
def test_a_true_plan_is_written_exactly(trees):
    before, after = trees
    with _place() as place:
        root = _checkout(place, before)
        changes = _plan(before, after)
        report = write_checkout(root, changes)
        assert report.ok, report.message()
        assert report.paths("written") == [change.path for change in changes]
        assert snapshot(root) == (after, dirs_of(after))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trees_and_edits(), st.data())
def test_one_wrong_pre_image_refuses_everything(trees, data):
    before, after = trees
    changes = _plan(before, after)
    if not changes:
        return
    wrong = data.draw(st.integers(0, len(changes) - 1))
    change = changes[wrong]
    stale = FileImage(0o644, "0" * 64) if change.expected != FileImage(0o644, "0" * 64) else FileImage(0o755, "1")
    changes[wrong] = type(change)(**{**change.__dict__, "expected": stale})
    with _place() as place:
        root = _checkout(place, before)
        report = write_checkout(root, changes)
        assert report.outcome == "refused"
        assert change.path in dict(report.problems)
        assert snapshot(root) == (before, dirs_of(before))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trees_and_edits(), st.data())
def test_after_an_injected_failure_each_path_is_as_it_was_or_as_planned_as_reported(trees, data):
    before, after = trees
    changes = _plan(before, after)
    with _place() as place:
        counting = InjectingFs()
        assert _counted(place, before, changes, counting).ok
        total = len(counting.calls)
    fail_at = data.draw(st.sets(st.integers(1, max(total, 1)), min_size=1, max_size=2))
    with _place() as place:
        root = _checkout(place, before)
        try:
            report = write_checkout(root, changes, fs=InjectingFs(fail_at))
        except CheckoutError:  # the root itself could not be opened: nothing read or written
            assert snapshot(root) == (before, dirs_of(before))
            return
        leaves, dirs = snapshot(root)
        if report.outcome == "written":
            assert (leaves, dirs) == (after, dirs_of(after))
            return
        expected = dict(before)
        for item in report.files:
            state = after if item.status in ("written", "rollback_failed") else before
            expected.pop(item.path, None)
            if item.path in state:
                expected[item.path] = state[item.path]
        assert leaves == expected, report.message()
        if all(item.status in ("not_written", "rolled_back") for item in report.files):
            assert dirs == dirs_of(before) | set(report.left_dirs), report.message()
        if report.outcome == "refused":
            assert report.paths("not_written") == [change.path for change in changes]


def _counted(place: str, before: dict[bytes, tuple], changes: list, fs: InjectingFs):
    """Run the plan once without failures on its own copy, so ``fs`` counts the calls a clean run makes."""
    root = Path(place) / "count"
    root.mkdir()
    build(root, before)
    return write_checkout(root, changes, fs=fs)
