"""Boxes started ahead (``boxes/pool.py``), with the unisolated test backend: a create of the default shape takes
one (its id, uids and guest) and attaches its workspace; any other shape starts cold; one that ends before it is
taken is replaced; a failure to start one is reported and the create starts cold; shutdown and a restart leave
nothing of them (no process, dir, marker or uid claim)."""

from __future__ import annotations

import asyncio
import json
import os
from contextlib import asynccontextmanager

import pytest

from tests.daemon_harness import make_workspace, process_alive, run_exec, running_daemon
from tkbox_daemon.box.backend import BoxError, BoxLimits
from tkbox_daemon.box.fake import FakeBackend
from tkbox_daemon.boxes import pool as pool_module

HOST_CWD = "/tmp"  # the unisolated test backend runs on the host: no /workspace there


class CountingBackend(FakeBackend):
    """The fake backend, keeping every box it started (and, with ``fail``, refusing to start one)."""

    def __init__(self, fail: bool = False) -> None:
        super().__init__(i_understand_this_is_not_isolated=True)
        self.fail = fail
        self.processes = []
        self.attached = []
        self.limited = []
        self.refuse_limits = False

    def apply_limits(self, process, limits):
        if self.refuse_limits:
            raise OSError(16, "Device or resource busy (test)")
        self.limited.append((process.pid, limits))

    async def start(self, spec, argv):
        if self.fail:
            raise BoxError("no room for a box (test)")
        process = await super().start(spec, argv)
        self.processes.append((spec, process))
        return process

    async def attach_workspace(self, process, spec, lower):
        await super().attach_workspace(process, spec, lower)
        self.attached.append((spec.box_id, lower))


async def _events(daemon, kind: str, box_id: str | None = None) -> list[dict]:
    page = await daemon.manager.events.page(None, 1000, box_id)
    return [json.loads(event.line)["data"] for event in page["events"] if event.kind == kind]


async def _created(daemon, box_id: str) -> dict:
    (created,) = await _events(daemon, "box.created", box_id)
    return created


def _claims_of(daemon, box_id: str) -> list[int]:
    return [uid for uid, owner in daemon.manager.uids.claimed().items() if owner == box_id]


@asynccontextmanager
async def _one_ready(tmp_path, backend, start_ahead: int = 1):
    """A daemon whose boxes started ahead are ready: (daemon, client, pool, the first of them)."""
    async with running_daemon(tmp_path, backend=backend, start_ahead=start_ahead) as daemon, \
            daemon.client() as client:
        pool = daemon.manager.pool
        await pool.settle()
        yield daemon, client, pool, pool.ready[0]


@pytest.fixture(autouse=True)
def refill_at_once(monkeypatch):
    monkeypatch.setattr(pool_module, "REFILL_DELAY_S", 0.0)


async def test_a_create_takes_the_box_started_ahead_and_a_new_one_is_started(tmp_path):
    backend = CountingBackend()
    async with _one_ready(tmp_path, backend) as (daemon, client, pool, warm):
        assert list(pool.ready) == [warm]
        info = await client.create_box({"name": "b", "workspace": str(make_workspace(tmp_path))})
        assert info.id == warm.box_id and info.state == "running" and info.run_state == "open"
        assert (await _created(daemon, info.id))["started_ahead"] is True
        assert backend.attached == [(info.id, daemon.manager.get("b").layers.lower)]
        result = await run_exec(client, "b", ["cat", "a.txt"], cwd=str(daemon.manager.get("b").layers.lower))
        assert result["stdout"] == b"hello\n" and result["end"]["exit_code"] == 0
        await pool.settle()
        assert len(pool.ready) == 1 and pool.ready[0].box_id != info.id  # started after the take
        ready_events = await _events(daemon, "daemon.pool")
        assert ready_events == [{"ready": 1, "size": 1}, {"ready": 1, "size": 1}]
        assert daemon.manager.health()["started_ahead"] == {"size": 1, "ready": 1, "taken": 1}
        assert not (pool.marker_dir / info.id).exists()  # a box of the registry now


async def test_a_box_of_another_disk_size_starts_cold_and_leaves_the_one_started_ahead(tmp_path):
    backend = CountingBackend()
    async with _one_ready(tmp_path, backend) as (daemon, client, pool, warm):
        assert list(pool.ready) == [warm]
        info = await client.create_box({"name": "b", "workspace": str(make_workspace(tmp_path)),
                                         "limits": {"disk": "1G"}})
        assert info.id != warm.box_id and (await _created(daemon, info.id))["started_ahead"] is False
        assert list(pool.ready) == [warm] and backend.attached == []


async def test_a_box_of_other_limits_takes_one_started_ahead_with_its_limits_written_first(tmp_path):
    backend = CountingBackend()
    async with _one_ready(tmp_path, backend) as (daemon, client, pool, warm):
        assert list(pool.ready) == [warm]
        info = await client.create_box({"name": "b", "workspace": str(make_workspace(tmp_path)),
                                         "limits": {"memory": "1G", "cpus": 1, "pids": 99}})
        assert info.id == warm.box_id and (await _created(daemon, info.id))["started_ahead"] is True
        assert backend.limited == [(warm.process.pid, BoxLimits(memory_bytes=1 << 30, pids_max=99,
                                                                cpu_quota_us=100_000))]


async def test_a_box_started_ahead_that_refuses_the_limits_asked_for_is_discarded_for_a_cold_start(tmp_path):
    backend = CountingBackend()
    async with _one_ready(tmp_path, backend) as (daemon, client, pool, warm):
        assert list(pool.ready) == [warm]
        backend.refuse_limits = True
        info = await client.create_box({"name": "b", "workspace": str(make_workspace(tmp_path)),
                                         "limits": {"memory": "1G"}})
        assert info.id != warm.box_id and (await _created(daemon, info.id))["started_ahead"] is False
        assert warm.process.returncode is not None and _claims_of(daemon, warm.box_id) == []


