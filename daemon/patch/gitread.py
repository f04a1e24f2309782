"""Git's own reading of a patch, as a cross-check of the strict parser, and git's own result in a scratch tree.

``cross_check(patch, parsed)`` runs ``git apply --numstat --summary -z`` on the patch and refuses unless git reads
exactly what ``gitparse`` read: the same sections in the same order, paths, additions and deletions, modes,
renames and copies with their similarity, and added/removed line counts (binary as binary). It compares git's
output byte for byte with the output git would give for the parser's reading (``expected_output``), and on a
difference names the first section that differs.

``apply_with_git(patch, pre_images)`` writes the given pre-image files into an empty scratch work tree, runs
``git apply`` there (never ``--index``), and returns every file and symlink the tree then holds, so a caller can
compare git's result with ``hunks.apply_to_tree``'s.

Git runs in a clean room: a fresh git directory built here (no hooks, no template, a three-line config) outside the
work tree, ``HOME`` and ``XDG_CONFIG_HOME`` empty directories, ``GIT_CONFIG_NOSYSTEM=1``,
``GIT_CONFIG_GLOBAL=/dev/null``, ``GIT_ATTR_NOSYSTEM=1``, an ``info/attributes`` that unsets every attribute that
changes content (``text eol crlf ident filter working-tree-encoding``; it outranks any ``.gitattributes`` among
the pre-images), no variable of the caller's environment but a fixed ``PATH``, protections for ``.git`` on HFS+
and NTFS on, a time limit (``limits.PATCH_GIT_TIME``) and a bound on what it may print. No filter, hook or LFS
program can run: there is no config naming one.
"""

from __future__ import annotations

import os
import selectors
import shutil
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from .. import limits
from . import pathrules
from .operations import MODE_EXEC, MODE_FILE, MODE_LINK, Action, ParsedPatch, PatchRefused, TreeEntry, shown

GIT_CONFIG = ("-c", "core.attributesFile=/dev/null", "-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false",
              "-c", "core.autocrlf=false", "-c", "core.safecrlf=false", "-c", "core.eol=lf", "-c", "core.symlinks=true",
              "-c", "core.fileMode=true", "-c", "core.ignoreCase=false", "-c", "core.precomposeUnicode=false",
              "-c", "core.protectHFS=true", "-c", "core.protectNTFS=true", "-c", "core.quotePath=true",
              "-c", "apply.whitespace=nowarn")
NO_ATTRIBUTES = b"* -text -eol -crlf -ident -filter -working-tree-encoding\n"
SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"
STDERR_KEPT = 4 * limits.KIB
READ_CHUNK = 64 * limits.KIB
SHM = "/dev/shm"
SHM_MIN_FREE = 1 * limits.GIB  # below this, scratch trees go to the disk instead


class GitUnavailable(Exception):
    """Git could not be run at all, so nothing was checked: the caller must not go on as if it had been."""


@dataclass(frozen=True, slots=True)
class GitRun:
    returncode: int
    stdout: bytes
    stderr: bytes

    def error_line(self) -> str:
        lines = [line for line in self.stderr.splitlines() if line.strip()]
        return shown(lines[0]) if lines else f"git exited with status {self.returncode}"


def find_git() -> str:
    """The git program on the daemon's own PATH, as an absolute path (it then runs with ``SAFE_PATH``)."""
    found = shutil.which("git")
    if found is None:
        raise GitUnavailable("git is needed to cross-check a patch and was not found on PATH; install git")
    return os.path.abspath(found)


def scratch_parent() -> str | None:
    """Where scratch trees go: ``/dev/shm`` when it is a writable tmpfs (creating a thousand small files there
    takes a tenth of the time it takes on a disk's journal), else the system's temporary directory. What is
    written there is bounded (the pre-images' read budget and the patch)."""
    try:
        if os.statvfs(SHM).f_bavail * os.statvfs(SHM).f_frsize > SHM_MIN_FREE and os.access(SHM, os.W_OK | os.X_OK):
            return SHM
    except OSError:
        pass
    return None


