"""The daemon's API end to end in one process: real signer, real guest agent, the test-only unisolated backend.

The isolated backends are exercised with the same flows in e2e/.
"""

from __future__ import annotations

import asyncio

import pytest

from tests.daemon_harness import make_workspace, run_exec, running_daemon
from tkbox_daemon.signer.idempotency import new_request_id
from tkbox_tui.client import DaemonError

HOST_CWD = "/tmp"  # the unisolated test backend runs on the host: no /workspace there


async def _create(client, tmp_path, **settings):
    return await client.create_box({"name": "t1", "workspace": str(make_workspace(tmp_path)), **settings})


async def test_create_exec_and_see_the_events(tmp_path):
    async with running_daemon(tmp_path) as daemon, daemon.client() as client:
        info = await _create(client, tmp_path)
        assert info.state == "running" and info.run_id and info.recorded
        result = await run_exec(client, "t1", ["echo", "hello box"], cwd=HOST_CWD)
        assert result["stdout"] == b"hello box\n"
        assert result["end"] == {"type": "exit", "exit_code": 0, "signal": None, "timed_out": False,
                                 "reported_by": "guest"}
        decision = result["messages"][0]
        assert decision["type"] == "decision" and decision["command"] == "echo 'hello box'"
        kinds = [event.kind for event in await client.stored_events(box="t1")]
        assert kinds[:2] == ["box.created", "box.started"]
        assert kinds[-2:] == ["exec.started", "exec.finished"]
        listed = await client.boxes()
        assert [b.name for b in listed] == ["t1"] and listed[0].execs_total == 1
        await client.remove_box("t1")  # closing the run waits for the completion recorded in the background
        run = daemon.signer.service.book.runs[info.run_id]
        decided = [r for r in daemon.signer.service.run_records(run) if r.type == "policy.decision"]
        assert run.closed and run.pending_decisions == 0 and len(decided) == 1


async def test_a_denied_command_exits_126_with_the_rule_and_never_runs(tmp_path):
    async with running_daemon(tmp_path) as daemon, daemon.client() as client:
        await _create(client, tmp_path)
        marker = tmp_path / "ran"
        result = await run_exec(client, "t1", ["sh", "-c", f"touch {marker}; pkill -f 'tkbox signer'"],
                                cwd=HOST_CWD)
        assert result["end"]["type"] == "denied" and result["end"]["exit_code"] == 126
        assert "TK-D007" in result["end"]["rule_ids"]
        assert not marker.exists()
        assert (await client.stored_events(box="t1"))[-1].kind == "exec.denied"


async def test_an_environment_name_that_changes_what_runs_is_refused_by_name(tmp_path):
    async with running_daemon(tmp_path) as daemon, daemon.client() as client:
        await _create(client, tmp_path)
        result = await run_exec(client, "t1", ["true"], env={"LD_PRELOAD": "/tmp/x.so"}, cwd=HOST_CWD)
        assert result["end"]["type"] == "error" and "LD_PRELOAD" in result["end"]["message"]


async def test_stdin_given_up_front_is_decided_and_becomes_exactly_the_stdin(tmp_path):
    async with running_daemon(tmp_path) as daemon, daemon.client() as client:
        await _create(client, tmp_path)
        result = await run_exec(client, "t1", ["cat"], stdin=b"line one\n", cwd=HOST_CWD)
        assert result["stdout"] == b"line one\n" and result["end"]["exit_code"] == 0


async def test_streamed_stdin_reaches_the_process_and_its_digest_is_recorded(tmp_path):
    async with running_daemon(tmp_path) as daemon, daemon.client() as client:
        await _create(client, tmp_path)
        call = client.exec("t1")
        await call.start(["wc", "-c"], stream_stdin=True, cwd=HOST_CWD)
        out = b""
        async for message in call.messages():
            if isinstance(message, tuple):
                out += message[1]
            elif message["type"] == "started":
                await call.send_stdin(b"x" * 300_000)
                await call.close_stdin()
            elif message["type"] == "exit":
                break
        await call.close()
        assert out.strip() == b"300000"
        finished = (await client.stored_events(box="t1"))[-1]
        assert finished.kind == "exec.finished" and finished.data["stdin"]["size"] == 300_000


async def test_a_client_that_goes_away_stops_a_process_that_never_reads_its_stdin(tmp_path):
    async with running_daemon(tmp_path) as daemon, daemon.client() as client:
        await _create(client, tmp_path)
        call = client.exec("t1")
        await call.start(["sleep", "600"], stream_stdin=True, cwd=HOST_CWD)
        async for message in call.messages():
            if isinstance(message, dict) and message["type"] == "started":
                break
        for _ in range(16):  # a whole stdin window (1 MiB) that sleep never reads
            await call.send_stdin(b"y" * 65536)
        await call.close()
        finished = await asyncio.wait_for(_next_event(client, "exec.finished"), 30)
        assert finished.data["signal"] == 9


