"""Boxes outlive a daemon restart: a real daemon (in process, test-only unisolated backend) and a real signer, over
several lives on the same state.

After ``tkbox down`` or a SIGKILL every box the daemon knew is listed: a stopped box with its saved patch, a box
that was live as ``lost`` (nothing runs in it, it cannot be stopped, its run stays open and its info says so).
Removing any of them deletes its layers and gives back both of its host uids; no claim is ever left behind (the
uid registry is counted after each step).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

import pytest

from tests.daemon_harness import make_workspace, run_exec
from tests.restart_harness import daemon_lives, die
from tkbox_daemon.box.backend import BoxError, BoxLimits
from tkbox_daemon.box.cgroups import BoxCgroup, leftover_groups
from tkbox_daemon.box.fake import FakeBackend
from tkbox_daemon.boxes import recovery
from tkbox_daemon.boxes.manager import open_uid_allocator
from tkbox_tui.client import DaemonError

HOST_CWD = "/tmp"


async def _create(client, tmp_path, name="t1"):
    workspace = tmp_path / f"ws-{name}"
    if not workspace.exists():
        workspace = make_workspace(tmp_path).rename(workspace)
    return await client.create_box({"name": name, "workspace": str(workspace)})


def _write_in_box(daemon, name: str, text: str) -> None:
    """What a job's write leaves in the upper layer (the unisolated backend has no overlay)."""
    (daemon.manager.get(name).layers.upper / "new.txt").write_text(text)


async def test_a_box_running_at_tkbox_down_comes_back_stopped_with_its_patch_and_rm_releases_both_uids(tmp_path):
    async with daemon_lives(tmp_path) as lives:
        async with lives.life() as first, first.client() as client:
            info = await _create(client, tmp_path)
            _write_in_box(first, "t1", "made before the restart\n")
            layers = first.manager.get("t1").layers_dir
            assert sorted(lives.uid_claims.values()) == [info.id, info.id]
        # leaving the life is `tkbox down`: the daemon stops every box (patch saved) and closes every run
        async with lives.life() as second, second.client() as client:
            [listed] = await client.boxes()
            assert (listed.id, listed.name, listed.state) == (info.id, "t1", "stopped")
            assert listed.reason == "the daemon is shutting down" and listed.run_id == info.run_id
            assert listed.run_state == "closed" and listed.recorded
            saved = await client.diff("t1")
            assert saved["source"] == "saved" and "+made before the restart" in saved["patch"]
            assert sorted(lives.uid_claims.values()) == [info.id, info.id]
            removed = await client.remove_box("t1")
            assert removed.state == "removed" and not layers.exists()
            assert lives.uid_claims == {} and await client.boxes() == []
            assert list((second.config.paths.state_dir / "registry").glob("*.json")) == []
            kinds = [event.kind for event in await client.stored_events(box=info.id)]
            assert kinds[-1] == "box.removed"


async def test_after_a_sigkill_a_live_box_is_lost_and_a_stopped_one_keeps_its_patch(tmp_path):
    async with daemon_lives(tmp_path) as lives:
        async with lives.life() as first, first.client() as client:
            running = await _create(client, tmp_path, "live")
            stopped = await _create(client, tmp_path, "done")
            _write_in_box(first, "done", "kept\n")
            await client.stop_box("done")
            live_layers = first.manager.get("live").layers_dir
            die(first)
        async with lives.life() as second, second.client() as client:
            boxes = {box.name: box for box in await client.boxes()}
            assert {name: box.state for name, box in boxes.items()} == {"live": "lost", "done": "stopped"}
            lost = boxes["live"]
            assert lost.reason.startswith("the daemon ended while the box was running; the box ended with it")
            assert f"its run {running.run_id} stays open" in lost.reason
            assert lost.run_id == running.run_id and lost.run_state == "orphaned" and lost.pid is None
            assert boxes["done"].run_state == "orphaned"  # a stopped box's run is open until rm; the token is gone
            assert not second.signer.service.book.runs[running.run_id].closed
            assert "+kept" in (await client.diff("done"))["patch"]
            assert sorted(lives.uid_claims.values()) == [stopped.id] * 2  # the lost box's were given back

            no_exec = (await run_exec(client, "live", ["true"], cwd=HOST_CWD))["end"]
            assert no_exec["type"] == "error" and no_exec["code"] == "box_lost"
            assert "tkbox rm live" in no_exec["message"]
            with pytest.raises(DaemonError) as no_stop:
                await client.stop_box("live")
            assert no_stop.value.code == "box_lost" and "nothing to stop" in no_stop.value.message
            with pytest.raises(DaemonError) as no_patch:
                await client.diff("live")
            assert no_patch.value.code == "no_patch" and "was lost" in no_patch.value.message
            lost_events = [e for e in await client.stored_events(box="live") if e.kind == "box.lost"]
            assert [e.data["reason"] for e in lost_events] == [lost.reason]

            await client.remove_box("live")
            assert not live_layers.exists() and sorted(lives.uid_claims.values()) == [stopped.id, stopped.id]
            gaps = [e.data for e in await client.stored_events(box=running.id) if e.kind == "gap"]
            assert gaps == [{"kind": "close_run", "reason": f"run {running.run_id} stays open: its token was in an "
                                                           "earlier daemon's memory only"}]
            await client.remove_box("done")
            assert lives.uid_claims == {} and await client.boxes() == []