async def test_a_box_started_ahead_that_ends_is_replaced_and_leaves_nothing(tmp_path):
    backend = CountingBackend()
    async with _one_ready(tmp_path, backend) as (daemon, client, pool, warm):
        assert list(pool.ready) == [warm]
        uids = _claims_of(daemon, warm.box_id)
        assert len(uids) == 2 and (pool.marker_dir / warm.box_id).exists()
        warm.process.kill()
        await warm.process.wait()
        while not pool.ready or pool.ready[0] is warm:  # the watch discards it and starts another
            await pool.settle()
            await asyncio.sleep(0)
        assert _claims_of(daemon, warm.box_id) == []
        paths = daemon.config.paths
        assert not paths.box_layers(warm.box_id).exists() and not paths.box_runtime(warm.box_id).exists()
        assert not paths.box_state(warm.box_id).exists() and not (pool.marker_dir / warm.box_id).exists()
        info = await client.create_box({"name": "b", "workspace": str(make_workspace(tmp_path))})
        assert info.id != warm.box_id
        assert (await _created(daemon, info.id))["started_ahead"] is True


async def test_a_box_that_cannot_be_started_ahead_is_reported_once_and_the_create_starts_cold(tmp_path):
    backend = CountingBackend(fail=True)
    async with running_daemon(tmp_path, backend=backend, start_ahead=1) as daemon, daemon.client() as client:
        pool = daemon.manager.pool
        await pool.settle()
        assert not pool.ready and "no room for a box (test)" in pool.failure
        backend.fail = False
        info = await client.create_box({"name": "b", "workspace": str(make_workspace(tmp_path))})
        assert (await _created(daemon, info.id))["started_ahead"] is False
        reports = await _events(daemon, "daemon.pool")
        assert len([report for report in reports if "reason" in report]) == 1
        assert "boxes start cold" in reports[0]["reason"]
        await pool.settle()  # the create asked again: one is started now that the backend can
        assert len(pool.ready) == 1 and pool.failure == ""
        assert os.listdir(pool.marker_dir) == [pool.ready[0].box_id]  # the failed ones left no marker


async def test_shutdown_ends_the_boxes_started_ahead_and_leaves_nothing(tmp_path):
    backend = CountingBackend()
    async with running_daemon(tmp_path, backend=backend, start_ahead=2) as daemon:
        await daemon.manager.pool.settle()
        ready = list(daemon.manager.pool.ready)
        assert len(ready) == 2
        paths, manager = daemon.config.paths, daemon.manager
    for warm in ready:
        assert not process_alive(warm.process.pid) and warm.process.returncode is not None
        assert not paths.box_layers(warm.box_id).exists() and not paths.box_state(warm.box_id).exists()
        assert [uid for uid, owner in manager.uids.claimed().items() if owner == warm.box_id] == []
    assert not any(manager.pool.marker_dir.iterdir())


async def test_a_restart_clears_what_boxes_started_ahead_by_a_dead_daemon_left(tmp_path):
    left = "0123456789ab"
    async with running_daemon(tmp_path) as daemon:
        paths, marker_dir = daemon.config.paths, daemon.manager.pool.marker_dir
    marker_dir.mkdir(mode=0o700, exist_ok=True)
    (marker_dir / left).write_text("")  # as a daemon that died with this box started ahead left it
    for directory in (paths.box_layers(left) / "layers" / "base", paths.box_state(left), paths.box_runtime(left)):
        directory.mkdir(parents=True)
    os.chmod(paths.box_layers(left) / "layers", 0o700)
    async with running_daemon(tmp_path):
        assert not paths.box_layers(left).exists() and not paths.box_state(left).exists()
        assert not paths.box_runtime(left).exists() and not (marker_dir / left).exists()


async def test_a_create_waits_for_the_box_being_started_ahead(tmp_path):
    backend = CountingBackend()
    async with running_daemon(tmp_path, backend=backend, start_ahead=1) as daemon, daemon.client() as client:
        pool = daemon.manager.pool
        assert not pool.ready  # the first is still being started
        info = await client.create_box({"name": "b", "workspace": str(make_workspace(tmp_path))})
        assert (await _created(daemon, info.id))["started_ahead"] is True
        assert (await run_exec(client, "b", ["true"], cwd=HOST_CWD))["end"]["exit_code"] == 0


class GuestEndsAtOnce(CountingBackend):
    """Starts ``true`` for PID 1: a guest that ends before it ever reaches its boot."""

    async def start(self, spec, argv):
        return await super().start(spec, ["/bin/true"])


async def test_a_box_whose_guest_ends_before_its_boot_is_never_ready(tmp_path):
    backend = GuestEndsAtOnce()
    async with running_daemon(tmp_path, backend=backend, start_ahead=1) as daemon:
        pool = daemon.manager.pool
        await pool.settle()
        assert not pool.ready and "ended with 0 before its boot" in pool.failure
        (spec, _), = backend.processes
        assert not daemon.config.paths.box_layers(spec.box_id).exists()
        assert [uid for uid, owner in daemon.manager.uids.claimed().items() if owner == spec.box_id] == []


@pytest.mark.parametrize("count", ["-1", "9"])
def test_the_daemon_refuses_a_number_of_boxes_started_ahead_out_of_range(count, capsys):
    from tkbox_daemon.daemon_process import daemon_main

    assert daemon_main(["--start-ahead", count]) == 2
    assert "--start-ahead is 0 to 8 boxes" in capsys.readouterr().err
