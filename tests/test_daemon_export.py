"""``POST /v1/boxes/{box}/export`` and ``GET /v1/trust`` against a real daemon (in process, the unisolated test
backend) and a real signer: what is refused and why, the run closed for it, the bytes checked, and every way a
box's run is closed (rm, shutdown, quarantine, failure) even when a stop goes wrong."""

from __future__ import annotations

import base64
import json

import pytest

from tests.daemon_harness import make_workspace, run_exec, running_daemon
from tests.restart_harness import daemon_lives, die
from tkbox_daemon import limits
from tkbox_daemon.boxes import run_export
from tkbox_daemon.evidence.trust import write_trust
from tkbox_daemon.evidence.verify import verify_bundle
from tkbox_daemon.evidence.verify_stream_layout import run_record_lines
from tkbox_daemon.signer.exports import RunExports
from tkbox_daemon.signer.idempotency import new_request_id
from tkbox_daemon.signer.rpc_schema import error
from tkbox_tui.client import DaemonError

HOST_CWD = "/tmp"


async def _create(client, tmp_path, name="t1"):
    workspace = tmp_path / f"ws-{name}"
    if not workspace.exists():
        workspace = make_workspace(tmp_path).rename(workspace)
    return await client.create_box({"name": name, "workspace": str(workspace)})


async def _export(client, ref="t1") -> tuple[bytes, object]:
    received = bytearray()
    exported = await client.export_bundle(ref, received.extend)
    return bytes(received), exported


async def _refusal(client, ref="t1") -> DaemonError:
    with pytest.raises(DaemonError) as refused:
        await _export(client, ref)
    return refused.value


def _run_records(bundle: bytes, tmp_path) -> list[dict]:
    path = tmp_path / "read.tkb"
    path.write_bytes(bundle)
    return [json.loads(line)["event"] for line in run_record_lines(path)]


async def test_a_stopped_box_exports_a_bundle_that_verifies_and_holds_the_exec(tmp_path):
    async with running_daemon(tmp_path) as daemon, daemon.client() as client:
        info = await _create(client, tmp_path)
        assert (await run_exec(client, "t1", ["echo", "hello"], cwd=HOST_CWD))["end"]["exit_code"] == 0
        await client.stop_box("t1")
        assert (await client.box("t1")).run_state == "open" and (await client.box("t1")).exported is None
        bundle, exported = await _export(client)
        assert exported.run_id == info.run_id and exported.size == len(bundle)
        assert daemon.signer.service.book.runs[info.run_id].closed
        (tmp_path / "run.tkb").write_bytes(bundle)
        write_trust(tmp_path / "run.trust.json", await client.trust())
        report = verify_bundle(tmp_path / "run.tkb", tmp_path / "run.trust.json")
        assert report.verified, report.to_json()
        events = _run_records(bundle, tmp_path)
        decisions = [e["data"] for e in events if e["type"] == "policy.decision"]
        assert [(d["tool"], d["verdict"]) for d in decisions] == [("Bash", "allow")]
        assert events[-1]["type"] == "run.closed" and events[-1]["data"]["reason"] == "exported by the operator"
        shown = await client.box("t1")
        assert shown.run_state == "closed" and shown.exported == {
            "run_id": info.run_id, "sha256": exported.sha256, "size": len(bundle),
            "exported_at": shown.exported["exported_at"]}
        assert [e.data for e in await client.stored_events(box="t1") if e.kind == "box.exported"] == [shown.exported]


async def test_a_second_export_gives_the_same_bytes_and_the_note_outlives_a_restart(tmp_path):
    async with daemon_lives(tmp_path) as lives:
        async with lives.life() as first, first.client() as client:
            await _create(client, tmp_path)
            await client.stop_box("t1")
            bundle, _ = await _export(client)
            await _create(client, tmp_path, "other")  # the log grows past the run's end
            again, _ = await _export(client)
            assert again == bundle
        async with lives.life() as second, second.client() as client:  # tkbox down closed nothing more of t1
            shown = await client.box("t1")
            assert shown.run_state == "closed" and shown.exported["size"] == len(bundle)
            assert (await _export(client))[0] == bundle  # the daemon holds no token now: a closed run needs none