async def test_a_lost_box_stays_lost_with_its_first_reason_across_another_restart(tmp_path):
    async with daemon_lives(tmp_path) as lives:
        async with lives.life() as first, first.client() as client:
            await _create(client, tmp_path)
            die(first)
        async with lives.life() as second, second.client() as client:
            [lost] = await client.boxes()
        async with lives.life() as third, third.client() as client:
            assert await client.boxes() == [lost]
            await client.remove_box("t1")
            assert lives.uid_claims == {}


class StartsNever(FakeBackend):
    """A backend whose start waits until the test ends it: a box stays ``creating`` (``entered`` says when)."""

    def __init__(self) -> None:
        super().__init__(i_understand_this_is_not_isolated=True)
        self.entered = asyncio.Event()

    async def start(self, spec, argv):
        self.entered.set()
        await asyncio.Event().wait()


async def test_a_box_mid_creation_when_the_daemon_died_is_lost_with_its_uids_released_and_rm_removes_it(tmp_path):
    backend = StartsNever()
    async with daemon_lives(tmp_path, backend=backend) as lives:
        async with lives.life() as first:
            creating = asyncio.ensure_future(first.manager.create(  # noqa: TID251
                {"name": "half", "workspace": str(make_workspace(tmp_path))}))
            await backend.entered.wait()
            [box_id] = first.manager.boxes
            die(first)
            creating.cancel()
        async with lives.life() as second, second.client() as client:
            [lost] = await client.boxes()
            assert (lost.id, lost.state) == (box_id, "lost")
            assert lost.reason.startswith("the daemon ended while the box was creating")
            assert "its host uids were given back" in lost.reason and lives.uid_claims == {}  # nothing of it runs
            await client.remove_box("half")
            assert lives.uid_claims == {}
            assert not second.config.paths.box_layers(box_id).exists()


async def test_uid_claims_of_a_creation_cut_before_its_record_are_released_at_restart(tmp_path):
    async with daemon_lives(tmp_path) as lives:
        async with lives.life():
            pass
        claims = open_uid_allocator(lives.config)  # as that daemon claims: in its name
        uids = [claims.allocate("0123456789ab"), claims.allocate("0123456789ab")]  # and then the daemon died
        async with lives.life() as second, second.client() as client:
            assert lives.uid_claims == {} and await client.boxes() == []
            [event] = [e for e in await client.stored_events() if e.kind == "daemon.registry"]
            assert event.data["box_id"] == "0123456789ab" and event.data["uids"] == uids
            assert event.data["action"] == "released"


async def test_a_removal_the_daemon_died_in_is_finished_at_restart(tmp_path):
    async with daemon_lives(tmp_path) as lives:
        async with lives.life() as first, first.client() as client:
            info = await _create(client, tmp_path)
            await client.stop_box("t1")
            box = first.manager.get("t1")
            box.removing = True
            box.save_record()  # what remove() writes first; then the daemon died
            layers = box.layers_dir
            die(first)
        async with lives.life() as second, second.client() as client:
            assert await client.boxes() == [] and lives.uid_claims == {} and not layers.exists()
            [removed] = [e for e in await client.stored_events(box=info.id) if e.kind == "box.removed"]
            assert "finished at restart" in removed.data["reason"]
            assert list((second.config.paths.state_dir / "registry").glob("*.json")) == []


class StartFails(FakeBackend):
    def __init__(self) -> None:
        super().__init__(i_understand_this_is_not_isolated=True)

    async def start(self, spec, argv):
        raise BoxError("no room for a box (test)")


async def test_a_box_that_failed_to_start_holds_no_uid_and_is_listed_failed_after_a_restart(tmp_path):
    async with daemon_lives(tmp_path, backend=StartFails()) as lives:
        async with lives.life() as first, first.client() as client:
            with pytest.raises(DaemonError) as failed:
                await _create(client, tmp_path)
            assert failed.value.code == "box_failed" and lives.uid_claims == {}
        async with lives.life() as second, second.client() as client:
            [box] = await client.boxes()
            assert box.state == "failed" and "no room for a box" in box.reason
            await client.remove_box("t1")
            assert lives.uid_claims == {} and await client.boxes() == []


