"""Export over the signer's socket: ``export_open``/``export_read``/``export_done`` and ``trust``, against a real
signer (real keys, store and policy), verified offline with the real verifier."""

from __future__ import annotations

import base64
import hashlib
import json

import pytest

from tests.signer_harness import register, request_id, running_signer
from tkbox_daemon.evidence.trust import build_trust, parse_trust_document, write_trust
from tkbox_daemon.evidence.verify import verify_bundle
from tkbox_daemon.signer import exports
from tkbox_daemon.signer.keys import load_or_create
from tkbox_daemon.signer.rpc_schema import MAX_LINE_BYTES
from tkbox_daemon.signer.server import encode_reply


def error_code(reply: dict) -> str | None:
    return reply.get("error", {}).get("code")


async def closed_run(connection, *, decisions: int = 2) -> dict[str, str]:
    run = await register(connection)
    for index in range(decisions):
        decided = await connection.call("decide", request_id=request_id(), **run, tool="Bash",
                                        args={"command": f"echo {index}"})
        await connection.call("complete", request_id=request_id(), **run, decision_id=decided["decision_id"],
                              status="ok", exit_code=0)
    closed = await connection.call("close_run", request_id=request_id(), **run, reason="done")
    assert "error" not in closed, closed
    return run


async def export_bytes(connection, run_id: str) -> tuple[dict, bytes]:
    """Open, read every chunk, finish: the announced export and the bytes read."""
    opened = await connection.call("export_open", run_id=run_id)
    assert "error" not in opened, opened
    data = bytearray()
    while True:
        chunk = await connection.call("export_read", export_id=opened["export_id"], offset=len(data))
        assert "error" not in chunk, chunk
        data += base64.b64decode(chunk["data"], validate=True)
        if chunk["eof"]:
            break
    assert (await connection.call("export_done", export_id=opened["export_id"]))["done"] is True
    return opened, bytes(data)


async def test_the_owner_exports_a_closed_run_that_verifies_with_the_signers_trust(tmp_path):
    async with running_signer(tmp_path) as signer:
        connection = await signer.connect()
        run = await closed_run(connection)
        opened, data = await export_bytes(connection, run["run_id"])
        assert opened["size"] == len(data) and opened["sha256"] == "sha256:" + hashlib.sha256(data).hexdigest()
        assert opened["records"] == 6  # registered, 2 x (decision, result), closed
        trust = (await connection.call("trust"))["trust"]
        parse_trust_document(trust)
        keys = load_or_create(signer.paths.keys_dir)
        assert trust == build_trust(record_key=keys.record_key.public_key(), log_vkey=keys.log_vkey)
        assert "private" not in json.dumps(trust)
        (tmp_path / "run.tkb").write_bytes(data)
        write_trust(tmp_path / "run.trust.json", trust)
        report = verify_bundle(tmp_path / "run.tkb", tmp_path / "run.trust.json")
        assert report.verified, report.to_json()
        assert list((signer.paths.store_dir / exports.EXPORTS_DIR).iterdir()) == []  # done deleted it
        await connection.close()


async def test_exporting_again_gives_the_same_bytes_whatever_the_log_did_since(tmp_path):
    async with running_signer(tmp_path) as signer:
        connection = await signer.connect()
        run = await closed_run(connection)
        _, first = await export_bytes(connection, run["run_id"])
        other = await register(connection)  # the log grows and a newer checkpoint is signed
        await connection.call("decide", request_id=request_id(), **other, tool="Bash", args={"command": "ls"})
        await connection.call("checkpoint")
        _, second = await export_bytes(connection, run["run_id"])
        assert second == first
        await connection.close()


async def test_a_completion_after_the_close_stays_out_of_the_bundle(tmp_path):
    async with running_signer(tmp_path) as signer:
        connection = await signer.connect()
        run = await register(connection)
        decided = await connection.call("decide", request_id=request_id(), **run, tool="Bash", args={"command": "ls"})
        await connection.call("close_run", request_id=request_id(), **run)
        late = await connection.call("complete", request_id=request_id(), **run, decision_id=decided["decision_id"],
                                     status="ok")
        assert "error" not in late  # the signer keeps a late completion of a closed run...
        _, data = await export_bytes(connection, run["run_id"])
        (tmp_path / "run.tkb").write_bytes(data)
        write_trust(tmp_path / "t.json", (await connection.call("trust"))["trust"])
        report = verify_bundle(tmp_path / "run.tkb", tmp_path / "t.json")
        assert report.verified, report.to_json()  # ...but the bundle ends at the close, as verify requires
        await connection.close()


async def test_an_open_run_an_unknown_run_and_anothers_run_are_refused(tmp_path):
    async with running_signer(tmp_path) as signer:
        connection = await signer.connect()
        run = await register(connection)
        assert error_code(await connection.call("export_open", run_id=run["run_id"])) == "run_open"
        assert error_code(await connection.call("export_open", run_id="run-nope")) == "unknown_run"
        await connection.call("close_run", request_id=request_id(), **run)
        refused = await signer.service.handle("uid:4242", {"method": "export_open", "run_id": run["run_id"]})
        assert error_code(refused) == "not_owner" and "uid:0" in refused["error"]["message"]
        opened = await connection.call("export_open", run_id=run["run_id"])
        for method, fields in (("export_read", {"offset": 0}), ("export_done", {})):
            stolen = await signer.service.handle("uid:4242", {"method": method, "export_id": opened["export_id"],
                                                              **fields})
            assert error_code(stolen) == "unknown_export"
        await connection.close()