async def test_a_running_box_is_refused_and_its_run_stays_open(tmp_path):
    async with running_daemon(tmp_path) as daemon, daemon.client() as client:
        info = await _create(client, tmp_path)
        refused = await _refusal(client)
        assert refused.status == 409 and refused.code == "box_running"
        assert refused.extra["hint"] == "stop it first: tkbox stop t1"
        assert not daemon.signer.service.book.runs[info.run_id].closed


async def test_a_box_lost_with_its_daemon_is_refused_at_once_with_the_reason(tmp_path):
    async with daemon_lives(tmp_path) as lives:
        async with lives.life() as first, first.client() as client:
            live = await _create(client, tmp_path, "live")
            stopped = await _create(client, tmp_path, "done")
            await client.stop_box("done")
            die(first)
        async with lives.life() as second, second.client() as client:
            for name, info in (("live", live), ("done", stopped)):
                refused = await _refusal(client, name)
                assert refused.status == 409 and refused.code == "run_orphaned", name
                assert f"run {info.run_id} is still open" in refused.message
                assert "cannot close the run" in refused.message and "vouch" in refused.message
                assert f"tkbox rm {name}" in refused.extra["hint"]
                assert not second.signer.service.book.runs[info.run_id].closed


async def test_an_unrecorded_box_has_no_run_to_export(tmp_path):
    async with running_daemon(tmp_path, unrecorded=True) as daemon, daemon.client() as client:
        await _create(client, tmp_path)
        await client.stop_box("t1")
        refused = await _refusal(client)
        assert refused.code == "unrecorded" and "no run to export" in refused.message
        with pytest.raises(DaemonError) as no_trust:
            await client.trust()
        assert no_trust.value.code == "unrecorded"


async def test_a_decision_in_flight_makes_export_refuse_rather_than_close_under_it(tmp_path, monkeypatch):
    monkeypatch.setattr(run_export.limits, "EXPORT_CLOSE_WAIT",
                        limits.Limit("export_close_wait", 1, "seconds", "test", "fixed"))
    async with running_daemon(tmp_path) as daemon, daemon.client() as client:
        info = await _create(client, tmp_path)
        await client.stop_box("t1")
        recorder = daemon.manager.get("t1").recorder
        recorder._begin()  # a decision the signer has not answered yet
        refused = await _refusal(client)
        assert refused.code == "run_busy" and "1 call(s) to the signer" in refused.message
        assert "export_close_wait" in refused.extra["hint"]
        assert not daemon.signer.service.book.runs[info.run_id].closed
        recorder._end()
        bundle, _ = await _export(client)
        assert bundle and daemon.signer.service.book.runs[info.run_id].closed


async def test_an_approval_waiting_for_a_person_makes_export_refuse(tmp_path, monkeypatch):
    async with running_daemon(tmp_path) as daemon, daemon.client() as client:
        await _create(client, tmp_path)
        await client.stop_box("t1")
        monkeypatch.setattr(daemon.manager.get("t1").approvals, "pending_count", lambda: 1)
        refused = await _refusal(client)
        assert refused.code == "run_busy" and "waiting for a person" in refused.message


async def test_bytes_that_differ_from_the_signers_announcement_never_arrive_complete(tmp_path, monkeypatch):
    real_read = RunExports.read

    def tampered(self, identity, export_id, offset):
        reply = real_read(self, identity, export_id, offset)
        data = bytearray(base64.b64decode(reply["data"]))
        data[-1] ^= 0x01  # one bit of the last byte: same size, another SHA-256
        reply["data"] = base64.b64encode(data).decode()
        return reply

    monkeypatch.setattr(RunExports, "read", tampered)
    async with running_daemon(tmp_path) as daemon, daemon.client() as client:
        await _create(client, tmp_path)
        await client.stop_box("t1")
        received = bytearray()
        with pytest.raises(DaemonError) as broken:
            await client.export_bundle("t1", received.extend)
        assert broken.value.code == "export_broken" and "broke the bundle off" in broken.value.message
        gaps = [e.data for e in await client.stored_events(box="t1") if e.kind == "gap"]
        assert gaps and gaps[-1]["kind"] == "export" and "not the one it announced" in gaps[-1]["reason"]
        assert (await client.box("t1")).exported is None
        assert list((daemon.signer.paths.store_dir / "exports").iterdir()) == []  # the signer's copy is gone


