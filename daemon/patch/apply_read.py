"""Reading a box's saved patch for ``tkbox apply``: parse it strictly, have git read it the same way, and plan
each file against the checkout as it is now. Blocking (files, a git process): run it in a thread.

``read_box_patch`` refuses the patch as a whole (``PatchRefused``, ``ReadRefused``) or returns one ``FilePlan`` per
file, whose ``checkout`` says whether the checkout still holds the file's pre-image. A path the checkout cannot be
read at safely (below a symlink, a fifo, over a bound) is that file's problem, not the whole patch's.
``check_scratch_result`` has git apply the patch in a scratch copy of the included files' pre-images (no user
config, hooks, attributes or filters) and says how its result differs from the plans', or "".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from . import gitread
from .apply_plan import FilePlan, deleted_paths, group_by_path, old_paths, paths_to_read, plan_file
from .checkout_fs import CheckoutRefused, read_preimages
from .checkout_plan import ABSENT, Absent, Delete, FileImage, PreImage, SymlinkImage, WriteFile, WriteSymlink
from .gitparse import parse_patch
from .gitsection import BaseLookup
from .operations import MODE_LINK, ParsedPatch, PatchRefused, TreeEntry, shown


class ReadRefused(Exception):
    """The patch is refused before any file is planned; ``reason`` and ``hint`` say why and what to do."""

    def __init__(self, reason: str, hint: str = "") -> None:
        super().__init__(reason)
        self.reason = reason
        self.hint = hint


@dataclass(frozen=True)
class BoxPatchReading:
    data: bytes
    parsed: ParsedPatch
    plans: tuple[FilePlan, ...]
    images: dict[bytes, PreImage]


def base_lookup(base_dir: Path) -> BaseLookup:
    """What the box's base copy holds at a path (its git mode, or None), read without following a link."""

    def lookup(path: bytes) -> int | None:
        try:
            image = read_preimages(base_dir, [path])[path]
        except (CheckoutRefused, ValueError, OSError):
            return None
        if isinstance(image, FileImage):
            return 0o100000 | image.mode
        return MODE_LINK if isinstance(image, SymlinkImage) else None

    return lookup


def _below(path: bytes, parents: set[bytes]) -> bool:
    return any(path[:index] in parents for index in range(len(path)) if path[index:index + 1] == b"/")


def _images(checkout: Path, paths: list[bytes], deleted: set[bytes]) -> tuple[dict[bytes, PreImage], dict[bytes, str]]:
    """Every path's pre-image, and the paths that cannot be read safely with why. A path below a file or symlink
    the patch deletes is absent (the writer deletes that first, and checks the path again before writing it)."""
    try:
        return read_preimages(checkout, paths), {}
    except CheckoutRefused as exc:
        problems = {path: text for path, text in exc.problems}
    below_deleted = {path for path in problems if _below(path, deleted)}
    problems = {path: text for path, text in problems.items() if path not in below_deleted}
    rest = [path for path in paths if path not in problems and path not in below_deleted]
    try:
        return {**read_preimages(checkout, rest), **{path: ABSENT for path in below_deleted}}, problems
    except CheckoutRefused as exc:  # the checkout changed between the two reads
        raise ReadRefused(f"the checkout changes while it is read: {exc}",
                          "wait until nothing writes to the checkout, then apply again") from None


def read_box_patch(data: bytes, base_dir: Path, checkout: Path) -> BoxPatchReading:
    parsed = parse_patch(data, base=base_lookup(base_dir))
    try:
        gitread.cross_check(data, parsed)
    except gitread.GitUnavailable as exc:
        raise ReadRefused(f"git could not be run to read the patch as tkbox does ({exc}), so it is not applied",
                          "install git (apt-get install git) on the host") from None
    groups = group_by_path(parsed.operations)
    images, problems = _images(checkout, paths_to_read(parsed.operations), deleted_paths(parsed.operations))
    base_images: dict[bytes, PreImage] = {}
    if base_dir.is_dir():  # gone when the box's layers were removed: the patch's blob ids are then all there is
        try:
            base_images = read_preimages(base_dir, old_paths(parsed.operations))
        except CheckoutRefused as exc:
            raise ReadRefused(f"the box's base copy cannot be read: {exc}", "remove the box (tkbox rm)") from None
    plans = []
    for group in groups:
        blocked = [f"{shown(path)}: {problems[path]}" for operation in group for path in operation.paths
                   if path in problems]
        plans.append(FilePlan(group, "; ".join(blocked), ()) if blocked else plan_file(group, images, base_images))
    return BoxPatchReading(data, parsed, tuple(plans), images)


def check_scratch_result(reading: BoxPatchReading, plans: Sequence[FilePlan]) -> str:
    """Apply the whole patch with git to a scratch copy of its pre-images; "" when git's result for every path
    the ``plans`` change is what they would write, else the first differences."""
    pre_images = {path: _tree_entry(image) for path, image in reading.images.items()
                  if not isinstance(image, Absent)}
    try:
        result = gitread.apply_with_git(reading.data, pre_images)
    except gitread.GitUnavailable as exc:
        return f"git could not be run ({exc})"
    except PatchRefused as exc:
        return str(exc)
    differences = []
    for plan in plans:
        for change in plan.changes:
            got = result.get(change.path)
            if isinstance(change, Delete):
                wanted = None
            elif isinstance(change, WriteFile):
                wanted = TreeEntry(0o100000 | change.mode, change.content)
            else:
                assert isinstance(change, WriteSymlink)
                wanted = TreeEntry(MODE_LINK, change.target)
            if got != wanted:
                differences.append(f"{shown(change.path)} ({_shown_image(got)} by git, {_shown_image(wanted)} by "
                                   "tkbox)")
    return "; ".join(differences[:5])


def _tree_entry(image: FileImage | SymlinkImage) -> TreeEntry:
    if isinstance(image, SymlinkImage):
        return TreeEntry(MODE_LINK, image.target)
    assert image.content is not None  # read_preimages keeps every file's bytes
    return TreeEntry(0o100000 | image.mode, image.content)


def _shown_image(entry: TreeEntry | None) -> str:
    if entry is None:
        return "absent"
    return f"a symlink to {shown(entry.data)}" if entry.mode == MODE_LINK else \
        f"a file of {len(entry.data)} bytes, mode {entry.mode:o}"
