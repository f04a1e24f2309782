"""A box's execs and the output the daemon keeps of them, through the API of a real daemon (real signer, real guest
agent, the unisolated test backend): list, one exec's output, the 256 KiB tail, the per-box budget, removal; and
the history read back from the state dir as a restarted daemon reads it."""

from __future__ import annotations

import subprocess

import pytest

from tests.daemon_harness import make_workspace, run_exec, running_daemon
from tkbox_daemon import limits
from tkbox_daemon.boxes.exec_history import LOST_REASON, ExecHistory
from tkbox_tui.client import DaemonError

HOST_CWD = "/tmp"  # the unisolated test backend runs on the host


async def _create(client, tmp_path, name="t1"):
    return await client.create_box({"name": name, "workspace": str(make_workspace(tmp_path))})


async def test_the_box_lists_its_execs_with_decision_end_and_output(tmp_path):
    async with running_daemon(tmp_path) as daemon, daemon.client() as client:
        await _create(client, tmp_path)
        await run_exec(client, "t1", ["echo", "\x1b[2Jhello"], cwd=HOST_CWD)
        await run_exec(client, "t1", ["ls", "/definitely-not-here"], cwd=HOST_CWD)
        denied = await run_exec(client, "t1", ["pkill", "-f", "tkbox signer"], cwd=HOST_CWD)
        assert denied["end"]["type"] == "denied"
        execs = await client.execs("t1")
        assert [info.id for info in execs] == [1, 2, 3]
        echo, ls, pkill = execs
        assert (echo.state, echo.verdict, echo.exit_code, echo.reported_by) == ("finished", "allow", 0, "guest")
        assert echo.command == "echo '\x1b[2Jhello'"  # as decided; consoles show it escaped
        assert echo.started_at.endswith("Z") and echo.duration_ms is not None and echo.duration_ms >= 0
        assert echo.stdout.kept == echo.stdout.total == len("\x1b[2Jhello\n") and not echo.stdout.truncated
        assert ls.exit_code == 2 and ls.stderr.kept > 0 and ls.stdout.total == 0
        assert (pkill.state, pkill.verdict, pkill.exit_code, pkill.reported_by) == ("denied", "deny", None, "")
        assert "TK-D007" in pkill.rule_ids and pkill.reason == denied["end"]["reason"]
        assert pkill.hint == denied["end"].get("hint", "")
        output = await client.exec_output("t1", 1)
        assert output.stdout == b"\x1b[2Jhello\n" and output.stderr == b""  # the bytes as written: shown escaped
        assert b"definitely-not-here" in (await client.exec_output("t1", 2)).stderr
        assert (await client.exec_output("t1", 3)).stdout == b""


async def test_only_the_last_256_kib_of_a_stream_is_kept_and_the_record_says_it_was_cut(tmp_path):
    async with running_daemon(tmp_path) as daemon, daemon.client() as client:
        await _create(client, tmp_path)
        result = await run_exec(client, "t1", ["seq", "1", "100000"], cwd=HOST_CWD)
        expected = subprocess.run(["seq", "1", "100000"], capture_output=True, check=True).stdout
        assert result["stdout"] == expected  # the client still got all of it
        (info,) = await client.execs("t1")
        tail = limits.EXEC_OUTPUT_TAIL.default
        assert (info.stdout.kept, info.stdout.total, info.stdout.truncated) == (tail, len(expected), True)
        assert (await client.exec_output("t1", info.id)).stdout == expected[-tail:]