async def _next_event(client, kind: str):
    """The first event of ``kind`` in the stream (from the start), awaited without polling."""
    async for event in client.events(after=0):
        if event.kind == kind:
            return event
    raise AssertionError(f"the stream ended before a {kind} event")


async def test_ctrl_c_interrupts_the_command(tmp_path):
    async with running_daemon(tmp_path) as daemon, daemon.client() as client:
        await _create(client, tmp_path)
        call = client.exec("t1")
        await call.start(["sleep", "600"], cwd=HOST_CWD)
        end = None
        async for message in call.messages():
            if isinstance(message, dict) and message["type"] == "started":
                await call.signal("INT")
            elif isinstance(message, dict) and message["type"] == "exit":
                end = message
                break
        await call.close()
        assert end["signal"] == 2 and end["exit_code"] == 130


async def test_settings_errors_name_the_field(tmp_path):
    async with running_daemon(tmp_path) as daemon, daemon.client() as client:
        with pytest.raises(DaemonError) as bad_name:
            await client.create_box({"name": "Bad Name!", "workspace": str(tmp_path)})
        assert bad_name.value.code == "invalid_settings" and bad_name.value.extra["field"] == "name"
        with pytest.raises(DaemonError) as bad_limit:
            await client.create_box({"workspace": str(tmp_path), "limits": {"memory": "lots"}})
        assert bad_limit.value.extra["field"] == "limits.memory"
        with pytest.raises(DaemonError) as unknown:
            await client.create_box({"workspace": str(tmp_path), "colour": "red"})
        assert unknown.value.extra["field"] == "colour"


async def test_the_box_limit_names_itself_and_how_to_raise_it(tmp_path):
    async with running_daemon(tmp_path, max_boxes=1) as daemon, daemon.client() as client:
        await _create(client, tmp_path)
        with pytest.raises(DaemonError) as refused:
            await client.create_box({"name": "t2", "workspace": str(tmp_path)})
        assert refused.value.status == 429 and "boxes_per_daemon" in refused.value.message
        assert "--max-boxes" in refused.value.message


async def test_stop_keeps_the_run_open_and_rm_closes_it(tmp_path):
    async with running_daemon(tmp_path) as daemon, daemon.client() as client:
        info = await _create(client, tmp_path)
        stopped = await client.stop_box("t1")
        assert stopped.state == "stopped"
        assert daemon.signer.service.book.runs[info.run_id].closed is False
        removed = await client.remove_box("t1")
        assert removed.state == "removed"
        assert daemon.signer.service.book.runs[info.run_id].closed is True
        assert await client.boxes() == []


async def test_the_signer_gone_mid_run_refuses_the_next_exec(tmp_path):
    async with running_daemon(tmp_path) as daemon, daemon.client() as client:
        await _create(client, tmp_path)
        await daemon.signer.server.close()
        result = await run_exec(client, "t1", ["echo", "x"], cwd=HOST_CWD)
        assert result["end"]["type"] == "denied" and result["end"]["rule_ids"] == ["TK-SIGNER-UNAVAILABLE"]
        kinds = [event.kind for event in await client.stored_events(box="t1")]
        assert "signer.unavailable" in kinds and kinds[-1] == "exec.denied"


async def test_hold_pauses_the_box_and_quarantine_ends_it(tmp_path):
    async with running_daemon(tmp_path) as daemon, daemon.client() as client:
        info = await _create(client, tmp_path)
        box = daemon.manager.get("t1")
        connection = await daemon.signer.connect()
        await connection.call("hold", request_id=new_request_id(), run_id=info.run_id, reason="look")
        await box.apply_containment((await box.recorder.containment())["state"])
        assert (await client.box("t1")).state == "held"
        denied = await run_exec(client, "t1", ["echo", "x"], cwd=HOST_CWD)
        assert denied["end"]["type"] == "error" and "held" in denied["end"]["message"]
        await connection.call("quarantine", request_id=new_request_id(), run_id=info.run_id, reason="incident")
        await box.apply_containment((await box.recorder.containment())["state"])
        final = await client.box("t1")
        assert final.state == "failed" and "quarantined" in final.reason
        assert daemon.signer.service.book.runs[info.run_id].closed is True
        await connection.close()


async def test_an_incident_decision_makes_the_daemon_poll_containment_at_once(tmp_path):
    async with running_daemon(tmp_path) as daemon, daemon.client() as client:
        info = await _create(client, tmp_path)
        connection = await daemon.signer.connect()
        await connection.call("hold", request_id=new_request_id(), run_id=info.run_id, reason="operator")
        result = await run_exec(client, "t1", ["pkill", "-f", "tkbox signer"], cwd=HOST_CWD)
        assert result["end"]["type"] == "denied"
        held = await asyncio.wait_for(_next_event(client, "box.held"), 10)
        assert held.data["state"] == "held"
        await connection.close()