async def test_reads_are_bounded_by_the_export_and_a_finished_one_is_gone(tmp_path):
    async with running_signer(tmp_path) as signer:
        connection = await signer.connect()
        run = await closed_run(connection)
        opened = await connection.call("export_open", run_id=run["run_id"])
        size = opened["size"]
        at_end = await connection.call("export_read", export_id=opened["export_id"], offset=size)
        assert at_end["data"] == "" and at_end["eof"] is True
        past = await connection.call("export_read", export_id=opened["export_id"], offset=size + 1)
        assert error_code(past) == "invalid_request" and str(size) in past["error"]["message"]
        await connection.call("export_done", export_id=opened["export_id"])
        gone = await connection.call("export_read", export_id=opened["export_id"], offset=0)
        assert error_code(gone) == "unknown_export"
        await connection.close()


async def test_a_big_bundle_comes_in_chunks_each_within_the_line_limit(tmp_path, monkeypatch):
    monkeypatch.setattr(exports, "EXPORT_CHUNK", 1000)
    async with running_signer(tmp_path) as signer:
        connection = await signer.connect()
        run = await closed_run(connection, decisions=6)
        opened, data = await export_bytes(connection, run["run_id"])
        assert opened["size"] > 3000 and hashlib.sha256(data).hexdigest() == opened["sha256"][7:]
        await connection.close()
    monkeypatch.undo()  # the real chunk size: its largest reply still fits one line
    full = {"export_id": "exp-" + "0" * 32, "offset": 2**53 - 1, "eof": False,
            "data": base64.b64encode(b"\xff" * exports.EXPORT_CHUNK).decode()}
    assert len(encode_reply(full)) < MAX_LINE_BYTES


async def test_a_caller_holds_a_bounded_number_of_exports(tmp_path):
    async with running_signer(tmp_path) as signer:
        connection = await signer.connect()
        run = await closed_run(connection, decisions=0)
        opened = [await connection.call("export_open", run_id=run["run_id"])
                  for _ in range(exports.MAX_EXPORTS_PER_CALLER)]
        assert all("export_id" in reply for reply in opened)
        refused = await connection.call("export_open", run_id=run["run_id"])
        assert error_code(refused) == "quota_exceeded" and "export_done" in refused["error"]["message"]
        await connection.call("export_done", export_id=opened[0]["export_id"])
        assert "export_id" in await connection.call("export_open", run_id=run["run_id"])
        await connection.close()


async def test_an_export_nobody_reads_expires_and_its_file_is_deleted(tmp_path):
    async with running_signer(tmp_path) as signer:
        now = [1000.0]
        signer.service.exports.clock = lambda: now[0]
        connection = await signer.connect()
        run = await closed_run(connection, decisions=0)
        opened = await connection.call("export_open", run_id=run["run_id"])
        path = signer.paths.store_dir / exports.EXPORTS_DIR / f"{opened['export_id']}.tkb"
        assert path.stat().st_mode & 0o777 == 0o600
        now[0] += exports.EXPORT_IDLE_SECONDS + 1
        expired = await connection.call("export_read", export_id=opened["export_id"], offset=0)
        assert error_code(expired) == "unknown_export" and not path.exists()
        await connection.close()


async def test_a_restarted_signer_drops_old_export_files_and_still_exports_closed_runs(tmp_path):
    async with running_signer(tmp_path) as signer:
        connection = await signer.connect()
        run = await closed_run(connection, decisions=1)
        _, before = await export_bytes(connection, run["run_id"])
        await connection.call("export_open", run_id=run["run_id"])  # left open when the signer stops
        await connection.close()
    leftover = tmp_path / "signer-data" / "store" / exports.EXPORTS_DIR
    leftover.mkdir(mode=0o700, exist_ok=True)
    (leftover / "exp-stale.tkb").write_bytes(b"half")
    async with running_signer(tmp_path) as signer:
        assert not leftover.exists() or list(leftover.iterdir()) == []
        connection = await signer.connect()
        _, after = await export_bytes(connection, run["run_id"])
        assert after == before  # the run's end is rebuilt from the log
        await connection.close()


@pytest.mark.parametrize("request_fields", [
    {"method": "export_open"},
    {"method": "export_open", "run_id": "run/1"},
    {"method": "export_open", "run_id": "r", "run_token": "t"},
    {"method": "export_read", "export_id": "exp-" + "0" * 32},
    {"method": "export_read", "export_id": "exp-" + "0" * 32, "offset": -1},
    {"method": "export_read", "export_id": "exp-" + "A" * 32, "offset": 0},
    {"method": "export_read", "export_id": "exp-" + "0" * 32, "offset": True},
    {"method": "export_done", "export_id": "exp-0"},
    {"method": "trust", "format": "x"},
])
async def test_malformed_export_requests_name_the_field(tmp_path, request_fields):
    async with running_signer(tmp_path) as signer:
        reply = await signer.service.handle("uid:0", request_fields)
        assert error_code(reply) == "invalid_request" and request_fields["method"] in reply["error"]["message"]
