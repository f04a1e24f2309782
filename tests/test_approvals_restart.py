"""Pending approvals across the daemon's end (issue 10): a clean stop answers each one ``lost`` and records it
before the runs close, so its exec is refused, never left hanging; a restarted daemon lists none of the old pending
ones (they were in the old daemon's memory only), whether it stopped cleanly or died."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.daemon_harness import make_workspace
from tests.restart_harness import daemon_lives, die
from tests.test_approvals_api import WAIT, HeldExec, _event, _run_records
from tkbox_daemon.tasks import spawn
from tkbox_tui.client import DaemonClient


async def _box_with_a_held_exec(client: DaemonClient, tmp_path: Any) -> tuple[Any, HeldExec, dict[str, Any]]:
    info = await client.create_box({"name": "t1", "workspace": str(make_workspace(tmp_path))})
    held_exec = await HeldExec(client, ["sudo", "true"]).start()
    return info, held_exec, await held_exec.until_held()


async def test_a_clean_stop_records_pending_approvals_lost_refuses_their_execs_and_a_restart_lists_none(tmp_path):
    async with daemon_lives(tmp_path) as lives:
        async with DaemonClient(lives.config.paths.api_socket) as client:
            async with lives.life() as daemon:
                info, held_exec, held = await _box_with_a_held_exec(client, tmp_path)
                ending = spawn(held_exec.end(), name="test-held-end")
            end = await asyncio.wait_for(ending, WAIT)
            assert end["type"] == "denied" and end["exit_code"] == 126 and end["state"] == "lost"
            assert "the daemon stopped" in end["reason"]
            records = await _run_records(daemon, info.run_id)
            types = [r["type"] for r in records]
            [lost] = [r["data"] for r in records if r["type"] == "input.observed"
                      and r["data"]["source"] == "tkbox.approval"]
            assert lost["answer"] == "lost" and lost["approval_id"] == held["approval_id"]
            assert types[-1] == "run.closed"  # the answer is in the run, before it closed
            async with lives.life():
                assert (await client._request("GET", "/approvals"))["approvals"] == []
                box = await client.box("t1")
                assert box.state == "stopped" and box.approvals_pending == 0


async def test_after_the_daemon_dies_a_restart_lists_none_of_its_approvals_and_the_box_is_lost(tmp_path):
    async with daemon_lives(tmp_path) as lives:
        async with DaemonClient(lives.config.paths.api_socket) as client:
            async with lives.life() as daemon:
                _, held_exec, held = await _box_with_a_held_exec(client, tmp_path)
                die(daemon)
                await held_exec.call.close()  # its client goes with the daemon (so its handler ends at once)
                withdrawn = await _event(client, "approval.answered", id=held["approval_id"])
                assert withdrawn.data["approval"]["state"] == "withdrawn"  # listed by this daemon, for a while
            async with lives.life():
                assert (await client._request("GET", "/approvals"))["approvals"] == []
                box = await client.box("t1")
                assert box.state == "lost" and box.approvals_pending == 0