async def test_events_resume_after_a_sequence_number_without_gaps_or_repeats(tmp_path):
    async with running_daemon(tmp_path) as daemon, daemon.client() as client:
        await _create(client, tmp_path)
        everything = await client.stored_events()
        middle = everything[len(everything) // 2].seq
        later = await client.stored_events(after=middle)
        assert [e.seq for e in later] == [e.seq for e in everything if e.seq > middle]
        seen = []

        async def follow() -> None:
            async for event in client.events(after=middle):
                seen.append(event.seq)
                if event.kind == "exec.finished":
                    return

        follower = asyncio.ensure_future(follow())  # noqa: TID251
        await run_exec(client, "t1", ["true"], cwd=HOST_CWD)
        await asyncio.wait_for(follower, 30)
        assert seen == list(range(middle + 1, seen[-1] + 1))


async def test_unrecorded_runs_commands_and_warns_on_each(tmp_path):
    async with running_daemon(tmp_path, unrecorded=True) as daemon, daemon.client() as client:
        info = await _create(client, tmp_path)
        assert info.recorded is False and info.run_id is None
        result = await run_exec(client, "t1", ["echo", "ok"], cwd=HOST_CWD)
        assert result["stdout"] == b"ok\n"
        assert "TK-UNRECORDED" in result["messages"][0]["rule_ids"]
        warnings = [e for e in await client.stored_events(box="t1") if e.kind == "daemon.unrecorded"]
        assert len(warnings) == 2  # at creation and for the command


HOSTILE_GUEST = r'''
import json, socket, sys
boot = sys.argv[sys.argv.index("--boot-socket") + 1]
s = socket.socket(socket.AF_UNIX); s.connect(boot)
config = json.loads(s.makefile("rb").read())
agent = socket.socket(socket.AF_UNIX); agent.connect(config["agent_socket"])
agent.recv(65536)  # the host's ping
agent.sendall(bytes.fromhex(sys.argv[-1]))
agent.recv(1)  # wait for the host to hang up
'''


@pytest.mark.parametrize("garbage, reason", [
    ("ff00000001aa", "unknown frame type"),
    ("02" + "7fffffff", "exceeds the limit"),
    ("02000000057b7d7b7d7b", "JSON"),
    ("0200000014" + b'{"id":999,"ok":true}'.hex(), "no request waiting"),
    ("0500000005" + "000000077a", "not a running exec"),
])
async def test_a_guest_sending_malformed_frames_is_stopped_and_the_daemon_is_unharmed(tmp_path, garbage, reason):
    hostile = tmp_path / "hostile-guest"
    hostile.mkdir()
    (hostile / "__main__.py").write_text(HOSTILE_GUEST.replace("sys.argv[-1]", repr(garbage)))
    async with running_daemon(tmp_path) as daemon, daemon.client() as client:
        daemon.manager.guest_dir = hostile
        with pytest.raises(DaemonError) as failed:
            await _create(client, tmp_path)
        assert failed.value.code == "box_failed"
        events = await client.stored_events()
        errors = [e for e in events if e.kind == "guest.protocol_error"]
        assert errors and reason in errors[0].data["reason"], errors
        assert [e for e in events if e.kind == "box.failed"]
        daemon.manager.guest_dir = _real_guest()
        info = await client.create_box({"name": "healthy", "workspace": str(tmp_path / "ws")})
        assert info.state == "running"


def _real_guest():
    from tkbox_daemon.boxes.manager import GUEST_DIR

    return GUEST_DIR


async def test_stop_saves_the_patch_and_a_removed_box_keeps_its_events(tmp_path):
    async with running_daemon(tmp_path) as daemon, daemon.client() as client:
        await _create(client, tmp_path)
        box = daemon.manager.get("t1")
        upper = box.layers.upper
        (upper / "new.txt").write_text("made in the box\n")  # what a job's write leaves in the upper layer
        await client.stop_box("t1")
        saved = await client.diff("t1")
        assert saved["source"] == "saved" and "+made in the box" in saved["patch"]
        assert [entry["path"] for entry in saved["summary"]] == ["new.txt"]
        await client.remove_box("t1")
        kinds = [event.kind for event in await client.stored_events(box="t1")]
        assert "patch.saved" in kinds and kinds[-1] == "box.removed"


async def test_a_must_keep_record_the_signer_refuses_stops_the_box_and_is_counted_as_a_gap(tmp_path):
    async with running_daemon(tmp_path) as daemon, daemon.client() as client:
        info = await _create(client, tmp_path)
        box = daemon.manager.get("t1")
        follower = asyncio.ensure_future(_next_event(client, "box.stopped"))  # noqa: TID251
        assert info.recorded
        daemon.signer.service.store.error = "the disk is full"  # what a failed write leaves: every append refused
        box.recorder.observe_must_keep("tkbox.secret.use", {"name": "GH", "host": "api.github.com"})
        stopped = await asyncio.wait_for(follower, 30)
        assert "must-keep" in stopped.data["reason"]
        gaps = [e for e in await client.stored_events(box="t1") if e.kind == "gap"]
        assert gaps and gaps[0].data["kind"] == "must_keep" and gaps[0].data["source"] == "tkbox.secret.use"
