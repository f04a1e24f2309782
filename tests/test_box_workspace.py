"""The workspace base copy: what is copied from a plain directory and from a git work tree, credential
exclusion, symlink safety, modes, ownership and limits."""

from __future__ import annotations

import os
import shutil
import socket
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tkbox_daemon.box.workspace import WorkspaceError, WorkspaceTooLarge, build_base

BOX_UID = 100_321


def _tree(root: Path) -> dict[str, str]:
    """relative path -> 'file:<content>' / 'link:<target>' for everything under root."""
    out = {}
    for path in sorted(root.rglob("*")):
        relative = str(path.relative_to(root))
        if path.is_symlink():
            out[relative] = "link:" + os.readlink(path)
        elif path.is_file():
            out[relative] = "file:" + path.read_text()
    return out


def _git(checkout: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", "-C", str(checkout), *args],
                   check=True, capture_output=True)


def test_plain_directory_copies_files_keeps_exec_bits_and_owner(tmp_path):
    source = tmp_path / "src"
    (source / "pkg").mkdir(parents=True)
    (source / "pkg" / "mod.py").write_text("x = 1\n")
    (source / "run.sh").write_text("#!/bin/sh\n")
    os.chmod(source / "run.sh", 0o4775)  # set-uid and group-write are not kept
    os.chmod(source / "pkg" / "mod.py", 0o600)
    summary = build_base(source, tmp_path / "base", box_uid=BOX_UID)
    base = tmp_path / "base"
    assert _tree(base) == {"pkg/mod.py": "file:x = 1\n", "run.sh": "file:#!/bin/sh\n"}
    assert stat.S_IMODE((base / "run.sh").stat().st_mode) == 0o755
    assert stat.S_IMODE((base / "pkg" / "mod.py").stat().st_mode) == 0o644
    for path in (base, base / "pkg", base / "run.sh", base / "pkg" / "mod.py"):
        assert path.stat().st_uid == BOX_UID and path.stat().st_gid == BOX_UID
    assert summary["source"] == "directory" and summary["files"] == 2 and summary["bytes"] == 16


def test_credentials_and_git_metadata_never_reach_the_copy(tmp_path):
    source = tmp_path / "src"
    for relative in (".env", "app/.env.local", "keys/deploy.pem", ".ssh/id_ed25519", ".aws/credentials",
                     "app/main.py", "vendor/.git/config", "sub/.git/HEAD", "README.md"):
        (source / relative).parent.mkdir(parents=True, exist_ok=True)
        (source / relative).write_text("content")
    summary = build_base(source, tmp_path / "base", box_uid=None)
    assert sorted(_tree(tmp_path / "base")) == ["README.md", "app/main.py"]
    reasons = {entry["path"]: entry["reason"] for entry in summary["excluded"]}
    assert reasons[".env"] == reasons["keys/deploy.pem"] == reasons[".ssh/id_ed25519"] == "credential file"
    assert reasons["vendor/.git"] == reasons["sub/.git"] == "git metadata"


def test_symlinks_are_copied_as_links_and_never_followed(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("host secret")
    source = tmp_path / "src"
    source.mkdir()
    (source / "real.txt").write_text("real")
    os.symlink(outside / "secret.txt", source / "to-secret")
    os.symlink(outside, source / "to-outside-dir")
    os.symlink("real.txt", source / "relative-link")
    os.symlink("../../etc/passwd", source / "climbing-link")
    build_base(source, tmp_path / "base", box_uid=BOX_UID)
    base = tmp_path / "base"
    assert _tree(base) == {"climbing-link": "link:../../etc/passwd", "real.txt": "file:real",
                           "relative-link": "link:real.txt", "to-outside-dir": f"link:{outside}",
                           "to-secret": f"link:{outside / 'secret.txt'}"}
    assert os.lstat(base / "to-secret").st_uid == BOX_UID
    assert not any("host secret" in value for value in _tree(base).values())


def test_a_git_listing_through_a_symlinked_parent_is_refused(tmp_path):
    checkout = tmp_path / "repo"
    (checkout / "docs").mkdir(parents=True)
    (checkout / "docs" / "a.md").write_text("a")
    _git(checkout, "init", "-q")
    _git(checkout, "add", "docs/a.md")
    _git(checkout, "commit", "-q", "-m", "x")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "a.md").write_text("host file")
    shutil.rmtree(checkout / "docs")
    os.symlink(outside, checkout / "docs")  # the index still lists docs/a.md
    summary = build_base(checkout, tmp_path / "base", box_uid=None)
    assert _tree(tmp_path / "base") == {"docs": f"link:{outside}"}  # git lists the new link itself: a link
    assert summary["excluded"] == [{"path": "docs/a.md",
                                    "reason": "path runs through a symlink or an unreadable directory"}]