async def test_a_torn_record_is_set_aside_and_a_newer_one_left_in_place_each_with_an_event(tmp_path):
    async with daemon_lives(tmp_path) as lives:
        async with lives.life() as first, first.client() as client:
            torn = await _create(client, tmp_path, "torn")
            newer = await _create(client, tmp_path, "newer")
        registry = lives.config.paths.state_dir / "registry"
        torn_file, newer_file = registry / f"{torn.id}.json", registry / f"{newer.id}.json"
        torn_file.write_bytes(torn_file.read_bytes()[:100])
        record = json.loads(newer_file.read_bytes())
        newer_file.write_text(json.dumps({**record, "version": 2}))
        async with lives.life() as second, second.client() as client:
            assert await client.boxes() == []  # nothing invented
            problems = {e.data["box_id"]: e.data for e in await client.stored_events() if e.kind == "daemon.registry"}
            assert "not one strict JSON object" in problems[torn.id]["error"]
            assert problems[torn.id]["action"].startswith(f"set aside as {torn.id}.json.unreadable")
            assert "version 2" in problems[newer.id]["error"] and "left in place" in problems[newer.id]["action"]
            assert (registry / f"{torn.id}.json.unreadable").exists() and newer_file.exists()
            assert len(lives.uid_claims) == 4  # kept: the boxes' files still belong to those uids
            with pytest.raises(DaemonError) as taken:  # a box set aside is not listed: nothing acts on it
                await client.remove_box("torn")
            assert taken.value.code == "not_found"


@pytest.mark.skipif(os.geteuid() != 0, reason="makes a cgroup and starts a process under a box uid")
async def test_a_process_left_in_a_lost_boxs_cgroups_is_killed_at_restart_and_one_of_another_daemon_is_not(
        tmp_path, monkeypatch):
    monkeypatch.setattr(recovery, "GUARD_GRACE", 0.2)  # what the guards get to finish; this survivor outlives it
    async with daemon_lives(tmp_path) as lives:
        async with lives.life() as first, first.client() as client:
            info = await _create(client, tmp_path)
            job_uid = first.manager.get("t1").job_uid
            die(first)
        # what a guard that failed would leave: a process of the box, in the box's own cgroups, as its jobs' uid
        survivor = subprocess.Popen(["sleep", "600"], user=job_uid, group=job_uid, start_new_session=True)
        groups = BoxCgroup.create(info.id, BoxLimits())
        groups.join(survivor.pid)
        # and a process with the same uid outside the box's cgroups: not proven to be the box's, so left alone
        stranger = subprocess.Popen(["sleep", "600"], user=job_uid, group=job_uid, start_new_session=True)
        try:
            async with lives.life() as second, second.client() as client:
                [lost] = await client.boxes()
                assert lost.id == info.id and "1 of its processes were still there at restart" in lost.reason
                assert survivor.wait(30) == -9
                assert stranger.poll() is None  # not the box's: left alone
        finally:
            for process in (survivor, stranger):
                process.kill()
                process.wait()
            leftover_groups(info.id).remove()


async def test_exec_still_works_in_a_new_box_after_a_restart(tmp_path):
    async with daemon_lives(tmp_path) as lives:
        async with lives.life() as first, first.client() as client:
            await _create(client, tmp_path, "old")
            die(first)
        async with lives.life() as second, second.client() as client:
            with pytest.raises(DaemonError) as taken:
                await _create(client, tmp_path, "old")
            assert taken.value.code == "name_taken"  # the lost box keeps its name until it is removed
            await _create(client, tmp_path, "new")
            result = await run_exec(client, "new", ["echo", "after"], cwd=HOST_CWD)
            assert result["stdout"] == b"after\n"
            assert {box.name: box.state for box in await client.boxes()} == {"old": "lost", "new": "running"}


def test_the_restart_waits_for_a_guard_still_taking_its_box_down_and_kills_only_what_outlives_the_grace():
    import threading

    ending = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    staying = subprocess.Popen(["sleep", "600"])
    ending_fd, staying_fd = os.pidfd_open(ending.pid), os.pidfd_open(staying.pid)
    try:
        threading.Thread(target=ending.stdin.close).start()  # the guard finishes its work while the restart waits
        assert recovery._still_running_after([ending_fd], 600) == []  # returns once it ended, not at the deadline
        assert ending.wait(30) == 0
        assert recovery._still_running_after([ending_fd, staying_fd], 0.1) == [staying_fd]
    finally:
        for pidfd in (ending_fd, staying_fd):
            os.close(pidfd)
        staying.kill()
        staying.wait()
