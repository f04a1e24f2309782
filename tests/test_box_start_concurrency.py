"""A box's start runs its run's registration beside its layers, launch and guest start (``Box.create``): a box is
running only once both are done; the egress door refuses until then; either one failing fails the create and
leaves nothing behind (no process, no uid claim, no open run, no namespace fd)."""

from __future__ import annotations

import asyncio
import os

import pytest

from tests.daemon_harness import make_workspace, process_alive, run_exec, running_daemon
from tkbox_daemon.box.backend import BoxError
from tkbox_daemon.box.fake import FakeBackend
from tkbox_daemon.boxes import box_start as box_start_module
from tkbox_daemon.boxes.egress_listener import refuse_door_not_enabled
from tkbox_daemon.boxes.recorder import RunRecorder
from tkbox_daemon.signer_link import SignerCallError
from tkbox_tui.client import DaemonError

HOST_CWD = "/tmp"  # the unisolated test backend runs on the host: no /workspace there


class SeenStart(FakeBackend):
    """The fake backend, telling when a box's PID 1 exists (and, with ``fail``, refusing to start one)."""

    def __init__(self, fail: bool = False) -> None:
        super().__init__(i_understand_this_is_not_isolated=True)
        self.started = asyncio.Event()
        self.fail = fail
        self.processes = []

    async def start(self, spec, argv):
        if self.fail:
            raise BoxError("no room for a box (test)")
        process = await super().start(spec, argv)
        self.processes.append(process)
        self.started.set()
        return process


async def test_the_run_registers_while_the_box_starts_and_the_box_runs_only_once_both_are_done(tmp_path, monkeypatch):
    backend = SeenStart()
    seen: dict[str, object] = {}
    register = RunRecorder.register

    async def register_after_the_start(self, settings, task):
        await asyncio.wait_for(backend.started.wait(), 30)  # the box's PID 1 exists before the run is registered
        box = next(iter(daemon.manager.boxes.values()))
        seen.update(state=box.state, egress=box.egress_handler)
        return await register(self, settings, task)

    monkeypatch.setattr(RunRecorder, "register", register_after_the_start)
    async with running_daemon(tmp_path, backend=backend) as daemon, daemon.client() as client:
        info = await client.create_box({"name": "b", "workspace": str(make_workspace(tmp_path))})
        assert seen == {"state": "creating", "egress": refuse_door_not_enabled}
        assert info.state == "running" and info.run_state == "open"
        assert daemon.manager.get("b").egress_handler is not refuse_door_not_enabled
        assert (await run_exec(client, "b", ["true"], cwd=HOST_CWD))["end"]["exit_code"] == 0


async def test_a_registration_refused_while_the_box_starts_fails_the_create_and_leaves_nothing(tmp_path, monkeypatch):
    backend = SeenStart()

    async def refused_after_the_start(self, settings, task):
        await asyncio.wait_for(backend.started.wait(), 30)
        raise SignerCallError("unavailable", "the signer is stopping (test)")

    monkeypatch.setattr(RunRecorder, "register", refused_after_the_start)
    async with running_daemon(tmp_path, backend=backend) as daemon, daemon.client() as client:
        with pytest.raises(DaemonError) as failed:
            await client.create_box({"name": "b", "workspace": str(make_workspace(tmp_path))})
        assert failed.value.code == "signer_unavailable" and "the signer is stopping" in str(failed.value)
        [box] = await client.boxes()
        assert box.state == "failed" and "did not register" in box.reason
        [process] = backend.processes
        assert process.returncode is not None and not process_alive(process.pid)
        assert daemon.manager.uids.claimed() == {}


async def test_a_box_that_fails_to_start_while_its_run_registers_closes_that_run(tmp_path):
    async with running_daemon(tmp_path, backend=SeenStart(fail=True)) as daemon, daemon.client() as client:
        with pytest.raises(DaemonError) as failed:
            await client.create_box({"name": "b", "workspace": str(make_workspace(tmp_path))})
        assert failed.value.code == "box_failed" and "no room for a box" in str(failed.value)
        [box] = await client.boxes()
        assert box.state == "failed" and box.run_id and box.run_state == "closed"
        assert daemon.signer.service.book.runs[box.run_id].closed
        assert daemon.manager.uids.claimed() == {}


class TakesNamespace(SeenStart):
    """A backend that takes a user namespace made by the daemon (as bwrap does)."""

    takes_user_namespace = True

    def __init__(self) -> None:
        super().__init__()
        self.given: list[int | None] = []

    async def start(self, spec, argv):
        self.given.append(spec.userns_fd)
        assert spec.userns_fd is not None and os.readlink(f"/proc/self/fd/{spec.userns_fd}").startswith("user:[")
        return await super().start(spec, argv)


