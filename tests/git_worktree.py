"""What git makes of a work tree, for the tests that check the guest's patch against ``git apply``.

``tree`` lists what git records (files with content and owner-exec bit, symlinks; never ``.git`` or bare
directories); ``apply_patch`` applies a patch to a fresh ``git init`` copy of a base, with an empty HOME and no
system or global config, so nothing of the machine's git setup takes part.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path


def git_env(home: Path) -> dict[str, str]:
    """An environment for git with ``home`` (created) as an empty HOME and no system or global config."""
    home.mkdir(exist_ok=True)
    return {"PATH": os.environ["PATH"], "HOME": str(home), "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": "/dev/null", "LC_ALL": "C", "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
            "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}


def tree(root: Path) -> dict[str, tuple]:
    """What git records of a work tree: files (content, owner-exec bit) and symlinks, never .git or directories."""
    found: dict[str, tuple] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        if Path(dirpath) == root and ".git" in dirnames:
            dirnames.remove(".git")
        for name in filenames + dirnames:
            path = Path(dirpath, name)
            mode = path.lstat().st_mode
            rel = str(path.relative_to(root))
            if stat.S_ISLNK(mode):
                found[rel] = ("link", os.readlink(path))
            elif stat.S_ISREG(mode):
                found[rel] = ("file", path.read_bytes(), bool(mode & stat.S_IXUSR))
    return found


def apply_patch(base: Path, patch: bytes, into: Path, *, drop_empty_dirs: bool = False) -> None:
    """``git apply`` ``patch`` to a ``git init`` copy of ``base`` at ``into`` (which must not exist);
    ``drop_empty_dirs``: first remove the copy's empty directories, as a git checkout of the base would have none."""
    shutil.copytree(base, into, symlinks=True)
    if drop_empty_dirs:
        for dirpath, _, _ in sorted(os.walk(into), key=lambda entry: -len(entry[0])):
            if Path(dirpath) != into and not os.listdir(dirpath):
                os.rmdir(dirpath)
    env = git_env(into.parent / "home")
    subprocess.run(["git", "init", "-q", str(into)], check=True, env=env)
    if patch:
        result = subprocess.run(["git", "apply", "-"], input=patch, cwd=into, env=env, capture_output=True)
        assert result.returncode == 0, result.stderr.decode(errors="replace") + "\n" + patch.decode(errors="replace")