@contextmanager
def _clean_room() -> Iterator[tuple[Path, dict[str, str]]]:
    """(an empty work tree, git's environment), in a temporary directory (0700) removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="tkbox-gitread-", dir=scratch_parent()) as root_name:
        root = Path(root_name)
        git_dir, work, home = root / "git", root / "work", root / "home"
        for directory in (git_dir / "objects", git_dir / "refs", git_dir / "info", work, home / ".config"):
            directory.mkdir(parents=True)
        (git_dir / "HEAD").write_bytes(b"ref: refs/heads/main\n")
        (git_dir / "config").write_bytes(b"[core]\n\trepositoryformatversion = 0\n\tbare = false\n")
        (git_dir / "info" / "attributes").write_bytes(NO_ATTRIBUTES)
        env = {"PATH": SAFE_PATH, "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"),
               "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_ATTR_NOSYSTEM": "1",
               "GIT_DIR": str(git_dir), "GIT_WORK_TREE": str(work), "GIT_CEILING_DIRECTORIES": str(root),
               "GIT_TERMINAL_PROMPT": "0", "GIT_OPTIONAL_LOCKS": "0", "GIT_NO_REPLACE_OBJECTS": "1",
               "LC_ALL": "C", "LANG": "C"}
        yield work, env


def _kill(proc: subprocess.Popen[bytes]) -> None:
    proc.kill()
    proc.wait()


def run_git(args: list[str], *, cwd: Path, env: dict[str, str], timeout: float, max_stdout: int) -> GitRun:
    """Run git with ``args``; stdout bounded by ``max_stdout`` bytes, stderr's start kept, ``timeout`` seconds in
    all. Past the time: ``PatchRefused`` (``limit:patch_git_time``); past the output: ``PatchRefused``."""
    argv = [find_git(), *GIT_CONFIG, *args]
    try:
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
    except OSError as exc:
        raise GitUnavailable(f"git could not be started: {exc.strerror}") from None
    deadline = time.monotonic() + timeout
    out, err = bytearray(), bytearray()
    assert proc.stdout is not None and proc.stderr is not None
    with proc, selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ, out)
        selector.register(proc.stderr, selectors.EVENT_READ, err)
        while selector.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                _kill(proc)
                raise PatchRefused(f"limit:{limits.PATCH_GIT_TIME.name}", limits.PATCH_GIT_TIME.refusal(
                    "git did not finish reading the patch"))
            for key, _ in selector.select(left):
                chunk = os.read(key.fd, READ_CHUNK)
                if not chunk:
                    selector.unregister(key.fileobj)
                    continue
                buffer = key.data
                if buffer is err:
                    buffer += chunk[:max(0, STDERR_KEPT - len(buffer))]
                    continue
                buffer += chunk
                if len(buffer) > max_stdout:
                    _kill(proc)
                    raise PatchRefused("git-reads-differently", "git prints more about the patch than the host's "
                                       "reading of it can account for")
        returncode = proc.wait(timeout=max(0.0, deadline - time.monotonic()) + 1)
    return GitRun(returncode, bytes(out), bytes(err))


def _write_patch(work: Path, patch: bytes) -> str:
    path = work.parent / "patch"
    path.write_bytes(patch)
    return str(path)


def read_with_git(patch: bytes, *, timeout: float = limits.PATCH_GIT_TIME.default) -> bytes:
    """What ``git apply --numstat --summary -z`` prints for ``patch``; ``PatchRefused`` when git cannot read it."""
    with _clean_room() as (work, env):
        run = run_git(["apply", "--numstat", "--summary", "-z", "--allow-empty", _write_patch(work, patch)],
                      cwd=work, env=env, timeout=timeout, max_stdout=2 * len(patch) + 4 * limits.KIB)
    if run.returncode != 0:
        raise PatchRefused("git-refuses", f"git cannot read the patch: {run.error_line()}")
    return run.stdout


def _rename_line(kind: bytes, old: bytes, new: bytes, score: int) -> bytes:
    """apply.c ``show_rename_copy``: the leading directories both names share are written once, in braces."""
    start = 0
    while True:
        old_slash, new_slash = old.find(b"/", start), new.find(b"/", start)
        if old_slash < 0 or new_slash < 0 or old_slash != new_slash or old[start:old_slash] != new[start:new_slash]:
            break
        start = old_slash + 1
    if start:
        return b" %s %s{%s => %s} (%d%%)\n" % (kind, old[:start], old[start:], new[start:], score)
    return b" %s %s => %s (%d%%)\n" % (kind, old, new, score)


def expected_numstat(parsed: ParsedPatch) -> list[bytes]:
    """Per section, the ``--numstat -z`` record git prints when it reads the patch as the parser did."""
    records = []
    for op in parsed.operations:
        counts = b"-\t-\t" if op.binary is not None else b"%d\t%d\t" % (op.added, op.removed)
        records.append(counts + op.path + b"\0")
    return records


def expected_summary(parsed: ParsedPatch) -> list[bytes]:
    """Per section, the ``--summary`` lines git prints when it reads the patch as the parser did."""
    sections = []
    for op in parsed.operations:
        changed = op.old_mode is not None and op.new_mode is not None and op.old_mode != op.new_mode
        if op.action in (Action.ADD, Action.SYMLINK_ADD):
            lines = b" create mode %06o %s\n" % (op.new_mode, op.new_path)
        elif op.action in (Action.DELETE, Action.SYMLINK_DELETE):
            lines = b" delete mode %06o %s\n" % (op.old_mode, op.old_path)
        elif op.action in (Action.RENAME, Action.COPY):
            assert op.old_path is not None and op.new_path is not None and op.similarity is not None
            lines = _rename_line(op.action.value.encode(), op.old_path, op.new_path, op.similarity)
            if changed:
                lines += b" mode change %06o => %06o\n" % (op.old_mode, op.new_mode)
        else:
            lines = b" mode change %06o => %06o %s\n" % (op.old_mode, op.new_mode, op.path) if changed else b""
        sections.append(lines)
    return sections


def expected_output(parsed: ParsedPatch) -> bytes:
    return b"".join(expected_numstat(parsed)) + b"".join(expected_summary(parsed))


def _first_difference(parsed: ParsedPatch, output: bytes) -> str:
    at = 0
    for op, record in zip(parsed.operations, expected_numstat(parsed), strict=True):
        if not output.startswith(record, at):
            theirs = output[at:output.find(b"\0", at) + 1 if b"\0" in output[at:] else len(output)]
            return (f"section at line {op.line} ({shown(op.path)}): git reads {shown(theirs) or 'nothing'}, the host "
                    f"reads {shown(record)} (added, removed, path)")
        at += len(record)
    for op, lines in zip(parsed.operations, expected_summary(parsed), strict=True):
        if not output.startswith(lines, at):
            theirs = output[at:at + max(len(lines), 80)].split(b"\n")[0]
            ours = lines.rstrip(b"\n")
            return (f"section at line {op.line} ({shown(op.path)}): git's summary says {shown(theirs) or 'nothing'}, "
                    f"the host's reading says {shown(ours) or 'nothing'}")
        at += len(lines)
    return f"git reads more than the host: {shown(output[at:at + 120])}"


def compare_with_git(parsed: ParsedPatch, output: bytes) -> None:
    """Refuse unless ``output`` (from ``read_with_git``) is exactly what git prints for the parser's reading."""
    if output != expected_output(parsed):
        raise PatchRefused("git-reads-differently", f"git reads the patch differently: "
                           f"{_first_difference(parsed, output)}")


