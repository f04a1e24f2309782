"""Host uids are claimed host-wide, end to end: two real ``tkbox daemon`` processes of two "users" (their own HOME,
XDG directories and signer) run a real box each at the same time, and the boxes run as different host uids — read
from ``/proc/<box pid>/status`` on the host — each claimed in the one registry ``/var/lib/tkbox/uids`` in the name
of its own daemon; removing a box gives its claims back and leaves the other daemon's alone."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import stat
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from e2e.daemon_process import make_checkout, wait_for_daemon
from e2e.signer_process import TKBOX, tkbox, tkbox_json
from tkbox_daemon.box.uids import HOST_UID_REGISTRY, UidAllocator
from tkbox_daemon.config import DaemonPaths

pytestmark = pytest.mark.e2e


@dataclass
class UserDaemon:
    env: dict[str, str]
    paths: DaemonPaths

    def claims(self) -> dict[int, str]:
        """This daemon's claims in the host-wide registry: uid -> box id."""
        with contextlib.closing(UidAllocator(HOST_UID_REGISTRY)) as registry:
            claims = registry.listing().claims
        return {uid: claim.box for uid, claim in claims.items() if claim.holder.daemon == str(self.paths.state_dir)}


def _environment(base: Path, runtime: Path) -> dict[str, str]:
    home = base / "home"
    home.mkdir(parents=True)
    env = {key: value for key, value in os.environ.items() if not key.startswith(("TKBOX_", "XDG_"))}
    env.update(HOME=str(home), XDG_DATA_HOME=str(home / ".local" / "share"), XDG_CONFIG_HOME=str(home / ".config"),
               XDG_STATE_HOME=str(home / ".local" / "state"), XDG_RUNTIME_DIR=str(runtime))
    return env


@contextlib.contextmanager
def user_daemon(base: Path, name: str) -> Iterator[UserDaemon]:
    """A signer and a bubblewrap daemon in ``name``'s own directories, for the block."""
    runtime = Path(f"/tmp/tku-{os.getpid()}-{name}")  # short: Unix socket paths are limited
    runtime.mkdir(mode=0o700)
    env = _environment(base / name, runtime)
    paths = DaemonPaths.from_env(env)
    tkbox("signer", "up", env=env)
    process = subprocess.Popen([TKBOX, "daemon", "--backend", "bwrap"], env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE)
    try:
        wait_for_daemon(process, base / f"{name}-daemon.log")
        yield UserDaemon(env, paths)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        process.wait(60)
        tkbox("signer", "down", env=env, check=False)
        for directory in (paths.layers_root, paths.channels_root, runtime):
            shutil.rmtree(directory, ignore_errors=True)


def host_uid(pid: int) -> int:
    """The real uid of host process ``pid``, as the host's /proc says."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Uid:"):
            return int(line.split()[1])
    raise AssertionError(f"no Uid line for pid {pid}")


def test_two_daemons_of_two_users_never_run_boxes_as_one_host_uid_and_rm_gives_the_claims_back(tmp_path):
    with user_daemon(tmp_path, "ann") as ann, user_daemon(tmp_path, "bob") as bob:
        ann_box = tkbox_json("run", "--name", "a", "--workspace", str(make_checkout(tmp_path / "ann")), env=ann.env)
        bob_box = tkbox_json("run", "--name", "b", "--workspace", str(make_checkout(tmp_path / "bob")), env=bob.env)
        assert ann_box["state"] == bob_box["state"] == "running"

        ann_uid, bob_uid = host_uid(ann_box["pid"]), host_uid(bob_box["pid"])  # both boxes run right now
        assert ann_uid != bob_uid and min(ann_uid, bob_uid) >= 100_000
        ann_claims, bob_claims = ann.claims(), bob.claims()
        assert sorted(ann_claims.values()) == [ann_box["id"]] * 2
        assert sorted(bob_claims.values()) == [bob_box["id"]] * 2
        assert not ann_claims.keys() & bob_claims.keys()  # the guests' and the jobs' uids: four different ones
        assert ann_uid in ann_claims and bob_uid in bob_claims

        jobs = subprocess.run([TKBOX, "exec", "b", "--", "id", "-u"], env=bob.env, capture_output=True, timeout=60)
        assert jobs.returncode == 0 and jobs.stdout == b"1000\n"  # in the box; its host uid is the other claim

        info = os.stat(HOST_UID_REGISTRY)
        assert info.st_uid == 0 and stat.S_IMODE(info.st_mode) == 0o700

        tkbox("rm", "a", env=ann.env)
        assert ann.claims() == {} and bob.claims() == bob_claims
        assert host_uid(bob_box["pid"]) == bob_uid  # the other daemon's box runs on, untouched
        tkbox("rm", "b", env=bob.env)
        assert bob.claims() == {}