async def test_rm_closes_the_run_even_when_the_stop_fails(tmp_path, monkeypatch):
    async with running_daemon(tmp_path) as daemon, daemon.client() as client:
        info = await _create(client, tmp_path)
        box = daemon.manager.get("t1")

        async def broken_stop(*args, **kwargs):
            raise RuntimeError("the stop went wrong")

        monkeypatch.setattr(box, "stop", broken_stop)
        with pytest.raises(RuntimeError):
            await box.remove()
        assert daemon.signer.service.book.runs[info.run_id].closed


async def test_shutdown_closes_every_run_even_when_a_stop_fails(tmp_path, monkeypatch):
    async with running_daemon(tmp_path) as daemon, daemon.client() as client:
        running = await _create(client, tmp_path, "running")
        stopped = await _create(client, tmp_path, "stopped")
        await client.stop_box("stopped")
        failing = await _create(client, tmp_path, "failing")

        async def broken_stop(*args, **kwargs):
            raise RuntimeError("the stop went wrong")

        monkeypatch.setattr(daemon.manager.get("failing"), "stop", broken_stop)
        book = daemon.signer.service.book
    assert all(book.runs[info.run_id].closed for info in (running, stopped, failing))


async def test_a_failed_box_and_a_quarantined_box_close_their_runs(tmp_path):
    async with running_daemon(tmp_path) as daemon, daemon.client() as client:
        failed = await _create(client, tmp_path, "failed")
        await daemon.manager.get("failed").fail("the guest broke the protocol")
        quarantined = await _create(client, tmp_path, "quarantined")
        connection = await daemon.signer.connect()
        await connection.call("quarantine", request_id=new_request_id(), run_id=quarantined.run_id, reason="incident")
        await daemon.manager.get("quarantined").apply_containment("quarantined")
        await connection.close()
        for info in (failed, quarantined):
            assert (await client.box(info.name)).state == "failed"
            assert daemon.signer.service.book.runs[info.run_id].closed
        bundle, _ = await _export(client, "failed")  # a failed box exports as it is, its run closed already
        assert _run_records(bundle, tmp_path)[-1]["type"] == "run.closed"


async def test_the_signers_refusal_and_its_absence_are_told_apart(tmp_path):
    async with running_daemon(tmp_path) as daemon, daemon.client() as client:
        await _create(client, tmp_path, "refused")
        await client.stop_box("refused")
        service = daemon.signer.service

        async def not_owner(identity, request):
            return error("not_owner", "run registered by uid:1, not uid:0")

        service._handlers["export_open"] = not_owner
        refused = await _refusal(client, "refused")
        assert refused.status == 409 and refused.code == "export_refused" and "not_owner" in refused.message
        info = await _create(client, tmp_path, "alone")
        await client.stop_box("alone")
        await daemon.signer.server.close()
        gone = await _refusal(client, "alone")
        assert gone.status == 503 and gone.code == "signer_unavailable"
        assert not service.book.runs[info.run_id].closed and (await client.box("alone")).run_state == "open"


async def test_a_box_whose_run_was_never_registered_has_no_run_to_export(tmp_path):
    async with running_daemon(tmp_path) as daemon, daemon.client() as client:
        await daemon.signer.server.close()
        with pytest.raises(DaemonError) as not_created:
            await _create(client, tmp_path)
        assert not_created.value.code == "signer_unavailable"
        assert (await client.box("t1")).state == "failed"
        refused = await _refusal(client)
        assert refused.code == "no_run" and "did not register" in refused.message
        assert refused.extra["hint"] == "remove it with: tkbox rm t1"