def test_special_files_are_skipped(tmp_path):
    source = tmp_path / "src"
    source.mkdir()
    os.mkfifo(source / "fifo")
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(source / "sock"))
        (source / "ok.txt").write_text("ok")
        summary = build_base(source, tmp_path / "base", box_uid=None)
    assert _tree(tmp_path / "base") == {"ok.txt": "file:ok"}
    assert {entry["reason"] for entry in summary["excluded"]} == {"special file (socket, device or FIFO)"}


def test_limits_raise_and_leave_no_partial_copy(tmp_path):
    source = tmp_path / "src"
    source.mkdir()
    for index in range(5):
        (source / f"f{index}").write_text("0123456789")
    with pytest.raises(WorkspaceTooLarge):
        build_base(source, tmp_path / "base", box_uid=None, max_files=4)
    assert not (tmp_path / "base").exists()
    with pytest.raises(WorkspaceTooLarge):
        build_base(source, tmp_path / "base", box_uid=None, max_bytes=45)
    assert not (tmp_path / "base").exists()
    assert build_base(source, tmp_path / "base", box_uid=None, max_files=5, max_bytes=50)["bytes"] == 50


def test_the_base_dir_must_be_new(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "base").mkdir()
    with pytest.raises(FileExistsError):
        build_base(tmp_path / "src", tmp_path / "base", box_uid=None)


def test_git_tree_copies_tracked_and_unignored_files_only(tmp_path):
    checkout = tmp_path / "repo"
    checkout.mkdir()
    _git(checkout, "init", "-q")
    (checkout / ".gitignore").write_text(".env\n*.log\nbuild/\n")
    (checkout / "app.py").write_text("app")
    (checkout / "server.key").write_text("tracked secret")
    (checkout / ".env").write_text("TOKEN=x")
    (checkout / "debug.log").write_text("ignored")
    (checkout / "build").mkdir()
    (checkout / "build" / "out").write_text("ignored")
    _git(checkout, "add", ".gitignore", "app.py", "server.key")
    _git(checkout, "commit", "-q", "-m", "x")
    (checkout / "new.py").write_text("untracked")
    (checkout / "nested").mkdir()
    _git(checkout / "nested", "init", "-q")
    (checkout / "nested" / "inner.txt").write_text("nested repo")
    summary = build_base(checkout, tmp_path / "base", box_uid=BOX_UID)
    assert sorted(_tree(tmp_path / "base")) == [".gitignore", "app.py", "new.py"]
    assert summary["source"] == "git"
    reasons = {entry["path"]: entry["reason"] for entry in summary["excluded"]}
    assert reasons == {"server.key": "credential file", "nested/": "nested git repository (not copied)"}