async def test_past_the_box_budget_the_oldest_execs_output_is_dropped_and_says_so(tmp_path, monkeypatch):
    monkeypatch.setattr(limits, "EXEC_OUTPUT_TAIL", limits.Limit("exec_output_tail", 1024, "bytes", "", ""))
    monkeypatch.setattr(limits, "EXEC_OUTPUT_PER_BOX", limits.Limit("exec_output_per_box", 4096, "bytes", "", ""))
    async with running_daemon(tmp_path) as daemon, daemon.client() as client:
        await _create(client, tmp_path)
        for _ in range(5):  # 3,893 bytes each: 1 KiB kept each, the budget holds four
            await run_exec(client, "t1", ["seq", "1", "1000"], cwd=HOST_CWD)
        execs = await client.execs("t1")
        assert [info.output_dropped for info in execs] == [True, False, False, False, False]
        assert execs[0].stdout.kept == 0 and execs[0].stdout.total == 3893 and execs[0].stdout.truncated
        assert sum(info.stdout.kept for info in execs) == 4096
        assert (await client.exec_output("t1", 1)).stdout == b""
        assert (await client.exec_output("t1", 5)).stdout.endswith(b"999\n1000\n")
        kept_files = sorted(path.name for path in (daemon.manager.get("t1").state_dir / "execs").glob("*.stdout"))
        assert kept_files == ["2.stdout", "3.stdout", "4.stdout", "5.stdout"]


async def test_an_unknown_exec_is_not_found_and_a_removed_box_takes_its_execs_with_it(tmp_path):
    async with running_daemon(tmp_path) as daemon, daemon.client() as client:
        await _create(client, tmp_path)
        await run_exec(client, "t1", ["echo", "x"], cwd=HOST_CWD)
        for ref in ("99", "abc", "1" * 40):
            with pytest.raises(DaemonError) as missing:
                await client.exec_output("t1", ref)  # type: ignore[arg-type]
            assert missing.value.code == "not_found" and missing.value.status == 404
        execs_dir = daemon.manager.get("t1").state_dir / "execs"
        assert (execs_dir / "1.json").exists() and (execs_dir / "1.stdout").exists()
        await client.remove_box("t1")
        assert not execs_dir.exists()
        with pytest.raises(DaemonError) as gone:
            await client.execs("t1")
        assert gone.value.code == "not_found"


async def test_a_stopped_box_still_lists_its_execs_and_output(tmp_path):
    async with running_daemon(tmp_path) as daemon, daemon.client() as client:
        await _create(client, tmp_path)
        await run_exec(client, "t1", ["echo", "before stop"], cwd=HOST_CWD)
        await client.stop_box("t1")
        (info,) = await client.execs("t1")
        assert info.state == "finished" and (await client.exec_output("t1", 1)).stdout == b"before stop\n"


def test_a_restarted_daemon_reads_the_history_back_and_a_command_it_was_running_is_lost(tmp_path):
    directory = tmp_path / "execs"
    history = ExecHistory(directory)
    done = history.begin("echo done", {"decision": "allow", "verdict": "allow", "rule_ids": [], "reason": "ok"})
    done.write(1, b"done\n")
    done.end({"exit_code": 0, "signal": None, "timed_out": False, "reported_by": "guest"}, "reported")
    running = history.begin("sleep 100", {"decision": "allow", "verdict": "allow", "rule_ids": [], "reason": "ok"})
    running.write(2, b"held in memory only")
    reread = ExecHistory(directory)  # what a new daemon sees of the same box
    first, second = reread.execs()
    assert first == history.execs()[0] and reread.output(1).stdout == b"done\n"
    assert (second.state, second.error, second.stderr.kept) == ("lost", LOST_REASON, 0)
    assert reread.begin("echo next", {"decision": "allow"}).info.id == 3


def test_a_record_file_that_does_not_parse_is_skipped_and_a_tail_of_the_wrong_size_is_dropped(tmp_path):
    directory = tmp_path / "execs"
    history = ExecHistory(directory)
    for text in (b"one\n", b"two\n"):
        entry = history.begin("echo", {"decision": "allow", "verdict": "allow"})
        entry.write(1, text)
        entry.end({"exit_code": 0, "reported_by": "guest"}, "reported")
    (directory / "1.json").write_bytes(b'{"id": 1, "id": 2}')  # a duplicate key: not strict JSON
    (directory / "2.stdout").write_bytes(b"grown on disk\n")
    (directory / "7.json").write_bytes(b"x" * 100_000)
    (info,) = ExecHistory(directory).execs()
    assert info.id == 2 and info.output_dropped and info.stdout.kept == 0
    assert not (directory / "2.stdout").exists()