def cross_check(patch: bytes, parsed: ParsedPatch, *, timeout: float = limits.PATCH_GIT_TIME.default) -> None:
    """``PatchRefused`` unless git reads ``patch`` exactly as ``parsed`` says; ``GitUnavailable`` without git."""
    compare_with_git(parsed, read_with_git(patch, timeout=timeout))


# -- git's result in a scratch tree ------------------------------------------------------------------------------


def _write_entry(work: Path, path: bytes, entry: TreeEntry) -> None:
    target = os.path.join(os.fsencode(work), path)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    if entry.mode == MODE_LINK:
        os.symlink(entry.data, target)
        return
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        _write_all(fd, entry.data)
        os.fchmod(fd, 0o755 if entry.mode == MODE_EXEC else 0o644)
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _read_tree(work: Path, max_bytes: int) -> dict[bytes, TreeEntry]:
    """Every file and symlink under ``work`` (nothing followed), as git records them."""
    found: dict[bytes, TreeEntry] = {}
    total = 0
    root = os.fsencode(work)
    for dirpath, dirnames, filenames in os.walk(root):
        for name in sorted(filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]):
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, root)
            info = os.lstat(full)
            if stat.S_ISLNK(info.st_mode):
                data, mode = os.readlink(full), MODE_LINK
            elif stat.S_ISREG(info.st_mode):
                total += info.st_size
                if total > max_bytes:
                    raise PatchRefused("git-result-too-big", "git's result in the scratch tree is bigger than the "
                                       "pre-images and the patch can explain")
                with open(os.open(full, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC), "rb") as handle:
                    data = handle.read(max_bytes + 1)
                mode = MODE_EXEC if info.st_mode & stat.S_IXUSR else MODE_FILE
            else:
                raise PatchRefused("git-result-strange", f"git left {shown(rel)} in the scratch tree, neither a "
                                   "file nor a symlink")
            found[rel] = TreeEntry(mode, data)
    return found


def apply_with_git(patch: bytes, pre_images: Mapping[bytes, TreeEntry], *,
                   timeout: float = limits.PATCH_GIT_TIME.default) -> dict[bytes, TreeEntry]:
    """Git's result of ``patch`` over a scratch tree holding exactly ``pre_images``: the whole tree afterwards.

    Each pre-image path must pass ``pathrules`` and none may be the parent directory of another (``ValueError``).
    ``PatchRefused`` when git refuses to apply the patch there; ``GitUnavailable`` without git.
    """
    paths = set(pre_images)
    for path, entry in pre_images.items():
        problem = pathrules.path_problem(path, entry.mode)
        if problem or entry.mode not in (MODE_FILE, MODE_EXEC, MODE_LINK):
            raise ValueError(f"pre-image {shown(path)}: {problem.message if problem else 'not a file mode'}")
        parent = path.rpartition(b"/")[0]
        while parent:
            if parent in paths:
                raise ValueError(f"pre-image {shown(parent)} is both a file and a directory")
            parent = parent.rpartition(b"/")[0]
    budget = len(patch) + sum(len(entry.data) for entry in pre_images.values()) + limits.PATCH_LITERALS_TOTAL.default
    with _clean_room() as (work, env):
        for path, entry in sorted(pre_images.items()):
            _write_entry(work, path, entry)
        run = run_git(["apply", "--allow-empty", "--whitespace=nowarn", _write_patch(work, patch)], cwd=work,
                      env=env, timeout=timeout, max_stdout=4 * limits.KIB)
        if run.returncode != 0:
            raise PatchRefused("git-apply-refuses", f"git cannot apply the patch to the pre-images: "
                               f"{run.error_line()}")
        return _read_tree(work, budget)