def _namespace_fds() -> set[str]:
    found = set()
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue
        if target.startswith("user:["):
            found.add(name)
    return found


@pytest.mark.skipif(os.geteuid() != 0, reason="making a user namespace with a box uid's maps needs root")
async def test_the_box_user_namespace_is_made_beside_the_layers_and_its_fd_closed_after_the_start(tmp_path):
    backend = TakesNamespace()
    async with running_daemon(tmp_path, backend=backend) as daemon, daemon.client() as client:
        before = _namespace_fds()
        await client.create_box({"name": "b", "workspace": str(make_workspace(tmp_path))})
        [given] = backend.given
        assert given is not None and _namespace_fds() == before


@pytest.mark.skipif(os.geteuid() != 0, reason="making a user namespace with a box uid's maps needs root")
async def test_a_user_namespace_that_cannot_be_made_fails_the_create_and_leaves_nothing(tmp_path, monkeypatch):
    backend = TakesNamespace()

    def no_namespace(box_uid, job_uid):
        raise OSError(28, "no room for another user namespace (test)")

    monkeypatch.setattr(box_start_module, "box_user_namespace", no_namespace)
    async with running_daemon(tmp_path, backend=backend) as daemon, daemon.client() as client:
        with pytest.raises(DaemonError) as failed:
            await client.create_box({"name": "b", "workspace": str(make_workspace(tmp_path))})
        assert failed.value.code == "box_failed" and "no room for another user namespace" in str(failed.value)
        [box] = await client.boxes()
        assert box.state == "failed" and box.run_state == "closed" and backend.given == []
        assert daemon.manager.uids.claimed() == {}


def _layers_for(tmp_path):
    from tkbox_daemon.boxes.layers import BoxLayers

    root = tmp_path / "layers-root"
    root.mkdir(mode=0o700)
    layers = BoxLayers(root / "0123456789ab")
    layers.make_root()
    layers.start(None)
    return layers


@pytest.mark.skipif(os.geteuid() != 0, reason="idmapped views and chown need root")
@pytest.mark.parametrize("owner_changed", [False, True])
def test_a_view_namespace_made_ahead_maps_only_the_owner_the_base_was_made_for(tmp_path, owner_changed):
    checkout = tmp_path / "checkout"
    (checkout / "src").mkdir(parents=True)
    (checkout / "src" / "a.py").write_text("a = 1\n")
    (checkout / "README").write_text("readme\n")
    layers = _layers_for(tmp_path)
    before = _namespace_fds()
    layers.premake_view(checkout, job_uid=100_321)
    if owner_changed:  # between the namespace made ahead and the base: the base's owner wins
        os.chown(checkout, 4242, 4242)
        os.chown(checkout / "README", 4242, 4242)
    try:
        summary = layers._build_base(checkout, 100_321, 100, 1 << 20, link=True)
        assert summary["method"] == "link" and layers.lower == layers.view
        for name in ("src", "README"):  # what the base made (src) and a linked file of the owner (README)
            assert os.stat(layers.view / name).st_uid == 100_321
        layers._drop_premade()  # what prepare does once the base is built
        assert _namespace_fds() == before
    finally:
        layers.release_disk()
    assert layers.remove() is not None and (checkout / "README").read_text() == "readme\n"


@pytest.mark.skipif(os.geteuid() != 0, reason="writing a user namespace's maps needs root")
def test_user_namespaces_made_from_several_threads_at_once_each_come_back(tmp_path):
    """Each helper is a fork that never execs, so it holds copies of the other helpers' pipes: each must still be
    told to go (two helpers waiting for each other's end would hang the daemon's threads for good)."""
    from concurrent.futures import ThreadPoolExecutor

    from tkbox_daemon.box.uids import FIRST_BOX_UID
    from tkbox_daemon.box.userns import box_user_namespace

    before = _namespace_fds()
    with ThreadPoolExecutor(4) as pool:
        made = list(pool.map(lambda n: box_user_namespace(FIRST_BOX_UID + 2 * n, FIRST_BOX_UID + 2 * n + 1),
                             range(24)))
    try:
        assert all(os.readlink(f"/proc/self/fd/{fd}").startswith("user:[") for fd in made)
        assert len({os.fstat(fd).st_ino for fd in made}) == 24  # each its own namespace
    finally:
        for fd in made:
            os.close(fd)
    assert _namespace_fds() == before
