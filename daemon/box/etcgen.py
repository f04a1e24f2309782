"""The box's ``/etc``: generated per box on the host, mounted read-only (docs/box-contract.md, "Mount layout").

Only what a job needs to name users, resolve ``localhost`` and verify TLS is written; nothing of the host's
``/etc`` is visible except the CA bundle (copied), and, when the box uses the host's ``/usr``, the host's
``ld.so.cache`` (copied, so the dynamic linker finds libraries quickly) and the ``alternatives`` symlinks that
Debian's ``/usr/bin`` points through (only links whose target lies under ``/usr`` are recreated).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from tkbox_daemon.box.backend import BOX_HOME, BOX_JOB_UID

HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
HOST_LD_CACHE = Path("/etc/ld.so.cache")
HOST_ALTERNATIVES = Path("/etc/alternatives")
CA_BUNDLE_IN_ETC = "ssl/certs/ca-certificates.crt"
MAX_COPIED_FILE_BYTES = 32 * 1024 * 1024
MAX_ALTERNATIVES = 4096


def etc_files(hostname: str = "box") -> dict[str, str]:
    """The generated text files, by path relative to ``/etc``."""
    if not hostname or len(hostname) > 63 or not all(c.isalnum() or c == "-" for c in hostname):
        raise ValueError(f"invalid box hostname {hostname!r}")
    uid = BOX_JOB_UID
    return {
        "passwd": (
            "root:x:0:0:root:/root:/usr/sbin/nologin\n"
            f"box:x:{uid}:{uid}:box:{BOX_HOME}:/bin/sh\n"
            "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
        ),
        "group": f"root:x:0:\nbox:x:{uid}:\nnogroup:x:65534:\n",
        # localhost only; the box's own name resolves to loopback too (many tools look it up)
        "hosts": f"127.0.0.1\tlocalhost {hostname}\n::1\tlocalhost ip6-localhost ip6-loopback\n",
        "hostname": f"{hostname}\n",
        "nsswitch.conf": (
            "passwd: files\ngroup: files\nshadow: files\nhosts: files\nnetworks: files\n"
            "protocols: files\nservices: files\nethers: files\nrpc: files\nnetgroup: files\n"
        ),
        "resolv.conf": "",  # no DNS in a box: there is no network to ask
    }


def generate_etc(etc_dir: Path, *, hostname: str = "box", uses_host_usr: bool = True,
                 ca_bundle: Path = HOST_CA_BUNDLE) -> dict[str, object]:
    """Write a fresh ``/etc`` into ``etc_dir`` (created, must not exist yet); return a summary of what went in.

    Files are owned by the daemon's uid (root) and world-readable, so the box reads them but cannot change them.
    """
    etc_dir = Path(etc_dir)
    os.mkdir(etc_dir, 0o755)
    os.chmod(etc_dir, 0o755)
    written: list[str] = []
    for relative, text in etc_files(hostname).items():
        _write_new(etc_dir, relative, text.encode())
        written.append(relative)
    bundle = _read_regular_file(ca_bundle)
    if bundle is None:
        bundle = b""  # an empty bundle: TLS verification fails closed instead of trusting something else
    _write_new(etc_dir, CA_BUNDLE_IN_ETC, bundle)
    written.append(CA_BUNDLE_IN_ETC)
    alternatives = 0
    if uses_host_usr:
        cache = _read_regular_file(HOST_LD_CACHE)
        if cache is not None:
            _write_new(etc_dir, "ld.so.cache", cache)
            written.append("ld.so.cache")
        alternatives = _copy_alternatives(etc_dir / "alternatives")
    return {"files": sorted(written), "ca_bundle_bytes": len(bundle), "alternatives": alternatives}


def _write_new(etc_dir: Path, relative: str, data: bytes) -> None:
    """Create ``etc_dir/relative`` (mode 0644) and its parents (0755); never follows or replaces anything."""
    path = etc_dir / relative
    for parent in reversed(path.relative_to(etc_dir).parents[:-1]):
        directory = etc_dir / parent
        try:
            os.mkdir(directory, 0o755)
            os.chmod(directory, 0o755)
        except FileExistsError:
            if not stat.S_ISDIR(os.lstat(directory).st_mode):
                raise
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        os.fchmod(fd, 0o644)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


def _read_regular_file(path: Path) -> bytes | None:
    """The content of a host file if it is a regular file of bounded size (symlinks are followed: the CA
    bundle's usual place is a real file, but distributions may link it), else None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_COPIED_FILE_BYTES:
            return None
        chunks = []
        remaining = MAX_COPIED_FILE_BYTES + 1
        while remaining > 0:
            chunk = os.read(fd, min(remaining, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            remaining -= len(chunk)
        data = b"".join(chunks)
        return data if len(data) <= MAX_COPIED_FILE_BYTES else None
    finally:
        os.close(fd)


def _copy_alternatives(target: Path) -> int:
    """Recreate Debian's ``/etc/alternatives`` links that point into ``/usr``; returns how many."""
    try:
        entries = sorted(os.scandir(HOST_ALTERNATIVES), key=lambda entry: entry.name)
    except OSError:
        return 0
    os.mkdir(target, 0o755)
    os.chmod(target, 0o755)
    count = 0
    for entry in entries[:MAX_ALTERNATIVES]:
        if not entry.is_symlink() or "/" in entry.name or entry.name.startswith("."):
            continue
        link = os.readlink(entry.path)
        if not link.startswith("/usr/") or "/../" in link or link.endswith("/.."):
            continue
        os.symlink(link, target / entry.name)
        count += 1
    return count
