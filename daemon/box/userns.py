"""The box's user namespace: two users, each mapped to its own host uid, the map written by root.

An unprivileged process can map only its own uid into a namespace it creates. A box needs two: the guest agent
as in-box root (host ``box_uid``) and every job as in-box 1000 (host ``job_uid``), so that the kernel's own
rules (different uid, no capability) keep a job away from the guest. The launchers are root in the host's user
namespace, so they write the two-entry maps for a namespace created by a process running as ``box_uid`` (which
makes ``box_uid`` its owner: bwrap, running as that uid, may then enter it with ``--userns``).

``setgroups`` stays allowed in the namespace: the guest, holding CAP_SETGID there, clears the supplementary
groups of every exec it starts.
"""

from __future__ import annotations

import contextlib
import os

from tkbox_daemon.box.backend import BOX_AGENT_UID, BOX_JOB_UID, BoxSpec, check_box_uids
from tkbox_daemon.box.syscalls import CLONE_NEWUSER, unshare, write_proc_file


def id_map(spec: BoxSpec) -> str:
    """The uid (and gid) map of a box: in-box root to the guest's host uid, in-box 1000 to the job's."""
    return id_map_of(spec.box_uid, spec.job_uid)


def id_map_of(box_uid: int, job_uid: int) -> str:
    return f"{BOX_AGENT_UID} {box_uid} 1\n{BOX_JOB_UID} {job_uid} 1\n"


def write_id_maps(pid: int, spec: BoxSpec) -> None:
    """Write ``pid``'s user namespace maps (the caller is root in the parent namespace)."""
    write_proc_file(f"/proc/{pid}/uid_map", id_map(spec))
    write_proc_file(f"/proc/{pid}/gid_map", id_map(spec))


def create_user_namespace(spec: BoxSpec) -> int:
    """A new user namespace owned by ``spec.box_uid`` with the box's two-entry maps; returns an fd of it."""
    return box_user_namespace(spec.box_uid, spec.job_uid)


def box_user_namespace(box_uid: int, job_uid: int) -> int:
    """``create_user_namespace`` from the two uids alone, so the daemon can make it while the box's layers are
    built (``BoxSpec.userns_fd``). Blocks briefly (a fork): run it in a thread."""
    check_box_uids(box_uid, job_uid)  # what BoxSpec checks, before anything exists
    mapping = id_map_of(box_uid, job_uid)
    return held_user_namespace(mapping, mapping, owner_uid=box_uid)


def held_user_namespace(uid_map: str, gid_map: str, *, owner_uid: int | None = None) -> int:
    """A new user namespace with these maps; returns an fd of it.

    A short-lived child (first dropping to ``owner_uid`` with no groups, which makes that uid the namespace's
    owner; else the namespace is root's) unshares; this process (root) writes the maps and opens the namespace,
    which lives on as long as the returned fd is open. The child never runs anything else. Safe to call from
    several threads at once (the daemon makes a box's namespaces beside each other).
    """
    ready_r, ready_w = os.pipe2(os.O_CLOEXEC)
    done_r, done_w = os.pipe2(os.O_CLOEXEC)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child, observed by the e2e tests
        status = 1
        try:
            os.close(ready_r)
            os.close(done_w)
            if owner_uid is not None:
                os.setgroups([])
                os.setresgid(owner_uid, owner_uid, owner_uid)
                os.setresuid(owner_uid, owner_uid, owner_uid)
            unshare(CLONE_NEWUSER)
            os.write(ready_w, b"1")
            os.read(done_r, 1)  # hold the namespace until the parent has opened it
            status = 0
        finally:
            os._exit(status)
    os.close(ready_w)
    os.close(done_r)
    try:
        if os.read(ready_r, 1) != b"1":
            raise OSError("the user namespace helper ended before it made the namespace")
        write_proc_file(f"/proc/{pid}/uid_map", uid_map)
        write_proc_file(f"/proc/{pid}/gid_map", gid_map)
        return os.open(f"/proc/{pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
    finally:
        os.close(ready_r)
        # A byte, not only EOF: a process forked meanwhile by another thread (another helper, a box's launcher)
        # holds a copy of done_w until it exits or closes it, and two helpers would each wait for the other.
        with contextlib.suppress(OSError):  # the helper is gone already (EPIPE)
            os.write(done_w, b"1")
        os.close(done_w)
        os.waitpid(pid, 0)