def test_git_runs_without_the_users_config_and_without_repository_hooks(tmp_path):
    home = Path(os.environ["HOME"])  # conftest points HOME into this test's directory
    (home / "global-ignore").write_text("notes.md\n")
    (home / ".gitconfig").write_text(f"[core]\n\texcludesFile = {home / 'global-ignore'}\n")
    checkout = tmp_path / "repo"
    checkout.mkdir()
    _git(checkout, "init", "-q")
    marker = tmp_path / "fsmonitor-ran"
    hook = tmp_path / "hook.sh"
    hook.write_text(f"#!/bin/sh\ntouch {marker}\n")
    os.chmod(hook, 0o755)
    _git(checkout, "config", "core.fsmonitor", str(hook))
    (checkout / "notes.md").write_text("not ignored by the repository")
    build_base(checkout, tmp_path / "base", box_uid=None)
    assert sorted(_tree(tmp_path / "base")) == ["notes.md"]
    assert not marker.exists()


def test_git_runs_as_the_checkouts_owner(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root to own a checkout as another user")
    with tempfile.TemporaryDirectory() as scratch:  # under /tmp, so the owner can reach its checkout
        checkout = Path(scratch) / "repo"
        checkout.mkdir()
        _git(checkout, "init", "-q")
        (checkout / "a.txt").write_text("a")
        _git(checkout, "add", "a.txt")
        _git(checkout, "commit", "-q", "-m", "x")
        (checkout / "b.txt").write_text("b")
        for path in [checkout, *checkout.rglob("*")]:
            os.lchown(path, BOX_UID + 1, BOX_UID + 1)
        os.chmod(scratch, 0o755)
        summary = build_base(checkout, tmp_path / "base", box_uid=BOX_UID)
    assert sorted(_tree(tmp_path / "base")) == ["a.txt", "b.txt"] and summary["source"] == "git"


def test_a_broken_git_tree_is_an_error(tmp_path):
    checkout = tmp_path / "repo"
    checkout.mkdir()
    (checkout / ".git").write_text("gitdir: /nonexistent\n")
    with pytest.raises(WorkspaceError):
        build_base(checkout, tmp_path / "base", box_uid=None)
    assert not (tmp_path / "base").exists()


SEGMENTS = st.sampled_from(["a", "src", ".env", ".env.prod", "x.pem", ".ssh", "id_rsa", ".aws", "credentials",
                            "config", "k.key", "notes.txt", ".git", ".npmrc", "service-account-1.json", ".kube",
                            "main.py", "secrets"])
# Which of SEGMENTS the docs call credentials (docs/apply.md, docs/policy.md): these names anywhere in a path, and
# everything under these directories.
CREDENTIAL_SEGMENTS = {".env", ".env.prod", "x.pem", "id_rsa", "k.key", ".npmrc", "service-account-1.json"}
CREDENTIAL_DIRECTORIES = {".ssh", ".aws", ".kube"}
PATHS = st.lists(st.lists(SEGMENTS, min_size=1, max_size=3).filter(lambda parts: parts[0] != ".git").map("/".join),
                 min_size=1, max_size=12, unique=True)  # a top-level .git would make it a (broken) git tree


@given(paths=PATHS)
def test_every_path_is_copied_exactly_when_the_docs_do_not_call_it_a_credential(paths):
    files = [p for p in paths if not any(other.startswith(p + "/") for other in paths)]  # files, not dirs
    with tempfile.TemporaryDirectory() as scratch:
        source = Path(scratch) / "src"
        for relative in files:
            try:
                (source / relative).parent.mkdir(parents=True, exist_ok=True)
                (source / relative).write_text(relative)
            except (FileExistsError, NotADirectoryError):
                files.remove(relative)  # a prefix of it is already a file
        source.mkdir(exist_ok=True)
        build_base(source, Path(scratch) / "base", box_uid=None)
        copied = _tree(Path(scratch) / "base")
    for relative in files:
        parts = relative.split("/")
        documented = any(part in CREDENTIAL_SEGMENTS for part in parts) or any(
            part in CREDENTIAL_DIRECTORIES for part in parts[:-1])
        expected = not documented and ".git" not in parts
        assert (relative in copied) == expected, relative
        if expected:
            assert copied[relative] == "file:" + relative
